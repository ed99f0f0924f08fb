"""NumPy reference Stepper: the algorithm of docs/lbm_algorithm.md, vectorized.

One step = pull streaming with the boundary rules, then collision, both on the fluid cells only.
Streaming is a single gather: for every (direction i, fluid cell x) a precomputed index says
where f_i(x, t+1) comes from (the neighbour x - c_i, or this cell's opposite population when
x - c_i is a boundary cell); boundary links then get their correction terms from
``hpcsolve.lbm.physics``. The stored array always holds post-collision populations.
"""

from __future__ import annotations

import numpy as np

from hpcsolve.lbm import bouzidi, lattice, physics
from hpcsolve.lbm.flags import FLUID, OUTLET, VELOCITY
from hpcsolve.lbm.stepper import LBMSetup, Stepper


class NumpyStepper(Stepper):
    backend = "numpy"

    def __init__(self, setup: LBMSetup):
        super().__init__(setup)
        pol = self.policy
        self.ct = ct = np.dtype(pol.compute)
        self.P = physics.physics_for(ct)
        omega_plus, omega_minus = setup.omegas
        self.omega_plus, self.omega_minus = ct.type(omega_plus), ct.type(omega_minus)
        self._build_links()
        self.g = setup.initial_populations()
        self.g_next = self.g.copy()
        self.bouzidi = bouzidi.NumpyPrepass(setup.links, pol) if bouzidi.has_links(setup) else None

    # -- precomputation: where every population of every fluid cell is pulled from ------------------
    def _build_links(self) -> None:
        setup, ct = self.setup, self.ct
        flags = setup.flags
        ny, nx = flags.shape
        n = ny * nx
        fluid = np.flatnonzero(flags.ravel() == FLUID)
        y, x = np.divmod(fluid, nx)
        nf = fluid.size
        gather = np.empty((lattice.Q, nf), dtype=np.int64)
        vel_pos, vel_i, vel_src = [], [], []
        out_pos, out_i, out_cell, out_src = [], [], [], []
        for i in range(lattice.Q):
            src = ((y - lattice.CY[i]) % ny) * nx + (x - lattice.CX[i]) % nx
            nflag = flags.ravel()[src]
            is_fluid = nflag == FLUID
            gather[i] = np.where(is_fluid, i * n + src, lattice.OPPOSITE[i] * n + fluid)
            k = np.flatnonzero(nflag == VELOCITY)
            vel_pos.append(i * nf + k); vel_i.append(np.full(k.size, i)); vel_src.append(src[k])
            k = np.flatnonzero(nflag == OUTLET)
            out_pos.append(i * nf + k); out_i.append(np.full(k.size, i)); out_cell.append(k); out_src.append(src[k])
        self.fluid, self.gather, self.nf = fluid, gather, nf
        W, CX, CY = (np.array(a, dtype=ct) for a in (lattice.WEIGHTS, lattice.CX, lattice.CY))
        vi = np.concatenate(vel_i).astype(np.int64)
        vs = np.concatenate(vel_src).astype(np.int64)
        uw = setup.boundary_velocity.reshape(2, n)
        self.vel = dict(pos=np.concatenate(vel_pos).astype(np.int64), w=W[vi], cx=CX[vi], cy=CY[vi],
                        uwx=uw[0][vs].astype(ct), uwy=uw[1][vs].astype(ct))
        self._vel_full = (uw[0][vs], uw[1][vs])   # float64, for the smooth start
        oi = np.concatenate(out_i).astype(np.int64)
        oc = np.concatenate(out_cell).astype(np.int64)
        cells, inverse = np.unique(oc, return_inverse=True)
        os_ = np.concatenate(out_src).astype(np.int64)
        self.out = dict(pos=np.concatenate(out_pos).astype(np.int64), w=W[oi], cx=CX[oi], cy=CY[oi],
                        cells=fluid[cells], link_cell=inverse.reshape(-1),
                        urx=uw[0][os_].astype(ct), ury=uw[1][os_].astype(ct))   # reference outflow (0: pressure)
        self._out_full = (uw[0][os_], uw[1][os_])

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
        v = self.vel
        if v["pos"].size:
            flat[v["pos"]] = P.velocity_bounce_back(flat[v["pos"]], v["w"], v["cx"], v["cy"], v["uwx"], v["uwy"])
        o = self.out
        if o["pos"].size:
            # the outlet uses the adjacent fluid cell's own velocity at time t (moments of its stored f*)
            own = self.policy.decode(self.g.reshape(lattice.Q, n)[:, o["cells"]])
            _, ux, uy = P.moments(tuple(own))
            uxl, uyl = ux[o["link_cell"]], uy[o["link_cell"]]
            flat[o["pos"]] = P.pressure_anti_bounce_back(flat[o["pos"]], o["w"], o["cx"], o["cy"], uxl, uyl,
                                                         P.outlet_density(uxl, uyl, o["urx"], o["ury"]))
        # 2. collision on the fluid cells
        h = tuple(pulled)
        if self.setup.collision == "trt":
            post = P.collide_trt(h, self.omega_plus, self.omega_minus)
        else:
            post = P.collide_bgk(h, self.omega_plus)
        self.g_next.reshape(lattice.Q, n)[:, self.fluid] = self.policy.encode(np.stack(post))
        self.g, self.g_next = self.g_next, self.g

    def _advance(self, n: int) -> None:
        for _ in range(n):
            self._step_once()

    def _set_velocity_scale(self, factor: float) -> None:
        self.vel["uwx"] = (self._vel_full[0] * factor).astype(self.ct)
        self.vel["uwy"] = (self._vel_full[1] * factor).astype(self.ct)
        self.out["urx"] = (self._out_full[0] * factor).astype(self.ct)
        self.out["ury"] = (self._out_full[1] * factor).astype(self.ct)

    def populations(self) -> np.ndarray:
        return self.g.copy()

    def load_populations(self, g: np.ndarray, time_step: int) -> None:
        g = self._check_loadable(g)
        self.g = np.ascontiguousarray(g).copy()
        self.g_next = self.g.copy()
        self.time_step = int(time_step)


def make_stepper(setup: LBMSetup) -> NumpyStepper:
    return NumpyStepper(setup)
