"""``hpcsolve bench fem``, multigrid part: time to solution with the multigrid preconditioners.

Two tables (appended to bench_fem.json / bench_fem.md under "multigrid" and "robustness"):

- 2D Poisson (5-point, m x m unknowns with m = 2^k - 1 so that the grid halves to the end), random b,
  to a float64 true relative residual of 1e-10: plain CG (fp64 and mixed cg-reliable) against the
  geometric ("mg") and algebraic ("amg", pyamg hierarchy) V-cycle preconditioners with fp64 / fp32 /
  16-bit hierarchies, on CuPy and Numba-CUDA; set-up and solve timed separately (median and min-max
  of repeats, after a warm-up solve), cycles, levels, operator complexity. pyamg's own solver on the
  CPU of the same machine (its set-up and its CG-accelerated solve, BLAS threads pinned) when pyamg
  is installed.
- robustness: rotated anisotropic diffusion (epsilon 1e-3, 30 degrees), coefficient jumps of 1e6 and
  plane-strain elasticity on Cook's membrane: iterations and times of plain CG, amg and mg.
"""

from __future__ import annotations

import time

import numpy as np

from hpcsolve.core import backends
from hpcsolve.core.precision import REFERENCE
from hpcsolve.fem import prepare_matrix, solve
from hpcsolve.fem.discrete import testproblems as tp
from hpcsolve.fem.linalg import kernels_numba
from hpcsolve.fem.linalg.precond import registry
from hpcsolve.fem.linalg.precond.multigrid import Multigrid

RTOL = 1e-10
GPU_SIZES = (255, 1023, 2047, 4095)
GPU_QUICK_SIZES = (127, 255)
CPU_SIZES = (127, 255, 511)
CPU_QUICK_SIZES = (63, 127)
AMG_MAX = 2047            # our V-cycle on pyamg's hierarchy (its set-up runs on the CPU)
PYAMG_MAX = 2047          # pyamg's own solver on the CPU
NUMBA_MAX = 2047          # Numba-CUDA builds its hierarchy on the host
PLAIN_REPEATS_MAX = 1023
MG_MAXITER = 1000         # a preconditioned solve that needs more has failed (reported, not waited for)  # plain CG repeated only up to this size (seconds per solve beyond)


def _median(ts):
    return float(np.median(ts)), float(min(ts)), float(max(ts))


def _time_solve(A, b, *, precision, method, pc, repeats: int, maxiter=None):
    """(report of the last solve, [solve seconds]) after one warm-up solve (compilation, graph capture)."""
    kw = dict(precision=precision, method=method, preconditioner=pc, rtol=RTOL)
    if maxiter:
        kw["maxiter"] = maxiter
    x, rep = solve(A, b, **kw)
    times = []
    for _ in range(repeats):
        x, rep = solve(A, b, **kw)
        times.append(rep.time_s)
    return rep, times or [rep.time_s]


def _setup_time(A, make, repeats: int) -> tuple[list, object]:
    """Set-up seconds of fresh hierarchies (each released after timing); returns the last preconditioner."""
    ts, pc = [], None
    for i in range(repeats):
        if pc is not None:
            pc.release(A)
        pc = make()
        A.low.sync()
        t0 = time.perf_counter()
        pc.setup(A)
        A.low.sync()
        ts.append(time.perf_counter() - t0)
    return ts, pc


def _row(result, m, backend, kind, hierarchy, precision, method, rep, times, setup=None, note=""):
    med, lo, hi = _median(times)
    info = rep.preconditioner or {}
    r = {"m": m, "unknowns": m * m, "backend": backend, "preconditioner": kind, "hierarchy": hierarchy,
         "precision": precision, "method": method, "converged": rep.converged, "iterations": rep.iterations,
         "cycles": info.get("cycles"), "solve_ms": med * 1e3, "solve_ms_min": lo * 1e3, "solve_ms_max": hi * 1e3,
         "setup_ms": (_median(setup)[0] * 1e3) if setup else None,
         "setup_ms_all": [t * 1e3 for t in setup] if setup else None,
         "true_residual": rep.true_residual, "levels": info.get("levels"),
         "operator_complexity": info.get("operator_complexity"), "symmetry_defect": info.get("symmetry_defect"),
         "level_time_ms": [t * 1e3 for t in info.get("level_time_s", [])] or None, "note": note or
         ("" if rep.converged else rep.reason[:100])}
    result.setdefault("multigrid", []).append(r)
    st = f"setup {r['setup_ms']:8.1f} ms " if setup else " " * 20
    print(f"  {m}^2 {backend:<10} {kind:<4} {hierarchy:<4} {precision:<5} {method:<11} its {rep.iterations:5d} "
          f"{st}solve {med * 1e3:9.2f} ms ({lo * 1e3:.2f}-{hi * 1e3:.2f})  true {rep.true_residual:.1e}", flush=True)
    return r


def _pyamg_rows(result, m, problem, repeats):
    try:
        import pyamg  # late: optional (0.25 s import); its own solver is a comparison row where installed
    except ImportError:
        return
    A, b = problem.A, problem.b
    with backends.get("numpy").run_context():
        for name, build in (("pyamg sa", pyamg.smoothed_aggregation_solver), ("pyamg rs", pyamg.ruge_stuben_solver)):
            setup, solve_t = [], []
            for _ in range(repeats):
                t0 = time.perf_counter()
                ml = build(A, max_coarse=400)
                setup.append(time.perf_counter() - t0)
                res: list = []
                t0 = time.perf_counter()
                x = ml.solve(b, tol=RTOL, accel="cg", maxiter=500, residuals=res)
                solve_t.append(time.perf_counter() - t0)
            true = float(np.linalg.norm(b - A @ x) / np.linalg.norm(b))
            r = {"m": m, "unknowns": m * m, "backend": "pyamg (CPU)", "preconditioner": name, "hierarchy": "fp64",
                 "precision": "fp64", "method": "cg", "converged": bool(true <= RTOL), "iterations": len(res) - 1,
                 "cycles": len(res) - 1, "solve_ms": _median(solve_t)[0] * 1e3, "solve_ms_min": min(solve_t) * 1e3,
                 "solve_ms_max": max(solve_t) * 1e3, "setup_ms": _median(setup)[0] * 1e3,
                 "setup_ms_all": [t * 1e3 for t in setup], "true_residual": true, "levels": len(ml.levels),
                 "operator_complexity": float(ml.operator_complexity()), "symmetry_defect": None,
                 "level_time_ms": None, "note": f"{backends.cpu_threads()} CPU thread(s)"}
            result.setdefault("multigrid", []).append(r)
            print(f"  {m}^2 {name:<15} its {r['iterations']:5d} setup {r['setup_ms']:8.1f} ms solve "
                  f"{r['solve_ms']:9.2f} ms  true {true:.1e}", flush=True)


def poisson_table(result, *, sizes, device, numba: bool, quick: bool) -> None:
    """The time-to-solution table on 2D Poisson on ``device`` (a Backend: a GPU one builds its matrix on the device;
    the NumPy one); ``numba``: also the V-cycle on Numba-CUDA, through a view of the same device matrix."""
    gpu = device.gpu
    repeats = 2 if quick else 3
    for m in sizes:
        print(f"== multigrid: 2D Poisson {m}^2 = {m * m:,} unknowns, to a true residual of {RTOL:g}", flush=True)
        grid = tp.fd_grid(m)
        host = tp.poisson_fd(m) if (not gpu or m <= max(AMG_MAX, PYAMG_MAX, NUMBA_MAX)) else None
        if gpu:
            from hpcsolve.fem.linalg import kernels_cupy  # late: imports cupy (optional GPU module), on a usable GPU only

            A = kernels_cupy.poisson_5point_device(m)
        else:
            A = prepare_matrix(host.A, backend=device)
        name = device.name
        b = host.b if host is not None else np.random.default_rng(1).standard_normal(m * m)
        plain_reps = repeats if m <= PLAIN_REPEATS_MAX else 1
        for prec, method in (("fp64", "cg"), ("mixed", "cg-reliable")):
            rep, ts = _time_solve(A, b, precision=prec, method=method, pc="none", repeats=plain_reps,
                                  maxiter=60_000)
            _row(result, m, name, "none", "-", prec, method, rep, ts)
        # level_format "csr": the same hierarchies with every level in CSR (before levels were stored by diagonals)
        configs = [("mg", "fp64", "fp64", "cg", "auto"), ("mg", "fp32", "fp64", "cg", "auto"),
                   ("mg", "fp16", "fp64", "cg", "auto"), ("mg", "fp32", "mixed", "cg-reliable", "auto")]
        if gpu:           # on the CPU "auto" is CSR already
            configs += [("mg", "fp64", "fp64", "cg", "csr"), ("mg", "fp32", "fp64", "cg", "csr")]
        if m <= AMG_MAX:
            configs.append(("amg", "fp32", "fp64", "cg", "auto"))
        for kind, hier, prec, method, fmt in configs:
            def make(kind=kind, hier=hier, fmt=fmt):
                return Multigrid(kind, {"hierarchy": hier, "level_format": fmt}, grid=grid)
            setup, pc = _setup_time(A, make, repeats if registry.get(kind).needs_grid else 1)
            rep, ts = _time_solve(A, b, precision=prec, method=method, pc=pc, repeats=repeats, maxiter=MG_MAXITER)
            if prec == REFERENCE.name:     # one V-cycle's device time, level by level (graph replays on the GPU)
                pc.time_levels()
                rep.preconditioner["level_time_s"] = list(pc.level_time_s)
            note = "levels in CSR" if fmt == "csr" else ""
            if not rep.converged:
                note = "; ".join(filter(None, (note, rep.reason[:100])))
            _row(result, m, name, kind, hier, prec, method, rep, ts, setup, note=note)
            pc.release(A)
        if gpu and numba and m <= NUMBA_MAX:
            try:
                nA = kernels_numba.view_of(A)
                # as for CuPy, the median of fresh set-ups: the first one compiles the Numba kernels (seconds)
                setup, pc = _setup_time(nA, lambda: Multigrid("mg", {"hierarchy": "fp32"}, grid=grid), repeats)
                rep, ts = _time_solve(nA, b, precision="fp64", method="cg", pc=pc, repeats=repeats, maxiter=MG_MAXITER)
                pc.time_levels()
                rep.preconditioner["level_time_s"] = list(pc.level_time_s)
                _row(result, m, "numba-cuda", "mg", "fp32", "fp64", "cg", rep, ts, setup,
                     note=f"graphs: {getattr(nA.low, 'graphs', False)}")
                pc.release(nA)
            except Exception as exc:  # report, keep benchmarking the rest
                print(f"  numba-cuda multigrid failed: {type(exc).__name__}: {exc}", flush=True)
                result.setdefault("errors", []).append(f"numba-cuda mg {m}: {type(exc).__name__}: {exc}")
        if host is not None and m <= PYAMG_MAX:
            _pyamg_rows(result, m, host, 1 if m > 511 else repeats)
        del A
        if gpu:
            device.free_pool()


def robustness_table(result, *, device, quick: bool) -> None:
    """Plain CG, amg and mg on the hard problems (docs/design/fem_solvers.md) on ``device`` (a Backend)."""
    n, nc = (1024, 512) if device.gpu and not quick else (128, 64) if not quick else (48, 24)
    backend = device.name
    for problem in (tp.anisotropic(n), tp.jumps(n), tp.cook(nc)):
        print(f"== robustness: {problem.name}, {problem.n:,} unknowns", flush=True)
        A = prepare_matrix(problem.A, backend=device)
        for kind in ("none", "amg", "mg"):
            cycle = registry.get(kind).cycle

            def make(kind=kind):
                return Multigrid(kind, {"hierarchy": "fp32"}, grid=problem.grid,
                                     near_nullspace=problem.near_nullspace)
            setup, pc = _setup_time(A, make, 1) if cycle else ([], kind)
            rep, ts = _time_solve(A, problem.b, precision="fp64", method="cg", pc=pc, repeats=3 if cycle else 1,
                                  maxiter=MG_MAXITER if cycle else 40_000)
            med = _median(ts)[0]
            r = {"problem": problem.name, "unknowns": problem.n, "backend": backend, "preconditioner": kind,
                 "converged": rep.converged, "iterations": rep.iterations, "solve_ms": med * 1e3,
                 "setup_ms": setup[0] * 1e3 if setup else None, "true_residual": rep.true_residual,
                 "levels": (rep.preconditioner or {}).get("levels")}
            result.setdefault("robustness", []).append(r)
            print(f"  {kind:<5} its {rep.iterations:6d} solve {med * 1e3:9.1f} ms"
                  + (f" setup {r['setup_ms']:8.1f} ms" if setup else "") + f" true {rep.true_residual:.1e}", flush=True)
            if cycle:
                pc.release(A)
        del A


def markdown(res: dict) -> list[str]:
    lines = []
    if res.get("multigrid"):
        lines += ["", f"Multigrid: time to a float64 true relative residual of {RTOL:g} on 2D Poisson (random b); "
                  "setup and solve separately, median (min-max):", "",
                  "| unknowns | backend | preconditioner | hierarchy | outer | cycles | setup ms | solve ms | "
                  "V-cycle ms | true residual | levels | op. complexity | note |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in res["multigrid"]:
            setup = f"{r['setup_ms']:.1f}" if r["setup_ms"] is not None else "-"
            oc = f"{r['operator_complexity']:.2f}" if r.get("operator_complexity") else "-"
            vc = f"{sum(r['level_time_ms']):.3f}" if r.get("level_time_ms") else "-"
            lines.append(f"| {r['m']}^2 | {r['backend']} | {r['preconditioner']} | {r['hierarchy']} | "
                         f"{r['precision']} {r['method']} | {r['iterations']} | {setup} | {r['solve_ms']:.2f} "
                         f"({r['solve_ms_min']:.2f}-{r['solve_ms_max']:.2f}) | {vc} | {r['true_residual']:.1e} | "
                         f"{r['levels'] or '-'} | {oc} | {r['note']} |")
        lines += ["", "V-cycle ms: one V-cycle's device time, the sum over its levels (each level's smoothing, residual "
                  "and transfers, and the coarse solve; recorded and replayed as a CUDA graph on the GPU)."]
    if res.get("robustness"):
        lines += ["", "Robustness (fp64 CG, fp32 hierarchies, true residual 1e-10):", "",
                  "| problem | unknowns | preconditioner | iterations | setup ms | solve ms | true residual |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for r in res["robustness"]:
            setup = f"{r['setup_ms']:.1f}" if r["setup_ms"] is not None else "-"
            lines.append(f"| {r['problem']} | {r['unknowns']:,} | {r['preconditioner']} | {r['iterations']} | {setup} | "
                         f"{r['solve_ms']:.1f} | {r['true_residual']:.1e} |")
    return lines
