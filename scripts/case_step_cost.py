#!/usr/bin/env python3
"""What an option costs per time step: one case, several variants (sets of overrides), timed in the same run.

Builds the stepper of each variant (``--variant NAME:KEY=VALUE,KEY=VALUE``; a variant with no overrides is the case
as it is) on each backend and precision, warms it up, then times ``--steps`` steps ``--repeats`` times with device
events, the variants interleaved round by round so that clock drift hits them alike. Prints the median and the
spread (min-max) in us per step and MLUPS, and each variant's median relative to the first variant's.

    python scripts/case_step_cost.py --case cases/cylinder_2d1.toml --set lattice.resolution=80 \\
        --variant plain: --variant layer:boundaries.absorbing_layer.width=1.936 [--backends cupy numba-cuda]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hpcsolve.core import backends  # noqa: E402
from hpcsolve.core.cases import load_case  # noqa: E402
from hpcsolve.lbm.setup import build_setup  # noqa: E402
from hpcsolve.lbm.steppers.stepper import get_stepper  # noqa: E402
from hpcsolve.core.precision import get_precision  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", default=str(ROOT / "cases" / "cylinder_2d1.toml"))
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME:KEY=VALUE,...")
    ap.add_argument("--backends", nargs="+", default=["cupy", "numba-cuda"])
    ap.add_argument("--precisions", nargs="+", default=["fp32"])
    ap.add_argument("--steps", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)
    variants = []
    for v in args.variant or ["case:"]:
        name, _, sets = v.partition(":")
        variants.append((name, [s for s in sets.split(",") if s]))
    print(f"{Path(args.case).stem} {' '.join(args.overrides)}: {args.repeats} x {args.steps} steps per variant")
    print("| backend | precision | variant | us / step (median) | min-max | MLUPS | vs first |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
    for backend in args.backends:
        be = backends.get(backend)
        status = backends.probe(backend)
        if not status.available:
            print(f"| {backend} | - | - | {status.reason} | | | |")
            continue
        clock = be.event_clock()
        for prec in args.precisions:
            policy = get_precision(prec, "lbm")
            steppers = []
            for name, sets in variants:
                case = load_case(args.case, [*args.overrides, *sets])
                _, _, setup = build_setup(case, policy)
                st = get_stepper(backend, setup)
                st.step(args.steps)                      # compile, record graphs, warm up
                steppers.append((name, st, setup.fluid_cells))
            times = {name: [] for name, _, _ in steppers}
            for _ in range(args.repeats):
                for name, st, _ in steppers:
                    times[name].append(clock.time(lambda: st.step(args.steps), getattr(st, "stream", None)) / args.steps)
            first = None
            for name, st, cells in steppers:
                med = statistics.median(times[name])
                first = first or med
                print(f"| {backend} | {prec} | {name} | {med * 1e6:.2f} | {min(times[name]) * 1e6:.2f}-"
                      f"{max(times[name]) * 1e6:.2f} | {cells / med / 1e6:,.0f} | {med / first:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
