"""Reliability IV (issue 49), item 3 and the signal part of item 9: a signal at every phase of ``compare``, for both
families, and what SIGHUP, SIGQUIT and SIGUSR1 do.

Item 3: a SIGINT/SIGTERM that reached an LBM configuration while it was "finishing its result and plots" was taken
by that run's own stop request (the run had already left its loop, so nobody looked at the request any more): the
comparison ran every remaining configuration and exited 0. The same happened to a signal inside any write of a
run's result (both families) and inside the write of comparison.json / .md and plots. Now a signal that a nested
run did not act on is handed to the comparison when the run's handlers come off (``interrupts.stop_on_signals``),
and the comparison looks at its own request after every configuration and after its files are written.

Generated class (seeded, ``HPCSOLVE_FUZZ_SEED``, one stream per chunk): a small comparison (LBM cavity of 8^2 cells
or the manufactured Poisson problem on an 8 x 8 mesh, two or three precisions, warm-up on or off, 1 or 2 timed runs,
reference auto or numpy/fp32 with its cross-check) gets SIGINT, SIGTERM or SIGHUP at one chosen *event* of one chosen
configuration and run (the warm-up, the written run, a further timed run): the run's start, its solve, its
finishing (after the LBM loop; FEM's error norms), its judging and result write (inside the run's write), the
result file itself, its plots, the run's teardown; or the comparison's own phases: the cross-check, before the
reference, between two configurations, the write of comparison.json and of its plots. Every signal is sent from a
hook at that event (``os.kill`` of this process: the handler runs before the hook returns), never after a delay,
so no outcome depends on the machine's load. Every input must end with exit 130, one ``hpcsolve: interrupted:``
line, comparison.json marked ``interrupted`` (no plots, no recommendation), the interrupted configuration as an
``interrupted`` row where the signal came inside one, nothing run after it, no temporary file and the folder's lock
released. The default suite runs DEFAULT_CHUNKS chunks of INPUTS inputs (a few seconds each); ``-m slow`` more.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hpcsolve import cli
from hpcsolve import run as runmod
from hpcsolve.core import backends, heartbeat, outdir, results
from hpcsolve.fem import runner as fem_runner
from hpcsolve.lbm import runner as lbm_runner
from hpcsolve.report import compare as compare_mod
from hpcsolve.report import compare_reference, comparison

ROOT = Path(__file__).parents[2]
CASES = ROOT / "cases"
CAVITY, POISSON = CASES / "lid_driven_cavity.toml", CASES / "poisson_manufactured.toml"
FAMILIES = {
    "lbm": (CAVITY, ["lattice.resolution=8", "time.steps=40", "time.monitor_interval=10", "steady.enabled=false",
                     "validation.reference='none'"], ["fp64", "fp32", "fp16s"]),
    "fem": (POISSON, ["mesh.nx=8"], ["fp64", "fp32", "mixed"]),
}
SEED = int(os.environ.get("HPCSOLVE_FUZZ_SEED", "49"))
INPUTS = 3                 # per chunk: a few seconds on the 2-core machine
CHUNKS, DEFAULT_CHUNKS = 16, 3
SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]

#: events inside one run of a configuration (the signal goes to the chosen configuration's chosen run)
RUN_EVENTS = ["run start", "solving", "finishing", "judging", "run teardown"]
WRITTEN_EVENTS = ["result write", "result file", "result plots"]     # only the written run writes
#: the comparison's own phases
COMPARE_EVENTS = ["before the reference", "between configurations", "comparison.json", "comparison plots"]


class Hooks:
    """Where the comparison is (the configuration, the kind of run) and the one signal, sent at the chosen event."""

    def __init__(self, sig, event: str, config: int = -1, kind: str | None = None):
        self.sig, self.event, self.config, self.kind = sig, event, config, kind
        self.at = {"config": -1, "kind": None, "cross_check": False, "written": set()}
        self.sent: list[str] = []
        self.problems: list[str] = []

    def fire(self, event: str, *, anywhere: bool = False) -> None:
        at = self.at
        if self.sent or event != self.event:
            return
        if not anywhere and (at["config"] != self.config or at["kind"] != self.kind):
            return
        if signal.getsignal(self.sig) in (signal.SIG_DFL, signal.SIG_IGN, None):
            self.problems.append(f"{signal.Signals(self.sig).name} has no handler at {event!r}")
            self.sent.append(event)          # (sending it would end or miss the test process)
            return
        self.sent.append(event)
        os.kill(os.getpid(), self.sig)        # the handler runs before this returns to the hook's caller

    def install(self, monkeypatch) -> None:
        at, fire = self.at, self.fire
        real = {"run_case": runmod.run_case, "cross_check": compare_reference.cross_check,
                "start": compare_mod._Progress.start, "done": compare_mod._Progress.done,
                "phase": heartbeat.phase, "finish": lbm_runner._Loop.finish, "judge": runmod.validation_verdicts,
                "write": results.Result.write, "h5": results.write_h5, "claim": outdir.claim,
                "json": comparison.write_json, "plot": comparison._finish,
                "context": type(backends.get("numpy")).run_context}

        def run_case(*args, **kwargs):
            kind = ("cross-check" if at["cross_check"] else "written" if kwargs.get("out") is not None
                    else "repeat" if at["config"] in at["written"] else "warm-up")
            if kind == "written":
                at["written"].add(at["config"])
            at["kind"] = kind
            try:
                fire("run start")
                return real["run_case"](*args, **kwargs)
            finally:
                at["kind"] = None

        def cross_check(*args, **kwargs):
            fire("before the reference", anywhere=True)
            at["cross_check"] = True
            try:
                return real["cross_check"](*args, **kwargs)
            finally:
                at["cross_check"] = False

        def start(report, i, key):
            at["config"] = i
            return real["start"](report, i, key)

        def done(report, run):
            real["done"](report, run)
            fire("between configurations")

        def phase(what):
            real["phase"](what)
            if what.startswith(("stepping", "setting up the preconditioner")):
                fire("solving")
            elif what.startswith("error norms"):
                fire("finishing")

        def finish(loop, *args, **kwargs):
            fire("finishing")
            return real["finish"](loop, *args, **kwargs)

        def judge(*args, **kwargs):
            fire("judging")
            return real["judge"](*args, **kwargs)

        def write(result, *args, **kwargs):
            fire("result write")
            plotter = result.plotter
            if plotter is not None:
                def plots(*a, **k):
                    fire("result plots")
                    return plotter(*a, **k)
                result.plotter = plots
            try:
                return real["write"](result, *args, **kwargs)
            finally:
                result.plotter = plotter

        def write_h5(*args, **kwargs):
            fire("result file")
            return real["h5"](*args, **kwargs)

        class Teardown:
            def __init__(self, cm):
                self.cm = cm

            def __enter__(self):
                return self.cm.__enter__()

            def __exit__(self, *exc):
                fire("run teardown")
                return self.cm.__exit__(*exc)

        def claim(*args, **kwargs):
            cm = real["claim"](*args, **kwargs)
            return cm if kwargs.get("comparison") else Teardown(cm)

        def run_context(backend):
            return Teardown(real["context"](backend))

        def write_json(data, *args, **kwargs):
            if isinstance(data, dict) and data.get("status") not in (None, "interrupted") and "runs" in data:
                fire("comparison.json", anywhere=True)
            return real["json"](data, *args, **kwargs)

        def plot(*args, **kwargs):
            fire("comparison plots", anywhere=True)
            return real["plot"](*args, **kwargs)

        for obj, name, new in ((runmod, "run_case", run_case), (compare_reference, "cross_check", cross_check),
                               (compare_mod._Progress, "start", start), (compare_mod._Progress, "done", done),
                               (heartbeat, "phase", phase), (lbm_runner._Loop, "finish", finish),
                               (runmod, "validation_verdicts", judge), (results.Result, "write", write),
                               (results, "write_h5", write_h5), (outdir, "claim", claim),
                               (type(backends.get("numpy")), "run_context", run_context),
                               (comparison, "write_json", write_json), (comparison, "_finish", plot)):
            monkeypatch.setattr(obj, name, new)


def _argv(family: str, out: Path, precisions, *, warmup: bool, repeats: int, reference: str | None) -> list[str]:
    case, sets, _ = FAMILIES[family]
    argv = ["compare", str(case), "--backends", "numpy", "--precisions", *precisions, "--quiet",
            "--repeats", str(repeats), "--out", str(out)]
    argv += [] if warmup else ["--no-warmup"]
    argv += ["--reference", reference] if reference else []
    for s in sets:
        argv += ["--set", s]
    return argv


def check_interrupted(out: Path, code: int, err: str, hooks: Hooks, precisions) -> list[str]:
    """What an interrupted comparison's exit, stderr and folder must be; the problems found."""
    problems = list(hooks.problems)
    if not hooks.sent:
        return problems + [f"the event {hooks.event!r} never came"]
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("hpcsolve:")]
    if code != 130 or len(lines) != 1 or not lines[0].startswith("hpcsolve: interrupted:") or "Traceback" in err:
        return problems + [f"exit {code}, stderr {err[-500:]!r}"]
    path = out / "comparison.json"
    if not path.is_file():
        return problems + ["no comparison.json"]
    data = json.loads(path.read_text())
    rows = [(r["label"], r["status"]) for r in data["runs"]]
    if data.get("status") != "interrupted" or data["recommendation"]["label"] is not None:
        problems.append(f"comparison.json status {data.get('status')!r}, recommendation {data['recommendation']}")
    if list((out / "plots").glob("*.png")) if (out / "plots").is_dir() else []:
        problems.append("plots of an interrupted comparison")
    inside = hooks.config >= 0 and hooks.event not in ("between configurations",)
    if inside and (not rows or rows[-1][1] != "interrupted"):
        problems.append(f"rows {rows}: the configuration the signal stopped is not the last, interrupted row")
    if any(s == "interrupted" for _, s in rows[:-1]):
        problems.append(f"rows {rows}: an interrupted row before the last")
    ran = {p.name for p in out.iterdir() if p.is_dir() and p.name.startswith("numpy-")}
    later = {f"numpy-{p}" for p in precisions[max(hooks.config, 0) + 1:]}
    if hooks.event not in COMPARE_EVENTS[2:] and ran & later:
        problems.append(f"configurations after the signal ran: {sorted(ran & later)}")
    left = [p.name for p in out.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(outdir.STAGING_PREFIX)
            or p.name == outdir.LOCK_NAME]
    if left:
        problems.append(f"left behind: {left}")
    return problems


def _draw(rng: random.Random) -> dict:
    """One generated input: family, precisions, options, signal, event, configuration and run."""
    family = rng.choice(sorted(FAMILIES))
    precisions = FAMILIES[family][2][:rng.choice([2, 3])]
    warmup, repeats = rng.random() < 0.5, rng.choice([1, 2])
    reference = "numpy/fp32" if rng.random() < 0.2 else None     # a cross-check first (numpy/fp64 and numpy/fp32)
    sig = rng.choice(SIGNALS)
    where = rng.random()
    if where < 0.2:
        event, config, kind = rng.choice(COMPARE_EVENTS), -1, None
        if event == "between configurations":
            config = rng.randrange(len(precisions))
    else:
        kinds = ["written"] + (["warm-up"] if warmup else []) + (["repeat"] if repeats > 1 else [])
        kind = rng.choice(kinds)
        event = rng.choice(RUN_EVENTS + (WRITTEN_EVENTS if kind == "written" else []))
        config = rng.randrange(len(precisions))
    if reference and (family == "fem" or rng.random() < 0.5):
        # (FEM's fp32 reference fails its cross-check on this mesh: only the cross-check itself is signalled)
        event, config, kind = "solving", -1, "cross-check"
    return dict(family=family, precisions=precisions, warmup=warmup, repeats=repeats, reference=reference, sig=sig,
                event=event, config=config, kind=kind)


def _configs(drawn: dict) -> list[str]:
    """The precisions in the order the comparison runs them (the reference first: fp64, or fp32 when named)."""
    ref = "fp32" if drawn["reference"] else "fp64"
    return [ref] + [p for p in drawn["precisions"] if p != ref]


def run_one(drawn: dict, out: Path, monkeypatch, capsys) -> list[str]:
    hooks = Hooks(drawn["sig"], drawn["event"], drawn["config"], drawn["kind"])
    if drawn["event"] == "solving" and drawn["kind"] == "cross-check":
        hooks.config = -1
    with monkeypatch.context() as m:
        hooks.install(m)
        code = cli.main(_argv(drawn["family"], out, drawn["precisions"], warmup=drawn["warmup"],
                              repeats=drawn["repeats"], reference=drawn["reference"]))
    err = capsys.readouterr().err
    return check_interrupted(out, code, err, hooks, _configs(drawn))


def _chunks():
    return [pytest.param(c, marks=[] if c < DEFAULT_CHUNKS else [pytest.mark.slow]) for c in range(CHUNKS)]


@pytest.mark.parametrize("chunk", _chunks())
def test_generated_signals_at_every_phase_of_compare(chunk, tmp_path, monkeypatch, capsys):
    rng = random.Random(f"{SEED}-r4-signals-{chunk}")
    failures, seen = [], []
    for i in range(INPUTS):
        drawn = _draw(rng)
        what = (f"{drawn['family']} {signal.Signals(drawn['sig']).name} at {drawn['event']!r} of configuration "
                f"{drawn['config']} ({drawn['kind']}), {drawn['precisions']}, warmup {drawn['warmup']}, "
                f"repeats {drawn['repeats']}, reference {drawn['reference']}")
        seen.append(what)
        failures += [(i, what, p) for p in run_one(drawn, tmp_path / f"out{i}", monkeypatch, capsys)]
    print("\n" + "\n".join(seen))
    assert not failures, "\n".join(f"{i}: {what}: {p}" for i, what, p in failures)
