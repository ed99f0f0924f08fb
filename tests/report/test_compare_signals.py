"""Reliability IV (issue 49), item 3 and the signal part of item 9: signals lost in ``compare``, and SIGHUP, SIGQUIT
and SIGUSR1. Every signal is sent from a hook at an event (``os.kill`` of this process), never after a delay.
The generated class (every phase of compare, both families) is tests/report/test_compare_signals_generated.py."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from hpcsolve import cli
from hpcsolve import run as runmod
from hpcsolve.core import interrupts, results
from hpcsolve.core.results import read_result_folder
from hpcsolve.lbm import runner as lbm_runner
from hpcsolve.report import comparison

CASES = Path(__file__).parents[2] / "cases"
CAVITY, POISSON = CASES / "lid_driven_cavity.toml", CASES / "poisson_manufactured.toml"
TINY_LBM = ["--set", "lattice.resolution=8", "--set", "time.steps=40", "--set", "time.monitor_interval=10",
            "--set", "steady.enabled=false", "--set", "validation.reference='none'"]
FAST = ["--quiet", "--no-warmup", "--repeats", "1", "--backends", "numpy"]


def _one_line(err: str, start: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("hpcsolve:")]
    assert len(lines) == 1 and lines[0].startswith(start) and "Traceback" not in err, err
    return lines[0]


def _rows(out: Path) -> list:
    data = json.loads((out / "comparison.json").read_text())
    assert data["status"] == "interrupted" and data["recommendation"]["label"] is None
    assert not list((out / "plots").glob("*.png")) if (out / "plots").is_dir() else True
    return [(r["label"], r["status"]) for r in data["runs"]]


def test_a_signal_as_an_lbm_configuration_finishes_stops_the_comparison(tmp_path, capsys, monkeypatch):
    """The issue's finding: SIGTERM after the second configuration's loop ended ("finishing its result and plots")
    was taken by that run's stop request; the comparison ran fp16s too and exited 0 with every row completed."""
    out, sent, real = tmp_path / "cmp", [], lbm_runner._Loop.finish

    def finish(loop, *args, **kwargs):
        if loop.policy.name == "fp32" and not sent:
            sent.append(loop.step)
            os.kill(os.getpid(), signal.SIGTERM)
        return real(loop, *args, **kwargs)

    monkeypatch.setattr(lbm_runner._Loop, "finish", finish)
    code = cli.main(["compare", str(CAVITY), *FAST, "--precisions", "fp32", "fp16s", "--out", str(out), *TINY_LBM])
    err = capsys.readouterr().err
    assert sent and code == 130, err
    _one_line(err, "hpcsolve: interrupted:")
    assert _rows(out) == [("numpy/fp64", "completed"), ("numpy/fp32", "interrupted")]
    assert not (out / "numpy-fp16s").exists()


@pytest.mark.parametrize("family", ["lbm", "fem"])
def test_a_signal_inside_a_configurations_result_write_stops_the_comparison(tmp_path, capsys, monkeypatch, family):
    """Inside the run's result write a signal only requests a stop (the write finishes): the request went with the
    run, for both families."""
    out, sent, real = tmp_path / "cmp", [], results.Result.write

    def write(result, folder, *args, **kwargs):
        if Path(folder).name in ("numpy-fp32", "numpy-mixed") and not sent:
            sent.append(folder)
            os.kill(os.getpid(), signal.SIGINT)
        return real(result, folder, *args, **kwargs)

    monkeypatch.setattr(results.Result, "write", write)
    case, sets = (CAVITY, TINY_LBM) if family == "lbm" else (POISSON, ["--set", "mesh.nx=8"])
    second = "fp32" if family == "lbm" else "mixed"
    code = cli.main(["compare", str(case), *FAST, "--precisions", "fp64", second, "--out", str(out), *sets])
    err = capsys.readouterr().err
    assert sent and code == 130, err
    _one_line(err, "hpcsolve: interrupted:")
    assert [s for _, s in _rows(out)][-1] == "interrupted"
    assert read_result_folder(out / f"numpy-{second}")["status"] in ("completed", "converged")  # its write finished


def test_a_signal_inside_the_comparisons_own_files_stops_it(tmp_path, capsys, monkeypatch):
    """A signal while comparison.json / .md and the plots are written: the files were finished and the comparison
    exited 0 as complete. Now it is an interrupted comparison (exit 130, no plots)."""
    out, sent, real = tmp_path / "cmp", [], comparison._finish

    def plot(*args, **kwargs):
        if not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(comparison, "_finish", plot)
    code = cli.main(["compare", str(POISSON), *FAST, "--precisions", "fp64", "mixed", "--out", str(out),
                     "--set", "mesh.nx=8"])
    err = capsys.readouterr().err
    assert sent and code == 130, err
    assert "while the comparison's files were written" in _one_line(err, "hpcsolve: interrupted:")
    assert [s for _, s in _rows(out)] == ["converged", "converged"]


def test_a_signal_in_the_reference_cross_check_is_an_interruption_not_a_failed_reference(tmp_path, capsys,
                                                                                          monkeypatch):
    """The cross-check caught the interrupted run as a failure: exit 3, "failed reference". Now exit 130."""
    out, sent, real = tmp_path / "cmp", [], lbm_runner._Loop.advance

    def advance(loop, bar, stop):
        if not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGTERM)
        return real(loop, bar, stop)

    monkeypatch.setattr(lbm_runner._Loop, "advance", advance)
    code = cli.main(["compare", str(CAVITY), *FAST, "--precisions", "fp64", "fp32", "--reference", "numpy/fp32",
                     "--out", str(out), *TINY_LBM])
    err = capsys.readouterr().err
    assert sent and code == 130, err
    assert "failed reference" not in _one_line(err, "hpcsolve: interrupted:")
    assert _rows(out) == []


def test_a_nested_run_hands_a_signal_it_did_not_act_on_to_the_outer_one():
    with interrupts.stop_on_signals(graceful=False) as outer:
        with pytest.raises(KeyboardInterrupt):
            with interrupts.stop_on_signals(graceful=True) as inner:
                os.kill(os.getpid(), signal.SIGTERM)     # a graceful run: a request, which nobody looks at
                assert inner.requested and not outer.requested
        assert outer.count == 1
        with pytest.raises(KeyboardInterrupt):                    # a run that failed after the signal: stopped too
            with interrupts.stop_on_signals(graceful=True):
                os.kill(os.getpid(), signal.SIGTERM)
                raise ZeroDivisionError
        with pytest.raises(KeyboardInterrupt, match="signal 15"):  # a run that acted on it: its own interruption
            with interrupts.stop_on_signals(graceful=False):
                os.kill(os.getpid(), signal.SIGTERM)
                raise AssertionError("not reached")
        assert outer.count == 2
    with interrupts.stop_on_signals(graceful=True) as outer:       # an outer graceful stop: a request
        with interrupts.stop_on_signals(graceful=False):
            with interrupts.deferred():
                os.kill(os.getpid(), signal.SIGINT)
        assert outer.requested and outer.signal == signal.SIGINT


# --- item 9: SIGHUP, SIGQUIT, SIGUSR1 --------------------------------------------------------------------------------

def _run_with_signal_at_first_checkpoint(tmp_path, monkeypatch, sig, seen=None):
    out, sent, real = tmp_path / "run", [], lbm_runner.write_checkpoint

    def write_checkpoint(folder, state):
        real(folder, state)
        if not sent:
            sent.append(1)
            if seen is not None:
                seen.update({s: signal.getsignal(s) for s in (signal.SIGQUIT, signal.SIGHUP, signal.SIGUSR1)})
            if signal.getsignal(sig) == signal.SIG_DFL:         # its default would end the test process
                pytest.fail(f"{signal.Signals(sig).name} has its default action during a run")
            os.kill(os.getpid(), sig)

    monkeypatch.setattr(lbm_runner, "write_checkpoint", write_checkpoint)
    code = cli.main(["run", str(CAVITY), "--backend", "numpy", "--out", str(out), "--no-plots", "--quiet",
                     "--set", "validation.reference='none'", "--set", "lattice.resolution=8", "--set", "time.steps=200", "--set", "time.monitor_interval=20",
                     "--set", "time.checkpoint_interval=40", "--set", "steady.enabled=false"])
    assert sent
    return code, out


def test_sighup_stops_a_run_cleanly_as_sigterm_does(tmp_path, monkeypatch, capsys):
    """SIGHUP (a closed terminal or ssh session) ended the process at once (default action): no interrupted result,
    no release of the folder. Now it is a clean stop: checkpoint, result marked interrupted, exit 130."""
    code, out = _run_with_signal_at_first_checkpoint(tmp_path, monkeypatch, signal.SIGHUP)
    err = capsys.readouterr().err
    assert code == 130 and f"--resume {out}" in _one_line(err, "hpcsolve: interrupted:")
    summary = read_result_folder(out)
    assert summary["status"] == "interrupted" and summary["metrics"]["steps"] == 40


def test_sighup_inherited_ignored_stays_ignored(tmp_path, monkeypatch, capsys):
    """Under ``nohup`` SIGHUP is ignored from the start: the command is meant to outlive its terminal."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        code, out = _run_with_signal_at_first_checkpoint(tmp_path, monkeypatch, signal.SIGHUP)
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)
    assert code == 0, capsys.readouterr().err
    assert read_result_folder(out)["status"] == "completed"


def test_sigusr1_prints_a_status_line_and_the_run_goes_on_while_sigquit_keeps_its_default(tmp_path, monkeypatch,
                                                                                           capsys):
    seen: dict = {}
    code, out = _run_with_signal_at_first_checkpoint(tmp_path, monkeypatch, signal.SIGUSR1, seen)
    err = capsys.readouterr().err
    assert code == 0, err
    assert [ln for ln in err.splitlines() if ln.startswith("hpcsolve: status: run ")], err
    assert read_result_folder(out)["status"] == "completed"
    assert seen[signal.SIGQUIT] == signal.SIG_DFL and callable(seen[signal.SIGHUP])
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL      # the caller's handlers are back
