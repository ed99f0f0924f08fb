"""What a new user found missing on the LBM side (issue 50): every obstacle's forces in summary.json, the vorticity
stripe at the outlet, the 16-bit guard's flag beside a converged status and off the progress bar's line, and
``bench lbm`` running 16-bit on NumPy with one speed-up baseline."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from tqdm import tqdm

from hpcsolve import cli
from hpcsolve.lbm import guard as lbm_guard
from hpcsolve.lbm import observables as obs
from hpcsolve.lbm import runner
from hpcsolve.lbm.flags import OUTLET
from hpcsolve.run import run_case

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "cases"

# poiseuille's 4 x 1 m channel (16 cells across) with a rectangle and a circle in it
TWO_OBSTACLES = ['obstacles=[{shape="rectangle", lower=[1.0, 0.375], upper=[1.25, 0.625]}, '
                 '{shape="circle", center=[2.5, 0.5], diameter=0.25}]', "validation.reference='none'",
                 "time.steps=300", "time.monitor_interval=50"]


def _quiet_run(path, overrides, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run_case(path, "numpy", overrides=overrides, progress=False, **kw)


def test_every_obstacles_drag_and_lift_are_in_summary_json_and_the_table(tmp_path):
    r = _quiet_run(CASES / "poiseuille.toml", TWO_OBSTACLES, out=tmp_path / "r", plots=False)
    metrics = json.loads((tmp_path / "r" / "summary.json").read_text())["metrics"]
    rows = r.console_rows()
    for name in ("drag_coefficient", "lift_coefficient", "drag_coefficient_1", "lift_coefficient_1"):
        # the last monitor point is the last step (300): the summary's value is the series' last one
        assert metrics[name] == pytest.approx(float(r.series[name][-1]), rel=1e-12, abs=1e-15)
        assert rows[name] == metrics[name]
    # the flow pushes both obstacles downstream; the symmetric channel gives them no lift to rounding
    assert metrics["drag_coefficient"] > 1 and metrics["drag_coefficient_1"] > 1
    assert abs(metrics["lift_coefficient"]) < 1e-9 * metrics["drag_coefficient"]


def test_open_layer_takes_the_value_beyond_it():
    """inward_at_open on a row: the three fluid cells next to the open cell take the fourth one's value."""
    w = np.arange(10, dtype=float)[None, :].repeat(3, axis=0)
    fluid = np.ones_like(w, dtype=bool)
    fluid[:, 0] = fluid[:, -1] = False
    open_b = np.zeros_like(fluid)
    open_b[:, -1] = True
    out = obs.inward_at_open(w, fluid, open_b)
    assert out[1].tolist() == [0, 1, 2, 3, 4, 5, 5, 5, 5, 9]


def test_the_vorticity_at_the_outlet_stays_within_the_interiors_range():
    """2D-2 (characteristic outlet) at D = 10, Re 40: the last fluid columns' velocity carries the outlet rule's
    transverse correction (u_y 5x the interior's); their vorticity stays within what the interior shows."""
    r = _quiet_run(CASES / "cylinder_2d2.toml", ["lattice.resolution=10", "physics.reynolds=40",
                                                 "validation.reference='none'", "time.steps=2000",
                                                 "time.output_interval=0", "time.monitor_interval=500"], plots=False)
    w, flags = np.asarray(r.fields["vorticity"]), np.asarray(r.fields["flags"])
    uy = np.asarray(r.fields["velocity"])[..., 1]
    assert np.all(flags[1:-1, -1] == OUTLET)
    inner = slice(1, -1)
    interior = np.abs(w[inner, -40:-5]).max()
    last = np.abs(w[inner, -4:-1]).max()        # the three fluid columns before the outlet
    assert 0 < last <= interior, (last, interior)
    # the velocity there is as computed: its transverse part is far above the interior's
    assert np.abs(uy[inner, -2]).max() > 3 * np.abs(uy[inner, -40:-5]).max()


def _flagging(monkeypatch):
    """Every guard check flagged: the growth threshold and the smallest divergence set to 0 (no tiny CPU case loses
    its flow in fp16s; tests/lbm/test_precision_guard.py tests the statistic itself)."""
    monkeypatch.setattr(lbm_guard, "GROWTH_THRESHOLD", 0.0)
    monkeypatch.setattr(lbm_guard, "MIN_DIVERGENCE", 0.0)


CAVITY_FP16S = ["lattice.resolution=16", "steady.tolerance=1e-2", "steady.interval=200", "time.monitor_interval=100",
                "time.output_interval=0", "run.precision_guard='warn'"]


def test_a_flagged_fp16s_cavity_says_so_beside_its_converged_status(tmp_path, monkeypatch, capsys):
    _flagging(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = cli.main(["run", str(CASES / "lid_driven_cavity.toml"), "--backend", "numpy", "--precision", "fp16s",
                         "--no-plots", "--out", str(tmp_path / "c"), *sum((["--set", o] for o in CAVITY_FP16S), [])])
    out = capsys.readouterr().out
    summary = json.loads((tmp_path / "c" / "summary.json").read_text())
    assert code == 0 and summary["status"] == "converged"            # what the run did; exit 0
    assert summary["metrics"]["precision_guard_flagged"] is True
    step = summary["metrics"]["precision_guard_flagged_step"]
    assert f"FLAGGED by the 16-bit precision guard: fp16s storage no longer carries the flow at step {step}" \
        in summary["message"]
    [line] = [x for x in out.splitlines() if x.startswith("lid_driven_cavity: ")]
    assert line.startswith("lid_driven_cavity: converged (steady state at step") and "FLAGGED" in line


def test_an_unflagged_16bit_run_keeps_its_plain_message():
    r = _quiet_run(CASES / "lid_driven_cavity.toml", CAVITY_FP16S + ["run.precision='fp16s'"], plots=False)
    assert r.metrics["precision_guard_flagged"] is False and "FLAGGED" not in r.message


class _ShownBar(tqdm):
    """The run's progress bar drawn at once (no 2 s delay), so that the guard's warning meets it."""

    def __init__(self, *args, **kwargs):
        kwargs["delay"] = 0
        kwargs["mininterval"] = 0
        super().__init__(*args, **kwargs)


def test_the_guard_warning_starts_its_own_line_not_the_progress_bars(monkeypatch, capsys):
    _flagging(monkeypatch)
    monkeypatch.setattr(runner, "tqdm", _ShownBar)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda msg, *a, **k: sys.stderr.write(f"WARNING: {msg}\n")
        run_case(CASES / "lid_driven_cavity.toml", "numpy", "fp16s", overrides=CAVITY_FP16S, progress=True,
                 plots=False)
    err = capsys.readouterr().err
    lines = [x for x in err.split("\n") if "WARNING: fp16s storage" in x]
    assert lines and "%|" in err                              # the bar was drawn, and the warning came
    # what a terminal shows of the line: the text after its last carriage return starts with the warning
    for x in lines:
        shown = x[:x.index("WARNING: ")].split("\r")[-1]
        assert shown.strip() == "", repr(x[:200])


def test_bench_lbm_runs_16bit_on_numpy_with_numpy_fp64_as_the_one_baseline(tmp_path):
    assert cli.main(["bench", "lbm", "--quick", "--backends", "numpy", "--precisions", "fp32", "fp16s",
                     "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "bench_lbm.json").read_text())
    rows = {r["precision"]: r for r in data["cpu_reference"]}
    assert list(rows) == ["fp32", "fp16s"]                  # as asked; NumPy fp64, the baseline, timed apart
    base_row = data["speedup_baseline"]
    assert base_row["precision"] == "fp64" and base_row["size"] == 64
    rows["fp64"] = base_row
    base = base_row["mlups"]
    md = (tmp_path / "bench_lbm.md").read_text()
    for p, r in rows.items():
        assert r["mlups"] > 0 and r["speedup_vs_numpy_fp64"] == pytest.approx(r["mlups"] / base, rel=1e-12)
        assert f"| numpy (CPU, 1 thread) | {p} | 64^2 |" in md
        assert f"| {r['speedup_vs_numpy_fp64']:.2f}x |" in md or f"| {r['speedup_vs_numpy_fp64']:,.0f}x |" in md
    assert rows["fp64"]["speedup_vs_numpy_fp64"] == 1.0
    # fp32's own speed against fp64's, not fp32 against itself (which said 1x): two different timings
    assert rows["fp32"]["mlups"] != base and rows["fp32"]["speedup_vs_numpy_fp64"] != 1.0
    assert "speedup vs NumPy fp64" in md


def test_bench_speedup_of_a_gpu_row_is_against_numpy_fp64_at_the_baseline_size():
    """``speedups``: a row at another size than the NumPy rows is divided by NumPy fp64 at the baseline size."""
    from hpcsolve.report.bench_lbm import speedups

    cpu = [{"precision": "fp64", "size": 256, "mlups": 4.0}, {"precision": "fp32", "size": 256, "mlups": 6.0}]
    rows = [{"precision": "fp32", "size": 4096, "mlups": 8000.0}, {"precision": "fp16s", "size": 4096,
                                                                    "error": "x"}]
    speedups(rows, cpu)
    assert rows[0]["speedup_vs_numpy_fp64"] == 2000.0 and "speedup_vs_numpy_fp64" not in rows[1]
    assert cpu[1]["speedup_vs_numpy_fp64"] == 1.5 and rows[0]["speedup_baseline"] == "numpy/fp64 256^2"
