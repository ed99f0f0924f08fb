#!/usr/bin/env python3
"""Time to a true relative residual (default 1e-10) of fp64 CG and mixed cg-reliable on 2D Poisson,
fused CuPy path with graphs, with the host-side parts of the mixed solve (kappa watch, residual
replacement, y norm) from ``SolveReport.phase_time_s``. A focused version of the solve section of
``hpcsolve bench fem``, for trying options:

    python3 scripts/fem_mixed_gpu.py --sizes 2048 4096 [--set kappa_limit=inf] [--rtol 1e-10]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[2048])
    ap.add_argument("--rtol", type=float, default=1e-10)
    ap.add_argument("--set", dest="options", action="append", default=[], metavar="KEY=VALUE",
                    help="CGOptions for the mixed solve, e.g. check_every=128 or kappa_limit=inf")
    args = ap.parse_args(argv)
    from hpcsolve.fem import CGOptions, solve  # late: after sys.path holds the source tree
    from hpcsolve.fem.linalg import kernels_cupy  # late: imports cupy (optional GPU module)

    opts = {}
    for item in args.options:
        k, _, v = item.partition("=")
        try:
            opts[k] = int(v)
        except ValueError:
            try:
                opts[k] = float(v)
            except ValueError:
                opts[k] = v
    known = set(CGOptions.names()) - {"rtol", "maxiter"}
    for k in opts:
        if k not in known:
            ap.error(f"--set {k}=...: not a CGOptions field; allowed: {', '.join(sorted(known))}")
    rows = []
    for m in args.sizes:
        dA = kernels_cupy.poisson_5point_device(m)          # a prepared matrix, built on the device
        b = np.random.default_rng(1).standard_normal(dA.n)
        solve(dA, b, precision="fp64", rtol=1e-3)            # warm-up: kernels, graphs
        solve(dA, b, precision="mixed", rtol=1e-3, **opts)
        ref = None
        for prec, kw in (("fp64", {}), ("mixed", opts)):
            _, rep = solve(dA, b, precision=prec, rtol=args.rtol, maxiter=60_000, **kw)
            ref = ref or rep
            row = {"m": m, "precision": prec, "options": kw, "converged": rep.converged, "iterations": rep.iterations,
                   "replacements": rep.outer_iterations, "time_ms": rep.time_s * 1e3,
                   "time_vs_fp64": rep.time_s / ref.time_s, "iterations_vs_fp64": rep.iterations / ref.iterations,
                   "ms_per_iteration": rep.time_s * 1e3 / max(rep.iterations, 1), "true_residual": rep.true_residual,
                   "kappa_estimate": rep.kappa_estimate, "phase_ms": {k: v * 1e3 for k, v in rep.phase_time_s.items()},
                   "fallback": rep.fallback}
            rows.append(row)
            print(json.dumps(row, default=float), flush=True)
        del dA
        import cupy  # late: optional GPU module

        cupy.get_default_memory_pool().free_all_blocks()
    out = Path(os.environ.get("OUT", "."))
    (out / "fem_mixed_gpu.json").write_text(json.dumps(rows, indent=2, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
