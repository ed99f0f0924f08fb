"""The run-time estimate of an LBM run (``hpcsolve run --dry-run``): a probe of the case's own stepper
(``probe``: setup, steps, monitor points, snapshots, steady checks, each timed) and, for a ``steady.enabled``
case, where steady state will stop it (``predict_steady_stop``: the case at a coarser resolution, run to
its steady stop). ``run`` (``hpcsolve.lbm.runner.run``) is passed in: the runner imports this module."""

from __future__ import annotations

import dataclasses
import math
import time as _time
from itertools import combinations

import numpy as np

from hpcsolve.core import backends, heartbeat
from hpcsolve.core.errors import HpcsolveError, RunInterrupted
from hpcsolve.core.family import Description
from hpcsolve.core.precision import Precision
from hpcsolve.lbm.case import Derived, LBMCase, derive
from hpcsolve.lbm.device_monitor import batched_points
from hpcsolve.lbm.monitor import Monitor, device_monitor, host, point_fields, snapshot_fields
from hpcsolve.lbm.setup import build_setup
from hpcsolve.lbm.steppers.stepper import get_stepper

PROBE_SECONDS = 0.3   # how long the run-time probe steps (after a warm-up)
# A monitor point is host work on the fields. Its warm cost is timed for MONITOR_PROBE_SECONDS, and longer
# (MONITOR_PROBE_SHARE of the run's predicted monitor time, at most MONITOR_PROBE_MAX_SECONDS) when the run
# is monitor-bound: on the H200 machine's host the first fraction of a second of points took 7.2-7.5 ms each
# where the 25 s run of Cylinder 2D-2 averaged 4.8 ms (a busy host CPU runs faster than one just woken).
MONITOR_PROBE_SECONDS = 0.2
MONITOR_PROBE_SHARE = 0.05
MONITOR_PROBE_MAX_SECONDS = 1.5

#: steady-state prediction: the case at resolution / k (k a power of two up to SURROGATE_MAX_FACTOR, at least
#: SURROGATE_MIN_RESOLUTION cells across, else 8 with k = 2) runs towards its steady stop for at most this wall
#: time in all (every coarser copy tried shares it: `--dry-run` answers in seconds on a 2-core machine); one that
#: has not stopped by then has its steady change's decay extrapolated (``extrapolated_stop``)
SURROGATE_MAX_FACTOR = 8
SURROGATE_MIN_RESOLUTION = 16
SURROGATE_SECONDS = 2.0
#: the copies' nominal rate in cell updates per second, on which ``WorkClock`` counts SURROGATE_SECONDS (NumPy on
#: the 2-core development machine, quiet: Poiseuille's copy at 8 cells 2.8 M, the cavity's at 16 cells 3.3 M)
SURROGATE_NOMINAL_RATE = 3.0e6
#: the extrapolation fits log(change) against the step over the last EXTRAPOLATION_CHECKS steady checks (at least
#: 3); a change that is not decreasing over them gives no prediction
EXTRAPOLATION_CHECKS = 6


@dataclasses.dataclass
class Costs:
    """What ``probe`` measured: seconds of the setup and per step, ramp step, monitor point, steady check and
    snapshot (0 where the run has none)."""

    setup_s: float
    ramp: int
    per_ramp_step: float
    per_step: float
    per_monitor: float
    per_steady: float
    per_snapshot: float
    intervals: tuple
    derived: Derived


def estimate_runtime(case: LBMCase, backend, policy: Precision, description: Description, run) -> dict:
    """The run time from a probe of this case's own stepper (``probe``): the setup, warm steps timed until the
    probe has run ``PROBE_SECONDS`` (ramp steps, which go one launch at a time, timed apart), and
    one monitor point (state check, moments, series, forces) times the number of them; a steady case's
    steps from ``predict_steady_stop`` (which runs the coarser case with ``run``)."""
    backend = backends.get(backend)
    heartbeat.phase("probing the run time: timing steps and monitor points")
    c = probe(case, backend, policy, description)
    derived, ramp = c.derived, c.ramp
    steps, steady = derived.steps, None
    if case.steady.enabled:
        heartbeat.phase("probing the run time: a coarser copy towards its steady stop "
                        f"(at most {SURROGATE_SECONDS:g} s)")
        steady = predict_steady_stop(case, backend, policy, derived, run)
        if steady.get("predicted_steps"):
            steps = max(min(steady["predicted_steps"], derived.steps), ramp)
    # the run stops for a monitor point at every multiple of monitor_interval, of output_every and of the
    # checkpoint interval (+ the initial state and the end)
    points = _stops(steps, c.intervals) + 2
    snapshots = steps // derived.output_every if derived.output_every else 0
    checks = max(steps - ramp, 0) // max(case.steady.interval, 1) if case.steady.enabled else 0
    seconds = (c.setup_s + ramp * c.per_ramp_step + (steps - ramp) * c.per_step + points * c.per_monitor
               + snapshots * c.per_snapshot + checks * c.per_steady)
    info = description.parameters
    mlups = info.get("fluid_cells", 0) / c.per_step / 1e6 if c.per_step > 0 else math.nan
    out = {"probe_mlups": mlups, "estimated_seconds": seconds, "estimated_steps": steps,
           "estimate_basis": _basis(c, steps, points, snapshots, checks) + _steady_basis(steady, steps, derived)}
    if steady is not None:
        out["steady_prediction"] = steady
    return out


def _basis(c: Costs, steps: int, points: int, snapshots: int, checks: int) -> str:
    """The estimate's terms in words."""
    return (f"setup {c.setup_s:.3g} s + {steps} steps at {c.per_step * 1e3:.3g} ms"
            + (f" ({c.ramp} ramp steps at {c.per_ramp_step * 1e3:.3g} ms)" if c.ramp else "")
            + f" + {points} monitor points at {c.per_monitor * 1e3:.3g} ms"
            + (f" + {snapshots} snapshots at {c.per_snapshot * 1e3:.3g} ms" if snapshots else "")
            + (f" + {checks} steady checks at {c.per_steady * 1e3:.3g} ms" if checks else "")
            + ", probed on this case")


def _steady_basis(steady: dict | None, steps: int, derived) -> str:
    """How the steady stop entered the estimate (nothing without steady.enabled)."""
    if steady is None:
        return ""
    if steady.get("predicted_steps"):
        return (f"; steady state predicted at step {steps} of {derived.steps} by the case at resolution "
                f"{steady['surrogate_resolution']} ("
                + (f"stopped at step {steady['surrogate_steps']}" if steady.get("basis") != "extrapolated" else
                   f"stopped at step {steady['surrogate_steps_run']} and its steady change's decay extrapolated to step "
                   "{} (exponential) to {} (power law, taken)".format(*steady["surrogate_steps_range"]))
                + f", {steady['surrogate_seconds']:.2g} s)")
    return f"; an upper bound: steady state stops the run early ({steady.get('why', '')})"


def probe(case: LBMCase, backend, policy: Precision, description: Description) -> Costs:
    """Time the run's parts on this case's own stepper (one stepper at a time, freed at the end)."""
    # the set-up the run pays: its setup and its first stepper, made cold (the first stepper of a process
    # loads the GPU kernels); a second stepper (the ramp probe's successor) is made warm and not counted
    t0 = _time.perf_counter()
    derived, geo, setup = build_setup(case, policy, description.setup)
    ramp = min(derived.ramp_steps, derived.steps)
    per_ramp_step = 0.0
    steady_setup = dataclasses.replace(setup, ramp_steps=0)
    stepper = get_stepper(backend, setup if ramp else steady_setup)
    setup_s = _time.perf_counter() - t0
    if ramp:   # one stepper at a time: the probe never holds more state than the run
        per_ramp_step = _probe_steps(stepper, backend, batch=False, limit=ramp)
        del stepper
        backend.free_pool()
        stepper = get_stepper(backend, steady_setup)
    per_step = _probe_steps(stepper, backend, batch=True)
    monitor = Monitor(case, derived, geo)

    on_device = device_monitor(backend, derived.nx * derived.ny)

    def monitor_point():          # what the run does every monitor_interval steps
        stepper.finite()
        rho, ux, uy = point_fields(stepper, on_device)
        monitor.record(stepper, 0, rho, ux, uy, monitor.peak(ux, uy))
        return rho, ux, uy

    # the first monitor point compiles the GPU reductions (hundreds of ms on CuPy) and the first snapshot
    # its field kernels: each counted once, the warm ones per point / per snapshot (every output_every
    # steps, not every monitor point)
    first_monitor, fields = _timed(monitor_point, 1)

    def steps_between():          # as in the run, each point follows its interval's steps (not timed)
        stepper.step(case.time.monitor_interval)
        backend.synchronize()

    # (when an interval is short: a long one would make the probe as long as the run)
    short = per_step * case.time.monitor_interval <= 0.05
    intervals = (case.time.monitor_interval, derived.output_every, case.time.checkpoint_interval)
    t0 = _time.perf_counter()
    batched = batched_points(Monitor(case, derived, geo), stepper, math.inf, 0) if on_device else None
    on_points = batched is not None
    if on_points:       # the run queues its points on the device (hpcsolve/lbm/device_monitor.py)
        made = _time.perf_counter() - t0            # the point kernels' compilation, at their first use
        first_point, per_monitor = _batched_point_cost(batched, stepper, backend, case.time.monitor_interval,
                                                       per_step, short)
        del batched     # it holds the stepper: freed with it below
        # each read of a batch fetches the fields too (point_fields): the first (compiling) counted once
        warm_fields, _ = _timed(monitor_point, 1)
        setup_s += made + max(first_point - per_monitor, 0.0) + max(first_monitor - warm_fields, 0.0)
    else:
        per_monitor = _median_time(monitor_point, points=_stops(derived.steps, intervals) + 2,
                                   before=steps_between if short else None)
        setup_s += max(first_monitor - per_monitor, 0.0)
    # the steady check copies the fluid velocity to the host every steady.interval steps after the smooth
    # start (the points above, all at step 0, never compare); batched, a check is a point's reduction against the
    # reference kept on the device, in the points' cost
    per_steady = 0.0
    if case.steady.enabled and not on_points:
        per_steady = _median_time(lambda: monitor.fluid_velocity(*fields[1:]), points=3)
    per_snapshot = 0.0
    if derived.output_every:
        snap = (lambda: snapshot_fields(*host(*fields), derived, geo, 0))
        first_snapshot, _ = _timed(snap, 1)
        per_snapshot, _ = _timed(snap, 2)
        setup_s += max(first_snapshot - per_snapshot, 0.0)
    del stepper
    backend.free_pool()
    return Costs(setup_s, ramp, per_ramp_step, per_step, per_monitor, per_steady, per_snapshot, intervals,
                 derived)


def _batched_point_cost(points, stepper, backend, interval: int, per_step: float, short: bool) -> tuple[float, float]:
    """(seconds of the first batched monitor point, seconds of a warm one beyond its interval's steps), timed as
    the run makes them: an interval's steps, the point queued on the device, the batch read when due. The first
    (its kernels compile) is read at once; the warm ones run for PROBE_SECONDS in all (with the steps when the
    interval is ``short``, else the points alone, queued) and their steps' own time ``per_step`` is taken off."""
    step = 0

    def one():
        nonlocal step
        if short:
            points.step(interval, backend.timer)
        step += interval
        points.point(step)
        if points.due():
            points.flush()

    t0 = _time.perf_counter()
    one()
    points.flush()
    backend.synchronize()
    first = _time.perf_counter() - t0 - (interval * per_step if short else 0.0)
    done, seconds, chunk = 0, 0.0, 4
    while seconds < PROBE_SECONDS and done < 100_000:
        with backend.timer() as t:
            for _ in range(chunk):
                one()
            points.flush()
        done, seconds, chunk = done + chunk, seconds + t.seconds, chunk * 2
    per_point = seconds / done - (interval * per_step if short else 0.0)
    return first, max(per_point, 0.0)


def _timed(fn, n):
    """(mean seconds of ``n`` calls of ``fn``, the last call's value)."""
    t0 = _time.perf_counter()
    for _ in range(n):
        out = fn()
    return (_time.perf_counter() - t0) / n, out


def _stops(steps: int, intervals) -> int:
    """How many of the steps 1..steps are a multiple of at least one of ``intervals`` (those > 0)."""
    iv = sorted({int(i) for i in intervals if i and i > 0})
    return sum((-1) ** (r + 1) * (steps // math.lcm(*c)) for r in range(1, len(iv) + 1) for c in combinations(iv, r))


class WallClock:
    """What the coarse copies' SURROGATE_SECONDS are counted on in the product: wall time."""

    def __call__(self) -> float:
        return _time.perf_counter()

    def copy(self, cells: int, monitor_interval: int) -> None:
        """A coarse copy of ``cells`` cells, a monitor point every ``monitor_interval`` steps, starts (no effect)."""

    def point(self) -> None:
        """The copy running polls its stop at a monitor point (no effect: the wall time runs by itself)."""


class WorkClock(WallClock):
    """The copies' budget counted in their own work at ``rate`` cell updates per second, not on the machine's clock:
    a copy's monitor point (where the run polls its stop, every ``monitor_interval`` steps) adds ``cells x
    monitor_interval / rate`` seconds. The same case then gets the same prediction on every machine whatever its
    load; the test suite counts on it (tests/conftest.py sets ``surrogate_clock`` to one)."""

    def __init__(self, rate: float = SURROGATE_NOMINAL_RATE):
        self.rate, self.now, self.per_point = float(rate), 0.0, 0.0

    def __call__(self) -> float:
        return self.now

    def copy(self, cells: int, monitor_interval: int) -> None:
        self.per_point = cells * monitor_interval / self.rate

    def point(self) -> None:
        self.now += self.per_point


#: what SURROGATE_SECONDS are counted on: the wall time (``WallClock``), or the copies' work (``WorkClock``: tests)
surrogate_clock: WallClock = WallClock()


class _Deadline:
    """A ``stop`` object for ``run``: requested once ``seconds`` of ``surrogate_clock`` have passed (polled once per
    monitor point of the copy)."""

    def __init__(self, seconds: float):
        self.end = surrogate_clock() + seconds

    @property
    def requested(self) -> bool:
        surrogate_clock.point()
        return surrogate_clock() > self.end


def predict_steady_stop(case: LBMCase, backend, policy: Precision, derived, run) -> dict:
    """When a ``steady.enabled`` run will stop: the same case at a k times coarser resolution, same Reynolds
    number, lattice velocity and physical times, with the steady-state check interval (and the monitor
    interval) scaled to the same physical time span (dt is proportional to dx), runs on the same backend
    towards its steady stop; the stop time in physical units, divided by the fine dt and rounded up to the
    fine check interval, is the predicted step. A surrogate costs 1/k^3 of the run. All the copies tried share
    ``SURROGATE_SECONDS`` of wall time (of ``surrogate_clock``: the copies' work at a nominal rate in the test
    suite, ``WorkClock``); a copy still running then has its stop extrapolated from the decay of
    its steady change (``extrapolated_stop``; the prediction says ``"basis": "extrapolated"``). Measured on the
    shipped cases (docs/design/reliability.md): within 7% of the steps the runs took, where the copy ran to its stop.
    ``run``: the LBM run (``hpcsolve.lbm.runner.run``)."""
    res = case.lattice.resolution
    k = SURROGATE_MAX_FACTOR
    while k > 2 and res / k < SURROGATE_MIN_RESOLUTION:
        k //= 2
    if res / k < 8:
        return {"why": f"lattice.resolution {res} is too coarse to predict from a coarser case"}
    why, clock = "", surrogate_clock
    deadline = clock() + SURROGATE_SECONDS
    while k >= 2 and clock() < deadline:
        nres = int(round(res / k))
        small = case.with_overrides(*_surrogate_overrides(case, res / nres, nres))
        t0 = clock()
        try:
            small_derived = derive(small)
            clock.copy(small_derived.nx * small_derived.ny, small.time.monitor_interval)
            res_s = run(small, backend, policy, progress=False, stop=_Deadline(deadline - t0))
            took, stop_step, basis = clock() - t0, int(res_s.metrics["steps"]), "ran to its stop"
        except RunInterrupted as exc:   # the shared wall time is over: the decay so far says when it would stop
            took = clock() - t0
            span = extrapolated_stop(getattr(exc, "result", None), small.steady.tolerance)
            if span is None:
                return {"why": f"the case at resolution {nres} did not reach steady state within "
                               f"{SURROGATE_SECONDS:g} s, and " + extrapolation_problem(getattr(exc, "result", None))}
            res_s, basis, stop_step = exc.result, "extrapolated", span[1]
        except (HpcsolveError, FloatingPointError, ValueError) as exc:    # e.g. tau too close to 1/2: a finer one
            why = f"resolution {nres}: {str(exc).splitlines()[0][:120]}"
            k //= 2
            continue
        finally:
            backend.free_pool()
        if basis == "ran to its stop" and res_s.status != "converged":
            why = f"the case at resolution {nres} ended '{res_s.status}' in {took:.2g} s"
            k //= 2
            continue
        extra = {} if basis != "extrapolated" else {"surrogate_steps_range": list(span),
                                                      "surrogate_steps_run": int(res_s.metrics["steps"])}
        return {"surrogate_resolution": nres, "surrogate_steps": stop_step, "surrogate_seconds": took,
                "basis": basis, **extra, **_fine_steps(case, derived, float(res_s.derived.get("dt_s", math.nan)) * stop_step)}
    return {"why": why or f"no coarser case reached steady state within {SURROGATE_SECONDS:g} s"}


def _surrogate_overrides(case: LBMCase, ratio: float, nres: int) -> list[str]:
    """The ``--set`` overrides of the coarser copy: resolution, and the intervals scaled to the same physical
    spans; no outputs or checkpoints."""
    overrides = [f"lattice.resolution={nres}", f"steady.interval={max(1, round(case.steady.interval / ratio))}",
                 f"time.monitor_interval={max(1, round(case.time.monitor_interval / ratio))}",
                 "time.output_interval=0", "time.checkpoint_interval=0"]
    if case.time.steps:
        overrides.append(f"time.steps={math.ceil(case.time.steps / ratio)}")
    return overrides


def _fine_steps(case: LBMCase, derived, t_stop: float) -> dict:
    """The fine run's stop step for the physical stop time ``t_stop``: the run checks at monitor points, a
    reference at the first one after the smooth start, then every ``interval`` steps (rounded up to points)."""
    mi = case.time.monitor_interval
    first = math.ceil(derived.ramp_steps / mi) * mi
    every = math.ceil(case.steady.interval / mi) * mi
    steps = first + max(1, math.ceil((t_stop / derived.units.dt - first) / every)) * every
    return {"stop_time_s": t_stop, "predicted_steps": int(steps)}


def extrapolated_stop(result, tolerance: float) -> tuple[int, int] | None:
    """(low, high): the steps at which a run stopped early (``result``: its Result, with the series ``step`` and
    ``steady_change``) would reach ``tolerance``, its last ``EXTRAPOLATION_CHECKS`` steady checks carried on from
    the last one as an exponential decay (log(change) linear in the step: low) and as a power law (linear in
    log(step): high). A short window cannot tell them apart, and the decay rate of a flow spinning up slows: the
    Re 1000 cavity at 64 cells lost a factor 0.75 per 1,000 steps from step 17,000 to 22,000, as steadily as an
    exponential, and 0.885 at step 53,000; from those checks the exponential gives 23,000, the power law 59,400,
    and the copy run on stopped at 54,000. Poiseuille's change decays exponentially (checks to step 2,500: 3,500
    against a power law's 4,700, stop at 3,500). None with fewer than 3 checks or a change not decreasing over
    them (``extrapolation_problem`` says which)."""
    series = getattr(result, "series", None) or {}
    steps = np.asarray(series.get("step", ()), dtype=np.float64)
    change = np.asarray(series.get("steady_change", ()), dtype=np.float64)
    if steps.size != change.size or steps.size == 0:
        return None
    ok = np.isfinite(change) & (change > 0) & (steps > 0)
    new = np.r_[True, change[1:] != change[:-1]] & ok      # the points where a check gave a new change
    s, c = steps[new][-EXTRAPOLATION_CHECKS:], np.log(change[new][-EXTRAPOLATION_CHECKS:])
    if s.size < 3:
        return None
    if c[-1] <= math.log(tolerance):
        return int(s[-1]), int(s[-1])
    rate, power = float(np.polyfit(s, c, 1)[0]), float(np.polyfit(np.log(s), c, 1)[0])
    if not (rate < 0 and power < 0):
        return None
    gap = math.log(tolerance) - c[-1]
    return (int(math.ceil(s[-1] + gap / rate)), int(math.ceil(s[-1] * math.exp(gap / power))))


def extrapolation_problem(result) -> str:
    """Why ``extrapolated_stop`` gave no step for ``result``: too few steady checks, or a change not decreasing."""
    change = np.asarray((getattr(result, "series", None) or {}).get("steady_change", ()), dtype=np.float64)
    ok = np.isfinite(change) & (change > 0)
    checks = int(np.count_nonzero(np.r_[True, change[1:] != change[:-1]] & ok)) if change.size else 0
    if checks < 3:
        return f"it had made {checks} steady check(s) by then (3 are needed to extrapolate)"
    return "its steady change was not decreasing over its last checks"


def _median_time(fn, *, points: int, seconds: float = MONITOR_PROBE_SECONDS, least: int = 5,
                 before=None) -> float:
    """Median seconds of warm calls of ``fn`` (host work, one synchronization each), each after an untimed
    ``before()``. Timed one by one for ``seconds``, or for ``MONITOR_PROBE_SHARE`` of the ``points`` calls
    the run makes (at most ``MONITOR_PROBE_MAX_SECONDS``); the median of the later half of the calls, since
    the first ones cost more (Cylinder 2D-2 on the development CPU: 12.6, 12.5, then 10.4-11.1 ms)."""
    times: list[float] = []
    while True:
        if len(times) >= least:
            goal = min(max(seconds, MONITOR_PROBE_SHARE * points * float(np.median(times))),
                       MONITOR_PROBE_MAX_SECONDS)
            if sum(times) >= goal or len(times) >= max(points, least):
                break
        if before is not None:
            before()
        t0 = _time.perf_counter()
        fn()
        times.append(_time.perf_counter() - t0)
    return float(np.median(times[len(times) // 2:]))


def _probe_steps(stepper, backend, batch: bool, limit: int | None = None) -> float:
    """Seconds per step of ``stepper``: a warm-up, then chunks (doubling) until PROBE_SECONDS have
    passed, the time per step of the last chunk; ``batch=False`` steps one call at a time, as the smooth
    start does; ``limit``: at most this many steps in all (the smooth start's, which cost more than the
    steps after it: a probe running past its end timed 2D-1's smooth start 40 % short)."""
    def advance(n):
        if batch:
            stepper.step(n)
        else:
            for _ in range(n):
                stepper.step(1)

    limit = 10**9 if limit is None else max(int(limit), 1)
    warm = min(2, limit)
    advance(warm)
    backend.synchronize()
    done, seconds, chunk, last = warm, 0.0, 2, 0.0
    while seconds < PROBE_SECONDS and done < 100_000 and (last == 0.0 or done + chunk <= limit):
        chunk = min(chunk, max(limit - done, 1))
        with backend.timer() as t:
            advance(chunk)
        done, seconds, last, chunk = done + chunk, seconds + t.seconds, t.seconds / chunk, chunk * 2
    # the last chunk, at least half of the probe's steps: an idle GPU's clocks come up during the first ones
    # (on a freshly started H200 the mean over all chunks gave up to 1.5x the run's time per step)
    return last
