"""The geometric levels of "mg": nested structured grids (:class:`StructuredGrid`), P1 interpolation from the grid
with half the cells (:func:`geometric_prolongation`), and the Galerkin coarse operator R A P from a few products with
probe vectors (:func:`galerkin_by_probing`), all by index arithmetic on the device where the matrix lives; and the
builder of "mg" hierarchies (:class:`GeometricBuilder`): geometric levels while the grid halves, aggregation below."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from hpcsolve.core.errors import CaseError
from hpcsolve.fem.linalg.precond.aggregation import AggregationBuilder
from hpcsolve.fem.linalg.precond.hierarchy import Hierarchy, HierarchyBuilder
from hpcsolve.fem.linalg.precond.layout import dev, from_dev, host, host_csr, level64
from hpcsolve.fem.linalg.precond.mg_options import F64
from hpcsolve.fem.linalg.precond.pcoarsen import QuadraticGrid, p_prolongation, two_parent_prolongation


@dataclass
class StructuredGrid:
    """How the unknowns of a matrix sit on a structured (nx+1) x (ny+1) node grid, or (nx+1) x (ny+1) x (nz+1) with
    ``nz`` > 0 (row-major, x fastest, then y), ``ncomp`` unknowns per node (interleaved), only the DOFs ``free``
    (indices into the full DOF list, increasing) kept in the matrix. The triangles split every square along its
    (/) diagonal, the tetrahedra every cube into the 6 of the Kuhn split around its lowest-to-highest diagonal
    (``hpcsolve.fem.discrete.simplex_gen.box``): either way every node is joined to its neighbours at the offsets
    in {0, 1}^d and their opposites, and the grid with half the cells is split the same way (nested P1 spaces)."""

    nx: int
    ny: int
    free: object = None     # None: every node off the boundary (Dirichlet all round); NumPy or CuPy array
    ncomp: int = 1
    nz: int = 0             # 0: a 2D grid

    def __post_init__(self):
        if self.free is not None and not hasattr(self.free, "__cuda_array_interface__"):
            self.free = np.asarray(self.free, dtype=np.int64)
        self.nx, self.ny, self.ncomp, self.nz = int(self.nx), int(self.ny), int(self.ncomp), int(self.nz)

    @property
    def cells(self) -> tuple[int, ...]:
        """Cells per axis: (nx, ny) or (nx, ny, nz)."""
        return (self.nx, self.ny) if self.nz == 0 else (self.nx, self.ny, self.nz)

    @property
    def dim(self) -> int:
        return len(self.cells)

    def with_free(self, free, cells: tuple[int, ...] | None = None) -> "StructuredGrid":
        """The same kind of grid (cells per axis ``cells``, default these) with other free DOFs."""
        c = tuple(cells or self.cells)
        return StructuredGrid(c[0], c[1], free, self.ncomp, c[2] if len(c) == 3 else 0)

    def free_array(self, xp=np):
        """The free DOFs as an int64 array of ``xp``."""
        if self.free is None:
            nc, cells = self.ncomp, self.cells
            inner = [xp.arange(1, c, dtype=xp.int64) for c in cells]
            node = xp.zeros(1, dtype=xp.int64)
            stride = 1
            for c, idx in zip(cells, inner):        # x fastest: node = i + (nx+1) j + (nx+1)(ny+1) k
                node = (node[None, :] + stride * idx[:, None]).ravel()
                stride *= c + 1
            return (node[:, None] * nc + xp.arange(nc, dtype=xp.int64)[None, :]).ravel()
        if xp is np:
            return np.asarray(host(self.free), dtype=np.int64)
        return xp.asarray(self.free, dtype=xp.int64)

    @property
    def n_nodes(self) -> int:
        return int(np.prod([c + 1 for c in self.cells]))

    @property
    def n_full(self) -> int:
        return self.n_nodes * self.ncomp

    def n_interior(self) -> int:
        """Free DOFs of ``free`` None: every node off the boundary."""
        return int(np.prod([c - 1 for c in self.cells])) * self.ncomp

    def halvable(self) -> bool:
        return all(c % 2 == 0 and c >= 2 for c in self.cells)


def _axes(node, cells, xp):
    """The grid coordinates (i, j[, k]) of node numbers (x fastest)."""
    out = []
    for c in cells[:-1]:
        node, r = xp.divmod(node, c + 1)
        out.append(r)
    return out + [node]


def _node(coords, cells):
    """The node number of grid coordinates (x fastest): the inverse of :func:`_axes`."""
    node, stride = 0, 1
    for c, i in zip(cells, coords):
        node = node + stride * i
        stride *= c + 1
    return node


def geometric_prolongation(grid: StructuredGrid, xp=np, sparse=sp):
    """(P, coarse grid, coarse index): P1 interpolation from the grid with half the cells, restricted to the
    free DOFs (rows: the free DOFs, columns: the coarse free DOFs) as a CSR matrix of ``sparse``, built row by
    row without sorting (every fine DOF has at most two coarse parents: a fine node halves the coarse edge from
    (I, J[, K]) to (I, J[, K]) + its odd axes, an edge of the (/) or Kuhn split); the coarse index maps a coarse
    full DOF to its free index (-1: fixed)."""
    cells, nc = grid.cells, grid.ncomp
    ccells = tuple(c // 2 for c in cells)
    it = _index_dtype(grid.n_full, xp)             # int32 index arithmetic where it fits: half the traffic
    free = grid.free_array(xp).astype(it, copy=False)
    node, comp = free // nc, free % nc
    fine = _axes(node, cells, xp)
    lo_ = [a // 2 for a in fine]
    hi_ = [a0 + (a & 1) for a0, a in zip(lo_, fine)]     # odd on an axis: the far end of the coarse edge
    # coarse DOF (I, J[, K], c) sits on fine DOF (2I, 2J[, 2K], c); it is free where that one is free
    fine_free = xp.zeros(grid.n_full, dtype=xp.bool_)
    fine_free[free] = True
    n_cnodes = int(np.prod([c + 1 for c in ccells]))
    ccoords = _axes(xp.arange(n_cnodes, dtype=it), ccells, xp)
    cnode_fine = _node([2 * a for a in ccoords], cells)
    cfree_mask = fine_free[(cnode_fine[:, None] * nc + xp.arange(nc, dtype=it)[None, :]).ravel()]
    cfree = xp.flatnonzero(cfree_mask)
    cindex = xp.full(cfree_mask.size, -1, dtype=it)
    cindex[cfree] = xp.arange(cfree.size, dtype=it)
    ca = cindex[_node(lo_, ccells) * nc + comp]
    cb = cindex[_node(hi_, ccells) * nc + comp]
    P = two_parent_prolongation(ca, cb, int(cfree.size), xp, sparse)
    return P, grid.with_free(cfree, ccells), cindex


class GeometricBuilder(HierarchyBuilder):
    """The hierarchy of "mg": P1 interpolation levels while the grid halves and the level is above coarse_size
    (levels of at most ``host_build_rows`` rows built on the host; a hierarchy whose matrices are on the host while
    its ops are on a device, Numba-CUDA without CuPy, runs its probe products on the host below
    ``host_products_rows``), then the levels of the aggregation builder (``AggregationBuilder.choose``) below.
    The near-null space is carried down the geometric levels by injection."""

    needs_grid = True
    host_products_rows = 1 << 17

    def __init__(self, options, *, grid=None, near_nullspace=None, field: str = "multigrid", key: tuple = ()):
        super().__init__(options, grid=grid, near_nullspace=near_nullspace, field=field, key=key)
        self.below: HierarchyBuilder | None = None

    def check(self, A) -> None:
        """The grid must describe A's unknowns (and the near-null space fit A)."""
        super().check(A)
        g = self.grid
        if isinstance(g, QuadraticGrid):
            n, top = int(np.size(g.free)), int(host(g.free).max(initial=-1)) if np.size(g.free) else -1
            if n != A.n or top >= g.n_full:
                raise CaseError.invalid("grid", f"{g.n_vertices} vertices and {g.edge_ends.shape[0]} edges, {g.ncomp} "
                                        f"per node, {n} free unknowns", f"a P2 numbering whose free unknowns are the "
                                        f"{A.n} rows of the matrix", why="the p-multigrid level interpolates on it")
            if g.vertex_cells is not None and int(np.prod([c + 1 for c in g.vertex_cells])) != g.n_vertices:
                raise CaseError.invalid("grid", f"{' x '.join(map(str, g.vertex_cells))} cells of vertices",
                                        f"a grid of the {g.n_vertices} vertices", why="the P1 level's geometric "
                                        "multigrid interpolates on it")
            return
        if min(g.cells) < 1 or g.ncomp < 1 or g.nz < 0:
            raise CaseError.invalid("grid", (*g.cells, g.ncomp), "cells per axis and ncomp >= 1 (nz 0: 2D)")
        n = g.n_interior() if g.free is None else int(np.size(g.free))
        if g.free is None:
            top = g.n_full - 1
        elif hasattr(g.free, "max"):        # NumPy or CuPy: reduced where it lives (no 33 MB copy at 4 M unknowns)
            top = int(g.free.max()) if n else -1
        else:
            top = int(host(g.free).max(initial=-1))
        if n != A.n or top >= g.n_full:
            raise CaseError.invalid("grid", f"{' x '.join(map(str, g.cells))} cells, {g.ncomp} per node, {n} free unknowns",
                                    f"a grid whose free unknowns are the {A.n} rows of the matrix",
                                    why="geometric multigrid interpolates on this grid")

    def coarsen(self, A, h: Hierarchy, cur, nns, xp, sparse):
        """Append (A_l, P_l, "geometric", R_l) while the grid halves and the level is above coarse_size (small
        levels move to the host), then the aggregation levels below; returns (the coarsest level's matrix, xp,
        sparse)."""
        opts, ph, mats = self.options, self.phases, self.mats
        grid = self.grid
        plow = A.low          # where the Galerkin products run (None: the host's sparse module)
        if isinstance(grid, QuadraticGrid):       # P2: first the P1 functions of the same mesh (pcoarsen)
            big = cur.shape[0] > opts.coarse_size and len(mats) < opts.max_levels - 1
            grid, cur, nns = self._p_level(grid, cur, nns, xp, sparse) if big else (None, cur, nns)
        while grid is not None and grid.halvable() and cur.shape[0] > opts.coarse_size and len(mats) < opts.max_levels - 1:
            small = self.host_build_rows if xp is not np else self.host_products_rows
            if cur.shape[0] <= small and plow is not None and not plow.host_resident:     # the small levels: host
                xp, sparse, plow = np, sp, None
                cur = host_csr(cur)
                grid = grid.with_free(None if grid.free is None else host(grid.free))
            P, cgrid, cindex = geometric_prolongation(grid, xp, sparse)
            if P.shape[1] == 0 or P.shape[1] >= P.shape[0]:
                break
            if nns is not None:           # coarse DOFs are fine DOFs (2I, 2J[, 2K]): the near-null space by injection
                nns = nns[host(coarse_rows_in_fine(grid, cgrid, xp))]
            R = P.T.tocsr()
            mats.append((cur, P, "geometric", R))
            ph.done("prolongation")
            cur = galerkin_by_probing(plow, cur, P, R, cgrid, cindex, xp, sparse)
            ph.done("galerkin")
            grid = cgrid
        # below the last halvable grid: aggregation, the builder of "amg" would pick for these arrays
        below = self.below = AggregationBuilder.choose(opts, xp)(opts, grid=self.grid, near_nullspace=self.near_nullspace,
                                                                 field=self.field, key=self.key)
        below.mats, below.phases = mats, ph
        return below.coarsen(A, h, cur, nns, xp, sparse)

    def _p_level(self, q: QuadraticGrid, cur, nns, xp, sparse):
        """Append the P2 -> P1 level; returns (the P1 level's StructuredGrid or None, its matrix R A P by a sparse
        triple product, the near-null space injected at the vertices); where the P1 level would be empty or no
        smaller, nothing is appended (aggregation from the top)."""
        P, vfree, rows = p_prolongation(q, xp, sparse)
        if P.shape[1] == 0 or P.shape[1] >= P.shape[0]:      # no free vertex (or no edge DOF): nothing to gain
            return None, cur, nns
        R = P.T.tocsr()
        self.mats.append((cur, P, "p-coarsening", R))
        self.phases.done("prolongation")
        cur = (R @ (cur @ P)).tocsr()
        cur.sum_duplicates()
        self.phases.done("galerkin")
        if nns is not None:
            nns = nns[host(rows)]
        c = q.vertex_cells
        grid = None if c is None else StructuredGrid(c[0], c[1], vfree, q.ncomp, c[2] if len(c) == 3 else 0)
        return grid, cur, nns

    def timed(self, A, h: Hierarchy) -> None:
        if self.below is not None:
            self.below.timed(A, h)


def _index_dtype(n_full: int, xp):
    """int32 for index arithmetic on a grid of n_full DOFs (every product stays below n_full), else int64."""
    return xp.int32 if n_full < 2**31 - 1 else xp.int64


def coarse_rows_in_fine(grid: StructuredGrid, coarse: StructuredGrid, xp=np):
    """For each free coarse DOF (I, J[, K], c), the row of the fine free DOF (2I, 2J[, 2K], c) it sits on."""
    nc = grid.ncomp
    free = grid.free_array(xp)
    index = xp.full(grid.n_full, -1, dtype=xp.int64)
    index[free] = xp.arange(free.size, dtype=xp.int64)
    cfree = coarse.free_array(xp)
    node, comp = cfree // nc, cfree % nc
    ccoords = _axes(node, coarse.cells, xp)
    return index[_node([2 * a for a in ccoords], grid.cells) * nc + comp]


def galerkin_by_probing(low, A, P, R, coarse: StructuredGrid, cindex, xp=np, sparse=sp):
    """R A P on a structured coarse grid from 3^d x ncomp products with probe vectors.

    With P1 interpolation on the (/)-triangulated grid or the Kuhn-split box, a coarse DOF couples only with the DOFs
    of its 3^d coarse neighbourhood (the nodes at offsets in {0, 1}^d and their opposites, in fact), so colouring
    the coarse nodes by (I mod 3, J mod 3[, K mod 3]) separates every row's neighbours: y = R A P v, with v the
    indicator of one colour and component, holds in row I the entry of the one neighbour of that colour. The products
    run where the matrices are: with ``sparse`` as three products with a block of 3^d probe vectors per component
    (cuSPARSE SpMM through cupyx on the GPU: 3 nc launches a level, not 3^(d+1) nc), or, for host matrices with
    device ops (Numba-CUDA without CuPy), one probe at a time through ``low.csr_apply``. The coarse CSR is assembled
    by index arithmetic. Exact zeros are dropped. A, P, R: float64 CSR matrices of ``sparse``; ``low`` None: host
    matrices multiplied by ``sparse``."""
    nc, cells = coarse.ncomp, coarse.cells
    ncolors = 3 ** len(cells)
    it = _index_dtype(coarse.n_full, xp)
    free = coarse.free_array(xp).astype(it, copy=False)
    n_c = int(free.size)
    node, comp = free // nc, free % nc
    coords = _axes(node, cells, xp)
    color = _node([a % 3 for a in coords], (2,) * len(cells))          # base 3: (I mod 3) + 3 (J mod 3) + ...
    if low is None or xp is not np or low.host_resident:
        Y = _probe_blocks(A, P, R, color, comp, nc, ncolors, xp)
    else:
        Y = _probe_one_by_one(low, A, P, R, color, comp, nc, ncolors, xp)      # (3^d nc, n_c)
    rows = xp.arange(n_c, dtype=it)
    off = [(*d[::-1], b) for d in itertools.product((-1, 0, 1), repeat=len(cells)) for b in range(nc)]
    inside = xp.ones((n_c, len(off)), dtype=xp.bool_)
    near = []
    for a, c in enumerate(cells):
        n_a = coords[a][:, None] + xp.asarray([o[a] for o in off], dtype=it)[None, :]
        inside &= (n_a >= 0) & (n_a <= c)
        near.append(n_a)
    bb = xp.asarray([o[-1] for o in off], dtype=it)[None, :]
    nnode = xp.where(inside, _node(near, cells), 0)
    cols = xp.where(inside, cindex[nnode * nc + bb], -1)
    ncolor = _node([n_a % 3 for n_a in near], (2,) * len(cells))
    vals = Y[ncolor * nc + bb, rows[:, None]]
    mask = (cols >= 0) & (vals != 0)
    indptr = xp.zeros(n_c + 1, dtype=xp.int64)
    indptr[1:] = xp.cumsum(mask.sum(axis=1))
    return sparse.csr_matrix((vals[mask], cols[mask].astype(xp.int32, copy=False), indptr.astype(xp.int32)), shape=(n_c, n_c))


#: probe vectors per block of :func:`_probe_blocks`: the products hold two dense (fine rows x block) arrays at once, so
#: 3D's 27 colours go in 3 blocks (a third of the peak: 144 B a fine unknown, as 2D's 9 colours)
PROBE_BLOCK = 9


def _probe_blocks(A, P, R, color, comp, nc: int, ncolors: int, xp):
    """R A P V with V the indicators of the colours of one component, ``PROBE_BLOCK`` colours at a time, for each
    component: (ncolors nc, n_c)."""
    n_c = int(color.size)
    Y = xp.empty((ncolors * nc, n_c), dtype=xp.float64)
    for b in range(nc):
        mine = xp.flatnonzero(comp == b)
        for c0 in range(0, ncolors, PROBE_BLOCK):
            width = min(PROBE_BLOCK, ncolors - c0)
            sel = mine[(color[mine] >= c0) & (color[mine] < c0 + width)]
            V = xp.zeros((n_c, width), dtype=xp.float64)
            V[sel, color[sel] - c0] = 1.0
            # row c nc + b: colour c, component b
            Y[c0 * nc + b:(c0 + width) * nc:nc] = (R @ (A @ (P @ V))).T
    return Y


def _probe_one_by_one(low, A, P, R, color, comp, nc: int, ncolors: int, xp):
    """The products of :func:`_probe_blocks` one probe vector at a time through ``low.csr_apply`` (host matrices,
    device ops)."""
    n_f, n_c = A.shape[0], int(color.size)
    dA_, dP, dR = (level64(low, M, xp) for M in (A, P, R))
    pv, apv, y = low.zeros(n_f, F64), low.zeros(n_f, F64), low.zeros(n_c, F64)
    Y = []
    for c in range(ncolors):
        for b in range(nc):
            v = ((color == c) & (comp == b)).astype(xp.float64)
            low.csr_apply(dP, dev(low, v, xp), pv)
            low.csr_apply(dA_, pv, apv)
            low.csr_apply(dR, apv, y)
            Y.append(from_dev(low, y, xp).copy())
    return xp.stack(Y)
