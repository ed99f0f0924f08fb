"""Reliability IV (issue 49), items 4, 7, 8 and the messages of 9: traction units, tracebacks from huge integers,
non-ASCII output paths under an ASCII locale and HPCSOLVE_CPU_THREADS, late refusals of compare --fields and
compare.reference, and the messages of --tolerance, second-order gmsh elements and node ids beyond int32."""

from __future__ import annotations

import contextlib
import io
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
    page = (ROOT / "docs" / "case_reference.md").read_text()
    assert "elasticity: force per unit length |" not in page and "force per unit area of the loaded face" in page
