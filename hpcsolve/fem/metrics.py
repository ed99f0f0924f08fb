"""The figures of an FEM run's Result: the solve's report as metrics (the preconditioner it used, named by its object),
its timings, the errors against the manufactured solution, the probe, and the advice of an unconverged solve."""

from __future__ import annotations

import math

import numpy as np

from hpcsolve.core import backends
from hpcsolve.core.family import SOLVER_SECONDS
from hpcsolve.core.precision import Precision
from hpcsolve.fem import judge
from hpcsolve.fem.choices import preconditioner_used
from hpcsolve.fem.discrete import device
from hpcsolve.fem.discrete import problem as prob
from hpcsolve.fem.linalg.precond import registry


def solve_metrics(report, pc, grid=None) -> dict:
    """The solve's report as metrics; ``preconditioner`` the one used: "mg" that fell back to aggregation AMG on a
    grid it cannot halve is "amg", with ``preconditioner_requested`` and ``preconditioner_note`` saying so
    (``choices.preconditioner_used``; the run's message repeats the note)."""
    metrics = {key: getattr(report, key) for key in (
        "converged", "reason", "method", "iterations", "outer_iterations", "true_residual", "recursive_residual",
        "residual_gap", "kappa_estimate", "fallback", "time_per_iteration_s")}
    name = registry.spec_of(pc).name
    used, note = preconditioner_used(pc, report.preconditioner, grid)
    metrics["preconditioner"] = used
    if used != name:
        metrics["preconditioner_requested"] = name
    if note:
        metrics["preconditioner_note"] = note
    if report.preconditioner:
        metrics["preconditioner_info"] = report.preconditioner
    return metrics


#: what the run's time figures hold (the summary's timing_basis): a reader of the table can tell them apart
TIMING_BASIS = "per iteration: the solve alone, cold (GPU compilation, graph capture in); wall: the whole run"


def per_iteration(report, timings: dict) -> dict:
    """The solve-alone and the wall figure per iteration, and what each includes (TIMING_BASIS)."""
    its = report.iterations
    wall = timings["total_s"] / its if its else float("nan")
    return {"wall_time_per_iteration_s": wall, "timing_basis": TIMING_BASIS}


def after(mapping: dict, key: str, more: dict) -> dict:
    """``mapping`` with ``more`` inserted right after ``key`` (at the end without it)."""
    out = {}
    for k, v in mapping.items():
        out[k] = v
        if k == key:
            out.update(more)
    out.update(more)
    return out


def run_timings(disc, report) -> dict:
    timings = dict(disc.timings)
    timings["solve_s"] = report.time_s
    pc_setup = float(report.preconditioner.get("setup_time_s", 0.0)) if report.preconditioner else 0.0
    if report.preconditioner:
        timings["preconditioner_setup_s"] = pc_setup
    # what compare weighs: the solve and the preconditioner it needed (a hierarchy is built per run)
    timings[SOLVER_SECONDS] = report.time_s + pc_setup
    timings["solver_setup_s"] = report.setup_time_s
    return timings


def probe_metrics(out, disc, u) -> dict:
    """The probe point's value (and its published reference), and the solution's range."""
    metrics: dict = {}
    mesh = disc.mesh
    if out.probe is not None:
        k = device.nearest_node(disc.device_mesh.points if disc.device_mesh is not None else mesh.points, out.probe)
        metrics["probe_point"] = mesh.points[k].tolist()
        if disc.kind == "poisson":
            value = float(u[k])          # probe_value (probe_u used to repeat it)
        else:
            comps = {f"u{'xyz'[c]}": float(u[k, c]) for c in range(u.shape[1])}
            metrics.update({f"probe_{name}": v for name, v in comps.items()})
            value = {**comps, "u": comps["uy"], "magnitude": float(np.linalg.norm(u[k]))}[out.probe_component]
        metrics["probe_value"] = float(value)
        if out.probe_reference is not None:
            metrics["probe_reference"] = out.probe_reference
            metrics["probe_rel_error"] = abs(float(value) - out.probe_reference) / abs(out.probe_reference)
    if disc.kind == "poisson":
        metrics["u_min"], metrics["u_max"] = float(u.min()), float(u.max())
    else:
        metrics["displacement_max"] = float(np.sqrt((u * u).sum(axis=1)).max())
    return metrics



def exact_errors(disc, u) -> tuple[dict, dict]:
    """Errors against the manufactured solution: (metrics, fields); on the device where the system was assembled
    there (the solution uploaded once, the two fields copied back once)."""
    u_ex, grad_ex = disc.exact
    dm = disc.device_mesh
    mesh = dm if dm is not None else disc.mesh
    uu = dm.xp.asarray(u) if dm is not None else u
    l2, h1 = prob.error_norms(mesh, uu, u_ex, grad_ex)
    exact_nodal = u_ex(*(mesh.points[:, k] for k in range(mesh.points.shape[1])))
    err = uu - exact_nodal
    emax = float(abs(err).max())
    return ({"error_l2": l2, "error_h1_seminorm": h1, "error_max_nodal": emax},
            {"u_exact": backends.to_host(exact_nodal), "error": backends.to_host(err)})


def advice_for(report, policy: Precision, solve_opts, metrics: dict) -> str:
    """What to change when the solve missed rtol; first, where its solution error is negligible against the
    discretisation error (``judge.ACCURATE_STATUS``), that the solution stands. A converged solve: nothing, unless its
    solution error is not negligible (a loose rtol, a low precision)."""
    accurate, why = judge.judge_solution(metrics)
    if report.converged:      # rtol met, yet the precision's error may not be small against the discretisation's
        more = "" if policy.refinement or policy.compute == np.float64 else " or use precision 'mixed'"
        return (f"; but {why}: tighten solve.rtol{more}" if accurate is False else "")
    if not policy.refinement and policy.compute != np.float64:
        looser = (f" to about {max(report.true_residual, 1e-16):.0e}" if math.isfinite(report.true_residual) else "")
        advice = (f"{policy.name} cannot reach rtol {solve_opts.rtol:g} on this problem: use precision 'mixed' "
                  f"(float32 work, float64 accuracy) or loosen solve.rtol{looser}")
    elif "stalled" in report.reason and math.isfinite(report.true_residual):
        # the float64 true residual cannot go lower (about kappa x unit roundoff): more iterations cannot help
        advice = (f"more iterations cannot help (float64 reaches about kappa x unit roundoff on this matrix): loosen "
                  f"solve.rtol to about {max(report.true_residual, 1e-16):.0e}")
    else:
        advice = "raise solve.maxiter or loosen solve.rtol"
    if accurate:
        return f"; accurate to the discretisation all the same: {why}; to reach rtol as well: {advice}"
    if accurate is None and metrics.get("discretisation_error") is not None:
        advice += ("; the solution's error was not judged against the discretisation error: no float64 reference "
                   "(solve.reference = 'always' makes one)")
    return f"; {advice}"
