"""CLI and API habits: suggestions for misspelled keys, errors that say they came from --set, real
signatures for the top-level entry points."""

import inspect
from pathlib import Path

import pytest

import hpcsolve
from hpcsolve import cli
from hpcsolve.cases import load_case
from hpcsolve.errors import CaseError

CAVITY = Path(__file__).parent.parent / "cases" / "lid_driven_cavity.toml"


@pytest.mark.parametrize("key, expected", [("lattice.resolutoin", "lattice.resolution"),
                                           ("physics.reynold", "physics.reynolds"),
                                           ("time.end_tme", "time.end_time"),
                                           ("steady.tolerence", "steady.tolerance")])
def test_a_misspelled_key_suggests_the_nearest_one(key, expected):
    with pytest.raises(CaseError) as info:
        load_case(CAVITY, [f"{key}=1"])
    assert f"did you mean `{expected}`?" in str(info.value) and f"(from --set {key}=1)" in str(info.value)


def test_errors_from_the_case_file_do_not_blame_set(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text(CAVITY.read_text().replace("reynolds = 100.0", "reynolds = -5.0"))
    assert cli.main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "physics.reynolds: got -5.0" in err and "--set" not in err
    assert cli.main(["validate", str(CAVITY), "--set", "physics.reynolds=-5.0"]) == 2
    assert "(from --set physics.reynolds=-5.0)" in capsys.readouterr().err


def test_top_level_entry_points_have_real_signatures():
    params = inspect.signature(hpcsolve.run_case).parameters
    assert {"case", "backend", "precision", "out", "overrides", "resume"} <= set(params)
    assert {"backends", "precisions", "tolerance", "repeats"} <= set(inspect.signature(hpcsolve.compare).parameters)
    assert "overrides" in (hpcsolve.run_case.__doc__ or "")
