"""Run an LBM case: case -> lattice setup -> Stepper -> monitored time loop -> Result.

``FAMILY`` is the LBM family of ``hpcsolve.core.family`` (describe, estimate_runtime, run) for
``hpcsolve.run``. The state stays on the backend's device; it comes to the
host only at monitor points (every ``time.monitor_interval`` steps: NaN/Inf check, series,
forces, steady-state check) and at output times. On a GPU stepper with room on the device the points are
reduced there into a buffer that the host reads in batches (``device_monitor``: no synchronization per point).

The run's parts live beside it: ``setup`` (``build_setup``), ``monitor`` (monitor points and written fields),
``estimate`` (the run-time probe and the steady-stop prediction), ``checkpoints`` (the LBM state in a
checkpoint) and ``reference`` (errors against references).
"""

from __future__ import annotations

import math
import time as _time
import warnings
from pathlib import Path

import numpy as np
from tqdm import tqdm

from hpcsolve.core import backends, heartbeat, memory, parallel
from hpcsolve.core.checkpoint import Checkpoint, write_checkpoint
from hpcsolve.core.errors import BlowUpError, CaseError, RunInterrupted
from hpcsolve.core.family import SOLVER_SECONDS, Description
from hpcsolve.core.precision import Precision
from hpcsolve.core.results import Result, Snapshot, StructuredGrid
from hpcsolve.lbm import collision as collision_models, estimate
from hpcsolve.lbm import geometry as geom
from hpcsolve.lbm import lattice, observables as obs
from hpcsolve.lbm import memory as lbm_memory
from hpcsolve.lbm.case import LBMCase, derive
from hpcsolve.lbm.checkpoints import make_checkpoint, restore
from hpcsolve.lbm.device_monitor import batched_points
from hpcsolve.lbm.guard import PrecisionGuard
from hpcsolve.lbm.distributed import SlabStepper
from hpcsolve.lbm.monitor import (STALL_GROWTH, Monitor, device_monitor, fields, host, point_fields, snapshot_fields,
                                  storage_resolution)
from hpcsolve.lbm.plots import plot_result
from hpcsolve.lbm.reference import reference_metrics, verdicts as lbm_verdicts
from hpcsolve.lbm.setup import bounce_back_summary, build_setup
from hpcsolve.lbm.steppers.stepper import get_stepper

__all__ = ["FAMILY", "LBMFamily", "describe", "run"]

#: compare's untimed warm-up of a run runs its first this many steps (``LBMFamily.warmup_case``): enough for every
#: step-graph length (64 steps) and a few monitor points; a whole 2D-2 run at D = 80 is 768,000 steps
WARMUP_STEPS = 2000
# A lattice speed this high (Mach ~0.87) at a monitor point means the run has gone unstable.
BLOW_UP_LATTICE_SPEED = 0.5


class LBMFamily:
    """The lattice-Boltzmann family (``hpcsolve.core.family.Family``)."""

    warmup_is_whole_run = False     # compare's warm-up (``warmup_case``) a short copy of a long run
    name = "lbm"
    # stability_rule: ``run`` takes ``force`` (a lattice known to blow up is refused without it)
    capabilities = frozenset({"checkpoint", "resume", "graceful_stop", "stability_rule"})

    def verdicts(self, case: LBMCase, metrics: dict, derived: dict) -> dict:
        """The run's values judged against their references (hpcsolve/lbm/reference.py)."""
        return lbm_verdicts(case, metrics, derived)

    def describe(self, case: LBMCase, backend, policy: Precision) -> Description:
        """Derived lattice parameters and the peak memory (hpcsolve.core.memory); builds the geometry (reused
        by ``run``) unless the run would not fit in host memory (then ``run`` refuses it)."""
        backend = backends.get(backend)
        derived = derive(case)
        info = derived.summary()
        cells = derived.nx * derived.ny
        info["collision"] = case.lattice.collision
        estimate_ = lbm_memory.estimate(case, derived, backend, policy)
        info["memory"] = memory.describe(estimate_)
        free = backends.host_memory_available()
        if free is not None and estimate_.host_bytes > free:   # refused by run; validate still reports it
            info["fluid_cells"] = cells
            return Description(info, estimate=estimate_, note="geometry not built (the run does not fit in host "
                                                              "memory); fluid_cells is the grid size")
        geo = geom.build(case, derived)
        info["fluid_cells"] = int(np.count_nonzero(geo.fluid))
        info["obstacle_cells"] = int(sum(int(m.sum()) for m in geo.obstacles))
        info.update(bounce_back_summary(geo))
        return Description(info, estimate=estimate_, setup=(derived, geo))

    def check_inputs(self, case: LBMCase, backend, policy: Precision, description: Description) -> dict:
        """Nothing beyond ``describe``: it derives and checks every parameter and builds the geometry."""
        return {}

    def estimate_runtime(self, case: LBMCase, backend, policy: Precision, description: Description) -> dict:
        """The run time from a probe of this case's own stepper (``hpcsolve.lbm.estimate.estimate_runtime``)."""
        return estimate.estimate_runtime(case, backend, policy, description, run)

    def warmup_case(self, case: LBMCase, description: Description) -> LBMCase:
        """The first ``WARMUP_STEPS`` steps of the case (``time.steps``): its kernels compile, its step graphs are
        recorded and the memory pools fill as in the whole run; a run of at most that many steps whole."""
        steps = description.parameters.get("steps")
        if isinstance(steps, int) and steps > WARMUP_STEPS:
            return case.with_overrides(f"time.steps={WARMUP_STEPS}")
        return case

    def run(self, case: LBMCase, backend, policy: Precision, *, description: Description | None = None,
            progress: bool = True, stop=None, checkpoint_dir=None, resume: Checkpoint | None = None,
            force: bool = False) -> Result:
        """The run (``hpcsolve run``, ``run_case``); a lattice the stability rule knows to blow up
        (``case.stability``) is refused before any step unless ``force`` (``--force``; it then warns)."""
        built = description.setup if description is not None else None
        if not force:
            refuse_unstable(case, built[0] if built else derive(case))
        return run(case, backend, policy, progress=progress, stop=stop, checkpoint_dir=checkpoint_dir,
                   resume=resume, built=built)


FORCE_TEXT = "a lattice the stability rule accepts, or --force (Python: run_case(..., force=True))"


def refuse_unstable(case: LBMCase, derived, allowed: str = FORCE_TEXT) -> None:
    """A CaseError (exit 2) naming lattice.resolution where the stability rule knows the lattice to blow up
    (``case.stability``: every risk it finds is one of lattice.resolution); ``allowed``: what the caller accepts."""
    if derived.risks:
        raise CaseError.invalid("lattice.resolution", case.lattice.resolution, allowed,
                                why=derived.risks[0].partition(": ")[2])


def describe(case: LBMCase, backend, policy: Precision) -> dict:
    """Derived parameters and memory estimate as a dict (``LBMFamily.describe``)."""
    return FAMILY.describe(case, backend, policy).as_dict()


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
        stepper = SlabStepper(backend, setup, comm)
    else:
        stepper = get_stepper(backend, setup)
    result = _new_result(case, backend, policy, derived, geo, stepper, ranks)
    # the 16-bit guard (hpcsolve/lbm/guard.py): float32 shadow windows at a few steps; off in other precisions
    guard = PrecisionGuard(case, policy, backend, setup, derived,
                           stepper_factory=(lambda s: SlabStepper(backend, s, comm)) if ranks > 1 else None)
    loop = _Loop(case, backend, policy, derived, geo, stepper, result, comm, t_start, checkpoint_dir, resume, guard)
    if guard.next_check is not None:     # the shadow stepper's kernels compile now, not inside a check
        heartbeat.phase("building the 16-bit guard's float32 shadow stepper")
        guard.prepare(stepper)
    bar = tqdm(total=derived.steps, initial=loop.step, disable=not progress, delay=2, unit="step", desc=case.name)
    if progress and hasattr(stop, "notice"):     # a StopRequest (hpcsolve.core.interrupts) says so on a first signal
        stop.notice = loop.stop_notice
    heartbeat.phase(f"stepping ({derived.steps:,} steps; the progress bar shows them)")
    try:
        loop.advance(bar, stop)
    finally:
        bar.close()
        loop.next_point = None            # stepping is over: a signal now finds the result being made
    return loop.finish(resume)


def _new_result(case, backend, policy, derived, geo, stepper, ranks: int) -> Result:
    """The run's Result before its first step: grid, derived parameters, plotter, decomposition."""
    x, y = geo.cell_centres()
    result = Result(case_name=case.name, solver="lbm", backend=backend, precision=policy.name,
                    grid=StructuredGrid(nx=derived.nx, ny=derived.ny, spacing=derived.units.dx,
                                        origin=(float(x[0]), float(y[0])), unit="m"))
    result.derived = {**derived.summary(), "collision": case.lattice.collision,
                      "streaming": "in-place" if getattr(stepper, "in_place", False) else "two-buffer",
                      "fluid_cells": int(np.count_nonzero(geo.fluid)), **bounce_back_summary(geo)}
    result.plotter = plot_result
    result.provenance["decomposition"] = (stepper.decomposition() if ranks > 1 else
                                          {"ranks": 1, "kind": "none", "rows_per_rank": [derived.ny]})
    return result


class _Watch:
    """What the time loop (``_Loop``) does at a monitor point: the state checks and the series (``_point``, read in
    batches by ``_flush``), the steady stall and the precision guard. Its state is the loop's."""

    def _guard_check(self) -> None:
        """A precision-guard check (hpcsolve/lbm/guard.py): a warning at the first flagged check, or (precision_guard
        = "error") the run ends with PrecisionLossError (exit 3) and its result."""
        guard, was = self.guard, self.guard.flagged
        self._flush()
        guard.check(self.stepper, self.step)
        if guard.flagged and not was:
            if guard.mode == "error":
                self._precision_lost()
            with tqdm.external_write_mode():   # the progress bar is cleared first and drawn again below the warning
                warnings.warn(guard.message, stacklevel=2)
            self.result.derived.setdefault("warnings", []).append(guard.message)

    def _precision_lost(self):
        result, guard = self.result, self.guard
        rho, ux, uy = host(*self.fields)
        result.status, result.message = "precision_lost", guard.message
        result.fields = fields(rho, ux, uy, self.derived, self.geo, self.step)
        result.series = {**self.monitor.arrays(), **guard.series()}
        result.metrics = {"steps": self.step, **guard.metrics()}
        exc = guard.error()
        exc.result = result
        raise exc

    def _stalled(self) -> bool:
        """The steady change stalled above the tolerance at the storage's resolution (``Monitor.steady_stall``):
        the run stops here as not_steady, since more steps cannot bring it lower; True where it does."""
        tol, policy = self.case.steady.tolerance, self.policy
        resolution = storage_resolution(policy)
        flow_steps = self.derived.units.characteristic_time / self.derived.units.dt
        stall = self.monitor.steady_stall(tol, resolution, total_steps=self.derived.steps, flow_steps=flow_steps)
        if stall is None:
            return False
        exp = math.floor(math.log10(stall["highest"]))
        suggest = math.ceil(stall["highest"] / 10.0**exp * (1 - 1e-9)) * 10.0**exp
        wider = " or use fp64" if resolution > 1e3 * np.finfo(np.float64).eps else ""
        self.status = "not_steady"
        self.message = (f"steady change stalled at {stall['level']:.2g} from step {stall['from_step']} (rounding "
                        f"noise: it did not grow with the interval, growth exponent <= {stall['growth']:.2f}), above "
                        f"steady.tolerance {tol:g}: {policy.name} cannot resolve a smaller change here; raise "
                        f"steady.tolerance to >= {suggest:.1g}{wider} (stopped at step {self.step} of "
                        f"{self.derived.steps})")
        return True

    def _point(self) -> None:
        """A monitor point: the state checks (a blow-up raises), the series and, at output times, a snapshot.
        Batched: the point is queued on the device, and the batch read where it is due, at outputs and at the
        last step (``_flush``)."""
        step, stepper = self.step, self.stepper
        out_every = self.derived.output_every
        output = bool(out_every and step % out_every == 0)
        if self.points is not None:
            self.points.point(step)
            if output or step >= self.derived.steps or self.points.due():
                self._flush()
        else:
            if not stepper.finite():
                self._blow_up("NaN/Inf in the populations")
            rho, ux, uy = point_fields(stepper, self.on_device)
            peak = self.monitor.peak(ux, uy)          # lattice units (the stability limit)
            if peak > BLOW_UP_LATTICE_SPEED:
                self._blow_up(_speed_cause(peak))
            self.fields = (rho, ux, uy)
            self.last_good = (rho, ux, uy, step)
            self.monitor.record(stepper, step, rho, ux, uy, peak)
            self._warm()
        if output:
            self.result.snapshots.append(Snapshot(time=self.derived.units.time_of(step), step=step,
                                                  fields=snapshot_fields(*host(*self.fields), self.derived,
                                                                         self.geo, step)))

    def _flush(self) -> None:
        """Read the queued points (batched path; nothing queued: nothing): their series, their step time, a
        blow-up among them (raised at its first bad point, with the fields of the last flush), and the fields
        of the current step, which become the last good ones."""
        if self.points is None or not self.points.pending:
            return
        bad, seconds = self.points.flush()
        self.step_seconds += seconds
        self._warm()
        if bad is not None:
            self.step = bad.step
            self._blow_up("NaN/Inf in the populations" if not bad.finite else _speed_cause(bad.peak), bad.good_step)
        rho, ux, uy = point_fields(self.stepper, self.on_device)
        self.fields = (rho, ux, uy)
        self.last_good = (rho, ux, uy, self.step)


class _Loop(_Watch):
    """The monitored time loop of one run: its state between monitor points (step, timings, the last good
    fields, status) and what it does at them (checks, series, snapshots, checkpoints, the stop)."""

    def __init__(self, case, backend, policy, derived, geo, stepper, result, comm, t_start, checkpoint_dir,
                 resume: Checkpoint | None, guard: PrecisionGuard):
        self.case, self.backend, self.policy, self.derived, self.geo = case, backend, policy, derived, geo
        self.stepper, self.result, self.comm, self.t_start = stepper, result, comm, t_start
        self.ranks = parallel.ranks(comm)
        self.checkpoint_dir = checkpoint_dir
        self.monitor = Monitor(case, derived, geo)
        self.on_device = device_monitor(backend, derived.nx * derived.ny)
        # every rank takes part in a checkpoint (it gathers the populations); rank 0 writes it
        self.ckpt_every, self.ckpt_on_stop = comm.bcast(
            (case.time.checkpoint_interval if checkpoint_dir is not None else 0, checkpoint_dir is not None), root=0)
        self.step_seconds = 0.0
        self.earlier_seconds = 0.0      # wall time of the runs before a resume (from the checkpoint)
        if resume is None:
            self.step = 0
            rho, ux, uy = stepper.macroscopic()
            self.mass0 = float(np.sum(rho[geo.fluid]))
            self.monitor.record(stepper, 0, rho, ux, uy)
        else:
            self.step, self.mass0, self.step_seconds, self.earlier_seconds = restore(resume, stepper, self.monitor,
                                                                                     result)
            rho, ux, uy = stepper.macroscopic()
        self.fields = (rho, ux, uy)
        self.last_good = (rho, ux, uy, self.step)
        self.status, self.message = "completed", ""
        self.next_point = self.step       # the monitor point the loop steps towards (a requested stop comes there)
        # one rank with room on the device: the points queue on the device and come back in batches
        # (hpcsolve/lbm/device_monitor.py); else every point is reduced and checked at once (the host path)
        self.points = (batched_points(self.monitor, stepper, BLOW_UP_LATTICE_SPEED, self.step)
                       if self.on_device and self.ranks == 1 else None)
        self.guard = guard
        if resume is not None:              # a resumed run: its checks so far, none again for the steps before it
            guard.restore(resume.state.get("precision_guard"))
        guard.skip_to(self.step)
        self.warm_from: tuple[int, float] | None = None   # (step, step seconds) once the first point is read

    def checkpoint(self) -> None:
        self._flush()
        if self.points is not None:
            self.points.host_reference()
        elapsed = self.earlier_seconds + _time.perf_counter() - self.t_start
        state = make_checkpoint(self.case, self.backend, self.policy, self.stepper, self.monitor, self.result,
                                self.step, self.mass0, self.step_seconds, elapsed)
        state.state["precision_guard"] = self.guard.state()
        if self.checkpoint_dir is not None:
            write_checkpoint(self.checkpoint_dir, state)

    def advance(self, bar, stop) -> None:
        """Step to the end, to steady state or to a requested stop, monitor point by monitor point."""
        case, total, every = self.case, self.derived.steps, self.case.time.monitor_interval
        while self.step < total:
            nxt = min(total, (self.step // every + 1) * every)
            for interval in (self.derived.output_every, self.ckpt_every):
                if interval:
                    nxt = min(nxt, (self.step // interval + 1) * interval)
            self.next_point = nxt
            self._step(nxt - self.step)
            bar.update(nxt - self.step)
            heartbeat.touch()
            self.step = nxt
            self._point()
            if self.guard.due(self.step):
                self._guard_check()
            if case.steady.enabled and self.monitor.steady_change < case.steady.tolerance:
                self.status = "converged"
                bar.total = self.step         # the bar ends at 100% when steady state stops the run early
                bar.refresh()
                self.message = (f"steady state at step {self.step}: relative velocity change "
                                f"{self.monitor.steady_change:.3g} per {case.steady.interval} steps "
                                f"< {case.steady.tolerance:g}")
                break
            if case.steady.enabled and self._stalled():
                break
            if self.ckpt_every and self.step % self.ckpt_every == 0 and self.step < total:
                self.checkpoint()
            if self._stop_requested(stop):
                self._flush()
                self.status = "interrupted"
                self.message = f"interrupted at step {self.step} of {total}"
                if self.ckpt_on_stop:
                    self.checkpoint()
                    if self.checkpoint_dir is not None:      # the rank that writes knows where
                        self.message += f"; resume with: hpcsolve run --resume {Path(self.checkpoint_dir)}"
                break
        self._flush()

    def _step(self, n: int) -> None:
        """n steps, their time added to ``step_seconds`` (batched points: device events, no synchronization)."""
        if self.points is not None:
            self.points.step(n, self.backend.timer)
            return
        with self.backend.timer() as timer:
            self.stepper.step(n)
        self.step_seconds += timer.seconds

    def _warm(self) -> None:
        """Note where the warm timing starts: the first monitor point read (compilation, first graph captures and
        the first launches are before it)."""
        if self.warm_from is None and self.step > 0:
            self.warm_from = (self.step, self.step_seconds)

    def stop_notice(self) -> str:
        """What a first SIGINT/SIGTERM makes the run do (printed at once by ``hpcsolve.core.interrupts``)."""
        writes = "writing checkpoint and result" if self.ckpt_on_stop else "writing the result"
        if self.next_point is None:
            return "the run has ended; finishing its result and plots (a second signal stops at once)"
        return (f"stopping at the next monitor point (step {self.next_point}); {writes} "
                f"(a second signal stops at once)")

    def _stop_requested(self, stop) -> bool:
        requested = stop is not None and getattr(stop, "requested", False)
        if self.ranks > 1:              # the ranks stop together (a signal reaches them at different steps)
            requested = any(self.comm.allgather(bool(requested)))
        return requested

    def _blow_up(self, cause: str, good_step: int | None = None):
        """Raise BlowUpError with the result of the last good step (its fields kept) and a suggestion.
        ``good_step``: the last point checked good where it is later than the kept fields' step (batched
        points keep the fields of their last flush)."""
        case, derived, result = self.case, self.derived, self.result
        rho, ux, uy, fields_step = self.last_good
        good_step = fields_step if good_step is None else good_step
        rho, ux, uy = host(rho, ux, uy)
        result.status = "blew_up"
        tau = derived.units.relaxation_time
        suggestion = (f"tau = {tau:.4f}, peak lattice velocity {derived.peak_lattice_velocity:.3g}: raise "
                      f"lattice.resolution (tau further from 1/2), lower lattice.velocity"
                      + collision_models.get(case.lattice.collision).advice)
        result.message = f"{cause} between step {good_step} and step {self.step}"
        result.fields = fields(rho, ux, uy, derived, self.geo, fields_step)
        result.series = self.monitor.arrays()
        result.metrics = {"steps": self.step, "last_finite_step": good_step}
        if fields_step != good_step:
            result.metrics["fields_step"] = fields_step
        exc = BlowUpError(f"{case.name}: the run blew up ({cause}) between step {good_step} and step {self.step}; "
                          f"the fields of step {fields_step} are kept. Suggestion: {suggestion}",
                          step=self.step, cause=cause, suggestion=suggestion)
        exc.result = result
        raise exc

    def _timings(self, step: int) -> dict:
        """Wall time, step time, MLUPS over every step and over the warm steps (``TIMING_BASIS``)."""
        fluid = self.result.derived["fluid_cells"]
        sec = self.step_seconds
        t = {"total_s": self.earlier_seconds + _time.perf_counter() - self.t_start, "step_s": sec,
             SOLVER_SECONDS: sec, "mlups": fluid * step / sec / 1e6 if sec > 0 else 0.0}
        if self.warm_from is not None and step > self.warm_from[0] and sec > self.warm_from[1]:
            t["mlups_warm"] = fluid * (step - self.warm_from[0]) / (sec - self.warm_from[1]) / 1e6
        if self.guard.enabled:
            t["precision_guard_s"] = self.guard.seconds
            t["precision_guard_build_s"] = self.guard.build_seconds
        return t

    def finish(self, resume: Checkpoint | None) -> Result:
        """The result after the loop: status, final fields, series, timings, metrics (an interrupted run raises
        RunInterrupted carrying it)."""
        case, derived, geo, result, monitor, step = (self.case, self.derived, self.geo, self.result, self.monitor,
                                                     self.step)
        status, message = self.status, self.message
        if case.steady.enabled and status == "completed":
            status = "not_steady"
            message = (f"steady state not reached in {step} steps (last relative change "
                       f"{monitor.steady_change:.3g}, tolerance {case.steady.tolerance:g}); raise time.end_time"
                       + _reachable(monitor, self.policy))
        if self.guard.flagged and status in ("completed", "converged", "not_steady"):
            # the status stays what the run did (compare, the exit code and the accuracy gate read it); the message
            # beside it in the CLI line and summary.json says the 16-bit guard flagged it (precision_guard_flagged)
            message = "; ".join(t for t in (message, f"FLAGGED by the 16-bit precision guard: {self.guard.message}")
                                if t)
        result.status, result.message = status, message
        rho, ux, uy = host(*self.fields)
        result.fields = fields(rho, ux, uy, derived, geo, step)
        result.series = {**monitor.arrays(), **self.guard.series()}
        result.timings = self._timings(step)
        m = {"steps": step, "simulated_time_s": derived.units.time_of(step),
             "max_lattice_speed": float(np.max(obs.speed(ux, uy)[geo.fluid])),
             "mass_relative_drift": float(np.sum(rho[geo.fluid]) / self.mass0 - 1.0),
             "steady_state_reached": status == "converged" if case.steady.enabled else None}
        if resume is not None:
            m["resumed_from_step"] = resume.step
        if case.steady.enabled:
            m["steady_change"] = monitor.steady_change
            if monitor.steady_checks:
                m["steady_change_lowest"] = min(c for _, c in monitor.steady_checks)
            if monitor.steady_growth:
                m["steady_growth_last"] = monitor.steady_growth[max(monitor.steady_growth)]
        m.update(self.guard.metrics())
        m["timing_basis"] = TIMING_BASIS
        m.update(reference_metrics(case, derived, geo, self.stepper, rho, ux, uy, step, result))
        for k, v in obstacle_forces(case, geo, self.stepper, skip=m).items():
            m.setdefault(k, v)
        result.metrics = {k: v for k, v in m.items() if v is not None}
        if status == "interrupted":
            exc = RunInterrupted(f"{case.name}: {message}")
            exc.result = result
            raise exc
        return result


def obstacle_forces(case: LBMCase, geo, stepper, skip=()) -> dict:
    """Drag and lift coefficients of every measured obstacle (``measure_force``) at the last step, under the names of
    the monitor's series: ``drag_coefficient`` / ``lift_coefficient`` for the first, ``drag_coefficient_<k>`` /
    ``lift_coefficient_<k>`` for obstacle k after it; names already in ``skip`` (the reference's metrics, the same
    value) are not computed again."""
    out = {}
    for k in geo.measured:
        sfx = "" if k == geo.measured[0] else f"_{k}"
        if f"drag_coefficient{sfx}" in skip and f"lift_coefficient{sfx}" in skip:
            continue
        cd, cl = obs.force_coefficients(stepper.force(geo.obstacles[k]), case.lattice.velocity,
                                        case.lattice.resolution)
        out[f"drag_coefficient{sfx}"], out[f"lift_coefficient{sfx}"] = cd, cl
    return out


#: what the run's time figures hold (the summary's timing_basis)
TIMING_BASIS = ("mlups: every step, first-call compilation and graph capture in; mlups_warm: the steps after the "
                "first monitor point read; total_s: the whole run (setup, monitor points, output)")


def _reachable(monitor, policy) -> str:
    """What a run that ended not_steady says of the tolerance its storage reached: its lowest change and, from the
    last check's growth exponent (``Monitor.steady_stall``), whether the flow was still developing or the change had
    settled at the storage's rounding noise (docs/design/lbm_algorithm.md "When a run stops early")."""
    if not monitor.steady_checks:
        return ""
    step, lowest = min(monitor.steady_checks, key=lambda c: c[1])
    text = f"; the lowest change was {lowest:.3g} (step {step})"
    growth = monitor.steady_growth.get(monitor.steady_checks[-1][0])
    if growth is None:
        return text
    if growth > STALL_GROWTH:
        return text + f", and the flow was still developing at the end (growth exponent {growth:.2f} > {STALL_GROWTH})"
    res = storage_resolution(policy)
    return text + (f", and the change had settled at {policy.name}'s rounding noise (growth exponent {growth:.2f}; "
                   f"storage resolution {res:.2g}): a steady.tolerance of at least {lowest:.2g} is what it resolves "
                   f"here" + (", or use fp32" if res > 1e-5 else ", or use fp64" if res > 1e-12 else ""))


def _speed_cause(peak: float) -> str:
    """The blow-up cause of a lattice speed above BLOW_UP_LATTICE_SPEED."""
    return f"lattice speed {peak:.3g} > {BLOW_UP_LATTICE_SPEED} (Mach {peak / math.sqrt(lattice.CS2):.2f})"


FAMILY = LBMFamily()
