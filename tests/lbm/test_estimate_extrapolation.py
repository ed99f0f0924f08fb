"""The steady-stop prediction of ``--dry-run`` when its coarse copy runs out of its wall time: the stop is
extrapolated from the copy's steady checks (``hpcsolve.lbm.estimate.extrapolated_stop``), or the estimate says why it
cannot be."""

from pathlib import Path

import numpy as np
import pytest

from hpcsolve.core import backends
from hpcsolve.core.cases import load_case
from hpcsolve.core.precision import get_precision
from hpcsolve.lbm import estimate, runner
from hpcsolve.lbm.case import derive

CASES = Path(__file__).parent.parent.parent / "cases"


class _StopAfter:
    """A stop requested at the n-th poll (the run polls once per monitor point): the copy's wall time ends at the
    same step on every machine."""

    def __init__(self, polls: int):
        self.polls = polls

    @property
    def requested(self) -> bool:
        self.polls -= 1
        return self.polls < 0


def _series(steps, changes):
    return type("R", (), {"series": {"step": np.asarray(steps, float), "steady_change": np.asarray(changes, float)}})()


def test_the_extrapolation_brackets_the_stop_of_a_decay_that_slows():
    """The Re 1000 cavity's copy at 64 cells (NumPy fp64, measured): its checks from step 17,000 to 22,000, carried
    on, bracket the step 54,000 at which the copy run on stopped (tolerance 1e-5)."""
    steps = np.arange(17, 23) * 1000.0
    changes = [0.0115, 0.00864, 0.00637, 0.00478, 0.00355, 0.00269]
    low, high = estimate.extrapolated_stop(_series(steps, changes), 1e-5)
    assert low < 54_000 < high


def test_the_extrapolation_of_exact_decays():
    """step^-4 from checks at 1,000..6,000: the power law reaches 1e-6 at 31,623 steps; exp(-step / 500): the
    exponential reaches 1e-6 at step 500 ln(1e6) = 6,908."""
    steps = np.arange(1, 7) * 1000.0
    assert estimate.extrapolated_stop(_series(steps, (steps / 1000.0) ** -4.0), 1e-6)[1] == pytest.approx(31_623, abs=1)
    assert estimate.extrapolated_stop(_series(steps, np.exp(-steps / 500.0)), 1e-6)[0] == pytest.approx(6_908, abs=1)


@pytest.mark.parametrize("changes, why", [([1.0, 0.5], "made 2 steady check"),
                                          ([0.1, 0.2, 0.3, 0.4], "not decreasing")])
def test_no_extrapolation_from_too_few_or_rising_checks(changes, why):
    result = _series(np.arange(1, len(changes) + 1) * 100, changes)
    assert estimate.extrapolated_stop(result, 1e-6) is None
    assert why in estimate.extrapolation_problem(result)


def test_a_copy_stopped_early_predicts_the_stop_of_the_copy_run_to_the_end(monkeypatch):
    """Poiseuille (16 cells, its copy at 8, a check every 500 steps): the copy stopped after 25 monitor points
    (2,500 steps) extrapolates its stop; the range brackets the step at which the uninterrupted copy stops, and
    the prediction taken (the power law's end) is at most 40 % past it (the decay is exponential here)."""
    case = load_case(CASES / "poiseuille.toml")
    policy, backend = get_precision("fp64", family="lbm"), backends.get("numpy")
    full = estimate.predict_steady_stop(case, backend, policy, derive(case), runner.run)
    assert full["basis"] == "ran to its stop"
    monkeypatch.setattr(estimate, "_Deadline", lambda seconds: _StopAfter(25))
    early = estimate.predict_steady_stop(case, backend, policy, derive(case), runner.run)
    assert early["basis"] == "extrapolated" and early["surrogate_steps_run"] < full["surrogate_steps"]
    low, high = early["surrogate_steps_range"]
    assert low <= full["surrogate_steps"] <= high == early["surrogate_steps"] <= 1.4 * full["surrogate_steps"]
