"""Time the decomposed solvers on N ranks: run under ``mpiexec -n N`` (and once with -n 1 for the baseline).

    mpiexec -n 2 python scripts/bench_ranks.py [--lbm-sizes 512] [--fem-sizes 511] [--weak] [--steps 50]
                                               [--iterations 100] [--out DIR]

LBM: a lid-driven cavity (NumPy stepper on each rank's slab), ``--steps`` timed after a warm-up; per step the
wall time, the part spent in the halo exchange, and the bytes each rank sends. FEM: 2D Poisson (5-point), CG
over row blocks for exactly ``--iterations`` iterations; per iteration the wall time and the halo exchange.
``--weak``: the size is per rank (the lattice grows in y, the FEM grid in rows), else the whole problem.
Rank 0 prints a markdown table and writes bench_ranks.json (to --out, default results/bench/): compare runs
with different N by hand (a run knows only its own N). Wall times are medians of ``--repeats`` on each rank,
the slowest rank reported. This is the NumPy reference on the CPU: it measures the decomposition's cost
(halo bytes and time), not GPU scaling (docs/design/parallel.md).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from hpcsolve.core import parallel
from hpcsolve.core.precision import get_precision
from hpcsolve.report.bench_lbm import cavity_setup


def bench_lbm(comm, n: int, weak: bool, steps: int, repeats: int, precision: str) -> dict:
    from hpcsolve.lbm.distributed import SlabStepper  # late: only the LBM half of the study

    ranks = parallel.ranks(comm)
    ny = n * ranks if weak else n
    s = SlabStepper("numpy", cavity_setup(n, get_precision(precision, "lbm"), ny=ny), comm)
    s.step(3)                                      # warm-up
    times, halo = [], []
    for _ in range(repeats):
        s.halo_seconds = 0.0
        comm.allgather(None)                       # start together
        t0 = time.perf_counter()
        s.step(steps)
        times.append(time.perf_counter() - t0)
        halo.append(s.halo_seconds)
    step = max(comm.allgather(float(np.median(times)) / steps))            # the slowest rank sets the pace
    halo_step = max(comm.allgather(float(np.median(halo)) / steps))
    return {"family": "lbm", "ranks": ranks, "weak": weak, "nx": n, "ny": ny, "precision": precision,
            "steps": steps, "seconds_per_step": step, "halo_seconds_per_step": halo_step,
            "halo_fraction": halo_step / step if step > 0 else float("nan"),
            "halo_bytes_sent_per_step_per_rank": s.halo_bytes_per_step,
            "rows_per_rank": s.decomposition()["rows_per_rank"], "mlups": n * ny / step / 1e6}


def bench_fem(comm, m: int, weak: bool, iterations: int, repeats: int) -> dict:
    from hpcsolve.fem import solve  # late: only the FEM half of the study
    from hpcsolve.fem.discrete import testproblems as tp  # late: only the FEM half of the study
    from hpcsolve.fem.linalg.distributed import prepare_distributed  # late: only the FEM half of the study

    ranks = parallel.ranks(comm)
    rows = m * ranks if weak else m
    P = tp.poisson_fd(m) if rows == m else _poisson_rect(m, rows)
    M = prepare_distributed(P.A, comm)
    kw = dict(rtol=1e-300, maxiter=iterations, check_every=iterations)      # exactly `iterations` iterations
    solve(M, P.b, **kw)                                                       # warm-up
    times, halo = [], []
    for _ in range(repeats):
        M.exchange_seconds = 0.0
        comm.allgather(None)
        _, rep = solve(M, P.b, **kw)
        times.append(rep.time_s)
        halo.append(M.exchange_seconds)
    it = max(comm.allgather(float(np.median(times)) / iterations))
    halo_it = max(comm.allgather(float(np.median(halo)) / iterations))
    return {"family": "fem", "ranks": ranks, "weak": weak, "unknowns": int(P.A.shape[0]), "grid": [m, rows],
            "iterations": iterations, "seconds_per_iteration": it, "halo_seconds_per_iteration": halo_it,
            "halo_fraction": halo_it / it if it > 0 else float("nan"),
            "halo_entries_received_per_spmv": comm.allgather(M.halo_entries),
            "rows_per_rank": [r1 - r0 for r0, r1 in M.blocks]}


def _poisson_rect(mx: int, my: int):
    """The 5-point Poisson matrix on an mx x my interior grid (Dirichlet all round), random b."""
    import scipy.sparse as sp  # late: only the FEM half of the study

    from hpcsolve.fem.discrete.testproblems import Problem  # late: only the FEM half of the study

    def lap(k):
        return sp.diags([-np.ones(k - 1), 2 * np.ones(k), -np.ones(k - 1)], [-1, 0, 1])

    A = (sp.kron(sp.identity(my), lap(mx)) + sp.kron(lap(my), sp.identity(mx))).tocsr()
    b = np.random.default_rng(1).standard_normal(mx * my)
    return Problem(f"Poisson {mx}x{my}", A, b, None, None)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lbm-sizes", type=int, nargs="*", default=[512])
    ap.add_argument("--fem-sizes", type=int, nargs="*", default=[511])
    ap.add_argument("--weak", action="store_true", help="sizes per rank (weak scaling)")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--precision", default="fp64")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    comm = parallel.world()
    rows = [bench_lbm(comm, n, args.weak, args.steps, args.repeats, args.precision) for n in args.lbm_sizes]
    rows += [bench_fem(comm, m, args.weak, args.iterations, args.repeats) for m in args.fem_sizes]
    if comm.Get_rank() == 0:
        out = Path(args.out or Path("results") / "bench")
        out.mkdir(parents=True, exist_ok=True)
        (out / "bench_ranks.json").write_text(json.dumps({"ranks": parallel.ranks(comm), "rows": rows}, indent=1))
        print(f"| family | ranks | problem | ms per step / iteration | halo ms | halo share | halo bytes sent per rank |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for r in rows:
            if r["family"] == "lbm":
                print(f"| lbm {r['precision']} | {r['ranks']} | {r['nx']} x {r['ny']}{' (weak)' if r['weak'] else ''} | "
                      f"{r['seconds_per_step'] * 1e3:.3f} | {r['halo_seconds_per_step'] * 1e3:.3f} | "
                      f"{r['halo_fraction']:.1%} | {r['halo_bytes_sent_per_step_per_rank']:,} |")
            else:
                print(f"| fem cg fp64 | {r['ranks']} | {r['grid'][0]} x {r['grid'][1]}{' (weak)' if r['weak'] else ''} | "
                      f"{r['seconds_per_iteration'] * 1e3:.3f} | {r['halo_seconds_per_iteration'] * 1e3:.3f} | "
                      f"{r['halo_fraction']:.1%} | {max(r['halo_entries_received_per_spmv']) * 8:,} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
