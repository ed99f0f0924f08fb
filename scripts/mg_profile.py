"""Where a multigrid-preconditioned solve spends its time, on CuPy and Numba-CUDA (same matrix, same process):
the solve (warm-up, then 3 timed), each level's V-cycle work (``time_levels``), the finest level's operations
one by one (device events, 20 launches each, with the bytes they move and the bandwidth that gives), and the
outer CG's own iteration (plain fused CG, graph replays).

    python scripts/mg_profile.py [--sizes 2047 4095] [--hierarchies fp64 fp32 fp16] [--backends cupy numba-cuda]
"""
import argparse

import numpy as np

from hpcsolve.fem.linalg import kernels_cupy
from hpcsolve.fem import solve
from hpcsolve.fem.linalg.cg_engine import CGEngine
from hpcsolve.fem.linalg.precond import multigrid as mgm
from hpcsolve.fem.discrete import testproblems as tp
from hpcsolve.fem.linalg.kernels_numba import view_of
from hpcsolve.report.bench_fem import time_iterations
from hpcsolve.report.bench_mg import _setup_time

ap = argparse.ArgumentParser()
ap.add_argument("--sizes", type=int, nargs="+", default=[2047, 4095])
ap.add_argument("--hierarchies", nargs="+", default=["fp64", "fp32", "fp16"])
ap.add_argument("--backends", nargs="+", default=["cupy", "numba-cuda"])
ap.add_argument("--ops", action="store_true", help="time the finest level's operations one by one")
args = ap.parse_args()


def op_time(low, fn, n=20, replays=5):
    """Seconds per launch of fn: n launches recorded in a CUDA graph where the backend can (so that launch
    costs from Python do not count), replayed; else launched directly."""
    fn()

    def many():
        for _ in range(n):
            fn()

    graph = low.capture(many) if low.graphs else None
    run, per = (graph, replays) if graph is not None else (many, 1)
    run()
    with low.timer() as t:
        for _ in range(per):
            run()
    return t.seconds / (n * per)


for m in args.sizes:
    A = kernels_cupy.poisson_5point_device(m)
    b = np.random.default_rng(1).standard_normal(m * m)
    for name in args.backends:
        M = A if name == "cupy" else view_of(A)
        low = M.low
        cg64 = time_iterations(M, np.float64, n_iter=100, k=50, repeats=3)["seconds_per_iteration"]
        for h in args.hierarchies:
            pc = mgm.Multigrid("mg", {"hierarchy": h}, grid=tp.fd_grid(m))
            times = []
            for i in range(4):
                x, rep = solve(M, b, preconditioner=pc, rtol=1e-10, maxiter=1000)
                if i:
                    times.append(rep.time_s * 1e3)
            lv = pc.time_levels()
            pc.release(M)
            st, pc = _setup_time(M, lambda: mgm.Multigrid("mg", {"hierarchy": h}, grid=tp.fd_grid(m)), 3)
            print(f"{m}^2 {name:<10} {h}: setup {' '.join(f'{t * 1e3:.1f}' for t in st)} ms; phases (ms) "
                  + " ".join(f"{k} {v * 1e3:.1f}" for k, v in pc.setup_phases_s.items()), flush=True)
            solve(M, b, preconditioner=pc, rtol=1e-10, maxiter=1000)
            x, rep = solve(M, b, preconditioner=pc, rtol=1e-10, maxiter=1000)
            engines = [e for e in M.cache.values() if isinstance(e, CGEngine) and e.general is not None]
            for eng in engines:          # the solve's recorded graphs replayed alone: device time of its blocks
                parts = []
                for key, g in eng._graphs.items():
                    if callable(g):
                        g()
                        with low.timer() as t:
                            for _ in range(5):
                                g()
                        parts.append(f"{key}: {t.seconds / 5 * 1e3:.3f} ms")
                print(f"    graphs of the solve ({rep.iterations} it, solve {rep.time_s * 1e3:.2f} ms): "
                      + "; ".join(parts), flush=True)
            per_it = np.median(times) / rep.iterations
            print(f"{m}^2 {name:<10} {h}: {rep.iterations} it, solve {np.median(times):.2f} ms "
                  f"({min(times):.2f}-{max(times):.2f}), {per_it:.3f} ms/it; outer fp64 CG it {cg64 * 1e3:.3f} ms; "
                  f"V-cycle levels (ms) {' '.join(f'{t * 1e3:.3f}' for t in lv)} sum {sum(lv) * 1e3:.3f}; "
                  f"graphs {low.graphs} {getattr(low, 'graph_error', None)}", flush=True)
            if args.ops:
                L = pc.levels[0]
                B = L.bufs
                n, ib = L.A.rows, 4
                tb = B["b"].dtype.itemsize
                ops = {
                    "smooth": (lambda: low.mg_smooth(L.A, B["x0"], B["b"], L.dinv, B["d"], B["x1"], 0.5, 0.5, False),
                               L.A.nbytes + 6 * n * tb),          # nbytes: CSR or by diagonals
                    "residual": (lambda: low.csr_apply(L.A, B["x0"], B["r"], -1.0, B["b"], 1.0),
                                 L.A.nbytes + 3 * n * tb),
                    "restrict": (lambda: low.csr_apply(L.R, B["r"], pc.levels[1].bufs["b"]),
                                 L.R.nnz * (tb + ib) + 4 * L.R.rows + n * tb + L.R.rows * tb),
                    "prolong": (lambda: low.csr_apply(L.P, pc.levels[1].bufs["x1"], B["x0"], 1.0, B["x0"], 1.0),
                                L.P.nnz * (tb + ib) + 4 * n + 2 * n * tb + L.P.cols * tb),
                }
                C = pc.levels[-1]
                ops["coarse-lvl"] = (lambda: low.mg_smooth(C.A, C.bufs["x0"], C.bufs["b"], C.dinv, C.bufs["d"],
                                                           C.bufs["x1"], 0.5, 0.5, False), 1)
                ops["tiny-copy"] = (lambda: low.scale_copy(C.bufs["x0"], C.bufs["x1"], 1.0), 1)
                for k, (fn, nbytes) in ops.items():
                    t = op_time(low, fn)
                    print(f"    {k:<9} {t * 1e3:.4f} ms  {nbytes / t / 1e9:7.0f} GB/s  ({nbytes / n:.0f} B/row)",
                          flush=True)
            pc.release(M)
    del A
