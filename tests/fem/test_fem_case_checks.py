"""Reliability III (issue 37), items 11, 12, 15 and 19: FEM case settings that the run refuses are refused by
`hpcsolve validate` with the same message (multigrid on a mesh without a grid, too few multigrid levels, a
preconditioner with the direct solver); an elastic body left free to move rigidly, two Dirichlet conditions that
fix the same nodes to different values, and a zero probe reference are refused before anything is solved."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest

from hpcsolve import cli
from hpcsolve.core.cases import parse_case_text
from hpcsolve.core.errors import CaseError
from hpcsolve.fem.discrete import problem

CASES = Path(__file__).resolve().parents[2] / "cases"
POISSON = str(CASES / "poisson_manufactured.toml")
PLATE = str(CASES / "heat_plate_with_hole.toml")


def _cli(*argv) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, err.getvalue()


def _sets(*assignments) -> list[str]:
    return [a for s in assignments for a in ("--set", s)]


# ---- item 11: validate refuses what the run refuses, with the run's message

@pytest.mark.parametrize("case, sets, field, says", [
    (POISSON, ["mesh.nx=8", "mesh.refine=1", "solve.preconditioner=mg"], "solve.preconditioner",
     "this mesh is 'rectangle 8x8 +refined'"),
    (PLATE, ["mesh.refine=0", "solve.preconditioner=mg"], "solve.preconditioner", "plate_with_hole.msh"),
    # 256 x 256 cells, 2 levels: the coarse level keeps 127^2 unknowns, beyond a dense direct solve
    (POISSON, ["mesh.nx=256", "solve.preconditioner=mg", "solve.multigrid.max_levels=2"], "solve.multigrid.max_levels",
     "the coarsest level has 16,129 unknowns"),
    (POISSON, ["mesh.nx=8", "solve.method=spsolve", "solve.preconditioner=mg"], "solve.preconditioner",
     "solve.method 'spsolve' is a direct solve"),
    (POISSON, ["mesh.nx=8", "solve.method=spsolve", "solve.preconditioner=jacobi"], "solve.preconditioner",
     "takes no preconditioner"),
    (POISSON, ["mesh.nx=8", "solve.method=pcg-jacobi", "solve.preconditioner=mg"], "solve.preconditioner",
     "solve.method 'pcg-jacobi' is CG with the Jacobi preconditioner")])
def test_validate_refuses_what_the_run_refuses_with_the_same_message(tmp_path, case, sets, field, says):
    code, err = _cli("validate", case, "--backend", "numpy", *_sets(*sets))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"hpcsolve: error: {field}: ") and says in err, err
    assert "object at 0x" not in err
    run = _cli("run", case, "--backend", "numpy", "--quiet", "--no-plots", "--out", str(tmp_path / "r"), *_sets(*sets))
    assert run == (code, err)


def test_validate_reports_the_multigrid_hierarchy_it_built(capsys):
    assert cli.main(["validate", POISSON, "--backend", "numpy", "--json", "--set", "mesh.nx=32",
                     "--set", "solve.preconditioner=mg"]) == 0
    info = json.loads(capsys.readouterr().out)
    # 31^2 = 961 free unknowns halve to 15^2 = 225 <= coarse_size 400: two levels, the coarse one solved directly
    assert info["preconditioner"] == "mg"
    assert info["preconditioner_setup"] == "checked: mg hierarchy of 2 levels, coarsest 225 unknowns"


# ---- item 12: an elastic body free to move rigidly

ELASTIC = """
solver = "fem"
name = "e"
[mesh]
nx = 4
[problem]
kind = "elasticity"
[[boundary.neumann]]
where = { x = 1.0 }
traction = [1.0, 0.5]
"""


def _elastic(*dirichlet: str):
    return parse_case_text(ELASTIC + "".join(f"[[boundary.dirichlet]]\n{d}\n" for d in dirichlet))


@pytest.mark.parametrize("dirichlet, free", [
    (["where = { x = 0.0 }\nux = 0.0"], "a translation along y (no u_y is fixed)"),
    (["where = { y = 0.0 }\nuy = 0.0"], "a translation along x (no u_x is fixed)"),
    (["where = { x = 0.0, y = 0.0 }\ndisplacement = [0.0, 0.0]"], "a rotation about (0, 0)"),       # one clamped node
    # u_x on the line y = 0 and u_y at one node of it: a rotation about that node moves neither
    (["where = { y = 0.0 }\nux = 0.0", "where = { x = 1.0, y = 0.0 }\nuy = 0.0"], "a rotation about (1, 0)"),
    # a clamped node and u_y at a node straight above it: the rotation about the clamped node moves it along x only
    (["where = { x = 0.0, y = 0.0 }\ndisplacement = [0.0, 0.0]", "where = { x = 0.0, y = 1.0 }\nuy = 0.0"],
     "a rotation about (0, 0)")])
def test_an_elastic_body_free_to_move_rigidly_is_refused_before_solving(dirichlet, free):
    case = _elastic(*dirichlet)
    mesh = problem.build_mesh(case)
    with pytest.raises(CaseError) as exc:
        problem.check_selections(case, mesh)          # what describe (run and validate) checks, no assembly
    assert exc.value.field == "boundary.dirichlet"
    assert f"leave {free} free" in str(exc.value) and "some u_x fixed, some u_y fixed" in str(exc.value)
    with pytest.raises(CaseError, match="stiffness matrix is singular"):
        problem.build(case)


@pytest.mark.parametrize("dirichlet", [
    ["where = { x = 0.0 }\ndisplacement = [0.0, 0.0]"],                                # a clamped edge
    ["where = { x = 0.0 }\nux = 0.0", "where = { y = 0.0 }\nuy = 0.0"],                 # symmetry rollers
    ["where = { x = 0.0 }\nux = 0.0", "where = { x = 0.0, y = 0.0 }\nuy = 0.0"],        # u_x at two heights
    ["where = { x = 0.0, y = 0.0 }\ndisplacement = [0.0, 0.0]", "where = { x = 1.0, y = 0.0 }\nuy = 0.0"],
    ["where = { x = 0.0, y = 0.0 }\ndisplacement = [0.0, 0.0]", "where = { x = 0.0, y = 1.0 }\nux = 0.0"]])
def test_an_elastic_body_held_in_place_is_accepted_and_its_matrix_is_definite(dirichlet):
    disc = problem.build(_elastic(*dirichlet))
    lowest = np.linalg.eigvalsh(disc.A.toarray())[0]
    assert lowest > 1e-4, lowest            # no rigid-body motion left: the free block is positive definite


def test_the_refused_elastic_settings_are_truly_singular():
    """The check's claim, measured: with one clamped node the free block has a zero eigenvalue (the rotation)."""
    case = _elastic("where = { x = 0.0, y = 0.0 }\ndisplacement = [0.0, 0.0]")
    mesh = problem.build_mesh(case)
    K = problem.assembly.elasticity_stiffness(mesh, np.ones(mesh.n_triangles), 0.3, "plane_strain", 1.0).toarray()
    free = np.setdiff1d(np.arange(2 * mesh.n_points), [0, 1])
    eig = np.linalg.eigvalsh(K[np.ix_(free, free)])
    assert abs(eig[0]) < 1e-12 * eig[-1] < eig[1]


def test_validate_refuses_an_elastic_body_fixed_only_in_x(tmp_path):
    path = tmp_path / "e.toml"
    path.write_text(ELASTIC + "[[boundary.dirichlet]]\nwhere = { x = 0.0 }\nux = 0.0\n")
    code, err = _cli("validate", str(path), "--backend", "numpy")
    assert code == 2 and err.startswith("hpcsolve: error: boundary.dirichlet: the fixed displacements leave a "
                                        "translation along y"), err


# ---- item 15: two Dirichlet values on the same nodes

POISSON_TEXT = """
solver = "fem"
name = "p"
[mesh]
nx = 4
"""


def _poisson(*dirichlet: str):
    return parse_case_text(POISSON_TEXT + "".join(f"[[boundary.dirichlet]]\n{d}\n" for d in dirichlet))


def test_two_dirichlet_values_on_the_same_nodes_are_refused_naming_both():
    case = _poisson("where = { all = true }\nvalue = 0.0", "where = { x = 0.0 }\nvalue = 1.0")
    with pytest.raises(CaseError) as exc:
        problem.build(case)
    msg = str(exc.value)
    assert exc.value.field == "boundary.dirichlet[1]"
    assert "boundary.dirichlet[0] (where {'all': True}) fixes u = 0 and boundary.dirichlet[1] (where {'x': 0.0}) " \
           "u = 1 on the same 5 node(s), first at (0, 0)" in msg, msg


def test_an_elastic_corner_fixed_twice_to_different_values_is_refused():
    case = _elastic("where = { x = 0.0 }\ndisplacement = [0.0, 0.0]", "where = { y = 0.0 }\nuy = 0.25")
    with pytest.raises(CaseError) as exc:
        problem.check_selections(case, problem.build_mesh(case))
    assert exc.value.field == "boundary.dirichlet[1]"
    assert "fixes u_y = 0 and boundary.dirichlet[1] (where {'y': 0.0}) u_y = 0.25 on the same 1 node(s), first at " \
           "(0, 0)" in str(exc.value)


def test_dirichlet_conditions_that_agree_where_they_overlap_are_accepted():
    disc = problem.build(_poisson("where = { x = 0.0 }\nvalue = 1.0", "where = { y = 0.0 }\nvalue = 1.0",
                                  "where = { x = 1.0, y_min = 0.25 }\nvalue = 0.0"))
    # left and bottom share the corner (0, 0), both at 1; the right side stops short of the bottom
    assert disc.fixed.size == 5 + 4 + 4 and np.count_nonzero(disc.fixed_values == 1.0) == 5 + 4
    # the right side down to the bottom: (1, 0) would be 1 by the bottom and 0 by the right side
    with pytest.raises(CaseError, match=r"^boundary.dirichlet\[2\]: boundary.dirichlet\[1\] .* on the same 1 "
                                        r"node\(s\), first at \(1, 0\)"):
        problem.build(_poisson("where = { x = 0.0 }\nvalue = 1.0", "where = { y = 0.0 }\nvalue = 1.0",
                               "where = { x = 1.0 }\nvalue = 0.0"))
    # elasticity: a clamped edge and a roller on the bottom agree (u_y = 0) at their shared corner
    disc = problem.build(_elastic("where = { x = 0.0 }\ndisplacement = [0.0, 0.0]", "where = { y = 0.0 }\nuy = 0.0"))
    assert disc.fixed.size == 2 * 5 + 4


# ---- item 19: output.probe_reference = 0

@pytest.mark.parametrize("value", ["0.0", "-0.0"])
def test_a_zero_probe_reference_is_refused_in_the_case(value):
    with pytest.raises(CaseError) as exc:
        parse_case_text(POISSON_TEXT + f"[[boundary.dirichlet]]\nwhere = {{ all = true }}\nvalue = 0.0\n"
                                       f"[output]\nprobe = [0.5, 0.5]\nprobe_reference = {value}\n")
    assert "output.probe_reference: got" in str(exc.value) and "a non-zero number" in str(exc.value)


def test_validate_refuses_a_zero_probe_reference_and_a_non_zero_one_runs(tmp_path):
    code, err = _cli("validate", POISSON, "--backend", "numpy", "--set", "output.probe_reference=0.0")
    assert code == 2 and "output.probe_reference: got 0.0; allowed: a non-zero number" in err, err
    assert _cli("validate", POISSON, "--backend", "numpy", "--set", "output.probe_reference=-2.0")[0] == 0
