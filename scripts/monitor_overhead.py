#!/usr/bin/env python3
"""How much of an LBM run the monitor points cost: time_total_s against time_step_s.

Runs a case on a backend with ``--set`` overrides, a warm-up run first (compiles the kernels, fills the memory
pool), then ``--repeats`` timed runs, and prints per run and as the median: time_total_s, time_step_s and their
ratio (target for Cylinder 2D-2 at D = 80 with time.monitor_interval = 50: <= 1.15 on CuPy and Numba-CUDA).
``--host-points`` runs the per-point host path instead of the batched device path (for the before/after).

    python scripts/monitor_overhead.py cases/cylinder_2d2.toml --backend cupy \\
        --set lattice.resolution=80 --set lattice.velocity=0.025 --set time.monitor_interval=50 --repeats 3

``--json PATH`` also writes the runs and the medians as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hpcsolve.lbm import runner  # noqa: E402
from hpcsolve.run import run_case  # noqa: E402


def one_run(case: str, backend: str, precision: str, overrides: list[str]) -> dict:
    result = run_case(case, backend, precision, overrides=overrides, progress=False, plots=False)
    total, step = result.timings["total_s"], result.timings["step_s"]
    return {"time_total_s": total, "time_step_s": step, "ratio": total / step if step > 0 else float("inf"),
            "steps": result.metrics.get("steps"), "points": len(result.series.get("step", ())),
            "status": result.status}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case")
    ap.add_argument("--backend", default="cupy")
    ap.add_argument("--precision", default="fp64")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--host-points", action="store_true", help="the per-point host path (no batching)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if args.host_points:
        runner.batched_points = lambda *a, **k: None
    path = "host points" if args.host_points else "batched device points"
    warm = one_run(args.case, args.backend, args.precision, args.overrides)
    print(f"warm-up ({path}): total {warm['time_total_s']:.3f} s, steps {warm['time_step_s']:.3f} s, "
          f"{warm['points']} points, status {warm['status']}", flush=True)
    runs = []
    for i in range(args.repeats):
        r = one_run(args.case, args.backend, args.precision, args.overrides)
        runs.append(r)
        print(f"run {i + 1}: time_total_s {r['time_total_s']:.3f}  time_step_s {r['time_step_s']:.3f}  "
              f"ratio {r['ratio']:.3f}", flush=True)
    med = {k: statistics.median(r[k] for r in runs) for k in ("time_total_s", "time_step_s", "ratio")}
    print(f"median of {len(runs)} ({args.backend}, {args.precision}, {path}): time_total_s "
          f"{med['time_total_s']:.3f}  time_step_s {med['time_step_s']:.3f}  ratio {med['ratio']:.3f}")
    if args.json:
        args.json.write_text(json.dumps({"case": args.case, "backend": args.backend, "precision": args.precision,
                                         "overrides": args.overrides, "path": path, "warm_up": warm,
                                         "runs": runs, "median": med}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
