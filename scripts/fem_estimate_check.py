"""How good is the FEM run-time and iteration estimate? For every shipped FEM case (cases/*.toml with solver "fem"),
backend, size, precision and preconditioner: the estimate (``hpcsolve.run.describe(..., estimate=True)``, made twice:
it must be the same) against the measured run (median of ``--repeats`` runs after a warm-up, BLAS threads pinned to
1), as a markdown table; where the prediction is outside 2x of the measurement the row is flagged and listed again
at the end.

    python scripts/fem_estimate_check.py --backends numpy --sizes 32 64 128 --out /tmp/est
    python scripts/fem_estimate_check.py --backends cupy --sizes 255 1023 2047 --out DIR     (an H100: ~3 min)

A size S is Poisson's mesh.nx; Cook's membrane (two unknowns per node, 8x Poisson's plain-CG iterations) runs at
mesh.nx = S // 4 (even, at least 8); the plate with a hole at the mesh.refine whose unknowns are nearest S^2 / 2.
A configuration predicted past ``--max-run-seconds`` is not run (its row says so); a configuration predicted
past ``--once-above`` seconds is timed once without a warm-up (the sizes run in increasing order, so the smaller
runs warmed the backend up); after ``--time-limit`` seconds the remaining rows are estimated only. "measured" is the run's ``timings.total_s`` (assembly, preconditioner, solve,
error norms, reference; not the interpreter start or file writing): a warm run, as the estimate models it.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")      # before NumPy's import: one BLAS thread, as the estimate's constants

import argparse      # noqa: E402
import json          # noqa: E402
import math          # noqa: E402
import statistics    # noqa: E402
import sys           # noqa: E402
import time          # noqa: E402
import warnings      # noqa: E402
from pathlib import Path   # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hpcsolve import run as runmod                  # noqa: E402
from hpcsolve.core.cases import load_case           # noqa: E402
from hpcsolve.fem.choices import fem_mesh_size      # noqa: E402

PRECISIONS = ("fp64", "fp32", "mixed")
PRECONDITIONERS = ("none", "jacobi", "mg", "amg")


def fem_cases() -> list[Path]:
    """The shipped cases whose solver is fem."""
    out = []
    for path in sorted((ROOT / "cases").glob("*.toml")):
        if any(line.replace(" ", "").startswith('solver="fem"') for line in path.read_text().splitlines()):
            out.append(path)
    return out


def size_overrides(case_path: Path, size: int) -> list[str]:
    """The mesh overrides of size S for this case (module docstring)."""
    case = load_case(case_path)
    if case.mesh.kind == "rectangle":
        return [f"mesh.nx={size}"]
    if case.mesh.kind == "cook_membrane":
        return [f"mesh.nx={max(8, (size // 4) // 2 * 2)}"]
    target = size * size / 2
    best = min(range(0, 8), key=lambda r: abs(math.log(fem_mesh_size(case.with_overrides(f"mesh.refine={r}"))[0]
                                                       / target)))
    return [f"mesh.refine={best}"]


def allowed(case_path: Path, pc: str) -> bool:
    """mg needs a structured generator mesh (no mesh file, no refinement)."""
    case = load_case(case_path)
    return pc != "mg" or (case.mesh.kind in ("rectangle", "cook_membrane") and not case.mesh.refine)


def estimate_twice(path, backend, precision, over) -> dict:
    a = runmod.describe(path, backend, precision, over, estimate=True)
    b = runmod.describe(path, backend, precision, over, estimate=True)
    keys = ("estimated_seconds", "estimated_iterations")
    return {"seconds": a.get("estimated_seconds"), "iterations": a.get("estimated_iterations"),
            "stable": all(a.get(k) == b.get(k) for k in keys), "basis": a.get("estimate_basis", ""),
            "unknowns": a.get("unknowns")}


def measure(path, backend, precision, over, repeats: int, warmup: int) -> dict:
    times, its, phases, status = [], [], [], ""
    for i in range(warmup + repeats):
        res = runmod.run_case(path, backend, precision, overrides=over, progress=False, plots=False)
        if i >= warmup:
            times.append(float(res.timings["total_s"]))
            its.append(int(res.metrics.get("iterations", 0)))
            phases.append({k: v for k, v in res.timings.items() if isinstance(v, (int, float))})
            status = res.status
    middle = sorted(range(len(times)), key=times.__getitem__)[len(times) // 2]
    return {"seconds": statistics.median(times), "min": min(times), "max": max(times), "runs": len(times),
            "iterations": int(statistics.median(its)), "status": status, "timings": phases[middle]}


def ratio(pred, meas) -> float:
    return pred / meas if pred and meas else math.nan


def row_text(r: dict) -> str:
    m = r.get("measured")
    e = r["estimate"]
    if m is None:
        meas_t = meas_i = r.get("note", "not run")
        qi = qt = ""
    else:
        qi, qt = ratio(e["iterations"], m["iterations"]), ratio(e["seconds"], m["seconds"])
        meas_t = (f"{m['seconds']:.3g} ({m['min']:.3g}-{m['max']:.3g})" if m.get("runs", 1) > 1 else
                  f"{m['seconds']:.3g} (1 run)")
        meas_i = str(m["iterations"])
        qi, qt = (f"**{q:.2f}**" if not 0.5 <= q <= 2 else f"{q:.2f}" for q in (qi, qt))
    return (f"| {r['case']} | {r['backend']} | {' '.join(r['overrides'])} | {e['unknowns']:,} | {r['precision']} | "
            f"{r['pc']} | {e['iterations']} | {meas_i} | {qi} | {e['seconds']:.3g} | {meas_t} | {qt} | "
            f"{'yes' if e['stable'] else '**no**'} |")


HEADER = ("| case | backend | mesh | unknowns | precision | preconditioner | iterations predicted | measured | "
          "ratio | seconds predicted | measured median (min-max) | ratio | same twice |\n"
          "| --- | --- | --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")


def outside(r: dict) -> list[str]:
    m, e = r.get("measured"), r["estimate"]
    if m is None:
        return []
    out = []
    for what in ("iterations", "seconds"):
        q = ratio(e[what], m[what])
        if not 0.5 <= q <= 2:
            out.append(f"{r['case']} {r['backend']} {' '.join(r['overrides'])} {r['precision']}/{r['pc']}: {what} "
                       f"predicted {e[what]:.3g}, measured {m[what]:.3g} ({q:.2f}x)")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backends", nargs="+", default=["numpy"])
    p.add_argument("--sizes", nargs="+", type=int, default=[32, 64, 128])
    p.add_argument("--cases", nargs="+", default=None, help="case files (default: every shipped FEM case)")
    p.add_argument("--precisions", nargs="+", default=list(PRECISIONS))
    p.add_argument("--preconditioners", nargs="+", default=list(PRECONDITIONERS))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--max-run-seconds", type=float, default=20.0, help="do not run a configuration predicted longer")
    p.add_argument("--once-above", type=float, default=2.0,
                   help="a configuration predicted longer than this many seconds is run once, without a warm-up")
    p.add_argument("--time-limit", type=float, default=170.0, help="seconds of measuring, then estimates only")
    p.add_argument("--out", type=Path, default=None, help="folder for fem_estimate_check.md and .json")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    cases = [Path(c) for c in args.cases] if args.cases else fem_cases()
    t_start, rows, lines = time.perf_counter(), [], [HEADER]
    print(HEADER, flush=True)
    for backend in args.backends:
        for size in sorted(args.sizes):        # every case at a size before the next: a time limit cuts the largest
            for path in cases:
                for precision in args.precisions:
                    for pc in args.preconditioners:
                        if not allowed(path, pc):
                            continue
                        over = size_overrides(path, size) + [f"solve.preconditioner='{pc}'"]
                        r = {"case": path.stem, "backend": backend, "size": size, "overrides": over[:-1],
                             "precision": precision, "pc": pc}
                        try:
                            r["estimate"] = estimate_twice(path, backend, precision, over)
                        except Exception as exc:        # noqa: BLE001 - a row says why, the study goes on
                            print(f"| {path.stem} | {backend} | {over} | {precision} | {pc} | error: {exc} |")
                            continue
                        if time.perf_counter() - t_start > args.time_limit:
                            r["note"] = "not run (time limit)"
                        elif r["estimate"]["seconds"] > args.max_run_seconds:
                            r["note"] = f"not run (predicted > {args.max_run_seconds:g} s)"
                        else:      # a long run is timed once, after the shorter ones warmed the backend up
                            long = r["estimate"]["seconds"] > args.once_above
                            r["measured"] = measure(path, backend, precision, over, 1 if long else args.repeats,
                                                    0 if long else args.warmup)
                        rows.append(r)
                        lines.append(row_text(r))
                        print(lines[-1], flush=True)
    bad = [line for r in rows for line in outside(r)]
    unstable = [r for r in rows if not r["estimate"]["stable"]]
    measured = sum(1 for r in rows if r.get("measured"))
    summary = [f"\n{measured} configurations measured, {len(rows)} estimated; outside 2x: {len(bad)}; "
               f"estimates that changed between two calls: {len(unstable)}."]
    summary += [f"- {b}" for b in bad]
    print("\n".join(summary))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "fem_estimate_check.md").write_text("\n".join(lines + summary) + "\n")
        (args.out / "fem_estimate_check.json").write_text(json.dumps(rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
