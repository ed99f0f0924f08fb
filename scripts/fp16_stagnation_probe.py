"""Is the 16-bit error a frozen state (per-step changes rounded away near steady state) or rounding noise?

Runs one case on the NumPy reference in fp64, fp32, fp16s and fp16c side by side and prints, every
``--every`` steps: the relative L2 distance of each velocity field to the fp64 one at the same step, how much
the fp64 field still moves per interval, and the fraction of the fluid cells' stored fp16c codes that one step
leaves unchanged. A frozen fp16c state would show that fraction near 1 and a distance that grows as the fp64
flow settles; noise shows most codes changing every step and a distance that stays put.

    python scripts/fp16_stagnation_probe.py [--case cases/lid_driven_cavity_re1000.toml] [--resolution 64]
                                            [--steps 64000] [--every 4000]

The NumPy reference stores with the same rounding as the GPU kernels (the GPU tests compare them). At 64 cells
all four precisions run about 200 steps per second on one core.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hpcsolve.core.cases import load_case  # noqa: E402
from hpcsolve.lbm import setup as lbm_setup  # noqa: E402
from hpcsolve.lbm.steppers.kernels_numpy import make_stepper  # noqa: E402
from hpcsolve.core.precision import FP16C, FP16S, FP32, FP64  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", default=str(ROOT / "cases" / "lid_driven_cavity_re1000.toml"))
    p.add_argument("--resolution", type=int, default=64)
    p.add_argument("--steps", type=int, default=64000)
    p.add_argument("--every", type=int, default=4000)
    args = p.parse_args(argv)
    if args.every < 2 or args.steps < args.every:
        p.error(f"--every must be >= 2 and <= --steps, got --every {args.every} --steps {args.steps}")
    case = load_case(args.case, [f"lattice.resolution={args.resolution}", "steady.enabled=false"])
    steppers, fluid = {}, None
    for pol in (FP64, FP32, FP16S, FP16C):
        _, geo, setup = lbm_setup.build_setup(case, pol)
        steppers[pol.name] = make_stepper(setup)
        fluid = geo.fluid
    print(f"{Path(args.case).stem}, {args.resolution} cells, NumPy reference")
    print("| step | fp32 rel. L2 vs fp64 | fp16s | fp16c | fp64 change per interval | fp16c codes a step leaves |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    t0, previous = time.time(), None
    for n in range(args.every, args.steps + 1, args.every):
        for s in steppers.values():
            s.step(args.every - 1)
        before = steppers["fp16c"].populations()[:, fluid]
        for s in steppers.values():
            s.step(1)
        unchanged = float(np.mean(steppers["fp16c"].populations()[:, fluid] == before))
        u = {k: np.stack(s.macroscopic()[1:])[:, fluid] for k, s in steppers.items()}
        norm = np.linalg.norm(u["fp64"])
        dist = [np.linalg.norm(u[k] - u["fp64"]) / norm for k in ("fp32", "fp16s", "fp16c")]
        change = np.linalg.norm(u["fp64"] - previous) / norm if previous is not None else float("nan")
        previous = u["fp64"]
        print(f"| {n} | " + " | ".join(f"{d:.2e}" for d in dist) + f" | {change:.2e} | {unchanged:.3f} |",
              flush=True)
    print(f"({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
