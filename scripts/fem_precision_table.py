"""Where fp32 stops being enough (issue 55): for P1 / P2 elements in 2D and 3D over mesh sizes, the discretisation
error (the manufactured solution's relative L2 error of the fp64 solve) beside fp32's and mixed's solution error
(their relative distance from the fp64 solution at the nodes), with the time and iterations of each.

    python scripts/fem_precision_table.py --backend cupy --out DIR               # the GPU table (docs/design/fem_elements.md)
    python scripts/fem_precision_table.py --backend numpy --quick --out DIR      # small sizes, seconds on a CPU

Each row runs the case three times (fp64, fp32, mixed) with the given preconditioner (default amg), without the
float64 reference solve and plots; a run is repeated once and its second (warm) time kept where --repeat 2. Writes
DIR/fem_precision_table.md and .json. Sizes are mesh.nx of poisson_manufactured (2D P1), poisson_p2 (2D P2) and
poisson3d_manufactured (3D P1, P2).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import hpcsolve  # noqa: E402

ROWS = {"2D P1": ("poisson_manufactured", "P1", (256, 512, 1024, 2048)),
        "2D P2": ("poisson_p2", "P2", (128, 256, 512, 1024)),
        "3D P1": ("poisson3d_manufactured", "P1", (32, 64, 96, 128)),
        "3D P2": ("poisson3d_manufactured", "P2", (16, 32, 48, 64))}
QUICK = {"2D P1": (16, 32, 64, 128), "2D P2": (8, 16, 32, 64), "3D P1": (4, 8, 12, 16), "3D P2": (2, 4, 6, 8)}


def run(case: str, element: str, n: int, backend: str, precision: str, pc: str, repeat: int, rtol: float):
    over = [f"mesh.nx={n}", f'problem.element="{element}"', 'solve.reference="never"', f'solve.preconditioner="{pc}"',
            f"solve.rtol={rtol:g}"]
    result = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = hpcsolve.run_case(ROOT / "cases" / f"{case}.toml", backend, precision, progress=False, plots=False,
                                   overrides=over)
        wall = time.perf_counter() - t0
    return result, wall


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="numpy")
    ap.add_argument("--preconditioner", default="amg")
    ap.add_argument("--rows", nargs="+", default=list(ROWS), choices=list(ROWS))
    ap.add_argument("--quick", action="store_true", help="the small sizes (CPU)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per configuration; the last one is reported")
    ap.add_argument("--rtol", type=float, default=1e-9)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    records = []
    head = ("| elements | mesh.nx | unknowns | discretisation error (fp64, rel. L2) | fp32 error | fp32 / discr. | "
            "mixed error | fp64 s | fp32 s | mixed s | iterations fp64 / fp32 / mixed | fp32 status |")
    lines = [head, "| " + " | ".join(["---"] * 12) + " |"]
    for row in args.rows:
        case, element, sizes = ROWS[row]
        for n in (QUICK[row] if args.quick else sizes):
            res = {p: run(case, element, n, args.backend, p, args.preconditioner, args.repeat, args.rtol)
                   for p in ("fp64", "fp32", "mixed")}
            u64 = np.asarray(res["fp64"][0].fields["u"], dtype=np.float64)
            scale = float(np.linalg.norm(u64))

            def err(p):
                return float(np.linalg.norm(np.asarray(res[p][0].fields["u"], dtype=np.float64) - u64)) / scale

            m64 = res["fp64"][0].metrics
            disc = float(m64["discretisation_error"])
            rec = {"elements": row, "nx": n, "unknowns": res["fp64"][0].derived["unknowns"],
                   "discretisation_error": disc, "fp32_error": err("fp32"), "mixed_error": err("mixed"),
                   "seconds": {p: res[p][0].timings.get("total_s") for p in res},
                   "wall_s": {p: res[p][1] for p in res},
                   "iterations": {p: res[p][0].metrics.get("iterations") for p in res},
                   "status": {p: res[p][0].status for p in res}, "backend": args.backend,
                   "preconditioner": args.preconditioner}
            records.append(rec)
            s, it = rec["seconds"], rec["iterations"]
            lines.append(f"| {row} | {n} | {rec['unknowns']:,} | {disc:.3g} | {rec['fp32_error']:.3g} | "
                         f"{rec['fp32_error'] / disc:.3g} | {rec['mixed_error']:.3g} | {s['fp64']:.3g} | "
                         f"{s['fp32']:.3g} | {s['mixed']:.3g} | {it['fp64']} / {it['fp32']} / {it['mixed']} | "
                         f"{rec['status']['fp32']} |")
            print(lines[-1], flush=True)
    (args.out / "fem_precision_table.json").write_text(json.dumps(records, indent=1))
    (args.out / "fem_precision_table.md").write_text(
        f"backend {args.backend}, preconditioner {args.preconditioner}, rtol {args.rtol:g}, "
        f"repeat {args.repeat} (the last run's time_total_s)\n\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
