"""Core checks of the NumPy reference step and the shared physics functions."""

import numpy as np
import pytest

from hpcsolve.lbm import lattice, physics
from hpcsolve.lbm.flags import FLUID, OUTLET, VELOCITY, WALL
from hpcsolve.lbm.steppers.stepper import LBMSetup, get_stepper
from hpcsolve.core.precision import FP16S, FP32, FP64


def _tgv_setup(n, u0, tau, collision="bgk", policy=FP64):
    k = 2 * np.pi / n
    x = np.arange(n)
    X, Y = np.meshgrid(x, x)
    ux = -u0 * np.cos(k * X) * np.sin(k * Y)
    uy = u0 * np.sin(k * X) * np.cos(k * Y)
    rho = 1 + 3 * (-u0 ** 2 / 4 * (np.cos(2 * k * X) + np.cos(2 * k * Y)))
    setup = LBMSetup(flags=np.zeros((n, n), np.uint8), relaxation_time=tau, collision=collision, policy=policy,
                     initial_density=rho, initial_velocity=np.stack([ux, uy]))
    return setup, ux, uy, k


@pytest.mark.parametrize("collision", ["bgk", "trt"])
def test_periodic_taylor_green_decays_like_analytic(collision):
    setup, ux, uy, k = _tgv_setup(32, 0.02, 0.8, collision)
    st = get_stepper("numpy", setup)
    st.step(500)
    rho, u, v = st.macroscopic()
    decay = np.exp(-2 * physics.viscosity_from_tau(0.8) * k * k * 500)
    err = np.sqrt(((u - ux * decay) ** 2 + (v - uy * decay) ** 2).sum() / (((ux ** 2 + uy ** 2) * decay ** 2).sum()))
    assert err < 0.01, err  # seen 0.0084 (BGK), 0.0036 (TRT)
    assert abs(rho.sum() - setup.initial_density.sum()) < 1e-9  # mass exactly conserved (fp64)


def _cavity_setup(n=24, lid=0.1, tau=0.8, policy=FP64):
    flags = np.zeros((n + 2, n + 2), np.uint8)
    flags[0, :] = flags[:, 0] = flags[:, -1] = WALL
    flags[-1, :] = VELOCITY
    bv = np.zeros((2, n + 2, n + 2))
    bv[0, -1, :] = lid
    return LBMSetup(flags=flags, relaxation_time=tau, boundary_velocity=bv, policy=policy)


def test_walled_cavity_conserves_mass_and_is_driven_by_lid():
    setup = _cavity_setup()
    st = get_stepper("numpy", setup)
    st.step(400)
    rho, u, v = st.macroscopic()
    fluid = setup.flags == FLUID
    assert abs(rho[fluid].sum() - fluid.sum()) < 1e-10  # bounce-back and a tangential lid conserve mass
    assert u[-2, 1:-1].mean() > 0.03      # fluid under the lid follows it
    assert u[1:-1, 13].min() < -0.005     # return flow lower down
    assert np.count_nonzero(st.populations()[:, ~fluid]) == 0
    assert st.finite()


def test_outlet_channel_runs_stable_and_conserves_flux_approximately():
    ny, nx = 12, 40
    flags = np.zeros((ny, nx), np.uint8)
    flags[0, :] = flags[-1, :] = WALL
    flags[1:-1, 0] = VELOCITY
    flags[1:-1, -1] = OUTLET
    bv = np.zeros((2, ny, nx))
    h = ny - 2
    yc = np.arange(1, ny - 1) - 0.5
    bv[0, 1:-1, 0] = 4 * 0.05 * yc * (h - yc) / h ** 2
    st = get_stepper("numpy", LBMSetup(flags=flags, relaxation_time=0.8, boundary_velocity=bv, collision="trt"))
    st.step(3000)
    rho, u, v = st.macroscopic()
    q_in = bv[0, 1:-1, 0].sum()
    q_mid = (rho * u)[1:-1, nx // 2].sum()
    assert abs(q_mid / q_in - 1) < 0.02, q_mid / q_in
    assert abs(rho[1:-1, -2].mean() - 1) < 2e-3  # outlet holds rho ~ 1


def test_physics_float32_stays_float32_under_numba():
    numba = pytest.importorskip("numba")
    P = physics.physics_for(np.float32, jit=numba.njit)
    h = tuple(np.float32(0.01 * i) for i in range(9))
    P.collide_trt(h, np.float32(1.2), np.float32(1.1))
    sig = P.collide_trt.nopython_signatures[0]
    assert str(sig.return_type) == "UniTuple(float32 x 9)"
    # and the jitted result equals the NumPy-evaluated one bit for bit here (same operations)
    Pn = physics.physics_for(np.float32)
    a = np.array(P.collide_bgk(h, np.float32(1.3)), dtype=np.float32)
    b = np.array(Pn.collide_bgk(tuple(np.array([x]) for x in h), np.float32(1.3)), dtype=np.float32)[:, 0]
    assert np.max(np.abs(a - b)) <= 1e-9


def test_equilibrium_moments_roundtrip():
    P = physics.physics_for(np.float64)
    e = P.equilibrium(0.01, 0.05, -0.03)
    drho, ux, uy = P.moments(e)
    assert abs(drho - 0.01) < 1e-15 and abs(ux - 0.05) < 1e-15 and abs(uy + 0.03) < 1e-15


@pytest.mark.parametrize("policy", [FP32, FP16S])
def test_low_precision_close_to_fp64_on_cavity(policy):
    ref = get_stepper("numpy", _cavity_setup())
    low = get_stepper("numpy", _cavity_setup(policy=policy))
    ref.step(200)
    low.step(200)
    u_ref = np.hypot(*ref.macroscopic()[1:])
    u_low = np.hypot(*low.macroscopic()[1:])
    diff = np.linalg.norm(u_low - u_ref) / np.linalg.norm(u_ref)
    assert 0 < diff < (1e-4 if policy is FP32 else 2e-2), diff
    assert low.populations().dtype == policy.storage


def test_lattice_constants():
    assert sum(lattice.WEIGHTS) == pytest.approx(1.0, abs=1e-15)
    assert all(lattice.CX[lattice.OPPOSITE[i]] == -lattice.CX[i] for i in range(9))


# -- smooth start (boundary velocities ramped over setup.ramp_steps) ---------------------------------

def test_ramp_factor_is_a_smooth_monotone_start():
    R = 40
    s = np.array([physics.ramp_factor(k, R) for k in range(0, R + 5)])
    assert s[0] == 0.0 and s[R] == 1.0 and np.all(s[R:] == 1.0)
    assert abs(s[R // 2] - 0.5) < 1e-15
    assert np.all(np.diff(s) >= 0)
    # C1 at both ends: the first and last increments are O(1/R^2), not O(1/R)
    assert s[1] < 5 / R**2 and 1 - s[R - 1] < 5 / R**2
    assert physics.ramp_factor(3, 0) == 1.0


def test_ramped_step_uses_the_scaled_boundary_velocity():
    """Step k of a smooth start equals a plain step with boundary velocities ramp_factor(k) * u_w."""
    from lbm_gpu_cases import channel

    R = 6
    base = channel(nx=12, ny=8, collision="trt", policy=FP64)
    ramped = get_stepper("numpy", LBMSetup(**{**base.__dict__, "ramp_steps": R}))
    for k in range(1, 4):
        g0 = ramped.populations()
        ramped.step(1)
        plain = get_stepper("numpy", LBMSetup(**{**base.__dict__, "boundary_velocity":
                                                 base.boundary_velocity * physics.ramp_factor(k, R)}))
        plain.load_populations(g0, k - 1)
        plain.step(1)
        assert np.array_equal(ramped.populations(), plain.populations())
    ramped.step(R)   # past the ramp: full boundary velocities again
    full = get_stepper("numpy", base)
    full.load_populations(ramped.populations(), ramped.time_step)
    ramped.step(2)
    full.step(2)
    assert np.array_equal(ramped.populations(), full.populations())


def _plug_channel(ramp_steps, nx=80, ny=4):
    flags = np.zeros((ny, nx), np.uint8)   # periodic in y: no walls, so sound is damped by viscosity only
    flags[:, 0] = VELOCITY
    flags[:, -1] = OUTLET
    bv = np.zeros((2, ny, nx))
    bv[0, :, 0] = 0.05
    return LBMSetup(flags=flags, relaxation_time=0.8, collision="trt", boundary_velocity=bv, ramp_steps=ramp_steps)


def test_smooth_start_avoids_the_standing_sound_wave():
    """An impulsive start leaves a quarter-wave density oscillation between the velocity inlet and
    the pressure outlet (period 4 L / c_s); a ramp over 4 periods leaves it >= 10x smaller."""
    nx = 80
    period = int(4 * (nx - 2) / np.sqrt(lattice.CS2))    # 540 steps
    ramp = 4 * period
    amplitude = {}
    for r in (0, ramp):
        st = get_stepper("numpy", _plug_channel(r, nx))
        st.step(ramp)
        trace = []
        for _ in range(2 * period // 10):
            st.step(10)
            trace.append(st.macroscopic()[0][:, nx // 4].mean())
        amplitude[r] = np.ptp(trace)
    print(amplitude)
    assert amplitude[0] > 1e-4                          # the impulsive start rings
    assert amplitude[ramp] < amplitude[0] / 10, amplitude


def test_restart_inside_the_smooth_start_continues_the_ramp():
    """A stepper restored mid-ramp (checkpoint restart) sets the ramp factor from its time step: the
    run continues bit for bit as without the restart."""
    from lbm_gpu_cases import channel

    base = channel(nx=12, ny=8, collision="trt", policy=FP32)
    setup = LBMSetup(**{**base.__dict__, "ramp_steps": 6})
    whole = get_stepper("numpy", setup)
    whole.step(3)
    g3 = whole.populations()
    whole.step(5)
    restarted = get_stepper("numpy", setup)
    restarted.load_populations(g3, 3)
    restarted.step(5)
    assert np.array_equal(restarted.populations(), whole.populations())
    assert restarted.velocity_scale == 1.0
