"""AMG against Jacobi-PCG end to end, and its iterations against pyamg's hierarchy: on the robustness
problems of ``bench fem`` (``testproblems.anisotropic`` 30 degrees eps 1e-3, ``jumps`` contrast 1e6, ``cook`` plane
strain with its rigid-body modes), each ``solve(A, b, backend, preconditioner=..., rtol)`` from a SciPy matrix timed
whole (upload, set-up, solve: the wall of the call), the median of ``--repeat`` after a warm-up:

- ``jacobi`` (Jacobi-PCG), ``amg`` with its default set-up (``amg_setup = "auto"``: on the device on a GPU), and
  ``amg`` with pyamg's smoothed-aggregation hierarchy (``amg_setup = "pyamg"``, the same V-cycle): its iterations are
  the comparison that matters (within 25 % of pyamg's).

    python scripts/amg_robustness.py --backend cupy --n 1024 --cook 724 --repeat 2
"""

from __future__ import annotations

import argparse
import statistics
import time

from hpcsolve.fem.api import solve
from hpcsolve.fem.discrete import testproblems as tp
from hpcsolve.fem.linalg.precond.multigrid import Multigrid


def timed(problem, backend, kind, setup, rtol, repeat):
    """(median wall s, the last report) of ``repeat`` calls after one warm-up."""
    def one():
        pc = "jacobi" if kind == "jacobi" else Multigrid("amg", {"amg_setup": setup, "hierarchy": "fp32"},
                                                         near_nullspace=problem.near_nullspace)
        t0 = time.perf_counter()
        _, rep = solve(problem.A, problem.b, backend=backend, preconditioner=pc, rtol=rtol, maxiter=100_000)
        return time.perf_counter() - t0, rep
    one()
    runs = [one() for _ in range(repeat)]
    return statistics.median(r[0] for r in runs), runs[-1][1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cupy")
    ap.add_argument("--n", type=int, default=1024, help="cells per side of the anisotropic and jumps problems")
    ap.add_argument("--cook", type=int, default=724, help="cells per side of Cook's membrane (2 unknowns per node)")
    ap.add_argument("--rtol", type=float, default=1e-8)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    print("| problem | unknowns | solver | wall s | set-up s | iterations | converged | vs jacobi | iterations / pyamg's |")
    print("| --- | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: |")
    for problem in (tp.anisotropic(args.n), tp.jumps(args.n), tp.cook(args.cook)):
        rows = {}
        for label, kind, setup in (("jacobi", "jacobi", None), ("amg (auto set-up)", "amg", "auto"),
                                   ("amg (pyamg set-up)", "amg", "pyamg")):
            rows[label] = timed(problem, args.backend, kind, setup, args.rtol, args.repeat)
        jw = rows["jacobi"][0]
        ref_it = rows["amg (pyamg set-up)"][1].iterations
        for label, (wall, rep) in rows.items():
            ratio = f"{rep.iterations / ref_it:.2f}" if label.startswith("amg") and ref_it else "-"
            where = (rep.preconditioner or {}).get("amg_setup", "")
            print(f"| {problem.name} | {problem.n:,} | {label}{' [' + where + ']' if where else ''} | {wall:.3f} | "
                  f"{rep.setup_time_s:.3f} | {rep.iterations} | {rep.converged} | {jw / wall:.2f}x | {ratio} |",
                  flush=True)


if __name__ == "__main__":
    main()
