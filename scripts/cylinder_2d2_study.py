#!/usr/bin/env python3
"""Schafer-Turek 2D-2 (cases/cylinder_2d2.toml): a resolution / Mach / outlet / precision study of c_D max,
c_L max and the Strouhal number, with the lift and drag series kept to answer the time-window question.

Runs the shipped case through the project API (``hpcsolve.run_case`` with ``--set`` style overrides) over a grid
of lattice.resolution (D, cells per diameter) x lattice.velocity (u, the mean inflow in lattice units) x
boundaries.outlet x precision (x time.end_time), or over the named ``--plan``. Every run's cost is predicted
from cells x steps and a MLUPS figure before anything runs; runs go cheapest first and a run whose prediction
does not fit in what is left of ``--budget-s`` is skipped (and listed as skipped). One markdown row is printed
per run as it finishes and the table is written to ``--out``.

    python scripts/cylinder_2d2_study.py [--backend cupy] [--plan separate | --resolutions 40 80 160
        --velocities 0.05 0.025 0.0125 --outlets pressure characteristic --precisions fp64 [--end-times 12]]
        [--budget-s 360] [--mlups 20000] [--series-dir DIR] [--out TABLE.md] [--set key.path=value ...]
        [--dry-run]
    python scripts/cylinder_2d2_study.py --analyze DIR/*.npz [--until 12]

Columns beyond the project's metrics (``hpcsolve.lbm.reference._periodic_metrics``: max over the second half of
the monitor samples, St from upward mean crossings of the lift), all from the run's own series:

- ``last 1/4``: c_D max and c_L max over the last quarter of the run instead of the second half;
- ``peak drift``: the lift's interpolated peaks in the second half, fitted by a line: its change per shedding
  period relative to the mean peak (> 0: the amplitude still grows, so "max over the second half" is the last
  peak and the saturated value is higher; a beat shows as scatter, ``peak spread`` = (max - min) / mean);
- ``c_D mean / amp``: the drag's mean over whole lift periods of the second half and its half peak-to-peak.

Monitor sampling: unless ``--set time.monitor_interval=N`` is given, the interval is chosen for about
``--samples-per-period`` (128) samples per shedding period (St 0.3): D / (0.3 u) / 128 steps (the shipped case
samples every 20 steps at D = 40, u = 0.05: 133 per period). The peaks are refined by a parabola through the
three samples around each maximum (the raw sample maximum is low by up to 1 - cos(pi / 128) = 3e-4 relative).

``--series-dir`` writes one ``.npz`` per run (time, drag_coefficient, lift_coefficient, step, and the run's
settings); ``--analyze FILES --until T`` re-computes every column from them as if the run had ended at T s (the
first T s of a longer run are the run that ends at T: same steps, same monitor points).

Cost model (``predict``): setup_s + cells x steps / (MLUPS x 1e6) + monitor points x monitor_ms, with the
throughput falling off on small grids as MLUPS x cells / (cells + half_cells) (H200, CuPy fp64: the ``hpcsolve
bench lbm`` figures 16,471 / 24,050 / 28,330 MLUPS at 256^2 / 1024^2 / 8192^2, docs/measured/
bench_lbm_h200_2026-12-01_final.md; the 2D-2 run itself at D = 40 (144k cells, Bouzidi links) 12,400 MLUPS,
docs/measured/validate_lbm_gpu_h200_2026-12-01_final.md, which the default 20,000 x 144k / 244k = 11,800 meets;
monitor points 0.7-1.2 ms each on the device, docs/design/reliability.md). fp32 is counted 1.25x faster than fp64
(15,562 against 12,400 at D = 40); the 16-bit formats as fp64.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import hpcsolve  # noqa: E402
from hpcsolve.lbm import observables as obs  # noqa: E402
from hpcsolve.lbm.case import derive  # noqa: E402

CASE = ROOT / "cases" / "cylinder_2d2.toml"
STROUHAL_GUESS = 0.3
PRECISION_SPEED = {"fp32": 1.25}
#: "separate": at most 8 runs that separate Mach, resolution, outlet and time window (fp64). The two 24 s runs
#: give the shipped 12 s answer too (``--analyze --until 12``). Predicted on the H200: see docs/measured/
#: cylinder_2d2_study_plan.md
PLANS = {
    "separate": [
        (40, 0.025, "pressure", "fp64", 12.0),
        (40, 0.025, "characteristic", "fp64", 12.0),
        (80, 0.05, "characteristic", "fp64", 12.0),
        (80, 0.025, "pressure", "fp64", 24.0),
        (80, 0.025, "characteristic", "fp64", 24.0),
        (80, 0.0125, "characteristic", "fp64", 12.0),
        (160, 0.025, "characteristic", "fp64", 12.0),
        (160, 0.025, "pressure", "fp64", 12.0),
    ],
    # the second stage once the settings are chosen: the same run in the other precisions
    "precisions": [(80, 0.025, "characteristic", p, 12.0) for p in ("fp64", "fp32", "fp16c")],
}


@dataclass(frozen=True)
class Config:
    resolution: int
    velocity: float
    outlet: str
    precision: str
    end_time: float | None = None       # None: the case's own (12 s)

    @property
    def label(self) -> str:
        end = "" if self.end_time is None else f"_T{self.end_time:g}"
        return f"D{self.resolution}_u{self.velocity:g}_{self.outlet}_{self.precision}{end}"


def overrides(cfg: Config, extra: list[str], samples_per_period: int) -> list[str]:
    """The ``--set`` strings of one run: the study's settings, then ``extra`` (which win)."""
    out = [f"lattice.resolution={cfg.resolution}", f"lattice.velocity={cfg.velocity!r}",
           f'boundaries.outlet="{cfg.outlet}"']
    if cfg.end_time is not None:
        out.append(f"time.end_time={cfg.end_time!r}")
    if not any(e.startswith("time.monitor_interval=") for e in extra):
        period_steps = cfg.resolution / (STROUHAL_GUESS * cfg.velocity)
        out.append(f"time.monitor_interval={max(1, round(period_steps / samples_per_period))}")
    return out + list(extra)


def predict(cfg: Config, args) -> dict:
    """Cells, steps, monitor points, tau and the predicted wall time (s) of one run (module docstring)."""
    case = hpcsolve.load_case(args.case, overrides(cfg, args.set, args.samples_per_period))
    d = derive(case)
    cells = d.nx * d.ny
    points = d.steps // case.time.monitor_interval + 1
    mlups = args.mlups * PRECISION_SPEED.get(cfg.precision, 1.0) * cells / (cells + args.half_cells)
    seconds = args.setup_s + cells * d.steps / (mlups * 1e6) + points * args.monitor_ms / 1e3
    return {"cells": cells, "steps": d.steps, "points": points, "tau": d.units.relaxation_time, "predicted_s": seconds,
            "end_time": case.time.end_time}


def schedule(configs: list[Config], args) -> tuple[list, list]:
    """(config, prediction) pairs to run, cheapest first, within ``--budget-s``; and those skipped."""
    planned = sorted(((c, predict(c, args)) for c in configs), key=lambda cp: cp[1]["predicted_s"])
    run, skipped, used = [], [], 0.0
    for c, p in planned:
        if used + p["predicted_s"] <= args.budget_s:
            run.append((c, p))
            used += p["predicted_s"]
        else:
            skipped.append((c, p))
    return run, skipped


def peaks(t: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Times and values of the local maxima of a sampled signal, each refined by the parabola through the
    three samples around it (vertex of the parabola; the raw sample if the three are collinear)."""
    i = np.flatnonzero((y[1:-1] > y[:-2]) & (y[1:-1] >= y[2:])) + 1
    if i.size == 0:
        return np.zeros(0), np.zeros(0)
    ym, y0, yp = y[i - 1], y[i], y[i + 1]
    h = t[i + 1] - t[i]                     # uniform sampling assumed around a peak
    den = ym - 2.0 * y0 + yp
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(den < 0, 0.5 * (ym - yp) / den, 0.0)
    return t[i] + s * h, y0 - 0.25 * (ym - yp) * s


def analyze(t, cd, cl, until: float | None = None) -> dict:
    """Window metrics of a 2D-2 series (module docstring), as if the run had ended at ``until`` (default: its
    end). ``c_D max`` / ``c_L max`` / ``St`` are the project's definitions (``_periodic_metrics``)."""
    t, cd, cl = (np.asarray(a, dtype=np.float64) for a in (t, cd, cl))
    if until is not None:
        keep = t <= until + 1e-12
        t, cd, cl = t[keep], cd[keep], cl[keep]
    out: dict = {"until": float(t[-1]) if t.size else float("nan")}
    if t.size < 8:
        return out
    half = t >= t[0] + 0.5 * (t[-1] - t[0])
    quarter = t >= t[0] + 0.75 * (t[-1] - t[0])
    out.update(cd_max=float(cd[half].max()), cl_max=float(cl[half].max()),
               cd_max_q=float(cd[quarter].max()), cl_max_q=float(cl[quarter].max()))
    st = obs.strouhal(t, cl, 0.1, 1.0)
    out["st"] = float(st) if st is not None else float("nan")
    pt, pv = peaks(t[half], cl[half])
    if pv.size >= 3:
        period = float(np.median(np.diff(pt)))
        slope = np.polyfit(pt, pv, 1)[0]
        out.update(cl_peak_interp=float(pv.max()), cl_peak_drift=float(slope * period / pv.mean()),
                   cl_peak_spread=float((pv.max() - pv.min()) / pv.mean()), cl_peaks=int(pv.size))
        whole = (t >= pt[0]) & (t < pt[-1])           # whole lift periods: first to last peak
        out.update(cd_mean=float(cd[whole].mean()), cd_amp=float(0.5 * (cd[whole].max() - cd[whole].min())),
                   cl_mean=float(cl[whole].mean()), cl_amp=float(0.5 * (cl[whole].max() - cl[whole].min())))
    dt_, dv = peaks(t[half], cd[half])
    if dv.size:
        out["cd_peak_interp"] = float(dv.max())
    return out


def ranges() -> dict:
    """The published 2D-2 ranges the project checks against (hpcsolve/data/schafer_turek_1996.toml)."""
    r = obs.schafer_turek()["case_2d2"]
    return {"cd_max": tuple(r["c_D_max"]), "cl_max": tuple(r["c_L_max"]), "st": tuple(r["strouhal"])}


def run_one(cfg: Config, pred: dict, args) -> dict:
    """Run one configuration; the row's numbers come from this run's Result (metrics, timings, series)."""
    row = {"config": asdict(cfg), "label": cfg.label, **pred}
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():   # the row says in / OUT; the runner's long range warning is noise here
            warnings.filterwarnings("ignore", message=".*outside the reference range")
            result = hpcsolve.run_case(args.case, backend=args.backend, precision=cfg.precision,
                                       overrides=overrides(cfg, args.set, args.samples_per_period),
                                       progress=False, plots=False, force=True)   # a study probes the edges
    except Exception as exc:  # one failed run (blow-up, out of memory) must not hide the others
        row.update(status="error", error=f"{type(exc).__name__}: {exc}"[:300], wall_s=time.perf_counter() - t0)
        return row
    row["wall_s"] = time.perf_counter() - t0
    m, s = result.metrics, result.series
    row.update(status=result.status, steps=m.get("steps"), mlups=result.timings.get("mlups"),
               step_s=result.timings.get("step_s"), c_D_max=m.get("drag_coefficient_max"),
               c_L_max=m.get("lift_coefficient_max"), St=m.get("strouhal"))
    row["window"] = analyze(s["time"], s["drag_coefficient"], s["lift_coefficient"])
    if args.series_dir is not None:
        args.series_dir.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(args.series_dir / f"{cfg.label}.npz", time=s["time"], step=s["step"],
                            drag_coefficient=s["drag_coefficient"], lift_coefficient=s["lift_coefficient"],
                            settings=json.dumps({k: v for k, v in row.items() if k != "window"}, default=str))
    return row


HEADER = ("| run | tau | steps | c_D max | c_L max | St | in range D/L/St | last 1/4: c_D / c_L max | "
          "c_L peak drift, spread / period | c_D mean / amp | wall s (pred) | MLUPS | status |\n"
          "| --- | ---: | ---: | ---: | ---: | ---: | --- | --- | --- | --- | ---: | ---: | --- |")


def _inside(v, lohi) -> str:
    return "-" if v is None or not math.isfinite(v) else ("in" if lohi[0] <= v <= lohi[1] else "OUT")


def _f(v, fmt="{:.4f}") -> str:
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else fmt.format(v)


def format_row(row: dict, rng: dict) -> str:
    """One markdown row of the table (HEADER) from a row of ``run_one`` (or ``analyze_files``)."""
    w = row.get("window", {})
    cd, cl, st = row.get("c_D_max"), row.get("c_L_max"), row.get("St")
    status = row.get("status", "")
    if row.get("error"):
        status += ": " + row["error"][:120].replace("|", "/")
    return (f"| {row['label']} | {_f(row.get('tau'))} | {row.get('steps', '-')} | {_f(cd)} | {_f(cl)} | "
            f"{_f(st)} | {_inside(cd, rng['cd_max'])}/{_inside(cl, rng['cl_max'])}/{_inside(st, rng['st'])} | "
            f"{_f(w.get('cd_max_q'))} / {_f(w.get('cl_max_q'))} | {_f(w.get('cl_peak_drift'), '{:+.2e}')}, "
            f"{_f(w.get('cl_peak_spread'), '{:.1e}')} | {_f(w.get('cd_mean'))} / {_f(w.get('cd_amp'))} | "
            f"{_f(row.get('wall_s'), '{:.1f}')} ({_f(row.get('predicted_s'), '{:.1f}')}) | "
            f"{_f(row.get('mlups'), '{:,.0f}')} | {status} |")


def analyze_files(files: list[Path], until: float | None) -> list[dict]:
    """Rows from ``--series-dir`` files, every column re-computed from the series up to ``until``."""
    rows = []
    for f in files:
        z = np.load(f)
        settings = json.loads(str(z["settings"]))
        w = analyze(z["time"], z["drag_coefficient"], z["lift_coefficient"], until)
        settings.update(window=w, c_D_max=w.get("cd_max"), c_L_max=w.get("cl_max"), St=w.get("st"),
                        label=settings.get("label", f.stem) + (f" (to {until:g} s)" if until else ""))
        rows.append(settings)
    return rows


def configs_from(args) -> list[Config]:
    if args.plan:
        return [Config(*p) for p in PLANS[args.plan]]
    ends = args.end_times or [None]
    return [Config(d, u, o, p, e) for d, u, o, p, e in itertools.product(
        args.resolutions, args.velocities, args.outlets, args.precisions, ends)]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="auto", help="numpy, cupy, numba-cuda or auto (default)")
    ap.add_argument("--case", type=Path, default=CASE)
    ap.add_argument("--plan", choices=sorted(PLANS), help="a named list of runs instead of the grid")
    ap.add_argument("--resolutions", type=int, nargs="+", default=[40, 80, 160])
    ap.add_argument("--velocities", type=float, nargs="+", default=[0.05, 0.025, 0.0125])
    ap.add_argument("--outlets", nargs="+", default=["pressure", "characteristic"])
    ap.add_argument("--precisions", nargs="+", default=["fp64"])
    ap.add_argument("--end-times", type=float, nargs="+", help="time.end_time values, s (default: the case's)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="extra case overrides")
    ap.add_argument("--budget-s", type=float, default=360.0, help="total predicted wall time allowed")
    ap.add_argument("--mlups", type=float, default=20000.0, help="large-grid throughput for the prediction")
    ap.add_argument("--half-cells", type=float, default=1e5, help="grid size at which throughput is half")
    ap.add_argument("--monitor-ms", type=float, default=1.0, help="cost of one monitor point, ms")
    ap.add_argument("--setup-s", type=float, default=3.0, help="set-up and compile time per run, s")
    ap.add_argument("--samples-per-period", type=int, default=128)
    ap.add_argument("--series-dir", type=Path, help="write each run's lift/drag series (npz) here")
    ap.add_argument("--out", type=Path, help="write the markdown table to this file")
    ap.add_argument("--dry-run", action="store_true", help="print the schedule and predictions, run nothing")
    ap.add_argument("--analyze", type=Path, nargs="+", help="re-analyze --series-dir files instead of running")
    ap.add_argument("--until", type=float, help="with --analyze: as if the runs had ended at this time, s")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    rng = ranges()
    lines = [HEADER]
    print(HEADER, flush=True)
    if args.analyze:
        rows = analyze_files(args.analyze, args.until)
        skipped = []
    else:
        todo, skipped = schedule(configs_from(args), args)
        total = sum(p["predicted_s"] for _, p in todo)
        print(f"<!-- {len(todo)} runs, predicted {total:.0f} s of {args.budget_s:.0f} s on {args.backend}; "
              f"{len(skipped)} skipped -->", flush=True)
        rows = []
        for cfg, pred in todo:
            row = {"label": cfg.label, **pred, "status": "planned"} if args.dry_run else run_one(cfg, pred, args)
            rows.append(row)
            lines.append(format_row(row, rng))
            print(lines[-1], flush=True)
    if args.analyze:
        for row in rows:
            lines.append(format_row(row, rng))
            print(lines[-1], flush=True)
    notes = [f"skipped (predicted {p['predicted_s']:.0f} s, does not fit in --budget-s {args.budget_s:g}): "
             f"{c.label}" for c, p in skipped]
    for n in notes:
        print(n, flush=True)
    if args.out is not None:
        ref = ", ".join(f"{k} [{a}, {b}]" for k, (a, b) in rng.items())
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(f"cylinder 2D-2 study, backend {args.backend}; published: {ref}\n\n"
                            + "\n".join(lines) + "\n" + "".join(f"\n- {n}" for n in notes) + "\n")
        args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1, default=str))
    return 0 if all(r.get("status") != "error" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
