"""Run an LBM case: case -> lattice setup -> Stepper -> monitored time loop -> Result.

``FAMILY`` is the LBM family of ``hpcsolve.core.family`` (describe, estimate_runtime, run) for
``hpcsolve.run``. The state stays on the backend's device; it comes to the
host only at monitor points (every ``time.monitor_interval`` steps: NaN/Inf check, series,
forces, steady-state check) and at output times.
"""

from __future__ import annotations

import dataclasses
import math
import time as _time
import warnings
from pathlib import Path

import numpy as np
from tqdm import tqdm

from hpcsolve.core import backends, memory, parallel
from hpcsolve.lbm import memory as lbm_memory
from hpcsolve.core.backends import get_array_module, to_host
from hpcsolve.core.checkpoint import MISSING, Checkpoint, CheckpointError, as_number, write_checkpoint
from hpcsolve.core.errors import BlowUpError, CaseError, HpcsolveError, RunInterrupted
from hpcsolve.core.family import SOLVER_SECONDS, Description
from hpcsolve.lbm.boundaries import layer
from hpcsolve.lbm import geometry as geom
from hpcsolve.lbm import lattice, physics, observables as obs
from hpcsolve.lbm.case import Derived, LBMCase, derive
from hpcsolve.lbm.steppers.stepper import FLUID, OUTLET, STREAMING, VELOCITY, LBMSetup, get_stepper
from hpcsolve.core.precision import Precision, get_precision
from hpcsolve.core.results import Result, Snapshot, StructuredGrid


def build_setup(case: LBMCase, policy: Precision, built: tuple[Derived, geom.Geometry] | None = None
                ) -> tuple[Derived, geom.Geometry, LBMSetup]:
    """Derived parameters, geometry and the stepper's setup; ``built``: (derived, geometry) that
    ``describe`` already made for this case."""
    derived, geo = built if built is not None else (derive(case), None)
    if geo is None:
        geo = geom.build(case, derived)
    rho0 = u0 = None
    u_lb = case.lattice.velocity
    fluid = geo.fluid
    if case.initial.condition == "taylor_green":
        ny, nx = geo.shape
        X, Y = np.meshgrid(np.arange(nx) + 0.5, np.arange(ny) + 0.5)
        side = nx  # periodic box, lattice units
        ux, uy = obs.taylor_green_velocity(X, Y, side, u_lb, 0.0, 0.0)
        rho0 = 1.0 + obs.taylor_green_pressure(X, Y, side, u_lb) / lattice.CS2
        u0 = np.stack([ux, uy])
    elif case.initial.condition == "inflow":
        u0 = np.zeros((2,) + geo.shape)
        u0[0][fluid] = u_lb
    setup = LBMSetup(flags=geo.flags, relaxation_time=derived.units.relaxation_time,
                     collision=case.lattice.collision, magic=case.lattice.magic, policy=policy,
                     boundary_velocity=geo.boundary_velocity, initial_density=rho0, initial_velocity=u0,
                     links=geo.links, ramp_steps=derived.ramp_steps,
                     in_place=STREAMING[case.lattice.streaming])
    if case.boundaries.absorbing_layer is not None:
        setup = dataclasses.replace(setup, absorbing_layer=layer.from_case(
            case.boundaries.absorbing_layer, case.boundaries, geo, case.domain, setup.relaxation_time, setup.omegas[0]))
    return derived, geo, setup


class LBMFamily:
    """The lattice-Boltzmann family (``hpcsolve.core.family.Family``)."""

    name = "lbm"
    capabilities = frozenset({"checkpoint", "resume", "graceful_stop"})

    def describe(self, case: LBMCase, backend, policy: Precision) -> Description:
        """Derived lattice parameters and the peak memory (hpcsolve.core.memory); builds the geometry (reused
        by ``run``) unless the run would not fit in host memory (then ``run`` refuses it)."""
        backend = backends.get(backend)
        derived = derive(case)
        info = derived.summary()
        cells = derived.nx * derived.ny
        info["collision"] = case.lattice.collision
        estimate = lbm_memory.estimate(case, derived, backend, policy)
        info["memory"] = memory.describe(estimate)
        free = backends.host_memory_available()
        if free is not None and estimate.host_bytes > free:   # refused by run; validate still reports it
            info["fluid_cells"] = cells
            return Description(info, estimate=estimate, note="geometry not built (the run does not fit in host "
                                                             "memory); fluid_cells is the grid size")
        geo = geom.build(case, derived)
        info["fluid_cells"] = int(np.count_nonzero(geo.fluid))
        info["obstacle_cells"] = int(sum(int(m.sum()) for m in geo.obstacles))
        info.update(_bounce_back_summary(geo))
        return Description(info, estimate=estimate, setup=(derived, geo))

    def check_inputs(self, case: LBMCase, backend, policy: Precision, description: Description) -> dict:
        """Nothing beyond ``describe``: it derives and checks every parameter and builds the geometry."""
        return {}

    def estimate_runtime(self, case: LBMCase, backend, policy: Precision, description: Description) -> dict:
        """The run time from a probe of this case's own stepper: the setup, warm steps timed until the
        probe has run ``PROBE_SECONDS`` (ramp steps, which go one launch at a time, timed apart), and
        one monitor point (state check, moments, series, forces) times the number of them."""
        import dataclasses

        backend = backends.get(backend)
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
        monitor = _Monitor(case, derived, geo)

        on_device = _device_monitor(backend, derived.nx * derived.ny)

        def monitor_point():          # what the run does every monitor_interval steps
            stepper.finite()
            rho, ux, uy = _point_fields(stepper, on_device)
            monitor.record(stepper, 0, rho, ux, uy, monitor.peak(ux, uy))
            return rho, ux, uy

        def timed(fn, n):
            t0 = _time.perf_counter()
            for _ in range(n):
                out = fn()
            return (_time.perf_counter() - t0) / n, out

        # the first monitor point compiles the GPU reductions (hundreds of ms on CuPy) and the first snapshot
        # its field kernels: each counted once, the warm ones per point / per snapshot (every output_every
        # steps, not every monitor point)
        first_monitor, fields = timed(monitor_point, 1)

        def steps_between():          # as in the run, each point follows its interval's steps (not timed)
            stepper.step(case.time.monitor_interval)
            backend.synchronize()

        # (when an interval is short: a long one would make the probe as long as the run)
        short = per_step * case.time.monitor_interval <= 0.05
        intervals = (case.time.monitor_interval, derived.output_every, case.time.checkpoint_interval)
        per_monitor = _median_time(monitor_point, points=_stops(derived.steps, intervals) + 2,
                                   before=steps_between if short else None)
        setup_s += max(first_monitor - per_monitor, 0.0)
        # the steady check copies the fluid velocity to the host every steady.interval steps after the smooth
        # start (the points above, all at step 0, never compare)
        per_steady = 0.0
        if case.steady.enabled:
            per_steady = _median_time(lambda: monitor.fluid_velocity(*fields[1:]), points=3)
        per_snapshot = 0.0
        if derived.output_every:
            snap = (lambda: _snapshot_fields(*_host(*fields), derived, geo, 0))
            first_snapshot, _ = timed(snap, 1)
            per_snapshot, _ = timed(snap, 2)
            setup_s += max(first_snapshot - per_snapshot, 0.0)
        del stepper
        backend.free_pool()
        steps, steady = derived.steps, None
        if case.steady.enabled:
            steady = predict_steady_stop(case, backend, policy, derived)
            if steady.get("predicted_steps"):
                steps = max(min(steady["predicted_steps"], derived.steps), ramp)
        # the run stops for a monitor point at every multiple of monitor_interval, of output_every and of the
        # checkpoint interval (+ the initial state and the end)
        points = _stops(steps, intervals) + 2
        snapshots = steps // derived.output_every if derived.output_every else 0
        checks = max(steps - ramp, 0) // max(case.steady.interval, 1) if case.steady.enabled else 0
        seconds = (setup_s + ramp * per_ramp_step + (steps - ramp) * per_step + points * per_monitor
                   + snapshots * per_snapshot + checks * per_steady)
        info = description.parameters
        mlups = info.get("fluid_cells", 0) / per_step / 1e6 if per_step > 0 else math.nan
        if steady is None:
            how = ""
        elif steady.get("predicted_steps"):
            how = (f"; steady state predicted at step {steps} of {derived.steps} by the case at resolution "
                   f"{steady['surrogate_resolution']} (stopped at step {steady['surrogate_steps']}, "
                   f"{steady['surrogate_seconds']:.2g} s)")
        else:
            how = f"; an upper bound: steady state stops the run early ({steady.get('why', '')})"
        out = {"probe_mlups": mlups, "estimated_seconds": seconds, "estimated_steps": steps,
               "estimate_basis": (f"setup {setup_s:.3g} s + {steps} steps at {per_step * 1e3:.3g} ms"
                                  + (f" ({ramp} ramp steps at {per_ramp_step * 1e3:.3g} ms)" if ramp else "")
                                  + f" + {points} monitor points at {per_monitor * 1e3:.3g} ms"
                                  + (f" + {snapshots} snapshots at {per_snapshot * 1e3:.3g} ms" if snapshots else "")
                                  + (f" + {checks} steady checks at {per_steady * 1e3:.3g} ms" if checks else "")
                                  + ", probed on this case"
                                  + how)}
        if steady is not None:
            out["steady_prediction"] = steady
        return out

    def run(self, case: LBMCase, backend, policy: Precision, *, description: Description | None = None,
            progress: bool = True, stop=None, checkpoint_dir=None, resume: Checkpoint | None = None) -> Result:
        return run(case, backend, policy, progress=progress, stop=stop, checkpoint_dir=checkpoint_dir,
                   resume=resume, built=description.setup if description is not None else None)


def _stops(steps: int, intervals) -> int:
    """How many of the steps 1..steps are a multiple of at least one of ``intervals`` (those > 0)."""
    from itertools import combinations

    iv = sorted({int(i) for i in intervals if i and i > 0})
    return sum((-1) ** (r + 1) * (steps // math.lcm(*c)) for r in range(1, len(iv) + 1) for c in combinations(iv, r))


#: steady-state prediction: the case at resolution / k (k a power of two up to SURROGATE_MAX_FACTOR, at least
#: SURROGATE_MIN_RESOLUTION cells across, else 8 with k = 2) runs to its steady stop within this wall time
SURROGATE_MAX_FACTOR = 8
SURROGATE_MIN_RESOLUTION = 16
SURROGATE_SECONDS = 30.0


class _Deadline:
    """A ``stop`` object for ``run``: requested once the wall time is past."""

    def __init__(self, seconds: float):
        self.end = _time.perf_counter() + seconds

    @property
    def requested(self) -> bool:
        return _time.perf_counter() > self.end


def predict_steady_stop(case: LBMCase, backend, policy: Precision, derived) -> dict:
    """When a ``steady.enabled`` run will stop: the same case at a k times coarser resolution, same Reynolds
    number, lattice velocity and physical times, with the steady-state check interval (and the monitor
    interval) scaled to the same physical time span (dt is proportional to dx), runs on the same backend
    to its steady stop; the stop time in physical units, divided by the fine dt and rounded up to the
    fine check interval, is the predicted step. A surrogate costs 1/k^3 of the run. Measured on the
    shipped cases (docs/reliability.md): within 7% of the steps the runs took."""
    res = case.lattice.resolution
    k = SURROGATE_MAX_FACTOR
    while k > 2 and res / k < SURROGATE_MIN_RESOLUTION:
        k //= 2
    if res / k < 8:
        return {"why": f"lattice.resolution {res} is too coarse to predict from a coarser case"}
    why = ""
    while k >= 2:
        nres = int(round(res / k))
        ratio = res / nres
        overrides = [f"lattice.resolution={nres}", f"steady.interval={max(1, round(case.steady.interval / ratio))}",
                     f"time.monitor_interval={max(1, round(case.time.monitor_interval / ratio))}",
                     "time.output_interval=0", "time.checkpoint_interval=0"]
        if case.time.steps:
            overrides.append(f"time.steps={math.ceil(case.time.steps / ratio)}")
        try:
            small = case.with_overrides(*overrides)
            t0 = _time.perf_counter()
            res_s = run(small, backend, policy, progress=False, stop=_Deadline(SURROGATE_SECONDS))
            took = _time.perf_counter() - t0
        except RunInterrupted:
            return {"why": f"the case at resolution {nres} did not reach steady state within {SURROGATE_SECONDS:g} s"}
        except (HpcsolveError, FloatingPointError, ValueError) as exc:    # e.g. tau too close to 1/2: a finer one
            why = f"resolution {nres}: {str(exc).splitlines()[0][:120]}"
            k //= 2
            continue
        finally:
            backend.free_pool()
        if res_s.status != "converged":
            why = f"the case at resolution {nres} ended '{res_s.status}' in {took:.2g} s"
            k //= 2
            continue
        t_stop = float(res_s.derived.get("dt_s", math.nan)) * int(res_s.metrics["steps"])
        # the run checks at monitor points: a reference at the first one after the smooth start, then
        # every `interval` steps (rounded up to monitor points)
        mi = case.time.monitor_interval
        first = math.ceil(derived.ramp_steps / mi) * mi
        every = math.ceil(case.steady.interval / mi) * mi
        steps = first + max(1, math.ceil((t_stop / derived.units.dt - first) / every)) * every
        return {"surrogate_resolution": nres, "surrogate_steps": int(res_s.metrics["steps"]),
                "surrogate_seconds": took, "stop_time_s": t_stop, "predicted_steps": int(steps)}
    return {"why": why or "no coarser case reached steady state"}


def describe(case: LBMCase, backend, policy: Precision) -> dict:
    """Derived parameters and memory estimate as a dict (``LBMFamily.describe``)."""
    return FAMILY.describe(case, backend, policy).as_dict()


def _bounce_back_summary(geo: geom.Geometry) -> dict:
    """Which obstacles use interpolated bounce-back and how many links it touches."""
    if not geo.interpolated:
        return {}
    links = geo.links
    return {"interpolated_obstacles": list(geo.interpolated),
            "interpolated_links": 0 if links is None else len(links),
            "interpolated_links_simple_fallback": 0 if links is None else links.fallback}


class _Monitor:
    """Series and checks at monitor points."""

    def __init__(self, case: LBMCase, derived: Derived, geo: geom.Geometry):
        self.case, self.derived, self.geo = case, derived, geo
        self.fluid = geo.fluid
        # physical units: kinetic energy per metre of depth (J/m), speeds in m/s; coefficients are dimensionless
        self.series: dict[str, list] = {"step": [], "time": [], "kinetic_energy": [], "max_speed": []}
        if case.initial.condition == "taylor_green":
            self.series["kinetic_energy_analytic"] = []
        if case.steady.enabled:
            self.series["steady_change"] = []
        for k in geo.measured:
            sfx = "" if k == geo.measured[0] else f"_{k}"
            self.series[f"drag_coefficient{sfx}"] = []
            self.series[f"lift_coefficient{sfx}"] = []
        self.last_steady_u = None
        self.last_steady_step = 0
        self._fluid_device = None
        self.steady_change = math.inf

    def fluid_like(self, array):
        """The fluid mask on the side of ``array`` (host, or a device copy made once)."""
        xp = get_array_module(array)
        if xp is np:
            return self.fluid
        if self._fluid_device is None:
            self._fluid_device = xp.asarray(self.fluid)
        return self._fluid_device

    def fluid_velocity(self, ux, uy) -> np.ndarray:
        """Host float64 (2, fluid cells): the steady check's state (kept as its reference and checkpointed)."""
        fluid = self.fluid_like(ux)
        return np.stack([to_host(ux[fluid]), to_host(uy[fluid])])

    def peak(self, ux, uy) -> float:
        """max |u| over the fluid in lattice units (the stability check)."""
        return obs.peak_speed(ux, uy, self.fluid_like(ux))

    def record(self, stepper, step: int, rho, ux, uy, peak: float | None = None) -> None:
        """Append the point's series. rho, ux, uy: host arrays or (``stepper.fields_on_device()``) device
        arrays, reduced on the device; ``peak``: the point's ``self.peak(ux, uy)`` where already known."""
        s = self.series
        s["step"].append(step)
        s["time"].append(self.derived.units.time_of(step))
        units = self.derived.units
        to_ms = units.dx / units.dt
        energy = units.density * to_ms**2 * units.dx**2      # lattice kinetic energy -> J per metre of depth
        fluid = self.fluid_like(rho)
        s["kinetic_energy"].append(obs.kinetic_energy(rho, ux, uy, fluid) * energy)
        s["max_speed"].append((self.peak(ux, uy) if peak is None else peak) * to_ms)
        if "kinetic_energy_analytic" in s:
            ny, nx = self.geo.shape
            X, Y = np.meshgrid(np.arange(nx) + 0.5, np.arange(ny) + 0.5)
            ua, va = obs.taylor_green_velocity(X, Y, nx, self.case.lattice.velocity, units.lattice_viscosity, step)
            s["kinetic_energy_analytic"].append(obs.kinetic_energy(np.ones_like(ua), ua, va, self.fluid) * energy)
        for k in self.geo.measured:
            sfx = "" if k == self.geo.measured[0] else f"_{k}"
            f = stepper.force(self.geo.obstacles[k])
            cd, cl = obs.force_coefficients(f, self.case.lattice.velocity, self.case.lattice.resolution)
            s[f"drag_coefficient{sfx}"].append(cd)
            s[f"lift_coefficient{sfx}"].append(cl)
        if self.case.steady.enabled:
            if self.last_steady_u is None or self.last_steady_step < self.derived.ramp_steps:
                # compare only states from the end of the smooth start on (the boundary velocities rise before);
                # a reference from inside the smooth start is replaced at the next point, so none is kept
                self.last_steady_u = self.fluid_velocity(ux, uy) if step >= self.derived.ramp_steps else None
                self.last_steady_step = step
            elif step - self.last_steady_step >= self.case.steady.interval:
                u = self.fluid_velocity(ux, uy)
                self.steady_change = obs.relative_change(u, self.last_steady_u)
                self.last_steady_u, self.last_steady_step = u, step
            s["steady_change"].append(self.steady_change)

    def arrays(self) -> dict[str, np.ndarray]:
        return {k: np.asarray(v, dtype=np.float64) for k, v in self.series.items()}


def _fields(rho, ux, uy, derived: Derived, geo: geom.Geometry, step: int) -> dict[str, np.ndarray]:
    """The written fields in physical units. Moving walls, inlets and outlets carry their velocity
    (the lid row shows the lid); derivatives next to walls use the wall velocity at the half-way wall."""
    u = derived.units
    scale = u.dx / u.dt
    wall_u = geo.boundary_velocity * physics.ramp_factor(step, derived.ramp_steps)
    bx, by = obs.boundary_field_velocity(ux, uy, geo.flags, wall_u, FLUID, VELOCITY, OUTLET)
    return {
        "velocity": np.stack([bx * scale, by * scale], axis=-1),
        "pressure": np.where(geo.fluid, u.pressure_to_physical(rho), 0.0),
        "density_lattice": rho,
        "vorticity": obs.vorticity(ux, uy, geo.fluid, wall_u[0], wall_u[1], geo.flags == OUTLET) / u.dt,
        "flags": geo.flags.astype(np.int32),
    }


#: device memory a monitor point on the device takes beyond the run's estimate, per cell: float64 rho, ux, uy kept
#: as the last good state (24) and a point's own (24 more, while the last are held) and its temporaries
DEVICE_MONITOR_BYTES_PER_CELL = 96


def _device_monitor(backend, cells: int) -> bool:
    """Reduce monitor points on the device only where the device has room for it now (free memory, CuPy's pool
    not counted): otherwise the points copy the fields to the host as before, and the memory estimate of the run
    (which does not count the device path) stays true."""
    if not getattr(backend, "gpu", False):
        return False
    try:
        free = backend.available_memory()
    except Exception:                   # a backend that cannot say: the host path
        return False
    return free is not None and free >= 1.25 * DEVICE_MONITOR_BYTES_PER_CELL * cells


def _point_fields(stepper, on_device: bool = True):
    """(rho, ux, uy) at a monitor point: on the device where the stepper has them there and ``on_device`` (the
    point's reductions run there and scalars come back: Cylinder 2D-2's 4,800 points cost 4.3-7.3 ms each on
    the H200 machine's host, where its 96,000 steps took 1.2 s), else the host copies."""
    fields = stepper.fields_on_device() if on_device else None
    return fields if fields is not None else stepper.macroscopic()


def _host(*arrays):
    return tuple(to_host(a) for a in arrays)


PROBE_SECONDS = 0.3   # how long the run-time probe steps (after a warm-up)
# A monitor point is host work on the fields. Its warm cost is timed for MONITOR_PROBE_SECONDS, and longer
# (MONITOR_PROBE_SHARE of the run's predicted monitor time, at most MONITOR_PROBE_MAX_SECONDS) when the run
# is monitor-bound: on the H200 machine's host the first fraction of a second of points took 7.2-7.5 ms each
# where the 25 s run of Cylinder 2D-2 averaged 4.8 ms (a busy host CPU runs faster than one just woken).
MONITOR_PROBE_SECONDS = 0.2
MONITOR_PROBE_SHARE = 0.05
MONITOR_PROBE_MAX_SECONDS = 1.5


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


# A lattice speed this high (Mach ~0.87) at a monitor point means the run has gone unstable.
BLOW_UP_LATTICE_SPEED = 0.5


def run(case: LBMCase, backend, policy: Precision, *, progress: bool = True, stop=None,
        checkpoint_dir=None, resume: Checkpoint | None = None, built=None) -> Result:
    """Run the case. ``stop`` (an object with a ``requested`` attribute, set by a signal handler) is
    polled between step chunks; ``checkpoint_dir`` receives checkpoints every
    ``time.checkpoint_interval`` steps and on a requested stop; ``resume`` continues from one;
    ``built``: (derived, geometry) from ``describe``."""
    t_start = _time.perf_counter()
    policy.require("lbm")
    backend = backends.get(backend)
    derived, geo, setup = build_setup(case, policy, built)
    for w in derived.warnings:
        warnings.warn(w, stacklevel=2)
    comm = parallel.world()
    ranks = parallel.ranks(comm)
    if ranks > 1:                  # mpiexec -n N: this rank's slab of rows (hpcsolve/lbm/distributed.py)
        from hpcsolve.lbm.distributed import SlabStepper

        stepper = SlabStepper(backend, setup, comm)
    else:
        stepper = get_stepper(backend, setup)
    units = derived.units
    x, y = geo.cell_centres()
    result = Result(case_name=case.name, solver="lbm", backend=backend, precision=policy.name,
                    grid=StructuredGrid(nx=derived.nx, ny=derived.ny, spacing=units.dx,
                                        origin=(float(x[0]), float(y[0])), unit="m"))
    result.derived = {**derived.summary(), "collision": case.lattice.collision,
                      "streaming": "in-place" if getattr(stepper, "in_place", False) else "two-buffer",
                      "fluid_cells": int(np.count_nonzero(geo.fluid)), **_bounce_back_summary(geo)}
    from hpcsolve.lbm.plots import plot_result

    result.plotter = plot_result
    result.provenance["decomposition"] = (stepper.decomposition() if ranks > 1 else
                                          {"ranks": 1, "kind": "none", "rows_per_rank": [derived.ny]})
    monitor = _Monitor(case, derived, geo)
    on_device = _device_monitor(backend, derived.nx * derived.ny)
    total = derived.steps
    every = case.time.monitor_interval
    out_every = derived.output_every
    # every rank takes part in a checkpoint (it gathers the populations); rank 0 writes it
    ckpt_every, ckpt_on_stop = comm.bcast((case.time.checkpoint_interval if checkpoint_dir is not None else 0,
                                           checkpoint_dir is not None), root=0)
    step_seconds = 0.0
    earlier_seconds = 0.0      # wall time of the runs before a resume (from the checkpoint)
    if resume is None:
        step = 0
        rho, ux, uy = stepper.macroscopic()
        mass0 = float(np.sum(rho[geo.fluid]))
        monitor.record(stepper, 0, rho, ux, uy)
    else:
        step, mass0, step_seconds, earlier_seconds = _restore(resume, stepper, monitor, result)
        rho, ux, uy = stepper.macroscopic()
    last_good = (rho, ux, uy, step)
    status, message = "completed", ""
    bar = tqdm(total=total, initial=step, disable=not progress, delay=2, unit="step", desc=case.name)

    def checkpoint():
        elapsed = earlier_seconds + _time.perf_counter() - t_start
        state = _checkpoint(case, backend, policy, stepper, monitor, result, step, mass0, step_seconds, elapsed)
        if checkpoint_dir is not None:
            write_checkpoint(checkpoint_dir, state)

    try:
        while step < total:
            nxt = min(total, (step // every + 1) * every)
            for interval in (out_every, ckpt_every):
                if interval:
                    nxt = min(nxt, (step // interval + 1) * interval)
            with backend.timer() as timer:
                stepper.step(nxt - step)
            step_seconds += timer.seconds
            bar.update(nxt - step)
            step = nxt
            if not stepper.finite():
                _blow_up(result, case, derived, geo, monitor, last_good, step, "NaN/Inf in the populations")
            rho, ux, uy = _point_fields(stepper, on_device)
            peak = monitor.peak(ux, uy)          # lattice units (the stability limit)
            if peak > BLOW_UP_LATTICE_SPEED:
                _blow_up(result, case, derived, geo, monitor, last_good, step,
                         f"lattice speed {peak:.3g} > {BLOW_UP_LATTICE_SPEED} (Mach {peak / math.sqrt(lattice.CS2):.2f})")
            last_good = (rho, ux, uy, step)
            monitor.record(stepper, step, rho, ux, uy, peak)
            if out_every and step % out_every == 0:
                result.snapshots.append(Snapshot(time=units.time_of(step), step=step,
                                                 fields=_snapshot_fields(*_host(rho, ux, uy), derived, geo, step)))
            if case.steady.enabled and monitor.steady_change < case.steady.tolerance:
                status = "converged"
                bar.total = step         # the bar ends at 100% when steady state stops the run early
                bar.refresh()
                message = (f"steady state at step {step}: relative velocity change {monitor.steady_change:.3g} "
                           f"per {case.steady.interval} steps < {case.steady.tolerance:g}")
                break
            if ckpt_every and step % ckpt_every == 0 and step < total:
                checkpoint()
            requested = stop is not None and getattr(stop, "requested", False)
            if ranks > 1:              # the ranks stop together (a signal reaches them at different steps)
                requested = any(comm.allgather(bool(requested)))
            if requested:
                status = "interrupted"
                message = f"interrupted at step {step} of {total}"
                if ckpt_on_stop:
                    checkpoint()
                    if checkpoint_dir is not None:      # the rank that writes knows where
                        message += f"; resume with: hpcsolve run --resume {Path(checkpoint_dir)}"
                break
    finally:
        bar.close()
    if case.steady.enabled and status == "completed":
        status = "not_steady"
        message = (f"steady state not reached in {step} steps (last relative change {monitor.steady_change:.3g}, "
                   f"tolerance {case.steady.tolerance:g}); raise time.end_time")
    result.status, result.message = status, message
    rho, ux, uy = _host(rho, ux, uy)
    result.fields = _fields(rho, ux, uy, derived, geo, step)
    result.series = monitor.arrays()
    fluid_updates = result.derived["fluid_cells"] * step
    result.timings = {"total_s": earlier_seconds + _time.perf_counter() - t_start, "step_s": step_seconds, SOLVER_SECONDS: step_seconds,
                      "mlups": fluid_updates / step_seconds / 1e6 if step_seconds > 0 else 0.0}
    m = {"steps": step, "simulated_time_s": units.time_of(step),
         "max_lattice_speed": float(np.max(obs.speed(ux, uy)[geo.fluid])),
         "mass_relative_drift": float(np.sum(rho[geo.fluid]) / mass0 - 1.0),
         "steady_state_reached": status == "converged" if case.steady.enabled else None}
    if resume is not None:
        m["resumed_from_step"] = resume.step
    if case.steady.enabled:
        m["steady_change"] = monitor.steady_change
    m.update(reference_metrics(case, derived, geo, stepper, rho, ux, uy, step, result))
    result.metrics = {k: v for k, v in m.items() if v is not None}
    if status == "interrupted":
        exc = RunInterrupted(f"{case.name}: {message}")
        exc.result = result
        raise exc
    return result


def _checkpoint(case, backend, policy, stepper, monitor, result, step, mass0, step_seconds,
                total_seconds) -> Checkpoint:
    """The full state at ``step``: populations, monitor series, steady-state tracking, snapshots."""
    arrays = {"populations": stepper.populations()}
    if monitor.last_steady_u is not None:
        arrays["steady_last_u"] = monitor.last_steady_u
    snaps = []
    for i, snap in enumerate(result.snapshots):
        for name, a in snap.fields.items():
            arrays[f"snapshot_{i:06d}_{name}"] = a
        snaps.append({"time": snap.time, "step": snap.step, "fields": list(snap.fields)})
    state = {"series": monitor.series, "mass0": mass0, "step_seconds": step_seconds, "snapshots": snaps,
             "total_seconds": total_seconds,
             "last_steady_step": monitor.last_steady_step, "steady_change": monitor.steady_change}
    meta = {"backend": str(backend), "precision": policy.name, "case_text": case.text,
            "case_json": case.effective_json(), "overrides": list(case.overrides), "solver": "lbm",
            "case_file": str(case.path) if case.path else ""}
    return Checkpoint(step=step, arrays=arrays, state=state, meta=meta)


def _restore(ckpt: Checkpoint, stepper, monitor, result) -> tuple[int, float, float, float]:
    """Put the state of ``ckpt`` into the stepper, the monitor and the result. Every field is checked first: a
    missing or malformed one (or populations that do not fit this run) is a CheckpointError naming the
    checkpoint and the field."""
    series = _restored_series(ckpt, list(monitor.series))
    steady_u = ckpt.arrays.get("steady_last_u")
    n_fluid = int(np.count_nonzero(monitor.fluid))
    if steady_u is not None and (np.shape(steady_u) != (2, n_fluid) or not np.issubdtype(steady_u.dtype, np.floating)):
        raise ckpt.error("arrays/steady_last_u", f"{steady_u.dtype} {np.shape(steady_u)}",
                         f"floating-point numbers of shape (2, {n_fluid})")
    last_steady_step = ckpt.whole("state.last_steady_step", maximum=ckpt.step)
    steady_change = ckpt.number("state.steady_change", finite=False)
    mass0 = ckpt.number("state.mass0")
    if not mass0 > 0:
        raise ckpt.error("state.mass0", ckpt.state["mass0"], "a finite number > 0 (the initial fluid mass)")
    step_seconds = ckpt.number("state.step_seconds", minimum=0)
    total_seconds = ckpt.number("state.total_seconds", default=step_seconds, minimum=0)
    snapshots = _restored_snapshots(ckpt, tuple(monitor.geo.shape))
    populations = _restored_populations(ckpt, stepper.policy)
    try:
        stepper.load_populations(populations, ckpt.step)
    except CheckpointError:
        raise
    except CaseError as exc:          # another shape or dtype than this run's
        raise ckpt.error("arrays/populations", exc.value, exc.allowed, why="they do not fit this run") from None
    monitor.series = series
    monitor.last_steady_u = steady_u
    monitor.last_steady_step = last_steady_step
    monitor.steady_change = steady_change
    result.snapshots.extend(snapshots)
    return ckpt.step, mass0, step_seconds, total_seconds


def _restored_populations(ckpt: Checkpoint, policy: Precision) -> np.ndarray:
    """``arrays/populations`` in this run's storage: finite (a checkpoint is written only after the state check,
    so NaN or Inf there is damage), and where the checkpoint's precision differs (``--force``) decoded with its
    policy and encoded with the run's (round to nearest)."""
    populations = ckpt.arrays.get("populations")
    if populations is None:
        raise ckpt.error("arrays/populations", allowed="the run's populations, shape (9, ny, nx)")
    saved = ckpt.meta.get("precision", MISSING)
    if saved is MISSING:
        raise ckpt.error("meta.precision", allowed="the precision the checkpoint's populations are stored in")
    try:
        old = get_precision(saved, "lbm", field="meta.precision") if saved != policy.name else policy
    except CaseError as exc:
        raise ckpt.error("meta.precision", saved, exc.allowed) from None
    if populations.dtype != np.dtype(old.storage):
        raise ckpt.error("arrays/populations", f"{populations.dtype} {populations.shape}",
                         f"{np.dtype(old.storage)} (the storage of meta.precision {old.name!r})")
    if not old.all_finite(populations):
        raise ckpt.error("arrays/populations", "NaN or Inf values", "finite populations",
                         why="the file is damaged (a run writes a checkpoint only after its state check passed)")
    if old is not policy:
        populations = policy.encode(old.decode(populations).astype(policy.compute))
    return populations


def _restored_series(ckpt: Checkpoint, keys: list[str]) -> dict[str, list[float]]:
    """``state.series``: a list of numbers (one per monitor step) for each of this run's series."""
    series = ckpt.state.get("series", MISSING)
    allowed = "an object with a list of numbers for each of " + ", ".join(keys)
    if series is MISSING:
        raise ckpt.error("state.series", allowed=allowed)
    if not isinstance(series, dict):
        raise ckpt.error("state.series", series, allowed)
    if set(series) != set(keys):
        raise ckpt.error("state.series", sorted(series), allowed, why="other series than this run's")
    out, length = {}, len(series[keys[0]]) if isinstance(series[keys[0]], list) else None
    for k, values in series.items():
        numbers = [as_number(v) for v in values] if isinstance(values, list) else None
        if numbers is None or None in numbers or len(numbers) != length:
            raise ckpt.error(f"state.series.{k}", values, f"a list of numbers, as long as state.series.{keys[0]}")
        out[k] = numbers
    return out


def _restored_snapshots(ckpt: Checkpoint, shape: tuple[int, int]) -> list[Snapshot]:
    """``state.snapshots`` with their fields from ``arrays/snapshot_<i>_<name>``."""
    snaps = ckpt.state.get("snapshots", MISSING)
    allowed = "a list of {time, step, fields} objects"
    if snaps is MISSING or not isinstance(snaps, list):
        raise ckpt.error("state.snapshots", snaps, allowed)
    out = []
    for i, snap in enumerate(snaps):
        where = f"state.snapshots[{i}]"
        names = snap.get("fields") if isinstance(snap, dict) else None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ckpt.error(where, snap, allowed)
        time = as_number(snap.get("time"))
        if time is None or not math.isfinite(time):
            raise ckpt.error(f"{where}.time", snap.get("time", MISSING), "a finite number")
        step = snap.get("step", MISSING)
        if type(step) is not int or not 0 <= step <= ckpt.step:
            raise ckpt.error(f"{where}.step", step, f"a whole number from 0 to {ckpt.step}")
        fields = {}
        for name in names:
            key = f"snapshot_{i:06d}_{name}"
            a = ckpt.arrays.get(key)
            if a is None or np.shape(a)[:2] != shape or not np.issubdtype(a.dtype, np.number):
                raise ckpt.error(f"arrays/{key}", MISSING if a is None else f"{a.dtype} {np.shape(a)}",
                                 f"numbers of shape {shape} (+ components)")
            fields[name] = a
        out.append(Snapshot(time=time, step=step, fields=fields))
    return out


def _snapshot_fields(rho, ux, uy, derived, geo, step):
    f = _fields(rho, ux, uy, derived, geo, step)
    return {k: f[k] for k in ("velocity", "pressure", "vorticity")}


def _blow_up(result, case, derived, geo, monitor, last_good, step, cause):
    rho, ux, uy, good_step = last_good
    rho, ux, uy = _host(rho, ux, uy)
    result.status = "blew_up"
    tau = derived.units.relaxation_time
    suggestion = (f"tau = {tau:.4f}, peak lattice velocity {derived.peak_lattice_velocity:.3g}: raise lattice.resolution "
                  f"(tau further from 1/2), lower lattice.velocity"
                  + (", or use lattice.collision = 'trt'" if case.lattice.collision == "bgk" else ""))
    result.message = f"{cause} between step {good_step} and step {step}"
    result.fields = _fields(rho, ux, uy, derived, geo, good_step)
    result.series = monitor.arrays()
    result.metrics = {"steps": step, "last_finite_step": good_step}
    exc = BlowUpError(f"{case.name}: the run blew up ({cause}) between step {good_step} and step {step}; "
                      f"the fields of step {good_step} are kept. Suggestion: {suggestion}",
                      step=step, cause=cause, suggestion=suggestion)
    exc.result = result
    raise exc


def reference_metrics(case, derived, geo, stepper, rho, ux, uy, step, result) -> dict:
    """Errors against analytic or published references, by ``validation.reference``."""
    ref = case.validation.reference
    u_lb = case.lattice.velocity
    m: dict = {}
    if ref == "taylor_green":
        ny, nx = geo.shape
        X, Y = np.meshgrid(np.arange(nx) + 0.5, np.arange(ny) + 0.5)
        ua, va = obs.taylor_green_velocity(X, Y, nx, u_lb, derived.units.lattice_viscosity, step)
        num, den = np.sqrt(np.sum((ux - ua) ** 2 + (uy - va) ** 2)), np.sqrt(np.sum(ua ** 2 + va ** 2))
        # the analytic vortex decays as exp(-2 nu k^2 t): at a low Reynolds number it is 0 in float64 by the end of
        # the run, and no error is relative to it (the absolute one below still says how far the run is from it)
        m["velocity_rel_l2_error"] = float(num / den) if den > 0 else float("nan")
        m["velocity_max_abs_error"] = float(np.max(np.hypot(ux - ua, uy - va)) / u_lb)
    elif ref == "poiseuille":
        p = geo.pad
        ny, nx = geo.shape
        nxf = nx - p[0] - p[1]
        col = p[0] + min(nxf - 1, int(case.validation.sample_x * nxf))
        # compare the mass-flux profile rho u: the inlet imposes the mass flux (rho_w = 1), and the
        # density rises ~3 % along the channel with the pressure drop (weak compressibility), so u
        # alone is low by that factor while rho u is the incompressible solution's rho_0 u
        profile = (rho * ux)[p[2]:ny - p[3], col]
        exact = obs.poiseuille_profile(profile.size, u_lb)
        m["velocity_profile_rel_l2_error"] = obs.relative_l2(ux[p[2]:ny - p[3], col], exact)
        m["profile_rel_l2_error"] = obs.relative_l2(profile, exact)
        m["profile_max_abs_error"] = float(np.max(np.abs(profile - exact)) / u_lb)
        m["sample_column"] = int(col)
        result.series["profile_y"] = (np.arange(profile.size) + 0.5) / profile.size
        result.series["profile_u"] = profile / u_lb
        result.series["profile_u_exact"] = exact / u_lb
    elif ref == "ghia":
        lid = case.boundaries.moving_wall_velocity * u_lb
        (yl, ul), (xl, vl) = obs.centerline_profiles(ux, uy, geo, lid)
        if ("u_at_x0.5", int(round(case.physics.reynolds))) in obs.ghia_data():
            m.update(obs.ghia_errors((yl, ul), (xl, vl), case.physics.reynolds))
        else:
            m["ghia_note"] = (f"no Ghia et al. data for Re {case.physics.reynolds:g} (shipped: "
                              + ", ".join(sorted({str(k[1]) for k in obs.ghia_data()})) + "); centerlines are in the series")
        result.series.update({"centerline_y": yl, "centerline_u": ul, "centerline_x": xl, "centerline_v": vl})
    elif ref.startswith("schafer_turek") and geo.measured:
        st = obs.schafer_turek()
        which = "case_2d1" if ref.endswith("2d1") else "case_2d2"
        mask = geo.obstacles[geo.measured[0]]
        cd, cl = obs.force_coefficients(stepper.force(mask), u_lb, case.lattice.resolution)
        m["drag_coefficient"], m["lift_coefficient"] = cd, cl
        m["pressure_difference_pa"] = _pressure_difference(case, derived, geo, rho)
        ref_data = st[which]
        if which == "case_2d1":
            m["reference_c_D"], m["reference_c_L"], m["reference_dp"] = ref_data["c_D"], ref_data["c_L"], ref_data["dp"]
            m.update(_window_metrics(result.series))
        else:
            m.update(_periodic_metrics(result.series, case))
            m["reference_c_D_max"], m["reference_c_L_max"] = ref_data["c_D_max"], ref_data["c_L_max"]
            m["reference_strouhal"] = ref_data["strouhal"]
    return m


def _window_metrics(series: dict, fraction: float = 0.25) -> dict:
    """Mean and spread (max - min) of c_D and c_L over the last ``fraction`` of the monitor samples.
    After an impulsive start a 'steady' LBM run keeps a weakly damped acoustic mode between the
    velocity inlet and the pressure outlet; the tiny c_L of 2D-1 swings with it, so one final sample
    can be off by tens of per cent (seen on the H200: 0.0088 to 0.0123 at D = 40..80) while the window
    mean is stable. With the smooth start (boundaries.ramp_time) the spread shows what is left of it
    (2.5e-5 at D = 80)."""
    out = {}
    for key in ("drag_coefficient", "lift_coefficient"):
        v = np.asarray(series.get(key, ()), dtype=np.float64)
        if v.size < 8:
            continue
        w = v[-max(4, int(round(fraction * v.size))):]
        out[f"{key}_window_mean"] = float(np.mean(w))
        out[f"{key}_window_spread"] = float(np.max(w) - np.min(w))
    return out


def _pressure_difference(case, derived, geo, rho) -> float:
    """dp = p(front) - p(back) of the first circle along its centre line, at the nearest fluid cells."""
    circle = next(o for o in case.obstacles if o.shape == "circle")
    x, y = geo.cell_centres()
    j = int(np.argmin(np.abs(y - circle.center[1])))
    row_fluid = geo.fluid[j]
    front = np.flatnonzero(row_fluid & (x <= circle.center[0] - circle.diameter / 2))
    back = np.flatnonzero(row_fluid & (x >= circle.center[0] + circle.diameter / 2))
    if not front.size or not back.size:
        return float("nan")
    p = derived.units.pressure_to_physical(rho[j])
    return float(p[front[-1]] - p[back[0]])


def _periodic_metrics(series: dict, case) -> dict:
    """c_D max, c_L max over the second half of the run, Strouhal from the lift."""
    if "lift_coefficient" not in series or series["lift_coefficient"].size < 8:
        return {}
    t = series["time"]
    half = t >= t[0] + 0.5 * (t[-1] - t[0])
    out = {"drag_coefficient_max": float(np.max(series["drag_coefficient"][half])),
           "lift_coefficient_max": float(np.max(series["lift_coefficient"][half]))}
    st = obs.strouhal(t, series["lift_coefficient"], case.physics.length, case.physics.velocity)
    if st is not None:
        out["strouhal"] = st
    return out


FAMILY = LBMFamily()
