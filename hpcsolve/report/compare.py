"""Accuracy-vs-speed comparison of one case across backends x precisions (x preconditioners, FEM).

Every configuration runs the same case; the CPU FP64 reference (NumPy LBM / SciPy-backed FEM)
runs first. For each run the comparison records wall time, throughput, speedup over the reference,
memory, the error of every field against the reference run (relative L2 and relative max), the
drift of that error over the output times, the errors against analytic/published references that
the run itself reports, and (FEM) the true residual and the recursive-vs-true gap.

Timing: every configuration runs once untimed (warm-up: compilation, memory pools, imports), then
at least ``repeats`` (3) timed runs, more while the spread (max - min) / median is above 5% and the
configuration's time budget allows; times are the solver's own (``family.SOLVER_SECONDS``), reported
as median and min-max. Host BLAS/OpenMP threads are pinned for every run (``Backend.run_context``).

Preconditioners (FEM): with ``preconditioners`` every backend x precision runs once per listed name,
with ``solve.preconditioner`` of the case overridden (the same path as ``--set``); a configuration is then
backend/precision/preconditioner everywhere (labels, table, JSON, plots, recommendation). The reference
is the CPU FP64 run with the case's own preconditioner when it is listed, else the first listed; should
that configuration fail (e.g. "mg" on a mesh that is not a structured generator mesh), the next CPU FP64
one is the reference. Without ``preconditioners`` the case's own setting is used (one run per
backend x precision), and the label has no preconditioner part.

A reference that runs but does not finish well (status not completed / converged / not_steady, e.g. not_converged at
``solve.maxiter``) is a failed reference: ``Comparison.reference_failed`` says why (table, comparison.json, and the
CLI exits 3), no run gets an error or speedup against it (``Run.error_note`` says why), and nothing is recommended.

The ``out`` folder is claimed for the whole comparison as a run claims its own (``outdir.claim``: one lock, so a
second comparison or a run into it is refused naming the holder; a folder holding a run's result is refused). A
SIGINT/SIGTERM stops the comparison: the configuration it stopped is an 'interrupted' row, comparison.json / .md are
written marked ``interrupted`` (no plots, no recommendation), and ``RunInterrupted`` (exit 130) follows.

Recommendation: the FP64 reference is a candidate like every other run. A run is *acceptable* when it
finished (completed or converged) and its field error (the largest relative L2 error over the fields)
is within the tolerance. A run is recommended over a more accurate one only when it is faster beyond
the measured spread (its slowest timed run is faster than the other's fastest; both timed at least 3 times)
and by at least 10% of the other's median time; otherwise the more
accurate one is recommended. So the answer is never a run slower than the reference, and when no
configuration is measurably faster than the reference it says so and recommends the reference.
Every run gets a verdict saying why it is or is not recommended.
"""

from __future__ import annotations

import contextlib
import math
import time
from pathlib import Path

import numpy as np

from hpcsolve import run as runmod   # (its run_case looked up at call time: tests stop a comparison through it)
from hpcsolve.core import backends as backends_mod
from hpcsolve.core import interrupts, outdir
from hpcsolve.core.cases import CaseBase
from hpcsolve.core.errors import HpcsolveError, RunInterrupted
from hpcsolve.core.family import SOLVER_SECONDS
from hpcsolve.core.results import Result
from hpcsolve.report.compare_inputs import (_check_preconditioners, _retire_comparison, check_out, checked_inputs,
                                            configurations)
from hpcsolve.report.comparison import OK_STATUS, REFERENCE, Comparison, Run, field_error

__all__ = ["DEFAULT_TOLERANCE", "compare"]

DEFAULT_TOLERANCE = 1e-3
DEFAULT_REPEATS = 3          # timed runs per configuration, at least
MAX_REPEATS = 10             # at most, when the spread stays above TARGET_SPREAD
TARGET_SPREAD = 0.05         # (max - min) / median above which more repeats are taken, while the budget allows
DEFAULT_BUDGET_S = 60.0      # seconds of timed runs per configuration beyond the first `repeats`
SKIP_FIELDS = {"flags", "u_exact", "error"}  # geometry codes, analytic fields and their errors


def compare(case: CaseBase | str | Path, backends: list[str] | None = None, precisions: list[str] | None = None,
            tolerance: float = DEFAULT_TOLERANCE, *, out: str | Path | None = None, overrides=(),
            progress: bool = False, warmup: bool = True, repeats: int | None = None,
            time_budget_s: float = DEFAULT_BUDGET_S, preconditioners: list[str] | None = None,
            overwrite: bool = False) -> Comparison:
    """Run ``case`` for each available backend x precision plus the CPU FP64 reference and compare.

    With ``warmup`` (default) each configuration runs once untimed first, so kernel compilation,
    memory-pool growth and first-call imports are not counted in its time. ``repeats``: exactly this
    many timed runs per configuration; by default at least 3, more (up to 10) while the spread is
    above 5% and ``time_budget_s`` of timed runs per configuration allows. The first timed run's
    result is the one written and compared.

    ``preconditioners`` (FEM cases only): names of ``solve.preconditioner`` ("none", "jacobi", "mg",
    "amg", "auto"); every backend x precision runs once per name. A name the case model does not
    accept, or the option on an LBM case, is refused (CaseError) before anything runs; a configuration
    whose run refuses its preconditioner (e.g. "mg" on a mesh that is not a structured generator mesh)
    is recorded as failed with the reason, and the others still run.

    ``out``: the folder of the comparison (comparison.json / .md, plots/, one folder per run); one that already
    holds a comparison is refused before anything runs unless ``overwrite`` (:func:`check_out`)."""
    case, backends, precisions = checked_inputs(case, backends, precisions, tolerance, repeats, overrides,
                                                runmod.as_names)
    pc_names = _check_preconditioners(case, preconditioners)
    configs, pc_cases = configurations(case, backends, precisions, pc_names)
    out_path = runmod.out_folder_arg(out)
    if out_path is not None:
        check_out(out_path, overwrite)
    # the folder claimed as a run claims its own (one lock: a second comparison or a run into it is refused naming
    # this one); the signal handlers outermost, as in run.run_case: a signal stops the comparison, and its files and
    # the folder's release are written as writes (a late signal only requests a stop)
    claim = (outdir.claim(out_path, overwrite=overwrite, comparison=True) if out_path is not None
             else contextlib.nullcontext())
    with interrupts.stop_on_signals(graceful=False), interrupts.exit_deferred(claim):
        if out_path is not None:
            check_out(out_path, overwrite)      # again under the lock: a comparison that finished meanwhile counts
        comp = Comparison(case.name, case.solver, float(tolerance), [], {}, preconditioners=pc_names)
        try:
            _run_all(comp, configs, pc_cases, out_path, overwrite, dict(progress=progress, warmup=warmup,
                                                                        repeats=repeats, time_budget_s=time_budget_s))
        except (RunInterrupted, KeyboardInterrupt):
            with interrupts.deferred():
                comp.interrupted = comp.interrupted or "interrupted by a signal between two runs"
                where = f"; the runs done so far are in {out_path}/comparison.json" if out_path is not None else ""
                if out_path is not None:
                    comp.write(out_path, plots=False)
            raise RunInterrupted(f"{case.name}: comparison stopped: {comp.interrupted}{where}") from None
        with interrupts.deferred():
            if out_path is not None:
                comp.write(out_path)
    return comp


def _run_all(comp: Comparison, configs, pc_cases, out_path, overwrite: bool, timing: dict) -> None:
    """Every configuration in turn, its Run appended to ``comp`` (the first CPU FP64 one that runs is the reference;
    one that does not finish well is a failed reference, ``comp.reference_failed``, and nobody is judged against
    it). A signal (RunInterrupted, KeyboardInterrupt) ends the comparison: the configuration it stopped is an
    'interrupted' row, ``comp.interrupted`` says so, and the exception goes on."""
    retire = out_path is not None and overwrite      # the earlier comparison's files: before the first run writes
    ref_result: Result | None = None
    ref_run: Run | None = None
    for i, (backend, prec, pc) in enumerate(configs):
        key = f"{backend}/{prec}" + (f"/{pc}" if pc is not None else "")
        status = backends_mod.probe(backend)
        if not status.available:
            comp.skipped[key] = status.reason
            continue
        name = f"{backend}-{prec}" + (f"-{pc}" if pc is not None else "")
        run_dir = out_path / name if out_path is not None else None
        try:
            res, times, desc = _timed_runs(pc_cases[pc], backend, prec, run_dir, timing["progress"],
                                           timing["warmup"], timing["repeats"], timing["time_budget_s"],
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
            # no reference yet: only another CPU FP64 configuration still to come may take its place
            if ref_result is None and not any((b, p) == REFERENCE for b, p, _ in configs[i + 1:]):
                raise
            comp.runs.append(Run(backend, prec, status=getattr(partial, "status", "failed") if partial else "failed",
                                 preconditioner=pc, message=str(exc), reference_run=False))
            continue
        if ref_result is None:          # the reference: judged against itself only when it finished well
            finished = res.status in OK_STATUS
            run = _run_record(backend, prec, pc, res, times, desc, res if finished else None, reference=True)
            ref_result, ref_run = res, run
            if not finished:
                comp.reference_failed = (f"the reference {run.label} ended {res.status}"
                                         + (f" ({res.message})" if res.message else ""))
        else:
            run = _run_record(backend, prec, pc, res, times, desc, None if comp.reference_failed else ref_result)
        if comp.reference_failed:
            run.error_note = ("the failed reference: no error or speedup is measured against it" if run is ref_run else
                              f"not judged: {comp.reference_failed}, so no error or speedup is measured against it")
        else:
            run.speedup = ref_run.wall_s / run.wall_s if run.wall_s > 0 else math.nan
        comp.runs.append(run)


def _timed_runs(case: CaseBase, backend, prec, run_dir, progress, warmup, repeats, time_budget_s, retire_in):
    """One configuration: planned once (the setup built once), a warm-up run, the written run and the further
    timed runs (``_more_repeats``); (the written run's result, the solver times, the description).
    ``retire_in``: the --overwrite folder whose earlier comparison files go before this first written run."""
    cfg_case, backend_obj, policy, desc = runmod.plan(case, backend, prec)
    if warmup:
        runmod.run_case(cfg_case, backend_obj, policy, progress=False, description=desc)
    if retire_in is not None:       # the first run that will write: unless it is refused before it starts
        runmod.check_memory(desc, backend_obj)
        _retire_comparison(retire_in)
    res = runmod.run_case(cfg_case, backend_obj, policy, out=run_dir, progress=progress, overwrite=True,
                          description=desc)
    times, extra = [_solver_seconds(res)], 0.0
    while _more_repeats(times, repeats, time_budget_s, extra):
        t0 = time.perf_counter()
        times.append(_solver_seconds(runmod.run_case(cfg_case, backend_obj, policy, progress=False,
                                                     description=desc)))
        if len(times) > DEFAULT_REPEATS:
            extra += time.perf_counter() - t0
    return res, times, desc


def _run_record(backend, prec, pc, res: Result, times, desc, ref_result: Result | None, *,
                reference: bool = False) -> Run:
    """The Run of a configuration that ran: its times, throughput, memory, and its errors against ``ref_result``
    (None: none measured, a failed reference); ``reference``: this run is the reference."""
    used = res.metrics.get("preconditioner")
    run = Run(backend, prec, status=res.status, preconditioner=pc, wall_s=float(np.median(times)), times=times,
              total_s=float(res.timings.get("total_s", math.nan)), throughput=_throughput(res),
              memory_bytes=desc.memory_bytes, reference_errors=_reference_errors(res),
              residuals=_residuals(res), message=res.message,
              preconditioner_used=used if isinstance(used, str) else None,
              preconditioner_info=dict(res.metrics.get("preconditioner_info") or {}),
              reference_run=reference, result=res)
    if ref_result is None:
        return run
    for fname, ref in ref_result.fields.items():
        if fname in SKIP_FIELDS or fname not in res.fields or not np.issubdtype(np.asarray(ref).dtype, np.floating):
            continue
        run.field_errors[fname] = field_error(res.fields[fname], ref)
    run.drift = _drift(res, ref_result)
    return run


def _solver_seconds(res: Result) -> float:
    """The run's solver time (``family.SOLVER_SECONDS``)."""
    return float(res.timings.get(SOLVER_SECONDS, math.nan))



def _more_repeats(times: list[float], repeats: int | None, budget_s: float, extra_s: float = 0.0) -> bool:
    """Another timed run? ``times``: solver times so far; ``extra_s``: wall time already spent on repeats
    beyond the first DEFAULT_REPEATS (whole runs: setup, reference solves, fields), held to ``budget_s``."""
    if repeats is not None:
        return len(times) < repeats
    if len(times) < DEFAULT_REPEATS:
        return True
    med = float(np.median(times))
    spread = (max(times) - min(times)) / med if med > 0 else 0.0
    per_run = extra_s / (len(times) - DEFAULT_REPEATS) if len(times) > DEFAULT_REPEATS else med
    return spread > TARGET_SPREAD and len(times) < MAX_REPEATS and extra_s + per_run <= budget_s


def _throughput(res: Result) -> dict:
    """MLUPS (LBM) or time per iteration, iterations and time to solution (FEM), where the run reports them."""
    out = {}
    for key in ("mlups", "time_per_iteration_s", "iterations", "time_to_solution_s"):
        for src in (res.timings, res.metrics):
            if key in src and isinstance(src[key], (int, float)):
                out[key] = float(src[key])
                break
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




def _drift(res: Result, ref: Result) -> dict:
    """The velocity (or first field) error against the reference at each common output time (LBM)."""
    times, errs = [], []
    for s, r in zip(res.snapshots, ref.snapshots):
        key = "velocity" if "velocity" in r.fields else next(iter(r.fields), None)
        if key is None or key not in s.fields or s.step != r.step:
            continue
        times.append(r.time)
        errs.append(field_error(s.fields[key], r.fields[key])["rel_l2"])
    return {"time": times, "rel_l2": errs} if times else {}
