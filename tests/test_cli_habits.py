"""CLI and API habits: suggestions for misspelled keys, errors that say they came from --set, real
signatures for the top-level entry points."""

import inspect
from pathlib import Path

import pytest

import hpcsolve
from hpcsolve import cli
from hpcsolve.core.cases import load_case
from hpcsolve.core.errors import CaseError

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


def test_an_unexpected_error_gives_the_callers_signal_handlers_back(monkeypatch):
    import signal

    from hpcsolve import cli as climod

    before = signal.getsignal(signal.SIGINT)
    monkeypatch.setattr(climod, "cmd_info", lambda args: (_ for _ in ()).throw(ValueError("boom")))
    with pytest.raises(ValueError, match="boom"):
        climod.main(["info"])
    assert signal.getsignal(signal.SIGINT) is before


def test_a_dry_run_that_would_not_fit_is_not_probed(monkeypatch):
    from hpcsolve import run as runmod

    monkeypatch.setattr(runmod.backends, "host_memory_available", lambda: 1000)   # the NumPy state lives there
    info = runmod.describe(CAVITY, "numpy", estimate=True)
    assert "estimated_seconds" not in info and info["estimate_basis"].startswith("not probed: ")


def test_a_reader_that_goes_away_ends_the_command_without_a_traceback():
    """`hpcsolve validate CASE | head -1`: stdout's reader closes early. Here its read end is closed before the
    command writes at all, so the write fails for certain: exit 141 (a shell's code for SIGPIPE), no traceback
    (it was a BrokenPipeError traceback, at the print and again at interpreter exit)."""
    import os
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "hpcsolve.cli", "validate", str(CAVITY)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "MPLBACKEND": "Agg"})
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_a_broken_pipe_that_is_not_stdout_stays_an_error(monkeypatch):
    """Only stdout's reader going away is the quiet exit 141; a broken pipe anywhere else is not hidden."""
    def info(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli, "cmd_info", info)
    with pytest.raises(BrokenPipeError):
        cli.main(["info"])
