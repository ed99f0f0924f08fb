"""The 16-bit precision guard (``run.precision_guard``): does the 16-bit storage still carry the flow?

16-bit storage can lose a flow silently: where a step's change to a population falls below half a code step it is
rounded away (or, with round to nearest, biased), and the run ends ``completed`` with the wrong physics (2D-2 at
D = 80, lattice velocity 0.025, fp16s: c_L max 0.235 against fp64's 0.995). The guard measures it during the run:
at a few check points (``schedule``) it takes the 16-bit state, runs a **shadow window** of K steps in float32 from
that same state (a float32 stepper of the same case, built and warmed up once before stepping, ``prepare``, on the
device where the run's state lives: ``Stepper.array_twin``; the state decoded into it there), runs the 16-bit
stepper K steps from the same state too, and compares the two fluid velocities after K / SHORT_PARTS steps and after
K steps (sums reduced on the device; the run's state rewound by a device copy into its own buffers):

    growth = error_K / max(error_short, NOISE_FLOOR * res * U),    error = rms(u_16 - u_32)
    divergence = error_K / sqrt(rms(du_32)^2 + floor^2),           floor = FLOOR_RESOLUTIONS * res * U

over the fluid cells, du the velocity change over the window, ``res`` the storage's relative resolution
(``monitor.storage_resolution``: 2^-10 fp16s, 2^-11 fp16c) and U = max(rms |u|, lattice velocity) (lattice units).
Unbiased rounding noise is a difference of fixed size that does not grow with the window; rounding that loses the
flow's increments with a bias accumulates. A check is flagged when growth > ``GROWTH_THRESHOLD`` and divergence >=
``MIN_DIVERGENCE`` (a share of the window's change, not round-off of a flow at rest): the verdict "the 16-bit
storage no longer carries the flow". (A single window's divergence against a threshold could not tell fp16s from
fp16c on the H200: docs/design/lbm_algorithm.md.)

The run's own trajectory is not changed by a check: the 16-bit window runs on the run's stepper, which is then
loaded back with the state it had (``OWN_WINDOW``; every stepper's step is a function of the stored state alone,
so the run continues bit for bit as without the check; tests/lbm/test_precision_guard.py checks it), or, with
``OWN_WINDOW = False``, on a second 16-bit stepper (more device memory, the run's stepper only read).

Only 16-bit policies are guarded (``policy.storage_bytes == 2``); ``measure`` runs the same comparison for any
policy (fp32's figure is the noise floor of the method). docs/design/lbm_algorithm.md, "The 16-bit guard", has the
calibration, the schedule and the overhead model.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np

from hpcsolve.core import precision as precisions
from hpcsolve.core.errors import HpcsolveError
from hpcsolve.core.precision import FP32, Precision
from hpcsolve.lbm.flags import FLUID
from hpcsolve.lbm.monitor import storage_resolution
from hpcsolve.lbm.steppers.stepper import LBMSetup, Stepper, get_stepper, macroscopic_from_populations

__all__ = ["CHECK_FRACTIONS", "FLOOR_RESOLUTIONS", "GuardCheck", "HostView", "PrecisionGuard", "PrecisionLossError",
           "GROWTH_THRESHOLD", "WINDOW_STEPS", "window_steps"]

#: the run's fractions at which the guard checks (at the first monitor point at or after each): four in the first
#: 10 % of the run (a flow the 16-bit storage loses is flagged early), then three more for a flow that settles later
CHECK_FRACTIONS = (0.01, 0.025, 0.05, 0.075, 0.10, 0.25, 0.50, 0.75)
#: the shadow window's length K in steps: at most WINDOW_STEPS, at least MIN_WINDOW_STEPS, and otherwise such that
#: all checks together cost at most WINDOW_BUDGET of the run's steps (a check costs about 3 K 16-bit steps: K
#: 16-bit steps plus K float32 steps of twice the bytes)
WINDOW_STEPS = 1024
MIN_WINDOW_STEPS = 64
WINDOW_BUDGET = 0.05
#: the short window inside the long one: K / SHORT_PARTS steps (its error is the storage's rounding noise)
SHORT_PARTS = 16
#: the verdict: the error grew by more than GROWTH_THRESHOLD from the short window to the long one (rounding that
#: loses the flow's increments with a bias accumulates; unbiased rounding noise does not) and the long window's
#: divergence is at least MIN_DIVERGENCE (a share of the flow's change, not round-off of a flow at rest).
#: Calibrated on the 2D-2 cylinder in fp16s and fp16c: docs/measured/notes_calibrations.md ("Precision guard")
GROWTH_THRESHOLD = 2.0
MIN_DIVERGENCE = 0.003
#: the floor of the denominator in units of the storage's resolution times the flow's speed U
FLOOR_RESOLUTIONS = 8.0
#: the short window's error is at least this many resolutions times U in the growth (a flow at rest: no 0 / 0)
NOISE_FLOOR = 0.25
#: True: the 16-bit window runs on the run's own stepper, then its state is loaded back; False: on a second stepper
OWN_WINDOW = True
#: the guard's modes (``run.precision_guard``)
MODES = ("warn", "error", "off")


class PrecisionLossError(HpcsolveError):
    """``run.precision_guard = "error"``: the float32 shadow window shows that the 16-bit storage no longer carries
    the flow. Exit code 3 as a blow-up; ``.result`` (set by the runner) is the run's result up to that step."""

    exit_code = 3

    def __init__(self, message: str, *, step: int | None = None, divergence: float | None = None):
        self.step = step
        self.divergence = divergence
        super().__init__(message)


@dataclass(frozen=True)
class GuardCheck:
    """One check: at ``step``, a window of ``window`` steps; rms values in lattice units."""

    step: int
    window: int
    divergence: float      # error / sqrt(change^2 + floor^2), over the long window
    error: float           # rms(du_16 - du_32), long window
    change: float          # rms(du_32), long window
    floor: float           # FLOOR_RESOLUTIONS * res * U
    flagged: bool
    short_error: float = math.nan    # rms(du_16 - du_32) over the short window (K / SHORT_PARTS steps)
    growth: float = math.nan         # error / max(short_error, NOISE_FLOOR * res * U)


def window_steps(total_steps: int, checks: int = len(CHECK_FRACTIONS)) -> int:
    """The shadow window's length K for a run of ``total_steps`` steps (``WINDOW_BUDGET``, module docstring)."""
    budget = WINDOW_BUDGET * max(int(total_steps), 0) / (3.0 * max(checks, 1))
    return int(min(WINDOW_STEPS, max(MIN_WINDOW_STEPS, math.floor(budget))))


def schedule(total_steps: int, fractions=CHECK_FRACTIONS) -> list[int]:
    """The steps at which checks are due: each fraction of ``total_steps``, at least step 1, without repeats."""
    total = max(int(total_steps), 1)
    return sorted({max(1, int(round(f * total))) for f in fractions if 0 < f <= 1})


def suggestion(policy: Precision) -> str:
    """The LBM policies that store with a finer resolution than ``policy``, coarsest first ("fp16c or fp32")."""
    res = storage_resolution(policy)
    finer = sorted(((storage_resolution(p), p.name) for p in precisions.POLICIES.values()
                    if p.supports("lbm") and storage_resolution(p) < res and p.storage_bytes <= 4), reverse=True)
    return " or ".join(name for _, name in finer)


class PrecisionGuard:
    """The guard of one run (module docstring). ``stepper_factory(setup) -> Stepper`` builds the shadow stepper
    (default ``get_stepper(backend, setup)``; a decomposed run passes its SlabStepper's). ``mode`` defaults to the
    case's ``run.precision_guard``; ``window``/``threshold`` to ``window_steps(derived.steps)``/``GROWTH_THRESHOLD``."""

    def __init__(self, case, policy: Precision, backend, setup: LBMSetup, derived, *, mode: str | None = None,
                 window: int | None = None, threshold: float | None = None, stepper_factory=None,
                 fractions=CHECK_FRACTIONS, own_window: bool | None = None, always: bool = False):
        self.policy, self.setup = policy, setup
        self.mode = str(mode if mode is not None else getattr(case.run, "precision_guard", "warn")).lower()
        if self.mode not in MODES:
            raise ValueError(f"precision guard mode {self.mode!r}; allowed: {', '.join(MODES)}")
        #: ``always``: measure a policy that is not 16-bit too (scripts/guard_probe.py: fp32's noise floor)
        self.enabled = self.mode != "off" and (policy.storage_bytes == 2 or always)
        total = int(derived.steps)
        self.window = int(window) if window is not None else window_steps(total, len(fractions))
        self.threshold = float(GROWTH_THRESHOLD if threshold is None else threshold)
        self.velocity = float(case.lattice.velocity)          # lattice units: U's lower bound in the floor
        self.resolution = storage_resolution(policy)
        self.fluid = setup.flags == FLUID
        self.own_window = OWN_WINDOW if own_window is None else bool(own_window)
        self._factory = stepper_factory if stepper_factory is not None else (lambda s: get_stepper(backend, s))
        self._explicit_factory = stepper_factory is not None
        self._shadow: Stepper | None = None
        self._copy: Stepper | None = None
        self._pending = schedule(total, fractions) if self.enabled else []
        self.checks: list[GuardCheck] = []
        self.message = ""           # the first flagged check's message ("" while none is flagged)
        self.seconds = 0.0          # wall time of the checks (not part of the run's step time)
        self.build_seconds = 0.0    # wall time of building the shadow stepper (``prepare``: its kernels compile)
        self._fluid_xp = None

    # ---- the schedule
    @property
    def next_check(self) -> int | None:
        """The step of the next due check, or None when no more are due (or the guard is off)."""
        return self._pending[0] if self._pending else None

    def due(self, step: int) -> bool:
        """True at the first monitor point at or after a scheduled check (the runner then calls ``check``)."""
        return bool(self._pending) and int(step) >= self._pending[0]

    def skip_to(self, step: int) -> None:
        """Drop the scheduled checks at or before ``step`` (a run resumed from a checkpoint at ``step``)."""
        self._pending = [s for s in self._pending if s > int(step)]

    @property
    def flagged(self) -> bool:
        return bool(self.message)

    # ---- the check
    def check(self, stepper: Stepper, step: int | None = None) -> GuardCheck:
        """Measure the divergence at ``step`` (the stepper's state; default its ``time_step``), record it, set
        ``message`` at the first flagged check, and drop the scheduled checks up to ``step``."""
        step = int(stepper.time_step if step is None else step)
        t0 = time.perf_counter()
        result = self.measure(stepper, step)
        self.seconds += time.perf_counter() - t0
        self.checks.append(result)
        while self._pending and self._pending[0] <= step:
            self._pending.pop(0)
        if result.flagged and not self.message:
            self.message = (f"{self.policy.name} storage no longer carries the flow at step {step}: against a float32 "
                            f"shadow window from the same state, its velocity error grew {result.growth:.3g}x from "
                            f"{max(1, result.window // SHORT_PARTS)} to {result.window} steps (threshold "
                            f"{self.threshold:g}; rounding noise does not grow) and reached {result.divergence:.3g} "
                            f"of the window's change; use {suggestion(self.policy) or 'a wider precision'}")
        return result

    def prepare(self, stepper: Stepper | None = None) -> float:
        """Build the float32 shadow stepper now and, given the run's ``stepper``, run one check of 2 steps from its
        state that is recorded nowhere (the run's stepper ends where it began): the kernels that compile at their
        first use (the shadow's steps on Numba-CUDA, CuPy's decode and reductions) compile here, before stepping,
        and no check pays for them. The runner calls it; returns the seconds it took (``build_seconds``). Nothing
        where the guard is off."""
        if self.enabled and self._shadow is None:
            t0 = time.perf_counter()
            shadow = self._shadow_stepper(stepper)
            if stepper is not None:
                self._sums(stepper, shadow, int(stepper.time_step), 1, 2)
            self.build_seconds += time.perf_counter() - t0
        return self.build_seconds

    def measure(self, stepper: Stepper, step: int) -> GuardCheck:
        """The comparison itself (module docstring), recorded nowhere; the run's stepper ends where it began."""
        k = self.window
        sums = self._sums(stepper, self._shadow_stepper(stepper), step, max(1, k // SHORT_PARTS), k)
        n = max(int(np.count_nonzero(self.fluid)), 1)
        error, short_error, change, u0 = (math.sqrt(max(float(v), 0.0) / n) if math.isfinite(float(v)) else math.nan
                                          for v in sums)
        return self._verdict(step, k, error, short_error, change, u0)

    def _sums(self, stepper: Stepper, shadow: Stepper, step: int, short: int, k: int):
        """The check's sums of squares. Where the run's stepper and the shadow share an array module (NumPy, CuPy,
        Numba-CUDA with CuPy) everything stays in it (on the device: the state rewound by a device copy, decoded
        there, the sums reduced there, four numbers come back); otherwise through host copies."""
        xp = stepper.array_module
        if xp is not None and self.own_window and shadow.array_module is xp:
            return self._window_sums(stepper, shadow, xp, step, short, k)
        return self._window_sums_host(stepper, shadow, step, short, k)

    def _window_sums(self, stepper: Stepper, shadow: Stepper, xp, step: int, short: int, k: int):
        """The sums of squares over the fluid cells (u16 - u32 after k and after ``short`` steps, du32, u0) with the
        arrays of ``xp``: the run's state saved (``save_state``), decoded into the shadow, both windows, restored."""
        fluid = self._fluid_weights(xp)
        saved = stepper.save_state()
        u0 = xp.array(stepper.velocity_array(), dtype=xp.float64)
        g = stepper.state_array()
        if g is None:                   # in place at an odd step: the even layout through the host
            g = xp.asarray(stepper.populations())
        shadow.load_state_array(xp.ascontiguousarray(FP32.encode(self.policy.decode(g)).astype(xp.float32)), step)
        u32 = self._two_windows(shadow, short, k, xp)
        u16 = self._two_windows(stepper, short, k, xp)
        stepper.restore_state(saved)        # the run continues from the state it had
        terms = xp.stack([_weighted_sumsq(xp, u16[1] - u32[1], fluid), _weighted_sumsq(xp, u16[0] - u32[0], fluid),
                          _weighted_sumsq(xp, u32[1] - u0, fluid), _weighted_sumsq(xp, u0, fluid)])
        return terms.get() if hasattr(terms, "get") else np.asarray(terms)

    def _window_sums_host(self, stepper: Stepper, shadow: Stepper, step: int, short: int, k: int):
        """``_window_sums`` through host copies (a stepper without an array module: a decomposed run's slabs,
        Numba-CUDA without CuPy or in the simulator)."""
        fluid = self.fluid.astype(np.float64)
        g = stepper.populations()
        u0 = self._velocity(macroscopic_from_populations(g, self.setup))
        shadow.load_populations(np.ascontiguousarray(FP32.encode(self.policy.decode(g).astype(np.float32))), step)
        u32 = self._two_windows(shadow, short, k)
        if self.own_window:
            u16 = self._two_windows(stepper, short, k)
            stepper.load_populations(g, step)        # the run continues from the state it had
        else:
            copy = self._copy_stepper()
            copy.load_populations(g, step)
            u16 = self._two_windows(copy, short, k)
        return [_weighted_sumsq(np, u16[1] - u32[1], fluid), _weighted_sumsq(np, u16[0] - u32[0], fluid),
                _weighted_sumsq(np, u32[1] - u0, fluid), _weighted_sumsq(np, u0, fluid)]

    def _verdict(self, step: int, k: int, error: float, short_error: float, change: float, u0: float) -> GuardCheck:
        """The check's figures from the rms values (lattice units; module docstring)."""
        speed = max(u0, self.velocity)
        floor = FLOOR_RESOLUTIONS * self.resolution * speed if math.isfinite(speed) else math.nan
        if not all(math.isfinite(v) for v in (error, short_error, change, floor)):
            # a window went NaN/Inf: the run's own blow-up check speaks, not the guard
            return GuardCheck(step=step, window=k, divergence=math.nan, error=error, change=change, floor=floor,
                              flagged=False, short_error=short_error, growth=math.nan)
        divergence = error / math.sqrt(change**2 + floor**2) if (change > 0 or floor > 0) else 0.0
        growth = error / max(short_error, NOISE_FLOOR * self.resolution * speed, np.finfo(np.float64).tiny)
        flagged = growth > self.threshold and divergence >= MIN_DIVERGENCE
        return GuardCheck(step=step, window=k, divergence=float(divergence), error=float(error),
                          change=float(change), floor=float(floor), flagged=bool(flagged),
                          short_error=float(short_error), growth=float(growth))

    def _two_windows(self, stepper: Stepper, short: int, k: int, xp=None) -> tuple:
        """The velocity (2, ny, nx), float64, after ``short`` and after ``k`` steps of ``stepper`` from its state: in
        the stepper's array module ``xp`` (``velocity_array``), or on the host (``xp`` None: ``macroscopic``)."""
        def velocity():
            if xp is None:
                return self._velocity(stepper.macroscopic())
            return xp.array(stepper.velocity_array(), dtype=xp.float64)

        stepper.step(short)
        first = velocity()
        stepper.step(k - short)
        return first, velocity()

    def _fluid_weights(self, xp):
        """The fluid mask as 0/1 float64 weights (ny, nx) in ``xp``, made once."""
        if self._fluid_xp is None or self._fluid_xp[0] is not xp:
            self._fluid_xp = (xp, xp.asarray(self.fluid.astype(np.float64)))
        return self._fluid_xp[1]

    def state(self) -> dict:
        """The guard's record for a checkpoint (its checks and first message)."""
        return {"checks": [dataclasses.asdict(c) for c in self.checks], "message": self.message}

    def restore(self, state) -> None:
        """Take back a checkpoint's record (``state``; None or malformed: a guard without earlier checks)."""
        if not isinstance(state, dict):
            return
        try:
            self.checks = [GuardCheck(**{k: (int(v) if k in ("step", "window") else
                                             bool(v) if k == "flagged" else math.nan if v is None else float(v))
                                          for k, v in c.items()})
                           for c in state.get("checks", [])]
        except (TypeError, ValueError):
            self.checks = []
            return
        self.message = str(state.get("message", ""))

    def _velocity(self, fields) -> np.ndarray:
        _, ux, uy = fields
        return np.stack([np.asarray(ux, dtype=np.float64), np.asarray(uy, dtype=np.float64)])

    def _shadow_stepper(self, stepper: Stepper | None = None) -> Stepper:
        """The float32 stepper of the same case: two buffers (a state is loaded into it at every check; in place
        that would fetch the outlet cells and record the step graphs again), the same physics. Without an explicit
        ``stepper_factory`` it is the run's ``stepper.array_twin`` (where the run's state lives: Numba-CUDA with CuPy
        gets a CuPy shadow, whose kernels compile fast and are cached on disk), else one of the run's backend."""
        if self._shadow is None:
            setup = dataclasses.replace(self.setup, policy=FP32, in_place=False)
            if not self._explicit_factory and stepper is not None:
                try:
                    self._shadow = stepper.array_twin(setup)
                except Exception:         # the twin cannot be built here: the run's own backend builds the shadow
                    self._shadow = None
            if self._shadow is None:
                self._shadow = self._factory(setup)
        return self._shadow

    def _copy_stepper(self) -> Stepper:
        if self._copy is None:
            self._copy = self._factory(self.setup)
        return self._copy

    # ---- what the runner records
    def metrics(self) -> dict:
        """result.metrics entries (none when the guard is off or made no check)."""
        if not self.enabled:
            return {}
        m = {"precision_guard_checks": len(self.checks), "precision_guard_window": self.window,
             "precision_guard_threshold": self.threshold}
        if self.checks:
            m["precision_guard_max_divergence"] = float(np.nanmax([c.divergence for c in self.checks] + [0.0]))
            m["precision_guard_max_growth"] = float(np.nanmax([c.growth for c in self.checks] + [0.0]))
            flagged = [c.step for c in self.checks if c.flagged]
            m["precision_guard_flagged"] = bool(flagged)    # shown beside the status (the run's message says it)
            if flagged:
                m["precision_guard_flagged_step"] = flagged[0]
        return m

    def series(self) -> dict[str, np.ndarray]:
        """result.series entries: the step and divergence of every check."""
        if not self.checks:
            return {}
        return {"precision_guard_step": np.array([c.step for c in self.checks], dtype=np.float64),
                "precision_guard_divergence": np.array([c.divergence for c in self.checks], dtype=np.float64),
                "precision_guard_growth": np.array([c.growth for c in self.checks], dtype=np.float64)}

    def error(self) -> PrecisionLossError:
        """The error a run with ``mode == "error"`` raises at the first flagged check."""
        last = next(c for c in self.checks if c.flagged)
        return PrecisionLossError(f"{self.message} (run.precision_guard = 'error')", step=last.step,
                                  divergence=last.divergence)


class HostView:
    """The run's stepper seen without its array module: a guard given it takes the host path (host copies of the
    state; scripts/guard_probe.py ``--host-path``, and the tests that compare the two paths)."""

    array_module = None

    def __init__(self, stepper: Stepper):
        self._stepper = stepper

    def __getattr__(self, name):
        return getattr(self._stepper, name)


def _weighted_sumsq(xp, a, weights):
    """sum over cells of weights * (ax^2 + ay^2) for a (2, ny, nx) velocity (difference): a 0-d ``xp`` array."""
    return xp.sum((a[0] * a[0] + a[1] * a[1]) * weights)
