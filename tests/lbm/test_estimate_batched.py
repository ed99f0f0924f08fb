"""The run-time estimate of a run whose monitor points are batched on the device (hpcsolve/lbm/device_monitor.py):
the probe times the points as the run makes them (an interval's steps, the point queued, a read when due) and
takes the steps' own time off, instead of timing the host path's points, which such a run never makes (on the
H200 that predicted 41 s for a 2D-2 run at D = 80 that took 22.6 s).

On the CPU: the cost rule on a fake device whose every step, point and read advances a fake clock by a known
amount, so the expected figures are exact. On the GPU machine (``-m gpu``): a GPU run's estimate takes this
path."""

from __future__ import annotations

import contextlib
import types
from pathlib import Path

import pytest

from hpcsolve.lbm import estimate as est

CASES = Path(__file__).resolve().parents[2] / "cases"
PER_STEP, POINT, READ, ROWS = 1e-5, 2e-4, 1e-3, 8


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class _Backend:
    def __init__(self, clock):
        self.clock = clock

    @contextlib.contextmanager
    def timer(self):
        t = types.SimpleNamespace(seconds=0.0)
        start = self.clock.now
        yield t
        t.seconds = self.clock.now - start

    def synchronize(self):
        pass


class _Points:
    """A device whose steps cost PER_STEP each, a queued point POINT and a read READ (a full batch is ROWS)."""

    def __init__(self, clock):
        self.clock, self.pending, self.queued, self.reads, self.steps = clock, [], [], 0, 0

    def step(self, n, timer):
        self.clock.now += n * PER_STEP
        self.steps += n

    def point(self, step):
        self.clock.now += POINT
        self.pending.append(step)
        self.queued.append(step)

    def due(self):
        return len(self.pending) >= ROWS

    def flush(self):
        if self.pending:
            self.clock.now += READ
            self.reads += 1
            self.pending = []
        return None, 0.0


@pytest.mark.parametrize("short", [True, False])
def test_a_batched_point_costs_its_queueing_and_its_share_of_the_reads(monkeypatch, short):
    clock = _Clock()
    monkeypatch.setattr(est, "_time", types.SimpleNamespace(perf_counter=clock))
    points, interval = _Points(clock), 40
    first, per_point = est._batched_point_cost(points, None, _Backend(clock), interval, PER_STEP, short)
    # the first point is read at once (its kernels compile in a real run): its queueing and one read
    assert first == pytest.approx(POINT + READ, rel=1e-9)
    timed = len(points.queued) - 1
    assert timed >= 4 and points.queued == [interval * (i + 1) for i in range(timed + 1)]
    # with a short interval the points follow their steps, as in the run; a long one times the points alone
    assert points.steps == (interval * (timed + 1) if short else 0)
    reads = points.reads - 1
    assert per_point == pytest.approx(POINT + READ * reads / timed, rel=1e-9)
    # the probe ran for PROBE_SECONDS of the fake clock (chunks of 4, 8, ...)
    assert clock.now >= est.PROBE_SECONDS


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cupy", "numba-cuda"])
def test_a_gpu_runs_estimate_times_the_batched_points(backend, monkeypatch):
    """The estimate of a GPU run with device monitoring takes the batched points' cost (its basis states it), and a
    point
    costs what the batched probe measured (the cylinder at D = 20, a point every 40 steps)."""
    from hpcsolve import run as runmod
    from hpcsolve.core import backends

    status = backends.probe(backend)
    if not status.available or status.simulator:
        pytest.skip(f"{backend}: {status.reason}")
    calls = []
    real = est._batched_point_cost

    def spy(*args):
        calls.append(real(*args))
        return calls[-1]

    monkeypatch.setattr(est, "_batched_point_cost", spy)
    over = ["lattice.resolution=20", "time.end_time=1"]
    info = runmod.describe(CASES / "cylinder_2d2.toml", backend, "fp32", overrides=over, estimate=True)
    assert len(calls) == 1
    per_point_ms = calls[0][1] * 1e3
    assert f"monitor points at {per_point_ms:.3g} ms" in info["estimate_basis"]


@pytest.mark.cudasim
def test_the_probe_takes_the_batched_points_and_frees_its_stepper(monkeypatch):
    """Under the CUDA simulator the Numba-CUDA stepper has point kernels: the estimate times batched points, and the
    probe's stepper is unreachable when the probe frees the backend's pool at its end (the batched points held it,
    so its memory stayed in CuPy's pool on the H200 until a review caught it)."""
    import gc
    import weakref

    from hpcsolve import run as runmod
    from hpcsolve.core import backends

    made, alive_at_free = [], []
    real_get = est.get_stepper

    def get_stepper(*args, **kwargs):
        made.append(weakref.ref(stepper := real_get(*args, **kwargs)))
        return stepper

    backend = backends.get("numba-cuda")
    real_free = backend.free_pool

    def free_pool():
        gc.collect()
        alive_at_free.append(sum(r() is not None for r in made))
        return real_free()

    monkeypatch.setattr(est, "get_stepper", get_stepper)
    monkeypatch.setattr(backend, "free_pool", free_pool)
    calls = []
    real_cost = est._batched_point_cost
    monkeypatch.setattr(est, "_batched_point_cost", lambda *a: calls.append(real_cost(*a)) or calls[-1])
    monkeypatch.setattr(est, "PROBE_SECONDS", 0.05)
    info = runmod.describe(CASES / "lid_driven_cavity.toml", "numba-cuda", "fp32", estimate=True,
                           overrides=["lattice.resolution=8", "time.steps=200", "time.monitor_interval=20"])
    assert len(calls) == 1 and f"monitor points at {calls[0][1] * 1e3:.3g} ms" in info["estimate_basis"]
    assert made and alive_at_free[-1] == 0, alive_at_free
