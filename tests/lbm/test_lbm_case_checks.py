"""Reliability III, items 6 and 16: a validation reference only on its benchmark's flow; a relaxation time that
is not finite (a tiny physics.reynolds) and integer literals beyond 2^53 in float fields refused at validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcsolve.cli import main
from hpcsolve.core.cases import load_case
from hpcsolve.core.errors import CaseError
from hpcsolve.lbm.case import derive

CASES = Path(__file__).resolve().parents[2] / "cases"

#: item 6: flows the Schafer-Turek references do not describe, and what the message says differs
NOT_SCHAFER_TUREK = {
    "extra rectangle": (["obstacles=[{shape='rectangle', lower=[0.6, 0.1], upper=[0.8, 0.3]}, "
                         "{shape='circle', center=[0.2, 0.2], diameter=0.1}]"], "an extra rectangle obstacle"),
    "taller channel": (["domain.height=0.82"], "domain.height = 0.82"),
    "2D-2 on a steady Re 20 run": (["validation.reference=schafer_turek_2d2"], "physics.reynolds = 20"),
    "uniform inlet": (["boundaries.inlet_profile=uniform"], "boundaries.inlet_profile = 'uniform'"),
    "periodic walls": (["boundaries.bottom=periodic", "boundaries.top=periodic"], "boundaries.bottom = 'periodic'"),
    "circle moved": (["obstacles=[{shape='circle', center=[0.3, 0.2], diameter=0.1}]"],
                     "a circle of diameter 0.1 at (0.3, 0.2)"),
    "denser fluid": (["physics.density=2.0"], "physics.density = 2"),
}


@pytest.mark.parametrize("kind", list(NOT_SCHAFER_TUREK))
def test_schafer_turek_reference_only_on_its_benchmark(kind):
    sets, differs = NOT_SCHAFER_TUREK[kind]
    case = load_case(CASES / "cylinder_2d1.toml", ["lattice.resolution=10", *sets])
    with pytest.raises(CaseError) as e:
        derive(case)
    msg = str(e.value)
    assert e.value.field == "validation.reference", msg
    assert differs in msg.partition("; this case differs: ")[2], msg
    assert "2.2 x 0.41 m with one circle of diameter 0.1 m at (0.2, 0.2)" in msg, msg
    assert "within a relative 1e-06" in msg, msg


def test_schafer_turek_2d2_is_not_a_steady_run():
    case = load_case(CASES / "cylinder_2d2.toml", ["lattice.resolution=10", "steady.enabled=true"])
    with pytest.raises(CaseError, match=r"differs: steady.enabled = true \(2D-2 is periodic\)"):
        derive(case)


def test_schafer_turek_reference_within_its_tolerance_and_without():
    """The benchmark's numbers as written differently (2e-7 relative) still match; a 1e-5 change does not."""
    ok = load_case(CASES / "cylinder_2d1.toml", ["lattice.resolution=10", "physics.reynolds=20.000004"])
    assert derive(ok).units.reynolds == 20.000004
    off = load_case(CASES / "cylinder_2d1.toml", ["lattice.resolution=10", "physics.reynolds=20.0002"])
    with pytest.raises(CaseError, match=r"differs: physics.reynolds = 20.0002"):
        derive(off)


@pytest.mark.parametrize("sets, differs", [
    (["domain.length=2.0", "lattice.resolution=16"], "domain.length = 2 (physics.length = 1)"),
    (["domain.length=2.0", "domain.height=2.0", "lattice.resolution=16"], "domain.height = 2 (physics.length = 1)"),
    (["obstacles=[{shape='circle', center=[0.5, 0.5], diameter=0.2}]", "lattice.resolution=16"], "1 obstacle(s)"),
])
def test_taylor_green_reference_only_on_the_box_of_side_physics_length(sets, differs):
    case = load_case(CASES / "taylor_green.toml", sets)
    with pytest.raises(CaseError) as e:
        derive(case)
    assert e.value.field == "validation.reference"
    assert differs in str(e.value), str(e.value)


@pytest.mark.parametrize("path", sorted(CASES.glob("*.toml")), ids=lambda p: p.stem)
def test_every_shipped_case_validates(path, capsys):
    assert main(["validate", str(path)]) == 0, capsys.readouterr().err


# -- item 16 -----------------------------------------------------------------------------------------------------

def test_tiny_reynolds_number_with_infinite_tau_is_refused_naming_the_range(capsys):
    rc = main(["validate", str(CASES / "taylor_green.toml"), "--set", "physics.reynolds=1e-308"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("hpcsolve: error: physics.reynolds: the relaxation time tau"), err
    assert "would be inf" in err, err
    # tau = 0.5 + 3 * 0.05 * 64 / Re: tau <= 1e30 needs Re >= 9.6e-30, tau > 0.51 needs Re < 960
    assert "physics.reynolds >= 9.6e-30 (tau <= 1e+30) and < 960 (tau > 0.51)" in err, err


def test_tau_just_below_its_bound_validates_and_just_above_is_refused():
    case = load_case(CASES / "taylor_green.toml", ["physics.reynolds=1e-29"])
    assert derive(case).units.relaxation_time == pytest.approx(9.6e29)
    with pytest.raises(CaseError, match="would be 1.2e"):
        derive(load_case(CASES / "taylor_green.toml", ["physics.reynolds=8e-30"]))


@pytest.mark.parametrize("sets, field", [
    (["physics.density=9007199254740993"], "physics.density"),
    (["domain.length=-9007199254740993"], "domain.length"),
    (["obstacles=[{shape='circle', center=[0.2, 9007199254740993], diameter=0.1}]"], "obstacles[0].center"),
])
def test_integer_literal_beyond_2_53_refused_in_float_fields(sets, field):
    with pytest.raises(CaseError) as e:
        load_case(CASES / "cylinder_2d1.toml", sets)
    assert e.value.field == field, str(e.value)
    assert "integer literals of magnitude at most 2^53 = 9007199254740992" in str(e.value)


def test_integer_literal_at_2_53_is_taken_in_a_float_field():
    case = load_case(CASES / "taylor_green.toml", ["physics.density=9007199254740992"])
    assert case.physics.density == 2.0 ** 53


def test_integer_beyond_2_53_from_the_command_line_is_one_line_exit_2(capsys):
    rc = main(["validate", str(CASES / "taylor_green.toml"), "--set", "physics.velocity=9007199254740993"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "physics.velocity: got 9007199254740993" in err, err
