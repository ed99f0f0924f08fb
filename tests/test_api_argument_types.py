"""Reliability III (issue 37), item 14: the Python API's run_case refuses arguments of the wrong kind with a typed
error naming the argument, instead of a raw TypeError / AttributeError from deep inside."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcsolve.core.errors import CaseError, OutputError
from hpcsolve.run import plan, run_case

CASE = "cases/poisson_manufactured.toml"
SMALL = ["mesh.nx=8"]


@pytest.mark.parametrize("case", [b"cases/poisson_manufactured.toml", 123])
def test_run_case_refuses_a_case_that_is_no_path(case):
    with pytest.raises(CaseError) as exc:
        run_case(case, progress=False, plots=False)
    assert exc.value.field == "case" and type(case).__name__ in str(exc.value)


@pytest.mark.parametrize("out", [123, b"results/x", 1.5])
def test_run_case_refuses_an_out_that_is_no_path(out, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OutputError) as exc:
        run_case(_case_path(), overrides=SMALL, out=out, progress=False, plots=False)
    assert exc.value.field == "out" and type(out).__name__ in str(exc.value)
    assert list(tmp_path.iterdir()) == []          # nothing written


def _case_path() -> Path:
    return Path(__file__).resolve().parents[1] / CASE


def test_run_case_refuses_another_runs_description():
    """A description planned for the cavity passed with the Poisson case: refused (it used to run the Poisson case
    on the cavity's setup and fail with AttributeError); the planned one of the same case runs."""
    *_, cavity = plan(_case_path().parent / "lid_driven_cavity.toml")
    with pytest.raises(CaseError) as exc:
        run_case(_case_path(), overrides=SMALL, description=cavity, progress=False, plots=False)
    assert exc.value.field == "description"
    case, backend, policy, desc = plan(_case_path(), overrides=SMALL)
    result = run_case(case, backend, policy, description=desc, progress=False, plots=False)
    assert result.status == "converged" and result.metrics["error_vs_fp64_reference"] < 1e-12


def test_run_case_refuses_a_description_of_another_kind():
    with pytest.raises(CaseError) as exc:
        run_case(_case_path(), overrides=SMALL, description=("not", "one"), progress=False, plots=False)
    assert exc.value.field == "description" and "tuple" in str(exc.value)
