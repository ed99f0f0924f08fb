"""Validation verdicts (hpcsolve.core.verdicts): every reference kind inside and outside its range from real NumPy
runs (or a run's real metrics under a bound tightened by the case field), no reference, the case fields' checks,
summary.json and result.h5, and the CLI: one warning line for a value outside, exit 3 under run.strict_validation."""

from __future__ import annotations

import functools
import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from hpcsolve.cli import main
from hpcsolve.core import verdicts as V
from hpcsolve.core.cases import load_case
from hpcsolve.core.errors import CaseError
from hpcsolve.core.results import Result, read_h5
from hpcsolve.fem import verdicts as fem_verdicts
from hpcsolve.lbm import reference
from hpcsolve.run import run_case

CASES = Path(__file__).resolve().parents[2] / "cases"
WARNING = "outside the reference range"
#: Taylor-Green, 16 cells, 100 steps: relative L2 error 0.026 against the analytic vortex (:func:`_tg_short_error`),
#: outside 0.01
TG_SHORT = ["lattice.resolution=16", "time.steps=100"]


def _tg_short_error(velocity) -> float:
    """Relative L2 error of a TG_SHORT run's velocity field (ny, nx, 2 or 3) against the analytic vortex, every number
    from the case file (cases/taylor_green.toml: Re 100, L = U = 1, u_lb 0.05) and TG_SHORT: nu = U L / Re,
    t = steps dx u_lb / U; nothing from hpcsolve's units or reference."""
    import numpy as np

    L, U, Re, N, u_lb, steps = 1.0, 1.0, 100.0, 16, 0.05, 100
    nu, dx = U * L / Re, L / N
    t = steps * dx * u_lb / U
    x = (np.arange(N) + 0.5) * dx
    X, Y = np.meshgrid(x, x)
    k = 2 * np.pi / L
    decay = np.exp(-2 * nu * k * k * t)
    ux, uy = -U * np.cos(k * X) * np.sin(k * Y) * decay, U * np.sin(k * X) * np.cos(k * Y) * decay
    v = np.asarray(velocity)
    return float(np.sqrt(((v[..., 0] - ux) ** 2 + (v[..., 1] - uy) ** 2).sum() / (ux ** 2 + uy ** 2).sum()))


def _run(name: str, overrides=(), precision=None) -> Result:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # force: the short 2D-2 run at resolution 10 is past the stability rule (it blows up near step 1,000)
        return run_case(CASES / f"{name}.toml", "numpy", precision, overrides=list(overrides), progress=False,
                        plots=False, force=True)


@functools.lru_cache(maxsize=None)
def _cached(name: str, overrides: tuple = ()) -> Result:
    return _run(name, overrides)


def _verdicts(result: Result, name: str, overrides=()) -> dict:
    """The verdicts of ``result``'s real metrics under the case with ``overrides`` (a tightened bound)."""
    case = load_case(CASES / f"{name}.toml", list(overrides))
    make = reference.verdicts if case.solver == "lbm" else fem_verdicts.verdicts
    return make(case, result.metrics, result.derived)


def _inside(validation: dict, *names):
    assert set(validation) == set(names), validation
    for name in names:
        v = validation[name]
        assert v["verdict"] == "inside" and v["by"] == 0.0 and v["by_relative"] == 0.0, (name, v)
        assert v["range"][0] <= v["value"] <= v["range"][1]


def _outside(validation: dict, *names):
    assert set(validation) == set(names), validation
    for name in names:
        v = validation[name]
        lo, hi = v["range"]
        assert v["verdict"] == "outside", (name, v)
        if math.isfinite(v["value"]):
            assert v["by"] == pytest.approx(lo - v["value"] if v["value"] < lo else v["value"] - hi)
            assert v["by"] > 0
        else:
            assert math.isnan(v["by"])


# ------------------------------------------------------------------------------------------------ the arithmetic


def test_judge_inside_below_above_and_not_a_number():
    inside = V.judge(1.0, 0.99, 1.01, "ref")
    assert inside == {"value": 1.0, "range": [0.99, 1.01], "verdict": "inside", "by": 0.0, "by_relative": 0.0,
                      "reference": "ref"}
    low = V.judge(0.23496, 0.99, 1.01, "Schafer & Turek 1996, 2D-2")      # the 2D-2 run
    assert low["verdict"] == "outside"
    assert low["by"] == pytest.approx(0.75504) and low["by_relative"] == pytest.approx(0.75504 / 0.99)
    high = V.error_bound(0.03, 0.01, "analytic")
    assert high["range"] == [0.0, 0.01] and high["by"] == pytest.approx(0.02) and high["by_relative"] == pytest.approx(2)
    assert V.judge(0.01, 0.0, 0.01, "r")["verdict"] == "inside"               # the range is closed
    nan = V.judge(float("nan"), 0.0, 1.0, "r")
    assert nan["verdict"] == "outside" and math.isnan(nan["by"]) and math.isnan(nan["by_relative"])
    assert V.judge(None, 0.0, 1.0, "r")["verdict"] == "outside"
    assert V.judge(-1.0, 0.0, 2.0, "r")["by_relative"] == pytest.approx(0.5)   # a 0 bound: by the range width
    assert V.widened(0.99, 1.01, 0.1) == pytest.approx((0.891, 1.111))


def test_texts_name_the_value_its_range_by_how_much_and_the_reference():
    validation = {"lift_coefficient_max": V.judge(0.23496, 0.99, 1.01, "Schafer & Turek 1996, 2D-2"),
                  "strouhal": V.judge(0.3, 0.295, 0.305, "Schafer & Turek 1996, 2D-2")}
    text = V.warning_text("cylinder_2d2", validation)
    assert "\n" not in text
    assert "lift_coefficient_max 0.23496 outside [0.99, 1.01] by 0.755 (76.3 % of the bound 0.99)" in text
    assert "Schafer & Turek 1996, 2D-2" in text and "strouhal" not in text
    assert V.warning_text("x", {"strouhal": validation["strouhal"]}) == ""
    rows = V.console_rows(validation)
    assert rows["verdict_strouhal"] == "0.3 inside [0.295, 0.305]; Schafer & Turek 1996, 2D-2"
    assert rows["verdict_lift_coefficient_max"].startswith("0.23496 outside [0.99, 1.01] by 0.755")
    result = Result("cylinder_2d2", "lbm", "numpy", "fp64", metrics={"reference_c_L_max": [0.99, 1.01]},
                    validation=validation)
    assert result.validation_failed
    assert "reference_c_L_max" not in result.console_rows()      # the verdict row carries the range
    assert result.console_rows()["verdict_lift_coefficient_max"] == rows["verdict_lift_coefficient_max"]
    assert not Result("c", "lbm", "numpy", "fp64", validation={"strouhal": validation["strouhal"]}).validation_failed


# ------------------------------------------------------------------------------------------------ LBM references


def test_taylor_green_inside_at_its_defaults_outside_when_coarse():
    r = _cached("taylor_green")            # the shipped case: 6.7e-4 (fp64 and fp32)
    _inside(r.validation, "velocity_rel_l2_error")
    assert r.validation["velocity_rel_l2_error"]["range"] == [0.0, reference.DEFAULT_MAX_ERROR["taylor_green"]]
    short = _cached("taylor_green", tuple(TG_SHORT))
    _outside(short.validation, "velocity_rel_l2_error")
    assert short.status == "completed"                       # the run's status is not changed by its verdict
    _inside(_verdicts(short, "taylor_green", ["validation.max_error=0.05"]), "velocity_rel_l2_error")


def test_taylor_green_decayed_to_zero_is_judged_by_its_absolute_error():
    case = load_case(CASES / "taylor_green.toml")
    got = reference.verdicts(case, {"velocity_rel_l2_error": float("nan"), "velocity_max_abs_error": 1e-5})
    _inside(got, "velocity_max_abs_error")


def test_poiseuille_inside_at_its_defaults_outside_under_a_tighter_bound():
    r = _cached("poiseuille")              # the shipped case: 0.0040
    _inside(r.validation, "profile_rel_l2_error")
    _outside(_verdicts(r, "poiseuille", ["validation.max_error=0.002"]), "profile_rel_l2_error")


def test_ghia_outside_on_a_coarse_cavity_inside_under_a_looser_bound_and_none_off_the_table():
    r = _cached("lid_driven_cavity", ("lattice.resolution=16",))      # seen 0.0323 / 0.0363 of the lid speed: > 0.03
    _outside(r.validation, "ghia_u_max_abs_diff", "ghia_v_max_abs_diff")
    assert "Ghia, Ghia & Shin 1982, Re 100" in r.validation["ghia_u_max_abs_diff"]["reference"]
    _inside(_verdicts(r, "lid_driven_cavity", ["lattice.resolution=16", "validation.max_error=0.05"]),
            "ghia_u_max_abs_diff", "ghia_v_max_abs_diff")
    off = _run("lid_driven_cavity", ["lattice.resolution=16", "physics.reynolds=200", "time.steps=100",
                                     "steady.enabled=false"])      # Ghia et al. tabulate Re 100, 400, 1000, ...
    assert "ghia_note" in off.metrics and off.validation == {}


def test_schafer_turek_2d1_short_run_is_outside_and_the_published_figures_inside():
    r = _run("cylinder_2d1", ["lattice.resolution=10", "time.steps=300", "boundaries.ramp_time=0.5",
                              "steady.enabled=false"])
    _outside(r.validation, "drag_coefficient", "lift_coefficient", "pressure_difference_pa")
    assert r.validation["drag_coefficient"]["range"] == [5.57, 5.59]
    # GPU, D = 80, lattice velocity 0.025 (scripts/validate_lbm_gpu.py, cases/cylinder_2d1.toml): c_D 5.5726,
    # c_L 0.010928; the window means are what is judged where the run has them
    case = load_case(CASES / "cylinder_2d1.toml")
    measured = {"drag_coefficient": 5.60, "drag_coefficient_window_mean": 5.5726,
                "lift_coefficient_window_mean": 0.010928, "pressure_difference_pa": 0.1174}
    _inside(reference.verdicts(case, measured), "drag_coefficient_window_mean", "lift_coefficient_window_mean",
            "pressure_difference_pa")


def test_schafer_turek_2d2_short_run_outside_unmeasured_strouhal_outside_and_range_margin():
    over = ["lattice.resolution=10", "lattice.velocity=0.1", "time.steps=200", "time.output_interval=0",
            "time.monitor_interval=20"]
    r = _run("cylinder_2d2", over)
    # 200 steps: no shedding yet (c_L max 0.72), no two lift periods for a Strouhal number (NaN, outside)
    _outside(r.validation, "drag_coefficient_max", "lift_coefficient_max", "strouhal")
    assert math.isnan(r.validation["strouhal"]["value"])
    wide = _verdicts(r, "cylinder_2d2", over + ["validation.range_margin=1"])
    assert wide["lift_coefficient_max"]["range"] == pytest.approx([0.0, 2.02])
    assert wide["drag_coefficient_max"]["verdict"] == wide["lift_coefficient_max"]["verdict"] == "inside"
    assert "range widened by 100 %" in wide["strouhal"]["reference"]


def test_no_reference_gives_no_verdicts():
    r = _run("lid_driven_cavity", ["lattice.resolution=16", "time.steps=50", "steady.enabled=false",
                                   "validation.reference='none'"])
    assert r.validation == {} and not r.validation_failed
    assert not any(k.startswith("verdict_") for k in r.console_rows())


# ------------------------------------------------------------------------------------------------ FEM references


def test_manufactured_errors_inside_their_mesh_scaled_bounds_outside_tighter_ones():
    r = _cached("poisson_manufactured", ("mesh.nx=8",))      # error_l2 0.678 h^2, H1 2.44 h (module docstring)
    _inside(r.validation, "error_l2", "error_h1_seminorm", "probe_rel_error")
    h = r.derived["h_max"]
    assert r.validation["error_l2"]["range"][1] == pytest.approx(fem_verdicts.DEFAULT_L2_CONSTANT * h * h)
    assert r.validation["error_h1_seminorm"]["range"][1] == pytest.approx(fem_verdicts.DEFAULT_H1_CONSTANT * h)
    tight = _verdicts(r, "poisson_manufactured", ["mesh.nx=8", "output.l2_error_constant=0.5",
                                                  "output.h1_error_constant=2", "output.probe_tolerance=0.01"])
    _outside(tight, "error_l2", "error_h1_seminorm", "probe_rel_error")


def test_probe_reference_outside_on_a_coarse_cook_membrane_inside_under_a_looser_tolerance():
    r = _run("cook_membrane", ["mesh.nx=16"])                   # 9.9 % below 23.96 (nx = 32: 2.86 %, inside)
    _outside(r.validation, "probe_rel_error")
    assert r.validation["probe_rel_error"]["reference"] == "output.probe_reference 23.96 at the probe"
    _inside(_verdicts(r, "cook_membrane", ["mesh.nx=16", "output.probe_tolerance=0.15"]), "probe_rel_error")


def test_fem_case_without_a_reference_gives_no_verdicts():
    r = _run("heat_plate_with_hole")
    assert r.validation == {}


# ------------------------------------------------------------------------------------------------ case fields


@pytest.mark.parametrize("case, override, words", [
    ("lid_driven_cavity", "validation.max_error=0", "greater than 0"),
    ("cylinder_2d1", "validation.max_error=0.1", "use validation.range_margin"),
    ("lid_driven_cavity", "validation.reference='none'", None),
    ("lid_driven_cavity", "validation.range_margin=0.1", "use validation.max_error"),
    ("cook_membrane", "output.l2_error_constant=1", "problem.manufactured"),
    ("heat_plate_with_hole", "output.probe_tolerance=0.1", "output.probe_reference"),
    ("poisson_manufactured", "output.probe_tolerance=-1", "greater than 0"),
])
def test_bound_fields_refused_where_they_mean_nothing(case, override, words):
    overrides = [override] + (["validation.max_error=0.1"] if words is None else [])
    with pytest.raises(CaseError) as err:
        load_case(CASES / f"{case}.toml", overrides)
    text = str(err.value)
    assert ("there is no error to bound" if words is None else words) in text, text


def test_bound_fields_accepted_where_they_apply():
    assert load_case(CASES / "taylor_green.toml", ["validation.max_error=0.2"]).validation.max_error == 0.2
    assert load_case(CASES / "cylinder_2d2.toml", ["validation.range_margin=0.01"]).validation.range_margin == 0.01
    case = load_case(CASES / "poisson_manufactured.toml", ["output.l2_error_constant=2", "output.probe_tolerance=0.1"])
    assert (case.output.l2_error_constant, case.output.probe_tolerance) == (2.0, 0.1)


# ------------------------------------------------------------------------------------------------ files and CLI


def _cli(tmp_path, name, *overrides):
    out = tmp_path / name
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        code = main(["run", str(CASES / "taylor_green.toml"), "--backend", "numpy", "--out", str(out), "--quiet",
                     "--no-plots", *[a for o in overrides for a in ("--set", o)]])
    said = [str(w.message) for w in seen if WARNING in str(w.message)]
    return code, out, said


def test_cli_outside_warns_once_and_exits_0_and_writes_the_verdicts(tmp_path):
    code, out, said = _cli(tmp_path, "plain", *TG_SHORT)
    assert code == 0
    assert len(said) == 1 and "\n" not in said[0], said
    head = "taylor_green: a value outside the reference range: velocity_rel_l2_error "
    assert said[0].startswith(head), said[0]
    error = _tg_short_error(read_h5(out / "result.h5")["fields"]["velocity"])
    assert 0.01 < error < 0.05, error            # outside [0, 0.01]: 16 cells are coarse (second order, 0.004 at 32)
    assert float(said[0][len(head):].split()[0]) == pytest.approx(error, rel=5e-3)
    assert "[0, 0.01]" in said[0] and "analytic Taylor-Green" in said[0]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed"
    v = summary["validation"]["velocity_rel_l2_error"]
    assert set(v) == set(V.KEYS) and v["verdict"] == "outside" and v["range"] == [0.0, 0.01]
    assert v["value"] == pytest.approx(error, rel=1e-9) and v["by"] == pytest.approx(v["value"] - 0.01)
    h5 = read_h5(out / "result.h5")
    assert h5["validation"] == summary["validation"]
    assert h5["attrs"]["status"] == "completed"


def test_cli_strict_validation_exits_3(tmp_path, capsys):
    code, out, said = _cli(tmp_path, "strict", *TG_SHORT, "run.strict_validation=true")
    assert code == 3
    assert len(said) == 1 and "hpcsolve run exits 3" in said[0]
    err = capsys.readouterr().err
    assert "hpcsolve: error: taylor_green: validation failed (run.strict_validation = true)" in err
    assert "velocity_rel_l2_error" in err
    assert json.loads((out / "summary.json").read_text())["status"] == "completed"   # the result is written


def test_cli_strict_validation_inside_exits_0_without_a_warning(tmp_path):
    code, out, said = _cli(tmp_path, "inside", *TG_SHORT, "run.strict_validation=true", "validation.max_error=0.05")
    assert code == 0 and said == []
    assert json.loads((out / "summary.json").read_text())["validation"]["velocity_rel_l2_error"]["verdict"] == "inside"
    assert read_h5(out / "result.h5")["validation"]["velocity_rel_l2_error"]["verdict"] == "inside"


def test_command_line_prints_one_warning_line(tmp_path):
    """The real command line: the warning is one line in the form of hpcsolve's errors."""
    cmd = [sys.executable, "-m", "hpcsolve.cli", "run", str(CASES / "taylor_green.toml"), "--backend", "numpy",
           "--out", str(tmp_path / "o"), "--quiet", "--no-plots"] + [a for o in TG_SHORT for a in ("--set", o)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "MPLBACKEND": "Agg"}, timeout=600)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    said = [ln for ln in lines if WARNING in ln]
    assert len(said) == 1 and said[0].startswith("hpcsolve: warning: taylor_green: a value outside"), proc.stderr
    assert not any("warnings.warn" in ln for ln in lines), proc.stderr
