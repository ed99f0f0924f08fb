"""Print the 16-bit precision guard's divergence series of one case, backend and precision.

Steps the case as a run does and, at the guard's checks (``hpcsolve/lbm/guard.py``: its schedule, or every
``--every`` steps), prints the float32 shadow window's divergence, its parts and the verdict. fp64 and fp32 are
measured through the same function (the guard itself only acts on 16-bit policies): their figure is the method's
noise floor.

    python scripts/guard_probe.py cases/cylinder_2d2.toml --backend cupy --precision fp16s \\
        --set lattice.resolution=80 --set lattice.velocity=0.025 [--steps N] [--every N] [--window K]

``--steps`` stops early (default: the case's steps); the schedule is that of the whole run either way. The step
time of the steps run (to ``--steps`` or the end) and the guard's time are printed at the end (the overhead: guard
seconds / step seconds; the shadow stepper's build and warm-up, ``PrecisionGuard.prepare``, apart).
``--host-path`` takes the checks through host copies (the path of a stepper without an array module).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hpcsolve import run as runmod  # noqa: E402
from hpcsolve.core import backends  # noqa: E402
from hpcsolve.lbm import guard as lbm_guard  # noqa: E402
from hpcsolve.lbm.setup import build_setup  # noqa: E402
from hpcsolve.lbm.steppers.stepper import get_stepper  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("case")
    p.add_argument("--backend", default="numpy")
    p.add_argument("--precision", default="fp16s")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--steps", type=int, default=None, help="stop after this many steps (default: the case's)")
    p.add_argument("--every", type=int, default=None, help="check every N steps instead of the guard's schedule")
    p.add_argument("--window", type=int, default=None, help="shadow window K (default: guard.window_steps)")
    p.add_argument("--threshold", type=float, default=None)
    p.add_argument("--copy", action="store_true", help="16-bit window on a second stepper (OWN_WINDOW = False)")
    p.add_argument("--host-path", action="store_true",
                   help="the checks through host copies (as before the array path; before/after in one run)")
    args = p.parse_args(argv)
    case, backend, policy = runmod.prepare(args.case, args.backend, args.precision, args.overrides)
    backend = backends.get(backend)
    derived, _, setup = build_setup(case, policy)
    stepper = get_stepper(backend, setup)
    guard = lbm_guard.PrecisionGuard(case, policy, backend, setup, derived, mode="warn", window=args.window,
                                     threshold=args.threshold, own_window=False if args.copy else None,
                                     always=True)
    seen = lbm_guard.HostView(stepper) if args.host_path else stepper
    build_s = guard.prepare(seen)
    total = derived.steps if args.steps is None else min(args.steps, derived.steps)
    points = (list(range(args.every, total + 1, args.every)) if args.every else
              [s for s in lbm_guard.schedule(derived.steps) if s <= total])
    print(f"{case.name} ({Path(args.case).name}), {backend.name}, {policy.name}: {derived.nx} x {derived.ny} cells, "
          f"{derived.steps} steps in the run, window K = {guard.window}, threshold {guard.threshold:g}, "
          f"floor {lbm_guard.FLOOR_RESOLUTIONS:g} x res {guard.resolution:.3g} x U")
    print("| step | % of run | growth | divergence | rms(du16 - du32) | rms(du32) | floor | flagged | check s |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |")
    step_s, check_s = 0.0, []
    for point in points:
        with backend.timer() as timer:
            stepper.step(point - stepper.time_step)
        step_s += timer.seconds
        t0 = time.perf_counter()
        c = guard.check(seen, point)
        check_s.append(time.perf_counter() - t0)
        print(f"| {c.step} | {100.0 * c.step / derived.steps:.2f} | {c.growth:.3g} | {c.divergence:.3g} | "
              f"{c.error:.3g} | {c.change:.3g} | {c.floor:.3g} | {'yes' if c.flagged else 'no'} | {check_s[-1]:.4f} |",
              flush=True)
    if stepper.time_step < total:             # the rest of the run: the overhead is a share of all its steps
        with backend.timer() as timer:
            stepper.step(total - stepper.time_step)
        step_s += timer.seconds
    steps_done = stepper.time_step
    print(f"steps {steps_done}: step time {step_s:.3f} s ({step_s / max(steps_done, 1) * 1e3:.3f} ms/step), "
          f"guard {guard.seconds:.3f} s over {len(guard.checks)} checks "
          f"({100.0 * guard.seconds / step_s if step_s > 0 else float('nan'):.2f} % of the step time; "
          f"{'host' if args.host_path else 'array'} path), shadow stepper built in {build_s:.3f} s before stepping")
    if guard.message:
        print("verdict:", guard.message)
    else:
        print("verdict: not flagged")
    return 0


if __name__ == "__main__":
    t0 = time.time()
    rc = main()
    print(f"wall {time.time() - t0:.1f} s", file=sys.stderr)
    sys.exit(rc)
