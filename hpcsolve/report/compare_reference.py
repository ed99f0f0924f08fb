"""The reference of a comparison and its cost before running (``hpcsolve.report.compare``; docs/guide/compare.md).

Reference: ``--reference BACKEND/PRECISION`` (or ``[compare] reference`` of the case; ``--reference`` wins), default
``auto``: fp64 on the fastest usable backend of the comparison (the lowest predicted time among the fp64
configurations of the backends compared, NumPy always among them; simulators left out). With only NumPy usable,
``auto`` is ``numpy/fp64`` and no cross-check is needed. Any other reference is *cross-checked* before anything else
runs: it and ``numpy/fp64`` (the truth for tests) both run a reduced copy of the case (``reduce_for_check``: same
physics; LBM fewer steps, FEM a coarser generator mesh, chosen from NumPy's predicted time so that it is about
CROSS_CHECK_SECONDS) and must agree within ``tolerance x EQUAL_BELOW`` (the comparison's round-off class: a
reference further than that from NumPy would move the errors it judges; at least FP64_FLOOR). A reference that
fails its cross-check is a failed reference (``Comparison.reference_failed``, exit 3): no configuration runs. A
reference that is not fp64 is allowed (the user asked for it) and labelled so.

Cost: every configuration's predicted time comes from the run-time estimate (``hpcsolve.run.describe(...,
estimate=True)``: a timed probe each for LBM, a model for FEM); ``--dry-run`` prints them and stops, a comparison prints them first (progress
lines). ``--budget SECONDS`` skips a configuration whose one run is predicted past it (a 'skipped' row with the
reason); a reference predicted past it is an error before anything runs. Without ``--budget`` and without
``--backends``, a reference off the NumPy backend brings a default budget of max(AUTO_BUDGET_FLOOR_S,
AUTO_BUDGET_FACTOR x the reference's prediction): the recommendation is never slower than the reference, so
configurations that much slower (NumPy on a GPU-sized case: hours) could only add rows; they are skipped as rows
saying so, and run when their backend is named with ``--backends`` or a ``--budget`` is given."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from hpcsolve import run as runmod
from hpcsolve.core import backends as backends_mod
from hpcsolve.core import precision as precision_mod
from hpcsolve.core.errors import CaseError, HpcsolveError, RunInterrupted, clip
from hpcsolve.core.results import human_duration
from hpcsolve.report.compare_inputs import configurations, default_backends
from hpcsolve.report.comparison import EQUAL_BELOW, OK_STATUS, REFERENCE, field_error

AUTO = "auto"
CROSS_CHECK_SECONDS = 8.0    # NumPy's predicted time of the cross-check's reduced copy, at most (when reducible)
CROSS_CHECK_MIN_STEPS = 50   # LBM: fewest steps of the reduced copy
FEM_MIN_NX = 4               # FEM: coarsest generator mesh of the reduced copy (cells along x)
FEM_COST_EXPONENT = 1.5      # FEM: solve time ~ unknowns^1.5 (2D CG), to pick the coarsening from the estimate
FP64_FLOOR = 1e-12           # the cross-check's threshold at least this (fp64 round-off over a run)
AUTO_BUDGET_FACTOR = 10.0    # default budget (see the module docstring): this times the reference's prediction
AUTO_BUDGET_FLOOR_S = 120.0  # ... and at least this


def allowed_forms(family: str) -> str:
    """The forms ``--reference`` takes, for error messages."""
    return (f"{AUTO}, or BACKEND/PRECISION with BACKEND one of {', '.join(backends_mod.BACKENDS)} and PRECISION one "
            f"of {', '.join(precision_mod.names(family))} (e.g. numpy/fp64)")


def parse(value, family: str, field_name: str = "--reference") -> tuple[str, str] | None:
    """``value`` as (backend, precision), None for ``auto``; CaseError naming ``field_name``, the value and the
    allowed forms otherwise."""
    text = value.strip().lower() if isinstance(value, str) else None
    if text == AUTO:
        return None
    parts = text.split("/") if text else []
    if len(parts) != 2 or parts[0].strip() not in backends_mod.BACKENDS:
        raise CaseError.invalid(field_name, value, allowed_forms(family))
    try:
        prec = precision_mod.get_precision(parts[1].strip(), family=family, field=field_name).name
    except CaseError:
        raise CaseError.invalid(field_name, value, allowed_forms(family)) from None
    return parts[0].strip(), prec


def check_budget(budget) -> float | None:
    """``--budget`` as seconds (None: none given); CaseError unless a finite number > 0."""
    if budget is None:
        return None
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not (math.isfinite(budget) and budget > 0):
        raise CaseError.invalid("--budget", budget, "a finite number of seconds > 0 (the predicted time of one run "
                                "of a configuration, at most)")
    return float(budget)


def estimate(case, backend: str, precision: str) -> tuple[float | None, str, int | None]:
    """(predicted seconds of one run, basis, predicted steps (LBM) or None) from ``hpcsolve.run.describe(...,
    estimate=True)``; (None, why, None) when there is no estimate (a case the probe refuses: the run will say why)."""
    try:
        info = runmod.describe(case, backend, precision, estimate=True)
    except RunInterrupted:
        raise
    except Exception as exc:    # noqa: BLE001 - a probe that breaks leaves the row unestimated; the run will say why
        return None, f"no estimate: {clip(str(exc), 200) or type(exc).__name__}", None
    s, steps = info.get("estimated_seconds"), info.get("estimated_steps", info.get("steps"))
    steps = int(steps) if isinstance(steps, (int, float)) and steps > 0 else None
    if isinstance(s, (int, float)) and math.isfinite(s) and s >= 0:
        return float(s), str(info.get("estimate_basis", "")), steps
    return None, str(info.get("estimate_basis", "no estimate")), None


def key(backend: str, precision: str, pc=None) -> str:
    """The label of a configuration: backend/precision[/preconditioner]."""
    return f"{backend}/{precision}" + (f"/{pc}" if pc is not None else "")


def seconds_text(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "no estimate"
    return f"{s:.3g} s" + (f" ({human_duration(s)})" if s >= 60 else "")


@dataclass
class Plan:
    """What a comparison will run and what it is predicted to cost (``--dry-run`` prints ``lines()``)."""

    configs: list                      # (backend, precision, preconditioner), the reference configuration(s) first
    reference: tuple                   # (backend, precision)
    requested: str                     # as given: auto, or BACKEND/PRECISION
    how: str                           # why this reference
    predicted: dict = field(default_factory=dict)   # label -> predicted seconds of one run (None: no estimate)
    basis: dict = field(default_factory=dict)       # label -> how it was predicted
    skip: dict = field(default_factory=dict)        # label -> why it is not run (budget)
    budget: float | None = None
    budget_how: str = ""
    check: dict = field(default_factory=dict)       # the cross-check: planned, then its outcome
    estimated: bool = False            # estimates were made (else: not needed, e.g. --quiet without --budget)
    runs_each: int = 4                 # runs per configuration (warm-up + timed, at least), for the total
    long_run_s: float | None = None    # a configuration predicted at least this long is timed once (None: never)
    long_runs_each: int = 1            # runs counted for such a one: its timed run, and its warm-up where that is whole
    seconds: float | None = None       # wall time of making the plan (the estimates' probes), once made
    backends_note: str = ""            # with no backends named: which ran by default, and the others usable here

    @property
    def label(self) -> str:
        return "/".join(self.reference)

    def info(self) -> dict:
        """The reference and its check, for the table and comparison.json (``Comparison.reference_info``)."""
        fp64 = self.reference[1] == REFERENCE[1]
        return {"label": self.label, "requested": self.requested, "how": self.how, "fp64": fp64,
                "note": "" if fp64 else f"{self.label} is not fp64: errors are measured against a {self.reference[1]} "
                                        "run (asked for)",
                "cross_check": self.check, "budget_s": self.budget, "budget_how": self.budget_how,
                "estimated": self.estimated, "plan_s": self.seconds, "backends_note": self.backends_note}

    def lines(self) -> list[str]:
        """The plan in words: the reference and its cross-check, each configuration's predicted time, the total."""
        out = [f"reference {self.label} ({self.how})"] + ([self.backends_note] if self.backends_note else [])
        out.append("cross-check: " + check_text(self.check))
        if not self.estimated:
            out.append("predicted times: not estimated (no --budget, --dry-run or progress lines asked for)")
            return out
        if self.budget is not None:
            out.append(f"budget {self.budget:.3g} s per run ({self.budget_how})")
        total = 0.0
        for b, p, pc in self.configs:
            k = key(b, p, pc)
            s = self.predicted.get(k)
            ref = " (reference)" if (b, p) == self.reference else ""
            tail = f": skipped: {self.skip[k]}" if k in self.skip else ""
            out.append(f"predicted {k}{ref}: {seconds_text(s)} per run{tail}")
            if k not in self.skip and s is not None:
                long = self.long_run_s is not None and s >= self.long_run_s
                total += s * (self.long_runs_each if long else self.runs_each)
        total += self.check.get("predicted_s") or 0.0
        once = (f"; runs predicted at {self.long_run_s:g} s or more timed once after a short warm-up"
                if self.long_run_s is not None else "")
        out.append(f"predicted total: about {seconds_text(total)} ({self.runs_each} runs of each configuration, "
                   f"warm-up included, and the cross-check; more timed runs while the spread is above 5%{once})"
                   + (f"; these estimates took {self.seconds:.3g} s" if self.seconds is not None else ""))
        return out


def check_text(check: dict) -> str:
    """The cross-check in one line: planned (reduction, predicted time, threshold) or done (agreement)."""
    if check.get("status") == "not needed":
        return "not needed: " + check.get("why", "")
    text = (f"{check.get('reference')} against {check.get('against')} on {check.get('reduction')}; numpy/fp64 "
            f"predicted {seconds_text(check.get('predicted_s'))}; agreement needed: relative L2 "
            f"<= {check.get('threshold', math.nan):.3g}")
    if "error" in check:
        err = check["error"]
        shown = f"{err:.3g}" if isinstance(err, float) and math.isfinite(err) else "none"
        text += f"; measured {shown}" + (f" in {check['error_field']}" if check.get("error_field") else "")
        text += f": {check['status']}" + (f" ({check['why']})" if check.get("why") else "")
    return text


def resolve_auto(configs, case_of, estimates: dict) -> tuple[tuple, str]:
    """``auto``: fp64 on the backend of the comparison with the lowest predicted fp64 time (NumPy when it is the only
    one usable, when no other has an estimate, or when it is predicted fastest). ``estimates``: a cache
    (backend, precision, pc) -> (seconds, basis), filled here; ``case_of(pc)``: the case of a preconditioner."""
    fp64 = REFERENCE[1]
    pc = configs[0][2]
    names = list(dict.fromkeys(b for b, _, _ in configs))
    cands = [b for b in names if backends_mod.probe(b).available and not backends_mod.probe(b).simulator]
    cands = cands or [REFERENCE[0]]
    if cands == [REFERENCE[0]]:
        return REFERENCE, f"{AUTO}: fp64 on the fastest usable backend; NumPy is the only one here"
    for b in cands:
        if (b, fp64, pc) not in estimates:
            estimates[(b, fp64, pc)] = estimate(case_of(pc), b, fp64)
    timed = {b: estimates[(b, fp64, pc)][0] for b in cands if estimates[(b, fp64, pc)][0] is not None}
    listed = ", ".join(f"{b}/{fp64} {seconds_text(s)}" for b, s in timed.items())
    if not timed:
        return REFERENCE, f"{AUTO}: no fp64 configuration has an estimate, so numpy/fp64"
    best = min(timed, key=timed.get)
    return (best, fp64), f"{AUTO}: fp64 on the fastest usable backend by the estimates ({listed})"


def reduce_for_check(case, numpy_s: float | None, numpy_steps=None) -> tuple[list, str, float | None]:
    """The reduced copy for the cross-check: (overrides, description, predicted NumPy seconds). The rule: the case
    itself when NumPy's predicted time is at most CROSS_CHECK_SECONDS; else, same physics and a smaller run whose
    prediction scales to about CROSS_CHECK_SECONDS: LBM (a case with ``time.steps``) the first N steps, N = steps x
    CROSS_CHECK_SECONDS / predicted (at least CROSS_CHECK_MIN_STEPS), steady stop off (both runs stop at the same
    step); FEM with a generator mesh, mesh.nx (and ny) halved k times (cost ~ unknowns^FEM_COST_EXPONENT, nx >=
    FEM_MIN_NX), with a refined file mesh one refinement fewer per halving. With no estimate: the smallest such
    copy. A case with neither: itself."""
    if numpy_s is not None and numpy_s <= CROSS_CHECK_SECONDS:
        return [], "the case itself (numpy/fp64 is predicted within the cross-check's time)", numpy_s
    time_sec, mesh = getattr(case, "time", None), getattr(case, "mesh", None)
    if time_sec is not None and hasattr(time_sec, "steps") and numpy_steps:
        frac = CROSS_CHECK_SECONDS / numpy_s if numpy_s else 0.0
        n = min(int(numpy_steps), max(CROSS_CHECK_MIN_STEPS, int(numpy_steps * frac)))
        over = [f"time.steps={n}"]
        if getattr(getattr(case, "steady", None), "enabled", False):
            over.append("steady.enabled=false")
        pred = numpy_s * n / numpy_steps if numpy_s is not None else None
        return over, f"a reduced copy: the first {n} of {int(numpy_steps)} steps ({', '.join(over)})", pred
    if mesh is not None and hasattr(mesh, "nx"):
        k, pred = 0, numpy_s
        nx, ny, refine = mesh.nx, mesh.ny, getattr(mesh, "refine", 0)
        can = (lambda: nx // 2 >= FEM_MIN_NX) if mesh.kind != "file" else (lambda: refine > 0)
        while can() and (pred is None or pred > CROSS_CHECK_SECONDS):
            k += 1
            nx, ny, refine = nx // 2, (ny // 2 if ny else None), refine - 1
            pred = None if pred is None else pred / 4 ** FEM_COST_EXPONENT
        if k:
            over = ([f"mesh.refine={refine}"] if mesh.kind == "file" else
                    [f"mesh.nx={nx}"] + ([f"mesh.ny={ny}"] if ny else []))
            return over, f"a reduced copy: a mesh {2 ** k}x coarser ({', '.join(over)})", pred
    return [], "the case itself (no smaller copy of it is known)", numpy_s


def plan_check(plan: Plan, case, tolerance: float, estimates: dict) -> None:
    """Fill ``plan.check``: not needed for numpy/fp64, else the reduced copy and the agreement threshold."""
    if plan.reference == REFERENCE:
        plan.check = {"status": "not needed", "why": "the reference is numpy/fp64 itself"}
        return
    pc = plan.configs[0][2]
    k = (*REFERENCE, pc)
    if k not in estimates:
        estimates[k] = estimate(case, *REFERENCE)
    numpy_s, _, steps = estimates[k]
    if steps is None and hasattr(getattr(case, "time", None), "steps"):    # no estimate: the steps, for the rule
        try:
            steps = runmod.describe(case, *REFERENCE).get("steps")
        except HpcsolveError:
            steps = None
    over, text, pred = reduce_for_check(case, numpy_s, steps)
    plan.check = {"status": "planned", "reference": plan.label, "against": "/".join(REFERENCE),
                  "overrides": over, "reduction": text, "predicted_s": pred, "numpy_full_predicted_s": numpy_s,
                  "threshold": max(tolerance * EQUAL_BELOW, FP64_FLOOR),
                  "threshold_rule": f"tolerance x {EQUAL_BELOW:g} (the comparison's round-off class), at least "
                                    f"{FP64_FLOOR:g}"}


def apply_budget(plan: Plan, budget: float | None, default_budget: bool) -> None:
    """Set ``plan.budget`` and ``plan.skip``; a reference predicted past an asked budget is a CaseError."""
    ref_s = plan.predicted.get(key(*plan.configs[0]))
    if budget is not None:
        plan.budget, plan.budget_how = budget, "--budget"
        if ref_s is not None and ref_s > budget:
            raise CaseError.invalid("--budget", budget, f"at least the reference's predicted {ref_s:.3g} s",
                                    why=f"the reference {plan.label} is predicted {seconds_text(ref_s)} per run, "
                                        "past the budget; raise --budget, or choose a faster --reference")
    elif default_budget and ref_s is not None and plan.reference[0] != REFERENCE[0]:
        plan.budget = max(AUTO_BUDGET_FLOOR_S, AUTO_BUDGET_FACTOR * ref_s)
        plan.budget_how = (f"default without --backends: max({AUTO_BUDGET_FLOOR_S:g} s, {AUTO_BUDGET_FACTOR:g} x the "
                           f"reference's {ref_s:.3g} s); name a backend with --backends, or give --budget, to run "
                           "the slower ones")
    if plan.budget is None:
        return
    for b, p, pc in plan.configs:
        s = plan.predicted.get(key(b, p, pc))
        if (b, p) != plan.reference and s is not None and s > plan.budget:
            plan.skip[key(b, p, pc)] = (f"predicted {seconds_text(s)} per run, past the budget {plan.budget:.3g} s "
                                        f"({plan.budget_how})")


def cross_check(plan: Plan, case, fields, skip_fields, report) -> str | None:
    """Run the reduced copy on numpy/fp64 and on the reference; record the agreement in ``plan.check``. Returns why
    the reference fails (None: it passed, or no check is needed)."""
    check = plan.check
    if check.get("status") != "planned":
        return None
    reduced = case.with_overrides(*check["overrides"])
    results, t0 = {}, time.perf_counter()
    for b, p in (REFERENCE, plan.reference):
        report.line(f"cross-check: {b}/{p} on {check['reduction']}")
        try:
            cfg, backend, policy, desc = runmod.plan(reduced, b, p)
            results[(b, p)] = runmod.run_case(cfg, backend, policy, progress=False, description=desc)
        except RunInterrupted:      # a signal stops the comparison: no failed cross-check (it was exit 3, issue 49)
            raise
        except HpcsolveError as exc:
            results[(b, p)] = None
            check.update(error=math.nan, error_field="", status="failed", why=f"{b}/{p} failed: {clip(str(exc), 200)}")
            break
    truth, ref = results.get(REFERENCE), results.get(plan.reference)
    if truth is not None and ref is not None:
        errs = _errors(ref, truth, fields, skip_fields)
        bad = [f"{r[0]}/{r[1]} ended {results[r].status}" for r in results if results[r].status not in OK_STATUS]
        worst = max(errs, key=errs.get) if errs else ""
        check.update(errors=errs, error=errs[worst] if errs else math.nan, error_field=worst)
        if bad or not errs:
            check.update(status="failed", why="; ".join(bad) or "no field or selected metric in common")
        elif errs[worst] <= check["threshold"]:
            check.update(status="passed", why="")
        else:
            check.update(status="failed", why=f"{errs[worst]:.3g} > {check['threshold']:.3g}")
    check["seconds"] = time.perf_counter() - t0
    report.line("cross-check: " + check_text(check) + f" ({check['seconds']:.3g} s)")
    if check["status"] == "passed":
        return None
    return (f"the reference {plan.label} failed its cross-check against numpy/fp64 on {check['reduction']}: "
            f"{check['why']}; use --reference numpy/fp64 (predicted {seconds_text(check.get('numpy_full_predicted_s'))}"
            f" per run) or another --reference")


def _errors(res, truth, fields, skip_fields) -> dict:
    """name -> relative L2 error of ``res`` against ``truth``: the selected fields / scalar metrics (``fields``),
    else every floating field they share."""
    out = {}
    for name, t in truth.fields.items():
        if name in skip_fields or name not in res.fields or not np.issubdtype(np.asarray(t).dtype, np.floating):
            continue
        if not fields or name in fields:
            out[name] = field_error(res.fields[name], t)["rel_l2"]
    for name in fields or ():
        a, b = res.metrics.get(name), truth.metrics.get(name)
        if name not in out and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b)):
            out[name] = abs(a - b) / abs(b) if b else abs(a - b)
    return out


def make_plan(case, backends, precisions, pc_names, *, requested, field_name: str, tolerance: float, budget,
              estimate_all: bool, runs_each: int, long_run_s: float | None = None,
              long_runs_each: int = 1) -> tuple[Plan, dict]:
    """The plan of a comparison (checked before anything runs) and the case of each preconditioner: the reference
    (``requested``: auto or BACKEND/PRECISION, named ``field_name`` in errors), the configurations, their predicted
    times (every one when ``estimate_all`` (dry run, progress lines), a budget or the default budget asks for
    them), the budget's skips and the planned cross-check. ``runs_each``: runs per configuration, for the total;
    ``long_run_s``: one predicted at least this long counts ``long_runs_each`` runs (LONG_RUN_S without --repeats:
    its timed run, plus its warm-up where the family warms up on the whole case)."""
    t0 = time.perf_counter()
    asked = parse(requested, case.solver, field_name)
    budget = check_budget(budget)
    configs, pc_cases = configurations(case, backends, precisions, pc_names)
    estimates: dict = {}
    if asked is None:
        ref, how = resolve_auto(configs, pc_cases.get, estimates)
    else:
        status = backends_mod.probe(asked[0])
        if not status.available:
            usable = [b for b in backends_mod.BACKENDS if backends_mod.probe(b).available]
            raise CaseError.invalid(field_name, requested, f"{AUTO}, or a backend usable here ({', '.join(usable)})"
                                    "/PRECISION", why=f"{asked[0]} cannot run here ({status.reason})")
        ref, how = asked, f"asked for with {field_name}"
    if ref != REFERENCE:
        configs, pc_cases = configurations(case, backends, precisions, pc_names, reference=ref)
    plan = Plan(configs, ref, requested.strip() if isinstance(requested, str) else str(requested), how,
                runs_each=runs_each, long_run_s=long_run_s, long_runs_each=long_runs_each)
    default_budget = backends is None
    if backends is None:
        chosen, others = default_backends(case)
        others = [b for b in others if b != ref[0]]        # a reference asked for on it runs anyway
        plan.backends_note = (f"backends: {', '.join(chosen)} (by default: NumPy and the backend hpcsolve run takes"
                              + (f"; also usable here: {', '.join(others)}, compared when named with --backends)"
                                 if others else ")"))
    plan.estimated = estimate_all or budget is not None or (default_budget and ref[0] != REFERENCE[0])
    for b, p, pc in configs if plan.estimated else ():
        if (b, p, pc) not in estimates:
            estimates[(b, p, pc)] = estimate(pc_cases[pc], b, p)
        plan.predicted[key(b, p, pc)], plan.basis[key(b, p, pc)] = estimates[(b, p, pc)][:2]
    apply_budget(plan, budget, default_budget)
    plan_check(plan, pc_cases[configs[0][2]], tolerance, estimates)
    for b, p, pc in configs:        # estimates made anyway (auto, the cross-check) are kept with their rows
        if (b, p, pc) in estimates and key(b, p, pc) not in plan.predicted:
            plan.predicted[key(b, p, pc)], plan.basis[key(b, p, pc)] = estimates[(b, p, pc)][:2]
    plan.seconds = time.perf_counter() - t0
    return plan, pc_cases
