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

ROOT = Path(__file__).parent.parent
CAVITY = ROOT / "cases" / "lid_driven_cavity.toml"
POISEUILLE = ROOT / "cases" / "poiseuille.toml"
FP32_EPS = lbm_monitor.storage_resolution(get_precision("fp32"))
# the steady checks of `hpcsolve run cases/poiseuille.toml --precision fp32` (numpy), steps 1000..12000
POISEUILLE_FP32 = [1.0, 0.0498, 0.00278, 1.55e-4, 9.01e-6, 3.41e-7, 2.03e-7, 2.34e-7, 2.39e-7, 1.86e-7]


def _monitor(changes):
    m = object.__new__(lbm_monitor.Monitor)
    m.steady_checks = [(1000 * (i + 1), c) for i, c in enumerate(changes)]
    return m


def test_the_fp32_poiseuille_steady_change_stalls_from_step_7000():
    assert _monitor(POISEUILLE_FP32[:8]).steady_stall(1e-7, FP32_EPS) is None       # 2.3e-7 > 0.5 x 3.4e-7: not yet
    stall = _monitor(POISEUILLE_FP32[:9]).steady_stall(1e-7, FP32_EPS)
    assert stall == {"from_step": 7000, "level": 2.03e-7, "highest": 2.39e-7}
    # a change still decreasing, one under the tolerance, or one stalled far above fp32's resolution is no stall
    assert _monitor([1e-3, 1e-4, 4e-5, 2e-5, 1e-5]).steady_stall(1e-7, FP32_EPS) is None
    assert _monitor(POISEUILLE_FP32[:9]).steady_stall(3e-7, FP32_EPS) is None
    assert _monitor([0.5, 0.02, 0.03, 0.02, 0.025]).steady_stall(1e-3, FP32_EPS) is None
    assert lbm_monitor.storage_resolution(get_precision("fp16c")) == 2.0**-11


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
