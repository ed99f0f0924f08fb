"""FEM results against an independent finite-element code (scikit-fem) on the same problems.

Two kinds of check:

- *Same discrete problem*: scikit-fem's own P1 assembly on the same triangles (its own mesh generator and
  refinement) must give hpcsolve's P1 solution to round-off. This pins the value a case reports at its tested
  resolution without copying it from hpcsolve.
- *Converged reference*: scikit-fem P2/P3 on finer meshes give the mesh-converged value the case files cite
  (cases/cook_membrane.toml, cases/heat_plate_with_hole.toml) and tests/fem/test_cases.py compares with.

scikit-fem is a test dependency (the dev extra); without it these tests skip with that reason.
"""

from __future__ import annotations

from pathlib import Path

import meshio
import numpy as np
import pytest
import scipy.sparse.linalg as spla

from hpcsolve.core.cases import load_case
from hpcsolve.fem.discrete import problem

skfem = pytest.importorskip("skfem", reason="scikit-fem (dev extra) is the independent FEM code these tests compare with")
from skfem import (Basis, BilinearForm, ElementTriP0, ElementTriP1, ElementTriP2, ElementTriP3,  # noqa: E402
                   ElementVector, FacetBasis, LinearForm, MeshTri, asm, condense, solve)
from skfem.helpers import dot, grad  # noqa: E402
from skfem.models.elasticity import lame_parameters, linear_elasticity  # noqa: E402

CASES = Path(__file__).resolve().parents[2] / "cases"
MID_EDGE, CORNER = (48.0, 52.0), (48.0, 60.0)
COOK_REFERENCE = 23.96            # Cook et al. (2002), mid-edge deflection; cases/cook_membrane.toml
# the heat plate's probe: the case asks for (0.7, 0.1); at mesh.refine = 1 the nearest node, which the CLI reports, is
HEAT_PROBE_NODE = (0.69101554, 0.09784155)
HEAT_PROBE_REFERENCE = 0.692782   # T there, mesh-converged (scikit-fem P3 on the mesh refined twice: 0.6927824)


# -- Cook's membrane ----------------------------------------------------------------------------------

def _skfem_cook(n: int, element, probes=(MID_EDGE, CORNER), plane_stress: bool = True) -> np.ndarray:
    """u_y at ``probes``: plane stress (or strain), E = 1, nu = 1/3, clamped at x = 0, traction (0, 1/16) on x = 48, on
    scikit-fem's own n x n tensor-product triangulation of the unit square mapped onto the panel."""
    unit = MeshTri.init_tensor(np.linspace(0, 1, n + 1), np.linspace(0, 1, n + 1))
    s, t = unit.p
    m = MeshTri(np.vstack([48.0 * s, 44.0 * s + t * (44.0 + 16.0 * s - 44.0 * s)]), unit.t)
    lam, mu = lame_parameters(1.0, 1.0 / 3.0)
    if plane_stress:
        lam = 2 * lam * mu / (lam + 2 * mu)
    ib = Basis(m, ElementVector(element), intorder=6)
    K = asm(linear_elasticity(lam, mu), ib)
    loaded = FacetBasis(m, ib.elem, facets=m.facets_satisfying(lambda x: np.isclose(x[0], 48.0)), intorder=6)

    @LinearForm
    def shear(v, w):
        return v[1] / 16.0

    u = solve(*condense(K, asm(shear, loaded), D=ib.get_dofs(lambda x: np.isclose(x[0], 0.0))))
    pts = np.array(probes, dtype=float).T - 1e-9                        # just inside the panel
    return (ib.probes(pts) @ u)[len(probes):]                            # the y components


def _hpcsolve_cook(n: int, *overrides: str) -> tuple[float, float]:
    disc = problem.build(load_case(CASES / "cook_membrane.toml", [f"mesh.nx={n}", *overrides]))
    u = disc.full_solution(spla.spsolve(disc.A.tocsc(), disc.b))
    p = disc.mesh.points
    return tuple(float(u[int(np.argmin(np.hypot(p[:, 0] - x, p[:, 1] - y))), 1]) for x, y in (MID_EDGE, CORNER))


def test_cook_p1_is_the_same_discrete_problem_as_scikit_fems():
    """hpcsolve P1 (nx = 16 and the case's 32) against scikit-fem's P1 assembly of the same triangles: equal to
    round-off (1e-9 relative; seen ~1e-13). A wrong load, material, thickness or boundary selection fails here."""
    for n in (16, 32):
        ours = _hpcsolve_cook(n)
        theirs = _skfem_cook(n, ElementTriP1())
        np.testing.assert_allclose(ours, theirs, rtol=1e-9)


def test_cook_published_value_from_an_independent_high_order_solution():
    """scikit-fem P3 on 32 x 32 cells: mid-edge 23.9614, corner 25.155 (on 48 x 48: 23.9641, 25.167). The P3 change
    from 32 to 48 cells is 0.003 at the mid-edge, so its discretisation error is below 0.005; with the published
    value's four digits (+-0.005) the bound is 0.01. The corner value is > 25.1, 5 % away from 23.96: the published
    value is the mid-edge deflection."""
    mid, corner = _skfem_cook(32, ElementTriP3())
    assert abs(mid - COOK_REFERENCE) < 0.01, mid
    assert corner > 25.1, corner


def test_cook_plane_strain_converges_elsewhere():
    """Plane strain, all else equal: hpcsolve P1 (nx = 16) is scikit-fem's P1 to round-off, and scikit-fem P3 on
    32 x 32 gives 21.512 at the mid-edge (24 x 24: 21.507, 48 x 48: 21.517; corner 22.57, 48 x 48: 22.59), 10 %
    below 23.96: the published value is the plane-stress one (an earlier README said "plane-strain, tip ~23.96")."""
    np.testing.assert_allclose(_hpcsolve_cook(16, 'problem.model="plane_strain"'),
                               _skfem_cook(16, ElementTriP1(), plane_stress=False), rtol=1e-9)
    mid, corner = _skfem_cook(32, ElementTriP3(), plane_stress=False)
    assert abs(mid - 21.52) < 0.01 and 22.5 < corner < 22.7, (mid, corner)
    assert COOK_REFERENCE - mid > 0.1 * COOK_REFERENCE


# -- heat plate with a hole ---------------------------------------------------------------------------

def _skfem_heat(refine: int, element):
    """The heat plate of cases/heat_plate_with_hole.toml on the gmsh file read by meshio and refined by scikit-fem:
    k = 5 for triangles whose centroid has x >= 1.2, else 1; T = 1 at x = 0, T = 0 at x = 2; flux 0.5 into the
    hole wall; top and bottom insulated. Returns (basis, solution)."""
    msh = meshio.read(CASES / "meshes" / "plate_with_hole.msh")
    m = MeshTri(msh.points[:, :2].T.copy(), msh.cells_dict["triangle"].T.copy())
    if refine:
        m = m.refined(refine)
    basis = Basis(m, element, intorder=6)
    k = np.where(m.p[0, m.t].mean(axis=0) >= 1.2 - 1e-9, 5.0, 1.0)

    @BilinearForm
    def conduction(u, v, w):
        return w.k * dot(grad(u), grad(v))

    A = asm(conduction, basis, k=basis.with_element(ElementTriP0()).interpolate(k))
    mid = m.p[:, m.facets].mean(axis=1)
    edge = m.boundary_facets()
    hole = edge[np.hypot(mid[0, edge] - 0.7, mid[1, edge] - 0.5) < 0.3]

    @LinearForm
    def flux(v, w):
        return 0.5 * v

    b = asm(flux, FacetBasis(m, element, facets=hole, intorder=6))
    left = basis.get_dofs(lambda x: np.isclose(x[0], 0.0)).all()
    right = basis.get_dofs(lambda x: np.isclose(x[0], 2.0)).all()
    T0 = np.zeros(basis.N)
    T0[left] = 1.0
    return basis, solve(*condense(A, b, x=T0, D=np.concatenate([left, right])))


def _probe(basis, T, point) -> float:
    return float((basis.probes(np.array(point, dtype=float)[:, None]) @ T)[0])


def test_heat_plate_p1_is_the_same_discrete_problem_as_scikit_fems():
    """hpcsolve P1 at mesh.refine = 1 (the case's resolution) against scikit-fem P1 on the same file refined once by
    scikit-fem: the same value at the probe node to round-off (1e-9 relative), and the node is the one the CLI reports."""
    disc = problem.build(load_case(CASES / "heat_plate_with_hole.toml"))
    T = disc.full_solution(spla.spsolve(disc.A.tocsc(), disc.b))
    p = disc.mesh.points
    k = int(np.argmin(np.hypot(p[:, 0] - 0.7, p[:, 1] - 0.1)))
    np.testing.assert_allclose(p[k], HEAT_PROBE_NODE, atol=1e-8)
    assert _probe(*_skfem_heat(1, ElementTriP1()), p[k]) == pytest.approx(float(T[k]), rel=1e-9)


def test_heat_plate_reference_value_and_the_p1_discretisation_error():
    """scikit-fem P2 on the file refined once (10,630 DOFs) at the probe node: 0.6927784 (P3 refined twice 0.6927824,
    P2 refined three times 0.6927823: the P2 value is within 5e-6 of the converged one, the bound here). hpcsolve's P1
    value at the same resolution, 0.6927314, is 5.1e-5 below the converged value: its discretisation error (P1 at
    refine 2 and 3 at the same node: 0.6927680, 0.6927785, errors 1.4e-5 and 3.9e-6, ~3.6x smaller per refinement, so
    P1 converges to the P2/P3 value). test_cases.py bounds the CLI's value by 1e-4 around HEAT_PROBE_REFERENCE: twice
    this measured error; here the same bound, against the value computed now."""
    basis, T = _skfem_heat(1, ElementTriP2())
    ref = _probe(basis, T, HEAT_PROBE_NODE)
    assert abs(ref - HEAT_PROBE_REFERENCE) < 5e-6, ref
    disc = problem.build(load_case(CASES / "heat_plate_with_hole.toml"))
    ours = disc.full_solution(spla.spsolve(disc.A.tocsc(), disc.b))
    p = disc.mesh.points
    k = int(np.argmin(np.hypot(p[:, 0] - 0.7, p[:, 1] - 0.1)))
    assert abs(ref - float(ours[k])) < 1e-4, (ref, float(ours[k]))
