"""Reliability IV (issue 49), items 4, 7, 8 and the messages of 9: traction units, tracebacks from huge integers,
non-ASCII output paths under an ASCII locale and HPCSOLVE_CPU_THREADS, late refusals of compare --fields and
compare.reference, and the messages of --tolerance, second-order gmsh elements and node ids beyond int32."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

import hpcsolve
from hpcsolve import cli
from hpcsolve.core.cases import load_case, parse_case_text
from hpcsolve.core.errors import CaseError

ROOT = Path(__file__).parent.parent
CASES = ROOT / "cases"


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


# ------------------------------------------------------------------------------------ 4. traction units

BAR = """solver = "fem"
name = "bar"
[mesh]
kind = "rectangle"
nx = 4
ny = 2
x = [0.0, {L}]
y = [0.0, {H}]
[problem]
kind = "elasticity"
model = "plane_stress"
young = {E}
poisson_ratio = {nu}
thickness = {t}
[[boundary.dirichlet]]
where = {{ x = 0.0 }}
ux = 0.0
[[boundary.dirichlet]]
where = {{ x = 0.0, y = 0.0 }}
uy = 0.0
[[boundary.neumann]]
where = {{ x = {L} }}
{load}
[solve]
method = "spsolve"
preconditioner = "none"
reference = "never"
[output]
plots = false
probe = [{L}, {H}]
"""


@pytest.mark.parametrize("thickness", [1.0, 2.0, 0.25])
def test_traction_is_a_stress_and_total_force_a_force_through_the_thickness(tmp_path, thickness):
    """A bar in uniaxial tension (plane stress): sigma_xx = s everywhere, u_x(L) = s L / E, u_y(H) = -nu s H / E,
    whatever the thickness; P1 reproduces the linear field exactly. A traction is s itself (force per unit area);
    a total force F gives s = F / (H t)."""
    L, H, E, nu = 2.0, 0.5, 100.0, 0.3
    for load, s in ((f"traction = [3.0, 0.0]", 3.0), (f"total_force = [3.0, 0.0]", 3.0 / (H * thickness))):
        path = tmp_path / "bar.toml"
        path.write_text(BAR.format(L=L, H=H, E=E, nu=nu, t=thickness, load=load))
        res = hpcsolve.run_case(path, backend="numpy", progress=False)
        assert res.metrics["probe_ux"] == pytest.approx(s * L / E, rel=1e-9), load
        assert res.metrics["probe_uy"] == pytest.approx(-nu * s * H / E, rel=1e-9), load


def test_the_case_reference_says_traction_is_force_per_unit_area_and_how_thickness_enters():
    from hpcsolve.fem.case import NeumannBC, ProblemSection

    traction = NeumannBC.model_fields["traction"].description
    assert "per unit area" in traction and "thickness" in traction and "per unit length\"" not in traction
    assert "thickness" in NeumannBC.model_fields["total_force"].description
    assert "traction" in ProblemSection.model_fields["thickness"].description
    page = (ROOT / "docs" / "guide" / "case_reference.md").read_text()
    assert "elasticity: force per unit length |" not in page and "force per unit area of the loaded face" in page


# ------------------------------------------------------------------------------------ 7. tracebacks

LONG = "1" * 5000          # beyond Python's 4,300-digit limit of int(str)


@pytest.mark.parametrize("assignment,field", [(f"mesh.nx={LONG}", "mesh.nx"), (f"mesh.x=[0, {LONG}]", "mesh.x"),
                                              (f"mesh.nx=-1_{LONG}", "mesh.nx"),
                                              (f"mesh.x=[0, 0x{LONG}]", "mesh.x")])
def test_a_huge_integer_in_set_is_one_error_naming_the_field(assignment, field):
    code, _, err = _cli(["validate", str(CASES / "poisson_manufactured.toml"), "--set", assignment])
    assert code == 2 and "Traceback" not in err, err[-500:]
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"hpcsolve: error: ") and field in line and "2^53" in line


@pytest.mark.parametrize("body,field,line", [(f"[mesh]\nnx = {LONG}\n", "mesh.nx", 4),
                                             (f"[mesh]\nx = [\n  0,\n  {LONG}]\n", "mesh.x", 6),
                                             (f"description = {LONG}\n", "description", 3)])
def test_a_huge_integer_in_a_case_file_is_a_case_error_naming_the_key_and_line(tmp_path, body, field, line):
    path = tmp_path / "huge.toml"
    path.write_text(f'solver = "fem"\nname = "x"\n{body}')
    with pytest.raises(CaseError) as exc:
        load_case(path)
    assert exc.value.field == field and f"line {line}" in str(exc.value) and "5,000 digits" in str(exc.value)
    code, _, err = _cli(["validate", str(path)])
    assert code == 2 and "Traceback" not in err and field in err


def test_a_non_ascii_out_with_an_ascii_stdout_is_written_and_said_with_escapes(tmp_path, monkeypatch):
    raw = io.BytesIO()
    stdout = io.TextIOWrapper(raw, encoding="ascii", errors="strict", write_through=True)
    monkeypatch.setattr("sys.stdout", stdout)
    out = tmp_path / "r\u00e9sultat-\u03a9"
    code = cli.main(["run", str(CASES / "poisson_manufactured.toml"), "--set", "mesh.nx=4", "--out", str(out),
                     "--quiet"])
    stdout.flush()
    assert code == 0 and (out / "manifest.json").is_file()
    assert "r\\xe9sultat-\\u03a9" in raw.getvalue().decode("ascii")


@pytest.mark.parametrize("value", ["99999999999999999999", "4097", "0", "-3", "x", "1" * 5000, "\u0663"])
def test_hpcsolve_cpu_threads_out_of_range_is_one_error_naming_it(tmp_path, monkeypatch, value):
    monkeypatch.setenv("HPCSOLVE_CPU_THREADS", value)
    code, _, err = _cli(["run", str(CASES / "poisson_manufactured.toml"), "--set", "mesh.nx=4",
                         "--out", str(tmp_path / "o"), "--quiet"])
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("hpcsolve: error: HPCSOLVE_CPU_THREADS: got ")
    assert "from 1 to 4096" in err and not (tmp_path / "o").exists()


# ------------------------------------------------------------------------------------ 8. late or missing refusals

REFERENCE_VALUES = ["", "\u03a9mega", "numpy/fp16s", "numpy", "numpy/", "/fp64", "numpy/fp64/x", " NumPy / FP32 ",
                    "numpy/fp64", "cupy/fp32", "numba-cuda/mixed", "numpy/mixed", "numpy/fp16c", "auto", " AUTO ",
                    "a/b", "numpy/fp99"]


@pytest.mark.parametrize("family_case", ["poisson_manufactured.toml", "taylor_green.toml"])
def test_validate_refuses_the_compare_reference_values_compare_refuses(family_case):
    """validate applies compare's own rule (compare_reference.parse) to compare.reference, naming it."""
    from hpcsolve.report import compare_reference

    case = load_case(CASES / family_case)
    for value in REFERENCE_VALUES:
        try:
            compare_reference.parse(value, case.solver, "compare.reference")
            compare_ok = True
        except CaseError:
            compare_ok = False
        try:
            case.with_overrides(f"compare.reference={value!r}".replace("'", '"'))
            validate_ok = True
        except CaseError as exc:
            validate_ok = False
            assert exc.field == "compare.reference" and "BACKEND/PRECISION" in str(exc), str(exc)
        assert validate_ok == compare_ok, (family_case, value)
    for value in ("", "\u03a9mega", "numpy/fp16s", "numpy"):
        code, _, err = _cli(["validate", str(CASES / family_case), "--set", f'compare.reference="{value}"'])
        if family_case.startswith("poisson") or value != "numpy/fp16s":
            assert code == 2 and "hpcsolve: error: compare.reference: got" in err, (value, err[-300:])


def test_compare_fields_of_another_kind_of_case_are_refused_before_anything_runs(monkeypatch, tmp_path):
    from hpcsolve import run as runmod

    def no_run(*a, **k):
        raise AssertionError("a run started")

    monkeypatch.setattr(runmod, "run_case", no_run)
    for case, name in (("poisson_manufactured.toml", "velocity"), ("cook_membrane.toml", "u"),
                       ("taylor_green.toml", "displacement")):
        for extra in (["--dry-run"], ["--out", str(tmp_path / name)]):
            code, out, err = _cli(["compare", str(CASES / case), "--fields", name, *extra])
            assert code == 2 and "hpcsolve: error: --fields:" in err and repr(name) in err, err[-400:]
            assert not (tmp_path / name).exists()


def test_the_fields_a_case_has_are_those_its_runs_have():
    from hpcsolve.report.compare import SKIP_FIELDS
    from hpcsolve.report.compare_inputs import case_fields

    for case, sets in (("poisson_manufactured.toml", ["mesh.nx=4"]), ("cook_membrane.toml", ["mesh.nx=2"]),
                       ("taylor_green.toml", ["lattice.resolution=8", "time.steps=2"])):
        res = hpcsolve.run_case(CASES / case, backend="numpy", overrides=sets, progress=False)
        have = {f for f, v in res.fields.items() if f not in SKIP_FIELDS and getattr(v, "dtype", None) is not None
                and v.dtype.kind == "f"}
        assert have == set(case_fields(load_case(CASES / case))), case


def test_compare_dry_run_says_a_metric_name_is_checked_after_the_reference():
    code, out, err = _cli(["compare", str(CASES / "poisson_manufactured.toml"), "--set", "mesh.nx=4", "--dry-run",
                           "--precisions", "fp64", "--fields", "u", "probe_value"])
    assert code == 0 and "compare: --fields probe_value: not a field of this case (its fields: u)" in out


# ------------------------------------------------------------------------------------ 9. messages

@pytest.mark.parametrize("tolerance", ["1e300", "1.5", "inf", "nan", "-1e-9"])
def test_compare_tolerance_beyond_its_range_is_refused_before_running(tolerance, tmp_path):
    code, _, err = _cli(["compare", str(CASES / "poisson_manufactured.toml"), f"--tolerance={tolerance}",
                         "--out", str(tmp_path / "c")])
    assert code == 2 and "hpcsolve: error: --tolerance:" in err and "from 0 to 1" in err
    assert not (tmp_path / "c").exists()


GMSH2 = "$MeshFormat\n2.2 0 8\n$EndMeshFormat\n$Nodes\n{n}\n{nodes}$EndNodes\n$Elements\n{m}\n{elements}$EndElements\n"


def _mesh_case(tmp_path, text: str) -> Path:
    (tmp_path / "m.msh").write_text(text)
    path = tmp_path / "m.toml"
    path.write_text('solver = "fem"\nname = "m"\n[mesh]\nkind = "file"\npath = "m.msh"\n[[boundary.dirichlet]]\n'
                    'where = { x = 0.0 }\nvalue = 0.0\n')
    return path


def test_a_quadratic_triangle_mesh_is_read_by_the_element_generic_path(tmp_path):
    """A gmsh triangle6 file (once refused as second order) is read by the element-generic path: P1 on its vertices
    (4 nodes) by default, P2 on its vertices and edge midpoints (9) with problem.element = "P2"."""
    nodes = "".join(f"{i + 1} {x} {y} 0\n" for i, (x, y) in enumerate(
        [(0, 0), (1, 0), (1, 1), (0, 1), (0.5, 0), (1, 0.5), (0.5, 0.5), (0.5, 1), (0, 0.5)]))
    elements = "1 9 2 1 1 1 2 3 5 6 7\n2 9 2 1 1 1 3 4 7 8 9\n3 8 2 2 2 1 4 9\n"
    case = str(_mesh_case(tmp_path, GMSH2.format(n=9, nodes=nodes, m=3, elements=elements)))
    for element, points in (("P1", 4), ("P2", 9)):
        code, out, err = _cli(["validate", case, "--set", f'problem.element="{element}"'])
        assert code == 0, err[-400:]
        assert re.search(rf"element +{element}-triangle", out) and re.search(rf"points +{points}\b", out)


@pytest.mark.parametrize("big", [3_000_000_000, 2**31, 20_000_000])
@pytest.mark.parametrize("version", ["2.2", "4.1"])
def test_node_ids_beyond_int32_or_far_beyond_the_node_count_are_named(tmp_path, big, version):
    if version == "2.2":
        nodes = f"1 0 0 0\n2 1 0 0\n3 1 1 0\n{big} 0 1 0\n"
        text = GMSH2.format(n=4, nodes=nodes, m=2, elements=f"1 2 2 1 1 1 2 3\n2 2 2 1 1 1 3 {big}\n")
    else:
        text = ("$MeshFormat\n4.1 0 8\n$EndMeshFormat\n"
                f"$Nodes\n1 4 1 {big}\n2 1 0 4\n1\n2\n3\n{big}\n0 0 0\n1 0 0\n1 1 0\n0 1 0\n$EndNodes\n"
                f"$Elements\n1 2 1 2\n2 1 2 2\n1 1 2 3\n2 1 3 {big}\n$EndElements\n")
    code, _, err = _cli(["validate", str(_mesh_case(tmp_path, text))])
    assert code == 2 and "hpcsolve: error: mesh.path:" in err and f"node id {big:,}" in err, err[-400:]
    assert "OverflowError" not in err and "renumber" in err
