"""Geometric multigrid on the Kuhn-split box of tetrahedra (``precond.geometric`` with ``StructuredGrid(nz > 0)``):
P1 interpolation from the box with half the cells, the nested coarse operator, probing in 27 colours, and the V-cycle
preconditioner's iteration counts."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

from hpcsolve.core.errors import CaseError
from hpcsolve.fem import solve
from hpcsolve.fem.discrete import fe_assembly as fa
from hpcsolve.fem.discrete.elements import element
from hpcsolve.fem.discrete.simplex_gen import box, dofmap
from hpcsolve.fem.linalg.kernels_numpy_low import low_ops
from hpcsolve.fem.linalg.precond import geometric as geo
from hpcsolve.fem.linalg.precond import multigrid as mgm
from hpcsolve.fem.linalg.precond.geometric import StructuredGrid, coarse_rows_in_fine, galerkin_by_probing, \
    geometric_prolongation


def _stiffness(n: tuple[int, int, int]) -> sp.csr_matrix:
    sm = box(*n)
    return fa.stiffness(sm, dofmap(sm, 1), element(3, 1))


def _interior(n: tuple[int, int, int]) -> np.ndarray:
    i, j, k = np.meshgrid(*[np.arange(1, c) for c in n], indexing="ij")
    return np.sort((i + (n[0] + 1) * (j + (n[1] + 1) * k)).ravel())


def test_the_free_interior_nodes_of_a_3d_grid_and_a_2d_grid_unchanged():
    g = StructuredGrid(4, 6, None, 1, nz=2)
    assert g.cells == (4, 6, 2) and g.dim == 3 and g.n_full == 5 * 7 * 3
    assert np.array_equal(g.free_array(), _interior((4, 6, 2)))
    g2 = StructuredGrid(4, 6, None, 2)
    j, i = np.divmod(np.arange(3 * 5), 3)
    node = (j + 1) * 5 + (i + 1)
    assert np.array_equal(g2.free_array(), (node[:, None] * 2 + np.arange(2)).ravel())
    assert StructuredGrid(4, 6, None, 1, nz=3).halvable() is False


def test_prolongation_is_exact_for_linear_fields_and_the_coarse_operator_is_the_coarse_box():
    n = (4, 6, 2)
    full = StructuredGrid(*n[:2], np.arange(5 * 7 * 3), 1, nz=n[2])
    P, cgrid, _ = geometric_prolongation(full)
    assert cgrid.cells == (2, 3, 1) and P.shape == (5 * 7 * 3, 3 * 4 * 2)
    coarse_pts, fine_pts = box(2, 3, 1).points, box(*n).points
    lin = lambda p: 0.3 + p @ np.array([1.0, -2.0, 0.5])           # noqa: E731
    assert np.abs(P @ lin(coarse_pts) - lin(fine_pts)).max() < 1e-14
    assert np.allclose(P.sum(axis=1), 1.0)
    # nested P1 spaces (the Kuhn split of the box with half the cells is a union of the fine one's): R A P = A_coarse
    A, Ac = _stiffness(n), _stiffness((2, 3, 1))
    assert abs(P.T @ A @ P - Ac).max() < 1e-13 * abs(Ac).max()


@pytest.mark.parametrize("block", [27, 9, 4])
@pytest.mark.parametrize("ncomp", [1, 3])
def test_galerkin_by_probing_in_27_colours_equals_the_sparse_triple_product(ncomp, block, monkeypatch):
    """In probe blocks of any width (geometric.PROBE_BLOCK: 9, a third of 3D's peak memory)."""
    monkeypatch.setattr(geo, "PROBE_BLOCK", block)
    rng = np.random.default_rng(3)
    n = (6, 4, 4)
    interior = _interior(n)
    free = (interior[:, None] * ncomp + np.arange(ncomp)).ravel()
    # any symmetric matrix with the Kuhn stencil: the fine P1 stiffness with random cell coefficients, per component
    sm = box(*n)
    dofs, local = fa.stiffness_local(sm, dofmap(sm, 1), element(3, 1), rng.uniform(0.1, 10.0, sm.n_cells))
    K = fa.to_csr(dofs, local, sm.n_points)
    A = sp.kron(K, np.eye(ncomp) + 0.1 * (1 - np.eye(ncomp)), format="csr")[free][:, free].tocsr()
    grid = StructuredGrid(n[0], n[1], free, ncomp, nz=n[2])
    P, cgrid, cindex = geometric_prolongation(grid)
    R = P.T.tocsr()
    probed = galerkin_by_probing(low_ops(), A, P, R, cgrid, cindex)
    exact = (R @ A @ P).tocsr()
    assert abs(probed - exact).max() <= 1e-13 * abs(exact).max() and probed.nnz > 0
    assert probed.has_sorted_indices
    # every coarse DOF sits on the fine one at twice its grid coordinates
    rows = coarse_rows_in_fine(grid, cgrid)
    cfree = cgrid.free_array()
    cnode, fnode = cfree // ncomp, free[rows] // ncomp
    ci = np.stack(np.unravel_index(cnode, (n[2] // 2 + 1, n[1] // 2 + 1, n[0] // 2 + 1)))
    fi = np.stack(np.unravel_index(fnode, (n[2] + 1, n[1] + 1, n[0] + 1)))
    assert np.array_equal(2 * ci, fi) and np.array_equal(cfree % ncomp, free[rows] % ncomp)


def test_mg_on_the_box_needs_a_bounded_number_of_cycles():
    its = {}
    for m in (8, 16, 32):
        n = (m, m, m)
        free = _interior(n)
        A = _stiffness(n)[free][:, free].tocsr()
        b = np.random.default_rng(m).standard_normal(A.shape[0])
        pc = mgm.Multigrid("mg", {"coarse_size": 50}, grid=StructuredGrid(m, m, free, 1, nz=m))
        x, rep = solve(A, b, preconditioner=pc, rtol=1e-10)
        assert rep.converged and np.linalg.norm(b - A @ x) <= 1e-9 * np.linalg.norm(b)
        assert "geometric" in " ".join(map(str, rep.preconditioner["level_kinds"]))
        its[m] = rep.iterations
    assert its[32] <= 12 and its[32] <= its[8] + 3, its


def test_a_grid_that_does_not_fit_the_matrix_is_refused_naming_it():
    n = (4, 4, 4)
    A = _stiffness(n)[_interior(n)][:, _interior(n)].tocsr()
    pc = mgm.Multigrid("mg", {}, grid=StructuredGrid(4, 4, None, 1, nz=2))
    with pytest.raises(CaseError, match="grid"):
        solve(A, np.ones(A.shape[0]), preconditioner=pc)


def test_offsets_in_the_probe_cover_the_kuhn_neighbours():
    """The nodes a Kuhn-split box joins to a node are at offsets in {0, 1}^3 and their opposites: within the 27
    neighbours that probing separates."""
    A = _stiffness((3, 3, 3))
    centre = 1 + 4 * (1 + 4 * 1)
    cols = A[centre].indices
    offs = {tuple(int(v) for v in np.array(np.unravel_index(c, (4, 4, 4)))[::-1] - 1) for c in cols}
    kuhn = {d for d in itertools.product((0, 1), repeat=3)} | {tuple(-v for v in d)
                                                             for d in itertools.product((0, 1), repeat=3)}
    assert offs == kuhn and len(offs) == 15
