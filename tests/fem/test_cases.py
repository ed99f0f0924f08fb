"""The FEM case files from the CLI: result files, numbers in them, and case-file errors."""

import json
from pathlib import Path

import meshio
import numpy as np
import pytest

from hpcsolve.core.cases import load_case, parse_case_text
from hpcsolve.cli import main
from hpcsolve.core.errors import CaseError
from hpcsolve.fem.discrete import problem
from hpcsolve.core.results import read_h5
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
        # the probe (0.7, 0.1) reads the nearest node, (0.69102, 0.09784) at mesh.refine = 1. Reference there: the
        # mesh-converged T = 0.692782 (scikit-fem P3 on the file refined twice; P2 agrees to 5e-6), recomputed by
        # tests/fem/test_validation_fem.py. P1 at this resolution is 5.1e-5 low (its discretisation error, measured
        # by refining: 1.4e-5 at refine 2, 3.9e-6 at 3); the bound 1e-4 is twice that. (The temperature at exactly
        # (0.7, 0.1) is 0.684008: the probe's 0.009 offset is the nearest-node choice, not an error.)
        assert m["probe_point"] == pytest.approx([0.69101554, 0.09784155], abs=1e-8)
        assert 0.0 <= m["u_min"] and abs(m["probe_value"] - 0.692782) < 1e-4, m["probe_value"]
    if case == "cook_membrane.toml":
        # mid-edge deflection at nx = 32 against the published 23.96 (Cook et al. 2002; cases/cook_membrane.toml).
        # P1 is stiff: 21.59 / 23.28 / 23.77 / 23.91 at nx = 16 / 32 / 64 / 128 (Richardson limit 23.966,
        # test_assembly), so at nx = 32 the measured discretisation error is 2.9 % below the reference. The band
        # 2.0 .. 3.5 % holds that error with +-0.15 of margin and excludes nx = 16 (9.9 %), nx = 64 (0.8 %) and the
        # old corner probe (24.11 at nx = 32, above the reference). The exact nx = 32 value is pinned against an
        # independent assembly (scikit-fem) in tests/fem/test_validation_fem.py.
        assert m["probe_point"] == [48.0, 52.0]
        assert m["probe_uy"] < 23.96 and 0.020 < m["probe_rel_error"] < 0.035, (m["probe_uy"], m["probe_rel_error"])


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
    # issue 50: the stall misses rtol, but fp32's solution error is 1e-3 of the discretisation error
    # (hpcsolve.fem.judge): status accurate_to_discretisation, exit 0 (it was not_converged, exit 3)
    assert code == 0
    assert summary["status"] == "accurate_to_discretisation" and summary["metrics"]["converged"] is False
    assert summary["metrics"]["precision_error_ratio"] < 0.01
    assert "stalled" in summary["message"] and "cannot reach rtol" in summary["message"]
    assert summary["metrics"]["true_residual"] > 1e-10
    # the discretization error still dwarfs the fp32 solve error at this size: the fp32 error is the fp64 one within
    # 1 %, that one is second order (h -> h/2 divides it by 4) and of the size of the nodal interpolant's error
    # (computed below without hpcsolve: P1 Galerkin in L2 is within a small factor of it; seen 1.37x)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        e64, e32 = (run_case(str(CASES / "poisson_manufactured.toml"), "numpy", overrides=[f"mesh.nx={n}"],
                             progress=False).metrics["error_l2"] for n in (64, 32))
    assert summary["metrics"]["error_l2"] == pytest.approx(e64, rel=0.01)
    assert 3.8 < e32 / e64 < 4.2, (e32, e64)
    e_interp = _sin_sin_interpolation_error(64)
    assert e_interp <= e64 <= 2 * e_interp, (e64, e_interp)


def _sin_sin_interpolation_error(n: int) -> float:
    """||u - I_h u||_L2 of u = sin(pi x) sin(pi y) on the unit square cut into n x n squares of two triangles each
    (the (/) diagonal; either diagonal gives the same by symmetry), by a degree-5 Dunavant rule per triangle."""
    h = 1.0 / n
    i, j = np.meshgrid(np.arange(n), np.arange(n))
    x0, y0 = (i * h).ravel(), (j * h).ravel()
    tris = [np.stack([np.stack([x0, y0], -1), np.stack([x0 + h, y0], -1), np.stack([x0 + h, y0 + h], -1)], 1),
            np.stack([np.stack([x0, y0], -1), np.stack([x0 + h, y0 + h], -1), np.stack([x0, y0 + h], -1)], 1)]
    p = np.concatenate(tris)                                   # (2 n^2, 3, 2)
    a, b, c, d = 0.059715871789770, 0.470142064105115, 0.797426985353087, 0.101286507323456
    bary = np.array([[1 / 3] * 3, [a, b, b], [b, a, b], [b, b, a], [c, d, d], [d, c, d], [d, d, c]])
    w = np.array([0.225] + [0.132394152788506] * 3 + [0.125939180544827] * 3)

    def u(x, y):
        return np.sin(np.pi * x) * np.sin(np.pi * y)

    pts = np.einsum("qk,tkd->tqd", bary, p)
    ih = np.einsum("qk,tk->tq", bary, u(p[..., 0], p[..., 1]))
    return float(np.sqrt((h * h / 2 * w * (u(pts[..., 0], pts[..., 1]) - ih) ** 2).sum()))


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
    with pytest.raises(CaseError, match=r"^solve\.method"):   # names the case field (fem.runner.check_method)
        run_case(case, "numpy", "fp64")
