"""compare's reference (--reference / [compare] reference, auto, the cross-check on a reduced copy) and its cost
before running (--dry-run, --budget, predicted times), on tiny NumPy cases. Estimates are injected where a decision
depends on them (budget, reduction), never timed."""

import json
import math
from pathlib import Path

import pytest

from hpcsolve import cli
from hpcsolve.core.cases import load_case
from hpcsolve.core.errors import CaseError
from hpcsolve.report import compare_reference
from hpcsolve.report.compare import compare, plan
from hpcsolve.report.comparison import Comparison, Run, field_error

CASES = Path(__file__).parents[2] / "cases"
CAVITY = CASES / "lid_driven_cavity.toml"
TINY = ["lattice.resolution=16", "time.end_time=2", "time.output_interval=0.5", "steady.enabled=false"]
SETS = [a for s in TINY for a in ("--set", s)]


def _cli(capsys, *args):
    code = cli.main(["compare", str(CAVITY), *SETS, *args])
    out, err = capsys.readouterr()
    return code, out, err


def _inject(monkeypatch, seconds: dict, steps: int | None = None):
    """compare_reference.estimate answers ``seconds[precision]`` (the decisions under test depend on estimates)."""
    calls = []

    def fake(case, backend, precision):
        calls.append((backend, precision))
        return seconds[precision], f"injected {seconds[precision]} s", steps
    monkeypatch.setattr(compare_reference, "estimate", fake)
    return calls


@pytest.fixture(scope="module")
def fp32_reference():
    """A comparison judged against numpy/fp32 (asked for): cross-checked against numpy/fp64 on the case itself."""
    return compare(CAVITY, backends=["numpy"], precisions=["fp64"], tolerance=1e-3, overrides=TINY,
                   reference="numpy/fp32", repeats=1, warmup=False)


def test_an_fp32_reference_is_labelled_cross_checked_and_judges_the_others(fp32_reference):
    comp = fp32_reference
    info = comp.to_dict()
    assert info["reference"] == "numpy/fp32" and [r.label for r in comp.runs] == ["numpy/fp32", "numpy/fp64"]
    ref, fp64 = comp.runs
    assert ref.is_reference and ref.error == 0.0 and not fp64.is_reference
    ri = info["reference_info"]
    assert ri["requested"] == "numpy/fp32" and ri["fp64"] is False and "not fp64" in ri["note"]
    check = ri["cross_check"]
    assert check["status"] == "passed" and check["against"] == "numpy/fp64" and check["overrides"] == []
    assert check["threshold"] == pytest.approx(1e-3 * 0.01)
    # the cross-check ran the same full case: its fp32-vs-fp64 velocity error is the fp64 row's error against the
    # fp32 reference, up to the normalization (by the fp64 field there, by the fp32 field here)
    assert 0 < check["errors"]["velocity"] <= check["threshold"]
    assert check["errors"]["velocity"] == pytest.approx(fp64.field_errors["velocity"]["rel_l2"], rel=1e-3)
    assert "vs the numpy/fp32 run" in info["error_definition"]
    table = comp.table()
    assert "Reference: **numpy/fp32** (asked for with --reference)" in table and "**passed**" in table
    # the run's validation verdicts (Result.validation, where the run has them) are kept with the run
    assert all(r.validation == dict(getattr(r.result, "validation", None) or {}) for r in comp.runs)


def test_auto_without_a_gpu_is_numpy_fp64_and_says_no_cross_check_is_needed(tmp_path, capsys):
    code, out, err = _cli(capsys, "--precisions", "fp32", "--repeats", "1", "--no-warmup", "--quiet",
                          "--out", str(tmp_path / "c"))
    assert code == 0 and err == ""      # --quiet: no plan lines
    data = json.loads((tmp_path / "c" / "comparison.json").read_text())
    assert data["reference"] == "numpy/fp64" and data["reference_info"]["requested"] == "auto"
    assert data["reference_info"]["cross_check"] == {"status": "not needed", "why": "the reference is numpy/fp64 itself"}
    assert data["reference_info"]["estimated"] is False and data["runs"][0]["predicted_s"] is None
    assert "Cross-check: not needed (the reference is numpy/fp64 itself)." in out


def test_the_cross_check_runs_a_reduced_copy_chosen_from_the_estimate(monkeypatch):
    # numpy/fp64 predicted 1000 s for 320 steps: CROSS_CHECK_SECONDS (8 s) of it is 2 steps, raised to the minimum
    _inject(monkeypatch, {"fp64": 1000.0, "fp32": 1.0}, steps=320)
    comp = compare(CAVITY, backends=["numpy"], precisions=["fp64"], tolerance=1e-3, overrides=TINY,
                   reference="numpy/fp32", repeats=1, warmup=False)
    check = comp.reference_info["cross_check"]
    n = compare_reference.CROSS_CHECK_MIN_STEPS
    assert check["overrides"] == [f"time.steps={n}"] and f"the first {n} of 320 steps" in check["reduction"]
    assert check["predicted_s"] == pytest.approx(1000.0 * n / 320)
    assert check["status"] == "passed"
    # fewer steps, less fp32 rounding: the reduced copy's error is below the full run's (the fp64 row's)
    full = comp.runs[1].field_errors["velocity"]["rel_l2"]
    assert 0 < check["errors"]["velocity"] < full
    # only the estimate the reduction needed was made (no progress lines, no budget), and it is kept with its row
    assert comp.runs[1].predicted_s == 1000.0 and comp.runs[0].predicted_s is None


def test_a_failed_cross_check_is_a_failed_reference_nothing_runs_and_exit_3(tmp_path, capsys):
    # tolerance 1e-9: agreement needed within 1e-11, which an fp32 reference cannot give
    code, out, err = _cli(capsys, "--reference", "numpy/fp32", "--precisions", "fp64", "fp16s", "--tolerance", "1e-9",
                          "--quiet", "--out", str(tmp_path / "c"))
    assert code == 3
    data = json.loads((tmp_path / "c" / "comparison.json").read_text())
    assert data["status"] == "reference_failed" and data["runs"] == []
    check = data["reference_info"]["cross_check"]
    assert check["status"] == "failed" and check["error"] > check["threshold"] == pytest.approx(1e-11)
    assert "--reference numpy/fp64" in data["reference_failed"] and "cross-check" in data["reference_failed"]
    assert set(data["skipped"]) == {"numpy/fp32", "numpy/fp64", "numpy/fp16s"}
    assert data["recommendation"]["label"] is None
    assert "failed reference" in err and "**failed**" in out
    assert not (tmp_path / "c" / "numpy-fp64").exists()       # no configuration ran


def test_budget_skips_a_configuration_as_a_row_with_the_reason(monkeypatch):
    _inject(monkeypatch, {"fp64": 0.5, "fp32": 0.4, "fp16s": 50.0})
    comp = compare(CAVITY, backends=["numpy"], precisions=["fp32", "fp16s"], overrides=TINY, repeats=1, warmup=False,
                   budget=10.0)
    rows = {r.label: r for r in comp.runs}
    assert [r.label for r in comp.runs] == ["numpy/fp64", "numpy/fp32", "numpy/fp16s"]
    skipped = rows["numpy/fp16s"]
    assert skipped.status == "skipped" and skipped.predicted_s == 50.0 and skipped.result is None
    assert "past the budget 10 s (--budget)" in skipped.message
    assert comp.verdicts()["numpy/fp16s"].startswith("skipped: predicted 50 s")
    assert rows["numpy/fp32"].status == "completed" and rows["numpy/fp32"].predicted_s == 0.4
    assert comp.recommendation()["label"] in ("numpy/fp64", "numpy/fp32")
    assert comp.reference_info["budget_s"] == 10.0 and "Budget: 10 s per run (--budget)" in comp.table()


def test_a_reference_predicted_past_the_budget_is_refused_before_anything_runs(monkeypatch, tmp_path, capsys):
    calls = _inject(monkeypatch, {"fp64": 30.0, "fp32": 0.1})
    code, out, err = _cli(capsys, "--precisions", "fp32", "--budget", "5", "--out", str(tmp_path / "c"))
    assert code == 2 and "--budget" in err and "numpy/fp64 is predicted 30 s" in err
    assert not (tmp_path / "c").exists() and ("numpy", "fp64") in calls
    with pytest.raises(CaseError, match="budget"):
        compare_reference.check_budget(-1)


def test_dry_run_prints_every_predicted_time_and_runs_nothing(monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)
    _inject(monkeypatch, {"fp64": 2.0, "fp32": 1.5, "fp16s": 400.0})
    code, out, err = _cli(capsys, "--precisions", "fp32", "fp16s", "--budget", "100", "--repeats", "3", "--dry-run")
    assert code == 0 and not (tmp_path / "results").exists()
    lines = out.splitlines()
    assert "compare: reference numpy/fp64 (auto: fp64 on the fastest usable backend; NumPy is the only one here)" in lines
    assert "compare: predicted numpy/fp64 (reference): 2 s per run" in lines
    assert "compare: predicted numpy/fp32: 1.5 s per run" in lines
    assert any(x.startswith("compare: predicted numpy/fp16s: 400 s (6 min 40 s) per run: skipped: predicted") for x in lines)
    # the total: 4 runs (warm-up + 3 timed) of each configuration that runs
    assert any(x.startswith(f"compare: predicted total: about {4 * (2.0 + 1.5):.3g} s") for x in lines)


def test_the_plan_lines_are_progress_lines_at_the_start_of_a_comparison(monkeypatch, tmp_path, capsys):
    _inject(monkeypatch, {"fp64": 0.25, "fp32": 0.2})
    code, out, err = _cli(capsys, "--precisions", "fp32", "--repeats", "1", "--no-warmup", "--out", str(tmp_path / "c"))
    assert code == 0
    assert err.index("compare: predicted numpy/fp64 (reference): 0.25 s per run") < err.index("compare: [1/2]")
    data = json.loads((tmp_path / "c" / "comparison.json").read_text())
    assert [r["predicted_s"] for r in data["runs"]] == [0.25, 0.2]


@pytest.mark.parametrize("value", ["cupy", "numpy/fp99", "foo/fp64", "numpy/fp64/x", "", "numpy/mixed"])
def test_bad_references_are_refused_naming_the_option_and_the_forms(value, capsys):
    code, out, err = _cli(capsys, "--reference", value, "--dry-run")
    assert code == 2 and "--reference" in err and "BACKEND/PRECISION" in err and "numpy/fp64" in err


def test_the_case_reference_is_validated_under_its_own_name(capsys):
    code, out, err = _cli(capsys, "--set", 'compare.reference="numpy/fp99"', "--dry-run")
    assert code == 2 and "compare.reference" in err and "numpy/fp99" in err
    # a bad value is a bad case (validate refuses it too, issue 49), --reference or not
    code, out, err = _cli(capsys, "--set", 'compare.reference="numpy/fp99"', "--reference", "numpy/fp32",
                          "--dry-run", "--precisions", "fp64")
    assert code == 2 and "compare.reference" in err and "numpy/fp99" in err
    # --reference wins over the case's value
    code, out, err = _cli(capsys, "--set", 'compare.reference="numpy/fp64"', "--reference", "numpy/fp32",
                          "--dry-run", "--precisions", "fp64")
    assert code == 0 and "compare: reference numpy/fp32 (asked for with --reference)" in out


def test_a_reference_on_a_backend_not_usable_here_is_refused():
    from hpcsolve.core import backends
    missing = [b for b in backends.BACKENDS if not backends.probe(b).available]
    if not missing:
        pytest.skip("every backend is usable here")
    with pytest.raises(CaseError, match="cannot run here") as exc:
        plan(CAVITY, backends=["numpy"], overrides=TINY, reference=f"{missing[0]}/fp64")
    assert exc.value.field == "--reference"


def test_fem_reduction_coarsens_the_generator_mesh_by_the_cost_rule():
    case = load_case(CASES / "poisson_manufactured.toml", ["mesh.nx=64"])
    # 500 s at nx 64: each halving divides by 4^1.5 = 8; 500/8 = 62.5, 500/64 = 7.8 <= 8 (CROSS_CHECK_SECONDS) -> nx 16
    over, text, pred = compare_reference.reduce_for_check(case, 500.0)
    assert over[0] == "mesh.nx=16" and "4x coarser" in text and pred == pytest.approx(500.0 / 64)
    assert case.with_overrides(*over).mesh.nx == 16          # a valid case
    over, text, pred = compare_reference.reduce_for_check(case, 5.0)   # within the cross-check's time: itself
    assert over == [] and "the case itself" in text and pred == 5.0


def test_outside_range_validation_verdicts_show_in_the_table_and_json():
    inside = {"value": 3.23, "range": [3.22, 3.24], "verdict": "inside", "by": 0.0, "reference": "Schafer-Turek"}
    out = {"value": 3.44, "range": [3.22, 3.24], "verdict": "outside", "by": 0.2, "reference": "Schafer-Turek"}
    runs = [Run("numpy", "fp64", "completed", wall_s=1.0, times=[1.0], reference_run=True,
                validation={"c_d_max": inside}),
            Run("numpy", "fp32", "completed", wall_s=1.0, times=[1.0], reference_run=False,
                validation={"c_d_max": out, "c_l_max": inside},
                field_errors={"velocity": field_error([1.0, 2.0], [1.0, 2.0])})]
    comp = Comparison("c", "lbm", 1e-3, runs)
    rows = comp.rows()
    assert rows[0]["outside_published_range"] == ""
    assert rows[1]["outside_published_range"] == "c_d_max 3.44 outside [3.22, 3.24]"
    assert "outside_published_range" in comp.table(wide=True)       # issue 50: a column of the wide table
    assert comp.to_dict()["runs"][1]["validation"]["c_d_max"]["verdict"] == "outside"
    assert math.isfinite(comp.runs[1].error)


def test_long_runs_timed_once_are_compared_by_their_times():
    """Configurations timed once because their runs are long (LONG_RUN_S): a run within the tolerance that is at least
    MIN_GAIN faster is recommended (the reference with one 23 s run, fp32 with one 12 s run); short runs timed once
    still give no verdict on speed; the reference alone within the tolerance says that the others are outside it."""
    from hpcsolve.report import comparison as cmpn

    def runs(ref_t, fp32_t, fp32_err=1e-5):
        ref = Run("cupy", "fp64", "completed", wall_s=ref_t, times=[ref_t], reference_run=True)
        fp32 = Run("cupy", "fp32", "completed", wall_s=fp32_t, times=[fp32_t], reference_run=False,
                   field_errors={"velocity": field_error([1.0, 1.0 + fp32_err], [1.0, 1.0])})
        return Comparison("c", "lbm", 1e-3, [ref, fp32])

    assert cmpn.LONG_RUN_S == 10.0
    long_pair = runs(23.4, 12.2)
    assert long_pair.runs[0].timed_long and long_pair.runs[1].timed_long
    rec = long_pair.recommendation()
    assert rec["label"] == "cupy/fp32" and "faster" in rec["why"]
    assert runs(23.4, 22.0).recommendation()["label"] == "cupy/fp64"      # 6 % faster: below MIN_GAIN
    short = runs(2.0, 1.0)                                                  # short runs timed once: no speed verdict
    assert not short.runs[1].timed_long and short.recommendation()["label"] == "cupy/fp64"
    assert "fewer than 3 timings" in short.recommendation()["why"]
    alone = runs(23.4, 12.2, fp32_err=5e-3).recommendation()                # fp32 outside the tolerance
    assert alone["label"] == "cupy/fp64" and "every other configuration is outside the tolerance" in alone["why"]
    # a long reference timed once beside a short run timed 3 times: both speeds are known, the short one wins
    ref = Run("numpy", "fp64", "completed", wall_s=30.0, times=[30.0], reference_run=True)
    fast = Run("cupy", "fp32", "completed", wall_s=2.01, times=[2.0, 2.01, 2.02], reference_run=False,
               field_errors={"velocity": field_error([1.0, 1.00001], [1.0, 1.0])})
    mixed = Comparison("c", "lbm", 1e-3, [ref, fast])
    assert ref.speed_known and fast.speed_known and fast.faster_than(ref) and not ref.faster_than(fast)
    assert mixed.recommendation()["label"] == "cupy/fp32"


@pytest.mark.parametrize("usable, run_backend, chosen, others", [
    ({"numpy"}, "auto", ["numpy"], []),
    ({"numpy", "cupy", "numba-cuda"}, "auto", ["numpy", "cupy"], ["numba-cuda"]),
    ({"numpy", "numba-cuda"}, "auto", ["numpy", "numba-cuda"], []),
    ({"numpy", "cupy", "numba-cuda"}, "numba-cuda", ["numpy", "numba-cuda"], ["cupy"]),   # the case's run.backend
    ({"numpy", "numba-cuda"}, "cupy", ["numpy", "numba-cuda"], []),        # named but not usable here: auto's
])
def test_no_backends_named_compares_numpy_and_the_runs_default_backend(monkeypatch, usable, run_backend, chosen,
                                                                       others):
    """Without --backends: NumPy and the backend ``hpcsolve run`` takes for the case (its run.backend; auto: CuPy,
    else Numba-CUDA); another usable GPU backend is named in the plan, not run (on the H200 it doubled the 2D-2
    comparison)."""
    import types

    from hpcsolve.core import backends
    from hpcsolve.report import compare_inputs

    numpy_status = backends.probe("numpy")

    def fake(name):
        if name == "numpy":
            return numpy_status
        return types.SimpleNamespace(available=name in usable, simulator=False, reason="fake")

    monkeypatch.setattr(backends, "probe", fake)
    monkeypatch.setattr(backends.Backend, "status", property(lambda self: fake(self.name)))
    case = load_case(CAVITY, [*TINY, f"run.backend={run_backend}"])
    assert compare_inputs.default_backends(case) == (chosen, others)
    if others == ["numba-cuda"]:    # the plan says which ran by default and which was left out (a tiny cavity)
        monkeypatch.setattr(compare_reference, "estimate", lambda *a: (1.0, "fake", 10))
        p = plan(CAVITY, overrides=TINY, precisions=["fp64"], reference="numpy/fp64")
        assert p.backends_note == ("backends: numpy, cupy (by default: NumPy and the backend hpcsolve run takes; also "
                                   "usable here: numba-cuda, compared when named with --backends)")
        assert p.lines()[1] == p.backends_note and [c[0] for c in p.configs] == ["numpy", "cupy"]
