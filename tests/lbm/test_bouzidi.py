"""Interpolated (Bouzidi, linear) bounce-back: link geometry, the pre-pass, accuracy gains.

- Off-grid flat walls (a channel whose walls cross the links at q = 0.2 and 0.85): Poiseuille
  profile error of simple bounce-back is first order, Bouzidi's second order and ~10x smaller.
- Cylinder 2D-1 at D = 10 cells: c_D with Bouzidi is closer to the Schafer-Turek range.
- The pre-pass (NumPy arrays, fp64/fp32/fp16s) equals a per-link Python evaluation bit for bit;
  the Numba-CUDA kernels equal the NumPy pre-pass under the CUDA simulator.
"""

from __future__ import annotations

import numpy as np
import pytest

from hpcsolve.core import backends
from hpcsolve.core.cases import load_case
from hpcsolve.core.errors import CaseError
from hpcsolve.lbm.boundaries import bouzidi
from hpcsolve.lbm import lattice
from hpcsolve.lbm.setup import build_setup
from hpcsolve.lbm.boundaries.force import momentum_exchange_force
from hpcsolve.lbm.flags import OUTLET, VELOCITY, WALL
from hpcsolve.lbm.steppers.stepper import LBMSetup, get_stepper
from hpcsolve.core.precision import FP16S, FP32, FP64, get_precision
from hpcsolve.run import run_case

POLICIES = [FP64, FP32, FP16S]


def channel(n: int, q_bottom: float, q_top: float, interpolated: bool, policy=FP64, steps: int = 3000,
            tau: float = 0.8, u_max: float = 0.05):
    """Channel between flat walls that cross the vertical links of the first/last fluid rows at
    q_bottom / q_top (so the walls lie off the half-way positions), n fluid rows, velocity inlet
    with the exact parabola of those walls, pressure outlet, started from that parabola.
    Returns (stepper, exact profile, fluid rows)."""
    nx, ny = 3 * n, n + 4
    y0, y1 = 2.5 - q_bottom, n + 1.5 + q_top       # wall surfaces, lattice units (cell j centre at j + 1/2)
    yc, xc = np.arange(ny) + 0.5, np.arange(nx) + 0.5
    exact = 4 * u_max * (yc - y0) * (y1 - yc) / (y1 - y0) ** 2
    rows = slice(2, n + 2)
    flags = np.zeros((ny, nx), np.uint8)
    flags[:, 0], flags[:, -1] = VELOCITY, OUTLET
    flags[:2, :], flags[n + 2:, :] = WALL, WALL
    bv = np.zeros((2, ny, nx))
    bv[0, rows, 0] = exact[rows]
    u0 = np.zeros((2, ny, nx))
    u0[0, rows, 1:-1] = exact[rows, None]
    bottom, top = flags == WALL, flags == WALL
    bottom[n + 2:], top[:2] = False, False

    def fraction(lower, upper):
        return lambda j, i, cx, cy: bouzidi.rectangle_fraction(xc[i], yc[j], cx, cy, lower, upper)

    links = None
    if interpolated:
        links = bouzidi.build_links(flags, [(bottom, fraction((-1e9, -1e9), (1e9, y0))),
                                            (top, fraction((-1e9, y1), (1e9, 1e9)))])
    setup = LBMSetup(flags=flags, relaxation_time=tau, collision="trt", policy=policy, boundary_velocity=bv,
                     initial_velocity=u0, links=links)
    stepper = get_stepper("numpy", setup)
    stepper.step(steps)
    return stepper, exact, rows


def profile_error(n: int, interpolated: bool) -> float:
    """Relative L2 error of the mass-flux profile rho u at mid-channel against the exact parabola,
    both normalized to unit flux (the inlet's discrete flux is not exactly the parabola's)."""
    stepper, exact, rows = channel(n, 0.2, 0.85, interpolated)
    rho, ux, _ = stepper.macroscopic()
    p = (rho * ux)[rows, ux.shape[1] // 2]
    e = exact[rows]
    p, e = p / p.sum(), e / e.sum()
    return float(np.linalg.norm(p - e) / np.linalg.norm(e))


def test_link_fractions_of_flat_walls():
    stepper, _, _ = channel(6, 0.2, 0.85, True, steps=0)
    links = stepper.setup.links
    np.testing.assert_allclose(np.unique(np.round(links.q, 12)), [0.2, 0.85])
    nx = stepper.setup.shape[1]
    # 3 links (directions 4, 7, 8 / 2, 5, 6) from each of the nx - 2 cells of the first and last fluid
    # rows; the two bottom diagonals (q = 0.2) whose far cell is the inlet/outlet column fall back
    assert links.fallback == 2
    assert len(links) == 6 * (nx - 2) - 2
    assert set(links.direction[links.q < 0.5].tolist()) == {4, 7, 8}
    np.testing.assert_allclose(links.a[links.q < 0.5], 0.4)
    np.testing.assert_allclose(links.a[links.q > 0.5], 1 / 1.7)


def test_offgrid_walls_poiseuille_second_order():
    simple = [profile_error(n, False) for n in (10, 20)]
    interp = [profile_error(n, True) for n in (10, 20)]
    order_simple = np.log2(simple[0] / simple[1])
    order_interp = np.log2(interp[0] / interp[1])
    # measured: simple 0.1020 -> 0.0519 (order 0.97), Bouzidi 0.01056 -> 0.00272 (order 1.96)
    assert 0.09 < simple[0] < 0.11 and 0.045 < simple[1] < 0.06
    assert interp[0] < 0.012 and interp[1] < 0.0031
    assert 0.8 < order_simple < 1.2
    assert 1.8 < order_interp < 2.2
    assert interp[0] < simple[0] / 8 and interp[1] < simple[1] / 15


def test_circle_links_lie_on_the_circle():
    """Every circle link's wall point x + q c_ib lies on the circle; q = 1/2 everywhere gives no links."""
    case = load_case("cases/cylinder_2d1.toml", ["lattice.resolution=10", "lattice.bounce_back=bouzidi"])
    _, geo, setup = build_setup(case, FP64)
    links = setup.links
    assert len(links) == 76 and links.fallback == 0  # D = 10: 100 links; 24 cross the circle half-way (it passes through cell corners (3, 4) dx etc.)
    x, y = geo.cell_centres()
    j, i = np.divmod(links.cell, geo.shape[1])
    dx = geo.dx
    px = x[i] + links.q * np.asarray(lattice.CX)[links.direction] * dx
    py = y[j] + links.q * np.asarray(lattice.CY)[links.direction] * dx
    np.testing.assert_allclose(np.hypot(px - 0.2, py - 0.2), 0.05, rtol=1e-12)
    assert 0.05 < links.q.min() and links.q.max() <= 1.0
    half = bouzidi.build_links(geo.flags, [(geo.obstacles[0], lambda j, i, cx, cy: np.full(j.size, 0.5))])
    assert half is None


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name)
def test_prepass_matches_per_link_loop(policy):
    """The vectorized pre-pass writes exactly the per-link Python values into the slots, and only there."""
    case = load_case("cases/cylinder_2d1.toml", ["lattice.resolution=10", "lattice.bounce_back=bouzidi"])
    _, _, setup = build_setup(case, policy)
    stepper = get_stepper("numpy", setup)
    stepper.step(300)  # a developed, non-trivial state
    g = stepper.populations()
    links = setup.links
    expected = bouzidi.reference_values(g, links, policy)
    a = g.copy()
    bouzidi.prepass(a, *links.device_arrays(policy.compute), policy)
    np.testing.assert_array_equal(a.reshape(-1)[links.slot], expected)
    untouched = np.ones(a.size, bool)
    untouched[links.slot] = False
    np.testing.assert_array_equal(a.reshape(-1)[untouched], g.reshape(-1)[untouched])
    changed = np.count_nonzero(a.reshape(-1)[links.slot] != g.reshape(-1)[links.slot])
    assert changed > 0.9 * len(links)


def test_prepass_two_phases_with_thin_gaps():
    """A one-cell fluid gap between two walls: q >= 1/2 links read partners that are other links'
    slots; the pre-pass must use the values from before the scatter."""
    ny, nx = 5, 6
    flags = np.zeros((ny, nx), np.uint8)
    flags[[0, 1, 3, 4], :] = WALL
    bottom = np.zeros((ny, nx), bool); bottom[:2] = True
    top = np.zeros((ny, nx), bool); top[3:] = True
    links = bouzidi.build_links(flags, [(bottom, lambda j, i, cx, cy: np.full(j.size, 0.7)),
                                        (top, lambda j, i, cx, cy: np.full(j.size, 0.9))])
    slots, partners = set(links.slot.tolist()), set(links.partner.tolist())
    assert slots & partners  # the case this test is about
    rng = np.random.default_rng(1)
    g = rng.normal(size=(lattice.Q, ny, nx))
    expected = bouzidi.reference_values(g, links, FP64)
    bouzidi.prepass(g, *links.device_arrays(np.float64), FP64)
    np.testing.assert_array_equal(g.reshape(-1)[links.slot], expected)


def test_force_uses_interpolated_links():
    """Momentum exchange with Bouzidi links: at q = 1/2 weights it equals simple bounce-back; with the
    real weights it sums c_ib (f*_ib + a f*_ib + b f*_partner) on the interpolated links."""
    case = load_case("cases/cylinder_2d1.toml", ["lattice.resolution=10", "lattice.bounce_back=bouzidi"])
    _, geo, setup = build_setup(case, FP64)
    stepper = get_stepper("numpy", setup)
    stepper.step(200)
    g = stepper.populations()
    mask = geo.obstacles[0]
    f_interp = momentum_exchange_force(g, setup, mask)
    plain = LBMSetup(flags=setup.flags, relaxation_time=setup.relaxation_time, collision=setup.collision,
                     boundary_velocity=setup.boundary_velocity)
    f_simple = momentum_exchange_force(g, plain, mask)
    lk = setup.links
    h = g.reshape(-1)
    v = lk.a * h[lk.slot] + lk.b * h[lk.partner]
    dx = np.sum(np.asarray(lattice.CX)[lk.direction] * (v - h[lk.slot]))
    dy = np.sum(np.asarray(lattice.CY)[lk.direction] * (v - h[lk.slot]))
    np.testing.assert_allclose(f_interp, (f_simple[0] + dx, f_simple[1] + dy), rtol=1e-12, atol=1e-15)
    assert abs(dx) > 1e-3 * abs(f_simple[0])   # the interpolation changes the force measurably
    assert stepper.force(mask) == f_interp


@pytest.mark.slow
def test_cylinder_2d1_drag_closer_with_bouzidi():
    """Slow (~50-95 s NumPy: two 6,000-step runs at D = 10): ``python -m pytest -m slow``. Fast counterparts in the
    default suite: the off-grid flat walls against the analytic parabola (test_offgrid_walls_poiseuille_second_order),
    the circle's link fractions (test_circle_links_lie_on_the_circle), the force with interpolated links against the
    momentum balance of the 2D-1 short run (tests/lbm/test_lbm_cases_cli.py) and test_cylinder_2d1_drag_short_run."""
    base = ["lattice.resolution=10", "time.end_time=15", "steady.enabled=false", "time.monitor_interval=500"]
    cd = {}
    for bb in ("simple", "bouzidi"):
        r = run_case("cases/cylinder_2d1.toml", "numpy", overrides=base + [f"lattice.bounce_back={bb}"], progress=False)
        cd[bb] = r.metrics["drag_coefficient"]
    # measured after 6000 steps: simple 5.646, Bouzidi 5.573 (Schafer-Turek 5.57 .. 5.59)
    assert 5.60 < cd["simple"] < 5.70
    assert 5.54 < cd["bouzidi"] < 5.60
    assert abs(cd["bouzidi"] - 5.58) < abs(cd["simple"] - 5.58)


def test_cylinder_2d1_drag_short_run():
    """The fast check of c_D on 2D-1 with interpolated bounce-back: D = 10 cells, smooth start over 2 s and the
    characteristic outlet (the sound of the start leaves instead of ringing), 1,800 steps to t = 4.5 s (~10-20 s NumPy).
    Schafer & Turek: c_D in [5.57, 5.59]. Measured here 5.560 (5.558 at t = 7 s); Bouzidi's own error at D = 10 is
    about -0.006 (the case file's long runs: 5.564 at D = 10, 5.567 at D = 20, 5.5726 at D = 80 on the GPU). Bounds
    [5.54, 5.59]: the published range with 0.03 (0.5 %, about twice the measured deficit) below it. The staircase
    (simple bounce-back) gives 5.632 on this run and fails the upper bound."""
    r = run_case("cases/cylinder_2d1.toml", "numpy", progress=False, overrides=[
        "lattice.resolution=10", "boundaries.ramp_time=2.0", "boundaries.outlet=characteristic", "time.end_time=4.5",
        "steady.enabled=false", "time.monitor_interval=100"])
    assert r.metrics["steps"] == 1800
    assert 5.54 < r.metrics["drag_coefficient"] < 5.59, r.metrics["drag_coefficient"]


def test_case_fields_and_bad_input():
    from pathlib import Path

    from hpcsolve.core.cases import parse_case_text

    text = Path("cases/cylinder_2d1.toml").read_text()
    text = text.replace("diameter = 0.1\n", 'diameter = 0.1\nbounce_back = "bouzidi"\n', 1)
    case = parse_case_text(text, ["lattice.resolution=10", "lattice.bounce_back=simple"])
    assert case.lattice.bounce_back == "simple" and case.obstacles[0].bounce_back == "bouzidi"
    _, geo, setup = build_setup(case, FP64)
    assert geo.interpolated == [0] and len(setup.links) == 76
    case = parse_case_text(text.replace('bounce_back = "bouzidi"', 'bounce_back = "simple"'),
                           ["lattice.resolution=10", "lattice.bounce_back=bouzidi"])
    assert build_setup(case, FP64)[2].links is None  # the obstacle's choice wins
    with pytest.raises(CaseError) as exc:
        load_case("cases/cylinder_2d1.toml", ["lattice.bounce_back=interpolated"])
    assert "bounce_back" in str(exc.value) and "bouzidi" in str(exc.value)


def test_backend_without_prepass_refused(monkeypatch):
    """A Stepper that does not run the pre-pass must not silently run a setup with links."""
    from hpcsolve.core.errors import BackendError
    from hpcsolve.lbm.steppers import kernels_numpy

    _, _, setup = build_setup(load_case("cases/cylinder_2d1.toml", ["lattice.resolution=10"]), FP64)
    assert setup.links is not None  # the shipped case uses bouzidi
    assert get_stepper("numpy", setup).bouzidi is not None
    monkeypatch.setattr(kernels_numpy.bouzidi, "has_links", lambda setup: False)
    with pytest.raises(BackendError, match="interpolated"):
        get_stepper("numpy", setup)


@pytest.mark.cudasim
@pytest.mark.parametrize("name", ["fp64", "fp32", "fp16s", "fp16c"])
def test_numba_prepass_matches_numpy(name):
    from numba import cuda

    policy = get_precision(name, "lbm")
    case = load_case("cases/cylinder_2d1.toml", ["lattice.resolution=10", "lattice.bounce_back=bouzidi",
                                                 "domain.length=0.5", "validation.reference=none"])
    _, _, setup = build_setup(case, policy)
    stepper = get_stepper("numpy", setup)
    stepper.step(30)
    g = stepper.populations()
    expected = g.copy()
    backends.get("numpy").piece("lbm.bouzidi_prepass")(setup.links, policy)(expected)
    pre = backends.get("numba-cuda").piece("lbm.bouzidi_prepass")(setup.links, policy)
    d = cuda.to_device(g.reshape(-1))
    pre(d)
    np.testing.assert_array_equal(d.copy_to_host(), expected.reshape(-1))
    assert np.count_nonzero(expected != g) > 0
