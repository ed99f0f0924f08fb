"""How long sound rings in the channel after a disturbance: the measurement behind a non-reflecting outlet.

Cylinder 2D-1 (Schafer-Turek, Re 20) is run to its steady state. Then the inlet velocity steps up by
``--step`` (5 %): the lattice continues from the same populations with the larger boundary velocity. The
script records the lift coefficient every ``--every`` steps for ``--periods`` acoustic periods 4 L / c_s. It
reports how fast the oscillation about its new mean decays: the e-folding time of the envelope of
|c_L - mean|, from a log-linear fit to its local maxima, and per window of periods the largest deviation of the
raw lift and of its low-pass part (a moving mean over two periods 2 H / c_s of the lowest wall-to-wall mode: what
is left is the along-channel sound an outlet can let out; the wall-to-wall modes cannot reach it).

It also reports the settling time: from when on |c_L - mean| stays below 1e-3 (and 1e-4) of its largest value
in the first period (three and four decades of decay).

    python scripts/outlet_reflection.py [--backend numpy] [--resolution 10] [--step 0.05]
                                        [--outlets pressure characteristic characteristic+layer]
                                        [--layer-width 1.936] [--layer-ramp 0.176] [--layer-ratio 40]
                                        [--set key=value ...] [--out DIR]

A variant ``RULE+layer`` adds an absorbing layer (``[boundaries.absorbing_layer]``: width and ramp in m from the
outlet, bulk / shear viscosity ratio); the defaults put its inner edge 0.64 D behind the 2D-1 cylinder's rear,
full strength 2.4 D behind its centre. Prints a summary per variant and, with --out, writes the lift series (CSV)
and one plot.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hpcsolve.core.cases import load_case  # noqa: E402
from hpcsolve.lbm import lattice, observables as obs  # noqa: E402
from hpcsolve.lbm.setup import build_setup  # noqa: E402
from hpcsolve.lbm.flags import VELOCITY  # noqa: E402
from hpcsolve.lbm.steppers.stepper import get_stepper
from hpcsolve.core.precision import get_precision  # noqa: E402


def envelope_decay(t: np.ndarray, y: np.ndarray, mean: float | None = None) -> tuple[float, int]:
    """(e-folding time of the envelope of |y - mean|, number of maxima fitted; ``mean`` defaults to the mean of
    the last third of y); math.inf when the maxima do not decay, nan with fewer than 3 maxima."""
    dev = np.abs(y - (np.mean(y[2 * len(y) // 3:]) if mean is None else mean))
    k = np.flatnonzero((dev[1:-1] > dev[:-2]) & (dev[1:-1] >= dev[2:])) + 1
    k = k[dev[k] > 1e-12]
    if k.size < 3:
        return math.nan, int(k.size)
    slope = np.polyfit(t[k], np.log(dev[k]), 1)[0]
    return (-1.0 / slope if slope < 0 else math.inf), int(k.size)


def settling_time(t: np.ndarray, dev: np.ndarray, level: float) -> float:
    """The first t from which on ``dev`` stays below ``level`` (math.inf if its last value is not below)."""
    above = np.flatnonzero(dev >= level)
    if above.size == 0:
        return float(t[0])
    return math.inf if above[-1] == dev.size - 1 else float(t[above[-1] + 1])


def ringing(case_path: str, args, variant: str) -> dict:
    """Run 2D-1 to its steady state with ``boundaries.outlet`` = the variant's rule (and its absorbing layer),
    step the inlet, record the lift."""
    outlet, _, extra = variant.partition("+")
    layer = ([f"boundaries.absorbing_layer.width={args.layer_width}", f"boundaries.absorbing_layer.ramp={args.layer_ramp}",
              f"boundaries.absorbing_layer.viscosity_ratio={args.layer_ratio}"] if extra == "layer" else [])
    case = load_case(case_path, [f"lattice.resolution={args.resolution}", f"boundaries.outlet={outlet}"] + layer
                     + list(args.overrides))
    policy = get_precision(args.precision, "lbm")
    derived, geo, setup = build_setup(case, policy)
    stepper = get_stepper(args.backend, setup)
    mask = geo.obstacles[geo.measured[0]]

    def lift(st):
        return obs.force_coefficients(st.force(mask), case.lattice.velocity, case.lattice.resolution)[1]

    # to the steady state (the case's own end time and check), by steps of the case's steady interval
    interval = max(case.steady.interval, 1)
    u_prev, done = None, 0
    while done < derived.steps:
        stepper.step(interval)
        done += interval
        _, ux, uy = stepper.macroscopic()
        u = np.stack([ux[geo.fluid], uy[geo.fluid]])
        if done > derived.ramp_steps and u_prev is not None and obs.relative_change(u, u_prev) < case.steady.tolerance:
            break
        u_prev = u
    before = lift(stepper)
    # the step: the same populations, inlet (VELOCITY) velocities (1 + step) times larger, no smooth start; a
    # characteristic outlet keeps its reference outflow (the sound the step sends downstream is what it lets out)
    uw = setup.boundary_velocity * np.where(setup.flags == VELOCITY, 1.0 + args.step, 1.0)
    stepped = dataclasses.replace(setup, boundary_velocity=uw, ramp_steps=0, initial_density=None,
                                  initial_velocity=None)
    st2 = get_stepper(args.backend, stepped)
    st2.load_populations(stepper.populations(), 0)
    del stepper
    period = 4 * derived.nx / math.sqrt(lattice.CS2)            # steps for sound to cross the channel 4 times
    transverse = 2 * derived.ny / math.sqrt(lattice.CS2)        # the lowest wall-to-wall mode
    n = int(args.periods * period / args.every)
    t = np.arange(1, n + 1) * args.every
    cl = np.empty(n)
    for i in range(n):
        st2.step(args.every)
        cl[i] = lift(st2)
    w = max(1, int(round(2 * transverse / args.every)))
    low = np.convolve(cl, np.ones(w) / w, mode="same")
    tau, peaks = envelope_decay(t, cl)
    mean = np.mean(cl[2 * n // 3:])
    low_mean = np.mean(low[2 * n // 3:n - w])
    windows = []
    # the ringing slows down: the early burst decays fast, the standing waves that survive it slowly
    for a, b in ((0, 1), (1, 3), (3, args.periods)):
        k = (t >= a * period) & (t < b * period)
        kl = k & (t < t[-1] - w * args.every)                  # the moving mean's edge left out
        if np.count_nonzero(k) > 8:
            w_tau, w_peaks = envelope_decay(t[k], cl[k])
            low_tau = envelope_decay(t[kl], low[kl], low_mean)[0] if np.count_nonzero(kl) > 8 else math.nan
            windows.append(dict(a=a, b=b, largest=float(np.max(np.abs(cl[k] - mean))), tau=w_tau / period,
                                peaks=w_peaks, low=float(np.max(np.abs(low[kl] - low_mean))) if kl.any() else math.nan,
                                low_tau=low_tau / period))
    dev = np.abs(cl - mean)
    first = float(dev[t < period].max())
    settle = {k: settling_time(t, dev, first * 10.0 ** -k) / period for k in (3, 4)}
    return dict(outlet=variant, case=Path(case_path).stem, steps_to_steady=done, before=before, mean=mean, tau=tau,
                settle=settle, dev=dev,
                peaks=peaks, period=period, transverse=transverse, t=t, cl=cl, low=low, low_mean=low_mean, window=w,
                windows=windows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", default=str(ROOT / "cases" / "cylinder_2d1.toml"))
    p.add_argument("--backend", default="numpy")
    p.add_argument("--precision", default="fp64")
    p.add_argument("--resolution", type=int, default=10, help="cells across the cylinder")
    p.add_argument("--step", type=float, default=0.05, help="relative step of the inlet velocity")
    p.add_argument("--periods", type=float, default=8.0, help="acoustic periods 4 L / c_s recorded after the step")
    p.add_argument("--every", type=int, default=5, help="steps between lift samples")
    p.add_argument("--outlets", nargs="+", default=["pressure"],
                   choices=["pressure", "characteristic", "pressure+layer", "characteristic+layer"],
                   help="outlet rules to run (boundaries.outlet; +layer: with the absorbing layer), one after the other")
    p.add_argument("--layer-width", type=float, default=1.936, help="absorbing layer: width from the outlet, m")
    p.add_argument("--layer-ramp", type=float, default=0.176, help="absorbing layer: ramp at its inner edge, m")
    p.add_argument("--layer-ratio", type=float, default=40.0, help="absorbing layer: bulk / shear viscosity")
    p.add_argument("--set", dest="overrides", action="append", default=[])
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    runs = [ringing(args.case, args, outlet) for outlet in args.outlets]
    for r in runs:
        print(f"{r['case']}, D = {args.resolution} cells, {args.backend}/{args.precision}, outlet {r['outlet']}: steady "
              f"after {r['steps_to_steady']} steps (c_L {r['before']:.5f}); inlet +{args.step:.0%}: c_L -> {r['mean']:.5f}, "
              f"envelope e-folding time {r['tau']:.4g} steps = {r['tau'] / r['period']:.3g} acoustic periods "
              f"({r['peaks']} maxima, period {r['period']:.0f} steps, wall-to-wall mode {r['transverse']:.0f} steps); "
              f"settles to 1e-3 / 1e-4 of the first period's largest deviation after {r['settle'][3]:.3g} / "
              f"{r['settle'][4]:.3g} periods")
        for wd in r["windows"]:
            print(f"  periods {wd['a']:g}-{wd['b']:g}: largest |c_L - mean| {wd['largest']:.3g}, e-folding time "
                  f"{wd['tau']:.3g} periods ({wd['peaks']} maxima); low-pass largest {wd['low']:.3g}, e-folding "
                  f"{wd['low_tau']:.3g} periods")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        for r in runs:
            np.savetxt(args.out / f"outlet_reflection_lift_{r['outlet'].replace('+', '_')}.csv",
                       np.column_stack([r["t"], r["cl"]]),
                       delimiter=",", header="steps_after_step,lift_coefficient", comments="")
        import matplotlib  # late: heavy (matplotlib), only for --plot

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # late: heavy (matplotlib), only for --plot

        fig, axes = plt.subplots(3, 1, figsize=(7, 8.5), sharex=True)
        for r in runs:
            x = r["t"] / r["period"]
            axes[0].plot(x, r["cl"], lw=0.8, label=f"outlet = {r['outlet']}")
            axes[1].semilogy(x, r["dev"] + 1e-12, lw=0.6, label=f"outlet = {r['outlet']}")
            keep = slice(0, len(x) - r["window"])                 # the moving mean's edge left out
            axes[2].semilogy(x[keep], np.abs(r["low"] - r["low_mean"])[keep] + 1e-12, lw=1,
                             label=f"outlet = {r['outlet']}")
        axes[0].set_ylabel("lift coefficient c_L")
        axes[0].set_title(f"{runs[0]['case']}, D = {args.resolution}: inlet velocity +{args.step:.0%} at t = 0")
        axes[1].set_ylabel("|c_L - mean|")
        axes[2].set_ylabel("|low-pass c_L - mean|")
        axes[1].set_xlabel("acoustic periods 4 L / c_s after the inlet step")
        for ax in axes:
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.out / "outlet_reflection_lift.png", dpi=120)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
