"""Geometric multigrid against AMG and Jacobi-PCG on the 3D and P2 cases (issue 55): for each configuration, the
shipped case run with solve.preconditioner = mg, amg and jacobi (no float64 reference, no plots), each run twice and
the second (warm) run reported: iterations, the preconditioner's set-up, the solve, the assembly and the whole run.

    python scripts/fem_mg_study.py --backend numpy --quick --out DIR      # CPU sizes (minutes)
    python scripts/fem_mg_study.py --backend cupy --out DIR               # GPU sizes

mg on a box of tetrahedra (P1) is P1 interpolation from the box with half the cells; on P2 meshes a p-multigrid level
to the P1 functions of the same mesh comes first (docs/design/fem_multigrid.md, "3D boxes and P2"). Writes
DIR/fem_mg_study.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")        # pinned BLAS: small CPU solves are 15x slower threaded
os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import hpcsolve  # noqa: E402

#: (label, case, overrides) at GPU sizes and at CPU (--quick) sizes
CONFIGS = {
    "gpu": [("3D P1 Poisson 128^3", "poisson3d_manufactured", ("mesh.nx=128",)),
            ("3D P2 Poisson 64^3", "poisson3d_manufactured", ("mesh.nx=64", 'problem.element="P2"')),
            ("2D P2 Poisson 1024^2", "poisson_p2", ("mesh.nx=1024",)),
            ("3D P1 Lame 24x72x192", "thick_cylinder", ('problem.element="P1"', "mesh.nx=24", "mesh.ny=72",
                                                        "mesh.nz=192")),
            ("3D P2 Lame 8x24x64", "thick_cylinder", ("mesh.nx=8", "mesh.ny=24", "mesh.nz=64"))],
    "cpu": [("3D P1 Poisson 48^3", "poisson3d_manufactured", ("mesh.nx=48",)),
            ("3D P2 Poisson 24^3", "poisson3d_manufactured", ("mesh.nx=24", 'problem.element="P2"')),
            ("2D P2 Poisson 256^2", "poisson_p2", ("mesh.nx=256",)),
            ("3D P1 Lame 8x24x32", "thick_cylinder", ('problem.element="P1"', "mesh.nx=8", "mesh.ny=24",
                                                      "mesh.nz=32")),
            ("3D P2 Lame 4x12x16", "thick_cylinder", ("mesh.nx=4", "mesh.ny=12", "mesh.nz=16"))],
}
PRECONDITIONERS = ("mg", "amg", "jacobi")


def run(case: str, over, backend: str, precision: str, pc: str, rtol: float, repeat: int):
    """(the last run's result, its wall time)."""
    args = [*over, 'solve.reference="never"', f'solve.preconditioner="{pc}"', f"solve.rtol={rtol:g}"]
    result, wall = None, float("nan")
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = hpcsolve.run_case(ROOT / "cases" / f"{case}.toml", backend, precision, progress=False, plots=False,
                                   overrides=args)
        wall = time.perf_counter() - t0
    return result, wall


def record(label: str, pc: str, result, wall: float) -> dict:
    t, m = result.timings, result.metrics
    info = m.get("preconditioner_info") or {}
    return {"config": label, "preconditioner": pc, "unknowns": result.derived.get("unknowns"),
            "iterations": m.get("iterations"), "status": result.status,
            "setup_s": t.get("preconditioner_setup_s", 0.0), "solve_s": t.get("solve_s"),
            "assembly_s": t.get("assembly_s"), "norms_s": t.get("norms_s"), "total_s": t.get("total_s"), "wall_s": wall,
            "levels": info.get("level_kinds"), "operator_complexity": info.get("operator_complexity"),
            "error": m.get("error_l2", m.get("probe_rel_error"))}


def table(records: list[dict]) -> str:
    head = ("| configuration | unknowns | preconditioner | iterations | set-up s | solve s | assembly s | norms s | "
            "run total s | levels | operator complexity | error |\n" + "| --- " * 12 + "|")
    rows = [head]
    for r in records:
        oc = r["operator_complexity"]
        rows.append(f"| {r['config']} | {r['unknowns']:,} | {r['preconditioner']} | {r['iterations']} | "
                    f"{r['setup_s']:.3f} | {r['solve_s']:.3f} | {r['assembly_s']:.3f} | {r['norms_s']:.3f} | "
                    f"{r['total_s']:.3f} | {', '.join(r['levels'] or [])} | {'' if oc is None else f'{oc:.2f}'} | "
                    f"{r['error']:.3g} |")
    return "\n".join(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="numpy")
    ap.add_argument("--precision", default="fp64")
    ap.add_argument("--quick", action="store_true", help="the CPU sizes")
    ap.add_argument("--only", nargs="+", default=None, help="configurations whose label contains one of these")
    ap.add_argument("--preconditioners", nargs="+", default=list(PRECONDITIONERS), choices=PRECONDITIONERS)
    ap.add_argument("--repeat", type=int, default=2, help="runs per configuration; the last one is reported")
    ap.add_argument("--rtol", type=float, default=1e-9)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    configs = CONFIGS["cpu" if args.quick else "gpu"]
    if args.only:
        configs = [c for c in configs if any(o in c[0] for o in args.only)]
    records = []
    for label, case, over in configs:
        for pc in args.preconditioners:
            result, wall = run(case, over, args.backend, args.precision, pc, args.rtol, args.repeat)
            records.append(record(label, pc, result, wall))
            print(table(records[-1:]).splitlines()[-1], flush=True)
            text = (f"# mg against amg and jacobi ({args.backend}, {args.precision}, rtol {args.rtol:g}; the last of "
                    f"{args.repeat} runs)\n\n" + table(records) + "\n")
            (args.out / "fem_mg_study.md").write_text(text)
            (args.out / "fem_mg_study.json").write_text(json.dumps({"backend": args.backend, "records": records},
                                                                   indent=1, default=str))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
