"""hpcsolve compare on small cases: one row per run, the reference has zero error against itself,
fp32 errors are positive and bounded, the recommendation respects the tolerance."""

import json
import math
from pathlib import Path

import pytest

from hpcsolve import cli
from hpcsolve.report.compare import compare

CASES = Path(__file__).parent.parent / "cases"
SMALL_CAVITY = ["lattice.resolution=24", "time.end_time=4", "time.output_interval=1", "steady.enabled=false"]


@pytest.fixture(scope="module")
def cavity_comparison():
    return compare(CASES / "lid_driven_cavity.toml", backends=["numpy"], precisions=["fp64", "fp32", "fp16s"],
                   tolerance=1e-3, overrides=SMALL_CAVITY)


def test_lbm_compare_rows_errors_and_drift(cavity_comparison):
    comp = cavity_comparison
    rows = {(r.backend, r.precision): r for r in comp.runs}
    assert set(rows) == {("numpy", "fp64"), ("numpy", "fp32"), ("numpy", "fp16s")}
    ref = rows["numpy", "fp64"]
    assert ref.is_reference and ref.error == 0.0
    fp32, fp16 = rows["numpy", "fp32"], rows["numpy", "fp16s"]
    assert 0 < fp32.error < 1e-4            # float32 rounding over a few hundred steps
    assert fp32.error < fp16.error < 5e-2   # 16-bit storage loses more, but stays usable here
    # drift: one error value per output time, all positive for fp32
    assert len(fp32.drift["time"]) >= 3 and all(e > 0 for e in fp32.drift["rel_l2"])
    assert "ghia_max_abs_diff" in fp32.reference_errors
    assert fp32.throughput["mlups"] > 0 and math.isfinite(fp32.speedup)
    table = comp.table()
    assert table.count("\n| numpy |") == 3
    rec = comp.recommendation()
    assert rec["precision"] in ("fp32", "fp16s") and rec["error"] <= 1e-3


def test_recommendation_is_none_when_no_run_meets_the_tolerance(cavity_comparison):
    cavity_comparison.tolerance = 0.0
    try:
        rec = cavity_comparison.recommendation()
    finally:
        cavity_comparison.tolerance = 1e-3
    assert rec["backend"] is None and "closest is numpy/fp32" in rec["why"]


def test_compare_cli_writes_table_json_and_plots(tmp_path, capsys):
    out = tmp_path / "cmp"
    code = cli.main(["compare", str(CASES / "lid_driven_cavity.toml"), "--backends", "numpy", "--precisions", "fp32",
                     "--tolerance", "1e-9", "--out", str(out), "--quiet", "--no-warmup"]
                    + [a for s in SMALL_CAVITY for a in ("--set", s)])
    assert code == 0
    data = json.loads((out / "comparison.json").read_text())
    assert [(r["backend"], r["precision"]) for r in data["runs"]] == [("numpy", "fp64"), ("numpy", "fp32")]
    assert data["recommendation"]["backend"] is None  # fp32 error ~1e-6 > 1e-9
    assert data["runs"][1]["error"] > 1e-9
    assert (out / "comparison.md").read_text().count("| numpy |") == 2
    for png in ("pareto.png", "drift.png"):
        assert (out / "plots" / png).stat().st_size > 1000
    assert (out / "numpy-fp32" / "result.h5").exists()
    assert "Recommendation: none" in capsys.readouterr().out


def test_compare_rejects_bad_tolerance_and_precision(capsys):
    assert cli.main(["compare", str(CASES / "lid_driven_cavity.toml"), "--tolerance", "-1"]) == 2
    assert "--tolerance: got -1.0" in capsys.readouterr().err
    assert cli.main(["compare", str(CASES / "lid_driven_cavity.toml"), "--precisions", "mixed"]) == 2
    assert "--precisions" in capsys.readouterr().err


def test_fem_compare_reports_residuals_and_prefers_converged_runs():
    comp = compare(CASES / "poisson_manufactured.toml", backends=["numpy"], precisions=["fp64", "fp32", "mixed"],
                   tolerance=1e-6, overrides=["mesh.nx=48"])
    runs = {r.precision: r for r in comp.runs}
    assert runs["fp64"].error == 0.0 and runs["fp64"].residuals["true_residual"] <= 1e-10
    # fp32 CG cannot reach rtol 1e-10: it stops at its floor, and its gap to the recursive residual shows
    assert runs["fp32"].status == "not_converged" and runs["fp32"].residuals["true_residual"] > 1e-7
    assert runs["mixed"].status == "converged" and runs["mixed"].residuals["true_residual"] <= 1e-10
    assert 0 < runs["mixed"].error < 1e-9 < runs["fp32"].error
    assert runs["fp32"].throughput["time_per_iteration_s"] > 0
    rec = comp.recommendation()
    assert (rec["backend"], rec["precision"]) == ("numpy", "mixed")  # fp32 is within 1e-6 but did not converge
    assert "true_residual" in comp.table()
