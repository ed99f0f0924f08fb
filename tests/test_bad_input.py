"""The reproducers of issue 13, one per line: each is one error line naming the field (exit 2), quickly.
The classes themselves are covered by generated inputs (test_generated_inputs.py)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest

from hpcsolve import cli

CASES = Path(__file__).parent.parent / "cases"
CAVITY = str(CASES / "lid_driven_cavity.toml")
NO_REFERENCE = ("--set", 'validation.reference="none"')   # the Ghia comparison needs a cavity without obstacles
POISSON = str(CASES / "poisson_manufactured.toml")


def _cli(*argv) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, err.getvalue()


@pytest.mark.parametrize("case, assignment, field", [
    # 1: non-finite or extreme numbers and what they derive
    (CAVITY, "time.end_time=inf", "time.end_time"),
    (CAVITY, "physics.velocity=inf", "physics.velocity"),
    (CAVITY, "physics.length=1e-300", "domain.length"),        # dx tiny: the domain would need 6e301 cells
    (CAVITY, "time.end_time=1e300", "time.end_time"),
    (CAVITY, "physics.density=1e308", "physics.density"),
    (POISSON, "solve.rtol=1e-308", "solve.rtol"),
    # 2: types are not coerced; --set values are TOML values
    (CAVITY, "physics.reynolds='400'", "physics.reynolds"),
    (CAVITY, "physics.reynolds=true", "physics.reynolds"),
    (CAVITY, "lattice.resolution='64'", "lattice.resolution"),
    (CAVITY, "lattice.resolution=64.0", "lattice.resolution"),
    (CAVITY, "steady.enabled='yes'", "steady.enabled"),
    (CAVITY, "physics.reynolds=400\nlattice.resolution=8", "--set"),
    # 6: NaN/Inf in FEM and LBM fields
    (POISSON, "output.probe=[nan, nan]", "output.probe"),
    (POISSON, "boundary.dirichlet=[{where = {all = true}, value = nan}]", "boundary.dirichlet[0].value"),
    (POISSON, "problem.conductivity=inf", "problem.conductivity"),
    (POISSON, "mesh.x=[0.0, inf]", "mesh.x"),
    (CAVITY, "physics.density=inf", "physics.density"),
    # 7: a manufactured solution compared with another problem's solution (found by a fuzzing pass, session 13)
    (POISSON, "problem.source=1.0", "problem.source = 1: not used with problem.manufactured"),
    (POISSON, "mesh.kind='cook_membrane'", "mesh.kind = 'cook_membrane'"),
    (POISSON, "mesh.x=[0.0, 0.5]", "mesh.x = [0.0, 0.5]"),
    (POISSON, "boundary.dirichlet=[{where = {all = true}, value = 5.0}]", "boundary.dirichlet[0].value = 5.0"),
    (POISSON, "boundary.neumann=[{where = {x = 0.0}, flux = 1.0}]", "boundary.neumann: "),
    (POISSON, "problem.regions=[{where = {all = true}, conductivity = 2.0}]", "problem.regions: "),
])
def test_issue_reproducers_are_one_error_naming_the_field(case, assignment, field):
    code, err = _cli("validate", case, "--set", assignment)
    assert code == 2, err
    assert err.startswith("hpcsolve: error: ") and field in err and "Traceback" not in err, err


def test_rtol_below_round_off_is_refused_by_dry_run_too():
    code, err = _cli("run", POISSON, "--dry-run", "--backend", "numpy", "--set", "solve.rtol=1e-308")
    assert code == 2 and "solve.rtol: got 1e-308; allowed: >= 1e-16" in err


def test_deep_nesting_and_long_dotted_keys_are_refused_quickly(tmp_path):
    # "quickly": the depth and key-length checks come before the TOML parser and the schema see the input;
    # a real hang (the parser recursing 900 deep) is caught by the suite's outer per-test limit (pytest-timeout)
    deep = tmp_path / "deep.toml"
    deep.write_text((CASES / "lid_driven_cavity.toml").read_text() + "\nextra = " + "[" * 900 + "]" * 900 + "\n")
    code, err = _cli("validate", str(deep))
    assert code == 2 and "arrays and tables nest more than 16 deep" in err and "case" in err
    dotted = tmp_path / "dotted.toml"
    dotted.write_text(".".join(["a"] * 20_000) + " = 1\n")
    code, err = _cli("validate", str(dotted))
    assert code == 2 and "a dotted key of more than 16 parts" in err
    code, err = _cli("validate", CAVITY, "--set", ".".join(["a"] * 20_000) + "=1")
    assert code == 2 and "--set: the key has more than 16 parts" in err and len(err) < 1000
    code, err = _cli("validate", CAVITY, "--set", "physics.reynolds=" + "[" * 900 + "]" * 900)
    assert code == 2 and "--set: the value nests arrays or tables more than 16 deep" in err


def test_a_ten_megabyte_value_is_cut_short_in_the_message(tmp_path):
    case = tmp_path / "long.toml"
    case.write_text((CASES / "lid_driven_cavity.toml").read_text().replace('name = "lid_driven_cavity"',
                                                                           'name = "' + "x" * 10_000_000 + '"'))
    code, err = _cli("validate", str(case))
    assert code == 2 and "name: got 'xxxx" in err and "(10,000,002 characters)" in err and len(err) < 1000


def test_no_fluid_left_is_refused_by_validate_naming_the_obstacle(tmp_path):
    mask = tmp_path / "solid.npy"
    np.save(mask, np.ones((64, 64), bool))
    code, err = _cli("validate", CAVITY, *NO_REFERENCE, "--set", f'obstacles=[{{shape = "mask", file = "{mask}"}}]')
    assert code == 2 and "obstacles[0]: with this obstacle no fluid cell is left" in err
    code, err = _cli("validate", CAVITY, *NO_REFERENCE,
                     "--set", 'obstacles=[{shape = "circle", center = [0.5, 0.5], diameter = 5.0}]')
    assert code == 2 and "obstacles[0]: with this obstacle no fluid cell is left" in err


def test_mask_and_mesh_headers_are_checked_before_reading(tmp_path):
    claims = tmp_path / "claims.npy"
    header = b"{'descr': '|b1', 'fortran_order': False, 'shape': (100000000, 100000000), }"
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    claims.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + b"\x01" * 64)
    code, err = _cli("validate", CAVITY, *NO_REFERENCE, "--set", f'obstacles=[{{shape = "mask", file = "{claims}"}}]')
    assert code == 2 and "obstacles[0].file: its header says shape (100000000, 100000000)" in err
    negative = tmp_path / "negative.msh"
    negative.write_text("$MeshFormat\n2.2 0 8\n$EndMeshFormat\n$Nodes\n4\n1 0 0 0\n2 1 0 0\n3 0 1 0\n4 1 1 0\n"
                        "$EndNodes\n$Elements\n2\n1 2 2 1 1 1 2 3\n2 2 2 1 1 2 4 -2\n$EndElements\n")
    code, err = _cli("validate", str(CASES / "heat_plate_with_hole.toml"), "--set", f'mesh.path="{negative}"')
    assert code == 2 and "mesh.path: a negative number in $Elements (2 2 2 1 1 2 4 -2)" in err
    junk = tmp_path / "junk.msh"
    junk.write_text("this is not a mesh\n")
    code, err = _cli("validate", str(CASES / "heat_plate_with_hole.toml"), "--set", f'mesh.path="{junk}"')
    assert code == 2 and "mesh.path: not a gmsh file" in err and err.count("\n") == 1


def test_a_case_file_with_a_byte_order_mark_reads_as_without(tmp_path):
    """Some editors start UTF-8 text with a byte-order mark; TOML has no place for it (tomllib said only
    "Invalid statement (at line 1, column 1)"). The case reads as the same file without it."""
    plain = Path(POISSON).read_text(encoding="utf-8")
    bom = tmp_path / "bom.toml"
    bom.write_bytes(b"\xef\xbb\xbf" + plain.encode("utf-8"))
    from hpcsolve.core.cases import load_case

    assert load_case(bom).model_dump() == load_case(POISSON).model_dump()
    assert _cli("validate", str(bom))[0] == 0


def test_an_empty_mask_path_and_a_dangling_out_link_say_so(tmp_path):
    code, err = _cli("validate", CAVITY, *NO_REFERENCE, "--set", 'obstacles=[{shape = "mask", file = ""}]')
    assert code == 2 and "obstacles[0]: file: the path is empty" in err          # was: "it is a folder"
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "missing")
    code, err = _cli("run", POISSON, "--backend", "numpy", "--quiet", "--set", "mesh.nx=4", "--out", str(link))
    assert code == 2 and "--out: is a symbolic link to a missing target" in err   # was: "File exists"
    assert not (tmp_path / "missing").exists()


def test_manufactured_solution_on_a_mesh_file_must_be_the_unit_square_fixed_all_round(tmp_path):
    """A mesh file is checked when it is read: the manufactured solution's errors mean nothing on another domain,
    or with part of the boundary free."""
    import meshio

    def square(path, w, hole=False):
        n = 4
        xs, ys = np.meshgrid(np.linspace(0, w, n + 1), np.linspace(0, 1, n + 1))
        pts = np.column_stack([xs.ravel(), ys.ravel()])
        tri = []
        for j in range(n):
            for i in range(n):
                if hole and 1 <= i <= 2 and 1 <= j <= 2:
                    continue                     # the middle 2 x 2 cells left out: a hole in the unit square
                a = j * (n + 1) + i
                tri += [[a, a + 1, a + n + 2], [a, a + n + 2, a + n + 1]]
        meshio.write(path, meshio.Mesh(pts, [("triangle", np.array(tri))]), file_format="gmsh22", binary=False)
        return path

    wide = square(tmp_path / "wide.msh", 2.0)
    code, err = _cli("validate", POISSON, "--set", "mesh.kind='file'", "--set", f"mesh.path='{wide}'")
    assert code == 2 and err.startswith("hpcsolve: error: mesh.path: ") and "[0, 2] x [0, 1]" in err, err
    holed = square(tmp_path / "holed.msh", 1.0, hole=True)    # the unit square's bounding box, u = 0 on the hole
    code, err = _cli("validate", POISSON, "--set", "mesh.kind='file'", "--set", f"mesh.path='{holed}'")
    assert code == 2 and err.startswith("hpcsolve: error: mesh.path: ") and "8 boundary nodes" in err, err
    unit = square(tmp_path / "unit.msh", 1.0)
    code, err = _cli("validate", POISSON, "--set", "mesh.kind='file'", "--set", f"mesh.path='{unit}'")
    assert code == 0, err
    code, err = _cli("validate", POISSON, "--set", "mesh.kind='file'", "--set", f"mesh.path='{unit}'",
                     "--set", "boundary.dirichlet=[{where = {x = 0.0}, value = 0.0}]")
    assert code == 2 and err.startswith("hpcsolve: error: boundary.dirichlet: ") and "boundary nodes are not fixed" \
        in err, err


def test_manufactured_solution_takes_the_conductivity_into_its_source():
    """-div(k grad u) = 2 pi^2 k sin(pi x) sin(pi y): the same discrete solution for any uniform k (the
    conductivity used to scale the solution away from the one the errors were measured against)."""
    from hpcsolve.core.cases import load_case
    from hpcsolve.fem.discrete import problem

    def solve(k):
        d = problem.build(load_case(POISSON, ["mesh.nx=8", f"problem.conductivity={k}"]))
        import scipy.sparse.linalg as spla
        return d.full_solution(spla.spsolve(d.A.tocsc(), d.b))

    one, hundred = solve(1.0), solve(100.0)
    assert np.max(np.abs(one - hundred)) <= 1e-12 * np.max(np.abs(one))
    assert abs(one.max() - 1.0) < 0.05        # u(1/2, 1/2) = 1 on this coarse mesh


@pytest.mark.parametrize("precision, conductivity, why", [
    ("fp64", "1e308", "overflows float64"),
    ("mixed", "1e20", "outside what 32-bit floats can solve with"),
])
def test_validate_finds_the_overflow_that_assembly_finds(precision, conductivity, why):
    """The range of the assembled system was only checked by the run (exit 2 after assembly, validate said
    "valid"): validate assembles small systems too and gives the run's error."""
    args = (POISSON, "--precision", precision, "--set", f"problem.conductivity={conductivity}")
    code, err = _cli("validate", *args)
    assert code == 2 and err.startswith("hpcsolve: error: problem.conductivity: ") and why in err, err
    assert _cli("run", *args, "--dry-run") == (code, err)


def test_validate_says_whether_it_checked_the_system_range(monkeypatch, capsys):
    from hpcsolve.fem import runner as fem_runner

    assert cli.main(["validate", POISSON, "--json", "--precision", "mixed"]) == 0
    assert json.loads(capsys.readouterr().out)["system_range"] == (
        "checked: matrix within 32-bit floats, solution bound within 64-bit floats (the loads are scaled by a power "
        "of two before the solve)")
    monkeypatch.setattr(fem_runner, "VALIDATE_ASSEMBLY_UNKNOWNS", 100)
    assert cli.main(["validate", POISSON, "--json", "--set", "problem.conductivity=1e308"]) == 0
    assert json.loads(capsys.readouterr().out)["system_range"] == ("not checked: 4,225 unknowns > 100 (the run "
                                                                   "checks it after assembly)")
