"""The 16-bit guard's checks in the stepper's array module (``Stepper.save_state`` / ``restore_state`` /
``state_array`` / ``load_state_array`` / ``velocity_array``; hpcsolve/lbm/guard.py): on NumPy in CI, on CuPy and
Numba-CUDA on the device (``-m gpu``). The array path gives the host path's figures, leaves the run's trajectory
bit for bit as without the check (two buffers and in place at an odd step), and on the GPU keeps the run's buffers
and step graphs."""

from pathlib import Path

import numpy as np
import pytest

from hpcsolve.core.cases import load_case
from hpcsolve.core.precision import FP16C, FP16S
from hpcsolve.lbm import guard as lbm_guard
from hpcsolve.lbm.setup import build_setup
from hpcsolve.lbm.steppers.stepper import SavedState, get_stepper

CASES = Path(__file__).resolve().parents[2] / "cases"
GPU_BACKENDS = ["cupy", "numba-cuda"]


def _tiny_cylinder(*more):
    """2D-2 at D = 10 cells (220 x 43): walls, inlet, outlet, interpolated bounce-back, inside the smooth start."""
    return load_case(CASES / "cylinder_2d2.toml", ["lattice.resolution=10", "lattice.velocity=0.05",
                                                    "physics.reynolds=20", "validation.reference='none'",
                                                    "boundaries.ramp_time=0.025", "time.end_time=1.0", *more])


def _stepper(backend, setup):
    if backend != "numpy":
        from hpcsolve.core import backends

        status = backends.probe(backend)
        if not status.available or status.simulator:
            pytest.skip(f"{backend}: {status.reason}")
    return get_stepper(backend, setup)


def _figures(backend, policy, streaming="two-buffer"):
    """The checks at steps 10 and 31 of the array path and of the host path, each from the same state."""
    case = _tiny_cylinder(f"lattice.streaming='{streaming}'")
    derived, _, setup = build_setup(case, policy)
    out = {}
    for path in ("arrays", "host"):
        stepper = _stepper(backend, setup)
        guard = lbm_guard.PrecisionGuard(case, policy, backend, setup, derived, window=16)
        seen = stepper if path == "arrays" else lbm_guard.HostView(stepper)
        out[path] = []
        for point in (10, 31):
            stepper.step(point - stepper.time_step)
            out[path].append(guard.check(seen, point))
    return out


def _assert_same_figures(out, rtol):
    for a, h in zip(out["arrays"], out["host"]):
        assert a.step == h.step and a.window == h.window == 16
        for name in ("error", "short_error", "change", "floor", "divergence", "growth"):
            assert getattr(a, name) == pytest.approx(getattr(h, name), rel=rtol, abs=1e-300), name
        assert a.change > 0 and a.error > 0        # a real comparison, not 0 == 0


def _assert_rewinds_bitwise(backend, policy, streaming, points=(10, 25, 41)):
    """Checks at ``points`` (odd: in place at the odd layout) leave the run as a run without them."""
    case = _tiny_cylinder(f"lattice.streaming='{streaming}'")
    derived, geo, setup = build_setup(case, policy)
    plain, guarded = _stepper(backend, setup), _stepper(backend, setup)
    assert guarded.array_module is not None
    guard = lbm_guard.PrecisionGuard(case, policy, backend, setup, derived, window=8)
    for point in points:
        plain.step(point - plain.time_step)
        guarded.step(point - guarded.time_step)
        guard.check(guarded, point)
        assert guarded.time_step == point
    plain.step(15)
    guarded.step(15)
    assert [c.step for c in guard.checks] == list(points)
    assert all(np.isfinite(c.divergence) and c.change > 0 for c in guard.checks)
    assert np.array_equal(plain.populations(), guarded.populations())
    return guarded


@pytest.mark.parametrize("policy", [FP16S, FP16C], ids=lambda p: p.name)
def test_numpy_array_path_gives_the_host_paths_figures(policy):
    _assert_same_figures(_figures("numpy", policy), rtol=1e-10)


@pytest.mark.parametrize("policy", [FP16S, FP16C], ids=lambda p: p.name)
def test_numpy_array_path_leaves_the_run_bitwise_unchanged(policy):
    _assert_rewinds_bitwise("numpy", policy, "two-buffer")


def test_numpy_save_and_restore_keep_the_buffers_and_the_state():
    case = _tiny_cylinder()
    _, _, setup = build_setup(case, FP16S)
    stepper = get_stepper("numpy", setup)
    stepper.step(7)
    before, buffers = stepper.populations(), (stepper.g, stepper.g_next)
    saved = stepper.save_state()
    assert isinstance(saved, SavedState) and saved.time_step == 7
    stepper.step(5)
    assert not np.array_equal(stepper.populations(), before)
    stepper.restore_state(saved)
    assert stepper.time_step == 7 and stepper.g is buffers[0] and stepper.g_next is buffers[1]
    assert np.array_equal(stepper.populations(), before)
    with pytest.raises(Exception, match="populations"):
        stepper.load_state_array(before[:, :-1], 7)


@pytest.mark.gpu
@pytest.mark.parametrize("policy", [FP16S, FP16C], ids=lambda p: p.name)
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_gpu_array_path_gives_the_host_paths_figures(backend, policy):
    """On the device the rms sums run in another order than on the host: equal to 1e-9 relative."""
    _assert_same_figures(_figures(backend, policy), rtol=1e-9)


@pytest.mark.gpu
@pytest.mark.parametrize("streaming", ["two-buffer", "in-place"])
@pytest.mark.parametrize("policy", [FP16S, FP16C], ids=lambda p: p.name)
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_gpu_check_leaves_the_run_bitwise_unchanged(backend, policy, streaming):
    guarded = _assert_rewinds_bitwise(backend, policy, streaming)
    assert guarded.in_place == (streaming == "in-place")


@pytest.mark.gpu
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_gpu_check_keeps_the_run_buffers_and_step_graphs(backend):
    """A check rewinds into the run's own buffers: the graphs recorded before it are still there after it (none is
    recorded again), and the shadow keeps its buffers from one check to the next."""
    case = _tiny_cylinder("lattice.streaming='two-buffer'")
    derived, _, setup = build_setup(case, FP16S)
    stepper = _stepper(backend, setup)
    if not stepper.graphs.enabled:
        pytest.skip(f"{backend}: no CUDA graphs here ({stepper.graphs.error})")
    guard = lbm_guard.PrecisionGuard(case, FP16S, backend, setup, derived, window=64)
    stepper.step(300)                        # past the smooth start; graphs of 64 steps recorded and replayed
    buffers, recorded = (stepper.a, stepper.b), dict(stepper.graphs._cache)
    guard.check(stepper, stepper.time_step)
    shadow_buffers = (guard._shadow.a, guard._shadow.b)
    assert stepper.a is buffers[0] and stepper.b is buffers[1] and stepper.time_step == 300
    captured = {k: v[1] for k, v in recorded.items() if v[1] is not None}
    assert captured                          # graphs had been recorded before the check
    assert all(stepper.graphs._cache[k][1] is replay for k, replay in captured.items())
    stepper.step(300)
    guard.check(stepper, stepper.time_step)
    assert {id(guard._shadow.a), id(guard._shadow.b)} == {id(b) for b in shadow_buffers}


@pytest.mark.gpu
def test_numba_run_gets_a_cupy_shadow_with_the_figures_of_a_numba_shadow():
    """Numba-CUDA with CuPy: the shadow is a CuPy stepper (``array_twin``); its figures equal those of a Numba
    shadow (the float32 kernels of the two backends agree to ~1e-7 of the velocity; the error compared is ~1e-3 of
    it, so the figures agree to ~1e-4)."""
    pytest.importorskip("cupy")
    case = _tiny_cylinder("lattice.streaming='two-buffer'")
    derived, _, setup = build_setup(case, FP16S)
    stepper = _stepper("numba-cuda", setup)
    assert stepper.array_module is not None
    own = lbm_guard.PrecisionGuard(case, FP16S, "numba-cuda", setup, derived, window=16)
    numba = lbm_guard.PrecisionGuard(case, FP16S, "numba-cuda", setup, derived, window=16,
                                     stepper_factory=lambda s: get_stepper("numba-cuda", s))
    stepper.step(20)
    a, b = own.check(stepper, 20), numba.check(stepper, 20)
    assert type(own._shadow).__name__ == "CupyStepper" and type(numba._shadow).__name__ == "NumbaCudaStepper"
    for name in ("error", "short_error", "change", "divergence", "growth"):
        assert getattr(a, name) == pytest.approx(getattr(b, name), rel=1e-2), name
    assert a.error > 0


def test_the_shadow_is_the_array_twin_of_the_run_stepper():
    """The guard's shadow is built where the run's state lives (``Stepper.array_twin``; the registry's
    ``owner_of`` the array module): on NumPy a float32 NumPy stepper with two buffers."""
    from hpcsolve.core import backends

    assert backends.owner_of(np) is backends.get("numpy")
    case = _tiny_cylinder()
    derived, _, setup = build_setup(case, FP16C)
    stepper = get_stepper("numpy", setup)
    guard = lbm_guard.PrecisionGuard(case, FP16C, "numpy", setup, derived, window=8)
    assert guard.prepare(stepper) >= 0.0 and stepper.time_step == 0
    shadow = guard._shadow
    assert type(shadow) is type(stepper) and shadow.policy.name == "fp32" and shadow.setup.in_place is False
    assert np.array_equal(stepper.populations(), setup.initial_populations())
