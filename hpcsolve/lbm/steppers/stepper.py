"""The interface every LBM backend implements, and the setup it receives.

A backend gets an :class:`LBMSetup` (geometry as a flags array, boundary velocities, relaxation,
collision model, precision policy, initial state) and returns a :class:`Stepper`. The algorithm a
Stepper must implement is fixed in docs/design/lbm_algorithm.md; ``kernels_numpy.NumpyStepper`` is the
reference every other backend is compared with.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

import numpy as np

from hpcsolve.core import backends
from hpcsolve.core.errors import BackendError, CaseError
from hpcsolve.lbm import collision as collision_models, lattice, physics, rules
from hpcsolve.lbm.boundaries.force import momentum_exchange_force
from hpcsolve.lbm.flags import FLUID, WALL
from hpcsolve.core.precision import FP64, Precision
from hpcsolve.lbm.boundaries.bouzidi import BouzidiLinks
from hpcsolve.lbm.boundaries.layer import AbsorbingLayer

__all__ = ["COLLISIONS", "LBMSetup", "SavedState", "Stepper", "get_stepper", "macroscopic_from_populations"]

COLLISIONS = collision_models.NAMES
#: a case's lattice.streaming -> LBMSetup.in_place (None: the GPU stepper chooses, gpu_common.auto_in_place)
STREAMING = {"auto": None, "two-buffer": False, "in-place": True}


@dataclass
class LBMSetup:
    """Everything a backend needs to step a D2Q9 lattice (all in lattice units)."""

    flags: np.ndarray                          # (ny, nx) uint8, codes of hpcsolve/lbm/flags.py
    relaxation_time: float                     # tau; viscosity nu = (tau - 1/2) / 3
    collision: str = "bgk"                     # a name of hpcsolve/lbm/collision.py's REGISTRY
    magic: float = 3.0 / 16.0                  # TRT magic parameter Lambda
    policy: Precision = FP64
    boundary_velocity: np.ndarray | None = None  # (2, ny, nx) float64: VELOCITY cells' velocity, OUTLET cells'
    #                                              reference outflow (physics.outlet_density; 0: fixed pressure)
    initial_density: np.ndarray | None = None    # (ny, nx) float64, default 1
    initial_velocity: np.ndarray | None = None   # (2, ny, nx) float64, default 0
    links: "BouzidiLinks | None" = None          # interpolated bounce-back links (hpcsolve/lbm/boundaries/bouzidi.py)
    ramp_steps: int = 0                          # boundary velocities rise as physics.ramp_factor over these steps
    in_place: bool | None = False                # GPU steppers: one population array (hpcsolve/lbm/steppers/inplace.py);
    #                                              None: they choose (gpu_common.auto_in_place, by the L2 cache)
    absorbing_layer: "AbsorbingLayer | None" = None  # extra bulk relaxation near the outlet (boundaries/layer.py)
    cell_offset: int = 0                         # flat index of cell 0 in the whole lattice (a slab of a decomposed
    #                                              run, whole rows): fp16c's seeds and the absorbing layer's profile
    #                                              take global positions (NumPy reference; GPU steppers: 0)

    def __post_init__(self):
        self.flags = np.ascontiguousarray(self.flags, dtype=np.uint8)
        if self.flags.ndim != 2:
            raise CaseError.invalid("flags", self.flags.shape, "a 2D (ny, nx) array")
        names = rules.flag_names()
        bad = set(np.unique(self.flags).tolist()) - set(names)
        if bad:
            raise CaseError.invalid("flags", sorted(bad), ", ".join(f"{k}={v}" for k, v in names.items()))
        collision_models.get(self.collision)
        if not self.relaxation_time > 0.5:
            raise CaseError.invalid("relaxation_time", self.relaxation_time, "> 0.5")
        if isinstance(self.ramp_steps, bool) or not isinstance(self.ramp_steps, (int, np.integer)) \
                or self.ramp_steps < 0:
            raise CaseError.invalid("ramp_steps", self.ramp_steps, "an integer >= 0")
        self.ramp_steps = int(self.ramp_steps)
        if self.in_place is not None and not isinstance(self.in_place, (bool, np.bool_)):
            raise CaseError.invalid("in_place", self.in_place, "True, False or None (the GPU stepper chooses)")
        self.in_place = None if self.in_place is None else bool(self.in_place)
        if self.absorbing_layer is not None:

            lay = self.absorbing_layer
            if not isinstance(lay, AbsorbingLayer) or not all(np.isfinite([lay.c0, lay.kx, lay.ky, lay.strength])) \
                    or lay.strength < 0:
                raise CaseError.invalid("absorbing_layer", lay, "None or an AbsorbingLayer with finite values, strength >= 0")
        ny, nx = self.flags.shape
        if self.boundary_velocity is None:
            self.boundary_velocity = np.zeros((2, ny, nx))
        self.boundary_velocity = np.asarray(self.boundary_velocity, dtype=np.float64)
        if self.boundary_velocity.shape != (2, ny, nx):
            raise CaseError.invalid("boundary_velocity", self.boundary_velocity.shape, f"shape (2, {ny}, {nx})")
        if self.links is not None:
            if tuple(self.links.shape) != (ny, nx):
                raise CaseError.invalid("links", self.links.shape, f"links of a ({ny}, {nx}) lattice")
            flat = self.flags.ravel()
            if len(self.links) and (np.any(flat[self.links.cell] != FLUID) or np.any(flat[self.links.solid] != WALL)):
                raise CaseError.invalid("links", "cells", "links from fluid cells into WALL cells")

    @property
    def shape(self) -> tuple[int, int]:
        return self.flags.shape

    @property
    def omegas(self) -> tuple[float, float]:
        """(omega+, omega-) of the collision model (``collision.CollisionModel.omegas``; BGK: both 1/tau)."""
        return self.collision_model.omegas(self.relaxation_time, self.magic)

    @property
    def collision_model(self) -> collision_models.CollisionModel:
        """The collision model object of ``collision`` (``hpcsolve/lbm/collision.py``)."""
        return collision_models.get(self.collision)

    @property
    def fluid_cells(self) -> int:
        return int(np.count_nonzero(self.flags == FLUID))

    def initial_populations(self) -> np.ndarray:
        """Stored initial state g = (f^eq(rho0, u0) - w) * scale in the storage dtype; non-fluid cells 0.

        Computed with the compute-dtype physics so every backend starts from the same bits."""
        pol = self.policy
        ct = np.dtype(pol.compute)
        ny, nx = self.shape
        rho0 = np.ones((ny, nx)) if self.initial_density is None else np.asarray(self.initial_density, float)
        u0 = np.zeros((2, ny, nx)) if self.initial_velocity is None else np.asarray(self.initial_velocity, float)
        P = physics.physics_for(ct)
        heq = P.equilibrium((rho0 - 1.0).astype(ct), u0[0].astype(ct), u0[1].astype(ct))
        h = np.stack(heq)
        h[:, self.flags != FLUID] = 0
        return np.ascontiguousarray(pol.encode(h))


@dataclass
class SavedState:
    """A stepper's state kept to rewind to (``Stepper.save_state``): ``arrays`` copies in the backend's array module
    (the stored populations, and in place the outlet velocity table), ``buffers`` the stepper's buffer objects then
    (put back in that order, so that CUDA graphs recorded on them replay), its parity and time step."""

    arrays: tuple
    buffers: tuple
    parity: int
    time_step: int


class Stepper(abc.ABC):
    """One backend's state and time stepping. State stays on the backend's device.

    The stored array holds post-collision populations (see docs/design/lbm_algorithm.md); ``time_step``
    counts the steps done since the initial state.

    A stepper whose ``array_module`` is not None (NumPy: numpy; CuPy and Numba-CUDA with CuPy: cupy) also gives its
    state as arrays of that module without a host copy (``state_array``, ``load_state_array``, ``velocity_array``,
    ``save_state`` / ``restore_state`` into its own buffers): the 16-bit guard's windows (hpcsolve/lbm/guard.py) run
    on those. Without one, ``save_state`` / ``restore_state`` go through host copies.
    """

    backend: str = ""
    #: the array module of ``state_array`` and friends, or None (they then raise)
    array_module = None
    #: the backend's interpolated bounce-back pre-pass (hpcsolve/lbm/boundaries/bouzidi.py) where the setup has links, run
    #: before every step; get_stepper refuses a setup with links whose Stepper leaves this None
    bouzidi = None

    def __init__(self, setup: LBMSetup):
        self.setup = setup
        self.policy = setup.policy
        self.time_step = 0
        self.velocity_scale = 1.0   # the factor the backend's boundary-velocity table carries now

    def step(self, n: int = 1) -> None:
        """Advance n time steps; no host synchronization (GPU backends just enqueue work).

        During the smooth start (``setup.ramp_steps``) every step first sets the boundary velocities
        to ``physics.ramp_factor(step, ramp_steps)`` times their full value (on the device: a small
        kernel over the velocity table, no host synchronization); afterwards steps go in one batch."""
        n = int(n)
        if n < 0:
            raise CaseError.invalid("steps", n, "an integer >= 0")
        ramp = self.setup.ramp_steps
        while n > 0 and self.time_step < ramp:
            self._scale_velocity(physics.ramp_factor(self.time_step + 1, ramp))
            self._advance(1)
            self.time_step += 1
            n -= 1
        if n > 0:
            self._scale_velocity(1.0)
            self._advance(n)
            self.time_step += n

    def _scale_velocity(self, factor: float) -> None:
        if factor != self.velocity_scale:
            self._set_velocity_scale(factor)
            self.velocity_scale = factor

    @abc.abstractmethod
    def _advance(self, n: int) -> None:
        """The backend's n time steps at the current boundary velocities (``step`` counts them)."""

    def _set_velocity_scale(self, factor: float) -> None:
        """Make the boundary-velocity table ``factor`` times the setup's (float64 product, then the
        compute dtype, so every backend uses the same values)."""
        raise NotImplementedError(f"{type(self).__name__} has no smooth start (setup.ramp_steps)")

    @abc.abstractmethod
    def populations(self) -> np.ndarray:
        """Host copy of the stored state g (9, ny, nx), in the storage dtype (shifted, scaled)."""

    def load_populations(self, g: np.ndarray, time_step: int) -> None:
        """Replace the stored state by ``g`` (storage dtype, shape (9, ny, nx)) at ``time_step``
        (restart from a checkpoint). Both buffers must hold it, as after construction."""
        raise NotImplementedError(f"{type(self).__name__} cannot restart from a checkpoint")

    # ---- the state as arrays of ``array_module`` (no host copy; class docstring)
    def save_state(self):
        """A copy of the state to come back to with ``restore_state`` (this default: a host copy)."""
        return SavedState((self.populations(),), (), 0, self.time_step)

    def restore_state(self, saved: SavedState) -> None:
        """Back to ``saved`` (from ``save_state``): the stepper continues bit for bit as from that state."""
        self.load_populations(saved.arrays[0], saved.time_step)

    def array_twin(self, setup: "LBMSetup") -> "Stepper | None":
        """A stepper for ``setup`` whose state lives in this one's ``array_module`` (the 16-bit guard's float32
        shadow), or None where there is none (the guard then asks the run's backend). This default: one of this
        class, where it has an array module."""
        return None if self.array_module is None else type(self)(setup)

    def state_array(self):
        """The stored state (9, ny, nx), storage dtype, even layout, as an array of ``array_module`` (a view: do not
        keep it across steps), or None where it is not in the even layout now (then use ``populations()``)."""
        raise NotImplementedError(f"{type(self).__name__} has no array module")

    def load_state_array(self, g, time_step: int) -> None:
        """``load_populations`` from an ``array_module`` array ``g`` (storage dtype, (9, ny, nx), even layout),
        copied into the stepper's own buffers."""
        raise NotImplementedError(f"{type(self).__name__} has no array module")

    def velocity_array(self):
        """(ux, uy) of the stored state as one (2, ny, nx) ``array_module`` array (compute dtype or float64;
        non-fluid cells 0), valid until the next call."""
        raise NotImplementedError(f"{type(self).__name__} has no array module")

    def _check_loadable(self, g: np.ndarray) -> np.ndarray:
        g = np.asarray(g)
        want = (lattice.Q,) + tuple(self.setup.shape)
        if g.shape != want or g.dtype != np.dtype(self.policy.storage):
            raise CaseError.invalid("checkpoint populations", f"{g.dtype} {g.shape}",
                                    f"{np.dtype(self.policy.storage)} {want}")
        return g

    def macroscopic(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rho, ux, uy) host float64 arrays (ny, nx) computed from the stored state with the
        compute-dtype physics (moments of h = g / scale). Non-fluid cells read rho = 1, u = 0."""
        return macroscopic_from_populations(self.populations(), self.setup)

    def fields_on_device(self):
        """(rho, ux, uy) as ``macroscopic`` gives them, as CuPy arrays on the device, or None where the backend
        has none (NumPy; Numba-CUDA without CuPy): the run's monitor points then reduce on the host."""
        return None

    def force(self, mask: np.ndarray) -> tuple[float, float]:
        """Force (Fx, Fy) on the non-fluid cells in ``mask`` by momentum exchange, lattice units."""
        return momentum_exchange_force(self.populations(), self.setup, mask)

    def finite(self) -> bool:
        """True if every stored population is finite (the blow-up check)."""
        return self.policy.all_finite(self.populations())


def macroscopic_from_populations(g: np.ndarray, setup: LBMSetup):
    h = setup.policy.decode(np.asarray(g))
    P = physics.physics_for(h.dtype)
    drho, ux, uy = P.moments(tuple(h))
    solid = setup.flags != FLUID
    rho = 1.0 + drho.astype(np.float64)
    ux = ux.astype(np.float64)
    uy = uy.astype(np.float64)
    rho[solid], ux[solid], uy[solid] = 1.0, 0.0, 0.0
    return rho, ux, uy


def get_stepper(backend, setup: LBMSetup, **options) -> Stepper:
    """The Stepper of ``backend`` (a Backend or its name) for ``setup``; kernels import lazily. ``options``: the
    backend stepper's own keywords (GPU: ``pairs``, ``block_x``, ...)."""
    backend = backends.get(backend)
    stepper = backend.piece("lbm.stepper")(setup, **options)
    if setup.links is not None and len(setup.links) and getattr(stepper, "bouzidi", None) is None:
        raise BackendError(f"backend {backend.name!r} does not implement interpolated (Bouzidi) bounce-back yet; "
                           f"use lattice.bounce_back = 'simple' or the numpy backend")
    return stepper
