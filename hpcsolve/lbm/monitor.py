"""Monitor points of an LBM run: the series and checks taken every ``time.monitor_interval`` steps
(``Monitor``), where a point's reductions run (``device_monitor``, ``point_fields``) and the written fields in
physical units (``fields``, ``snapshot_fields``)."""

from __future__ import annotations

import math

import numpy as np

from hpcsolve.core.backends import get_array_module, to_host
from hpcsolve.lbm import geometry as geom
from hpcsolve.lbm import observables as obs, physics
from hpcsolve.lbm.case import Derived, LBMCase
from hpcsolve.lbm.flags import FLUID, OUTLET, VELOCITY

#: The stall test (``Monitor.steady_stall``, docs/design/lbm_algorithm.md "When a run stops early"): a run stops before
#: steady.tolerance only where its change is measured to be the storage's rounding noise, not a flow still moving.
#: Over the last STALL_CHECKS checks the change got no lower than STALL_FACTOR times the lowest before them, still
#: above the tolerance, at a level within STALL_RESOLUTIONS units of the storage's resolution (fp32 Poiseuille: 3.4e-7,
#: then 2.0e-7, 2.3e-7, 2.4e-7 from step 7000 against a tolerance of 1e-7) -- necessary, not sufficient: a 16-bit
#: cavity spinning up at Re 1000 changes by 0.05-0.1 per check for thousands of steps, below 100 resolutions (issue 48).
STALL_CHECKS = 3
STALL_FACTOR = 0.5
STALL_RESOLUTIONS = 100.0
#: The proof: each reference is also compared half-way to its check (a "peek", at the first monitor point at least
#: interval / 2 after it). A flow that is still developing changes in proportion to the time between the two states
#: (growth exponent g = ln(c_check / c_peek) / ln(t_check / t_peek) = 1); rounding noise about a fixed state does
#: not grow with the interval (g = 0), and a random walk of the rounding (stochastic rounding) grows as its square
#: root (g = 1/2, not a stall: it is not settled). Every check of the window must show g <= STALL_GROWTH.
STALL_GROWTH = 0.35
#: ... and the window must be long against the flow: from the reference of its first check to now at least
#: STALL_FLOW_TIMES characteristic times L / U (units.characteristic_time), and never before STALL_MIN_FRACTION of
#: the run's steps (the first part of a run is spin-up whatever the numbers say).
STALL_FLOW_TIMES = 2.0
STALL_MIN_FRACTION = 0.25


#: ``Monitor.last_steady_u`` where the steady reference velocity is kept in a device buffer
#: (``device_monitor.BatchedPoints``; brought to the host before a checkpoint)
ON_DEVICE = "on the device"


class Monitor:
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
        self.steady_checks: list[tuple[int, float]] = []   # (step, change) of each steady check (checkpointed)
        self.steady_peek: tuple[int, int, float] | None = None   # (reference step, step, change) of the last peek
        self.steady_peek_step: int | None = None            # step of the peek queued for the current reference
        self.steady_growth: dict[int, float] = {}           # check step -> growth exponent g (checkpointed)

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
        fluid = self.fluid_like(rho)
        energy = 2.0 * obs.kinetic_energy(rho, ux, uy, fluid)
        forces = [stepper.force(self.geo.obstacles[k]) for k in self.geo.measured]
        action = self.steady_action(step)
        change = None
        if action in ("set", "check", "peek"):
            u = self.fluid_velocity(ux, uy)
            if action in ("check", "peek"):
                change = obs.relative_change(u, self.last_steady_u)
            if action == "peek":
                u = None                        # a peek keeps the reference
        else:
            u = None
        self.record_values(step, energy, self.peak(ux, uy) if peak is None else peak, forces, action, u, change,
                           reference_step=self.last_steady_step)

    def steady_action(self, step: int) -> str | None:
        """What the steady check does at the monitor point ``step`` (it depends on the steps only): "set" (the
        point's fluid velocity becomes the reference), "clear" (no reference: inside the smooth start), "check"
        (compare with the reference, which the point's velocity then replaces), "peek" (compare with the reference
        and keep it: the first point at least interval / 2 after it, for the stall test's growth) or None (nothing;
        also without ``steady.enabled``)."""
        if not self.case.steady.enabled:
            return None
        ramp = self.derived.ramp_steps
        if self.last_steady_u is None or self.last_steady_step < ramp:
            # compare only states from the end of the smooth start on (the boundary velocities rise before);
            # a reference from inside the smooth start is replaced at the next point, so none is kept
            return "set" if step >= ramp else "clear"
        since, interval = step - self.last_steady_step, self.case.steady.interval
        if since >= interval:
            return "check"
        if 2 * since >= interval and (self.steady_peek_step is None or self.steady_peek_step <= self.last_steady_step):
            return "peek"
        return None

    def steady_moved(self, step: int, action: str | None, reference) -> None:
        """The steady state after ``action`` at ``step`` (``steady_action``): ``reference`` the new reference
        velocity (host (2, fluid cells), or ``ON_DEVICE`` where a device buffer keeps it)."""
        if action == "peek":
            self.steady_peek_step = step
        elif action is not None:
            self.last_steady_u = None if action == "clear" else reference
            self.last_steady_step = step

    def record_values(self, step: int, energy_lattice: float, peak: float, forces, action: str | None = None,
                      reference=None, change: float | None = None, moved: bool = False,
                      reference_step: int | None = None) -> None:
        """Append a point's series from its values: ``energy_lattice`` sum over the fluid of rho |u|^2 (lattice
        units), ``peak`` max |u| (lattice units), ``forces`` (Fx, Fy) per measured obstacle (lattice units);
        ``action`` the point's ``steady_action`` with the new ``reference`` and, at a check or a peek, the
        relative ``change`` against the reference of ``reference_step``; ``moved``: ``steady_moved`` was called already (the batched device path moves the steady state
        when it queues the point, since the next point's action depends on it). The host path (``record``) and
        the batched device path (``device_monitor.BatchedPoints``) both end here."""
        s = self.series
        s["step"].append(step)
        s["time"].append(self.derived.units.time_of(step))
        units = self.derived.units
        to_ms = units.dx / units.dt
        energy = units.density * to_ms**2 * units.dx**2      # lattice kinetic energy -> J per metre of depth
        s["kinetic_energy"].append(0.5 * energy_lattice * energy)
        s["max_speed"].append(peak * to_ms)
        if "kinetic_energy_analytic" in s:
            ny, nx = self.geo.shape
            X, Y = np.meshgrid(np.arange(nx) + 0.5, np.arange(ny) + 0.5)
            ua, va = obs.taylor_green_velocity(X, Y, nx, self.case.lattice.velocity, units.lattice_viscosity, step)
            s["kinetic_energy_analytic"].append(obs.kinetic_energy(np.ones_like(ua), ua, va, self.fluid) * energy)
        for k, f in zip(self.geo.measured, forces):
            sfx = "" if k == self.geo.measured[0] else f"_{k}"
            cd, cl = obs.force_coefficients(f, self.case.lattice.velocity, self.case.lattice.resolution)
            s[f"drag_coefficient{sfx}"].append(cd)
            s[f"lift_coefficient{sfx}"].append(cl)
        if self.case.steady.enabled:
            if action == "peek":
                self.steady_peek = (reference_step, step, change)
            elif action in ("set", "clear"):
                self.steady_peek = None
            if action == "check":
                self._growth(step, change, reference_step)
                self.steady_change = change
                self.steady_checks.append((step, change))
            if not moved:
                self.steady_moved(step, action, reference)
            s["steady_change"].append(self.steady_change)

    def _growth(self, step: int, change: float, reference_step: int | None) -> None:
        """The growth exponent of the check at ``step`` against the reference of ``reference_step``, from that
        reference's peek (none without one)."""
        peek, self.steady_peek = self.steady_peek, None
        if peek is None or reference_step is None or peek[0] != reference_step or not reference_step < peek[1] < step:
            return
        self.steady_growth[step] = growth_exponent(peek[2], change, peek[1] - reference_step, step - reference_step)

    def steady_stall(self, tolerance: float, resolution: float, *, total_steps: int | None = None,
                     flow_steps: float = 0.0) -> dict | None:
        """Where the steady change is measured to have stopped at the storage's rounding noise above ``tolerance``
        (the constants above): {from_step, level, highest, growth} (the window's first step, its lowest and its
        highest change, its largest growth exponent), else None. A change still decreasing, stalled far above the
        ``resolution`` (``storage_resolution``), growing with the interval (a developing flow), unmeasured (no
        peek), inside the first STALL_MIN_FRACTION of ``total_steps`` or over a window shorter than STALL_FLOW_TIMES
        x ``flow_steps`` (the flow's characteristic time in steps) is no stall."""
        checks = self.steady_checks
        if len(checks) <= STALL_CHECKS:
            return None
        window = [c for _, c in checks[-STALL_CHECKS:]]
        level, before = min(window), min(c for _, c in checks[:-STALL_CHECKS])
        if not (level >= STALL_FACTOR * before and level >= tolerance and level <= STALL_RESOLUTIONS * resolution):
            return None
        growths = [self.steady_growth.get(k) for k, _ in checks[-STALL_CHECKS:]]
        if any(g is None or not g <= STALL_GROWTH for g in growths):
            return None
        step, start = checks[-1][0], checks[-STALL_CHECKS - 1][0]
        if step - start < STALL_FLOW_TIMES * flow_steps:
            return None
        if total_steps is not None and step < STALL_MIN_FRACTION * total_steps:
            return None
        return {"from_step": checks[-STALL_CHECKS][0], "level": level, "highest": max(window),
                "growth": max(growths)}

    def arrays(self) -> dict[str, np.ndarray]:
        return {k: np.asarray(v, dtype=np.float64) for k, v in self.series.items()}


def growth_exponent(early: float, late: float, early_steps: int, late_steps: int) -> float:
    """ln(late / early) / ln(late_steps / early_steps): how a change measured over ``early_steps`` and over
    ``late_steps`` from the same reference grows with the interval (1: in proportion, a developing flow; 0: not at
    all, noise about a fixed state). inf where only the early change is zero (it grew from nothing), 0 where both
    are (a frozen state)."""
    if early == 0.0:
        return 0.0 if late == 0.0 else math.inf
    if late == 0.0:
        return -math.inf
    return math.log(late / early) / math.log(late_steps / early_steps)


def storage_resolution(policy) -> float:
    """The relative resolution of ``policy``'s population storage: the float's machine epsilon, or for a
    16-bit code (FP16C: 11 mantissa bits) 2**-(bits - 5)."""
    storage = np.dtype(policy.storage)
    if np.issubdtype(storage, np.floating):
        return float(np.finfo(storage).eps)
    return 2.0 ** -(8 * storage.itemsize - 5)


def fields(rho, ux, uy, derived: Derived, geo: geom.Geometry, step: int) -> dict[str, np.ndarray]:
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


def device_monitor(backend, cells: int) -> bool:
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


def point_fields(stepper, on_device: bool = True):
    """(rho, ux, uy) at a monitor point: on the device where the stepper has them there and ``on_device`` (the
    point's reductions run there and scalars come back: Cylinder 2D-2's 4,800 points cost 4.3-7.3 ms each on
    the H200 machine's host, where its 96,000 steps took 1.2 s), else the host copies."""
    on_dev = stepper.fields_on_device() if on_device else None
    return on_dev if on_dev is not None else stepper.macroscopic()


def host(*arrays):
    """The arrays as host NumPy arrays."""
    return tuple(to_host(a) for a in arrays)


def snapshot_fields(rho, ux, uy, derived, geo, step):
    """The fields a snapshot keeps (velocity, pressure, vorticity) of ``fields``."""
    f = fields(rho, ux, uy, derived, geo, step)
    return {k: f[k] for k in ("velocity", "pressure", "vorticity")}
