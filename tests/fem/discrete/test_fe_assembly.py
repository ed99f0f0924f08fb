"""Element-generic assembly (hpcsolve.fem.discrete.fe_assembly): the P1 triangle agrees with the P1 assembly; null
spaces (constants, rigid-body modes); exact energies and loads of fields in the element space; observed convergence
orders of P1 and P2 on triangles and tetrahedra; elasticity patch tests in 3D."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse.linalg as spla

from hpcsolve.fem.discrete import assembly, problem
from hpcsolve.fem.discrete import fe_assembly as fa
from hpcsolve.fem.discrete import mesh as mesh2d
from hpcsolve.fem.discrete.elements import element
from hpcsolve.fem.discrete.simplex_gen import box, dofmap, from_mesh, rectangle

PI = np.pi
KINDS = [(2, 1), (2, 2), (3, 1), (3, 2)]


def unit(dim: int, n: int):
    return rectangle(n, n) if dim == 2 else box(n, n, n)


def jiggled_box(n: int, seed: int = 0, amount: float = 0.15):
    """box(n, n, n) with its interior vertices moved at random by up to ``amount`` cells: no symmetry helps."""
    sm = box(n, n, n)
    inner = np.all((sm.points > 1e-12) & (sm.points < 1 - 1e-12), axis=1)
    rng = np.random.default_rng(seed)
    sm.points = sm.points.copy()
    sm.points[inner] += amount / n * rng.uniform(-1, 1, (int(inner.sum()), 3))
    return sm


@pytest.fixture(scope="module")
def jiggled_rectangle():
    m = mesh2d.rectangle(6, 5)
    inner = np.all((m.points > 1e-12) & (m.points < 1 - 1e-12), axis=1)
    m.points = m.points.copy()
    m.points[inner] += 0.03 * np.random.default_rng(1).uniform(-1, 1, (int(inner.sum()), 2))
    return m


def test_p1_triangle_matches_the_p1_assembly(jiggled_rectangle):
    m = jiggled_rectangle
    sm, el = from_mesh(m), element(2, 1)
    dm = dofmap(sm, 1)
    k = np.linspace(1.0, 3.0, m.n_triangles)
    assert abs(fa.stiffness(sm, dm, el, k) - assembly.stiffness(m, k)).max() < 1e-13
    assert abs(fa.mass(sm, dm, el) - assembly.mass(m)).max() < 1e-16
    assert np.abs(fa.load(sm, dm, el, 2.5) - assembly.load(m, 2.5)).max() < 1e-16
    for model in ("plane_strain", "plane_stress"):
        K = fa.elasticity_stiffness(sm, dm, el, 2.0e3, 0.3, model, thickness=0.5)
        K0 = assembly.elasticity_stiffness(m, 2.0e3, 0.3, model, thickness=0.5)
        assert abs(K - K0).max() < 1e-11 * abs(K0).max()
    left = np.flatnonzero(sm.facet_tags == "left")
    assert np.abs(fa.facet_load(sm, dm, el, left, [1.0, -2.0], ncomp=2)
                  - assembly.edge_load(m, m.boundary_edges[left], [1.0, -2.0], ncomp=2)).max() < 1e-15
    u = np.sin(m.points[:, 0]) * m.points[:, 1]
    exact = lambda x, y: np.sin(x) * y                                            # noqa: E731
    grad = lambda x, y: (np.cos(x) * y, np.sin(x))                               # noqa: E731
    ours = fa.error_norms(sm, dm, el, u + 0.01, exact, grad)
    assert ours == pytest.approx(problem.error_norms(m, u + 0.01, exact, grad), rel=1e-12)


@pytest.mark.parametrize("dim,degree", KINDS)
def test_constants_and_rigid_body_modes_are_in_the_null_spaces(dim, degree):
    sm = jiggled_box(2) if dim == 3 else from_mesh(mesh2d.cook_membrane(3))
    el, dm = element(dim, degree), dofmap(sm, degree)
    K = fa.stiffness(sm, dm, el)
    assert np.abs(K @ np.ones(dm.n_dofs)).max() < 1e-12 * abs(K).max()
    assert np.allclose((K - K.T).data, 0.0, atol=1e-13 * abs(K).max())
    model = "3d" if dim == 3 else "plane_strain"
    E = fa.elasticity_stiffness(sm, dm, el, 7.0, 0.3, model)
    R = fa.rigid_body_modes(dm.points)
    assert R.shape == (dim * dm.n_dofs, 6 if dim == 3 else 3)
    assert np.abs(E @ R).max() < 1e-11 * abs(E).max() * np.abs(R).max()
    # and nothing else: the smallest nonzero eigenvalues are clearly away from the null space
    eig = np.linalg.eigvalsh(E.toarray())
    assert np.sum(eig < 1e-10 * eig[-1]) == R.shape[1]


@pytest.mark.parametrize("dim,degree", KINDS)
def test_energy_mass_and_loads_are_exact_in_the_element_space(dim, degree):
    """For u in the element space, u^T K u = int |grad u|^2 and u^T M u = int u^2 (unit square / cube); the load of
    f = 1 sums to the volume; a boundary flux of 1 on a side integrates a linear function exactly."""
    sm, el = unit(dim, 3), element(dim, degree)
    dm = dofmap(sm, degree)
    x = dm.points
    if degree == 1:
        u = x[:, 0] - 2 * x[:, 1]
        energy, square = 5.0, 1 / 3 + 4 / 3 - 1.0       # int (x - 2y)^2 over the unit square and cube
    elif dim == 2:
        u = x[:, 0] ** 2 + x[:, 0] * x[:, 1]
        energy, square = 3.0, 1 / 5 + 1 / 4 + 1 / 9
    else:
        u = x[:, 0] ** 2 + x[:, 1] * x[:, 2]
        energy, square = 2.0, 1 / 5 + 1 / 6 + 1 / 9
    assert u @ fa.stiffness(sm, dm, el) @ u == pytest.approx(energy, rel=1e-12)
    assert u @ fa.mass(sm, dm, el) @ u == pytest.approx(square, rel=1e-12)
    assert fa.load(sm, dm, el, 1.0).sum() == pytest.approx(1.0, rel=1e-13)
    assert fa.load(sm, dm, el, lambda *c: c[0] ** 2).sum() == pytest.approx(1 / 3, rel=1e-13)
    top = sm.facet_tags == "top"                                   # y = 1: int over it of x + 2 z (3D) or x (2D)
    g = x[:, 0] + (2 * x[:, 2] if dim == 3 else 0.0)
    assert g @ fa.facet_load(sm, dm, el, top, 1.0) == pytest.approx(1.5 if dim == 3 else 0.5, rel=1e-13)
    traction = fa.facet_load(sm, dm, el, top, [1.0, 2.0, -1.0][:dim], ncomp=dim)
    assert traction.reshape(-1, dim).sum(axis=0) == pytest.approx([1.0, 2.0, -1.0][:dim], rel=1e-13)


def solve_poisson(dim: int, degree: int, n: int) -> tuple[float, float]:
    """-Laplace u = f on the unit square / cube, u = prod sin(pi x_i), u = 0 on the boundary; (L2, H1) errors."""
    sm, el = unit(dim, n), element(dim, degree)
    dm = dofmap(sm, degree)

    def exact(*c):
        return np.prod([np.sin(PI * a) for a in c], axis=0)

    def grad(*c):
        return tuple(PI * np.cos(PI * c[a]) * np.prod([np.sin(PI * b) for i, b in enumerate(c) if i != a], axis=0)
                     for a in range(dim))

    K = fa.stiffness(sm, dm, el)
    b = fa.load(sm, dm, el, lambda *c: dim * PI ** 2 * exact(*c))
    fixed = np.unique(dm.facet_dofs)
    A, rhs, free = assembly.condense(K, b, fixed, np.zeros(len(fixed)))
    u = assembly.expand(spla.spsolve(A.tocsc(), rhs), free, fixed, np.zeros(len(fixed)), dm.n_dofs)
    return fa.error_norms(sm, dm, el, u, exact, grad)


def observed_orders(errors: list[tuple[float, float]]) -> tuple[float, float]:
    """log2 of the error ratio of the last two (halved) mesh sizes, L2 and H1."""
    (l2a, h1a), (l2b, h1b) = errors[-2], errors[-1]
    return float(np.log2(l2a / l2b)), float(np.log2(h1a / h1b))


# (dim, degree, mesh sizes, expected L2 order, expected H1 order)
CONVERGENCE = [(2, 1, (8, 16, 32), 2, 1), (2, 2, (4, 8, 16), 3, 2), (3, 1, (4, 8, 16), 2, 1), (3, 2, (2, 4, 8), 3, 2)]


@pytest.mark.parametrize("dim,degree,sizes,l2_order,h1_order", CONVERGENCE)
def test_poisson_converges_at_the_theoretical_orders(dim, degree, sizes, l2_order, h1_order):
    errors = [solve_poisson(dim, degree, n) for n in sizes]
    assert all(a[0] > b[0] and a[1] > b[1] for a, b in zip(errors, errors[1:]))
    l2, h1 = observed_orders(errors)
    assert l2 == pytest.approx(l2_order, abs=0.2)
    assert h1 == pytest.approx(h1_order, abs=0.2)


def patch_solution(sm, degree: int, displacement, body_force):
    """Solve 3D elasticity (E = 1, nu = 0.3) with the exact displacement on the whole boundary and the body force;
    the largest nodal error."""
    el, dm = element(3, degree), dofmap(sm, degree)
    K = fa.elasticity_stiffness(sm, dm, el, 1.0, 0.3, "3d")
    b = np.zeros(3 * dm.n_dofs)
    for c in range(3):
        b[c::3] = fa.load(sm, dm, el, body_force[c])
    exact = displacement(dm.points).ravel()
    fixed = (3 * np.unique(dm.facet_dofs)[:, None] + np.arange(3)).ravel()
    A, rhs, free = assembly.condense(K, b, fixed, exact[fixed])
    u = assembly.expand(spla.spsolve(A.tocsc(), rhs), free, fixed, exact[fixed], len(b))
    return np.abs(u - exact).max(), np.abs(exact[free]).max()


def test_p1_tetrahedra_pass_the_linear_patch_test():
    A = np.array([[0.1, -0.2, 0.05], [0.3, 0.0, -0.1], [-0.05, 0.2, 0.15]])
    err, size = patch_solution(jiggled_box(3), 1, lambda p: p @ A.T + [0.01, -0.02, 0.03], [0.0, 0.0, 0.0])
    assert size > 0.05 and err < 1e-13


def test_p2_tetrahedra_pass_the_quadratic_patch_test():
    """u = (x^2, y z, x y): div sigma = mu Laplace u + (lambda + mu) grad div u = (2 mu + 2 (lambda + mu), 0,
    lambda + mu), constant, so f = -div sigma is integrated exactly and the P2 solution is u itself."""
    nu = 0.3
    lam, mu = nu / ((1 + nu) * (1 - 2 * nu)), 1 / (2 * (1 + nu))
    force = [-(2 * mu + 2 * (lam + mu)), 0.0, -(lam + mu)]
    err, size = patch_solution(jiggled_box(2), 2, lambda p: np.stack(
        [p[:, 0] ** 2, p[:, 1] * p[:, 2], p[:, 0] * p[:, 1]], axis=1), force)
    assert size > 0.1 and err < 1e-12


def test_vector_error_norms_and_elasticity_input_checks():
    sm = box(2, 2, 2)
    el, dm = element(3, 2), dofmap(sm, 2)
    field = lambda x, y, z: (x * y, z ** 2, x - y)                                    # noqa: E731
    grad = lambda x, y, z: ((y, x, 0 * x), (0 * x, 0 * x, 2 * z), (1 + 0 * x, -1 + 0 * x, 0 * x))   # noqa: E731
    u = np.stack(field(*dm.points.T), axis=1).ravel()
    l2, h1 = fa.error_norms(sm, dm, el, u, field, grad, ncomp=3)
    assert l2 < 1e-14 and h1 < 1e-13
    l2, h1 = fa.error_norms(sm, dm, el, u + np.tile([0.0, 0.5, 0.0], dm.n_dofs), field, grad, ncomp=3)
    assert l2 == pytest.approx(0.5, rel=1e-12) and h1 < 1e-13
    with pytest.raises(ValueError, match="plane_strain, plane_stress"):
        fa.elasticity_matrix(2, 0.3, "3d")
    with pytest.raises(ValueError, match="element"):
        fa.stiffness(sm, dm, element(3, 1))
    D = fa.elasticity_matrix(3, 0.25, "3d", young=2.0)
    assert D[0, 0] == pytest.approx(2.0 * 0.75 / (1.25 * 0.5)) and D[3, 3] == pytest.approx(2.0 / 2.5)


def test_error_norms_in_blocks_equal_one_pass_and_give_the_exact_norm(monkeypatch):
    sm = box(3, 2, 2)
    el, dm = element(3, 2), dofmap(sm, 2)
    exact, grad = problem.MANUFACTURED["sin_sin_sin"][:2]
    u = exact(*dm.points.T) + 0.01 * np.cos(7.0 * dm.points[:, 0])
    whole = fa.error_norms(sm, dm, el, u, exact, grad, with_exact=True)
    monkeypatch.setattr(fa, "NORM_BLOCK_POINTS", 100)           # 4 cells a block: 18 blocks
    blocks = fa.error_norms(sm, dm, el, u, exact, grad, with_exact=True)
    assert whole[0] > 1e-3 and np.allclose(blocks, whole, rtol=1e-13, atol=0)
    # ||sin(pi x) sin(pi y) sin(pi z)||_L2 on the unit cube is 1/(2 sqrt 2); the 14-point rule on 72 cells is close
    assert whole[2] == pytest.approx(0.5 ** 1.5, rel=2e-2)
    assert fa.error_norms(sm, dm, el, 0 * u, exact, grad)[0] == pytest.approx(whole[2], rel=1e-13)


@pytest.mark.parametrize("degree", [1, 2])
def test_per_facet_tractions_a_closed_surface_under_pressure_carries_no_net_force(degree):
    sm = jiggled_box(2, seed=3)
    el, dm = element(3, degree), dofmap(sm, degree)
    p = sm.points[sm.facets]
    normal = np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0])
    normal /= np.linalg.norm(normal, axis=1)[:, None]
    everywhere = np.ones(len(sm.facets), dtype=bool)
    force = fa.facet_load(sm, dm, el, everywhere, -2.0 * normal, ncomp=3).reshape(-1, 3).sum(axis=0)
    assert np.abs(force).max() < 1e-14
    right = np.flatnonzero(sm.facet_tags == "right")
    rows = np.tile([1.0, 0.0, -3.0], (len(right), 1))
    assert np.array_equal(fa.facet_load(sm, dm, el, right, rows, ncomp=3),
                          fa.facet_load(sm, dm, el, right, [1.0, 0.0, -3.0], ncomp=3))
    assert fa.facet_measures(sm, right).sum() == pytest.approx(1.0, rel=1e-14)
    with pytest.raises(ValueError, match="one row per selected facet"):
        fa.facet_load(sm, dm, el, right, rows[:-1], ncomp=3)
