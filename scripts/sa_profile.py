"""Where the device smoothed-aggregation set-up spends its time: ``sa_levels_xp`` on 2D Poisson with
CuPy, every step of ``hpcsolve.fem.linalg.precond.sa_device`` timed with a device synchronization before and after
(so the sum is a little above an unsynchronized set-up); the median of ``--repeat`` runs after a warm-up.

    python scripts/sa_profile.py --sizes 2047 4095 --repeat 3
"""

from __future__ import annotations

import argparse
import collections
import statistics
import time

from hpcsolve.fem.linalg.precond import sa_device as sd
from hpcsolve.fem.linalg.precond.mg_options import MGOptions

STEPS = ("node_graph", "strength_graph", "mis2_aggregate", "tentative", "rho_dinv_a_xp", "improve_candidates",
         "smoothed_level", "_canonical", "_dinv")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[2047])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    import cupy as cp  # late: optional GPU module
    import cupyx.scipy.sparse as csp  # late: optional GPU module

    from amg_setup_bench import poisson2d  # late: a sibling script, imports cupy

    seconds = collections.defaultdict(float)

    def timed(name, fn):
        def run(*a, **k):
            cp.cuda.Device().synchronize()
            t0 = time.perf_counter()
            out = fn(*a, **k)
            cp.cuda.Device().synchronize()
            seconds[name] += time.perf_counter() - t0
            return out
        return run

    for name in STEPS:
        setattr(sd, name, timed(name, getattr(sd, name)))
    for m in args.sizes:
        A = csp.csr_matrix(poisson2d(m))
        runs = []
        for r in range(args.repeat + 1):
            seconds.clear()
            cp.cuda.Device().synchronize()
            t0 = time.perf_counter()
            pairs, Ac, _ = sd.sa_levels_xp(A, MGOptions(), None, 10, cp, csp)
            cp.cuda.Device().synchronize()
            total = time.perf_counter() - t0
            if r:
                runs.append((total, dict(seconds)))
        med = statistics.median(t for t, _ in runs)
        parts = {k: round(statistics.median(s.get(k, 0.0) for _, s in runs), 4) for k in STEPS}
        rows = [p[0].shape[0] for p in pairs] + [Ac.shape[0]]
        print(f"poisson2d {m}^2: sa_levels_xp {med:.4f} s (median of {args.repeat}), levels {rows}", flush=True)
        print("    steps (s, summed over levels, nested calls counted in both):", parts, flush=True)


if __name__ == "__main__":
    main()
