"""P1 assembly, meshes, manufactured-solution convergence orders and Cook's membrane."""

import functools
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse.linalg as spla

from hpcsolve.core.cases import load_case
from hpcsolve.fem.discrete import assembly
from hpcsolve.fem.discrete import mesh as meshmod
from hpcsolve.fem.discrete import problem

CASES = Path(__file__).resolve().parents[2] / "cases"


def test_stiffness_is_symmetric_with_zero_row_sums_and_int32_indices():
    m = meshmod.rectangle(7, 5, (0.0, 2.0), (0.0, 1.0))
    K = assembly.stiffness(m, np.linspace(1.0, 3.0, m.n_triangles))
    assert K.indices.dtype == np.int32 and K.indptr.dtype == np.int32
    assert abs(K - K.T).max() < 1e-13
    assert np.abs(K @ np.ones(m.n_points)).max() < 1e-12        # constants are in the kernel
    M = assembly.mass(m)
    assert M.sum() == pytest.approx(2.0, rel=1e-13)              # area
    assert assembly.load(m, 3.0).sum() == pytest.approx(6.0, rel=1e-13)
    assert assembly.load(m, lambda x, y: x).sum() == pytest.approx(2.0, rel=1e-13)  # int x = 2


def test_linear_solution_is_reproduced_exactly():
    # patch test: u = 1 + 2x - 3y is harmonic; Dirichlet data from it gives it back to round-off
    m = meshmod.refine_uniform(meshmod.read_mesh(CASES / "meshes" / "plate_with_hole.msh"))
    K = assembly.stiffness(m)
    u_ex = 1 + 2 * m.points[:, 0] - 3 * m.points[:, 1]
    fixed = m.boundary_nodes()
    A, b, free = assembly.condense(K, np.zeros(m.n_points), fixed, u_ex[fixed])
    u = assembly.expand(spla.spsolve(A.tocsc(), b), free, fixed, u_ex[fixed], m.n_points)
    assert np.abs(u - u_ex).max() < 1e-11


def test_elasticity_rigid_motions_are_in_the_kernel():
    m = meshmod.cook_membrane(4)
    for model in ("plane_strain", "plane_stress"):
        K = assembly.elasticity_stiffness(m, 1.0, 1 / 3, model)
        assert abs(K - K.T).max() < 1e-13
        x, y = m.points[:, 0], m.points[:, 1]
        for mode in (np.column_stack([np.ones_like(x), 0 * x]), np.column_stack([0 * x, np.ones_like(x)]),
                     np.column_stack([-y, x])):
            assert np.abs(K @ mode.ravel()).max() < 1e-12 * abs(K).max() * 60
        # uniform strain eps_xx = 1: stress sigma_xx = E / (1 - nu^2) in plane stress
    s = assembly.stress(m, np.column_stack([m.points[:, 0], 0 * m.points[:, 0]]), 1.0, 1 / 3, "plane_stress")
    assert np.allclose(s[:, 0], 1.125) and np.allclose(s[:, 1], 0.375) and np.allclose(s[:, 2], 0.0)


def test_meshes_and_refinement():
    m = meshmod.read_mesh(CASES / "meshes" / "plate_with_hole.msh")
    assert m.tag_names == ["bottom", "hole", "left", "right", "top"]
    assert np.all(m.areas() > 0)
    polygon_hole = 0.5 * 31 * 0.25 ** 2 * np.sin(2 * np.pi / 31)   # the hole is a 31-gon of radius 0.25
    assert m.areas().sum() == pytest.approx(2.0 - polygon_hole, rel=1e-12)
    r = meshmod.refine_uniform(m)
    assert r.n_triangles == 4 * m.n_triangles
    assert r.areas().sum() == pytest.approx(m.areas().sum(), rel=1e-12)
    assert len(r.boundary_edges) == 2 * len(m.boundary_edges)
    assert sorted(set(r.edge_tags.tolist())) == m.tag_names
    # refinement keeps the boundary the boundary: recomputed boundary edges agree
    recomputed = {tuple(e) for e in np.sort(meshmod.boundary_edges_of(r.triangles), axis=1).tolist()}
    assert recomputed == {tuple(e) for e in np.sort(r.boundary_edges, axis=1).tolist()}


def test_refinement_carries_h_max_and_the_parts_of_its_parent():
    """A refined mesh's h_max is half its parent's and its node parts are its parent's (both carried, not
    recomputed on the larger mesh): equal to the recomputed ones."""
    m = meshmod.read_mesh(CASES / "meshes" / "plate_with_hole.msh")
    two = meshmod.Mesh(np.vstack([m.points, m.points + [3.0, 0.0]]),
                       np.vstack([m.triangles, m.triangles + m.n_points]).astype(np.int32),
                       np.vstack([m.boundary_edges, m.boundary_edges + m.n_points]).astype(np.int32),
                       np.concatenate([m.edge_tags, m.edge_tags]))
    assert two.node_parts()[0] == 2
    r = meshmod.refine_uniform(meshmod.refine_uniform(two))
    carried_h, (parts, carried) = r.h_max(), r.node_parts()
    fresh = meshmod.Mesh(r.points, r.triangles, r.boundary_edges, r.edge_tags)
    assert carried_h == pytest.approx(fresh.h_max(), rel=1e-12) and carried_h == pytest.approx(two.h_max() / 4, rel=1e-12)
    n_fresh, labels = fresh.node_parts()
    assert parts == n_fresh == 2
    assert np.array_equal(carried == carried[0], labels == labels[0])     # the same partition of the nodes
    assert np.allclose(r.centroids(), r.points[r.triangles].mean(axis=1), rtol=0, atol=1e-15)


def _manufactured_errors(n: int):
    case = load_case(CASES / "poisson_manufactured.toml", [f"mesh.nx={n}"])
    disc = problem.build(case)
    x = spla.spsolve(disc.A.tocsc(), disc.b)
    return disc.mesh.h_max(), problem.error_norms(disc.mesh, disc.full_solution(x), *disc.exact)


def test_manufactured_poisson_convergence_orders(record_property):
    rows = [_manufactured_errors(n) for n in (8, 16, 32, 64)]
    h = np.array([r[0] for r in rows])
    l2 = np.array([r[1][0] for r in rows])
    h1 = np.array([r[1][1] for r in rows])
    order_l2 = np.log(l2[:-1] / l2[1:]) / np.log(h[:-1] / h[1:])
    order_h1 = np.log(h1[:-1] / h1[1:]) / np.log(h[:-1] / h[1:])
    print(f"\nL2 errors {l2}, orders {order_l2}\nH1 errors {h1}, orders {order_h1}")
    record_property("order_l2", order_l2.tolist())
    record_property("order_h1", order_h1.tolist())
    assert np.all(np.abs(order_l2 - 2.0) < 0.1)
    assert np.all(np.abs(order_h1 - 1.0) < 0.1)


COOK_REFERENCE = 23.96   # u_y at the midpoint of the loaded edge (48, 52); see cases/cook_membrane.toml


@functools.lru_cache(maxsize=None)
def _cook_uy(n: int) -> dict[tuple[float, float], float]:
    """u_y of the P1 solution of cases/cook_membrane.toml on n x n cells at the mid-edge and corner nodes."""
    case = load_case(CASES / "cook_membrane.toml", [f"mesh.nx={n}"])
    disc = problem.build(case)
    u = disc.full_solution(spla.spsolve(disc.A.tocsc(), disc.b))
    out = {}
    for point in ((48.0, 52.0), (48.0, 60.0)):
        k = int(np.argmin(np.hypot(disc.mesh.points[:, 0] - point[0], disc.mesh.points[:, 1] - point[1])))
        assert np.allclose(disc.mesh.points[k], point)          # a node of every even mesh
        out[point] = float(u[k, 1])
    return out


def _aitken(a: float, b: float, c: float) -> float:
    """Richardson (Aitken delta^2) limit of three values on meshes halved each time (order estimated)."""
    return c + (c - b) ** 2 / ((b - a) - (c - b))


def test_cook_membrane_converges_to_the_published_mid_edge_deflection(record_property):
    """P1 on nx = 16, 32, 64, 128 (0.1 .. 1 s each): the mid-edge deflection rises toward 23.96 (Cook et al. 2002;
    FinEtoolsDeforLinear's Cook tutorial tracks the same point, converged 23.97) with steps that shrink at close to
    the second order, and the extrapolated limit lands on the published value.

    Tolerances: the observed order from 32/64/128 is 1.85 (differences 1.683, 0.499, 0.138 after 16/32): we require
    the step ratio > 3 (order > 1.58; a first-order or stalled sequence fails). The Aitken limit from 32/64/128 is
    23.966; from 16/32/64 it is 23.985, so the extrapolation's own uncertainty is ~0.02 (0.08 %); the published
    value has four digits (+-0.005) and scikit-fem P3 gives 23.964 (tests/fem/test_validation_fem.py). 0.1 % of 23.96
    (0.024) therefore separates a correct solver from, e.g., the previous corner probe (limit ~25.2, 5 % off), a
    wrong load (F scales u linearly) or plane strain (~21.5 at this point, scikit-fem P2)."""
    ns = (16, 32, 64, 128)
    mid = [_cook_uy(n)[48.0, 52.0] for n in ns]
    print(f"\nCook u_y(48, 52) at nx = {ns}: {mid}")
    record_property("cook_mid_edge", mid)
    steps = np.diff(mid)
    assert np.all(steps > 0) and mid[-1] < COOK_REFERENCE          # stiff P1 approaches from below
    assert np.all(steps[:-1] / steps[1:] > 3.0), steps
    limit = _aitken(*mid[1:])
    record_property("cook_richardson_limit", limit)
    assert abs(limit - COOK_REFERENCE) < 1e-3 * COOK_REFERENCE, limit


def test_cook_membrane_corner_is_not_the_published_point():
    """The top right corner (48, 60), which the case probed before, converges elsewhere: Aitken limit of
    32/64/128 is 25.16 (scikit-fem P3 on 48 x 48: 25.17). 25.0 is 4 % above 23.96, well outside the corner's
    extrapolation uncertainty (~0.1). Guards the case file's probe point against sliding back to the corner."""
    corner = [_cook_uy(n)[48.0, 60.0] for n in (32, 64, 128)]
    assert _aitken(*corner) > 25.0, corner
