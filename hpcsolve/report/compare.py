"""Accuracy-vs-speed comparison of one case across backends x precisions (x preconditioners, FEM).

Every configuration runs the same case; the reference runs first. The reference (``reference``, ``--reference``,
``[compare] reference``) is BACKEND/PRECISION or ``auto``: fp64 on the fastest usable backend by the run-time estimates,
numpy/fp64 (NumPy LBM / SciPy-backed FEM) where NumPy is the only one. A reference other than numpy/fp64 is first
cross-checked: it and numpy/fp64 run a reduced copy of the case (fewer LBM steps, a coarser FEM mesh, chosen so that
NumPy's predicted time is small) and must agree within tolerance x EQUAL_BELOW; one that does not is a failed reference
(below) and no configuration runs. Before anything runs, every configuration's time is predicted
(``hpcsolve.run.describe(..., estimate=True)``) when progress lines, a dry run (``plan``) or a budget ask for it;
``budget`` skips a configuration predicted past it (a 'skipped' row with the reason) and refuses a reference predicted
past it. The rules, with the default budget, are in ``hpcsolve.report.compare_reference`` and docs/guide/compare.md. For
each run the comparison records wall time, throughput, speedup over the reference, memory, the error of every field
against the reference run (relative L2 and relative max), the drift of that error over the output times, the errors
against analytic/published references that the run itself reports, and (FEM) the true residual and the recursive-vs-true
gap.

Timing: every configuration runs once untimed (warm-up: compilation, memory pools, imports), then at least ``repeats``
(3) timed runs, more while the spread (max - min) / median is above 5% and the configuration's time budget allows (a run
of LONG_RUN_S or more: exactly 3, no more for the spread); times are the solver's own (``family.SOLVER_SECONDS``),
reported as median and min-max. A claim that one run is "measurably faster" than another needs 3 timed runs of each
(with ``--repeats`` 1 or 2 a long run's claim says it rests on one run). The throughput is taken from the same median as
``time_s`` (LBM: MLUPS = cells x steps / time_s; FEM: time per iteration = time_s / iterations), not from one run of the
set. Host BLAS/OpenMP threads are pinned for every run (``Backend.run_context``).

Judging FEM runs (``judge``, ``--judge``, the case's ``compare.judge``; hpcsolve.report.compare_judge): by default a FEM
run whose reference knows the discretisation error (an analytic solution, or an estimate) is judged by its *solution
error against the discretisation error*: accepted when it is at most 1/10 of it (and within the tolerance), even where
its solve stalled above rtol - the question a FEM user asks of a precision is whether its error is small against the
error the mesh already makes, and fp32's 1e-6 on a mesh whose error is 1e-4 is; ``residual`` keeps the older rule
(converged, field error within the tolerance) for users who need the algebraic accuracy.

Preconditioners (FEM): with ``preconditioners`` every backend x precision runs once per listed name, with
``solve.preconditioner`` of the case overridden (the same path as ``--set``); a configuration is then
backend/precision/preconditioner everywhere (labels, table, JSON, plots, recommendation). The reference is the reference
backend/precision with the case's own preconditioner when it is listed, else the first listed; should that configuration
fail (e.g. "mg" on a mesh that is not a structured generator mesh), the next one of the reference backend/precision is
the reference. Without ``preconditioners`` the case's own setting is used (one run per backend x precision), and the
label has no preconditioner part.

A reference that runs but does not finish well (status not completed / converged / not_steady, e.g. not_converged at
``solve.maxiter``) is a failed reference: ``Comparison.reference_failed`` says why (table, comparison.json, and the CLI
exits 3), no run gets an error or speedup against it (``Run.error_note`` says why), and nothing is recommended.

The ``out`` folder is claimed for the whole comparison as a run claims its own (``outdir.claim``: one lock, so a second
comparison or a run into it is refused naming the holder; a folder holding a run's result is refused). A
SIGINT/SIGTERM/SIGHUP at any phase stops the comparison (a run's own stop request that the run did not act on, e.g. as
it finishes or writes its result, is handed back to the comparison: ``interrupts.stop_on_signals``; one inside the
comparison's own writes is looked at after them): the configuration it stopped is an 'interrupted' row, comparison.json
/ .md are written marked ``interrupted`` (no plots, no recommendation), and ``RunInterrupted`` (exit 130) follows.

Fields judged: a run's *field error* is the largest relative L2 error over the fields it shares with the reference
(``fields`` selects which: field names such as ``velocity``, or scalar metrics of the run such as ``probe_value`` or
``drag_coefficient``, whose error is |run - reference| / |reference|); every verdict names the field the error is in,
comparison.md lists every field's error (``err_L2_by_field``) and the plots say what they show.

Periodic flows (``hpcsolve.report.periodic``, docs/guide/compare.md "Periodic flows"): where the reference's monitored
lift repeats (regular upward mean-crossings, a swing of at least 5 % of its drag, in the second half of the run), a
run's error is the largest of its *phase-aligned* field errors (its end-time fields against the reference's state at the
same phase of the reference's cycle, from the reference's snapshots) and the relative differences of its quantities of
interest (c_D max, c_L max, St) to the reference's; the snapshot error stays in the table (``snapshot_err_L2``). Where
the snapshots cannot resolve the phase, the fields are judged at the same time and the verdict says so.

Memory: ``state_MiB`` is the solver state of each configuration (:func:`state_memory`), which changes with precision;
``process_peak_est_MiB`` (``memory_bytes``) is the estimated peak of the whole process (hpcsolve.core.memory), which
mostly does not.

Recommendation: the reference is a timed candidate like every other run. A run is *acceptable* when it finished
(completed or converged; judged by solution, also a FEM solve that stalled above rtol) and its field error is within the
limit (the tolerance; judged by solution, at most 1/10 of the discretisation error too). Errors are compared in accuracy
classes (``comparison.accuracy_bin``): at or below tolerance/100 they count as equal (round-off), above that one class
per decade; within a class the lower median time (FEM: solve + preconditioner set-up) is preferred. A run of a less
accurate class is recommended over a more accurate one only when it is faster beyond the measured spread (its slowest
timed run is faster than the other's fastest; both timed at least 3 times) and by at least 10% of the other's median
time; otherwise the more accurate one is recommended. So the answer is never a run slower than the reference, and when
no configuration is measurably faster than the reference it says so and recommends the reference. Every run gets a
verdict saying why it is or is not recommended.
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np

from hpcsolve import run as runmod   # (its run_case looked up at call time: tests stop a comparison through it)
from hpcsolve.core import backends as backends_mod
from hpcsolve.core import family as families
from hpcsolve.core import interrupts, outdir
from hpcsolve.core.cases import CaseBase
from hpcsolve.core.errors import CaseError, HpcsolveError, RunInterrupted
from hpcsolve.core.family import SOLVER_SECONDS
from hpcsolve.core.results import Result
from hpcsolve.report import compare_judge, compare_reference, periodic
from hpcsolve.report.state_memory import state_memory
from hpcsolve.report.compare_inputs import (COMPARISON_PLOTS, _check_preconditioners, _retire_comparison,
                                           check_fields_known, check_out, checked_inputs)
from hpcsolve.report.comparison import LONG_RUN_S, OK_STATUS, Comparison, Run, field_error

__all__ = ["DEFAULT_TOLERANCE", "compare", "plan"]

DEFAULT_TOLERANCE = 1e-3
DEFAULT_REPEATS = 3          # timed runs per configuration, at least
MAX_REPEATS = 10             # at most, when the spread stays above TARGET_SPREAD
TARGET_SPREAD = 0.05         # (max - min) / median above which more repeats are taken, while the budget allows
DEFAULT_BUDGET_S = 60.0      # seconds of timed runs per configuration beyond the first `repeats`
#: LONG_RUN_S (comparison.py): a configuration whose first timed run takes at least this long is timed exactly
#: DEFAULT_REPEATS times (no further repeats for its spread) unless --repeats says otherwise: timed once, such runs were
#: called "measurably faster" on one timing each (one fp64 2D-2 configuration took 69.1 s in one comparison, 25.5 s
#: in another)
SKIP_FIELDS = {"flags", "u_exact", "error"}  # geometry codes, analytic fields and their errors
PROGRESS_EVERY_S = 10.0      # a progress line at least this often while a configuration runs (unless quiet)


def compare(case: CaseBase | str | Path, backends: list[str] | None = None, precisions: list[str] | None = None,
            tolerance: float = DEFAULT_TOLERANCE, *, out: str | Path | None = None, overrides=(),
            progress: bool = False, warmup: bool = True, repeats: int | None = None,
            time_budget_s: float = DEFAULT_BUDGET_S, preconditioners: list[str] | None = None,
            overwrite: bool = False, fields: list[str] | None = None, reference: str | None = None,
            budget: float | None = None, judge: str | None = None) -> Comparison:
    """Run ``case`` for each backend x precision plus the reference, and compare accuracy against speed.

    Parameters
    ----------
    case : CaseBase, str or Path
        A case file or a loaded case (:func:`hpcsolve.load_case`); ``overrides``: ``--set`` values applied to it.
    backends, precisions : list of str, optional
        None: NumPy and ``hpcsolve run``'s default backend (``compare_inputs.default_backends``); every precision
        of the case's family (``hpcsolve.core.precision.POLICIES``).
    tolerance : float
        The largest field error (relative L2 against the reference) a recommended run may have.
    out, overwrite : str or Path, bool
        The comparison's folder (comparison.json / .md, plots/, one folder per run); one that holds a comparison
        is refused before anything runs unless ``overwrite`` (:func:`check_out`).
    progress, warmup, repeats, time_budget_s : bool, bool, int, float
        Progress lines on stderr; one untimed run first; ``repeats`` timed runs, else 3-10 within the budget ("Timing").
    preconditioners, fields, reference, budget, judge : optional
        FEM ``solve.preconditioner`` names to run each with; the fields or metrics judged; BACKEND/PRECISION or
        "auto"; seconds past which a run is skipped; "solution" or "residual" (sections above; docs/guide/compare.md).

    Returns
    -------
    Comparison
        ``runs`` (error, drift, times, speed-up, memory), ``table()``, ``recommendation()``, ``verdicts()``.

    Raises
    ------
    CaseError, OutputError
        A bad case, name, field or folder: before anything runs where it can be known then.

    Examples
    --------
    >>> from pathlib import Path
    >>> import hpcsolve
    >>> cases = Path(hpcsolve.__file__).resolve().parents[1] / "cases"      # the repository's case files
    >>> comp = hpcsolve.compare(cases / "lid_driven_cavity.toml", ["numpy"], ["fp64", "fp32"], warmup=False,
    ...     repeats=1, overrides=["lattice.resolution=16", "time.end_time=2", 'validation.reference="none"'])
    >>> runs = {r.precision: r for r in comp.runs}
    >>> runs["fp64"].is_reference, runs["fp64"].error, bool(1e-8 < runs["fp32"].error < 1e-4)   # fp32: ~2e-6
    (True, 0.0, True)
    """
    the_plan, case, pc_cases, pc_names, fields, judge = _planned(
        case, backends, precisions, tolerance, overrides, repeats, warmup, preconditioners, fields, reference, budget,
        judge, estimate_all=progress)
    configs = the_plan.configs
    out_path = runmod.out_folder_arg(out)
    if out_path is not None:
        check_out(out_path, overwrite)
    # the folder claimed as a run claims its own (one lock: a second comparison or a run into it is refused naming
    # this one); the signal handlers outermost, as in run.run_case: a signal stops the comparison, and its files and
    # the folder's release are written as writes (a late signal only requests a stop)
    claim = (outdir.claim(out_path, overwrite=overwrite, comparison=True) if out_path is not None
             else contextlib.nullcontext())
    with interrupts.stop_on_signals(graceful=False) as stop, interrupts.exit_deferred(claim):
        if out_path is not None:
            check_out(out_path, overwrite)      # again under the lock: a comparison that finished meanwhile counts
        comp = Comparison(case.name, case.solver, float(tolerance), [], {}, preconditioners=pc_names, fields=fields,
                          reference_info=the_plan.info())
        at = ["before the first run"]           # where a signal that stops the comparison finds it
        try:
            _check_then_run(comp, the_plan, pc_cases, fields, out_path, overwrite, at,
                            dict(progress=progress, warmup=warmup, repeats=repeats, time_budget_s=time_budget_s,
                                 plan=the_plan, stop=stop, judge=judge, family=case.solver))
            # the files are written as a write (a signal only requests a stop) and the request looked at after them:
            # a signal inside them stops the comparison as one anywhere else does (it used to exit 0, issue 49)
            at[0] = "while the comparison's files were written (every configuration had run)"
            with interrupts.deferred():
                if out_path is not None:
                    comp.write(out_path)
            interrupts.stop_if_requested(stop)
        except (RunInterrupted, KeyboardInterrupt):
            _stopped(comp, case, out_path, at[0])
    return comp


def _check_then_run(comp: Comparison, the_plan, pc_cases, fields, out_path, overwrite: bool, at: list,
                    timing: dict) -> None:
    """The plan's lines, the reference's cross-check, then every configuration (``_run_all``); a reference that
    fails its cross-check leaves every configuration 'not run'. ``at[0]``: where a stopping signal finds it."""
    configs = the_plan.configs
    with _Progress(timing["progress"], len(configs)) as report:
        for text in the_plan.lines():
            report.line(text)
        why = compare_reference.cross_check(the_plan, pc_cases[configs[0][2]], fields, SKIP_FIELDS, report)
        if why:     # a failed reference: nothing is judged against it, so nothing else runs
            comp.reference_failed = why
            comp.skipped.update({compare_reference.key(*c): "not run: the reference failed its cross-check"
                                 for c in configs})
            return
        at[0] = "between two runs"
        _run_all(comp, configs, pc_cases, out_path, overwrite, {**timing, "report": report})


def _stopped(comp: Comparison, case, out_path, at: str):
    """A signal stopped the comparison: its files say so (no plots: those of a complete write that the signal came
    in are removed) and RunInterrupted (exit 130) follows."""
    with interrupts.deferred():
        comp.interrupted = comp.interrupted or f"interrupted by a signal {at}"
        where = f"; the runs done so far are in {out_path}/comparison.json" if out_path is not None else ""
        if out_path is not None:
            for name in COMPARISON_PLOTS:
                with contextlib.suppress(OSError):
                    (out_path / "plots" / f"{name}.png").unlink()
            comp.write(out_path, plots=False)
    raise RunInterrupted(f"{case.name}: comparison stopped: {comp.interrupted}{where}") from None


def plan(case: CaseBase | str | Path, backends: list[str] | None = None, precisions: list[str] | None = None,
         tolerance: float = DEFAULT_TOLERANCE, *, overrides=(), preconditioners: list[str] | None = None,
         reference: str | None = None, budget: float | None = None, warmup: bool = True,
         repeats: int | None = None, fields: list[str] | None = None, judge: str | None = None) -> compare_reference.Plan:
    """What ``compare`` with these arguments would run, without running it (``hpcsolve compare --dry-run``): the
    reference and its planned cross-check, every configuration's predicted time, the budget's skips and the total
    (``Plan.lines()``, ``Plan.info()``). Bad input is refused as ``compare`` refuses it."""
    return _planned(case, backends, precisions, tolerance, overrides, repeats, warmup, preconditioners, fields,
                    reference, budget, judge, estimate_all=True)[0]


def _planned(case, backends, precisions, tolerance, overrides, repeats, warmup, preconditioners, fields, reference,
             budget, judge, *, estimate_all: bool):
    """The inputs checked and the plan made: (plan, case, the case of each preconditioner, the preconditioner names,
    the fields judged, the judge asked for: None for the default). Every option is checked here, before anything
    runs (a dry run refuses what the comparison would refuse)."""
    case, backends, precisions = checked_inputs(case, backends, precisions, tolerance, repeats, overrides,
                                                runmod.as_names)
    pc_names = _check_preconditioners(case, preconditioners)
    fields = _check_fields(fields if fields is not None else getattr(getattr(case, "compare", None), "fields", None))
    check_fields_known(case, fields)       # a field of another kind of case, or no metric's name: refused now
    judge = compare_judge.check_judge(case, judge)
    asked = getattr(getattr(case, "compare", None), "reference", compare_reference.AUTO)
    the_plan, pc_cases = compare_reference.make_plan(
        case, backends, precisions, pc_names, requested=asked if reference is None else reference,
        field_name="compare.reference" if reference is None else "--reference", tolerance=float(tolerance),
        budget=budget, estimate_all=estimate_all,
        runs_each=int(warmup) + (repeats if repeats is not None else DEFAULT_REPEATS),
        long_run_s=None)      # long runs are timed DEFAULT_REPEATS times too (runs_each)
    return the_plan, case, pc_cases, pc_names, fields, judge


def _run_all(comp: Comparison, configs, pc_cases, out_path, overwrite: bool, timing: dict) -> None:
    """Every configuration in turn, its Run appended to ``comp`` (the first of the reference backend/precision that
    runs is the reference; one predicted past the budget is a 'skipped' row;
    one that does not finish well is a failed reference, ``comp.reference_failed``, and nobody is judged against
    it). A signal (RunInterrupted, KeyboardInterrupt) ends the comparison: the configuration it stopped is an
    'interrupted' row, ``comp.interrupted`` says so, and the exception goes on."""
    retire = out_path is not None and overwrite      # the earlier comparison's files: before the first run writes
    ref_result: Result | None = None
    ref_run: Run | None = None
    the_plan = timing["plan"]
    for i, (backend, prec, pc) in enumerate(configs):
        interrupts.stop_if_requested(timing["stop"])     # a signal in a write between two runs (or as one ended)
        key = compare_reference.key(backend, prec, pc)
        if key in the_plan.skip:        # predicted past the budget: a row saying so
            comp.runs.append(Run(backend, prec, status="skipped", preconditioner=pc, message=the_plan.skip[key],
                                 reference_run=False, predicted_s=the_plan.predicted.get(key)))
            continue
        status = backends_mod.probe(backend)
        if not status.available:
            comp.skipped[key] = status.reason
            continue
        name = f"{backend}-{prec}" + (f"-{pc}" if pc is not None else "")
        run_dir = out_path / name if out_path is not None else None
        timing["report"].start(i, key)
        try:
            res, times, desc, extra = _timed_runs(pc_cases[pc], backend, prec, run_dir, timing,
                                                  out_path if retire else None)
            retire = False
        except (RunInterrupted, KeyboardInterrupt) as exc:
            why = str(exc) if isinstance(exc, RunInterrupted) else "interrupted by a signal"
            comp.runs.append(Run(backend, prec, status="interrupted", preconditioner=pc, message=why,
                                 reference_run=False))
            comp.interrupted = f"{key} was interrupted by a signal; the configurations after it did not run"
            raise
        except HpcsolveError as exc:
            partial = getattr(exc, "result", None)
            # no reference yet: only another configuration of the reference backend/precision may take its place
            if ref_result is None and not any((b, p) == the_plan.reference for b, p, _ in configs[i + 1:]):
                raise
            comp.runs.append(Run(backend, prec, status=getattr(partial, "status", "failed") if partial else "failed",
                                 preconditioner=pc, message=str(exc), reference_run=False))
            timing["report"].line(f"{key}: {comp.runs[-1].status}")
            continue
        extra["judged"], extra["predicted_s"] = comp.fields, the_plan.predicted.get(key)
        if ref_result is None:          # the reference: judged against itself only when it finished well
            finished = res.status in OK_STATUS
            if finished:
                _fields_in(comp.fields, res)
            run = _run_record(backend, prec, pc, res, times, desc, extra, res if finished else None, reference=True)
            ref_result, ref_run = res, run
            comp.discretisation = compare_judge.discretisation(res) if timing["family"] == "fem" else {}
            compare_judge.resolve(comp, timing["judge"], timing["family"])
            if not finished:
                comp.reference_failed = (f"the reference {run.label} ended {res.status}"
                                         + (f" ({res.message})" if res.message else ""))
        else:
            run = _run_record(backend, prec, pc, res, times, desc, extra, None if comp.reference_failed else ref_result)
        if comp.reference_failed:
            run.error_note = ("the failed reference: no error or speedup is measured against it" if run is ref_run else
                              f"not judged: {comp.reference_failed}, so no error or speedup is measured against it")
        else:
            run.speedup = ref_run.wall_s / run.wall_s if run.wall_s > 0 else math.nan
        comp.runs.append(run)
        timing["report"].done(run)


def _timed_runs(case: CaseBase, backend, prec, run_dir, timing: dict, retire_in):
    """One configuration: planned once (the setup built once), a warm-up run, the written run and the further
    timed runs (``_more_repeats``); (the written run's result, the solver times, the description, and a dict of
    the ``policy`` and the ``setup_times``: each timed run's preconditioner set-up, FEM).
    ``retire_in``: the --overwrite folder whose earlier comparison files go before this first written run."""
    report, repeats = timing["report"], timing["repeats"]
    t0 = time.perf_counter()
    cfg_case, backend_obj, policy, desc = runmod.plan(case, backend, prec)
    phases = {"plan": time.perf_counter() - t0}
    if timing["warmup"]:
        t0 = time.perf_counter()
        short = families.get(cfg_case.solver).warmup_case(cfg_case, desc)
        report.phase("warm-up run (untimed)" if short is cfg_case else "warm-up run (untimed, the run's first steps)")
        with warnings.catch_warnings():       # the short copy's own notes (a smooth start longer than it) are not the run's
            warnings.simplefilter("ignore")
            runmod.run_case(short, backend_obj, policy, progress=False, description=desc if short is cfg_case else None)
        phases["warmup"] = time.perf_counter() - t0
    if retire_in is not None:       # the first run that will write: unless it is refused before it starts
        runmod.check_memory(desc, backend_obj)
        _retire_comparison(retire_in)
    report.phase("timed run 1 (written)")
    t0 = time.perf_counter()
    res = runmod.run_case(cfg_case, backend_obj, policy, out=run_dir, progress=timing["progress"], overwrite=True,
                          description=desc)
    phases["runs"] = [time.perf_counter() - t0]
    times, extra = [_solver_seconds(res)], 0.0
    setup_times = [_setup_seconds(res)]
    report.timed(1, times[0], phases["runs"][0])
    while _more_repeats(times, repeats, timing["time_budget_s"], extra):
        t0 = time.perf_counter()
        report.phase(f"timed run {len(times) + 1}")
        more = runmod.run_case(cfg_case, backend_obj, policy, progress=False, description=desc)
        phases["runs"].append(time.perf_counter() - t0)
        times.append(_solver_seconds(more))
        setup_times.append(_setup_seconds(more))
        report.timed(len(times), times[-1], phases["runs"][-1])
        if len(times) > DEFAULT_REPEATS:
            extra += phases["runs"][-1]
    return res, times, desc, {"policy": policy, "setup_times": setup_times, "phases_s": phases}


def _run_record(backend, prec, pc, res: Result, times, desc, extra: dict, ref_result: Result | None, *,
                reference: bool = False) -> Run:
    """The Run of a configuration that ran: its times, throughput, memory, and its errors against ``ref_result``
    (None: none measured, a failed reference); ``reference``: this run is the reference. ``extra``: the policy,
    the set-up times and the ``judged`` selection."""
    judged = extra.get("judged")
    used = res.metrics.get("preconditioner")
    wall_s = float(np.median(times))
    run = Run(backend, prec, status=res.status, preconditioner=pc, wall_s=wall_s, times=times,
              total_s=float(res.timings.get("total_s", math.nan)), throughput=_throughput(res, times[0], wall_s),
              memory_bytes=desc.memory_bytes, reference_errors=_reference_errors(res), judged=judged,
              setup_times=[t for t in extra["setup_times"] if math.isfinite(t)],
              residuals=_residuals(res), message=res.message,
              preconditioner_used=used if isinstance(used, str) else None,
              preconditioner_info=dict(res.metrics.get("preconditioner_info") or {}),
              reference_run=reference, result=res, predicted_s=extra.get("predicted_s"),
              validation=dict(getattr(res, "validation", None) or {}), phases_s=dict(extra.get("phases_s") or {}))
    run.state_bytes, run.state_basis = state_memory(res, extra["policy"])
    run.solution = compare_judge.solution_metrics(res)
    if ref_result is None:
        return run
    for fname, ref in ref_result.fields.items():
        if fname in SKIP_FIELDS or fname not in res.fields or not np.issubdtype(np.asarray(ref).dtype, np.floating):
            continue
        run.field_errors[fname] = field_error(res.fields[fname], ref)
    for name in judged or ():             # selected scalar metrics: relative difference to the reference's
        if name not in run.field_errors and _number(res.metrics.get(name)) and _number(ref_result.metrics.get(name)):
            a, b = float(res.metrics[name]), float(ref_result.metrics[name])
            rel = abs(a - b) / abs(b) if b != 0 else abs(a - b)
            run.field_errors[name] = {"rel_l2": rel, "rel_max": rel}
    run.drift = _drift(res, ref_result, judged)
    # a periodic flow is judged at the same phase of its cycle and by its quantities of interest (report/periodic.py)
    run.periodic = periodic.judge(res, ref_result, judged, SKIP_FIELDS, run.field_errors)
    return run


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _check_fields(fields) -> list[str] | None:
    """The ``fields`` selection as a list of names, checked before anything runs (a list of names, each once)."""
    if fields is None:
        return None
    if isinstance(fields, str):
        fields = [fields]
    names = []
    for f in fields:
        if not isinstance(f, str) or not f.strip():
            raise CaseError.invalid("--fields", f, "names of fields (velocity, pressure, ...) or scalar metrics")
        if f.strip() in names:
            raise CaseError.invalid("--fields", f, "each name once")
        names.append(f.strip())
    if not names:
        raise CaseError.invalid("--fields", [], "at least one field or metric name (None: every field)")
    return names


def _fields_in(fields, ref: Result) -> None:
    """Every name of the ``fields`` selection is a field or a scalar metric of the reference run, else CaseError."""
    have = [f for f, v in ref.fields.items() if f not in SKIP_FIELDS and np.issubdtype(np.asarray(v).dtype, np.floating)]
    metrics = sorted(k for k, v in ref.metrics.items() if _number(v))
    unknown = [f for f in fields or () if f not in have and f not in metrics]
    if unknown:
        raise CaseError.invalid("--fields", " ".join(unknown), "fields: " + ", ".join(have) + "; metrics: "
                                + ", ".join(metrics), why="the reference run has no field or scalar metric of that name")


def _solver_seconds(res: Result) -> float:
    """The run's solver time (``family.SOLVER_SECONDS``; FEM: the solve and its preconditioner set-up)."""
    return float(res.timings.get(SOLVER_SECONDS, math.nan))


def _setup_seconds(res: Result) -> float:
    """The run's preconditioner set-up time (FEM), part of its solver time; nan where it has none."""
    return float(res.timings.get("preconditioner_setup_s", math.nan))



def _more_repeats(times: list[float], repeats: int | None, budget_s: float, extra_s: float = 0.0) -> bool:
    """Another timed run? ``times``: solver times so far; ``extra_s``: wall time already spent on repeats
    beyond the first DEFAULT_REPEATS (whole runs: setup, reference solves, fields), held to ``budget_s``."""
    if repeats is not None:
        return len(times) < repeats
    if len(times) < DEFAULT_REPEATS:
        return True             # a claim of "measurably faster" needs DEFAULT_REPEATS timings (a spread)
    if times[0] >= LONG_RUN_S:
        return False            # a long run: DEFAULT_REPEATS timings, none more for its spread
    med = float(np.median(times))
    spread = (max(times) - min(times)) / med if med > 0 else 0.0
    per_run = extra_s / (len(times) - DEFAULT_REPEATS) if len(times) > DEFAULT_REPEATS else med
    return bool(spread > TARGET_SPREAD and len(times) < MAX_REPEATS and extra_s + per_run <= budget_s)


def _throughput(res: Result, first_s: float = math.nan, median_s: float = math.nan) -> dict:
    """MLUPS (LBM) or time per iteration, iterations and time to solution (FEM), where the run reports them, taken
    from the median solver time ``median_s`` of the timed runs (the ``time_s`` beside them), not from the written run
    alone (``first_s``, its solver time): MLUPS scaled by first_s / median_s (the same cells x steps), the time per
    iteration median_s / iterations, the time to solution median_s."""
    out = {}
    for key in ("mlups", "time_per_iteration_s", "iterations", "time_to_solution_s"):
        for src in (res.timings, res.metrics):
            if key in src and isinstance(src[key], (int, float)) and not isinstance(src[key], bool):
                out[key] = float(src[key])
                break
    if not (math.isfinite(first_s) and math.isfinite(median_s) and first_s > 0 and median_s > 0):
        return out
    if "mlups" in out:
        out["mlups"] *= first_s / median_s
    if out.get("iterations", 0) > 0 and "time_per_iteration_s" in out:
        out["time_per_iteration_s"] = median_s / out["iterations"]
    if "time_to_solution_s" in out:
        out["time_to_solution_s"] = median_s
    return out


def _reference_errors(res: Result) -> dict:
    """The errors against analytic or published references the run reports."""
    return {k: v for k, v in res.metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
            and ("error" in k or "diff" in k or k in ("drag_coefficient", "lift_coefficient", "strouhal", "tip_displacement"))}


def _residuals(res: Result) -> dict:
    """FEM: true and recursive residual, their gap, iterations."""
    keys = ("true_residual", "recursive_residual", "residual_gap", "iterations", "outer_iterations", "converged")
    return {k: res.metrics[k] for k in keys if k in res.metrics}




def _drift(res: Result, ref: Result, judged=None) -> dict:
    """The error of the first selected field (default velocity, else the first field) against the reference at each
    common output time (LBM), with the field's name."""
    times, errs, key = [], [], None
    for s, r in zip(res.snapshots, ref.snapshots):
        key = next((f for f in (judged or ()) if f in r.fields),
                   "velocity" if "velocity" in r.fields else next(iter(r.fields), None))
        if key is None or key not in s.fields or s.step != r.step:
            continue
        times.append(r.time)
        errs.append(field_error(s.fields[key], r.fields[key])["rel_l2"])
    return {"field": key, "time": times, "rel_l2": errs} if times else {}


class _Progress:
    """Progress lines of a comparison on stderr (nothing when not ``enabled``): each configuration's start and end,
    each timed run, and a "still running" line whenever PROGRESS_EVERY_S passed without one (a daemon thread)."""

    def __init__(self, enabled: bool, total: int, write=None, clock=time.monotonic):
        self.enabled, self.total, self.clock = enabled, total, clock
        self.write = write or (lambda text: print(text, file=sys.stderr, flush=True))
        self.key, self.what, self.t_config = "", "", 0.0
        self.last = clock()
        self._stop = threading.Event()
        self._thread = None

    def __enter__(self):
        if self.enabled:
            self._thread = threading.Thread(target=self._beat, name="compare-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        return False

    def line(self, text: str) -> None:
        if self.enabled:
            self.last = self.clock()
            self.write(f"compare: {text}")

    def start(self, i: int, key: str) -> None:
        self.key, self.t_config = key, self.clock()
        self.line(f"[{i + 1}/{self.total}] {key}: started")

    def phase(self, what: str) -> None:
        self.what = what
        self.line(f"{self.key}: {what}")

    def timed(self, n: int, seconds: float, whole: float | None = None) -> None:
        rest = "" if whole is None else (f" (the whole run {whole:.3g} s: set-up, finishing"
                                         + (", writing)" if n == 1 else ")"))
        self.line(f"{self.key}: timed run {n}: {seconds:.3g} s{rest}")

    def done(self, run: Run) -> None:
        err = f", error {run.error_text()}" if math.isfinite(run.error) else ""
        ph = run.phases_s
        where = (f"; plan {ph['plan']:.2g} s" + (f", warm-up {ph['warmup']:.2g} s" if "warmup" in ph else "")
                 + f", timed runs {sum(ph.get('runs') or ()):.3g} s") if "plan" in ph else ""
        self.line(f"{self.key}: done in {self.clock() - self.t_config:.1f} s ({run.status}, median {run.wall_s:.3g} s"
                  f"{err}{where})")

    def tick(self) -> bool:
        """One check of the heartbeat: a "still running" line when PROGRESS_EVERY_S passed since the last line."""
        if not (self.enabled and self.key) or self.clock() - self.last < PROGRESS_EVERY_S:
            return False
        self.line(f"{self.key}: still running ({self.what}), {self.clock() - self.t_config:.0f} s so far")
        return True

    def _beat(self) -> None:
        while not self._stop.wait(1.0):
            self.tick()
