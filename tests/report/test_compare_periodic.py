"""What a periodic flow is judged by in ``hpcsolve compare`` (hpcsolve/report/periodic.py): synthetic periodic runs
with a known phase lag (the snapshot error large, the phase-aligned error about 0; the alignment off by half a period
would not be), the quantities of interest in the verdict, a real tiny vortex street on NumPy, and a cavity whose
verdicts are what they were."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from hpcsolve.core.precision import POLICIES
from hpcsolve.core.results import Result, Snapshot
from hpcsolve.report import compare as cmp
from hpcsolve.report import periodic
from hpcsolve.report.comparison import Comparison

CASES = Path(__file__).parents[2] / "cases"
F = 3.0                     # shedding frequency of the synthetic flow, Hz: period 1/3 s
END = 4.0                   # end time: the second half (2-4 s) holds 6 whole periods


def _state(t: float, lag: float, x: np.ndarray) -> dict:
    """A travelling wave on a mean flow: the state at time t of a flow lagging the reference by ``lag`` seconds."""
    w = np.sin(2 * np.pi * (F * (t - lag) - x))
    return {"velocity": np.stack([1.0 + 0.5 * w, 0.3 * np.cos(2 * np.pi * (F * (t - lag) - x))]),
            "vorticity": 0.8 * w + 0.1 * x}


def _result(lag: float = 0.0, *, out_every: float = 0.05, precision: str = "fp64", qoi=None) -> Result:
    """A periodic run: lift sin(2 pi F (t - lag)) sampled 40 times a period, snapshots every ``out_every`` s, the
    end-time fields, and the 2-D quantities of interest (``qoi``: name -> value) with their verdicts."""
    t = np.arange(0.0, END + 1e-9, 1 / (40 * F))
    x = np.linspace(0, 1, 64, endpoint=False)[None, :] * np.ones((8, 1))
    snaps = [Snapshot(float(ts), int(round(ts * 1000)), _state(ts, lag, x))
             for ts in np.arange(out_every, END + 1e-9, out_every)]
    qoi = qoi or {"drag_coefficient_max": 3.235, "lift_coefficient_max": 0.9935, "strouhal": 0.3}
    ranges = {"drag_coefficient_max": [3.22, 3.24], "lift_coefficient_max": [0.99, 1.01], "strouhal": [0.295, 0.305]}
    validation = {k: {"value": v, "range": ranges[k], "verdict": "inside" if ranges[k][0] <= v <= ranges[k][1]
                      else "outside"} for k, v in qoi.items()}
    return Result("cylinder_2d2", "lbm", "numpy", precision, fields=_state(END, lag, x), snapshots=snaps,
                  series={"time": t, "lift_coefficient": np.sin(2 * np.pi * F * (t - lag)),
                          "drag_coefficient": 3.2 + 0.03 * np.cos(4 * np.pi * F * (t - lag))},
                  metrics={"simulated_time_s": END, **qoi}, validation=validation)


def _circular(a: float, b: float) -> float:
    """Distance of two phases (fractions of a period) on the circle."""
    d = (a - b) % 1.0
    return min(d, 1.0 - d)


def _comparison(runs: dict, tolerance=1e-3, fields=None) -> Comparison:
    """The Comparison compare() makes of these results (its own _run_record), the first the reference, each
    timed three times (fp32 twice as fast)."""
    ref = runs[next(iter(runs))]
    out = []
    for i, (label, res) in enumerate(runs.items()):
        backend, prec = label.split("/")
        times = [1.0, 1.01, 1.02] if i == 0 else [0.5, 0.505, 0.51]
        extra = {"setup_times": [], "policy": POLICIES[prec], "judged": fields}
        out.append(cmp._run_record(backend, prec, None, res, times, SimpleNamespace(memory_bytes=None), extra,
                                   ref, reference=i == 0))
    for r in out:
        r.speedup = out[0].wall_s / r.wall_s
    return Comparison("cylinder_2d2", "lbm", tolerance, out, fields=fields)


def test_phase_of_a_known_lift():
    """Upward crossings of sin(2 pi F (t - lag)) at lag + k / F: the phase of t is frac(F (t - lag))."""
    for lag in (0.0, 0.1, 0.21):
        c, why = periodic.cycle(_result(lag))
        assert why == "" and c.period == pytest.approx(1 / F, rel=1e-6)
        for t in (2.5, 3.33, 3.61, END):      # to 1e-3 of a period: the window's mean is its samples'
            assert _circular(c.phase(t), F * (t - lag)) < 1e-3
        assert c.phase(0.5) is None                 # before the second half: no phase


def test_phase_lag_gives_a_large_snapshot_error_and_a_zero_phase_aligned_one():
    """The run lags the reference by 0.1 s = 0.3 of a period: its end state is the reference's state at 3.9 s, a
    snapshot of the reference. Snapshot error about 1; phase-aligned about 0 (phase found from the sampled lift)."""
    comp = _comparison({"numpy/fp64": _result(0.0), "numpy/fp32": _result(0.1, precision="fp32")})
    run = comp.runs[1]
    assert run.field_errors["vorticity"]["rel_l2"] > 0.5 and run.snapshot_errors["velocity"] > 0.1
    aligned = run.periodic["aligned"]
    assert aligned["errors"]["vorticity"]["rel_l2"] < 1e-4 and aligned["errors"]["velocity"]["rel_l2"] < 1e-4
    assert _circular(aligned["phase"], F * (END - 0.1)) < 1e-3
    assert aligned["phase_gap"] < 1e-3 and "t = 3.9 s" in aligned["how"]
    # the verdict uses it: fp32 is judged by its phase-aligned error and its quantities of interest (equal: 0)
    assert run.error < 1e-4 and {run.periodic["judged_how"][k] for k in ("velocity", "vorticity")} == {"phase-aligned"}
    assert comp.recommendation()["label"] == "numpy/fp32"
    verdict = comp.verdicts()["numpy/fp32"]
    assert verdict.startswith("recommended") and "judged at the same phase of the cycle" in verdict
    assert "St 0.3, 0.0e+00 from the reference's, inside [0.295, 0.305]" in verdict
    row = comp.rows()[1]
    assert row["snapshot_err_L2"] == f"{max(run.snapshot_errors.values()):.2e}"
    assert float(row["snapshot_err_L2"]) > 0.5 and float(row["err_vs_fp64_L2"].split()[0]) < 1e-4


def test_alignment_off_by_half_a_period_is_caught():
    """The reference's state half a period away from the run's phase differs by the whole oscillation: an
    alignment that took it would give an error of order 1, as the true half-period lag does at the same time."""
    lag = 0.5 / F
    comp = _comparison({"numpy/fp64": _result(0.0), "numpy/fp32": _result(lag, precision="fp32")})
    run = comp.runs[1]
    assert run.snapshot_errors["vorticity"] > 1.0            # at the same time: opposite phases
    assert run.periodic["aligned"]["errors"]["vorticity"]["rel_l2"] < 1e-4
    x = np.linspace(0, 1, 64, endpoint=False)[None, :] * np.ones((8, 1))
    half_off = periodic.field_error(_state(END, lag, x)["vorticity"], _state(END - lag + 0.5 / F, 0.0, x)["vorticity"])
    assert half_off["rel_l2"] > 1.0


def test_interpolated_phase_between_snapshots_and_an_unresolved_phase_falls_back():
    """A lag of 0.123 s is no whole number of snapshot intervals: the reference is interpolated in phase between
    the two snapshots either side (0.05 s apart: 0.15 of a period, across cycles the phases are denser), the
    error small against the snapshot error. Snapshots every 1 s (3 whole periods) all sit at one phase: the phase
    is not resolved, and the run is judged by its snapshot error, saying so."""
    comp = _comparison({"numpy/fp64": _result(0.0), "numpy/fp32": _result(0.123, precision="fp32")})
    run = comp.runs[1]
    a = run.periodic["aligned"]
    assert "interpolated in phase" in a["how"] and a["bracket"] <= periodic.MAX_BRACKET
    assert a["errors"]["vorticity"]["rel_l2"] < 0.05 * run.snapshot_errors["vorticity"]
    sparse = _comparison({"numpy/fp64": _result(0.0, out_every=1.0),
                          "numpy/fp32": _result(0.123, out_every=1.0, precision="fp32")})
    run = sparse.runs[1]
    assert run.periodic["fallback"].startswith("the phase is not resolved")
    assert run.error == pytest.approx(max(run.snapshot_errors.values()))
    assert "fields by their snapshot error: the phase is not resolved" in sparse.verdicts()["numpy/fp32"]
    assert run.error_text().endswith("(at the same time: the phase is not aligned)")


def test_quantities_of_interest_decide_where_they_differ(tmp_path):
    """A run in phase with the reference but with c_D max 0.5 % higher: judged by that difference, above the
    tolerance; outside the published range where its value is. JSON and markdown carry both errors."""
    qoi = {"drag_coefficient_max": 3.235 * 1.005, "lift_coefficient_max": 0.9935, "strouhal": 0.3}
    comp = _comparison({"numpy/fp64": _result(0.0), "numpy/fp32": _result(0.0, precision="fp32", qoi=qoi)})
    run = comp.runs[1]
    assert run.error_field == "drag_coefficient_max" and run.error == pytest.approx(0.005, rel=1e-9)
    assert not comp.acceptable(run) and comp.recommendation()["label"] == "numpy/fp64"
    verdict = comp.verdicts()["numpy/fp32"]
    assert verdict.startswith("field error 0.005 in drag_coefficient_max (against the reference's value) above")
    assert "c_D max 3.251, 5.0e-03 from the reference's, outside [3.22, 3.24]" in verdict
    comp.write(tmp_path)
    data = json.loads((tmp_path / "comparison.json").read_text())
    p = data["runs"][1]["periodic"]
    assert p["qoi"]["drag_coefficient_max"]["rel_diff"] == pytest.approx(0.005)
    assert p["judged_errors"]["drag_coefficient_max"] == pytest.approx(0.005)
    assert data["runs"][1]["error"] == pytest.approx(0.005)
    assert "periodic flow" in data["error_definition"]
    md = comp.table(wide=True)        # issue 50: the wide table (comparison.md holds the compact one)
    assert "snapshot_err_L2" in md and "qoi_vs_ref" in md and "drag_coefficient_max 5.0e-03" in md
    assert (tmp_path / "plots" / "drift.png").exists()
    # with --fields velocity only the velocity (phase-aligned) is judged
    only = _comparison({"numpy/fp64": _result(0.0), "numpy/fp32": _result(0.0, precision="fp32", qoi=qoi)},
                       fields=["velocity"])
    assert only.runs[1].error < 1e-12 and only.runs[1].error_field == ""


def test_a_run_without_a_cycle_falls_back_and_a_missing_strouhal_number_rejects_it():
    """The reference sheds, the run's lift stays flat (no cycle, no Strouhal number): its fields are judged at the
    same time and its missing St is an infinite difference."""
    flat = _result(0.0, precision="fp32")
    flat.series["lift_coefficient"] = np.zeros_like(flat.series["time"])
    del flat.metrics["strouhal"]
    comp = _comparison({"numpy/fp64": _result(0.0), "numpy/fp32": flat})
    run = comp.runs[1]
    assert run.periodic["fallback"].startswith("the run's lift is not periodic (its lift crosses its mean upward 0")
    assert math.isinf(run.error) and run.error_field == "strouhal" and not comp.acceptable(run)
    assert "St not measured" in comp.verdicts()["numpy/fp32"]


def test_not_periodic_signals():
    """A steady flow's small lingering wave (swing under 5 % of the drag), irregular crossings and no lift series
    are not periodic."""
    r = _result(0.0)
    r.series["lift_coefficient"] = 1e-3 * np.sin(2 * np.pi * F * r.series["time"])
    assert periodic.cycle(r)[0] is None and "swings" in periodic.cycle(r)[1]
    t = r.series["time"]
    r.series["lift_coefficient"] = np.sin(2 * np.pi * F * t * (1 + 0.3 * (t > 3)))    # period jumps by 30 %
    assert periodic.cycle(r)[0] is None and "vary" in periodic.cycle(r)[1]
    assert periodic.cycle(Result("cavity", "lbm", "numpy", "fp64"))[0] is None


SHEDDING = """solver = "lbm"
name = "small_shedding"
description = "a tiny vortex street (NumPy, about 2 s a run)"
[physics]
reynolds = 60.0
length = 0.1
velocity = 1.0
[lattice]
resolution = 10
velocity = 0.12
[domain]
length = 0.8
height = 0.4
[boundaries]
left = "inlet"
right = "outlet"
bottom = "wall"
top = "wall"
inlet_profile = "parabolic"
outlet = "characteristic"
ramp_time = 0.3
[[obstacles]]
shape = "circle"
center = [0.2, 0.18]
diameter = 0.1
[time]
end_time = 6.0
monitor_interval = 5
output_interval = 0.05
[validation]
reference = "none"
"""


def test_a_real_vortex_street_on_numpy(tmp_path):
    """A cylinder at Re 60 on 82 x 42 cells sheds from about 3 s (period 0.364 s): fp32 is judged at the same phase
    of the reference's cycle; its phase-aligned error is its own (round-off), and taking the reference's state half
    a period away would give the whole oscillation."""
    case = tmp_path / "shed.toml"
    case.write_text(SHEDDING)
    comp = cmp.compare(case, backends=["numpy"], precisions=["fp32"], repeats=1, warmup=False)
    ref, run = comp.runs
    p = run.periodic
    assert ref.periodic["reference_cycle"]["period_s"] == pytest.approx(0.364, abs=0.01)
    assert p["fallback"] == "" and p["cycle"]["period_s"] == pytest.approx(p["reference_cycle"]["period_s"], rel=1e-3)
    aligned = p["aligned"]["errors"]["vorticity"]["rel_l2"]
    assert aligned < 1e-4 and run.judged_errors["vorticity"] == aligned
    assert "judged at the same phase of the cycle" in comp.verdicts()["numpy/fp32"]
    # the reference's state half a period before its end: a broken alignment would be this far off
    res, rref = run.result, ref.result
    half = rref.metrics["simulated_time_s"] - 0.5 * p["reference_cycle"]["period_s"]
    snap = min(rref.snapshots, key=lambda s: abs(s.time - half))
    assert periodic.field_error(res.fields["vorticity"], snap.fields["vorticity"])["rel_l2"] > 100 * aligned
    assert run.drift["time"] and p["drift"]["time"] and p["drift"]["field"] == "velocity"


def test_a_cavity_is_not_periodic_and_its_verdicts_are_the_snapshot_ones():
    comp = cmp.compare(CASES / "lid_driven_cavity.toml", backends=["numpy"], precisions=["fp32"], repeats=1,
                       warmup=False, overrides=["lattice.resolution=16", "time.end_time=1", "steady.enabled=false",
                                                "time.output_interval=0.5"])
    run = comp.runs[1]
    assert run.periodic == {} and run.judged_errors == run.snapshot_errors
    assert run.error == max(e["rel_l2"] for e in run.field_errors.values())
    assert "periodic" not in comp.verdicts()["numpy/fp32"] and "periodic" not in comp.table()
    assert all(not row["snapshot_err_L2"] and not row["qoi_vs_ref"] for row in comp.rows())


def test_a_phase_beyond_the_reference_states_is_extrapolated_from_the_two_nearest():
    """The reference's states at phases 0.48 and 0.50 (no state beyond): a run at phase 0.505 is compared with the
    linear extrapolation 1.25 x state(0.50) - 0.25 x state(0.48), exact for a field linear in phase; a run 0.02
    beyond (more than half the spacing) is not extrapolated."""
    f = lambda ph: {"u": np.full(4, 1.0 + 2.0 * ph)}
    cands = [(0.48, 1.0, f(0.48)), (0.50, 2.0, f(0.50)), (0.10, 3.0, f(0.10))]
    pick, gap, bracket = periodic._pick(cands, 0.505, nearest=False)
    assert [(c[0], w) for c, w in pick] == [(0.50, pytest.approx(1.25)), (0.48, pytest.approx(-0.25))]
    assert gap == pytest.approx(0.005) and bracket == pytest.approx(-0.02)
    value = sum(w * c[2]["u"] for c, w in pick)
    assert np.allclose(value, 1.0 + 2.0 * 0.505)
    assert periodic._pick(cands, 0.52, nearest=False) is None
