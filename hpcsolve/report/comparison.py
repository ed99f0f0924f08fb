"""The result of a comparison (``hpcsolve.report.compare.compare``): its runs (``Run``), the recommendation and
every run's verdict, the table, the JSON and markdown files and the plots (``Comparison``). The rule the
recommendation follows is in the docstring of ``hpcsolve.report.compare``."""

from __future__ import annotations

import math
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hpcsolve.core import precision as precision_mod
from hpcsolve.core import scaled
from hpcsolve.core.errors import clip
from hpcsolve.core.results import Result, _jsonable, atomic_path, write_json
from hpcsolve.report import compare_judge, compare_plots, compare_table

MIN_GAIN = 0.10              # a run counts as faster only when its median is also at least 10% lower: 3-6%
#                              between launch-bound GPU runs flipped the cavity's recommendation between runs
MIN_TIMED = 3                # timings each run needs before one can be called faster than another (a spread)
#: a configuration whose first timed run takes at least this long (solver seconds) is timed MIN_TIMED times, none more
#: for its spread (compare, unless --repeats); timed fewer (--repeats 1 or 2) it counts as "timed long": compared by
#: its time with the MIN_GAIN margin, and every claim resting on it says it rests on one timed run (one fp64 2D-2
#: configuration took 69.1 s in one comparison and 25.5 s in another: one timing is not a measurement of speed)
LONG_RUN_S = 10.0
#: errors at or below tolerance x EQUAL_BELOW count as equally accurate (round-off: 4e-13 and 7e-13 are the same
#: answer); above it, errors in the same decade (tol/100-tol/10, tol/10-tol, ...) count as equal, and time decides
EQUAL_BELOW = 0.01
OK_STATUS = ("completed", "converged", "not_steady")   # not_steady: ran its full time (fields valid)
REFERENCE = ("numpy", precision_mod.REFERENCE.name)   # the CPU run in the reference precision


@dataclass
class Run:
    backend: str
    precision: str
    status: str
    preconditioner: str | None = None  # FEM, with the preconditioner dimension: the name asked for (part of the label)
    wall_s: float = math.nan          # median solver time: LBM time stepping, FEM solve (without setup/output)
    times: list = field(default_factory=list)   # every timed run's solver time
    total_s: float = math.nan         # whole run including setup
    throughput: dict = field(default_factory=dict)
    memory_bytes: int | None = None   # estimated peak of the whole process (hpcsolve.core.memory), same for every precision
    state_bytes: int | None = None    # the solver state: LBM populations, FEM matrix + vectors (+ hierarchy)
    state_basis: str = ""             # how state_bytes is counted, in one line
    setup_times: list = field(default_factory=list)   # FEM: preconditioner set-up of each timed run (part of times)
    judged: list | None = None        # the fields / metrics the error is taken over (None: every field)
    field_errors: dict = field(default_factory=dict)   # name -> {"rel_l2": .., "rel_max": ..}
    drift: dict = field(default_factory=dict)          # {"time": [...], "rel_l2": [...]} (LBM)
    reference_errors: dict = field(default_factory=dict)  # errors vs analytic/published refs from the run
    residuals: dict = field(default_factory=dict)      # FEM: true residual, gap, iterations
    speedup: float = math.nan
    message: str = ""
    preconditioner_used: str | None = None   # FEM: the preconditioner the run used (``auto`` resolved), from its metrics
    preconditioner_info: dict = field(default_factory=dict)   # FEM multigrid: levels, complexity, setup time, cycles
    error_note: str = ""              # why no error is measured (a failed reference), where none is
    predicted_s: float | None = None  # the run-time estimate of one run, made before running (None: not made)
    validation: dict = field(default_factory=dict)   # the run's Result.validation: name -> {value, range, verdict, ..}
    # where the configuration's wall time went (compare): plan (set-up built once), warm-up, each timed run whole
    # (its set-up, solver time, finishing; the first one also writing its folder)
    phases_s: dict = field(default_factory=dict)
    # a periodic flow (hpcsolve/report/periodic.py): the cycles, phase-aligned errors, quantities of interest, and the
    # ``judged_errors`` the verdict uses instead of the snapshot errors; {} where the flow is not periodic
    periodic: dict = field(default_factory=dict)
    # FEM: the run's own solution-vs-discretisation metrics (hpcsolve.report.compare_judge.SOLUTION_KEYS); {} else
    solution: dict = field(default_factory=dict)
    reference_run: bool | None = field(default=None, repr=False)   # set by compare(); None: (backend, precision) == REFERENCE
    result: Result | None = field(default=None, repr=False)

    @property
    def is_reference(self) -> bool:
        if self.reference_run is not None:
            return self.reference_run
        return (self.backend, self.precision) == REFERENCE

    @property
    def label(self) -> str:
        """backend/precision, or backend/precision/preconditioner when the preconditioner is a dimension."""
        base = f"{self.backend}/{self.precision}"
        return base if self.preconditioner is None else f"{base}/{self.preconditioner}"

    @property
    def wall_min(self) -> float:
        return min(self.times) if self.times else self.wall_s

    @property
    def wall_max(self) -> float:
        return max(self.times) if self.times else self.wall_s

    @property
    def spread(self) -> float:
        """(max - min) / median of the timed runs."""
        return (self.wall_max - self.wall_min) / self.wall_s if self.wall_s > 0 else math.nan

    @property
    def timed_long(self) -> bool:
        """Timed fewer than MIN_TIMED times because its runs are long (each timing >= LONG_RUN_S)."""
        return 0 < len(self.times) < MIN_TIMED and min(self.times) >= LONG_RUN_S

    @property
    def speed_known(self) -> bool:
        """Its time can be compared: MIN_TIMED timings (a spread), or timed once because long (a mean over many
        steps or iterations, ``timed_long``)."""
        return len(self.times) >= MIN_TIMED or self.timed_long

    def faster_than(self, other: "Run") -> bool:
        """Faster beyond the measured spread (the slowest timed run beats the other's fastest) and by at
        least MIN_GAIN of the other's median. Both need ``speed_known``: with fewer than MIN_TIMED timings of a
        short run there is no spread to go beyond, and nothing counts as faster; a long run timed once is its own
        spread (a mean over many steps or iterations)."""
        if not (self.speed_known and other.speed_known):
            return False
        return self.wall_max < other.wall_min and self.wall_s <= (1.0 - MIN_GAIN) * other.wall_s

    @property
    def judged_errors(self) -> dict:
        """name -> relative L2 error of the fields (and metrics) the error is taken over (``judged``); a periodic
        flow: the phase-aligned errors and the quantities of interest (``periodic``)."""
        if self.periodic.get("judged_errors") is not None:
            return dict(self.periodic["judged_errors"])
        return self.snapshot_errors

    @property
    def snapshot_errors(self) -> dict:
        """name -> relative L2 error of the judged fields (and metrics) against the reference at the same time."""
        return {k: e["rel_l2"] for k, e in self.field_errors.items() if self.judged is None or k in self.judged}

    @property
    def error(self) -> float:
        """Largest relative L2 error over the judged fields (``judged``; default every field) against the FP64
        reference run."""
        vals = list(self.judged_errors.values())
        return max(vals) if vals else math.nan

    @property
    def error_field(self) -> str:
        """The field (or metric) whose error is ``error`` ("" when none is measured)."""
        errs = self.judged_errors
        return max(errs, key=errs.get) if errs and max(errs.values()) > 0 else ""

    def error_text(self) -> str:
        """The error with the field it is in: "0.00561 in pressure"."""
        how = (self.periodic.get("judged_how") or {}).get(self.error_field)
        return f"{self.error:.3g}" + (f" in {self.error_field}" if self.error_field else "") + (f" ({how})" if how else "")

    @property
    def setup_s(self) -> float:
        """Median preconditioner set-up time of the timed runs (FEM; nan where none)."""
        return float(np.median(self.setup_times)) if self.setup_times else math.nan

    @property
    def outside_range(self) -> dict:
        """name -> validation entry of the published-reference checks this run fell outside of (``validation``)."""
        return {k: v for k, v in self.validation.items() if isinstance(v, dict) and _outside(v.get("verdict"))}

    @classmethod
    def from_dict(cls, d: dict) -> "Run":
        """A Run from its ``to_dict`` (comparison.json), without its Result: what judging it again needs."""
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: _from_json(v) for k, v in d.items() if k in names and k not in ("result", "reference_run")}
        for k in ("wall_s", "total_s", "speedup"):
            kw[k] = math.nan if kw.get(k) is None else float(kw[k])
        return cls(reference_run=bool(d.get("reference")), **kw)

    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k not in ("result", "reference_run")}
        d["label"] = self.label
        d["error"] = None if self.error_note and not math.isfinite(self.error) else self.error
        d["error_field"] = self.error_field
        d["reference"] = self.is_reference
        d["wall_min_s"], d["wall_max_s"] = self.wall_min, self.wall_max
        return _jsonable(d)


def _from_json(v):
    """A value of comparison.json as it was: the strings "nan", "inf", "-inf" (``_jsonable``) as floats."""
    if isinstance(v, str) and v in ("nan", "inf", "-inf"):
        return float(v)
    if isinstance(v, list):
        return [_from_json(x) for x in v]
    if isinstance(v, dict):
        return {k: _from_json(x) for k, x in v.items()}
    return v


def field_error(a: np.ndarray, ref: np.ndarray) -> dict:
    """Relative L2 and relative max error of ``a`` against ``ref``."""
    a = np.asarray(a, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        diff = a - ref                  # (two fields near 1.8e308 of opposite sign: inf, as their difference is)
    nref = scaled.norm2(ref)            # scaled 2-norms: no underflow for fields of 1e-300, no overflow at 1e300
    mref = float(np.max(np.abs(ref))) if ref.size else 0.0
    return {"rel_l2": scaled.ratio(scaled.norm2(diff), nref) if nref > 0 else scaled.norm2(diff),
            "rel_max": scaled.ratio(float(np.max(np.abs(diff))), mref) if mref > 0
            else float(np.max(np.abs(diff), initial=0.0))}


def _outside(verdict) -> bool:
    """A validation verdict saying the value is outside its published range (or failed it)."""
    text = str(verdict or "").strip().lower()
    return text.startswith("outside") or text in ("fail", "failed")


def _guard_step(r: "Run") -> int | None:
    """The step at which the run's 16-bit guard flagged it (hpcsolve/lbm/guard.py), None where it did not."""
    step = (getattr(r.result, "metrics", None) or {}).get("precision_guard_flagged_step")
    return int(step) if isinstance(step, (int, float)) and not isinstance(step, bool) else None


def _one_run(a: "Run", b: "Run") -> str:
    """The words a speed claim adds when it rests on one timed run of either (long runs with --repeats 1 or 2)."""
    once = [r.label for r in (a, b) if len(r.times) < MIN_TIMED]
    return f"; this rests on one timed run of {' and '.join(once)} (--repeats {MIN_TIMED} to repeat)" if once else ""


def _error(r: "Run") -> float:
    return 0.0 if r.is_reference else r.error


def accuracy_bin(error: float, tolerance: float) -> float:
    """The accuracy class of ``error``: 0 at or below tolerance x EQUAL_BELOW (equally accurate), then one class
    per decade above it; runs of one class count as equally accurate and the faster is preferred. With tolerance 0
    there are no classes (the error itself)."""
    limit = tolerance * EQUAL_BELOW
    if limit <= 0:
        return error
    k = 0
    while error > limit * (1 + 1e-9) and k < 400:
        limit, k = limit * 10, k + 1
    return float(k)


@dataclass
class Comparison:
    case_name: str
    solver: str
    tolerance: float
    runs: list[Run]
    skipped: dict = field(default_factory=dict)   # label ("backend/precision[/preconditioner]") -> why
    preconditioners: list | None = None           # FEM: the preconditioner dimension (None: the case's own setting)
    reference_failed: str | None = None           # why the reference did not finish well: nobody is judged against it
    interrupted: str | None = None                # a signal stopped the comparison part way: what it stopped
    fields: list | None = None                    # the fields / metrics judged (None: every field)
    reference_info: dict = field(default_factory=dict)   # how the reference was chosen and checked (compare_reference)
    # what a FEM run is judged by (hpcsolve.report.compare_judge): "solution" (its error against the discretisation
    # error) or "residual" (finished, field error within the tolerance); why a "solution" asked for fell back
    judge: str = "residual"
    judge_note: str | None = None
    discretisation: dict = field(default_factory=dict)   # {"error", "source", "fraction"} from the reference
    rejudged_from: dict | None = None              # a comparison judged again: the folder and what it was judged with

    @property
    def limit(self) -> float:
        """The largest accepted error: the tolerance; judged by solution, at most NEGLIGIBLE_FRACTION x the
        discretisation error (never looser than the tolerance: hpcsolve.report.compare_judge)."""
        d = self.discretisation.get("error")
        if self.judge == "solution" and isinstance(d, (int, float)) and math.isfinite(d) and d > 0:
            return min(self.tolerance, float(self.discretisation.get("fraction", 0.1)) * d)
        return self.tolerance

    def limit_text(self) -> str:
        """The limit in words: "tolerance 0.001", or "3.1e-05 (0.1 x the discretisation error 3.1e-04)"."""
        if self.limit == self.tolerance:
            return f"tolerance {self.tolerance:g}"
        return (f"{self.limit:.2g} ({self.discretisation.get('fraction', 0.1):g} x the discretisation error "
                f"{self.discretisation['error']:.2g})")

    def _bin(self, r: Run) -> float:
        return accuracy_bin(_error(r), self.limit)

    @property
    def equal_below(self) -> float:
        """Errors at or below this count as equal (round-off): the limit x EQUAL_BELOW."""
        return self.limit * EQUAL_BELOW

    def _judged_text(self) -> str:
        """What the error is taken over, for legends and labels."""
        if self.fields:
            return ", ".join(self.fields) if len(self.fields) == 1 else "largest over " + ", ".join(self.fields)
        names = sorted({k for r in self.runs for k in r.field_errors})
        return ("largest over fields" + (f" ({', '.join(names)})" if names else "")
                + ("; periodic flow: the fields at the same phase of the cycle, and the quantities of interest"
                   if any(r.periodic for r in self.runs) else ""))

    @property
    def reference_label(self) -> str:
        ref = next((r for r in self.runs if r.is_reference), None)
        return ref.label if ref is not None else self.reference_info.get("label", "/".join(REFERENCE))

    def _ref_text(self) -> str:
        """The reference in words: "the CPU fp64 run" (numpy/fp64), else "the cupy/fp64 run"."""
        label = self.reference_info.get("label", "/".join(REFERENCE))
        return "the CPU fp64 run" if label == "/".join(REFERENCE) else f"the {label} run"

    @property
    def status(self) -> str:
        """'interrupted', 'reference_failed' or 'complete'."""
        return "interrupted" if self.interrupted else "reference_failed" if self.reference_failed else "complete"

    @property
    def reference(self) -> Run:
        return next(r for r in self.runs if r.is_reference)

    def finished(self, r: Run) -> bool:
        """Its result counts: it finished well (OK_STATUS); judged by solution, also a solve that stalled above rtol
        (``not_converged``: its solution is judged by its error instead, hpcsolve.report.compare_judge)."""
        return r.status in OK_STATUS or (self.judge == "solution" and r.status in compare_judge.STALLED)

    def acceptable(self, r: Run) -> bool:
        return (self.status == "complete" and self.finished(r) and math.isfinite(r.wall_s)
                and (r.is_reference or (math.isfinite(r.error) and r.error <= self.limit)))

    def preferred(self, r: Run, other: Run) -> bool:
        """``r`` is preferred to ``other`` (at least as accurate a class): of the same accuracy class (equally
        accurate) with a median at least MIN_GAIN lower, both timed MIN_TIMED times; else measurably faster."""
        if self._bin(r) == self._bin(other) and r.speed_known and other.speed_known:
            return r.wall_s <= (1.0 - MIN_GAIN) * other.wall_s
        return r.faster_than(other)

    def recommendation(self) -> dict:
        """The recommended run and why (see the module docstring for the rule)."""
        ok = [r for r in self.runs if self.acceptable(r)]
        if self.status != "complete":
            why = (f"the comparison was interrupted ({self.interrupted})" if self.interrupted
                   else f"failed reference: {self.reference_failed}; no run is judged against it")
            return {"backend": None, "precision": None, "preconditioner": None, "label": None, "why": why}
        if not ok:
            others = [r for r in self.runs if not r.is_reference and math.isfinite(r.error)]
            why = f"no run finished within the {self.limit_text()}"
            if others:
                closest = min(others, key=lambda r: r.error)
                why += f"; the closest is {closest.label} with error {closest.error_text()} ({closest.status})"
            return {"backend": None, "precision": None, "preconditioner": None, "label": None, "why": why}
        # from the most accurate run down, by accuracy class (accuracy_bin: errors far below the tolerance are equal):
        # a run of the same class replaces the choice when its median is MIN_GAIN lower, one of a less accurate
        # class only when measurably faster (beyond the spread)
        by_accuracy = sorted(ok, key=lambda r: (self._bin(r), _error(r), r.wall_s))
        best = beaten = by_accuracy[0]
        for r in by_accuracy[1:]:
            if self.preferred(r, best):
                best, beaten = r, best
        if best is by_accuracy[0]:
            equal = [r for r in ok if r is not best and self._bin(r) == self._bin(best)]
            most = "the most accurate run" + (f"; none as accurate (same accuracy class: errors at or below "
                                              f"{self.equal_below:.2g} count as equal) is {MIN_GAIN:.0%} faster"
                                              if equal else "")
            why = (f"no configuration is measurably faster than {best.label} "
                   f"(median {best.wall_s:.3g} s, {best.wall_min:.3g}-{best.wall_max:.3g}), {most}")
            if len(ok) == 1:
                why += f"; every other configuration is outside the {self.limit_text()} or did not finish"
            elif any(not r.speed_known for r in ok):
                why += (f"; fewer than {MIN_TIMED} timings per run give no spread to compare speeds with "
                        f"(--repeats {MIN_TIMED} or more)")
        elif self._bin(best) == self._bin(beaten):
            why = (f"as accurate as {beaten.label} (accuracy class {self._bin(best):g}: errors {best.error_text()} and "
                   f"{_error(beaten):.2g}) and faster: median {best.wall_s:.3g} s against {beaten.wall_s:.3g} s"
                   f"{_one_run(best, beaten)}")
        else:
            why = (f"measurably faster than {beaten.label} "
                   f"({best.wall_min:.3g}-{best.wall_max:.3g} s against {beaten.wall_min:.3g}-"
                   f"{beaten.wall_max:.3g} s{_one_run(best, beaten)}) with field error {best.error_text()} <= "
                   f"{self.limit_text()}")
        return {"backend": best.backend, "precision": best.precision, "preconditioner": best.preconditioner,
                "label": best.label, "error": best.error, "wall_s": best.wall_s, "speedup": best.speedup, "why": why}

    def verdicts(self) -> dict[str, str]:
        """For every run (its label, "backend/precision[/preconditioner]"): why it is or is not the recommendation."""
        rec = self.recommendation()
        chosen = next((r for r in self.runs if r.label == rec["label"]), None)
        out = {}
        for r in self.runs:
            key = r.label
            out[key] = "recommended: " + rec["why"] if r is chosen else _verdict(self, r, chosen)
            solution = compare_judge.note(self, r)
            if solution:
                out[key] += f"; {solution}"
            if r.periodic.get("note"):
                out[key] += f"; {r.periodic['note']}"
            if _guard_step(r) is not None:
                out[key] += (f"; the 16-bit guard flagged it at step {_guard_step(r)} (its storage stopped carrying "
                             f"the flow's changes: docs/design/lbm_algorithm.md, 'The 16-bit guard')")
        return out

    # -- presentation (hpcsolve.report.compare_table) ---------------------------------------------------------------
    def rows(self) -> list[dict]:
        """The wide table's rows (every column; comparison.json, ``--wide``)."""
        return compare_table.wide_rows(self)

    def table(self, wide: bool = False) -> str:
        """The table (compact by default; ``wide``: every column), the reference, the recommendation, the verdicts."""
        return compare_table.table(self, wide)

    def __str__(self) -> str:
        return self.table()

    def to_dict(self) -> dict:
        ref = next((r for r in self.runs if r.is_reference), None)
        return _jsonable({"case": self.case_name, "solver": self.solver, "tolerance": self.tolerance,
                          "status": self.status, "reference_failed": self.reference_failed,
                          "interrupted": self.interrupted,
                          "reference": ref.label if ref is not None else self.reference_label,
                          "reference_info": self.reference_info,
                          "preconditioners": self.preconditioners, "recommendation": self.recommendation(),
                          "verdicts": self.verdicts(),
                          "runs": [r.to_dict() for r in self.runs], "skipped": self.skipped,
                          "fields": self.fields, "accuracy_equal_below": self.equal_below,
                          "error_definition": f"relative L2 error vs {self._ref_text()}, {self._judged_text()}",
                          "memory_definition": {"state_bytes": "the solver state of the configuration (LBM populations;"
                                                " FEM matrix, vectors, hierarchy)",
                                                "memory_bytes": "estimated peak of the whole process"},
                          "judge": self.judge, "judge_note": self.judge_note, "limit": self.limit,
                          "discretisation": self.discretisation, "rejudged_from": self.rejudged_from,
                          "table_rows": self.rows()})

    @classmethod
    def from_dict(cls, d: dict) -> "Comparison":
        """A Comparison from its ``to_dict`` (comparison.json): what judging it again needs (no results, no runs)."""
        comp = cls(str(d.get("case", "")), str(d.get("solver", "")), float(d.get("tolerance", 0.0)),
                   [Run.from_dict(r) for r in d.get("runs") or []], skipped=dict(d.get("skipped") or {}),
                   preconditioners=d.get("preconditioners"), reference_failed=d.get("reference_failed"),
                   interrupted=d.get("interrupted"), fields=d.get("fields"),
                   reference_info=dict(d.get("reference_info") or {}), judge=d.get("judge") or "residual",
                   judge_note=d.get("judge_note"), discretisation=_from_json(dict(d.get("discretisation") or {})))
        return comp

    def plot_pareto(self, path: str | Path) -> Path:
        fig, ax, xlabel, ylabel, title, legend_size = compare_plots.pareto(self)
        return _finish(fig, ax, path, xlabel, ylabel, title, legend_size)

    def plot_drift(self, path: str | Path) -> Path | None:
        return compare_plots.drift(self, path)

    def plot_residuals(self, path: str | Path) -> Path | None:
        return compare_plots.residuals(self, path)

    def write(self, out_dir: str | Path, plots: bool = True) -> dict[str, Path]:
        """comparison.json and .md, and with ``plots`` the plots (an interrupted comparison writes without)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        files = {"json": write_json(self.to_dict(), out / "comparison.json")}
        with atomic_path(out / "comparison.md") as tmp:
            tmp.write_text(f"# {self.case_name}: accuracy vs speed\n\n{self.table()}\n", encoding="utf-8")
        files["md"] = out / "comparison.md"
        if not plots or not self.runs:
            return files
        folder = out / "plots"
        folder.mkdir(exist_ok=True)
        files["pareto"] = self.plot_pareto(folder / "pareto.png")
        for name, fn in (("drift", self.plot_drift), ("residuals", self.plot_residuals)):
            p = fn(folder / f"{name}.png")
            if p is not None:
                files[name] = p
        return files


def _verdict(comp: Comparison, r: Run, chosen: Run | None) -> str:
    """Why ``r`` (not the recommended run) is not recommended in the comparison ``comp``."""
    if r.is_reference and comp.reference_failed:
        return (f"failed reference: it ended {r.status}" + (f" ({clip(r.message, 300)})" if r.message else "")
                + "; no run is judged against it")
    if r.status in compare_judge.STALLED and not comp.acceptable(r):     # missed rtol: its residual and advice
        true = r.residuals.get("true_residual")
        head = f"not converged (true residual {true:.2e})" if isinstance(true, (int, float)) else \
            "not converged"
        # the run's own reason and advice (a precision that cannot reach rtol, a stalled true residual), whole:
        # the advice is its end
        return f"{head}: {r.message}" if r.message else head
    if not comp.finished(r):
        return f"{r.status}: {clip(r.message, 300)}"
    if comp.interrupted:
        return "no verdict: the comparison was interrupted before every configuration ran"
    if r.error_note:
        return r.error_note
    if not comp.acceptable(r):
        others = ", ".join(f"{k} {v:.2g}" for k, v in r.judged_errors.items() if k != r.error_field)
        return (f"field error {r.error_text()} above the {comp.limit_text()}"
                + (f" ({others})" if others else ""))
    if chosen is not None and comp._bin(r) == comp._bin(chosen) and comp.preferred(chosen, r):
        return (f"as accurate as {chosen.label} (same accuracy class), but slower: median "
                f"{r.wall_s:.3g} s against {chosen.wall_s:.3g} s{_one_run(chosen, r)}")
    if chosen is not None and chosen.faster_than(r):
        return (f"{chosen.label} is measurably faster ({chosen.wall_min:.3g}-"
                f"{chosen.wall_max:.3g} s against {r.wall_min:.3g}-{r.wall_max:.3g} s"
                f"{_one_run(chosen, r)}) within the {comp.limit_text()}")
    if chosen is not None and min(len(r.times), len(chosen.times)) < MIN_TIMED:
        return (f"not compared for speed with {chosen.label}: fewer than {MIN_TIMED} timings "
                f"(--repeats {MIN_TIMED} or more), so the more accurate run is kept")
    if chosen is not None and comp._bin(r) == comp._bin(chosen):
        return (f"as accurate as {chosen.label} (same accuracy class) and not faster by {MIN_GAIN:.0%}: "
                f"median {r.wall_s:.3g} s against {chosen.wall_s:.3g} s, so the more accurate is kept")
    if chosen is not None and not r.faster_than(chosen):
        more = "more accurate, but " if comp._bin(r) < comp._bin(chosen) else ""
        return (f"{more}not measurably faster than {chosen.label} ({r.wall_min:.3g}-"
                f"{r.wall_max:.3g} s against {chosen.wall_min:.3g}-{chosen.wall_max:.3g} s; "
                f"at least {MIN_GAIN:.0%} beyond the spread is needed)")
    return "acceptable, but less accurate than the recommendation and not faster beyond the spread"


def _finish(fig, ax, path, xlabel: str, ylabel: str, title: str, legend_size: int = 8) -> Path:
    """Label, title, legend and save a comparison figure (``compare_plots.finish``; tests replace this name)."""
    return compare_plots.finish(fig, ax, path, xlabel, ylabel, title, legend_size)
