"""Signals while a run stops: a second SIGTERM (or Ctrl-C) never leaves a half-written file, a result
that contradicts the checkpoints, or a folder that cannot be resumed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcsolve import cli, interrupts, outdir
from hpcsolve.checkpoint import latest_checkpoint, list_checkpoints
from hpcsolve.results import read_result_folder

ROOT = Path(__file__).parent.parent
CAVITY = ROOT / "cases" / "lid_driven_cavity.toml"
LONG = ["--set", "lattice.resolution=48", "--set", "time.steps=40000", "--set", "time.monitor_interval=100",
        "--set", "time.checkpoint_interval=300", "--set", "steady.enabled=false"]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg"}


def test_a_signal_during_a_write_only_requests_a_stop():
    with interrupts.stop_on_signals(graceful=False) as stop:
        with interrupts.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.01)                      # the handler runs here: no KeyboardInterrupt inside a write
        assert stop.requested and stop.signal == signal.SIGTERM and stop.count == 1
        with pytest.raises(KeyboardInterrupt):    # outside a write, a runner that cannot stop gracefully stops now
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.01)
    with interrupts.stop_on_signals(graceful=True) as stop:
        os.kill(os.getpid(), signal.SIGINT)       # first: a stop request
        time.sleep(0.01)
        assert stop.requested
        with pytest.raises(KeyboardInterrupt):    # second: at once
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.05, 0.2, 0.5])
def test_a_second_sigterm_leaves_a_complete_interrupted_result_that_resumes(tmp_path, delay):
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "hpcsolve.cli", "run", str(CAVITY), "--backend", "numpy",
                             "--out", str(out), "--quiet", "--no-plots", *LONG], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while len(list_checkpoints(out)) < 1 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGTERM)
    time.sleep(delay)
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.startswith("hpcsolve: interrupted:")
    # the folder is complete and says where to resume from, at every delay
    summary = read_result_folder(out)
    assert summary["status"] == "interrupted"
    assert list_checkpoints(out) and "nothing to resume" not in summary["message"]
    assert f"--resume {out}" in summary["message"] and f"--resume {out}" in err
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(outdir.STAGING_PREFIX)]
    newest = latest_checkpoint(out).step
    # and it resumes to the end (a shorter end keeps the test quick: --force accepts the changed case)
    assert cli.main(["run", "--resume", str(out), "--quiet", "--no-plots", "--force",
                     "--set", f"time.steps={newest + 200}"]) == 0
    done = read_result_folder(out)
    assert done["status"] == "completed" and done["metrics"]["resumed_from_step"] == newest
    assert done["metrics"]["steps"] == newest + 200
    assert json.loads((out / outdir.MARKER).read_text())["run_id"] == done["run_id"]
