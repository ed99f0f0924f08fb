"""Phase timings of one FEM run: assembly, boundary conditions, solver set-up, solve, error norms and
probe, the float64 reference, output (result.h5/xdmf/summary/plots), total; median of N runs after a warm-up.

    python scripts/fem_run_phases.py cases/poisson_manufactured.toml --backend cupy \\
        --set mesh.nx=2048 --set solve.preconditioner=mg --set solve.rtol=1e-9 --repeat 3

Each run is ``hpcsolve.fem.runner.run`` (what ``hpcsolve run`` calls) followed by ``Result.write`` into a scratch
folder; the process wall of the first (cold) run is printed too. With ``--json PATH`` the medians are written there.
The one-run timing is ``hpcsolve.report.bench_fem_run.one_run``, which ``hpcsolve bench fem``'s whole-run table
(every shipped FEM case at 3 sizes) uses too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from hpcsolve.core import backends
from hpcsolve.core.cases import load_case
from hpcsolve.core.precision import get_precision
from hpcsolve.report.bench_fem_run import PHASES
from hpcsolve.report.bench_fem_run import one_run as _timed_run


def one_run(case, backend, policy, plots: bool) -> dict:
    """The phases of one run, in seconds (run_s: the runner's own total; total_s: run + output): the one-run
    function of ``hpcsolve bench fem``'s whole-run table (hpcsolve/report/bench_fem_run.py)."""
    return _timed_run(case, backend, policy, plots)[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case")
    ap.add_argument("--backend", default="numpy")
    ap.add_argument("--precision", default="fp64")
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs after one warm-up (default 3)")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    be = backends.resolve(a.backend)
    case = load_case(a.case, a.overrides)
    policy = get_precision(a.precision, family="fem")
    plots = not a.no_plots and case.output.plots
    with be.run_context():
        t0 = time.perf_counter()
        cold = one_run(case, be, policy, plots)
        cold["process_wall_s"] = time.perf_counter() - t0
        runs = [one_run(case, be, policy, plots) for _ in range(a.repeat)]
    med = {k: statistics.median(float(r.get(k, 0.0)) for r in runs) for k in PHASES}
    print(f"{case.name} on {be.name} ({a.precision}), {' '.join(a.overrides)}: {runs[-1]['status']}, "
          f"{runs[-1]['iterations']} iterations, error_l2 {runs[-1]['error_l2']}, reference: {runs[-1]['reference']}")
    print(f"{'phase':24s} {'cold':>10s} {'median':>10s}")
    for k in PHASES:
        print(f"{k:24s} {float(cold.get(k, 0.0)):10.4f} {med[k]:10.4f}")
    print(f"{'first run incl. warm-up':24s} {cold['process_wall_s']:10.4f}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"case": case.name, "backend": be.name, "overrides": a.overrides, "cold": cold,
                       "median": med, "runs": runs}, fh, indent=1, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
