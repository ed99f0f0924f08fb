"""hpcsolve compare with the preconditioner as a dimension (FEM): one row per preconditioner, labelled
with it everywhere; solves of the same system to rtol 1e-10 agree whatever the preconditioner; bad names
and LBM cases are refused before anything runs; "mg" where it cannot work is a failed row, not an abort."""

import json
import math
from pathlib import Path

import pytest

from hpcsolve import cli
from hpcsolve.core.errors import CaseError
from hpcsolve.report.compare import compare
from hpcsolve.report.compare_inputs import preconditioner_names

CASES = Path(__file__).parents[2] / "cases"
POISSON = CASES / "poisson_manufactured.toml"
TINY = ["mesh.nx=12"]
FAST = dict(backends=["numpy"], repeats=1, warmup=False)


def _agree(a: float, b: float, rel: float = 1e-6) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=0.0)


def _cli_compare(out, *args) -> int:
    return cli.main(["compare", str(POISSON), "--backends", "numpy", "--repeats", "1", "--no-warmup", "--quiet",
                     "--out", str(out), "--set", TINY[0], *args])


def test_none_and_jacobi_are_two_rows_of_the_same_solution(tmp_path):
    with pytest.raises(CaseError) as exc:                       # a name twice: refused, not dropped (issue 37)
        compare(POISSON, precisions=["fp64"], overrides=TINY, preconditioners=["none", "JACOBI", "none"],
                out=tmp_path, **FAST)
    assert exc.value.field == "--preconditioners" and "'none' is given more than once" in str(exc.value)
    assert list(tmp_path.iterdir()) == []
    comp = compare(POISSON, precisions=["fp64"], overrides=TINY, preconditioners=["none", "JACOBI"],
                   out=tmp_path, **FAST)
    assert comp.preconditioners == ["none", "jacobi"]           # lower case, order kept
    assert [r.label for r in comp.runs] == ["numpy/fp64/none", "numpy/fp64/jacobi"]
    none, jacobi = comp.runs
    assert none.is_reference and not jacobi.is_reference
    assert none.status == jacobi.status == "converged"
    for r in comp.runs:
        assert r.preconditioner_used in (None, r.preconditioner)   # the run's own metric, where it reports one
    # same system, both solved to rtol 1e-10: the same discretization error, the same field
    assert _agree(jacobi.reference_errors["error_l2"], none.reference_errors["error_l2"])
    assert jacobi.error < 1e-8
    rows = comp.rows()
    assert [row["preconditioner"] for row in rows] == ["none", "jacobi"]
    table = comp.table(wide=True)        # issue 50: the wide table has a preconditioner column; the compact one labels
    assert "| preconditioner |" in table and "| jacobi |" in table and "| none |" in table
    assert "| numpy/fp64/jacobi |" in comp.table()
    assert set(comp.verdicts()) == {"numpy/fp64/none", "numpy/fp64/jacobi"}
    rec = comp.recommendation()
    assert rec["preconditioner"] in ("none", "jacobi") and rec["label"] == f"numpy/fp64/{rec['preconditioner']}"
    assert f"Recommendation: **numpy / fp64 / {rec['preconditioner']}**" in table
    data = json.loads((tmp_path / "comparison.json").read_text())
    assert data["preconditioners"] == ["none", "jacobi"] and data["reference"] == "numpy/fp64/none"
    assert [(r["label"], r["preconditioner"]) for r in data["runs"]] == [("numpy/fp64/none", "none"),
                                                                        ("numpy/fp64/jacobi", "jacobi")]
    assert data["recommendation"]["preconditioner"] == rec["preconditioner"]
    for name in ("none", "jacobi"):
        assert (tmp_path / f"numpy-fp64-{name}" / "summary.json").exists()
    assert (tmp_path / "plots" / "pareto.png").stat().st_size > 1000


def test_multigrid_rows_agree_with_plain_cg_within_the_solve_tolerance(tmp_path, capsys):
    out = tmp_path / "cmp"
    code = _cli_compare(out, "--precisions", "fp64", "fp32", "--preconditioners", "none", "mg", "amg")
    captured = capsys.readouterr()
    assert code == 0, captured.err
    data = json.loads((out / "comparison.json").read_text())
    labels = [r["label"] for r in data["runs"]]
    # every backend x precision with every preconditioner, the CPU fp64 ones (the reference first) leading
    assert labels == ["numpy/fp64/none", "numpy/fp64/mg", "numpy/fp64/amg",
                      "numpy/fp32/none", "numpy/fp32/mg", "numpy/fp32/amg"]
    runs = {r["label"]: r for r in data["runs"]}
    ref = runs["numpy/fp64/none"]
    assert ref["reference"] and data["reference"] == "numpy/fp64/none"
    for name in ("mg", "amg"):
        r = runs[f"numpy/fp64/{name}"]
        assert r["status"] == "converged", r["message"]
        assert r["preconditioner"] == name and r["preconditioner_used"] in (None, name)
        assert _agree(r["reference_errors"]["error_l2"], ref["reference_errors"]["error_l2"])
        assert r["error"] < 1e-8                                # against the reference field
        assert r["residuals"]["iterations"] < ref["residuals"]["iterations"]   # what a multigrid is for
    table = (out / "comparison.md").read_text()
    for name in ("none", "mg", "amg"):                          # (issue 50: compact rows are labelled by configuration)
        assert sum(f"/{name} |" in line or f"/{name} (ref) |" in line for line in table.splitlines()) == 2
    assert set(data["verdicts"]) == set(labels)
    rec = data["recommendation"]
    assert rec["label"] in labels and f"Recommendation: **numpy / {rec['precision']} / {rec['preconditioner']}**" \
        in captured.out
    assert (out / "numpy-fp32-mg" / "result.h5").exists()


def test_mg_on_a_file_mesh_is_a_failed_row_and_the_rest_still_runs(tmp_path):
    # "mg" needs a structured generator mesh: the run refuses it, the comparison records why and goes on;
    # it was listed first, so the next CPU fp64 configuration is the reference
    comp = compare(CASES / "heat_plate_with_hole.toml", precisions=["fp64"], overrides=["mesh.refine=0"],
                   preconditioners=["mg", "none"], out=tmp_path, **FAST)
    runs = {r.label: r for r in comp.runs}
    assert set(runs) == {"numpy/fp64/mg", "numpy/fp64/none"}
    mg, none = runs["numpy/fp64/mg"], runs["numpy/fp64/none"]
    assert mg.status == "failed" and "structured" in mg.message and not mg.is_reference
    assert none.is_reference and none.status == "converged" and comp.reference is none
    verdicts = comp.verdicts()
    assert verdicts["numpy/fp64/mg"].startswith("failed: ") and "structured" in verdicts["numpy/fp64/mg"]
    assert comp.recommendation()["label"] == "numpy/fp64/none"
    data = json.loads((tmp_path / "comparison.json").read_text())
    assert {r["label"]: r["status"] for r in data["runs"]} == {"numpy/fp64/mg": "failed", "numpy/fp64/none": "converged"}


def test_without_the_option_the_case_setting_is_used_once(tmp_path):
    comp = compare(POISSON, precisions=["fp64"], overrides=["mesh.nx=8", "solve.preconditioner=jacobi"], **FAST)
    assert comp.preconditioners is None
    (run,) = comp.runs
    assert run.preconditioner is None and run.label == "numpy/fp64"     # the label is today's
    assert run.preconditioner_used in (None, "jacobi")
    assert set(comp.verdicts()) == {"numpy/fp64"}
    assert "Recommendation: **numpy / fp64**" in comp.table()


def test_unknown_preconditioner_is_refused_before_anything_runs(tmp_path, capsys):
    out = tmp_path / "cmp"
    assert _cli_compare(out, "--preconditioners", "none", "multigrid") == 2
    err = capsys.readouterr().err
    assert "--preconditioners" in err and "'multigrid'" in err
    assert "allowed: " + ", ".join(preconditioner_names()) in err
    assert {"none", "jacobi", "mg", "amg"} <= set(preconditioner_names())
    assert not out.exists()
    with pytest.raises(CaseError, match="--preconditioners"):
        compare(POISSON, overrides=TINY, preconditioners=["ilu"], **FAST)
    with pytest.raises(CaseError, match="no preconditioner given"):
        compare(POISSON, overrides=TINY, preconditioners=[], **FAST)


def test_preconditioners_on_an_lbm_case_exit_2(tmp_path, capsys):
    out = tmp_path / "cmp"
    code = cli.main(["compare", str(CASES / "lid_driven_cavity.toml"), "--backends", "numpy", "--out", str(out),
                     "--quiet", "--preconditioners", "mg"])
    assert code == 2
    err = capsys.readouterr().err
    assert "--preconditioners applies to FEM cases only" in err and "LBM" in err
    assert not out.exists()
    with pytest.raises(CaseError, match="FEM cases only"):
        compare(CASES / "lid_driven_cavity.toml", backends=["numpy"], preconditioners=["none"])
