"""The accuracy gate (issue 48): published-benchmark runs whose values may not leave their published bound nor grow
past their recorded baseline, on the GPU (``GPU_RUNS``, in ``pytest -m gpu``) and on the CPU at CI sizes
(``CPU_RUNS``, in the default suite).

Each run is a shipped case with overrides, in one precision on one backend, and the metrics it is judged by:

- an **error** metric (Ghia centreline difference, Poiseuille profile error, Taylor-Green velocity error, the
  relative L2 velocity difference from the fp64 run of the same case) passes when it is at most its ``bound`` (the
  published figure or the issue's target) and at most ``GROWTH`` x its baseline (``tests/accuracy_baseline.toml``);
- a **ranged** metric (Schafer-Turek c_D, c_L, c_D max, c_L max, St) passes when it is inside the published range
  widened by ``RANGE_SLACK`` (0.1 % of the bound, issue 48's allowance for a value at the edge of a range) and within
  ``RANGE_DRIFT`` x the range's half-width of its baseline value; a metric in ``unpublished`` (fp16s, whose 2D flows
  the precision guard flags; fp16c's 2D-1 lift, ``UNPUBLISHED_2D1``) keeps only the baseline part;
- the 16-bit guard's verdict (flagged or not) on a GPU run equals its baseline's ``guard_flagged``.

The baseline file is versioned: it changes only in a commit that says why (a better method, a fixed bug), never to
make a failing gate pass. ``HPCSOLVE_GATE_RECORD=1`` runs the gate without the baseline comparison (the published
bounds still hold) so that a new baseline can be written from ``HPCSOLVE_GATE_OUT`` (a JSON-lines file every gate
run appends its values to; ``scripts/accuracy_gate.py`` prints its table and, with ``--baseline``, the TOML).
"""

from __future__ import annotations

import json
import math
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "tests" / "accuracy_baseline.toml"

#: an error may grow to this multiple of its baseline (issue 48)
GROWTH = 1.25
#: a ranged value may lie outside its published range by this fraction of the bound it passes (issue 48: "within
#: 0.1 % of the bound, with the reason documented": docs/design/testing.md lists the rows that use it)
RANGE_SLACK = 1e-3
#: a ranged value may move from its baseline by this fraction of the published range's half-width
RANGE_DRIFT = 0.25

PRECISIONS = ("fp64", "fp32", "fp16s", "fp16c")
ST_2D1 = {"drag_coefficient_window_mean": (5.57, 5.59), "lift_coefficient_window_mean": (0.0104, 0.0110)}
ST_2D2 = {"drag_coefficient_max": (3.22, 3.24), "lift_coefficient_max": (0.99, 1.01), "strouhal": (0.295, 0.305)}


@dataclass(frozen=True)
class GateRun:
    """One gate run: ``name`` (the case's row), the case file, overrides, backend, precision, the error metrics with
    their bounds and the ranged metrics with their published ranges."""

    name: str
    case: str
    overrides: tuple[str, ...]
    backend: str
    precision: str
    errors: dict = field(default_factory=dict)       # metric -> bound (at most)
    ranges: dict = field(default_factory=dict)       # metric -> (low, high)
    unpublished: frozenset = frozenset()             # ranged metrics judged against their baseline only
    versus_fp64: bool = False                        # also the velocity's relative L2 difference from fp64's run

    @property
    def key(self) -> str:
        return f"{self.name}.{self.backend}.{self.precision}"


def _ghia_bound(precision: str, re: int) -> float:
    """Issue 48's targets: Re 100 at 128^2 <= 0.01 in every precision; Re 1000 at 256^2: fp16c <= 1.5 x fp32's 0.0082,
    fp16s <= 1.5 x its 0.052 of 2026-12-03, fp64 / fp32 0.015 (their H200 figure 0.0149 at 128^2, docs)."""
    if re == 100:
        return 0.01
    return {"fp16c": 1.5 * 0.0082, "fp16s": 1.5 * 0.052}.get(precision, 0.015)


#: 2D-1 values the gate does not hold to the published range, and why (H100, 2026-12-07, docs/design/testing.md):
#: fp16s: the 16-bit guard flags the run (step 9,600), c_L 0.0118; fp16c: its c_L swings by 0.017 over the window
#: (fp64: 2.5e-5), so the window mean (0.0102, 1.7 % under the range) is rounding noise of a lift 0.2 % of the drag:
#: 16-bit storage cannot resolve 2D-1's lift at D = 80 (at lattice velocity 0.05, fp16c's swing is 0.0078 and fp64
#: itself is above the range, c_L 0.01117). Both keep their baseline check; c_D is held to the range in fp16c.
UNPUBLISHED_2D1 = {"fp16s": frozenset(ST_2D1), "fp16c": frozenset({"lift_coefficient_window_mean"})}


def gpu_runs(backends=("cupy", "numba-cuda")) -> list[GateRun]:
    """The GPU gate: the shipped validation table (scripts/validate_lbm_gpu.py's runs) in every precision."""
    runs = []
    for p in PRECISIONS:
        runs.append(GateRun("cavity_re100_128", "cases/lid_driven_cavity.toml", ("lattice.resolution=128",), "cupy", p,
                            errors={"ghia_max_abs_diff": _ghia_bound(p, 100)}))
        for b in backends:
            runs.append(GateRun("cavity_re1000_256", "cases/lid_driven_cavity_re1000.toml",
                                ("lattice.resolution=256", "time.end_time=100"), b, p,
                                errors={"ghia_max_abs_diff": _ghia_bound(p, 1000)}))
        runs.append(GateRun("cylinder_2d1_d80", "cases/cylinder_2d1.toml",
                            ("lattice.resolution=80", "lattice.velocity=0.025", "steady.enabled=false"), "cupy", p,
                            ranges=ST_2D1, unpublished=UNPUBLISHED_2D1.get(p, frozenset())))
        runs.append(GateRun("cylinder_2d2", "cases/cylinder_2d2.toml", (), "cupy", p, ranges=ST_2D2,
                            unpublished=frozenset(ST_2D2) if p == "fp16s" else frozenset()))
        runs.append(GateRun("poiseuille", "cases/poiseuille.toml", (), "cupy", p,
                            errors={"profile_rel_l2_error": 0.01}))
        runs.append(GateRun("taylor_green", "cases/taylor_green.toml", (), "cupy", p,
                            errors={"velocity_rel_l2_error": 0.01}))
    return runs


#: the CPU gate's cavity: Re 1000 at 64 cells to t = 25 s (16,000 steps) with the case's steady test on. The stall
#: rule of 2026-12-04 stopped this run at step 9,000 (fp16s) and 12,000 (fp16c): Ghia 0.21 / 0.13 against 0.069.
#: The 16-bit guard is off in the CPU runs (its float32 shadow windows add a third to a NumPy run; its own tests
#: are tests/lbm/test_precision_guard.py and the GPU gate runs with it on)
CPU_CAVITY = ("physics.reynolds=1000", "lattice.resolution=64", "time.end_time=25", "run.precision_guard=\"off\"")
#: the CPU gate's 2D-2: D = 20 (tau 0.53; D = 10 blows up), 0.25 s (1,000 steps: the inlet's start and the first
#: wake, through Bouzidi links and the characteristic outlet), the 16-bit guard off (its NumPy windows cost 3x the run)
CPU_2D2 = ("lattice.resolution=20", "time.end_time=0.25", "time.output_interval=0.25", "time.monitor_interval=50",
           "run.precision_guard=\"off\"")


#: the bound of the velocity's relative L2 difference from the fp64 run (the storage's resolution times a margin:
#: fp32 6e-8, fp16s 2^-10, fp16c 2^-11; a 16-bit run that loses the flow or stops early is 1e-1 away)
VERSUS_FP64 = {"fp64": {}, "fp32": {"velocity_rel_l2_vs_fp64": 1e-4}, "fp16s": {"velocity_rel_l2_vs_fp64": 0.03},
               "fp16c": {"velocity_rel_l2_vs_fp64": 0.03}}


def cpu_runs() -> list[GateRun]:
    """The CI gate (NumPy): a small Re 1000 cavity with the steady stop on, run to its end time, and a short 2D-2,
    each precision against its recorded figures and the fp64 run of the same case."""
    runs = []
    for p in PRECISIONS:
        runs.append(GateRun("cpu_cavity_re1000_64", "cases/lid_driven_cavity.toml", CPU_CAVITY, "numpy", p,
                            errors={"ghia_max_abs_diff": 0.08, **VERSUS_FP64[p]}, versus_fp64=p != "fp64"))
        runs.append(GateRun("cpu_cylinder_2d2_d20", "cases/cylinder_2d2.toml", CPU_2D2, "numpy", p,
                            errors={**VERSUS_FP64[p], **({"drag_coefficient_rel_error_vs_fp64": 0.01} if p != "fp64"
                                                        else {})}, versus_fp64=p != "fp64"))
    return runs


def load_baseline(path: Path = BASELINE) -> dict:
    """{run key: {metric: value}} from the baseline file (tables ``[<name>.<backend>.<precision>]``)."""
    with open(path, "rb") as fh:
        data = tomllib.load(fh)
    out = {}
    for name, by_backend in data.items():
        if not isinstance(by_backend, dict):
            continue
        for backend, by_precision in by_backend.items():
            for precision, metrics in by_precision.items():
                out[f"{name}.{backend}.{precision}"] = dict(metrics)
    return out


def judge(run: GateRun, values: dict, baseline: dict | None) -> list[str]:
    """The gate's failures for ``run`` with its measured ``values`` (``baseline``: the run's recorded values, or
    None in record mode). Empty: the run passes."""
    fails = []
    for metric, bound in run.errors.items():
        v = values.get(metric)
        if v is None or not math.isfinite(v):
            fails.append(f"{metric}: not measured ({v})")
            continue
        if v > bound:
            fails.append(f"{metric} {v:.4g} > bound {bound:.4g}")
        if baseline is not None:
            base = baseline.get(metric)
            if base is None:
                fails.append(f"{metric}: no baseline in {BASELINE.name}")
            elif v > GROWTH * base:
                fails.append(f"{metric} {v:.4g} > {GROWTH} x baseline {base:.4g}")
    for metric, (low, high) in run.ranges.items():
        v = values.get(metric)
        if v is None or not math.isfinite(v):
            fails.append(f"{metric}: not measured ({v})")
            continue
        if metric not in run.unpublished and not low * (1 - RANGE_SLACK) <= v <= high * (1 + RANGE_SLACK):
            fails.append(f"{metric} {v:.5g} outside the published [{low}, {high}] (slack {RANGE_SLACK:g})")
        if baseline is not None:
            base = baseline.get(metric)
            drift = RANGE_DRIFT * (high - low) / 2
            if base is None:
                fails.append(f"{metric}: no baseline in {BASELINE.name}")
            elif abs(v - base) > drift:
                fails.append(f"{metric} {v:.5g} moved from baseline {base:.5g} by more than {drift:.3g}")
    return fails


def record_mode() -> bool:
    return os.environ.get("HPCSOLVE_GATE_RECORD", "0") not in ("", "0")


def write_row(run: GateRun, values: dict, extra: dict) -> None:
    """Append the run's row to HPCSOLVE_GATE_OUT (JSON lines), where set (one line per write: workers append)."""
    path = os.environ.get("HPCSOLVE_GATE_OUT")
    if not path:
        return
    row = {"key": run.key, "name": run.name, "backend": run.backend, "precision": run.precision,
           "values": values, **extra}
    with open(path, "a") as fh:
        fh.write(json.dumps(row, default=float) + "\n")


def gated_values(run: GateRun, result) -> dict:
    """The metrics the gate judges (and records) from a run's result."""
    keys = list(run.errors) + list(run.ranges)
    return {k: float(result.metrics[k]) for k in keys if isinstance(result.metrics.get(k), (int, float))}


def run_case(run: GateRun):
    """The run's Result through the normal runner (as ``hpcsolve run`` does, without files or progress)."""
    from hpcsolve import run as runmod
    from hpcsolve.lbm import runner

    case, backend, policy = runmod.prepare(ROOT / run.case, run.backend, run.precision, list(run.overrides))
    return runner.run(case, backend, policy, progress=False)


def velocity_difference(result, reference) -> float:
    """Relative L2 difference of the velocity fields of two results of one case."""
    import numpy as np

    a, b = np.asarray(result.fields["velocity"]), np.asarray(reference.fields["velocity"])
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))
