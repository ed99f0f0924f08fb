"""``hpcsolve compare --rejudge DIR``: a saved comparison judged again with another --tolerance, --fields or --judge,
running nothing (issue 50), its files written beside the original (DIR/rejudged) unless asked otherwise."""

from __future__ import annotations

import json

import pytest

from hpcsolve import cli
from hpcsolve.core.errors import CaseError
from hpcsolve.report import compare as cmpmod
from hpcsolve.report import compare_rejudge
from hpcsolve.report.comparison import Comparison, Run


def _no_run(*a, **k):
    raise AssertionError("a solver ran")


def _saved(tmp_path, judge="residual", disc=None):
    """A comparison written to tmp_path/c: fp64 the reference, fp32 measurably faster with error 3e-3 in velocity and
    1e-5 in pressure, a drag coefficient in the run folders' summary.json (not judged when saved)."""
    runs = []
    for prec, times, ev, ep, cd in (("fp64", [1.0, 1.02, 1.01], 0.0, 0.0, 5.58),
                                    ("fp32", [0.5, 0.52, 0.51], 3e-3, 1e-5, 5.5806)):
        r = Run("numpy", prec, status="converged", wall_s=sorted(times)[1], times=times, reference_run=prec == "fp64")
        r.field_errors = {"velocity": {"rel_l2": ev, "rel_max": ev}, "pressure": {"rel_l2": ep, "rel_max": ep}}
        r.drift = {"field": "velocity", "time": [1.0, 2.0], "rel_l2": [ev / 2 or 1e-16, ev or 1e-16]}
        r.speedup = 1.01 / r.wall_s
        runs.append(r)
        folder = tmp_path / "c" / f"numpy-{prec}"
        folder.mkdir(parents=True)
        (folder / "summary.json").write_text(json.dumps({"metrics": {"drag_coefficient": cd}}))
    comp = Comparison("cavity", "lbm", 1e-3, runs, judge=judge, discretisation=disc or {})
    comp.write(tmp_path / "c")
    return tmp_path / "c", comp


def test_a_looser_tolerance_changes_the_recommendation_and_nothing_runs(tmp_path, monkeypatch, capsys):
    """Saved at tolerance 1e-3: fp32 (3e-3) is rejected and fp64 recommended. Re-judged at 1e-2: fp32, measurably
    faster, is recommended; no solver ran (run_case raises), the original files are unchanged and the new ones are
    in DIR/rejudged."""
    monkeypatch.setattr(cmpmod.runmod, "run_case", _no_run)
    folder, comp = _saved(tmp_path)
    assert comp.recommendation()["label"] == "numpy/fp64"
    before = (folder / "comparison.json").read_bytes(), (folder / "comparison.md").read_bytes()
    assert cli.main(["compare", "--rejudge", str(folder), "--tolerance", "1e-2"]) == 0
    out = capsys.readouterr().out
    assert "Recommendation: **numpy / fp32**" in out
    data = json.loads((folder / "rejudged" / "comparison.json").read_text())
    assert data["recommendation"]["label"] == "numpy/fp32" and data["tolerance"] == 0.01
    assert data["rejudged_from"]["tolerance"] == 1e-3
    assert (folder / "rejudged" / "plots" / "pareto.png").stat().st_size > 0
    assert (folder / "rejudged" / "plots" / "drift.png").stat().st_size > 0
    assert ((folder / "comparison.json").read_bytes(), (folder / "comparison.md").read_bytes()) == before
    assert "Judged again from" in (folder / "rejudged" / "comparison.md").read_text()


def test_fields_rejudged_from_saved_errors_and_from_the_run_folders_metrics(tmp_path, monkeypatch):
    """--fields pressure: fp32's error is its pressure error 1e-5 (accepted at 1e-3); --fields drag_coefficient, a
    metric the saved comparison did not judge: read from the run folders (|5.5806 - 5.58| / 5.58); an unknown name:
    CaseError naming --fields."""
    monkeypatch.setattr(cmpmod.runmod, "run_case", _no_run)
    folder, _ = _saved(tmp_path)
    comp, _ = compare_rejudge.rejudge(folder, fields=["pressure"])
    assert comp.runs[1].error == pytest.approx(1e-5) and comp.recommendation()["label"] == "numpy/fp32"
    comp, _ = compare_rejudge.rejudge(folder, fields=["drag_coefficient"], out=tmp_path / "d")
    assert comp.runs[1].error == pytest.approx(0.0006 / 5.58)
    with pytest.raises(CaseError, match="--fields"):
        compare_rejudge.rejudge(folder, fields=["vorticity"], out=tmp_path / "e")


def test_rejudge_refuses_what_cannot_apply(tmp_path, capsys):
    """Exit 2: a folder without a comparison, --judge solution on a comparison without a discretisation error, the
    judged folder itself as --out without --overwrite, run options beside --rejudge; a second rejudge into the same
    folder needs --overwrite. With --overwrite and --out DIR, DIR's comparison files are replaced."""
    folder, _ = _saved(tmp_path)
    assert cli.main(["compare", "--rejudge", str(tmp_path)]) == 2
    assert "comparison.json" in capsys.readouterr().err
    assert cli.main(["compare", "--rejudge", str(folder), "--judge", "solution"]) == 2
    assert "discretisation" in capsys.readouterr().err
    assert cli.main(["compare", "--rejudge", str(folder), "--out", str(folder)]) == 2
    assert cli.main(["compare", "--rejudge", str(folder), "--backends", "numpy"]) == 2
    assert "--backends" in capsys.readouterr().err
    assert cli.main(["compare", "--rejudge", str(folder)]) == 0
    assert cli.main(["compare", "--rejudge", str(folder)]) == 2
    assert cli.main(["compare", "--rejudge", str(folder), "--overwrite", "--out", str(folder), "--tolerance",
                     "0.5"]) == 0
    assert json.loads((folder / "comparison.json").read_text())["tolerance"] == 0.5


def test_judge_solution_from_a_saved_fem_comparison(tmp_path, monkeypatch):
    """A FEM comparison saved judged by the residual (fp32 stalled: not converged) is judged again by solution: its
    error 3e-3 against the saved discretisation error 0.1 is negligible (<= 0.01 also within --tolerance 0.01)."""
    monkeypatch.setattr(cmpmod.runmod, "run_case", _no_run)
    folder, comp = _saved(tmp_path, disc={"error": 0.1, "source": "analytic", "fraction": 0.1})
    data = json.loads((folder / "comparison.json").read_text())
    data["runs"][1]["status"] = "not_converged"
    (folder / "comparison.json").write_text(json.dumps(data))
    residual, _ = compare_rejudge.rejudge(folder, tolerance=1e-2, out=tmp_path / "r")
    assert residual.recommendation()["label"] == "numpy/fp64"
    solution, _ = compare_rejudge.rejudge(folder, tolerance=1e-2, judge="solution", out=tmp_path / "s")
    assert solution.limit == pytest.approx(1e-2) and solution.recommendation()["label"] == "numpy/fp32"
    assert "0.03 x the discretisation error 0.1" in solution.verdicts()["numpy/fp32"]
