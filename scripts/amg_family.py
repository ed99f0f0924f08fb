"""Our AMG against pyamg on a broad family of hard SPD problems (``hpcsolve.fem.discrete.amg_family``: rotated
anisotropy FD/FE, checkerboard / inclusion / log-normal coefficient jumps, Cook elasticity with and without the
rigid-body modes, 3D Laplacians, Delaunay meshes), b = A x_true. For each member, in this order:

- ``ours``: ``hpcsolve.fem.api.solve(A, b, backend, preconditioner=Multigrid("amg", {"amg_setup": "device"},
  near_nullspace=...), rtol)``: our smoothed-aggregation set-up and V-cycle with amg's default options (float32
  hierarchy, mg_options.KIND_DEFAULTS);
- ``ours/pyamg set-up``: the same V-cycle on pyamg's aggregation (``amg_setup = "pyamg"``);
- ``auto``: ``solve(A, b, backend, near_nullspace=...)`` with its default preconditioner ("auto": a Jacobi-PCG probe,
  then AMG where the cost model says it pays; the table notes what it chose);
- ``pyamg SA``: ``pyamg.smoothed_aggregation_solver(A, B=near_nullspace)`` with its defaults and
  ``ml.solve(b, tol=rtol, accel="cg")`` (pyamg's CG stops on ||r|| < tol ||b||, x0 = 0: the same measure);
- ``pyamg RS``: ``pyamg.ruge_stuben_solver(A)`` with its defaults and CG;
- ``Jacobi``: Jacobi-PCG through ``solve(..., preconditioner="jacobi")`` (its own ``--maxiter-jacobi``).

Iterations are CG iterations (pyamg: ``len(residuals) - 1``); a star marks a run whose float64 true residual
||b - A x|| / ||b|| missed rtol. Times are warm: one warm-up call, then the median of ``--repeat`` calls; a call
longer than ``--once-above`` seconds is not repeated (its warm-up is the figure, marked "once"), and one longer than
``--max-seconds`` skips the member's remaining rows. "set-up / solve" is the report's ``setup_time_s`` and
``time_s`` for ours and Jacobi, the hierarchy's construction and ``ml.solve`` for pyamg; "Jacobi / ours" is the
ratio of the whole calls' wall times (above 1: ours is faster); "error" is ||x - x_true|| / ||x_true|| (b = A x_true
is rough, so a small residual can leave a large error: Jacobi's iterations look better than its solutions). pyamg always runs on the host. BLAS threads are
pinned to 1 before NumPy's import. The markdown table prints as it goes; ``--out DIR`` also writes
amg_family.md and amg_family.json (rewritten after every member).

    python scripts/amg_family.py --scale small --members 'checker-*' 'cook-*'
    python scripts/amg_family.py --scale medium --backend numpy --repeat 3 --out /tmp/amgf   (2 cores: ~10 min)
    python scripts/amg_family.py --scale large --backend cupy --out DIR
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")      # before NumPy's import: one BLAS thread, repeatable CPU timings

import argparse      # noqa: E402
import fnmatch       # noqa: E402
import json          # noqa: E402
import platform      # noqa: E402
import statistics    # noqa: E402
import sys           # noqa: E402
import time          # noqa: E402
import warnings      # noqa: E402
from pathlib import Path   # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np   # noqa: E402
import pyamg         # noqa: E402
import scipy         # noqa: E402

from hpcsolve.fem.api import solve                                 # noqa: E402
from hpcsolve.fem.discrete import amg_family                       # noqa: E402
from hpcsolve.fem.linalg.precond.multigrid import Multigrid        # noqa: E402

#: (label, kind): the rows of a member, in the order they run (the comparison that matters first, Jacobi last: it
#: is the one most likely to run into the time cap)
ALL_ROWS = (("ours", "device"), ("ours/pyamg set-up", "pyamg"), ("pyamg SA", "sa"), ("pyamg RS", "rs"),
            ("Jacobi", "jacobi"), ("auto", "auto"))
ROWS = ALL_ROWS          # the rows of this study (``--rows``)
#: pyamg's rows of an earlier study of the same members and scale (``--pyamg-from``): its iterations do not depend on
#: the machine, so a GPU study takes them from a CPU one instead of running pyamg on the GPU machine's host
PYAMG_FROM: dict = {}


def run_ours(problem, kind, args) -> dict:
    """One ``solve`` call: Jacobi-PCG, or AMG with the given set-up ("device" or "pyamg")."""
    kw = {}
    if kind == "jacobi":
        pc, maxiter = "jacobi", args.maxiter_jacobi
    elif kind == "auto":
        pc, maxiter = "auto", args.maxiter_jacobi
        kw = {"near_nullspace": problem.near_nullspace}
    else:
        pc = Multigrid("amg", {"amg_setup": kind}, near_nullspace=problem.near_nullspace)
        maxiter = args.maxiter
    t0 = time.perf_counter()
    x, rep = solve(problem.A, problem.b, backend=args.backend, preconditioner=pc, rtol=args.rtol, maxiter=maxiter,
                   **kw)
    wall = time.perf_counter() - t0
    pre = rep.preconditioner or {}
    return {"iterations": rep.iterations, "true_residual": rep.true_residual, "converged": rep.converged,
            "setup_s": rep.setup_time_s, "solve_s": rep.time_s, "wall_s": wall, "error": _error(x, problem),
            "levels": pre.get("levels"), "operator_complexity": pre.get("operator_complexity"),
            "reason": rep.reason, "chosen": getattr(rep, "chosen", None), "chosen_why": getattr(rep, "chosen_why", None)}


def run_pyamg(problem, kind, args) -> dict:
    """pyamg's own solver, defaults, accelerated by its CG (x0 = 0, ||r|| < rtol ||b||)."""
    A, b = problem.A, problem.b
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        if kind == "sa":
            ml = pyamg.smoothed_aggregation_solver(A, B=problem.near_nullspace)
        else:
            ml = pyamg.ruge_stuben_solver(A)
        t1 = time.perf_counter()
        residuals: list[float] = []
        x = ml.solve(b, tol=args.rtol, accel="cg", maxiter=args.maxiter, residuals=residuals)
        t2 = time.perf_counter()
    true = float(np.linalg.norm(b - A @ x) / np.linalg.norm(b))
    return {"iterations": len(residuals) - 1, "true_residual": true, "converged": bool(true <= args.rtol),
            "setup_s": t1 - t0, "solve_s": t2 - t1, "wall_s": t2 - t0, "error": _error(x, problem),
            "levels": len(ml.levels), "operator_complexity": float(ml.operator_complexity()),
            "reason": "; ".join(sorted({str(w.message).strip().splitlines()[0] for w in caught}))}


def _error(x, problem) -> float:
    return float(np.linalg.norm(x - problem.x_true) / np.linalg.norm(problem.x_true))


def timed(fn, args) -> tuple[dict, bool]:
    """(the row: medians of the warm calls, or the warm-up where it was long; whether it went past the cap)."""
    try:
        first = fn()
    except Exception as exc:        # a solver that raises is a row that says so, and the study goes on
        return {"failed": f"{type(exc).__name__}: {exc}"}, False
    if first["wall_s"] > args.once_above:
        first["timing"] = "once"
        return first, first["wall_s"] > args.max_seconds
    runs = [fn() for _ in range(args.repeat)]
    row = dict(runs[-1])
    for key in ("setup_s", "solve_s", "wall_s"):
        row[key] = statistics.median(r[key] for r in runs)
    row["timing"] = f"median of {args.repeat}"
    return row, any(r["wall_s"] > args.max_seconds for r in runs)


def study_member(name, build, args) -> dict:
    t0 = time.perf_counter()
    problem = build()
    record = {"member": name, "family": problem.family, "unknowns": problem.n, "nnz": int(problem.A.nnz),
              "near_nullspace": 0 if problem.near_nullspace is None else int(problem.near_nullspace.shape[1]),
              "build_s": time.perf_counter() - t0, "rows": {}, "notes": []}
    for label, kind in ROWS:
        if label in PYAMG_FROM.get(name, {}):
            record["rows"][label] = dict(PYAMG_FROM[name][label], timing="from " + str(args.pyamg_from))
            continue
        runner = run_pyamg if kind in ("sa", "rs") else run_ours
        row, over = timed(lambda runner=runner, kind=kind: runner(problem, kind, args), args)
        record["rows"][label] = row
        if over:
            rest = [lbl for lbl, _ in ROWS][len(record["rows"]):]
            if rest:
                record["notes"].append(f"{label} took {row['wall_s']:.0f} s > --max-seconds: skipped {', '.join(rest)}")
            break
    record["study_s"] = time.perf_counter() - t0
    return record


def header() -> str:
    labels = [lbl for lbl, _ in ROWS]
    cols = ["member", "unknowns", *labels, "ours / SA", *[f"{lbl} s set-up / solve" for lbl in labels],
            "Jacobi / ours wall", "auto / best wall", "error ours / Jacobi", "notes"]
    right = {"unknowns", *labels, "ours / SA", "Jacobi / ours wall", "auto / best wall"} | {
        f"{lbl} s set-up / solve" for lbl in labels}
    return ("| " + " | ".join(cols) + " |\n| " + " | ".join("---:" if c in right else "---" for c in cols) + " |")


def _its(row) -> str:
    if row is None:
        return "-"
    if "failed" in row:
        return "failed"
    return f"{row['iterations']}{'' if row['converged'] else '*'}"


def _err(row) -> str:
    return "-" if row is None or "failed" in row else f"{row['error']:.0e}"


def _secs(row) -> str:
    if row is None or "failed" in row:
        return "-"
    return f"{row['setup_s']:.2f} / {row['solve_s']:.2f}"


def ratio(record, label="ours") -> float | None:
    ours, sa = record["rows"].get(label), record["rows"].get("pyamg SA")
    if not ours or not sa or "failed" in ours or "failed" in sa or not sa["iterations"]:
        return None
    return ours["iterations"] / sa["iterations"]


def _ratio_text(record, label="ours") -> str:
    """The ratio, ">" before it where ours stopped at maxiter (a lower bound), "<" where only pyamg did."""
    r = ratio(record, label)
    if r is None:
        return "-"
    ours, sa = record["rows"][label], record["rows"]["pyamg SA"]
    return f"{'>' if not ours['converged'] else '<' if not sa['converged'] else ''}{r:.2f}"


def _badness(record) -> tuple[bool, float]:
    """Worst first: ours not converged, then the largest ratio."""
    return (not _ok(record["rows"].get("ours")), ratio(record))


def _ok(row) -> bool:
    return bool(row) and "failed" not in row and row["converged"]


def table_row(record) -> str:
    rows = record["rows"]
    get = rows.get
    ours, jac, auto = get("ours"), get("Jacobi"), get("auto")
    speed = best = "-"
    if _ok(ours) and jac and "failed" not in jac:
        speed = f"{'>' if not jac['converged'] else ''}{jac['wall_s'] / ours['wall_s']:.1f}x"
    done = [r["wall_s"] for r in (ours, jac) if _ok(r)]
    if _ok(auto) and done:
        best = f"{auto['wall_s'] / min(done):.2f}"
    notes = list(record["notes"])
    notes += [f"{lbl}: {row['failed']}" for lbl, row in rows.items() if "failed" in row]
    notes += [f"{lbl}: once" for lbl, row in rows.items() if row.get("timing") == "once"]
    notes += [f"{lbl}: {row['reason']}" for lbl, row in rows.items()
              if lbl.startswith("pyamg") and row.get("reason")]
    if auto and auto.get("chosen"):
        notes.append(f"auto chose {auto['chosen']}")
    return (f"| {record['member']} | {record['unknowns']:,} | " + " | ".join(_its(get(lbl)) for lbl, _ in ROWS)
            + f" | {_ratio_text(record)} | " + " | ".join(_secs(get(lbl)) for lbl, _ in ROWS)
            + f" | {speed} | {best} | {_err(ours)} / {_err(jac)} | {'; '.join(notes)} |")


def _outcome(row) -> str:
    return row["failed"] if "failed" in row else f"true residual {row['true_residual']:.1e}"


def summary(records, rtol) -> str:
    lines = ["", "Worst ratios of iterations, ours / pyamg SA (both to the same rtol; runs of ours that stopped at "
             "maxiter first, their ratio a lower bound):", ""]
    ranked = sorted((r for r in records if ratio(r) is not None), key=_badness, reverse=True)
    for r in ranked[:10]:
        lines.append(f"- {r['member']}: {_ratio_text(r)} ({_its(r['rows'].get('ours'))} against "
                     f"{_its(r['rows'].get('pyamg SA'))}; on pyamg's aggregation "
                     f"{_ratio_text(r, 'ours/pyamg set-up')})")
    missed = [f"{r['member']} ({lbl}: {_outcome(row)})" for r in records for lbl, row in r["rows"].items()
              if "failed" in row or not row["converged"]]
    lines += ["", f"Rows that missed rtol {rtol:g} (true residual) or failed: "
              + ("; ".join(missed) if missed else "none")]
    return "\n".join(lines)


def preamble(args) -> str:
    return (f"`python scripts/amg_family.py {' '.join(sys.argv[1:])}`\n\n"
            f"backend {args.backend}, scale {args.scale}, rtol {args.rtol:g}, maxiter {args.maxiter} "
            f"(Jacobi {args.maxiter_jacobi}); numpy {np.__version__}, scipy {scipy.__version__}, "
            f"pyamg {pyamg.__version__}, Python {platform.python_version()}, {os.cpu_count()} CPUs "
            f"({platform.machine()}), BLAS threads {os.environ.get('OPENBLAS_NUM_THREADS')}.\n\n"
            "Iterations: CG iterations to the true relative residual rtol (* : missed it); seconds: warm, "
            f"set-up / solve, median of {args.repeat} after a warm-up.\n")


def write(out: Path | None, args, records, text: str, total_s: float) -> None:
    if out is None:
        return
    out.mkdir(parents=True, exist_ok=True)
    (out / "amg_family.md").write_text(text + "\n")
    meta = {"command": sys.argv, "scale": args.scale, "backend": args.backend, "rtol": args.rtol,
            "repeat": args.repeat, "numpy": np.__version__, "scipy": scipy.__version__, "pyamg": pyamg.__version__,
            "cpus": os.cpu_count(), "total_s": total_s, "members": records}
    (out / "amg_family.json").write_text(json.dumps(meta, indent=1, default=float))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", default="small", choices=tuple(amg_family.SIZES))
    ap.add_argument("--backend", default="numpy", choices=("numpy", "cupy", "numba-cuda"))
    ap.add_argument("--members", nargs="*", default=["*"], help="glob patterns of member names (any matches)")
    ap.add_argument("--rtol", type=float, default=1e-8)
    ap.add_argument("--maxiter", type=int, default=2000, help="CG iterations of the AMG rows (ours and pyamg)")
    ap.add_argument("--maxiter-jacobi", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--once-above", type=float, default=5.0, help="seconds: a longer warm-up is not repeated")
    ap.add_argument("--max-seconds", type=float, default=60.0, help="a longer call skips the member's other rows")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--list", action="store_true", help="print the selected members' names and stop")
    ap.add_argument("--rows", nargs="+", default=[lbl for lbl, _ in ALL_ROWS],
                    help=f"the rows to run, of: {', '.join(repr(lbl) for lbl, _ in ALL_ROWS)}")
    ap.add_argument("--pyamg-from", type=Path, default=None,
                    help="amg_family.json of an earlier study (same scale): its pyamg rows are taken, not run")
    ap.add_argument("--from-json", nargs="+", type=Path, default=None,
                    help="render the table of earlier studies' amg_family.json (rows merged by member, the later "
                         "file's row where both have one) instead of running; --out writes it")
    args = ap.parse_args(argv)
    global ROWS
    if args.from_json:
        return render(args)
    unknown = sorted(set(args.rows) - {lbl for lbl, _ in ALL_ROWS})
    if unknown:
        ap.error(f"--rows: unknown {unknown}; allowed: {[lbl for lbl, _ in ALL_ROWS]}")
    ROWS = tuple(r for r in ALL_ROWS if r[0] in args.rows or (args.pyamg_from and r[1] in ("sa", "rs")))
    if args.pyamg_from is not None:
        old = json.loads(args.pyamg_from.read_text())
        for rec in old["members"]:
            PYAMG_FROM[rec["member"]] = {lbl: row for lbl, row in rec["rows"].items() if lbl.startswith("pyamg")}
    chosen = [(n, b) for n, b in amg_family.members(args.scale)
              if any(fnmatch.fnmatchcase(n, pat) for pat in args.members)]
    if args.list or not chosen:
        print("\n".join(n for n, _ in chosen) or f"no member matches {args.members}")
        return
    t0 = time.perf_counter()
    text = preamble(args) + "\n" + header()
    print(text, flush=True)
    records = []
    for name, build in chosen:
        records.append(study_member(name, build, args))
        line = table_row(records[-1])
        print(line, flush=True)
        text += "\n" + line
        write(args.out, args, records, text, time.perf_counter() - t0)
    total = time.perf_counter() - t0
    tail = summary(records, args.rtol) + f"\n\nTotal {total:.0f} s for {len(records)} members."
    print(tail, flush=True)
    write(args.out, args, records, text + "\n" + tail, total)


def render(args) -> None:
    """The table of saved studies (``--from-json``): no solve runs."""
    global ROWS
    merged: dict = {}
    for path in args.from_json:
        for rec in json.loads(path.read_text())["members"]:
            merged.setdefault(rec["member"], {**rec, "rows": {}, "notes": []})
            merged[rec["member"]]["rows"].update(rec["rows"])
            merged[rec["member"]]["notes"] += rec.get("notes", [])
    present = {lbl for rec in merged.values() for lbl in rec["rows"]}
    ROWS = tuple(r for r in ALL_ROWS if r[0] in present)
    records = list(merged.values())
    text = ("Rendered from " + ", ".join(f"`{p}`" for p in args.from_json) + " (`--from-json`).\n\n" + header()
            + "\n" + "\n".join(table_row(r) for r in records) + "\n" + summary(records, args.rtol))
    print(text)
    write(args.out, args, records, text, 0.0)


if __name__ == "__main__":
    main()
