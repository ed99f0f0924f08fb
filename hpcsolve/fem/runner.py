"""The FEM family of ``hpcsolve.core.family`` (``FAMILY``): describe, estimate_runtime, run -> Result. This module
holds the run's flow; its pieces live beside it by job: ``choices`` (method, preconditioner, mesh size; the
preconditioner object), ``distribution`` (MPI ranks), ``metrics`` (the Result's figures), ``plots`` (the figures),
``reference`` (the float64 reference), ``estimate`` and ``memory``."""

from __future__ import annotations

import functools
import time

import numpy as np

from hpcsolve.core import backends, heartbeat, memory, parallel
from hpcsolve.core.family import Description
from hpcsolve.core.precision import Precision
from hpcsolve.core.results import Result, TriangleMesh
from hpcsolve.fem import estimate as fem_estimate
from hpcsolve.fem import judge
from hpcsolve.fem import memory as fem_memory
from hpcsolve.fem.api import prepare_matrix, solve
from hpcsolve.fem.choices import (check_method, components, check_preconditioner, fem_mesh_size, make_preconditioner, method_of,
                                  preconditioner_used, reported_method, solve_method)
from hpcsolve.fem.discrete import problem as prob
from hpcsolve.fem.distribution import distribute
from hpcsolve.fem.linalg.precond import registry
from hpcsolve.fem.metrics import (advice_for, after, exact_errors, per_iteration, probe_metrics, run_timings,
                                  solve_metrics)
from hpcsolve.fem.plots import plot_result, warm_up_plots
from hpcsolve.fem.reference import BESIDE, Reference, beside
from hpcsolve.fem.verdicts import verdicts as fem_verdicts

# what tests and scripts import from here (the run's pieces, by job in their own modules)
__all__ = ["FAMILY", "FEMFamily", "describe", "run", "check_method", "make_preconditioner", "method_of",
           "reported_method", "plot_result", "VALIDATE_ASSEMBLY_UNKNOWNS"]


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
        method = check_method(case, policy)
        estimate = fem_memory.estimate(case, backend, policy)
        info = {"problem": case.problem.kind, "method": method.name, "rtol": case.solve.rtol,
                "memory": memory.describe(estimate)}
        ncomp = components(case)
        free = backends.host_memory_available()
        if free is not None and estimate.host_bytes > free:
            points, triangles = fem_mesh_size(case)
            info.update(points=points, triangles=triangles, unknowns=points * ncomp,
                        preconditioner=check_preconditioner(case, None, policy).name)
            info["method"] = reported_method(case, policy, info["preconditioner"])
            return Description(info, estimate=estimate,
                               note="mesh not built (the run does not fit in host memory); sizes are from the case")
        mesh = prob.build_mesh(case)
        prob.check_selections(case, mesh)
        # elasticity on a mesh file: its dimension is known only now that it is read
        ncomp = ncomp if not hasattr(mesh, "dofmap") or case.problem.kind == "poisson" else mesh.dim
        info.update(mesh=mesh.source, points=mesh.n_points, **_cells(mesh), unknowns=mesh.n_points * ncomp,
                    h_max=mesh.h_max(), boundary_tags=mesh.tag_names,
                    preconditioner=check_preconditioner(case, mesh, policy).name)
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
    if not registry.spec_of(pc).cycle:
        return f"{pc.name}: nothing to set up"
    A = prepare_matrix(disc.A)
    A.ensure(policy.compute)
    pc.setup(A)
    info = pc.info()
    used, note = preconditioner_used(pc, info, disc.mesh.info.get("grid"))     # mg fallen back: amg, and why
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
    method = solve_method(case, policy)
    A, pc = distribute(disc, backend, method, make_preconditioner(case, disc, policy))
    heartbeat.phase(f"setting up the preconditioner ({pc.name}) and solving {disc.A.shape[0]:,} unknowns")
    x, report = solve(A, disc.b, precision=policy, backend=backend, rtol=s.rtol, maxiter=s.maxiter,
                      method=method, preconditioner=pc, check_every=s.check_every,
                      true_every=s.true_every, **s.options())
    u = disc.full_solution(x)
    metrics = solve_metrics(report, pc, disc.mesh.info.get("grid"))
    fields: dict[str, np.ndarray] = {"u" if disc.kind == "poisson" else "displacement": u}
    timings = run_timings(disc, report)
    # on a GPU the float64 reference (host SuperLU, GIL released) factorizes beside what follows the solve (the
    # solve's own timings stay clean: beside it, the H200 machine's AMG set-up measured 0.36-0.49 s against 0.2-0.34)
    ref = Reference(disc, s.rtol, beside=beside(be, parallel.ranks(parallel.world()))) if make_ref else None
    try:
        if ref is not None:
            ref.start()
        heartbeat.phase("error norms against the exact solution, the reference and the probe")
        t_norms = time.perf_counter()
        if disc.exact is not None:
            m, f = exact_errors(disc, u)
            metrics.update(m)
            fields.update(f)
        metrics.update(probe_metrics(case.output, disc, u))
        timings["norms_s"] = time.perf_counter() - t_norms
    except Exception:
        if ref is not None:
            ref.abandon()                 # nothing timed after this run shares the host with its factorization
        raise
    timings["reference_s"] = timings["reference_wait_s"] = 0.0
    if ref is not None:
        if ref.running() and case.output.plots:
            timings["plots_warm_up_s"] = warm_up_plots()
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
    metrics = after(metrics, "time_per_iteration_s", per_iteration(report, timings))    # the figures side by side
    return _result(case, backend, policy, disc, A, report, fields, metrics, timings)


def _result(case, backend, policy: Precision, disc, A, report, fields, metrics, timings) -> Result:
    mesh, s = disc.mesh, case.solve
    derived = {"problem": disc.kind, "mesh": mesh.source, "points": mesh.n_points, **_cells(mesh),
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
        grid=_grid(mesh),
        fields=fields,
        series={"residual_recursive": report.history_recursive,
                "residual_true_iterations": report.history_true_iterations,
                "residual_true": report.history_true},
        metrics=metrics, derived=derived, timings=timings,
        status=judge.status(report.converged, metrics),
        message=(report.reason + (f"; {report.fallback}" if report.fallback else "")
                 + advice_for(report, policy, s, metrics)
                 + (f"; {metrics['preconditioner_note']}" if metrics.get("preconditioner_requested") else "")),
        plotter=functools.partial(plot_result, display=mesh.display_level()) if case.output.plots else None,
    )
    blocks = A.blocks if getattr(A, "distributed", False) else [(0, disc.A.shape[0])]
    result.provenance["decomposition"] = {"ranks": len(blocks), "kind": "row blocks" if len(blocks) > 1 else "none",
                                          "rows_per_rank": [r1 - r0 for r0, r1 in blocks]}
    return result


def _cells(mesh) -> dict:
    """The mesh's cell count as the results name it: triangles (P1 path), else cells, their kind and the element."""
    if not hasattr(mesh, "dofmap"):
        return {"triangles": mesh.n_triangles}
    return {"cells": mesh.n_cells, "cell_kind": "tetrahedra" if mesh.dim == 3 else "triangles",
            "element": mesh.element.name, "dimension": mesh.dim}


def _grid(mesh) -> TriangleMesh:
    """The result's mesh: the solution's nodes and cells (P2: the quadratic cells on vertices and edge midpoints)."""
    if not hasattr(mesh, "dofmap"):
        return TriangleMesh(points=mesh.points.copy(), triangles=mesh.triangles.astype(np.int64))
    return TriangleMesh(points=np.asarray(mesh.points, dtype=np.float64).copy(),
                        triangles=np.asarray(mesh.dofmap.cell_dofs, dtype=np.int64), cell_type=mesh.cell_type())


FAMILY = FEMFamily()
