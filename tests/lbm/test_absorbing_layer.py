"""The absorbing layer (``[boundaries.absorbing_layer]``, hpcsolve/lbm/boundaries/layer.py): a larger bulk viscosity
near the outlet that damps sound while shear viscosity, mass and momentum stay.

Checked on the NumPy reference against linear theory: in 2D a sound wave of wavenumber k decays at
alpha = k^2 (nu + zeta) / 2 (isothermal Navier-Stokes), a shear wave at nu k^2. The collision's own bulk
viscosity equals nu (BGK / TRT in 2D); the layer's full strength sets zeta = viscosity_ratio * nu. The GPU and
simulator kernels are compared with this reference in test_cudasim_lbm.py / test_gpu_lbm.py."""

from __future__ import annotations

import numpy as np
import pytest

from hpcsolve.core.cases import load_case
from hpcsolve.core.errors import CaseError
from hpcsolve.lbm import lattice, physics
from hpcsolve.lbm.boundaries.layer import AbsorbingLayer, bulk_rate
from hpcsolve.lbm.setup import build_setup
from hpcsolve.lbm.steppers.stepper import LBMSetup, get_stepper
from hpcsolve.core.precision import FP64

TAU, N, AMP = 0.8, 64, 1e-4
NU = physics.viscosity_from_tau(TAU)
K = 2 * np.pi / N


def _uniform_layer(ratio: float, collision: str) -> AbsorbingLayer | None:
    """A layer of full strength everywhere (t = 1 on every cell), or None for ratio 1."""
    if ratio == 1.0:
        return None
    omega_plus = LBMSetup(np.zeros((2, 2), np.uint8), TAU, collision=collision).omegas[0]
    return AbsorbingLayer(c0=1.0, kx=0.0, ky=0.0, strength=omega_plus - bulk_rate(ratio, TAU))


def _decay_rate(series: np.ndarray) -> float:
    """-slope of log(series) against the step (a least-squares line)."""
    t = np.arange(series.size)
    return -np.polyfit(t, np.log(series), 1)[0]


def _sound_decay(ratio: float, collision: str = "bgk", steps: int = 600) -> float:
    """Decay rate of a standing sound wave along x in a periodic box: the energy-like rho_k^2 + (u_k / c_s)^2 of the
    mode decays at 2 alpha without oscillating."""
    x = np.arange(N) + 0.5
    rho = np.broadcast_to(1.0 + AMP * np.cos(K * x), (4, N)).copy()
    st = get_stepper("numpy", LBMSetup(np.zeros((4, N), np.uint8), TAU, collision=collision, policy=FP64,
                                       initial_density=rho, absorbing_layer=_uniform_layer(ratio, collision)))
    c, s = np.cos(K * x), np.sin(K * x)
    energy = []
    for _ in range(steps):
        st.step(1)
        rho_t, ux, _ = st.macroscopic()
        rk = 2 / N * (rho_t[0] - 1.0) @ c
        uk = 2 / N * ux[0] @ s
        energy.append(rk * rk + uk * uk / lattice.CS2)
    return _decay_rate(np.array(energy)[100:]) / 2


@pytest.mark.parametrize("collision", ["bgk", "trt"])
def test_sound_decays_at_the_rate_of_shear_plus_bulk_viscosity(collision):
    alpha_plain = _sound_decay(1.0, collision)
    alpha_layer = _sound_decay(10.0, collision)
    # the collision's own bulk viscosity equals nu: alpha = nu k^2
    assert alpha_plain == pytest.approx(K * K * NU, rel=0.03)
    # the layer: zeta = 10 nu, alpha = k^2 (nu + zeta) / 2 = 5.5 nu k^2
    assert alpha_layer == pytest.approx(K * K * (NU + 10 * NU) / 2, rel=0.03)


def test_shear_wave_is_untouched_by_the_layer():
    """A shear wave (div u = 0) decays at nu k^2 with or without the layer: the layer leaves the shear viscosity."""
    y = np.arange(N) + 0.5
    u = np.zeros((2, N, 4))
    u[0] = (0.01 * np.sin(K * y))[:, None]
    amps = {}
    for ratio in (1.0, 40.0):
        st = get_stepper("numpy", LBMSetup(np.zeros((N, 4), np.uint8), TAU, collision="trt", policy=FP64,
                                           initial_velocity=u, absorbing_layer=_uniform_layer(ratio, "trt")))
        a = []
        for _ in range(400):
            st.step(1)
            a.append(2 / N * st.macroscopic()[1][:, 0] @ np.sin(K * y))
        amps[ratio] = np.array(a)
    assert _decay_rate(amps[1.0]) == pytest.approx(NU * K * K, rel=0.01)
    # (what differs is second order in u: 1e-6 of the amplitude at u = 0.01, ratio 40)
    assert np.abs(amps[40.0] - amps[1.0]).max() <= 1e-5 * np.abs(amps[1.0]).max()


def test_layer_conserves_mass_and_momentum_and_changes_the_state():
    rng = np.random.default_rng(4)
    rho = 1.0 + 0.01 * rng.standard_normal((12, 16))
    u = 0.03 * rng.standard_normal((2, 12, 16))
    kw = dict(flags=np.zeros((12, 16), np.uint8), relaxation_time=0.6, collision="trt", policy=FP64,
              initial_density=rho, initial_velocity=u)
    plain = get_stepper("numpy", LBMSetup(**kw))
    layer = get_stepper("numpy", LBMSetup(**kw, absorbing_layer=AbsorbingLayer(c0=0.0, kx=1 / 8, ky=0.0,
                                                                             strength=1.2)))
    plain.step(50)
    layer.step(50)
    rho1, ux, uy = layer.macroscopic()
    assert abs(rho1.sum() - rho.sum()) <= 1e-12 * rho.size
    # momentum: the random initial momentum, conserved in a periodic box
    assert abs((rho1 * ux).sum() - (rho * u[0]).sum()) <= 1e-12 * rho.size
    assert abs((rho1 * uy).sum() - (rho * u[1]).sum()) <= 1e-12 * rho.size
    assert np.abs(layer.populations() - plain.populations()).max() > 1e-5


def _cylinder(*overrides):
    return load_case("cases/cylinder_2d1.toml", ["lattice.resolution=10", *overrides])


def test_case_layer_profile_along_the_outlet():
    """width 1.0 m, ramp 0.2 m on 2D-1 (outlet on the right, length 2.2 m): no layer further than 1.0 m from the
    outlet, full strength within 0.8 m, (t)^2 in between; the strength gives the requested bulk viscosity."""
    case = _cylinder("boundaries.absorbing_layer.width=1.0", "boundaries.absorbing_layer.ramp=0.2",
                     "boundaries.absorbing_layer.viscosity_ratio=20.0")
    _, geo, setup = build_setup(case, FP64)
    lay = setup.absorbing_layer
    x, _ = geo.cell_centres()
    cols = np.arange(x.size)
    coef = lay.coefficient(cols, np.zeros_like(cols), np.float64)
    d = case.domain.length - x                   # distance of each column's centres from the outlet side
    inside = (d > 0) & (d < case.domain.length)
    assert np.all(coef[inside & (d > 1.0 + 1e-9)] == 0)
    assert np.allclose(coef[inside & (d < 0.8 - 1e-9)], lay.strength, rtol=1e-12)
    ramp = inside & (d > 0.8) & (d < 1.0)
    assert ramp.any()
    assert np.allclose(coef[ramp], lay.strength * ((1.0 - d[ramp]) / 0.2) ** 2, rtol=1e-9)
    tau = setup.relaxation_time
    s_b = setup.omegas[0] - lay.strength
    assert (1 / s_b - 0.5) * lattice.CS2 == pytest.approx(20.0 * physics.viscosity_from_tau(tau), rel=1e-12)


@pytest.mark.parametrize("overrides, field", [
    (["boundaries.absorbing_layer.width=3.0"], "width"),
    (["boundaries.absorbing_layer.width=0.5", "boundaries.absorbing_layer.ramp=0.6"], "ramp"),
    (["boundaries.absorbing_layer.width=0.5", "boundaries.absorbing_layer.viscosity_ratio=0.5"], "viscosity_ratio"),
    (["boundaries.absorbing_layer.width=-1.0"], "width"),
])
def test_bad_layer_is_refused_naming_the_field(overrides, field):
    with pytest.raises(CaseError) as e:
        _cylinder(*overrides)
    assert "absorbing_layer" in str(e.value) and field in str(e.value)


def test_layer_needs_one_outlet():
    with pytest.raises(CaseError) as e:
        load_case("cases/lid_driven_cavity.toml", ["boundaries.absorbing_layer.width=0.1"])
    assert "absorbing_layer" in str(e.value) and "outlet" in str(e.value)


def test_no_layer_by_default():
    _, _, setup = build_setup(_cylinder(), FP64)
    assert setup.absorbing_layer is None


def test_strong_layer_stays_stable_at_low_viscosity():
    """tau 0.5745 (omega+ 1.74), bulk rate 0.04 (zeta = 340 nu), Mach 0.17 mean flow with shear waves and noise:
    the Hermite-projected bulk relaxation stays bounded (the orthogonal MRT vector of the same mode blew up here
    within 100 steps for any bulk rate below 0.5; docs/design/lbm_algorithm.md)."""
    n, tau = 32, 0.5745
    y, x = np.mgrid[0:n, 0:n]
    rng = np.random.default_rng(0)
    u = np.stack([0.1 + 0.05 * np.sin(2 * np.pi * y / n), 0.05 * np.sin(2 * np.pi * x / n)])
    rho = 1.0 + 1e-3 * rng.standard_normal((n, n))
    omega_plus = LBMSetup(np.zeros((2, 2), np.uint8), tau, collision="trt").omegas[0]
    st = get_stepper("numpy", LBMSetup(np.zeros((n, n), np.uint8), tau, collision="trt", policy=FP64,
                                       initial_density=rho, initial_velocity=u,
                                       absorbing_layer=AbsorbingLayer(1.0, 0.0, 0.0, omega_plus - 0.04)))
    st.step(1500)
    rho1, ux, uy = st.macroscopic()
    assert st.finite() and np.abs(rho1 - 1).max() < 0.05 and np.abs(ux).max() < 0.2
