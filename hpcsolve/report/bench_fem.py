"""``hpcsolve bench fem``: GPU conjugate gradients on 2D Poisson vs the copy bandwidth of the same run.

For 2D Poisson (5-point stencil = P1 stiffness of a uniform right-triangle mesh, m x m interior
unknowns, random right-hand side with a fixed seed):

1. time per CG iteration at a fixed iteration count, for each backend x precision: the fused
   device CG of ``hpcsolve.fem.linalg.cg`` (CuPy with CUDA graphs, CuPy without graphs, Numba-CUDA),
   ``cupyx.scipy.sparse.linalg.cg`` (cuSPARSE), and SciPy on the CPU at the sizes the CPU can do;
2. % of the copy bandwidth from the bytes per iteration of ``cg_engine.bytes_per_iteration``;
3. time to a float64 true relative residual of 1e-10: fp64 CG, mixed (cg-reliable, ir-restarted)
   and fp32 CG (which stalls: its floor is reported).

Without a GPU the same tables come from the NumPy backend (the same fused CG on the CPU, host
BLAS/OpenMP threads pinned) and SciPy, at CPU sizes. Times are medians of the repeats with min-max.
JSON + markdown into --out (or $OUT, else results/bench/); the markdown table is printed last.

Last, the whole-run table (``hpcsolve.report.bench_fem_run``, skipped with --no-whole-run): the phases of one
``hpcsolve run`` of each shipped FEM case at 3 mesh sizes on CuPy, Numba-CUDA and NumPy (those usable here).
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from hpcsolve.core import backends
from hpcsolve.core import precision as precision_mod
from hpcsolve.core.errors import CaseError
from hpcsolve.fem import prepare_matrix, solve
from hpcsolve.fem.linalg import kernels_numba, precond
from hpcsolve.fem.linalg.cg_engine import CGEngine, bytes_per_iteration
from hpcsolve.report import bench_fem_run, bench_mg
from hpcsolve.report.bandwidth import copy_bandwidth
from hpcsolve.report.bench_inputs import check_backends, check_sizes, out_folder, write_output

SIZES = (1024, 2048, 4096)
QUICK_SIZES = (256, 512)
CPU_SIZES = (256, 512)          # without a GPU: the NumPy backend
CPU_QUICK_SIZES = (128, 256)
#: smallest --sizes: the per-iteration timing runs a fixed count of CG iterations (up to 400 per repeat) from a
#: random right-hand side; on a smaller system CG converges within that count, its residual underflows to zero
#: and the next iteration is a Breakdown (p.Ap = 0). Measured on the NumPy backend at 400 iterations: fp32 fails
#: at sizes up to 45 (fp64 up to 11), none from 46 to 129; 64 keeps a margin (and is a power of two).
MIN_SIZE = 64
#: largest: 16384^2 unknowns have 1.3e9 nonzeros, within the int32 indices of the matrix (2^31)
MAX_SIZE = 16384
#: the precisions the per-iteration table times (its fused CG runs in float64 or float32); the time-to-solution
#: table always runs fp64, mixed and fp32
PRECISIONS = ("fp64", "fp32")
#: the GPU backends timed by default (--backends)
GPU_BACKENDS = tuple(name for name in backends.BACKENDS if backends.get(name).gpu)


def _host_poisson(m: int):
    T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(m, m), dtype=np.float64)
    I = sp.identity(m, dtype=np.float64)
    A = (sp.kron(I, T) + sp.kron(T, I)).tocsr()
    A.indices = A.indices.astype(np.int32)
    A.indptr = A.indptr.astype(np.int32)
    return A


def _array_module_gpu(usable):
    """The usable GPU backend whose state lives in a device ndarray module (CuPy: ``Backend.xp`` is not NumPy), on
    which the per-iteration table builds its matrix and times cuSPARSE's CG; None without one."""
    return next((be for be in usable if be.gpu and be.xp is not np), None)


def time_iterations(A, dtype, n_iter: int = 200, k: int = 50, repeats: int = 3, jacobi=False, seed: int = 0) -> dict:
    """Median seconds per fused CG iteration at a fixed iteration count (graph replays, device events),
    on A's low ops. Starts from a random right-hand side (never zeros); the iteration count is fixed,
    not a solve."""
    low = A.low
    rng = np.random.default_rng(seed)
    b = rng.standard_normal(A.n)
    eng = CGEngine(A, dtype, precond.get("jacobi" if jacobi else "none"), K=k)
    x64 = low.zeros(A.n, np.float64)
    b_dev = low.to_device(b)
    times = []
    for rep in range(repeats + 1):
        low.fill_zero(eng.x)
        eng.set_residual_from(x64, b_dev)
        eng.start_from_r()
        low.sync()
        blocks = max(1, n_iter // k)
        with low.timer() as t:
            for _ in range(blocks):
                eng.launch(k)
        if rep:
            times.append(t.seconds / (blocks * k))
    rr = eng.read(k)
    return {"seconds_per_iteration": float(np.median(times)), "all": times, "iterations": blocks * k,
            "final_rel_residual": float(np.sqrt(max(rr[-1], 0)) / np.linalg.norm(b))}


def _cupyx_cg_time(dA, dtype, n_iter: int, repeats: int) -> float:
    import cupy as cp  # late: optional GPU module (the GPU extra), only on a usable CuPy backend
    import cupyx.scipy.sparse as csp  # late: optional GPU module, as above
    from cupyx.scipy.sparse.linalg import cg  # late: optional GPU module, as above

    A = csp.csr_matrix((dA.vals[np.dtype(dtype)], dA.indices, dA.indptr), shape=(dA.n, dA.n))
    b = cp.asarray(np.random.default_rng(0).standard_normal(dA.n), dtype=dtype)
    kw = {"tol": 1e-30, "atol": 0.0}
    try:
        cg(A, b, maxiter=2, **kw)
    except TypeError:
        kw = {"rtol": 1e-30, "atol": 0.0}
        cg(A, b, maxiter=2, **kw)
    times = []
    for _ in range(repeats):
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        cg(A, b, maxiter=n_iter, **kw)
        cp.cuda.Device().synchronize()
        times.append((time.perf_counter() - t0) / n_iter)
    return statistics.median(times)


def _scipy_cg_time(A, dtype, n_iter: int) -> float:
    import scipy.sparse.linalg as spla    # late: its import costs about 0.25 s (measured), for this row only

    Aw = A.astype(dtype)
    b = np.random.default_rng(0).standard_normal(A.shape[0]).astype(dtype)
    t0 = time.perf_counter()
    try:
        spla.cg(Aw, b, rtol=1e-30, atol=0.0, maxiter=n_iter)
    except TypeError:
        spla.cg(Aw, b, tol=1e-30, atol=0.0, maxiter=n_iter)
    return (time.perf_counter() - t0) / n_iter


def _check_precisions(values) -> tuple:
    """--precisions of the per-iteration table: fp64 and fp32 (a CaseError naming any other, and why)."""
    names = []
    for p in values:
        name = str(p).lower()
        if name not in PRECISIONS:
            policy = precision_mod.POLICIES.get(name)
            why = (None if policy is None else
                   f"{name} is not a precision of the FEM solver" if not policy.supports("fem") else
                   f"bench fem times CG iterations in fp64 and fp32 only; {name} is measured in the time-to-solution "
                   "table, which always runs fp64, mixed and fp32")
            raise CaseError.invalid("--precisions", p, ", ".join(PRECISIONS), why=why)
        names.append(name)
    return tuple(names)


def main(args) -> int:
    # every option is checked before anything is created or timed (CaseError: exit 2 naming the option)
    if getattr(args, "sizes", None):
        check_sizes(args.sizes, "--sizes", MIN_SIZE, MAX_SIZE, f"unknowns per edge in [{MIN_SIZE}, {MAX_SIZE}]",
                    why_low=f"a fixed count of CG iterations is timed; below {MIN_SIZE} unknowns per edge CG converges "
                            "within it and breaks down")
    check_sizes(getattr(args, "mg_sizes", None) or (), "--mg-sizes", 3, 16383,
                "unknowns per edge in [3, 16383] (2^k - 1 halves to the end)")
    precisions = _check_precisions(getattr(args, "precisions", None) or PRECISIONS)
    wanted = check_backends(getattr(args, "backends", None) or GPU_BACKENDS)
    quick = bool(getattr(args, "quick", False))
    whole = bench_fem_run.check_options(args, quick)     # (plan, backends, repeats) or None
    out = out_folder(args)
    usable = [be for be in map(backends.get, wanted) if be.available and not be.simulator]
    device = _array_module_gpu(usable)          # the CuPy backend: the matrix, cuSPARSE's CG, the bandwidth
    other_gpu = [be for be in usable if be.gpu and be is not device]     # Numba-CUDA: a view of the same matrix
    on_gpu = device is not None
    default = (QUICK_SIZES if quick else SIZES) if on_gpu else (CPU_QUICK_SIZES if quick else CPU_SIZES)
    sizes = tuple(args.sizes) if getattr(args, "sizes", None) else default
    n_iter = 100 if quick else 400
    repeats = 3 if on_gpu else 5
    result = {"host": platform.node(), "sizes": list(sizes), "iterations_timed": n_iter, "rows": [], "solve": [],
              "backends": {b: backends.probe(b).reason for b in GPU_BACKENDS},
              "device": "GPU (CuPy)" if on_gpu else f"CPU (NumPy backend, {backends.cpu_threads()} thread)"}
    if on_gpu:
        from hpcsolve.fem.linalg import kernels_cupy  # late: imports cupy (optional GPU module), on a usable GPU only
    else:
        print("no usable CuPy GPU backend (" + backends.probe("cupy").reason + "): NumPy backend on the CPU",
              flush=True)
        _cpu_rows(result, sizes, precisions, n_iter, repeats, quick, out, args, whole)
        return 0

    bw = copy_bandwidth(device, nbytes=(512 if quick else 2048) * 1024**2)
    result["copy_bandwidth"] = bw
    bwBps = bw["bandwidth_Bps"]
    print(f"copy bandwidth (read + write): {bw['bandwidth_GBps']:.0f} GB/s", flush=True)
    ops_nograph = kernels_cupy.low_ops(graphs=False)

    def row(m, backend, variant, precision, seconds, nbytes=None, note=""):
        _row(result, bwBps, m, backend, variant, precision, seconds, nbytes, note)

    for m in sizes:
        print(f"== 2D Poisson {m}^2 = {m * m:,} unknowns", flush=True)
        dA = kernels_cupy.poisson_5point_device(m)          # on kernels_cupy.low_ops() (graphs)
        dA_nograph = dA.on(ops_nograph, lambda a: a)
        host = _host_poisson(m) if m <= 2048 else None
        for prec in precisions:
            dt = precision_mod.get_precision(prec, "fem").storage
            nb = bytes_per_iteration(dA.n, dA.nnz, dt)
            t = time_iterations(dA, dt, n_iter=n_iter, k=50, repeats=repeats)
            row(m, device.name, "fused+graphs", prec, t, nb)
            t = time_iterations(dA_nograph, dt, n_iter=n_iter, k=50, repeats=repeats)
            row(m, device.name, "fused, no graphs", prec, t, nb)
            for be in other_gpu:
                try:
                    nA = kernels_numba.view_of(dA)
                    t = time_iterations(nA, dt, n_iter=n_iter, k=50, repeats=repeats)
                    row(m, be.name, "fused+graphs" if nA.low.graphs else "fused, no graphs", prec, t, nb,
                        note=getattr(nA.low, "graph_error", None) or "")
                except Exception as exc:  # report, keep benchmarking the rest
                    print(f"  {be.name} failed: {type(exc).__name__}: {exc}")
                    result.setdefault("errors", []).append(f"{be.name} {m} {prec}: {exc}")
            row(m, device.name, "cupyx cg (cuSPARSE)", prec, _cupyx_cg_time(dA, dt, min(n_iter, 200), repeats))
            if host is not None and m <= (512 if quick else 2048):
                row(m, "numpy", "scipy cg (CPU)", prec, _scipy_cg_time(host, dt, 10 if m > 1024 else 20))
        _solve_table(result, m, dA)
        del dA, dA_nograph
        device.free_pool()

    _multigrid(result, args, device=device, numba=bool(other_gpu), quick=quick)
    _whole_run(result, whole)
    _write(result, out)
    return 0


def _multigrid(result, args, *, device, numba: bool, quick: bool) -> None:
    """The multigrid time-to-solution and robustness tables (hpcsolve.report.bench_mg) on ``device`` (a Backend:
    the GPU one the per-iteration table ran on, or the NumPy one); ``numba``: also Numba-CUDA's V-cycle."""
    if getattr(args, "no_multigrid", False):
        return
    sizes = getattr(args, "mg_sizes", None) or (
        (bench_mg.GPU_QUICK_SIZES if quick else bench_mg.GPU_SIZES) if device.gpu else
        (bench_mg.CPU_QUICK_SIZES if quick else bench_mg.CPU_SIZES))
    bench_mg.poisson_table(result, sizes=tuple(sizes), device=device, numba=numba, quick=quick)
    if not getattr(args, "no_robustness", False):
        bench_mg.robustness_table(result, device=device, quick=quick)


def _whole_run(result, whole) -> None:
    """The whole-run table (hpcsolve.report.bench_fem_run) of ``whole``: check_options' plan, or None (skipped)."""
    if whole is None:
        return
    entries, names, repeats = whole
    print("== whole run: the phases of one hpcsolve run per FEM case and size", flush=True)
    bench_fem_run.whole_run_table(result, entries, names, repeats)


def _row(result, bw_Bps, m, backend, variant, precision, timing, nbytes=None, note=""):
    """One per-iteration row; ``timing``: time_iterations' dict (median and every repeat) or seconds."""
    seconds = timing["seconds_per_iteration"] if isinstance(timing, dict) else float(timing)
    every = timing.get("all", [seconds]) if isinstance(timing, dict) else [seconds]
    r = {"m": m, "unknowns": m * m, "backend": backend, "variant": variant, "precision": precision,
         "ms_per_iteration": seconds * 1e3, "ms_min": min(every) * 1e3, "ms_max": max(every) * 1e3,
         "bytes_per_iteration": nbytes,
         "pct_of_copy_bandwidth": (100 * nbytes / seconds / bw_Bps) if nbytes else None, "note": note}
    result["rows"].append(r)
    pct = f"{r['pct_of_copy_bandwidth']:.0f}%" if nbytes else "-"
    print(f"  {m}^2 {backend:<10} {variant:<22} {precision:<5} {seconds * 1e3:8.4f} ms/it  {pct}", flush=True)


def _solve_table(result, m, A):
    """Time to a float64 true relative residual of 1e-10 on A's backend, per precision x method."""
    b = np.random.default_rng(1).standard_normal(A.n)
    ref_its = ref_t = None
    for prec, method in (("fp64", "cg"), ("mixed", "cg-reliable"), ("mixed", "ir-restarted"), ("fp32", "cg")):
        maxiter = 50_000 if ref_its is None else int(3 * ref_its)
        x, rep = solve(A, b, precision=prec, method=method, rtol=1e-10, maxiter=maxiter)
        if ref_its is None:
            ref_its, ref_t = rep.iterations, rep.time_s
        s = {"m": m, "precision": prec, "method": method, "converged": rep.converged,
             "iterations": rep.iterations, "outer": rep.outer_iterations, "time_s": rep.time_s,
             "time_vs_fp64": rep.time_s / ref_t, "iterations_vs_fp64": rep.iterations / ref_its,
             "true_residual": rep.true_residual, "kappa_estimate": rep.kappa_estimate,
             "fallback": rep.fallback, "reason": rep.reason}
        result["solve"].append(s)
        print(f"  solve {prec:<5} {method:<13} its {rep.iterations:6d} ({s['iterations_vs_fp64']:.2f}x)  "
              f"{rep.time_s * 1e3:9.1f} ms ({s['time_vs_fp64']:.2f}x)  true {rep.true_residual:.2e}  "
              f"kappa~{rep.kappa_estimate:.2e}  {rep.fallback[:70]}", flush=True)


def _cpu_rows(result, sizes, precisions, n_iter, repeats, quick, out, args=None, whole=None):
    """Without a GPU: the fused CG on the NumPy backend and SciPy's CG, then the solve table (and the whole-run
    table of ``whole``)."""
    numpy = backends.get("numpy")
    bw = copy_bandwidth("numpy")
    result["copy_bandwidth"] = bw
    print(f"host copy bandwidth (read + write): {bw['bandwidth_GBps']:.1f} GB/s", flush=True)
    with numpy.run_context():
        for m in sizes:
            print(f"== 2D Poisson {m}^2 = {m * m:,} unknowns (CPU)", flush=True)
            host = _host_poisson(m)
            A = prepare_matrix(host, backend=numpy)
            for prec in precisions:
                dt = precision_mod.get_precision(prec, "fem").storage
                nb = bytes_per_iteration(A.n, A.nnz, dt)
                t = time_iterations(A, dt, n_iter=max(n_iter // 4, 50), k=50, repeats=repeats)
                _row(result, bw["bandwidth_Bps"], m, "numpy", "fused CG (NumPy backend)", prec, t, nb)
                _row(result, bw["bandwidth_Bps"], m, "numpy", "scipy cg", prec,
                     _scipy_cg_time(host, dt, 20))
            _solve_table(result, m, A)
        _multigrid(result, args, device=numpy, numba=False, quick=quick)
    _whole_run(result, whole)
    _write(result, out)


def _write(result, out: Path) -> None:
    result["sizes"] = sorted({r["m"] for r in result["rows"]})      # the sizes actually run
    result["multigrid_sizes"] = sorted({r["m"] for r in result.get("multigrid", [])})
    write_output(out / "bench_fem.json", json.dumps(result, indent=2, default=float))
    md = _markdown(result)
    write_output(out / "bench_fem.md", md)
    print()
    print(md)


def _markdown(res: dict) -> str:
    bw = res["copy_bandwidth"]["bandwidth_GBps"]
    lines = [f"### FEM CG on 2D Poisson, {res.get('device', 'GPU')} (copy bandwidth of this run: {bw:.0f} GB/s, "
             f"{res['iterations_timed']} iterations timed)", "",
             "| unknowns | backend | variant | precision | ms / iteration (min-max) | % of copy bandwidth |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in res["rows"]:
        pct = f"{r['pct_of_copy_bandwidth']:.0f}" if r["pct_of_copy_bandwidth"] else "-"
        spread = f" ({r['ms_min']:.4f}-{r['ms_max']:.4f})" if "ms_min" in r else ""
        lines.append(f"| {r['m']}^2 | {r['backend']} | {r['variant']} | {r['precision']} | "
                     f"{r['ms_per_iteration']:.4f}{spread} | {pct} |")
    lines += ["", f"Time to a float64 true relative residual of 1e-10 ({res.get('device', 'GPU')}, random b):", "",
              "| unknowns | precision | method | iterations (vs fp64) | time ms (vs fp64) | true residual | "
              "kappa est. | note |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s in res["solve"]:
        note = s["fallback"] or ("" if s["converged"] else s["reason"])
        lines.append(f"| {s['m']}^2 | {s['precision']} | {s['method']} | {s['iterations']} "
                     f"({s['iterations_vs_fp64']:.2f}x) | {s['time_s'] * 1e3:.1f} ({s['time_vs_fp64']:.2f}x) | "
                     f"{s['true_residual']:.2e} | {s['kappa_estimate']:.2e} | {note[:110]} |")
    lines += bench_mg.markdown(res)
    lines += bench_fem_run.markdown(res)
    return "\n".join(lines) + "\n"
