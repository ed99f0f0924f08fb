"""NumPy reference Stepper: the algorithm of docs/design/lbm_algorithm.md, vectorized.

One step = pull streaming with the boundary rules, then collision, both on the fluid cells only.
Streaming is a single gather: for every (direction i, fluid cell x) a precomputed index says
where f_i(x, t+1) comes from (the neighbour x - c_i, or this cell's opposite population when
x - c_i is a boundary cell); boundary links then get their correction terms from
``hpcsolve.lbm.physics``, applied by each registered rule's reference (``hpcsolve.lbm.rules``:
``BoundaryRule.numpy_links``). The stored array always holds post-collision populations.
"""

from __future__ import annotations

import numpy as np

from hpcsolve.lbm import lattice, physics, rules
from hpcsolve.lbm.boundaries import bouzidi
from hpcsolve.lbm.flags import FLUID
from hpcsolve.lbm.steppers.stepper import LBMSetup, SavedState, Stepper


class NumpyStepper(Stepper):
    backend = "numpy"
    array_module = np

    def __init__(self, setup: LBMSetup):
        super().__init__(setup)
        pol = self.policy
        self.ct = ct = np.dtype(pol.compute)
        self.P = physics.physics_for(ct)
        omega_plus, omega_minus = setup.omegas
        self.omega_plus, self.omega_minus = ct.type(omega_plus), ct.type(omega_minus)
        self.model = setup.collision_model
        self._build_links()
        self.g = setup.initial_populations()
        self.g_next = self.g.copy()
        self.bouzidi = bouzidi.NumpyPrepass(setup.links, pol) if bouzidi.has_links(setup) else None

    # -- precomputation: where every population of every fluid cell is pulled from ------------------
    def _build_links(self) -> None:
        setup = self.setup
        flags = setup.flags
        ny, nx = flags.shape
        n = ny * nx
        fluid = np.flatnonzero(flags.ravel() == FLUID)
        y, x = np.divmod(fluid, nx)
        sources = np.empty((lattice.Q, fluid.size), dtype=np.int64)   # x - c_i of every pulled population
        gather = np.empty((lattice.Q, fluid.size), dtype=np.int64)
        for i in range(lattice.Q):
            src = sources[i] = ((y - lattice.CY[i]) % ny) * nx + (x - lattice.CX[i]) % nx
            # f*_i(x - c_i), or this cell's f*_opp(i)(x) where x - c_i is a boundary cell (its rule's input)
            gather[i] = np.where(flags.ravel()[src] == FLUID, i * n + src, lattice.OPPOSITE[i] * n + fluid)
        self.fluid, self.gather = fluid, gather
        # the absorbing layer's extra bulk relaxation per fluid cell (boundaries/layer.py); None without one
        lay = setup.absorbing_layer
        # (global rows: a slab's cell_offset is a whole number of rows)
        self.layer = None if lay is None else lay.coefficient(x, y + setup.cell_offset // nx, self.ct)
        self.global_cells = fluid + setup.cell_offset     # the fluid cells' global indices (fp16c's seeds)
        # each registered rule's links (walls: none, the gathered value is the rule's)
        made = (r.numpy_links(setup, self.P, sources, fluid) for r in rules.rules())
        self.rule_links = [links for links in made if links is not None]

    # -- one time step ----------------------------------------------------------------------------
    def _step_once(self) -> None:
        P = self.P
        if self.bouzidi is not None:
            self.bouzidi(self.g)  # interpolated bounce-back: link values into the slots the wall rule reads
        n = self.g[0].size
        g_flat = self.g.reshape(-1)
        # 1. pull streaming: f_i(x, t+1) = f*_i(x - c_i, t), or f*_opp(i)(x, t) at a boundary link
        pulled = self.policy.decode(g_flat[self.gather])   # (9, nf), compute dtype
        flat = pulled.reshape(-1)
        # own_h: the decoded stored populations of fluid cells at time t (the outlet's own velocity)
        own_h = lambda cells: self.policy.decode(self.g.reshape(lattice.Q, n)[:, cells])   # noqa: E731
        for links in self.rule_links:
            links.apply(P, flat, own_h)
        # 2. collision on the fluid cells
        h = tuple(pulled)
        post = self.model.collide(P, h, self.omega_plus, self.omega_minus, self.layer)
        self.g_next.reshape(lattice.Q, n)[:, self.fluid] = self.policy.encode_step(np.stack(post), h[0], self.global_cells)
        self.g, self.g_next = self.g_next, self.g

    def _advance(self, n: int) -> None:
        for _ in range(n):
            self._step_once()

    def _set_velocity_scale(self, factor: float) -> None:
        for links in self.rule_links:
            links.set_scale(factor)

    def populations(self) -> np.ndarray:
        return self.g.copy()

    def load_populations(self, g: np.ndarray, time_step: int) -> None:
        g = self._check_loadable(g)
        self.g = np.ascontiguousarray(g).copy()
        self.g_next = self.g.copy()
        self.time_step = int(time_step)

    # ---- the state as NumPy arrays (Stepper's docstring)
    def save_state(self) -> SavedState:
        return SavedState((self.g.copy(),), (self.g, self.g_next), 0, self.time_step)

    def restore_state(self, saved: SavedState) -> None:
        self.g, self.g_next = saved.buffers
        np.copyto(self.g, saved.arrays[0])
        self.time_step = int(saved.time_step)

    def state_array(self) -> np.ndarray:
        return self.g

    def load_state_array(self, g, time_step: int) -> None:
        g = self._check_loadable(g)
        np.copyto(self.g, g)
        np.copyto(self.g_next, g)
        self.time_step = int(time_step)

    def velocity_array(self) -> np.ndarray:
        return np.stack(self.macroscopic()[1:])


def make_stepper(setup: LBMSetup) -> NumpyStepper:
    return NumpyStepper(setup)
