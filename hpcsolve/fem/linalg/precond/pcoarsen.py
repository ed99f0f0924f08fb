"""The p-multigrid level of "mg" on quadratic (P2) elements: the P1 functions on the same mesh are a subspace of the
P2 ones, so P1 interpolation into P2 (a vertex DOF keeps its value, an edge DOF takes the mean of its edge's two
vertices) is an exact prolongation, and R A P with R = P^T is the P1 operator of the same mesh. Below that level the
hierarchy goes on as on a P1 matrix: geometric levels where the vertices sit on a structured grid (a generator's
box or rectangle), aggregation otherwise (``geometric.GeometricBuilder``).

:class:`QuadraticGrid` says how the unknowns sit: the vertices' DOF nodes first, then one node per edge (the
numbering of ``hpcsolve.fem.discrete.simplex_gen.dofmap``), ``ncomp`` interleaved components, the free DOFs kept."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from hpcsolve.fem.linalg.precond.layout import host


@dataclass
class QuadraticGrid:
    """The unknowns of a P2 matrix over its P1 vertices: ``n_vertices`` vertex nodes, then one node per edge whose end
    vertices are ``edge_ends`` (E, 2); ``free``: the DOFs kept (indices into the full list ``ncomp * node + c``,
    increasing); ``vertex_cells``: the cells per axis of the vertices' structured grid (x fastest), or None."""

    n_vertices: int
    edge_ends: np.ndarray
    free: object
    ncomp: int = 1
    vertex_cells: tuple | None = None

    def __post_init__(self):
        self.n_vertices, self.ncomp = int(self.n_vertices), int(self.ncomp)
        self.edge_ends = np.asarray(host(self.edge_ends), dtype=np.int64).reshape(-1, 2)
        if not hasattr(self.free, "__cuda_array_interface__"):
            self.free = np.asarray(self.free, dtype=np.int64)
        self.vertex_cells = None if self.vertex_cells is None else tuple(int(c) for c in self.vertex_cells)

    @property
    def n_full(self) -> int:
        return (self.n_vertices + self.edge_ends.shape[0]) * self.ncomp


def two_parent_prolongation(ca, cb, n_coarse: int, xp=np, sparse=sp):
    """The CSR interpolation whose row r is the mean of coarse columns ca[r] and cb[r] (1 where they are equal; a
    column -1 is fixed, its share dropped), built row by row without sorting: geometric multigrid's P1 interpolation
    from the grid with half the cells and this module's P1-into-P2 both have this form."""
    same = ca == cb
    lo, hi = xp.minimum(ca, cb), xp.maximum(ca, cb)
    cols = xp.stack([lo, hi], axis=1)
    vals = xp.stack([xp.where(same, 1.0, 0.5), xp.full(lo.shape, 0.5)], axis=1)
    mask = xp.stack([lo >= 0, (hi >= 0) & ~same], axis=1)
    indptr = xp.zeros(ca.size + 1, dtype=xp.int64)
    indptr[1:] = xp.cumsum(mask.sum(axis=1))
    return sparse.csr_matrix((vals[mask], cols[mask].astype(xp.int32), indptr.astype(xp.int32)),
                             shape=(int(ca.size), int(n_coarse)))


def p_prolongation(q: QuadraticGrid, xp=np, sparse=sp):
    """(P, the free vertex DOFs, their rows among the free DOFs): P1 interpolation into P2 on the free DOFs
    (columns: the free vertex DOFs, whose numbers ``ncomp * vertex + c`` are also the P1 level's full numbering:
    the free DOFs of its grid); the rows inject a near-null space into the P1 level."""
    nc, nv = q.ncomp, q.n_vertices
    free = xp.asarray(q.free, dtype=xp.int64)
    node, comp = free // nc, free % nc
    vertex = node < nv
    ends = xp.asarray(q.edge_ends)
    edge = xp.where(vertex, 0, node - nv)
    pa = xp.where(vertex, node, ends[edge, 0] if ends.size else node)
    pb = xp.where(vertex, node, ends[edge, 1] if ends.size else node)
    vfree = free[vertex]                                      # free vertex DOFs: also their P1 numbers
    cindex = xp.full(nv * nc, -1, dtype=xp.int64)
    cindex[vfree] = xp.arange(vfree.size, dtype=xp.int64)
    P = two_parent_prolongation(cindex[pa * nc + comp], cindex[pb * nc + comp], int(vfree.size), xp, sparse)
    return P, vfree, xp.flatnonzero(vertex)
