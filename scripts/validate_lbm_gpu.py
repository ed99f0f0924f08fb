#!/usr/bin/env python3
"""Validation of the GPU LBM kernels against published data, per precision, on the GPU.

Runs the shipped cases through the normal runner (``hpcsolve.lbm.runner.run``) on a GPU backend
in fp64, fp32 and fp16s, at resolutions the GPU makes cheap, and prints

- cylinder 2D-1 (Re 20): c_D, c_L against Schafer-Turek [5.57, 5.59], [0.0104, 0.0110];
- cylinder 2D-2 (Re 100): c_D max, c_L max, Strouhal number against [3.22, 3.24], [0.99, 1.01],
  [0.295, 0.305];
- lid-driven cavity Re 100 and Re 1000: max |difference| of the centerline velocities from
  Ghia et al. (1982), in units of the lid speed.

    python3 scripts/validate_lbm_gpu.py [--backend cupy] [--precisions fp64 fp32 fp16s] [--quick]

Writes validate_lbm_gpu.json and .md to --out (or $OUT, or the current folder); prints the table last.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (label, case file, overrides, quick overrides, metrics to show, reference text)
RUNS = [
    # 2D-1 with the case's smooth start (boundaries.ramp_time = 8 s), run to the end time (30 s) with the
    # steady stop off, window means over the last quarter of the monitor samples (every 200 steps).
    # D = 80 with U_mean = 0.025 (tau 0.8 as at D = 40 with 0.05; Mach halved); D = 40 for convergence.
    # H200, CuPy fp64: D = 80 c_D 5.5726, c_L 0.010928 (window spread 2.5e-5); D = 40 5.5632, 0.011408.
    # Before the smooth start an acoustic mode made c_L swing by ~0.009 (window spread) at D = 80.
    ("cylinder 2D-1", "cases/cylinder_2d1.toml", ["lattice.resolution=80", "lattice.velocity=0.025",
                                                  "steady.enabled=false"],
     ["lattice.resolution=20"],
     ["drag_coefficient", "lift_coefficient", "drag_coefficient_window_mean", "lift_coefficient_window_mean",
      "lift_coefficient_window_spread"], "c_D [5.57, 5.59], c_L [0.0104, 0.0110]"),
    ("cylinder 2D-1 (D 40)", "cases/cylinder_2d1.toml", ["lattice.resolution=40", "steady.enabled=false"],
     ["lattice.resolution=10"],
     ["drag_coefficient", "lift_coefficient", "drag_coefficient_window_mean", "lift_coefficient_window_mean",
      "lift_coefficient_window_spread"], "c_D [5.57, 5.59], c_L [0.0104, 0.0110]"),
    ("cylinder 2D-2", "cases/cylinder_2d2.toml", ["lattice.resolution=40", "time.monitor_interval=50"],
     ["lattice.resolution=20", "time.end_time=4.0", "time.monitor_interval=25"],
     ["drag_coefficient_max", "lift_coefficient_max", "strouhal"], "c_D max [3.22, 3.24], c_L max [0.99, 1.01], St [0.295, 0.305]"),
    ("cavity Re 100", "cases/lid_driven_cavity.toml", ["lattice.resolution=128"], ["lattice.resolution=64"],
     ["ghia_u_max_abs_diff", "ghia_v_max_abs_diff"], "Ghia 1982 (max |diff| / U_lid)"),
    ("cavity Re 1000", "cases/lid_driven_cavity_re1000.toml", ["lattice.resolution=256", "time.end_time=100"],
     ["lattice.resolution=128", "time.end_time=30"],
     ["ghia_u_max_abs_diff", "ghia_v_max_abs_diff"], "Ghia 1982 (max |diff| / U_lid)"),
]


def _guard_outcome(result) -> str:
    """The 16-bit guard's verdict on a run (hpcsolve/lbm/guard.py): "flagged at step N", "quiet (n checks, max
    growth g, max divergence d)", or "" where it did not run (fp64, fp32)."""
    m = result.metrics
    if "precision_guard_checks" not in m:
        return ""
    if "precision_guard_flagged_step" in m:
        return f"flagged at step {m['precision_guard_flagged_step']}"
    return (f"quiet ({m['precision_guard_checks']} checks, max growth {m.get('precision_guard_max_growth', 0):.3g}, "
            f"max divergence {m.get('precision_guard_max_divergence', 0):.3g})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cupy")
    ap.add_argument("--precisions", nargs="+", default=["fp64", "fp32", "fp16s", "fp16c"])
    ap.add_argument("--runs", nargs="+", help="subset of run labels' first words+number, e.g. '2D-1' 'Re'")
    ap.add_argument("--quick", action="store_true", help="coarse grids, short times (smoke test)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--set", dest="extra", action="append", default=[], metavar="KEY.PATH=VALUE",
                    help="extra case overrides applied after each run's own, e.g. lattice.resolution=80")
    args = ap.parse_args(argv)
    out = args.out or Path(os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)

    from hpcsolve import run as runmod  # late: after sys.path holds the source tree
    from hpcsolve.lbm import runner  # late: after sys.path holds the source tree

    rows = []
    for label, path, overrides, quick, keys, reference in RUNS:
        if args.runs and not any(r in label for r in args.runs):
            continue
        for precision in args.precisions:
            t0 = time.perf_counter()
            row = {"case": label, "precision": precision, "backend": args.backend, "reference": reference,
                   "overrides": (quick if args.quick else overrides) + args.extra}
            try:
                case, backend, policy = runmod.prepare(ROOT / path, args.backend, precision, row["overrides"])
                result = runner.run(case, backend, policy, progress=False)
                row.update(status=result.status, steps=result.metrics.get("steps"),
                           mlups=result.timings.get("mlups"), resolution=case.lattice.resolution,
                           metrics={k: result.metrics.get(k) for k in keys},
                           guard=_guard_outcome(result))
            except Exception as exc:  # one failed run must not hide the others
                row.update(status="error", error=f"{type(exc).__name__}: {exc}")
            row["seconds"] = time.perf_counter() - t0
            rows.append(row)
            print(json.dumps(row, default=str), file=sys.stderr, flush=True)

    lines = ["| case | precision | cells/D or /L | steps | status | values | published | 16-bit guard |",
             "| --- | --- | ---: | ---: | --- | --- | --- | --- |"]
    for r in rows:
        vals = r.get("error", "")[:100] or ", ".join(
            f"{k} {v:.5g}" if isinstance(v, float) else f"{k} {v}" for k, v in r.get("metrics", {}).items())
        lines.append(f"| {r['case']} | {r['precision']} | {r.get('resolution', '')} | {r.get('steps', '')} | "
                     f"{r['status']} | {vals} | {r['reference']} | {r.get('guard', '')} |")
    md = f"GPU validation on {args.backend}\n\n" + "\n".join(lines) + "\n"
    (out / "validate_lbm_gpu.json").write_text(json.dumps(rows, indent=2, default=str))
    (out / "validate_lbm_gpu.md").write_text(md)
    print(md)
    return 0 if all(r["status"] != "error" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
