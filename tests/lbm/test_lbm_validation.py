"""Validation of the NumPy reference against analytic and published references (CPU, CI sizes)."""

import functools

import numpy as np
import pytest

from hpcsolve.run import run_case

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _tgv_error(n):
    # diffusive scaling: lattice velocity ~ 1/N keeps tau fixed (0.884), steps ~ N^2
    r = run_case("cases/taylor_green.toml", "numpy", overrides=[
        "physics.reynolds=10", f"lattice.resolution={n}", f"lattice.velocity={0.08 * 16 / n}",
        "time.end_time=0.2", "time.monitor_interval=1000"], progress=False)
    return r.metrics["velocity_rel_l2_error"]


def test_taylor_green_second_order_convergence():
    errors = [_tgv_error(n) for n in (16, 32, 64)]
    orders = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    # seen: errors 0.0173, 0.00428, 0.00108; orders 2.02, 1.98
    assert errors[-1] < 2e-3, errors
    assert np.all(np.abs(orders - 2.0) < 0.15), orders


@functools.lru_cache(maxsize=None)
def _poiseuille(collision: str, resolution: int):
    r = run_case("cases/poiseuille.toml", "numpy", overrides=[f"lattice.collision={collision}",
                                                               f"lattice.resolution={resolution}"], progress=False)
    assert r.status == "converged", r.message
    return r.metrics["profile_rel_l2_error"]


@pytest.mark.parametrize("collision", ["bgk", "trt"])
def test_poiseuille_profile_error_bound(collision):
    error = _poiseuille(collision, 16)
    # seen: 0.0035 (BGK), 0.0040 (TRT) at 16 cells across the channel; the remainder is the
    # inlet's second-order flux defect next to the walls (see reference.reference_metrics)
    assert error < 0.006, error


def test_poiseuille_error_decreases_with_resolution():
    """8 -> 16 cells across the channel (BGK, each run to its steady state): 0.0136 -> 0.0035, order 1.96. The bound,
    ratio > 3 (order > 1.58), fails a first-order wall or inlet (ratio ~2); the 16 -> 32 step is the slow test below."""
    ratio = _poiseuille("bgk", 8) / _poiseuille("bgk", 16)
    assert ratio > 3.0, ratio


@pytest.mark.slow
def test_poiseuille_error_decreases_with_resolution_fine():
    """16 -> 32 cells (~15-40 s NumPy): the error falls by 2.6-3 (seen); the inlet's second-order flux defect next to
    the walls keeps it from the full factor 4 there."""
    ratio = _poiseuille("bgk", 16) / _poiseuille("bgk", 32)
    assert ratio > 2.0, ratio  # seen ~2.6-3 (H 16 -> 32)


def test_cavity_re100_against_ghia():
    r = run_case("cases/lid_driven_cavity.toml", "numpy", overrides=["lattice.resolution=32"], progress=False)
    assert r.status == "converged"
    # seen at 32 cells: u 0.0112, v 0.0087 (lid-speed units); 0.0056 / 0.0038 at 64 cells
    assert r.metrics["ghia_u_max_abs_diff"] < 0.015, r.metrics
    assert r.metrics["ghia_v_max_abs_diff"] < 0.012, r.metrics


def test_fp32_vs_fp64_small_but_nonzero():
    over = ["lattice.resolution=32", "time.steps=1500", "steady.enabled=false"]
    r64 = run_case("cases/lid_driven_cavity.toml", "numpy", "fp64", overrides=over, progress=False)
    r32 = run_case("cases/lid_driven_cavity.toml", "numpy", "fp32", overrides=over, progress=False)
    u64, u32 = r64.fields["velocity"], r32.fields["velocity"]
    diff = np.linalg.norm(u32 - u64) / np.linalg.norm(u64)
    print(f"fp32 vs fp64 relative L2 velocity difference: {diff:.3e}")
    assert 0 < diff < 1e-4, diff
