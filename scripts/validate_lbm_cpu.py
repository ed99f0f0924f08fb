#!/usr/bin/env python
"""Larger CPU validation runs of the LBM NumPy reference (minutes each), printing the figures.

    python scripts/validate_lbm_cpu.py [--only cavity100 cavity1000 cylinder2d1 ...] [--out DIR]

Each run writes its result folder under --out (default validation_lbm/) and one line of figures;
all figures go to --out/figures.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from hpcsolve.run import run_case

ROOT = Path(__file__).resolve().parent.parent
RUNS = {
    "cavity100": ("lid_driven_cavity.toml", ["lattice.resolution=128"]),
    "cavity1000": ("lid_driven_cavity_re1000.toml", []),
    "cavity1000_N96": ("lid_driven_cavity_re1000.toml", ["lattice.resolution=96", "time.end_time=100"]),
    "cylinder2d1_D10": ("cylinder_2d1.toml", ["lattice.resolution=10"]),
    "cylinder2d1_D20": ("cylinder_2d1.toml", []),
    "cylinder2d2_D20": ("cylinder_2d2.toml", ["lattice.resolution=20", "lattice.velocity=0.05", "time.end_time=8.0",
                                              "time.output_interval=0"]),
}
KEYS = ("steps", "ghia_u_max_abs_diff", "ghia_v_max_abs_diff", "drag_coefficient", "lift_coefficient",
        "pressure_difference_pa", "drag_coefficient_max", "lift_coefficient_max", "strouhal", "steady_change")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", choices=list(RUNS), default=["cavity100", "cavity1000_N96", "cylinder2d1_D10",
                                                                        "cylinder2d1_D20"])
    ap.add_argument("--out", type=Path, default=Path("validation_lbm"))
    ap.add_argument("--precision", default="fp64")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    figures_path = args.out / "figures.json"
    figures = json.loads(figures_path.read_text()) if figures_path.exists() else {}
    for name in args.only:
        case, overrides = RUNS[name]
        t0 = time.perf_counter()
        r = run_case(ROOT / "cases" / case, "numpy", args.precision, out=args.out / name, overrides=overrides,
                     progress=False, overwrite=True)
        row = {k: r.metrics[k] for k in KEYS if k in r.metrics}
        row.update(status=r.status, grid=r.derived["grid"], tau=r.derived["relaxation_time"],
                   wall_s=round(time.perf_counter() - t0, 1), mlups=round(r.timings["mlups"], 2),
                   overrides=overrides, precision=args.precision)
        figures[name] = row
        print(name, json.dumps(row), flush=True)
        figures_path.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
