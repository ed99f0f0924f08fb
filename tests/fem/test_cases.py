"""The FEM case files from the CLI: result files, numbers in them, and case-file errors."""

import json
from pathlib import Path

import meshio
import numpy as np
import pytest

from hpcsolve.cases import load_case, parse_case_text
from hpcsolve.cli import main
from hpcsolve.errors import CaseError
from hpcsolve.fem import problem
from hpcsolve.results import read_h5
from hpcsolve.run import run_case

CASES = Path(__file__).resolve().parents[2] / "cases"


def _run_cli(case, out, *extra):
    code = main(["run", str(CASES / case), "--backend", "numpy", "--out", str(out), "--quiet", *extra])
    summary = json.loads((out / "summary.json").read_text())
    return code, summary


@pytest.mark.parametrize("case, field, ncomp", [("poisson_manufactured.toml", "u", 1),
                                                ("heat_plate_with_hole.toml", "u", 1),
                                                ("cook_membrane.toml", "displacement", 2)])
def test_case_runs_from_the_cli_and_writes_its_files(tmp_path, case, field, ncomp):
    out = tmp_path / "out"
    code, summary = _run_cli(case, out)
    assert code == 0
    assert summary["status"] == "converged"
    m = summary["metrics"]
    assert m["true_residual"] <= 1e-10 and m["converged"] is True
    assert m["error_vs_fp64_reference"] < 1e-6          # CG agrees with the fp64 direct solve
    for name in ("result.h5", "result.xdmf", "plots/solution.png", "plots/residuals.png"):
        assert (out / name).stat().st_size > 0, name
    back = meshio.read(out / "result.xdmf")
    h5 = read_h5(out / "result.h5")
    assert len(back.points) == len(h5["mesh"]["points"]) == summary["derived"]["points"]
    assert back.cells_dict["triangle"].shape == (summary["derived"]["triangles"], 3)
    data = back.point_data[field]
    values = h5["fields"][field]
    assert np.allclose(data, values)
    assert np.all(np.isfinite(values))
    assert h5["series"]["residual_recursive"][-1] == pytest.approx(m["recursive_residual"])
    if case == "poisson_manufactured.toml":
        assert m["error_l2"] < 4e-4 and m["probe_rel_error"] < 1e-3     # 64 x 64 mesh: L2 3.4e-4
        assert (out / "plots/error.png").exists()
    if case == "heat_plate_with_hole.toml":
        assert 0.0 <= m["u_min"] and m["probe_value"] == pytest.approx(0.6927, abs=2e-3)
    if case == "cook_membrane.toml":
        assert m["probe_uy"] == pytest.approx(24.114, abs=0.01)   # nx = 32 (see test_assembly for the trend)


def test_mixed_precision_from_the_cli(tmp_path):
    for method in ("cg-reliable", "ir-restarted"):
        out = tmp_path / method
        code, summary = _run_cli("poisson_manufactured.toml", out, "--precision", "mixed",
                                 "--set", f"solve.method={method}")
        assert code == 0 and summary["status"] == "converged"
        assert summary["metrics"]["true_residual"] <= 1e-10
        assert summary["metrics"]["error_vs_fp64_reference"] < 1e-7


def test_fp32_that_cannot_reach_rtol_says_so(tmp_path):
    out = tmp_path / "fp32"
    code, summary = _run_cli("poisson_manufactured.toml", out, "--precision", "fp32")
    assert code == 3
    assert summary["status"] == "not_converged"
    assert "stalled" in summary["message"]
    assert summary["metrics"]["true_residual"] > 1e-10
    # the discretization error (3.4e-4) still dwarfs the fp32 solve error at this size
    assert summary["metrics"]["error_l2"] == pytest.approx(3.38e-4, rel=0.01)


def test_validate_and_dry_run(capsys):
    assert main(["validate", str(CASES / "heat_plate_with_hole.toml"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["boundary_tags"] == ["bottom", "hole", "left", "right", "top"]
    assert info["unknowns"] == info["points"] > 2000


BASE = """
solver = "fem"
name = "t"
[mesh]
nx = 4
[problem]
kind = "poisson"
"""


def _case(extra: str):
    return parse_case_text(BASE + extra)


def test_case_errors_name_the_field():
    with pytest.raises(CaseError, match="at least one Dirichlet condition"):
        _case("")
    with pytest.raises(CaseError, match="where"):
        _case('[[boundary.dirichlet]]\nwhere = { }\nvalue = 0.0\n')
    # predicates are data, never code
    with pytest.raises(CaseError, match=r"boundary.dirichlet\[0\].where.x"):
        _case('[[boundary.dirichlet]]\nwhere = { x = "__import__(\'os\')" }\nvalue = 0.0\n')
    with pytest.raises(CaseError, match="unknown key"):
        _case('[[boundary.dirichlet]]\nwhere = { lambda = "x < 1" }\nvalue = 0.0\n')
    with pytest.raises(CaseError, match="poisson problem takes value"):
        _case('[[boundary.dirichlet]]\nwhere = { all = true }\ndisplacement = [0.0, 0.0]\n')
    with pytest.raises(CaseError, match="solve.method"):
        _case('[[boundary.dirichlet]]\nwhere = { all = true }\nvalue = 0.0\n[solve]\nmethod = "gmres"\n')


def test_selection_errors_list_what_exists():
    case = _case('[[boundary.dirichlet]]\nwhere = { tag = "inlet" }\nvalue = 0.0\n')
    with pytest.raises(CaseError, match=r"boundary.dirichlet\[0\].where.tag: .*allowed: bottom, left, right, top"):
        problem.build(case)
    case = _case('[[boundary.dirichlet]]\nwhere = { x = 5.0 }\nvalue = 0.0\n')
    with pytest.raises(CaseError, match="selects no boundary node"):
        problem.build(case)


def test_missing_mesh_file(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text('solver = "fem"\nname = "m"\n[mesh]\nkind = "file"\npath = "nope.msh"\n'
                 '[[boundary.dirichlet]]\nwhere = { all = true }\nvalue = 0.0\n')
    with pytest.raises(CaseError, match="mesh.path: file not found"):
        run_case(load_case(p), "numpy", "fp64")


def test_method_that_does_not_fit_the_precision():
    case = load_case(CASES / "poisson_manufactured.toml", ["solve.method=cg-reliable"])
    with pytest.raises(CaseError, match="^method"):
        run_case(case, "numpy", "fp64")
