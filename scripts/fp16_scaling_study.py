"""How the scale of the stored shifted populations changes the 16-bit storage error (NumPy reference).

For fp16s (IEEE float16) and fp16c (hpcsolve/core/fp16c.py), each with several population scales S (stored value
(f - w) * S), runs a case on the NumPy backend for a fixed number of steps and prints the relative L2 distance of
the velocity field to the fp64 run, and the case's own error metric where it has one.

    python scripts/fp16_scaling_study.py [--case cases/lid_driven_cavity.toml] [--steps 15000] [--set key=value ...]

The NumPy reference stores with the same rounding as the GPU kernels (the GPU tests compare them), so the
study holds for the GPU backends; it runs on the CPU in about a minute per case.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hpcsolve.core.cases import load_case  # noqa: E402
from hpcsolve.lbm import runner  # noqa: E402
from hpcsolve.core.precision import FP16C, FP16S, FP64  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", default=str(ROOT / "cases" / "lid_driven_cavity.toml"))
    p.add_argument("--steps", type=int, default=15000)
    p.add_argument("--set", dest="overrides", action="append", default=[])
    p.add_argument("--fp16s-scales", type=float, nargs="+", default=[1.0, 16.0, 256.0, 4096.0])
    p.add_argument("--fp16c-scales", type=float, nargs="+", default=[0.5, 1.0, 2.0, 4.0])
    args = p.parse_args(argv)
    over = list(args.overrides) + ["steady.enabled=false", f"time.steps={args.steps}"]
    case = load_case(args.case, over)
    ref = runner.run(case, "numpy", FP64, progress=False)
    u0 = ref.fields["velocity"]
    metric = next((k for k in ("ghia_max_abs_diff", "velocity_rel_l2_error", "profile_rel_l2_error")
                   if k in ref.metrics), None)
    print(f"{Path(args.case).stem}, {args.steps} steps, {' '.join(args.overrides)}; fp64 {metric}: "
          f"{ref.metrics.get(metric, float('nan')):.4g}")
    print("| storage | scale S | velocity rel. L2 vs fp64 | " + (metric or "-") + " |")
    print("| --- | ---: | ---: | ---: |")
    for base, scales in ((FP16S, args.fp16s_scales), (FP16C, args.fp16c_scales)):
        for s in scales:
            pol = dataclasses.replace(base, population_scale=float(s))
            try:
                r = runner.run(case, "numpy", pol, progress=False)
                err = float(np.linalg.norm(r.fields["velocity"] - u0) / np.linalg.norm(u0))
                m = r.metrics.get(metric, float("nan"))
                print(f"| {base.name} | {s:g} | {err:.3e} | {m:.4g} |", flush=True)
            except Exception as exc:        # a scale that overflows the format blows the run up
                print(f"| {base.name} | {s:g} | {type(exc).__name__}: {str(exc)[:60]} | |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
