"""Generated concurrent and interrupted comparisons (issue 37, items 2 and 3), with real processes and real signals.

Seeded (HPCSOLVE_FUZZ_SEED, default 13; one stream per chunk): each input starts two commands into one ``--out`` (a
comparison and another comparison or a run, the second started 0 to 0.6 s after the first), or one comparison that
gets SIGTERM or SIGINT 0 to 2.7 s after it made its ``--out`` folder. Whatever the timing:

- two commands into one folder: exactly one exits 0 and the other exits 2 with one error line naming ``--out``;
  the folder holds the winner's output only (``comparison.json`` of a comparison, or a run's ``result.h5``, never
  both);
- a signal: exit 130 with ``comparison.json`` marked ``interrupted`` (its last row ``interrupted``, no plots), or
  exit 0 where the comparison finished first (complete, no interrupted row); a folder without ``comparison.json``
  is accepted only when the signal came before the first run wrote. A process killed by a signal is a failure (it
  was accepted while the signal could come before the handlers, and while ``python -m`` could end by SIGINT after an
  interrupt that went through an ``exec`` string: ``cli._forget_interrupts_seen_by_exec``).

The signal is sent 0 to 2.7 s after the comparison made its ``--out`` folder, never before: the command's handlers
are in place by then (``cli.main`` sets them before the command starts). Before them the signal lands in the
interpreter's start and its imports, where SIGINT is Python's KeyboardInterrupt with a traceback; a fixed delay
(it was 0.3 to 3 s after the start) got there on a loaded machine (the import took longer), and only there.
Nothing is timed: the processes' outer limit (PROCESS_LIMIT_S) is what a hang would reach. The default suite runs
one chunk; the soak (``-m slow``) four more."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
POISSON = ROOT / "cases" / "poisson_manufactured.toml"
SEED = int(os.environ.get("HPCSOLVE_FUZZ_SEED", "13"))
INPUTS = 6                  # per chunk: about 4 s each on the 2-core machine
CHUNKS, DEFAULT_CHUNKS = 5, 1
PROCESS_LIMIT_S = 300


def _compare_argv(out: Path, precisions) -> list[str]:
    return [sys.executable, "-m", "hpcsolve.cli", "compare", str(POISSON), "--backends", "numpy", "--precisions",
            *precisions, "--set", "mesh.nx=12", "--quiet", "--no-warmup", "--repeats", "2", "--out", str(out)]


def _run_argv(out: Path) -> list[str]:
    return [sys.executable, "-m", "hpcsolve.cli", "run", str(POISSON), "--backend", "numpy", "--set", "mesh.nx=12",
            "--quiet", "--no-plots", "--out", str(out)]


def _start(argv) -> subprocess.Popen:
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def _finish(proc: subprocess.Popen) -> tuple[int, str]:
    _, err = proc.communicate(timeout=PROCESS_LIMIT_S)
    return proc.returncode, err


def _pair(rng: random.Random, out: Path) -> tuple[str, list]:
    """Two commands into one folder: exactly one wins."""
    second_is_run = rng.random() < 0.5
    first = _start(_compare_argv(out, ["fp64", "fp32"]))
    time.sleep(rng.uniform(0.0, 0.6))
    second = _start(_run_argv(out) if second_is_run else _compare_argv(out, ["fp64"]))
    (c1, e1), (c2, e2) = _finish(first), _finish(second)
    problems = []
    if sorted((c1, c2)) != [0, 2]:
        problems.append(f"exit codes {c1}, {c2} (expected one 0 and one 2)")
    loser_err = e2 if c1 == 0 else e1
    lines = [ln for ln in loser_err.splitlines() if ln.startswith("hpcsolve: error")]
    if len(lines) != 1 or "--out" not in lines[0] or "Traceback" in loser_err:
        problems.append(f"the refused command's stderr: {loser_err[-400:]!r}")
    has_cmp, has_run = (out / "comparison.json").exists(), (out / "result.h5").exists()
    winner_is_run = second_is_run and c2 == 0
    if has_cmp == has_run or has_run != winner_is_run:
        problems.append(f"folder holds comparison={has_cmp} run result={has_run}; winner is a run: {winner_is_run}")
    return ("run+compare" if second_is_run else "compare+compare"), problems


def _wait_for_the_command(proc: subprocess.Popen, out: Path) -> None:
    """Until the command has made its ``--out`` folder (its signal handlers are set by then) or has ended: an event,
    not a delay, so the signal never lands in the interpreter's start however slow the machine is."""
    while not out.exists() and proc.poll() is None:
        time.sleep(0.01)


def _signalled(rng: random.Random, out: Path) -> tuple[str, list]:
    """A comparison signalled part way: stopped (130, marked interrupted) or finished (0, complete)."""
    sig = rng.choice([signal.SIGTERM, signal.SIGINT])
    proc = _start(_compare_argv(out, ["fp64", "fp32"]))
    _wait_for_the_command(proc, out)
    time.sleep(rng.uniform(0.0, 2.7))
    proc.send_signal(sig)
    code, err = _finish(proc)
    problems = []
    path = out / "comparison.json"
    data = json.loads(path.read_text()) if path.exists() else None
    if "Traceback" in err:
        problems.append(f"traceback: {err[-400:]!r}")
    if code == 130:
        # the stopped configuration is the last row, unless the signal came between two runs or in the comparison's
        # own writes (issue 49: those stop it too), which its 'interrupted' text says
        outside = ("between two runs", "while the comparison's files were written", "before the first run")
        last_ok = data is not None and (data["runs"][-1]["status"] == "interrupted"
                                        or any(w in (data.get("interrupted") or "") for w in outside))
        if data is not None and (data.get("status") != "interrupted" or not last_ok
                                 or (out / "plots" / "pareto.png").exists()):
            problems.append(f"an interrupted comparison's folder: status {data.get('status')!r}, "
                            f"{data.get('interrupted')!r}, last row {data['runs'][-1]['status']!r}")
    elif code == 0:
        if data is None or data.get("status") == "interrupted" or \
                any(r["status"] == "interrupted" for r in data["runs"]):
            problems.append("exit 0 with an interrupted or missing comparison")
    else:
        problems.append(f"exit {code} after {signal.Signals(sig).name}: {err[-300:]!r}")
    kind = "stopped" if code == 130 else "finished first" if code == 0 else f"exit {code}"
    return f"signal ({kind})", problems


def _chunks():
    return [pytest.param(c, marks=[] if c < DEFAULT_CHUNKS else [pytest.mark.slow]) for c in range(CHUNKS)]


@pytest.mark.parametrize("chunk", _chunks())
def test_generated_concurrent_and_interrupted_comparisons(chunk, tmp_path):
    rng = random.Random(f"{SEED}-comparisons-{chunk}")
    counts: dict[str, int] = {}
    failures = []
    for i in range(INPUTS):
        out = tmp_path / f"out{i}"
        kind, problems = (_pair if rng.random() < 0.5 else _signalled)(rng, out)
        counts[kind] = counts.get(kind, 0) + 1
        failures += [(i, kind, p) for p in problems]
    print(f"\ncomparisons chunk {chunk}: {counts}")
    assert sum(counts.values()) == INPUTS
    assert not failures, failures
