"""The steady-stop prediction of ``--dry-run`` (``hpcsolve.lbm.estimate.predict_steady_stop``) on its two clocks: the
product's wall clock (the coarse copies share SURROGATE_SECONDS of wall time), here a fake one so the test does not
depend on the machine, and the suite's work clock (``WorkClock``, tests/conftest.py), on which a copy's budget ends
at the same step whatever the machine's load."""

import math
import types
from pathlib import Path

import pytest

from hpcsolve.core import backends
from hpcsolve.core.cases import load_case
from hpcsolve.core.precision import get_precision
from hpcsolve.lbm import estimate, runner
from hpcsolve.lbm.case import derive

CASES = Path(__file__).parents[2] / "cases"


def _poiseuille():
    """Poiseuille at 16 cells: its copy at 8 cells is 34 x 10 = 340 cells, a monitor point every 100 steps (200 / 2),
    a steady check every 500 (1,000 / 2); run on, it stops at step 3,500."""
    case = load_case(CASES / "poiseuille.toml")
    return case, get_precision("fp64", family="lbm"), backends.get("numpy"), derive(case)


def test_the_work_clock_ends_a_copy_at_the_same_step_whatever_the_machine_clock_does(monkeypatch):
    """With SURROGATE_SECONDS = 0.3 the copy's budget is 0.3 s x 3e6 / (340 cells x 100 steps) = 26.5 monitor
    points of work: the stop comes at the 27th point, step 2,700, and the stop is extrapolated from there. The same
    with the machine's clock racing (every reading 10 s later than the last, as on a machine loaded without end)."""
    case, policy, backend, derived = _poiseuille()
    monkeypatch.setattr(estimate, "SURROGATE_SECONDS", 0.3)
    per_point = 340 * 100 / estimate.SURROGATE_NOMINAL_RATE
    points = math.floor(0.3 / per_point) + 1
    got = []
    for racing in (False, True):
        monkeypatch.setattr(estimate, "surrogate_clock", estimate.WorkClock())
        if racing:
            clock = types.SimpleNamespace(now=0.0)

            def perf_counter():
                clock.now += 10.0
                return clock.now

            monkeypatch.setattr(estimate, "_time", types.SimpleNamespace(perf_counter=perf_counter))
        pred = estimate.predict_steady_stop(case, backend, policy, derived, runner.run)
        assert pred["basis"] == "extrapolated", pred
        assert pred["surrogate_steps_run"] == 100 * points == 2700
        assert pred["surrogate_seconds"] == pytest.approx(points * per_point)
        low, high = pred["surrogate_steps_range"]
        assert 2700 < low <= 3500 <= high == pred["surrogate_steps"]     # brackets the copy's stop (3,500)
        got.append(pred)
    assert got[0] == got[1]


def test_on_the_wall_clock_the_copies_share_the_seconds_and_a_late_copy_is_extrapolated(monkeypatch):
    """The product's rule on a fake wall clock that advances 0.05 s at each reading: the budget (2 s) starts at
    the first reading (2.05 s), the copy starts at the third (0.15 s) and its stop is made at the fourth (0.2 s,
    1.9 s left): the stop would be requested at the first monitor point read past 2.1 s, point 39, and the copy stops
    by itself at point 35 (step 3,500). At 0.06 s a reading the stop comes at point 32, before the copy's own
    stop: its stop is extrapolated from step 3,200."""
    case, policy, backend, derived = _poiseuille()
    monkeypatch.setattr(estimate, "surrogate_clock", estimate.WallClock())
    clock = types.SimpleNamespace(now=0.0, step=0.05)

    def perf_counter():
        clock.now += clock.step
        return clock.now

    monkeypatch.setattr(estimate, "_time", types.SimpleNamespace(perf_counter=perf_counter))
    pred = estimate.predict_steady_stop(case, backend, policy, derived, runner.run)
    assert pred["basis"] == "ran to its stop" and pred["surrogate_steps"] == 3500     # 35 points: inside 2 s
    clock.now, clock.step = 0.0, 0.06           # 0.06 s a reading: the stop at 2.12 s, point 32 reads 2.16 s
    pred = estimate.predict_steady_stop(case, backend, policy, derived, runner.run)
    assert pred["basis"] == "extrapolated" and pred["surrogate_steps_run"] == 3200, pred
    assert pred["surrogate_seconds"] == pytest.approx(0.06 * 34)     # its stop's reading, 32 polls, the one after
