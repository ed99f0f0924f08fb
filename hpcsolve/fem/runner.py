"""The FEM family of ``hpcsolve.core.family`` (``FAMILY``): describe, estimate_runtime, run -> Result."""

from __future__ import annotations

import functools
import math
import time
from pathlib import Path

import numpy as np

from hpcsolve.core import backends, heartbeat, memory, parallel
from hpcsolve.fem import estimate as fem_estimate
from hpcsolve.fem import memory as fem_memory
from hpcsolve.fem import judge
from hpcsolve.fem.choices import (fem_mesh_size, method_of, preconditioner_name, preconditioner_used,
                                  structured_mesh)
from hpcsolve.core.errors import BackendError, CaseError
from hpcsolve.fem.discrete import problem as prob
from hpcsolve.core.family import SOLVER_SECONDS, Description
from hpcsolve.fem.api import _method_for, prepare_matrix, solve
from hpcsolve.fem.discrete import device
from hpcsolve.fem.reference import BESIDE, Reference, beside
from hpcsolve.fem.verdicts import verdicts as fem_verdicts
from hpcsolve.fem.linalg.distributed import prepare_distributed
from hpcsolve.fem.linalg.precond.aggregation import rigid_body_modes
from hpcsolve.fem.linalg.precond.geometric import StructuredGrid
from hpcsolve.fem.linalg.precond.multigrid import Multigrid
from hpcsolve.core import plotstyle
from hpcsolve.core.plotstyle import colorbar, new_figure, run_label, save_png, symmetric_limits
from hpcsolve.core.precision import Precision
from hpcsolve.core.results import Result, TriangleMesh


def check_method(case, policy: Precision) -> None:
    """solve.method against the precision and solve.preconditioner: a CaseError naming the case's field (the solver's
    own check, ``hpcsolve.fem.api._method_for``, names its argument ``method``)."""
    method = method_of(case, policy)
    try:
        _method_for(policy, method)
    except CaseError as exc:
        raise CaseError(str(exc).removeprefix(f"{exc.field}: "), field="solve.method", value=exc.value,
                        allowed=exc.allowed) from None
    if method == "pcg-jacobi" and case.solve.preconditioner in ("mg", "amg"):
        raise CaseError.invalid("solve.preconditioner", case.solve.preconditioner,
                                "auto, jacobi or none with solve.method = 'pcg-jacobi' (or solve.method = 'cg' with "
                                "mg or amg)", why="solve.method 'pcg-jacobi' is CG with the Jacobi preconditioner")
    if method == "spsolve" and case.solve.preconditioner not in ("auto", "none"):
        raise CaseError.invalid("solve.preconditioner", case.solve.preconditioner,
                                "auto or none with solve.method = 'spsolve' (or a CG method, e.g. solve.method = 'cg', "
                                "with jacobi, mg or amg)",
                                why="solve.method 'spsolve' is a direct solve (SuperLU), which takes no preconditioner")


def check_preconditioner(case, mesh, policy: Precision) -> str:
    """The preconditioner's name (``choices.preconditioner_name``); "mg" on a mesh without a structured grid (a
    mesh file, or mesh.refine) is a CaseError. ``mesh`` None: judged from the case (the mesh not built)."""
    name = preconditioner_name(case, mesh, policy)
    if name == "mg" and not structured_mesh(case, mesh):
        source = mesh.source if mesh is not None else f"mesh.kind {case.mesh.kind!r}, mesh.refine {case.mesh.refine}"
        raise CaseError.invalid("solve.preconditioner", "mg", "amg (or auto) for this mesh",
                                why=f"geometric multigrid needs a structured generator mesh (mesh.kind rectangle or "
                                    f"cook_membrane without mesh.refine); this mesh is {source!r}")
    return name


def make_preconditioner(case, disc, policy: Precision):
    """The preconditioner object (or name) for ``solve``: a Multigrid with the mesh's grid or the rigid-body
    modes where it needs them."""
    name = check_preconditioner(case, disc.mesh, policy)
    if name not in ("mg", "amg"):
        return name
    opts = case.solve.multigrid.options()
    nns = rigid_body_modes(disc.mesh.points, disc.free) if disc.kind == "elasticity" else None
    if name == "mg":      # the rigid-body modes serve the aggregation levels below the last halvable grid
        grid = disc.mesh.info["grid"]
        return Multigrid("mg", opts, grid=StructuredGrid(grid[0], grid[1], disc.free, disc.ncomp),
                            near_nullspace=nns, field="solve.multigrid")
    return Multigrid("amg", opts, near_nullspace=nns, field="solve.multigrid")


def reported_method(case, policy: Precision, preconditioner: str) -> str:
    """The method as the run's report names it (``hpcsolve.fem.api.solve``): "cg" with the Jacobi preconditioner is
    "pcg-jacobi" there, so validate and dry runs say so too."""
    method = method_of(case, policy)
    return "pcg-jacobi" if method == "cg" and preconditioner == "jacobi" else method


class FEMFamily:
    """The finite-element family (``hpcsolve.core.family.Family``): one linear solve, no checkpoints."""

    warmup_is_whole_run = True     # compare's warm-up (``warmup_case``) the whole case
    name = "fem"
    capabilities = frozenset()

    def warmup_case(self, case, description: Description):
        """The whole case: one solve is short, and its set-up is what a warm-up is for."""
        return case

    def verdicts(self, case, metrics: dict, derived: dict) -> dict:
        """The run's values judged against their references (hpcsolve/fem/verdicts.py)."""
        return fem_verdicts(case, metrics, derived)

    def describe(self, case, backend, policy: Precision) -> Description:
        """Mesh size, unknowns and the peak memory (hpcsolve.core.memory), without solving; the mesh it builds
        is reused by ``run``. A mesh that would not fit in host memory is not built (``run`` refuses it)."""
        check_method(case, policy)
        estimate = fem_memory.estimate(case, backend, policy)
        info = {"problem": case.problem.kind, "method": method_of(case, policy), "rtol": case.solve.rtol,
                "memory": memory.describe(estimate)}
        ncomp = 1 if case.problem.kind == "poisson" else 2
        free = backends.host_memory_available()
        if free is not None and estimate.host_bytes > free:
            points, triangles = fem_mesh_size(case)
            info.update(points=points, triangles=triangles, unknowns=points * ncomp,
                        preconditioner=check_preconditioner(case, None, policy))
            info["method"] = reported_method(case, policy, info["preconditioner"])
            return Description(info, estimate=estimate,
                               note="mesh not built (the run does not fit in host memory); sizes are from the case")
        mesh = prob.build_mesh(case)
        prob.check_selections(case, mesh)
        info.update(mesh=mesh.source, points=mesh.n_points, triangles=mesh.n_triangles, unknowns=mesh.n_points * ncomp,
                    h_max=mesh.h_max(), boundary_tags=mesh.tag_names,
                    preconditioner=check_preconditioner(case, mesh, policy))
        info["method"] = reported_method(case, policy, info["preconditioner"])   # as the run's report names it
        return Description(info, estimate=estimate, setup=mesh)

    def check_inputs(self, case, backend, policy: Precision, description: Description) -> dict:
        """What ``validate`` checks beyond ``describe``: the assembled system's number range
        (:func:`problem.check_scales`, as the run does after assembly: an overflowing coefficient or load is a
        CaseError naming its field) and the multigrid hierarchy's set-up (too few solve.multigrid.max_levels, a
        coarsening that stalls: the run's CaseError), on meshes of up to VALIDATE_ASSEMBLY_UNKNOWNS unknowns."""
        n = description.parameters.get("unknowns")
        later = {"preconditioner_setup": "not checked (the run sets it up after assembly)"}
        if description.setup is None:
            return {"system_range": "not checked: the mesh was not built (the run checks it after assembly)", **later}
        if n is not None and n > VALIDATE_ASSEMBLY_UNKNOWNS:
            return {"system_range": f"not checked: {n:,} unknowns > {VALIDATE_ASSEMBLY_UNKNOWNS:,} (the run checks "
                                    "it after assembly)", **later}
        disc = prob.build(case, mesh=description.setup)
        prob.check_scales(disc, policy.storage_bytes)
        return {"system_range": f"checked: matrix within {8 * policy.storage_bytes}-bit floats, solution bound within "
                                "64-bit floats (the loads are scaled by a power of two before the solve)",
                "preconditioner_setup": _check_hierarchy(case, disc, policy)}

    def estimate_runtime(self, case, backend, policy: Precision, description: Description) -> dict:
        """The run time and iterations from a model, nothing timed (hpcsolve/fem/estimate.py)."""
        return fem_estimate.estimate_runtime(case, backend, policy, description, run)

    def run(self, case, backend, policy: Precision, *, description: Description | None = None,
            progress: bool = False, stop=None, checkpoint_dir=None, resume=None) -> Result:
        return run(case, backend, policy, progress=progress,
                   mesh=description.setup if description is not None else None)


def _check_hierarchy(case, disc, policy: Precision) -> str:
    """The multigrid hierarchy the run would build, set up on the host (its levels, hence its errors, do not
    depend on the backend): a CaseError of the set-up is the run's. What validate reports about it."""
    pc = make_preconditioner(case, disc, policy)
    if isinstance(pc, str):
        return f"{pc}: nothing to set up"
    A = prepare_matrix(disc.A)
    A.ensure(policy.compute)
    pc.setup(A)
    info = pc.info()
    used, note = preconditioner_used(pc.name, info, disc.mesh.info.get("grid"))     # mg fallen back: amg, and why
    return (f"checked: {used} hierarchy of {info['levels']} levels, coarsest {info['rows'][-1]:,} unknowns"
            + (f" ({note})" if note else ""))


VALIDATE_ASSEMBLY_UNKNOWNS = 1_000_000   # validate assembles systems up to this size to check their number range


def describe(case, backend, policy: Precision) -> dict:
    """Derived parameters and memory estimate as a dict (``FEMFamily.describe``)."""
    return FAMILY.describe(case, backend, policy).as_dict()


def run(case, backend, policy: Precision, *, progress: bool = False, mesh=None) -> Result:
    """Build the case's system, solve it, measure it against the exact solution, the float64 reference and the
    probe, and return the Result."""
    t_all = time.perf_counter()
    heartbeat.phase("building the system (mesh, assembly, boundary conditions)")
    be = backends.get(backend)
    # on one rank a GPU backend assembles on its device (hpcsolve.fem.discrete.device); MPI ranks: the host
    disc = prob.build(case, mesh=mesh, backend=be if parallel.ranks(parallel.world()) <= 1 else None)
    prob.check_scales(disc, policy.storage_bytes)   # a system beyond the working precision: refused, field named
    s = case.solve
    make_ref, predicted, note = fem_memory.reference_plan(case, disc.A.shape[0])
    heartbeat.phase(f"setting up the preconditioner ({case.solve.preconditioner}) and solving "
                    f"{disc.A.shape[0]:,} unknowns")
    A, pc = _distribute(case, disc, backend, policy, make_preconditioner(case, disc, policy))
    x, report = solve(A, disc.b, precision=policy, backend=backend, rtol=s.rtol, maxiter=s.maxiter,
                      method=method_of(case, policy), preconditioner=pc, check_every=s.check_every,
                      true_every=s.true_every, **s.options())
    u = disc.full_solution(x)
    metrics = _solve_metrics(report, pc, disc.mesh.info.get("grid"))
    fields: dict[str, np.ndarray] = {"u" if disc.kind == "poisson" else "displacement": u}
    timings = _timings(disc, report)
    # on a GPU the float64 reference (host SuperLU, GIL released) factorizes beside what follows the solve (the
    # solve's own timings stay clean: beside it, the H200 machine's AMG set-up measured 0.36-0.49 s against 0.2-0.34)
    ref = Reference(disc, s.rtol, beside=beside(be, parallel.ranks(parallel.world()))) if make_ref else None
    try:
        if ref is not None:
            ref.start()
        heartbeat.phase("error norms against the exact solution, the reference and the probe")
        t_norms = time.perf_counter()
        if disc.exact is not None:
            m, f = _exact_errors(disc, u)
            metrics.update(m)
            fields.update(f)
        metrics.update(_probe_metrics(case.output, disc, u))
        timings["norms_s"] = time.perf_counter() - t_norms
    except Exception:
        if ref is not None:
            ref.abandon()                 # nothing timed after this run shares the host with its factorization
        raise
    timings["reference_s"] = timings["reference_wait_s"] = 0.0
    if ref is not None:
        if ref.running() and case.output.plots:
            timings["plots_warm_up_s"] = _warm_up_plots()
        heartbeat.phase(f"the float64 reference solve (SciPy SuperLU, predicted ~{predicted:.2g} s"
                        + (f", {BESIDE})" if ref.thread is not None else ")"))
        metrics.update(ref.metrics(disc, x, timings))
    else:
        metrics["reference"] = note
    # the precision's error against the discretisation's (hpcsolve.fem.judge): what decides an unconverged status
    t_judge = time.perf_counter()
    own64 = np.dtype(policy.storage) == np.float64 and np.dtype(policy.compute) == np.float64
    metrics.update(judge.solution_metrics(disc, u, None if ref is None else disc.full_solution(ref.solution),
                                          own_is_float64=own64,
                                          exact_error=metrics.get("reference_error_l2" if ref else "error_l2"),
                                          fraction=getattr(case.output, "negligible_fraction", None)
                                          or judge.NEGLIGIBLE_FRACTION))
    timings["norms_s"] = timings.get("norms_s", 0.0) + time.perf_counter() - t_judge
    timings["total_s"] = time.perf_counter() - t_all
    metrics = _after(metrics, "time_per_iteration_s", _per_iteration(report, timings))    # the figures side by side
    return _result(case, backend, policy, disc, A, report, fields, metrics, timings)


def _warm_up_plots() -> float:
    """The figures' imports and font while SuperLU works beside (it releases the GIL); its seconds. A failure here
    is not the run's: the plots say theirs when they are drawn."""
    t0 = time.perf_counter()
    try:
        plotstyle.warm_up()
    except Exception:       # noqa: BLE001  (matplotlib, a font: the write turns a plotting failure into a note)
        pass
    return time.perf_counter() - t0


def _distribute(case, disc, backend, policy: Precision, pc):
    """(matrix, preconditioner) of the solve: the host matrix on one rank; under mpiexec -n N a block of rows per
    rank (hpcsolve/fem/linalg/distributed.py), refused with what cannot run distributed."""
    comm = parallel.world()
    if parallel.ranks(comm) <= 1:
        return disc.A, pc
    name = pc if isinstance(pc, str) else pc.name
    if name not in ("none", "jacobi"):
        raise CaseError.invalid("solve.preconditioner", name, "none or jacobi on several MPI ranks (auto picks "
                                "jacobi there)", why="the multigrid hierarchy is not distributed yet")
    if method_of(case, policy) == "spsolve":
        raise CaseError.invalid("solve.method", "spsolve", "a CG method on several MPI ranks",
                                why="a matrix distributed over ranks has no single copy to factorize")
    if backends.get(backend).gpu:
        raise BackendError(f"backend {backends.get(backend).name!r} cannot solve on several MPI ranks yet; use a "
                           "CPU backend (--backend numpy), or one rank")
    return prepare_distributed(disc.A, comm), pc


def _solve_metrics(report, pc, grid=None) -> dict:
    """The solve's report as metrics; ``preconditioner`` the one used: "mg" that fell back to aggregation AMG on a
    grid it cannot halve is "amg", with ``preconditioner_requested`` and ``preconditioner_note`` saying so
    (``choices.preconditioner_used``; the run's message repeats the note)."""
    metrics = {key: getattr(report, key) for key in (
        "converged", "reason", "method", "iterations", "outer_iterations", "true_residual", "recursive_residual",
        "residual_gap", "kappa_estimate", "fallback", "time_per_iteration_s")}
    name = pc if isinstance(pc, str) else pc.name
    used, note = preconditioner_used(name, report.preconditioner, grid)
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


def _per_iteration(report, timings: dict) -> dict:
    """The solve-alone and the wall figure per iteration, and what each includes (TIMING_BASIS)."""
    its = report.iterations
    wall = timings["total_s"] / its if its else float("nan")
    return {"wall_time_per_iteration_s": wall, "timing_basis": TIMING_BASIS}


def _after(mapping: dict, key: str, more: dict) -> dict:
    """``mapping`` with ``more`` inserted right after ``key`` (at the end without it)."""
    out = {}
    for k, v in mapping.items():
        out[k] = v
        if k == key:
            out.update(more)
    out.update(more)
    return out


def _timings(disc, report) -> dict:
    timings = dict(disc.timings)
    timings["solve_s"] = report.time_s
    pc_setup = float(report.preconditioner.get("setup_time_s", 0.0)) if report.preconditioner else 0.0
    if report.preconditioner:
        timings["preconditioner_setup_s"] = pc_setup
    # what compare weighs: the solve and the preconditioner it needed (a hierarchy is built per run)
    timings[SOLVER_SECONDS] = report.time_s + pc_setup
    timings["solver_setup_s"] = report.setup_time_s
    return timings


def _probe_metrics(out, disc, u) -> dict:
    """The probe point's value (and its published reference), and the solution's range."""
    metrics: dict = {}
    mesh = disc.mesh
    if out.probe is not None:
        k = device.nearest_node(disc.device_mesh.points if disc.device_mesh is not None else mesh.points, out.probe)
        metrics["probe_point"] = mesh.points[k].tolist()
        if disc.kind == "poisson":
            value = float(u[k])          # probe_value (probe_u used to repeat it)
        else:
            metrics["probe_ux"], metrics["probe_uy"] = float(u[k, 0]), float(u[k, 1])
            value = {"ux": u[k, 0], "uy": u[k, 1], "u": u[k, 1], "magnitude": float(np.hypot(*u[k]))}[out.probe_component]
        metrics["probe_value"] = float(value)
        if out.probe_reference is not None:
            metrics["probe_reference"] = out.probe_reference
            metrics["probe_rel_error"] = abs(float(value) - out.probe_reference) / abs(out.probe_reference)
    if disc.kind == "poisson":
        metrics["u_min"], metrics["u_max"] = float(u.min()), float(u.max())
    else:
        metrics["displacement_max"] = float(np.hypot(u[:, 0], u[:, 1]).max())
    return metrics


def _result(case, backend, policy: Precision, disc, A, report, fields, metrics, timings) -> Result:
    mesh, s = disc.mesh, case.solve
    derived = {"problem": disc.kind, "mesh": mesh.source, "points": mesh.n_points, "triangles": mesh.n_triangles,
               "unknowns": disc.n_dofs, "free_unknowns": disc.A.shape[0], "matrix_nnz": int(disc.A.nnz),
               "h_max": mesh.h_max(), "boundary_tags": mesh.tag_names, "rtol": s.rtol}
    # the solution's name and unit in the plots (output.field_label, e.g. "temperature (K)")
    label = case.output.field_label
    if label:
        derived["field_label"] = label
    if "grid" in mesh.info:          # the node grid of a generator mesh: the plots draw a subsample of it
        derived["structured_grid"] = list(mesh.info["grid"])
    result = Result(
        case_name=case.name, solver="fem", backend=backend, precision=policy.name,
        grid=TriangleMesh(points=mesh.points.copy(), triangles=mesh.triangles.astype(np.int64)),
        fields=fields,
        series={"residual_recursive": report.history_recursive,
                "residual_true_iterations": report.history_true_iterations,
                "residual_true": report.history_true},
        metrics=metrics, derived=derived, timings=timings,
        status=judge.status(report.converged, metrics),
        message=(report.reason + (f"; {report.fallback}" if report.fallback else "")
                 + _advice(report, policy, s, metrics)
                 + (f"; {metrics['preconditioner_note']}" if metrics.get("preconditioner_requested") else "")),
        plotter=functools.partial(plot_result, display=mesh.display_level()) if case.output.plots else None,
    )
    blocks = A.blocks if getattr(A, "distributed", False) else [(0, disc.A.shape[0])]
    result.provenance["decomposition"] = {"ranks": len(blocks), "kind": "row blocks" if len(blocks) > 1 else "none",
                                          "rows_per_rank": [r1 - r0 for r0, r1 in blocks]}
    return result


def _exact_errors(disc, u) -> tuple[dict, dict]:
    """Errors against the manufactured solution: (metrics, fields); on the device where the system was assembled
    there (the solution uploaded once, the two fields copied back once)."""
    u_ex, grad_ex = disc.exact
    dm = disc.device_mesh
    mesh = dm if dm is not None else disc.mesh
    uu = dm.xp.asarray(u) if dm is not None else u
    l2, h1 = prob.error_norms(mesh, uu, u_ex, grad_ex)
    exact_nodal = u_ex(mesh.points[:, 0], mesh.points[:, 1])
    err = uu - exact_nodal
    emax = float(abs(err).max())
    return ({"error_l2": l2, "error_h1_seminorm": h1, "error_max_nodal": emax},
            {"u_exact": backends.to_host(exact_nodal), "error": backends.to_host(err)})


def _advice(report, policy: Precision, solve_opts, metrics: dict) -> str:
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


#: a structured grid of more cells a side is drawn from every k-th node (a 768 x 576-pixel figure, its axes about
#: 500 x 400 pixels, shows no more): the 4 M-node mesh took 3.9 s of Gouraud triangles per figure (mesh.nx = 1024,
#: 2-core machine); 256 as mesh.DISPLAY_MAX_TRIANGLES (a 256 x 256-cell grid's triangles)
PLOT_MAX_CELLS = 256


def _display_triangles(result: Result, triangles: np.ndarray, display=None):
    """(nodes drawn: a slice or index array, their triangles): all of them; on a structured grid of more than
    PLOT_MAX_CELLS cells a side, the triangulated grid of every k-th node (the last row and column kept); on a refined
    mesh of more than ``mesh.DISPLAY_MAX_TRIANGLES`` triangles, ``display`` (``Mesh.display_level``: the coarser mesh
    it was refined from, whose nodes are its first ones)."""
    if display is not None:
        n, tris = display
        return slice(0, int(n)), np.asarray(tris)
    grid = result.derived.get("structured_grid")
    if not grid or max(grid) <= PLOT_MAX_CELLS:
        return slice(None), triangles
    nx, ny = int(grid[0]), int(grid[1])
    k = -(-max(nx, ny) // PLOT_MAX_CELLS)
    ii = np.unique(np.r_[0:nx + 1:k, nx])
    jj = np.unique(np.r_[0:ny + 1:k, ny])
    keep = (jj[:, None] * (nx + 1) + ii[None, :]).ravel()
    w = ii.size
    c = (np.arange(jj.size - 1)[:, None] * w + np.arange(w - 1)[None, :]).ravel()
    tris = np.concatenate([np.stack([c, c + 1, c + w + 1], 1), np.stack([c, c + w + 1, c + w], 1)])
    return keep, tris


def plot_result(result: Result, plot_dir: Path, display=None) -> list[Path]:
    """solution.png (tripcolor on the mesh; deformed for elasticity), residuals.png, error.png if known. ``display``:
    the coarser mesh a large refined one is drawn on (:func:`_display_triangles`).
    Figures without pyplot, PNGs quickly compressed (hpcsolve.core.plotstyle): the 3 figures of the 64 x 64
    Poisson case in 0.5-0.7 s after matplotlib's import (2-core machine)."""
    # late: matplotlib costs about 0.5 s to import (measured), for plots only
    import matplotlib.tri as mtri

    files = []
    g = result.grid
    pts = np.asarray(g.points)
    elastic = "displacement" in result.fields
    name = result.derived.get("field_label") or "u"
    if elastic:
        d = result.fields["displacement"]
        mag = np.hypot(d[:, 0], d[:, 1])
        span = np.ptp(pts, axis=0).max()
        scale = 0.1 * span / mag.max() if mag.max() > 0 else 0.0
        shown = pts + scale * d
        values, label = mag, f"|u| (mesh deformed x{scale:.3g})"
    else:
        shown, values, label = pts, result.fields["u"], name
    keep, tris = _display_triangles(result, np.asarray(g.triangles), display)
    shown, values = shown[keep], values[keep]
    tri = mtri.Triangulation(shown[:, 0], shown[:, 1], tris)
    run = run_label(result)

    def save(fig, fname):
        files.append(save_png(fig, plot_dir / fname, dpi=120))

    fig = new_figure((6.4, 4.8))
    ax = fig.add_subplot()
    pc = ax.tripcolor(tri, values, shading="gouraud", cmap="viridis")
    if len(tris) <= 5000:
        ax.triplot(tri, lw=0.2, color="k", alpha=0.4)
    ax.set_aspect("equal")
    colorbar(fig, ax, pc, label)
    ax.set_xlabel("x (mesh units)")
    ax.set_ylabel("y (mesh units)")
    ax.set_title(f"{result.case_name}: {label if elastic else name}\n({run})", pad=12)
    save(fig, "solution.png")

    if "error" in result.fields:
        err = np.asarray(result.fields["error"])[keep]
        lo, hi = symmetric_limits(err)      # RdBu centred on zero: white is no error
        fig = new_figure((6.4, 4.8))
        ax = fig.add_subplot()
        pc = ax.tripcolor(tri, err, shading="gouraud", cmap="RdBu_r", vmin=lo, vmax=hi)
        ax.set_aspect("equal")
        colorbar(fig, ax, pc, f"{name}_h - {name}_exact at the nodes")
        ax.set_xlabel("x (mesh units)")
        ax.set_ylabel("y (mesh units)")
        l2 = result.metrics.get("error_l2", float("nan"))
        ax.set_title(f"{result.case_name}: error, L2 {l2:.3e}\n({run})", pad=12)
        save(fig, "error.png")

    rec = np.asarray(result.series.get("residual_recursive", []))
    if rec.size:
        fig = new_figure((6.4, 4.8))
        fig.subplots_adjust(top=0.82)       # room for a title of three lines (a long case name wraps)
        ax = fig.add_subplot()
        ax.semilogy(np.arange(rec.size), np.maximum(rec, 1e-300), lw=1, label="recursive residual")
        ti = np.asarray(result.series.get("residual_true_iterations", []))
        tv = np.asarray(result.series.get("residual_true", []))
        if tv.size:
            ax.semilogy(ti, np.maximum(tv, 1e-300), "o", ms=4, ls="none", label="true residual (float64, sampled)")
        ax.axhline(result.derived.get("rtol", np.nan), color="gray", ls="--", lw=0.8, label="rtol")
        ax.set_xlabel("Krylov iteration")
        ax.set_ylabel("||r|| / ||b||")
        ax.set_title(f"{result.case_name}: {result.metrics.get('method', '')}, {result.status}\n({run})")
        ax.legend()
        ax.grid(True, which="both", alpha=0.3)
        save(fig, "residuals.png")
    return files


FAMILY = FEMFamily()
