"""Batched monitor points (hpcsolve/lbm/device_monitor.py): the points queued on the device and read in batches give
the per-point host path's series, steady stop, status and fields.

- under the CUDA simulator (marker ``cudasim``): a tiny obstacle channel (18 x 8 cells) on Numba-CUDA, batched
  (3 rows per batch, no time cadence, so that full batches and batches ending at a steady check both occur)
  against the per-point host path of the same backend;
- on the GPU machine (marker ``gpu``): the same comparison on CuPy and Numba-CUDA for a short 2D-2-like run;
- in the main stage: the batch logic (``BatchedPoints.flush``) on hand-made rows: the first bad point stops the
  batch, the good points before it are recorded, a steady check's change is sqrt(sum du^2 / sum u^2).
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from hpcsolve.lbm import device_monitor, runner as lbm_runner
from hpcsolve.lbm.device_monitor import SUMS, BatchedPoints
from hpcsolve.lbm.monitor import ON_DEVICE

ROOT = Path(__file__).resolve().parents[2]

#: 18 x 8 cells (inlet, outlet and wall rows included), a cylinder of 4 cells across; ramp 4 steps, a point every
#: 2 steps, a steady check every 4: the steady change falls below 0.315 at step 12 of 24 (NumPy: 0.594 at 8,
#: 0.312 at 12), so the run stops there
TINY = """
solver = "lbm"
name = "tiny_obstacle"
[physics]
reynolds = 10.0
length = 0.2
velocity = 0.2
[lattice]
resolution = 4
velocity = 0.05
collision = "bgk"
[domain]
length = 0.8
height = 0.3
[boundaries]
left = "inlet"
right = "outlet"
bottom = "wall"
top = "wall"
inlet_profile = "parabolic"
ramp_time = 0.05
[[obstacles]]
shape = "circle"
center = [0.3, 0.15]
diameter = 0.2
[time]
end_time = 0.3
monitor_interval = 2
[steady]
enabled = true
tolerance = 0.315
interval = 4
"""


def _both_paths(case, backend, monkeypatch, overrides=()):
    """(batched result, per-point result, flushes of the batched run) of ``case`` on ``backend``."""
    from hpcsolve.run import run_case

    flushes = []
    real_flush = BatchedPoints.flush

    def counted(self):
        flushes.append(len(self.pending))
        return real_flush(self)

    monkeypatch.setattr(BatchedPoints, "flush", counted)
    batched = run_case(case, backend, "fp64", overrides=list(overrides), progress=False, plots=False)
    monkeypatch.setattr(lbm_runner, "batched_points", lambda *a, **k: None)
    per_point = run_case(case, backend, "fp64", overrides=list(overrides), progress=False, plots=False)
    return batched, per_point, flushes


def _assert_same(batched, per_point, rtol: float, atol: float = 0.0):
    assert batched.status == per_point.status
    assert batched.message == per_point.message
    assert batched.metrics["steps"] == per_point.metrics["steps"]
    assert set(batched.series) == set(per_point.series)
    assert np.array_equal(batched.series["step"], per_point.series["step"])        # bitwise: the step indices
    for key in batched.series:
        a, b = np.asarray(batched.series[key]), np.asarray(per_point.series[key])
        fin = np.isfinite(b)
        assert np.array_equal(np.isfinite(a), fin), key
        tol = atol if key.startswith(("drag", "lift")) else 0.0
        assert np.allclose(a[fin], b[fin], rtol=rtol, atol=tol), (key, np.max(np.abs(a[fin] - b[fin])))
    for name in ("velocity", "pressure", "vorticity"):
        assert np.array_equal(batched.fields[name], per_point.fields[name]), name


@pytest.mark.cudasim
def test_batched_points_equal_per_point_points_under_the_simulator(tmp_path, monkeypatch):
    case = tmp_path / "tiny.toml"
    case.write_text(TINY)
    monkeypatch.setattr(device_monitor, "ROWS", 3)
    monkeypatch.setattr(device_monitor, "FLUSH_SECONDS", math.inf)
    batched, per_point, flushes = _both_paths(case, "numba-cuda", monkeypatch)
    assert per_point.status == "converged" and per_point.metrics["steps"] == 12
    # points 2, 4, 6 fill a batch; 8 and 12 are steady checks (a batch ends there); 10 waits for 12
    assert flushes == [3, 1, 2]
    assert len(batched.series["step"]) == 7
    _assert_same(batched, per_point, rtol=1e-12)


@pytest.mark.cudasim
def test_batched_peeks_give_the_per_point_growth_and_not_steady_message(tmp_path, monkeypatch):
    """A run that ends not_steady: the stall test's peeks (reduction mode 3, the reference kept) give the batched path
    the growth exponents and the final message of the per-point path (a check's peek is read in the batch before it,
    against the reference the check compares with)."""
    case = tmp_path / "tiny.toml"
    case.write_text(TINY.replace("tolerance = 0.315", "tolerance = 1e-12"))
    monkeypatch.setattr(device_monitor, "ROWS", 3)
    monkeypatch.setattr(device_monitor, "FLUSH_SECONDS", math.inf)
    batched, per_point, _ = _both_paths(case, "numba-cuda", monkeypatch)
    assert per_point.status == "not_steady" and per_point.metrics["steps"] == 24
    assert "growth exponent" in per_point.message
    # the forces are summed with atomics (their order follows the simulator's threads, which load reorders): the
    # lift about 1e-14 here differs by round-off, hence an absolute tolerance for drag and lift (as on the GPU)
    _assert_same(batched, per_point, rtol=1e-12, atol=1e-12)
    assert batched.metrics["steady_growth_last"] == pytest.approx(per_point.metrics["steady_growth_last"], rel=1e-9)


class _Rows:
    """Point kernels whose rows are given (the main-stage test of the batch logic)."""

    def __init__(self, rows, bad):
        self.rows, self.bad, self.queued = np.asarray(rows, float), np.asarray(bad, np.int32), []

    def alloc(self, rows, width):
        self.width = width

    def point(self, mode, row):
        self.queued.append((mode, row))

    def force(self, mask, row, col):
        pass

    def fetch(self, rows):
        return self.rows[:rows], self.bad[:rows]

    def event(self):
        return None

    def set_reference(self, u):
        self.reference = u


class _Monitor:
    """What BatchedPoints asks of a Monitor, recording what it is given."""

    def __init__(self, steady_plan):
        self.geo = SimpleNamespace(measured=[0], obstacles=[np.zeros((2, 2), bool)])
        self.fluid = np.ones((2, 2), bool)
        self.last_steady_u, self.last_steady_step = None, 0
        self.plan, self.recorded, self.moved, self.references = steady_plan, [], [], []

    def steady_action(self, step):
        return self.plan.get(step)

    def steady_moved(self, step, action, reference):
        self.moved.append((step, action, reference))

    def record_values(self, step, energy, peak, forces, action, change=None, moved=False, reference_step=None):
        self.recorded.append((step, energy, peak, forces, action, change, moved))
        self.references.append(reference_step)


def test_a_batch_records_its_good_points_and_stops_at_the_first_bad_one():
    rows = [[2.0, 0.1, 4.0, 0.0, 1.5, -0.5],
            [3.0, 0.2, 16.0, 1.0, 1.6, -0.4],       # a steady check: change sqrt(1 / 16)
            [4.0, 0.7, 9.0, 0.0, 1.7, -0.3],        # lattice speed 0.7 > 0.5: the blow-up
            [5.0, 0.1, 9.0, 0.0, 1.8, -0.2]]
    monitor = _Monitor({20: "check"})
    kernels = _Rows(rows, [0, 0, 0, 1])
    points = BatchedPoints(monitor, None, kernels, peak_limit=0.5, good_step=0, rows=8)
    for step in (10, 20, 30, 40):
        points.point(step)
    assert [m for m, _ in kernels.queued] == [0, 1, 0, 0]
    assert [r for _, r in kernels.queued] == [0, 1, 2, 3]
    assert monitor.moved == [(10, None, ON_DEVICE), (20, "check", ON_DEVICE), (30, None, ON_DEVICE),
                             (40, None, ON_DEVICE)]
    bad, seconds = points.flush()
    assert (bad.step, bad.good_step, bad.finite, bad.peak) == (30, 20, True, 0.7)
    assert [r[0] for r in monitor.recorded] == [10, 20]
    assert monitor.recorded[0][1:4] == (2.0, 0.1, [(1.5, -0.5)])
    assert monitor.recorded[1][5] == pytest.approx(0.25) and monitor.recorded[1][6] is True
    assert seconds == 0.0 and points.pending == []


def test_a_nonfinite_flag_is_a_blow_up_before_the_speed():
    monitor = _Monitor({})
    kernels = _Rows([[1.0, 0.1, 1.0, 0.0, 0.0, 0.0], [1.0, 0.1, 1.0, 0.0, 0.0, 0.0]], [0, 1])
    points = BatchedPoints(monitor, None, kernels, peak_limit=0.5, good_step=4, rows=8)
    points.point(6)
    points.point(8)
    bad, _ = points.flush()
    assert (bad.step, bad.good_step, bad.finite) == (8, 6, False)
    assert [r[0] for r in monitor.recorded] == [6]


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cupy", "numba-cuda"])
def test_batched_points_equal_per_point_points_on_the_gpu(backend, monkeypatch):
    """A short 2D-2-like run (cylinder_2d2 at D = 20, a point every 25 steps, snapshots) and a steady 2D-1 run
    that stops at steady state: batched and per-point paths give the same series (the device reductions sum in
    another order: rtol 1e-12; the forces sum with float64 atomics: atol 1e-12), steady stop, status and fields."""
    from hpcsolve.core import backends

    status = backends.probe(backend)
    if not status.available or status.simulator:
        pytest.skip(f"{backend}: {status.reason}")
    monkeypatch.setattr(device_monitor, "ROWS", 7)
    monkeypatch.setattr(device_monitor, "FLUSH_SECONDS", math.inf)
    # D = 20 and a 0.1 s smooth start: at D = 10 (tau 0.515) the run blew up at step 1,025 on the H200
    over = ["lattice.resolution=20", "time.end_time=1", "time.monitor_interval=25", "time.output_interval=0.25",
            "boundaries.ramp_time=0.1"]
    batched, per_point, flushes = _both_paths(ROOT / "cases" / "cylinder_2d2.toml", backend, monkeypatch, over)
    assert max(flushes) == 7 and len(flushes) < len(batched.series["step"])
    _assert_same(batched, per_point, rtol=1e-12, atol=1e-12)
    assert len(batched.snapshots) == len(per_point.snapshots) > 0
    steady = ["lattice.resolution=10", "time.end_time=12", "time.monitor_interval=25", "boundaries.ramp_time=0.5",
              "steady.interval=200", "steady.tolerance=2e-2"]
    monkeypatch.undo()
    monkeypatch.setattr(device_monitor, "ROWS", 7)
    batched, per_point, _ = _both_paths(ROOT / "cases" / "cylinder_2d1.toml", backend, monkeypatch, steady)
    _assert_same(batched, per_point, rtol=1e-12, atol=1e-12)
