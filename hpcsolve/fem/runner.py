"""FEM family runner: ``run(case, backend, policy, progress) -> Result`` and ``describe``."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from hpcsolve import backends, memory
from hpcsolve.fem import problem as prob
from hpcsolve.fem.api import DEFAULT_METHOD, solve
from hpcsolve.precision import Precision
from hpcsolve.results import Result, TriangleMesh


def _method(case, policy: Precision) -> str:
    m = case.solve.method or DEFAULT_METHOD[policy.name]
    return m


def describe(case, backend: str, policy: Precision) -> dict:
    """Mesh size, unknowns, matrix size and a memory estimate, without solving."""
    from hpcsolve.fem.api import _method_for

    _method_for(policy, _method(case, policy))   # raises a CaseError for a method that does not fit
    estimate = memory.fem(case, backend, policy)
    info = {"problem": case.problem.kind, "method": _method(case, policy), "rtol": case.solve.rtol,
            **estimate.summary(), "memory": memory.describe(estimate),
            "memory_estimate_bytes": estimate.device_bytes if estimate.device_bytes is not None else estimate.host_bytes}
    free = backends.host_memory_available()
    if free is not None and estimate.host_bytes > free:   # refused by run; validate reports it unbuilt
        points, triangles = memory.fem_mesh_size(case)
        ncomp = 1 if case.problem.kind == "poisson" else 2
        return {**info, "points": points, "triangles": triangles, "unknowns": points * ncomp,
                "note": "mesh not built (the run does not fit in host memory); sizes are from the case"}
    mesh = prob.build_mesh(case)
    prob.check_selections(case, mesh)
    ncomp = 1 if case.problem.kind == "poisson" else 2
    return {**info, "mesh": mesh.source, "points": mesh.n_points, "triangles": mesh.n_triangles,
            "unknowns": mesh.n_points * ncomp, "h_max": mesh.h_max(), "boundary_tags": mesh.tag_names}


def run(case, backend: str, policy: Precision, *, progress: bool = False) -> Result:
    t_all = time.perf_counter()
    disc = prob.build(case)
    prob.check_scales(disc, policy.storage_bytes)   # a system beyond the working precision: refused, field named
    mesh = disc.mesh
    s = case.solve
    x, report = solve(disc.A, disc.b, precision=policy, backend=backend, rtol=s.rtol, maxiter=s.maxiter,
                      method=_method(case, policy), preconditioner=s.preconditioner, check_every=s.check_every,
                      true_every=s.true_every, **s.options())
    u = disc.full_solution(x)
    metrics: dict = {
        "converged": report.converged,
        "reason": report.reason,
        "method": report.method,
        "iterations": report.iterations,
        "outer_iterations": report.outer_iterations,
        "true_residual": report.true_residual,
        "recursive_residual": report.recursive_residual,
        "residual_gap": report.residual_gap,
        "kappa_estimate": report.kappa_estimate,
        "fallback": report.fallback,
        "time_per_iteration_s": report.time_per_iteration_s,
    }
    fields: dict[str, np.ndarray] = {}
    if disc.kind == "poisson":
        fields["u"] = u
    else:
        fields["displacement"] = u
    timings = dict(disc.timings)
    timings["solve_s"] = report.time_s
    timings["solver_setup_s"] = report.setup_time_s

    if disc.exact is not None:
        u_ex, grad_ex = disc.exact
        l2, h1 = prob.error_norms(mesh, u, u_ex, grad_ex)
        metrics["error_l2"] = l2
        metrics["error_h1_seminorm"] = h1
        exact_nodal = u_ex(mesh.points[:, 0], mesh.points[:, 1])
        fields["u_exact"] = exact_nodal
        fields["error"] = u - exact_nodal
        metrics["error_max_nodal"] = float(np.abs(u - exact_nodal).max())

    n_free = disc.A.shape[0]
    want_ref = s.reference == "always" or (s.reference == "auto" and n_free <= s.reference_max_dofs)
    if want_ref:
        t0 = time.perf_counter()
        x_ref, rep_ref = solve(disc.A, disc.b, precision="fp64", method="spsolve", rtol=s.rtol)
        timings["reference_spsolve_s"] = time.perf_counter() - t0
        metrics["reference_true_residual"] = rep_ref.true_residual
        metrics["error_vs_fp64_reference"] = float(np.linalg.norm(x - x_ref) / max(np.linalg.norm(x_ref), 1e-300))
        if disc.exact is not None:
            metrics["reference_error_l2"] = prob.error_norms(mesh, disc.full_solution(x_ref), *disc.exact)[0]

    out = case.output
    if out.probe is not None:
        k = int(np.argmin(np.hypot(mesh.points[:, 0] - out.probe[0], mesh.points[:, 1] - out.probe[1])))
        metrics["probe_point"] = mesh.points[k].tolist()
        if disc.kind == "poisson":
            metrics["probe_u"] = float(u[k])
            value = metrics["probe_u"]
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

    derived = {
        "problem": disc.kind,
        "mesh": mesh.source,
        "points": mesh.n_points,
        "triangles": mesh.n_triangles,
        "unknowns": disc.n_dofs,
        "free_unknowns": n_free,
        "matrix_nnz": int(disc.A.nnz),
        "h_max": mesh.h_max(),
        "boundary_tags": mesh.tag_names,
        "rtol": s.rtol,
    }
    timings["total_s"] = time.perf_counter() - t_all
    result = Result(
        case_name=case.name, solver="fem", backend=backend, precision=policy.name,
        grid=TriangleMesh(points=mesh.points.copy(), triangles=mesh.triangles.astype(np.int64)),
        fields=fields,
        series={"residual_recursive": report.history_recursive,
                "residual_true_iterations": report.history_true_iterations,
                "residual_true": report.history_true},
        metrics=metrics, derived=derived, timings=timings,
        status="converged" if report.converged else "not_converged",
        message=report.reason + (f"; {report.fallback}" if report.fallback else ""),
        plotter=plot_result if out.plots else None,
    )
    return result


def plot_result(result: Result, plot_dir: Path) -> list[Path]:
    """solution.png (tripcolor on the mesh; deformed for elasticity), residuals.png, error.png if known."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.tri as mtri

    from hpcsolve.results import atomic_path

    files = []
    g = result.grid
    pts = np.asarray(g.points)
    elastic = "displacement" in result.fields
    if elastic:
        d = result.fields["displacement"]
        mag = np.hypot(d[:, 0], d[:, 1])
        span = np.ptp(pts, axis=0).max()
        scale = 0.1 * span / mag.max() if mag.max() > 0 else 0.0
        shown = pts + scale * d
        values, label = mag, f"|u| (mesh deformed x{scale:.3g})"
    else:
        shown, values, label = pts, result.fields["u"], "u"
    tri = mtri.Triangulation(shown[:, 0], shown[:, 1], np.asarray(g.triangles))

    def save(fig, name):
        path = plot_dir / name
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=120, format="png")
        plt.close(fig)
        files.append(path)

    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    pc = ax.tripcolor(tri, values, shading="gouraud", cmap="viridis")
    if len(g.triangles) <= 5000:
        ax.triplot(tri, lw=0.2, color="k", alpha=0.4)
    fig.colorbar(pc, ax=ax, label=label)
    ax.set_aspect("equal")
    ax.set_title(f"{result.case_name}: {result.precision} on {result.backend}")
    save(fig, "solution.png")

    if "error" in result.fields:
        fig, ax = plt.subplots(figsize=(6.4, 4.8))
        pc = ax.tripcolor(tri, result.fields["error"], shading="gouraud", cmap="RdBu_r")
        fig.colorbar(pc, ax=ax, label="u_h - u_exact at the nodes")
        ax.set_aspect("equal")
        ax.set_title(f"error: L2 {result.metrics.get('error_l2', float('nan')):.3e}")
        save(fig, "error.png")

    rec = np.asarray(result.series.get("residual_recursive", []))
    if rec.size:
        fig, ax = plt.subplots(figsize=(6.4, 4.8))
        ax.semilogy(np.arange(rec.size), np.maximum(rec, 1e-300), lw=1, label="recursive residual")
        ti = np.asarray(result.series.get("residual_true_iterations", []))
        tv = np.asarray(result.series.get("residual_true", []))
        if tv.size:
            ax.semilogy(ti, np.maximum(tv, 1e-300), "o", ms=4, label="true residual (float64)")
        ax.axhline(result.derived.get("rtol", np.nan), color="gray", ls="--", lw=0.8, label="rtol")
        ax.set_xlabel("Krylov iteration")
        ax.set_ylabel("||r|| / ||b||")
        ax.set_title(f"{result.metrics.get('method', '')} in {result.precision}: {result.status}")
        ax.legend()
        ax.grid(True, which="both", alpha=0.3)
        save(fig, "residuals.png")
    return files
