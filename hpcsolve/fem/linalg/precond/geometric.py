"""The geometric levels of "mg": nested structured grids (:class:`StructuredGrid`), P1 interpolation from the grid
with half the cells (:func:`geometric_prolongation`), and the Galerkin coarse operator R A P from a few products with
probe vectors (:func:`galerkin_by_probing`), all by index arithmetic on the device where the matrix lives; and the
builder of "mg" hierarchies (:class:`GeometricBuilder`): geometric levels while the grid halves, aggregation below."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from hpcsolve.core.errors import CaseError
from hpcsolve.fem.linalg.precond.aggregation import AggregationBuilder
from hpcsolve.fem.linalg.precond.hierarchy import Hierarchy, HierarchyBuilder
from hpcsolve.fem.linalg.precond.layout import dev, from_dev, host, host_csr, level64
from hpcsolve.fem.linalg.precond.mg_options import F64


@dataclass
class StructuredGrid:
    """How the unknowns of a matrix sit on a structured (nx+1) x (ny+1) node grid (row-major, x fastest),
    ``ncomp`` unknowns per node (interleaved), only the DOFs ``free`` (indices into the full DOF list,
    increasing) kept in the matrix."""

    nx: int
    ny: int
    free: object = None     # None: every node off the boundary (Dirichlet all round); NumPy or CuPy array
    ncomp: int = 1

    def __post_init__(self):
        if self.free is not None and not hasattr(self.free, "__cuda_array_interface__"):
            self.free = np.asarray(self.free, dtype=np.int64)
        self.nx, self.ny, self.ncomp = int(self.nx), int(self.ny), int(self.ncomp)

    def free_array(self, xp=np):
        """The free DOFs as an int64 array of ``xp``."""
        if self.free is None:
            nx, ny, nc = self.nx, self.ny, self.ncomp
            j, i = xp.divmod(xp.arange((nx - 1) * (ny - 1), dtype=xp.int64), nx - 1)
            node = (j + 1) * (nx + 1) + (i + 1)
            return (node[:, None] * nc + xp.arange(nc, dtype=xp.int64)[None, :]).ravel()
        if xp is np:
            return np.asarray(host(self.free), dtype=np.int64)
        return xp.asarray(self.free, dtype=xp.int64)

    @property
    def n_full(self) -> int:
        return (self.nx + 1) * (self.ny + 1) * self.ncomp

    def halvable(self) -> bool:
        return self.nx % 2 == 0 and self.ny % 2 == 0 and self.nx >= 2 and self.ny >= 2


def geometric_prolongation(grid: StructuredGrid, xp=np, sparse=sp):
    """(P, coarse grid, coarse index): P1 interpolation from the grid with half the cells, restricted to the
    free DOFs (rows: the free DOFs, columns: the coarse free DOFs) as a CSR matrix of ``sparse``, built row by
    row without sorting (every fine DOF has at most two coarse parents); the coarse index maps a coarse
    full DOF to its free index (-1: fixed)."""
    nx, ny, nc = grid.nx, grid.ny, grid.ncomp
    cx, cy = nx // 2, ny // 2
    it = _index_dtype(grid.n_full, xp)             # int32 index arithmetic where it fits: half the traffic
    free = grid.free_array(xp).astype(it, copy=False)
    node, comp = free // nc, free % nc
    i, j = node % (nx + 1), node // (nx + 1)
    i0, j0 = i // 2, j // 2
    i1, j1 = i0 + (i & 1), j0 + (j & 1)        # odd-odd: the (/) diagonal's far end
    # coarse DOF (I, J, c) sits on fine DOF (2I, 2J, c); it is free where that one is free
    fine_free = xp.zeros((ny + 1) * (nx + 1) * nc, dtype=xp.bool_)
    fine_free[free] = True
    cJ, cI = xp.divmod(xp.arange((cx + 1) * (cy + 1), dtype=it), cx + 1)
    cnode_fine = 2 * cJ * (nx + 1) + 2 * cI
    cfree_mask = fine_free[(cnode_fine[:, None] * nc + xp.arange(nc, dtype=it)[None, :]).ravel()]
    cfree = xp.flatnonzero(cfree_mask)
    cindex = xp.full(cfree_mask.size, -1, dtype=it)
    cindex[cfree] = xp.arange(cfree.size, dtype=it)
    ca = cindex[(j0 * (cx + 1) + i0) * nc + comp]
    cb = cindex[(j1 * (cx + 1) + i1) * nc + comp]
    same = ca == cb
    lo, hi = xp.minimum(ca, cb), xp.maximum(ca, cb)
    cols = xp.stack([lo, hi], axis=1)
    vals = xp.stack([xp.where(same, 1.0, 0.5), xp.full(lo.shape, 0.5)], axis=1)
    mask = xp.stack([lo >= 0, (hi >= 0) & ~same], axis=1)
    indptr = xp.zeros(free.size + 1, dtype=xp.int64)
    indptr[1:] = xp.cumsum(mask.sum(axis=1))
    P = sparse.csr_matrix((vals[mask], cols[mask].astype(xp.int32), indptr.astype(xp.int32)),
                          shape=(int(free.size), int(cfree.size)))
    return P, StructuredGrid(cx, cy, cfree, nc), cindex


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
        if g.nx < 1 or g.ny < 1 or g.ncomp < 1:
            raise CaseError.invalid("grid", (g.nx, g.ny, g.ncomp), "nx, ny, ncomp >= 1")
        n = (g.nx - 1) * (g.ny - 1) * g.ncomp if g.free is None else int(np.size(g.free))
        if g.free is None:
            top = g.n_full - 1
        elif hasattr(g.free, "max"):        # NumPy or CuPy: reduced where it lives (no 33 MB copy at 4 M unknowns)
            top = int(g.free.max()) if n else -1
        else:
            top = int(host(g.free).max(initial=-1))
        if n != A.n or top >= g.n_full:
            raise CaseError.invalid("grid", f"{g.nx} x {g.ny} cells, {g.ncomp} per node, {n} free unknowns",
                                    f"a grid whose free unknowns are the {A.n} rows of the matrix",
                                    why="geometric multigrid interpolates on this grid")

    def coarsen(self, A, h: Hierarchy, cur, nns, xp, sparse):
        """Append (A_l, P_l, "geometric", R_l) while the grid halves and the level is above coarse_size (small
        levels move to the host), then the aggregation levels below; returns (the coarsest level's matrix, xp,
        sparse)."""
        opts, ph, mats = self.options, self.phases, self.mats
        grid = self.grid
        plow = A.low          # where the Galerkin products run (None: the host's sparse module)
        while grid.halvable() and cur.shape[0] > opts.coarse_size and len(mats) < opts.max_levels - 1:
            small = self.host_build_rows if xp is not np else self.host_products_rows
            if cur.shape[0] <= small and plow is not None and not plow.host_resident:     # the small levels: host
                xp, sparse, plow = np, sp, None
                cur = host_csr(cur)
                grid = StructuredGrid(grid.nx, grid.ny, None if grid.free is None else host(grid.free), grid.ncomp)
            P, cgrid, cindex = geometric_prolongation(grid, xp, sparse)
            if P.shape[1] == 0 or P.shape[1] >= P.shape[0]:
                break
            if nns is not None:           # coarse DOFs are fine DOFs (2I, 2J): the near-null space by injection
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

    def timed(self, A, h: Hierarchy) -> None:
        if self.below is not None:
            self.below.timed(A, h)


def _index_dtype(n_full: int, xp):
    """int32 for index arithmetic on a grid of n_full DOFs (every product stays below n_full), else int64."""
    return xp.int32 if n_full < 2**31 - 1 else xp.int64


def coarse_rows_in_fine(grid: StructuredGrid, coarse: StructuredGrid, xp=np):
    """For each free coarse DOF (I, J, c), the row of the fine free DOF (2I, 2J, c) it sits on."""
    nc = grid.ncomp
    free = grid.free_array(xp)
    index = xp.full(grid.n_full, -1, dtype=xp.int64)
    index[free] = xp.arange(free.size, dtype=xp.int64)
    cfree = coarse.free_array(xp)
    node, comp = cfree // nc, cfree % nc
    ci, cj = node % (coarse.nx + 1), node // (coarse.nx + 1)
    return index[(2 * cj * (grid.nx + 1) + 2 * ci) * nc + comp]


def galerkin_by_probing(low, A, P, R, coarse: StructuredGrid, cindex, xp=np, sparse=sp):
    """R A P on a structured coarse grid from 9 x ncomp products with probe vectors.

    With P1 interpolation on the (/)-triangulated grid, a coarse DOF couples only with the DOFs of its
    3 x 3 coarse neighbourhood (its hexagon, in fact), so colouring the coarse nodes by (I mod 3, J mod 3)
    separates every row's neighbours: y = R A P v, with v the indicator of one colour and component,
    holds in row I the entry of the one neighbour of that colour. The products run where the matrices are: with
    ``sparse`` as three products with a block of 9 probe vectors per component (cuSPARSE SpMM through cupyx on the
    GPU: 3 nc launches a level, not 27 nc), or, for host matrices with device ops (Numba-CUDA without CuPy), one
    probe at a time through ``low.csr_apply``. The coarse CSR is assembled by index arithmetic. Exact zeros are
    dropped. A, P, R: float64 CSR matrices of ``sparse``; ``low`` None: host matrices multiplied by ``sparse``."""
    nc = coarse.ncomp
    cx = coarse.nx
    it = _index_dtype(coarse.n_full, xp)
    free = coarse.free_array(xp).astype(it, copy=False)
    n_c = int(free.size)
    node, comp = free // nc, free % nc
    ci, cj = node % (cx + 1), node // (cx + 1)
    color = (ci % 3) + 3 * (cj % 3)
    if low is None or xp is not np or low.host_resident:
        Y = _probe_blocks(A, P, R, color, comp, nc, xp)
    else:
        Y = _probe_one_by_one(low, A, P, R, color, comp, nc, xp)      # (9 nc, n_c)
    rows = xp.arange(n_c, dtype=it)
    off = [(di, dj, b) for dj in (-1, 0, 1) for di in (-1, 0, 1) for b in range(nc)]
    di = xp.asarray([o[0] for o in off], dtype=it)[None, :]
    dj = xp.asarray([o[1] for o in off], dtype=it)[None, :]
    bb = xp.asarray([o[2] for o in off], dtype=it)[None, :]
    ni, nj = ci[:, None] + di, cj[:, None] + dj
    inside = (ni >= 0) & (ni <= cx) & (nj >= 0) & (nj <= coarse.ny)
    nnode = xp.where(inside, nj * (cx + 1) + ni, 0)
    cols = xp.where(inside, cindex[nnode * nc + bb], -1)
    ncolor = (ni % 3) + 3 * (nj % 3)
    vals = Y[ncolor * nc + bb, rows[:, None]]
    mask = (cols >= 0) & (vals != 0)
    indptr = xp.zeros(n_c + 1, dtype=xp.int64)
    indptr[1:] = xp.cumsum(mask.sum(axis=1))
    return sparse.csr_matrix((vals[mask], cols[mask].astype(xp.int32, copy=False), indptr.astype(xp.int32)), shape=(n_c, n_c))


def _probe_blocks(A, P, R, color, comp, nc: int, xp):
    """R A P V with V the indicators of the 9 colours of one component, for each component: (9 nc, n_c)."""
    n_c = int(color.size)
    Y = xp.empty((9 * nc, n_c), dtype=xp.float64)
    for b in range(nc):
        mine = xp.flatnonzero(comp == b)
        V = xp.zeros((n_c, 9), dtype=xp.float64)
        V[mine, color[mine]] = 1.0
        Y[b::nc] = (R @ (A @ (P @ V))).T          # row c nc + b: colour c, component b
    return Y


def _probe_one_by_one(low, A, P, R, color, comp, nc: int, xp):
    """The products of :func:`_probe_blocks` one probe vector at a time through ``low.csr_apply`` (host matrices,
    device ops)."""
    n_f, n_c = A.shape[0], int(color.size)
    dA_, dP, dR = (level64(low, M, xp) for M in (A, P, R))
    pv, apv, y = low.zeros(n_f, F64), low.zeros(n_f, F64), low.zeros(n_c, F64)
    Y = []
    for c in range(9):
        for b in range(nc):
            v = ((color == c) & (comp == b)).astype(xp.float64)
            low.csr_apply(dP, dev(low, v, xp), pv)
            low.csr_apply(dA_, pv, apv)
            low.csr_apply(dR, apv, y)
            Y.append(from_dev(low, y, xp).copy())
    return xp.stack(Y)
