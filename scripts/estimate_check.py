"""How good is the --dry-run time estimate? For each case: the estimate (``hpcsolve run --dry-run``'s
probe) and the measured run time, each in a fresh process, as a markdown table.

    python scripts/estimate_check.py [--cases cases/a.toml ...] [--backend B] [--set key=value ...] [--repeats N]

With ``--repeats N`` each estimate and each run is made N times (alternating, each in a fresh process) and the
table compares medians; the measured column shows the runs' own spread (min-max). Runs of a fraction of a
second on a GPU vary by tens of percent from process to process (clock ramp-up of an idle GPU, first-call costs),
so one pair says little about the estimate.

"measured" is the run's ``timings.total_s`` (setup, time loop or solve, reference, fields; not the
interpreter start or file writing). For a steady-state LBM run the estimate counts the
steps at which it predicts the steady stop (a coarser copy of the case, run to its stop); where the
run stopped elsewhere the table also compares per step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import json, sys
from hpcsolve import run as runmod
info = runmod.describe(sys.argv[1], sys.argv[2], overrides=json.loads(sys.argv[3]), estimate=True)
print(json.dumps({k: info.get(k) for k in ("estimated_seconds", "steps", "estimated_steps", "estimate_basis")}))
"""
RUN = """
import json, sys
from hpcsolve import run as runmod
res = runmod.run_case(sys.argv[1], sys.argv[2], overrides=json.loads(sys.argv[3]), progress=False, plots=False)
print(json.dumps({"total_s": res.timings["total_s"], "steps": res.metrics.get("steps"), "status": res.status,
                  "timings": res.timings}))
"""


def _child(code: str, case: str, backend: str, overrides: list[str]) -> dict:
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    out = subprocess.run([sys.executable, "-c", code, case, backend, json.dumps(overrides)], capture_output=True,
                         text=True, env=env, cwd=ROOT)
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", nargs="+", default=sorted(str(c) for c in (ROOT / "cases").glob("*.toml")))
    p.add_argument("--backend", default="auto")
    p.add_argument("--set", dest="overrides", action="append", default=[], help="key=value for every case")
    p.add_argument("--repeats", type=int, default=1, help="estimates and runs per case (medians compared)")
    p.add_argument("--verbose", action="store_true", help="print each estimate's basis and each run's timings")
    args = p.parse_args(argv)
    lines = ["| case | backend | estimate (s) | measured (s) | estimate / measured | steps: predicted / done / planned "
             "| note |", "| --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for case in args.cases:
        ests, gots = [], []
        for _ in range(max(args.repeats, 1)):
            ests.append(_child(PROBE, case, args.backend, args.overrides))
            gots.append(_child(RUN, case, args.backend, args.overrides))
            if args.verbose:
                print(f"{Path(case).stem}: estimate {ests[-1].get('estimate_basis', ests[-1])}\n    run "
                      f"{ {k: round(v, 4) for k, v in gots[-1].get('timings', {}).items()} or gots[-1]}", flush=True)
        name = Path(case).stem
        bad = [d["error"] for d in ests + gots if "error" in d]
        if bad:
            lines.append(f"| {name} | {args.backend} | | | | | {bad[0]} |")
            print(lines[-1], flush=True)
            continue
        est, got = ests[0], gots[0]
        e = statistics.median(float(d["estimated_seconds"]) for d in ests)
        ms = [float(d["total_s"]) for d in gots]
        m = statistics.median(ms)
        spread = f" ({min(ms):.3g}-{max(ms):.3g})" if len(ms) > 1 else ""
        planned, done = est.get("steps"), got.get("steps")
        predicted = est.get("estimated_steps") or planned
        note = got["status"]
        ratio = e / m
        steps = ""
        if planned and done:
            steps = f"{predicted} / {done} / {planned}"
            if done != predicted:   # the steady stop came elsewhere than predicted: compare per step too
                note += f"; per step: estimate / measured {e * done / predicted / m:.2f}"
        lines.append(f"| {name} | {args.backend} | {e:.3g} | {m:.3g}{spread} | {ratio:.2f} | {steps} | {note} |")
        print(lines[-1], flush=True)
    print("\n" + "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
