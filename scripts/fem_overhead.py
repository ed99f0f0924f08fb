#!/usr/bin/env python3
"""Host overhead of ``hpcsolve.fem.solve``: the whole call against the solve it reports, on 2D Poisson.

For each size m (m^2 unknowns, the 5-point matrix as a host SciPy CSR, random b with seed 1), backend
and precision: one warm-up call (to rtol 1e-3: kernel compilation, memory pools, CUDA graphs), then ``--repeats``
timed calls of ``solve(A, b, ...)`` with the host matrix ("host A": conversion, checks and upload in
every call) and of ``solve(M, b, ...)`` with ``M = prepare_matrix(A, backend)`` ("prepared M": set up
once, its time printed under the table). Per call: wall time of the call, ``report.setup_time_s``,
``report.time_s`` (the synchronized solve) and the overhead (call - solve) / solve. Median and
[min - max] over the repeats. A markdown table is printed last (and written to --out or $OUT):

    OPENBLAS_NUM_THREADS=1 python scripts/fem_overhead.py --sizes 512 1024 --backends numpy
    python3 scripts/fem_overhead.py --sizes 1024 2048 --backends cupy numba-cuda      # GPU machine
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _stats(values, fmt: str = ".3g") -> str:
    return f"{statistics.median(values):{fmt}} [{min(values):{fmt}} - {max(values):{fmt}}]"


def measure(A, b, backend: str, precision: str, rtol: float, repeats: int) -> list[dict]:
    from hpcsolve.fem import prepare_matrix, solve  # late: after sys.path holds the source tree

    kw = dict(precision=precision, rtol=rtol, maxiter=100_000)
    solve(A, b, backend=backend, **dict(kw, rtol=max(rtol, 1e-3)))       # warm-up: compilation, pools, graphs
    rows = []
    t0 = time.perf_counter()
    M = prepare_matrix(A, backend=backend)
    prepare_s = time.perf_counter() - t0
    for mode, matrix in (("host A", A), ("prepared M", M)):
        calls, setups, solves, its = [], [], [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            _, rep = solve(matrix, b, backend=backend, **kw)
            calls.append(time.perf_counter() - t0)
            setups.append(rep.setup_time_s)
            solves.append(rep.time_s)
            its.append(rep.iterations)
            if not rep.converged:
                raise SystemExit(f"{backend} {precision} did not converge: {rep.reason}")
        over = [100 * (c - s) / s for c, s in zip(calls, solves)]
        rows.append({"m": int(round(np.sqrt(A.shape[0]))), "unknowns": A.shape[0], "nnz": int(A.nnz),
                     "backend": backend, "precision": precision, "mode": mode, "iterations": its[0],
                     "call_s": calls, "setup_s": setups, "solve_s": solves, "overhead_pct": over,
                     "prepare_matrix_s": prepare_s})
        print(f"  {rows[-1]['m']}^2 {backend:<10} {precision:<5} {mode:<10} its {its[0]:5d}  call {_stats(calls)} s  "
              f"setup {_stats(setups)} s  solve {_stats(solves)} s  overhead {_stats(over)} %", flush=True)
    del M
    return rows


def markdown(rows: list[dict], rtol: float, repeats: int) -> str:
    lines = [f"2D Poisson (5-point), rtol {rtol:g}, median [min - max] of {repeats} calls after one warm-up; "
             "overhead = (call - solve) / solve", "",
             "| size | backend | precision | A | iterations | call s | setup s | solve s | overhead % |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['m']}^2 | {r['backend']} | {r['precision']} | {r['mode']} | {r['iterations']} | "
                     f"{_stats(r['call_s'])} | {_stats(r['setup_s'])} | {_stats(r['solve_s'])} | "
                     f"{_stats(r['overhead_pct'], '.1f')} |")
    prep = {(r["m"], r["backend"]): r["prepare_matrix_s"] for r in rows}
    lines += ["", "prepare_matrix (once): " + ", ".join(f"{m}^2 {be} {s:.3g} s" for (m, be), s in prep.items())]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[512, 1024])
    ap.add_argument("--backends", nargs="+", default=["numpy"])
    ap.add_argument("--precisions", nargs="+", default=["fp64", "mixed"])
    ap.add_argument("--rtol", type=float, default=1e-8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    from hpcsolve.core import backends  # late: after sys.path holds the source tree
    from hpcsolve.report.bench_fem import _host_poisson  # late: after sys.path holds the source tree

    for be in args.backends:
        status = backends.probe(be)
        if not status.available:
            ap.error(f"--backends {be}: {status.reason}")
    rows = []
    for m in args.sizes:
        A = _host_poisson(m)
        b = np.random.default_rng(1).standard_normal(A.shape[0])
        print(f"== {m}^2 = {A.shape[0]:,} unknowns, {A.nnz:,} nonzeros", flush=True)
        for be in args.backends:
            for prec in args.precisions:
                rows += measure(A, b, be, prec, args.rtol, args.repeats)
    md = markdown(rows, args.rtol, args.repeats)
    out = Path(args.out or os.environ.get("OUT") or ".")
    out.mkdir(parents=True, exist_ok=True)
    (out / "fem_overhead.json").write_text(json.dumps({"host": platform.node(), "rows": rows}, indent=2))
    (out / "fem_overhead.md").write_text(md)
    print()
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
