"""What a new user trips over in an LBM run: a steady tolerance the precision cannot reach (the run stops at the
stall and says so), and a Ctrl-C that answers at once with what the run now does."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from hpcsolve import cli
from hpcsolve.core import interrupts
from hpcsolve.core.precision import get_precision
from hpcsolve.core.results import read_result_folder
from hpcsolve.lbm import monitor as lbm_monitor
from hpcsolve.lbm import runner as lbm_runner

ROOT = Path(__file__).parents[2]
CAVITY = ROOT / "cases" / "lid_driven_cavity.toml"
POISEUILLE = ROOT / "cases" / "poiseuille.toml"
FP32_EPS = lbm_monitor.storage_resolution(get_precision("fp32"))
# the steady checks of `hpcsolve run cases/poiseuille.toml --precision fp32` (numpy), steps 1000..10000, and the
# growth exponents of checks 2000..9000 (each reference compared half-way and at its check; measured 2026-12-07)
POISEUILLE_FP32 = [1.0, 0.0498, 0.00278, 1.55e-4, 9.01e-6, 3.41e-7, 2.03e-7, 2.34e-7, 2.39e-7, 1.86e-7]
POISEUILLE_FP32_GROWTH = [0.019, -0.003, -0.028, 0.092, -0.097, -0.059, 0.229, 0.123]
FLOW = 320          # Poiseuille at 16 cells: L / U = 1 s = 320 steps


def _monitor(changes, growths=None):
    m = object.__new__(lbm_monitor.Monitor)
    m.steady_checks = [(1000 * (i + 1), c) for i, c in enumerate(changes)]
    growths = POISEUILLE_FP32_GROWTH if growths is None else growths
    m.steady_growth = {1000 * (i + 2): g for i, g in enumerate(growths[:len(changes) - 1])}
    return m


def test_the_fp32_poiseuille_steady_change_stalls_from_step_7000():
    stall = lambda m, tol=1e-7, **kw: m.steady_stall(tol, FP32_EPS, **{"total_steps": 12800, "flow_steps": FLOW, **kw})
    assert stall(_monitor(POISEUILLE_FP32[:8])) is None       # 2.3e-7 > 0.5 x 3.4e-7: not yet
    assert stall(_monitor(POISEUILLE_FP32[:9])) == {"from_step": 7000, "level": 2.03e-7, "highest": 2.39e-7,
                                                     "growth": 0.229}
    # a change still decreasing, one under the tolerance, or one stalled far above fp32's resolution is no stall
    assert stall(_monitor([1e-3, 1e-4, 4e-5, 2e-5, 1e-5])) is None
    assert stall(_monitor(POISEUILLE_FP32[:9]), 3e-7) is None
    assert stall(_monitor([0.5, 0.02, 0.03, 0.02, 0.025]), 1e-3) is None
    assert lbm_monitor.storage_resolution(get_precision("fp16c")) == 2.0**-11


@pytest.mark.parametrize("why, growths, kw", [
    ("a change that grows with the interval (a developing flow)", [0.0] * 6 + [0.9, 0.1], {}),
    ("a random walk of the rounding (g = 1/2)", [0.0] * 6 + [0.5, 0.5], {}),
    ("a check without a peek (unmeasured)", [0.0] * 5 + [None, 0.0, 0.0], {}),
    ("inside the first quarter of the run", POISEUILLE_FP32_GROWTH, {"total_steps": 36001}),
    ("a window shorter than two flow times", POISEUILLE_FP32_GROWTH, {"flow_steps": 1501}),
])
def test_a_plateau_is_no_stall_unless_measured_as_noise(why, growths, kw):
    m = _monitor(POISEUILLE_FP32[:9], [g for g in growths])
    m.steady_growth = {k: g for k, g in m.steady_growth.items() if g is not None}
    args = {"total_steps": 12800, "flow_steps": FLOW, **kw}
    assert m.steady_stall(1e-7, FP32_EPS, **args) is None, why
    # the same checks with noise-like growths (and the other conditions met) are a stall
    assert _monitor(POISEUILLE_FP32[:9]).steady_stall(1e-7, FP32_EPS, total_steps=12800, flow_steps=FLOW)


def test_the_growth_exponent_tells_drift_from_noise():
    g = lbm_monitor.growth_exponent
    assert g(1e-3, 2e-3, 500, 1000) == pytest.approx(1.0)                 # change in proportion: a drifting flow
    assert g(3e-4, 3e-4, 500, 1000) == 0.0                                # noise of fixed size
    assert g(1e-3, 1e-3 * 2**0.5, 500, 1000) == pytest.approx(0.5)        # a random walk
    assert g(1e-3, 1e-3 * (1000 / 600), 600, 1000) == pytest.approx(1.0)  # a peek not half-way
    assert g(0.0, 0.0, 500, 1000) == 0.0 and g(0.0, 1e-9, 500, 1000) == float("inf")


def test_an_fp32_run_stops_at_the_stall_and_names_the_tolerance_it_can_reach(tmp_path):
    out = tmp_path / "run"
    code = cli.main(["run", str(POISEUILLE), "--backend", "numpy", "--precision", "fp32", "--out", str(out),
                     "--quiet", "--no-plots", "--set", "lattice.resolution=8", "--set", "steady.tolerance=1e-9",
                     "--set", "steady.interval=400"])
    summary = read_result_folder(out)
    assert code == 0 and summary["status"] == "not_steady"
    msg = summary["message"]
    assert msg.startswith("steady change stalled at ") and "above steady.tolerance 1e-09: fp32 cannot resolve" in msg
    assert "raise steady.tolerance to >= " in msg and "or use fp64" in msg
    steps = summary["metrics"]["steps"]
    assert steps < summary["derived"]["steps"] and f"(stopped at step {steps} of " in msg


@pytest.mark.parametrize("quiet", [False, True])
def test_a_first_sigint_says_at_once_where_the_lbm_run_stops(tmp_path, monkeypatch, capsys, quiet):
    out, said = tmp_path / "run", []
    real_write = lbm_runner.write_checkpoint

    def write_checkpoint(folder, state):
        real_write(folder, state)
        if not said:                     # the first signal once the first checkpoint (step 100) is on disk
            said.append(state.step)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)

    monkeypatch.setattr(lbm_runner, "write_checkpoint", write_checkpoint)
    code = cli.main(["run", str(CAVITY), "--backend", "numpy", "--out", str(out), "--no-plots",
                     *(["--quiet"] if quiet else []),
                     "--set", "lattice.resolution=16", "--set", "time.steps=2000", "--set", "time.monitor_interval=50",
                     "--set", "time.checkpoint_interval=100", "--set", "steady.enabled=false"])
    err = capsys.readouterr().err
    assert code == 130 and said == [100]
    notice = "hpcsolve: stopping at the next monitor point (step 100); writing checkpoint and result"
    assert (notice in err) is not quiet, err
    assert err.count("hpcsolve: stopping") == (0 if quiet else 1)


def test_the_notice_is_printed_once_on_the_first_signal(capsys):
    with interrupts.stop_on_signals(graceful=False, notice=interrupts.ABANDON_NOTICE) as stop:
        with interrupts.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.01)
        assert stop.count == 2
    assert capsys.readouterr().err == f"hpcsolve: {interrupts.ABANDON_NOTICE}\n"
