"""scripts/cylinder_2d2_study.py: its window analysis on signals with a known answer, and one tiny NumPy run whose
table row must carry that run's own numbers."""

import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("cylinder_2d2_study", ROOT / "scripts" / "cylinder_2d2_study.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod          # its dataclass looks its module up there
    spec.loader.exec_module(mod)
    return mod


def test_analyze_a_known_shedding_signal():
    """Lift 0.01 + A sin(2 pi f t), drag 3.2 + 0.03 cos(4 pi f t), f = 3 Hz, 40 samples a period: interpolated
    peaks find A to 1e-4 where the raw samples miss by up to 1 - cos(pi / 40); St = f D / U = 0.3; a saturated
    amplitude has no drift, a growing one drifts by its growth per period."""
    mod = _script()
    f = 3.0
    t = np.arange(0, 12, 1 / (40 * f)) + 0.0031
    cd = 3.2 + 0.03 * np.cos(4 * np.pi * f * t)
    w = mod.analyze(t, cd, 0.01 + np.sin(2 * np.pi * f * t))
    assert w["cl_peak_interp"] == pytest.approx(1.01, abs=1e-4)
    assert w["st"] == pytest.approx(0.3, rel=1e-3)
    assert abs(w["cl_peak_drift"]) < 1e-6 and w["cd_mean"] == pytest.approx(3.2, abs=1e-3)
    assert w["cd_amp"] == pytest.approx(0.03, rel=0.02) and w["cl_mean"] == pytest.approx(0.01, abs=1e-3)
    grow = mod.analyze(t, cd, (1 + 0.01 * f * t) * np.sin(2 * np.pi * f * t))   # +0.01 of A(0) per period
    assert grow["cl_peak_drift"] == pytest.approx(0.01 / (1 + 0.01 * f * 9), rel=0.05)
    early = mod.analyze(t, cd, (1 + 0.01 * f * t) * np.sin(2 * np.pi * f * t), until=6.0)
    assert early["until"] <= 6.0 and early["cl_max"] < grow["cl_max"]


def test_schedule_orders_cheapest_first_and_skips_what_does_not_fit():
    mod = _script()
    args = mod.parse_args(["--resolutions", "20", "10", "--velocities", "0.1", "--outlets", "pressure",
                           "--end-times", "1", "--budget-s", "5", "--mlups", "1", "--half-cells", "0",
                           "--setup-s", "0", "--monitor-ms", "0"])
    run, skipped = mod.schedule(mod.configs_from(args), args)
    # D = 10: 222 x 43 cells x 1,000 steps = 9.5 s at 1 MLUPS; D = 20 is 7.8x that: neither fits in 5 s
    assert [c.resolution for c, _ in skipped] == [10, 20] and run == []
    args.budget_s = 60
    run, skipped = mod.schedule(mod.configs_from(args), args)
    assert [c.resolution for c, _ in run] == [10] and [c.resolution for c, _ in skipped] == [20]
    assert run[0][1]["predicted_s"] == pytest.approx(run[0][1]["cells"] * 1000 / 1e6)


def test_one_tiny_run_writes_its_own_numbers(tmp_path):
    """D = 10, 600 NumPy steps (about 3 s): the row's c_D max / c_L max are the run's metrics, the same as the
    maxima of the series it wrote over their second half."""
    mod = _script()
    out, series = tmp_path / "t.md", tmp_path / "s"
    rc = mod.main(["--backend", "numpy", "--resolutions", "10", "--velocities", "0.05", "--outlets", "pressure",
                   "--end-times", "0.3", "--series-dir", str(series), "--out", str(out), "--mlups", "1"])
    assert rc == 0
    rows = json.loads(out.with_suffix(".json").read_text())
    assert len(rows) == 1 and rows[0]["status"] == "completed" and rows[0]["steps"] == 600
    z = np.load(series / "D10_u0.05_pressure_fp64_T0.3.npz")
    t = z["time"]
    half = t >= t[0] + 0.5 * (t[-1] - t[0])
    assert rows[0]["c_D_max"] == pytest.approx(float(z["drag_coefficient"][half].max()), rel=1e-12)
    assert rows[0]["c_L_max"] == pytest.approx(float(z["lift_coefficient"][half].max()), rel=1e-12)
    assert math.isfinite(rows[0]["c_D_max"]) and f"| {rows[0]['c_D_max']:.4f} |" in out.read_text()
    again = mod.analyze_files([series / "D10_u0.05_pressure_fp64_T0.3.npz"], None)[0]
    assert again["c_D_max"] == rows[0]["c_D_max"]
