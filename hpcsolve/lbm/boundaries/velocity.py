"""Bounce-back with a wall velocity (flag VELOCITY: moving lids, velocity inlets; rho_w = 1):
f_i(x, t + 1) = f*_opp(i)(x, t) + 6 w_i (c_i . u_w) (``physics.velocity_bounce_back``), u_w the velocity of
the boundary cell x - c_i.

- reference: :class:`NumpyLinks` (every link into a velocity cell, applied after the NumPy gather; ``links.py``);
- device table: :func:`velocity_table` (a hash table of the velocity cells and their u_w; the characteristic
  outlet keeps its reference outflow there too);
- force term: :func:`force_terms`, the momentum exchange of a simple link into an obstacle (walls: u_w = 0);
- kernel piece: :data:`PIECE`; case names ``"moving_wall"``, ``"inlet"``; registered in ``hpcsolve.lbm.rules.RULES``
  as :data:`RULE`.
"""

from __future__ import annotations

import numpy as np

from hpcsolve.lbm import lattice, rules
from hpcsolve.lbm.boundaries.links import ReferenceLinks
from hpcsolve.lbm.kernels.cell_table import cell_table, table_values
from hpcsolve.lbm.flags import FLUID, VELOCITY
from hpcsolve.lbm.kernels.kernel_plan import LinkRule, Op

PIECE = LinkRule("velocity", VELOCITY, (
    Op("lookup", out=("uwx", "uwy"), args=("s",)),
    Op("physics", "velocity_bounce_back", ("h",), ("hop", "w_i", "cx_i", "cy_i", "uwx", "uwy")),
))


class VelocityRule(rules.BoundaryRule):
    name, flag, sides = "velocity", VELOCITY, ("moving_wall", "inlet")

    def kernel_piece(self, characteristic: bool = False) -> LinkRule:
        return PIECE

    def numpy_links(self, setup, P, sources, fluid):
        return NumpyLinks(setup, P, sources)

    def looks_up(self, setup) -> bool:
        return True

    def side_velocity(self, kind: str, side: str, case, n: int):
        """A moving wall moves along itself at ``moving_wall_velocity`` U; an inlet's profile points into the domain."""
        u_lb = case.lattice.velocity
        if kind == "moving_wall":
            return "tangential", case.boundaries.moving_wall_velocity * u_lb
        return "normal", into(side, kind) * inlet_profile(n, u_lb, case.boundaries.inlet_profile)


def inlet_profile(n: int, mean_velocity: float, kind: str) -> np.ndarray:
    """Inlet velocity at n cell centres across a channel whose walls lie half a cell outside them.

    parabolic: u(y) = 6 U y (H - y) / H^2 with H = n, y = j + 1/2 (peak 1.5 U, mean ~U)."""
    if kind == "uniform":
        return np.full(n, mean_velocity)
    y = np.arange(n) + 0.5
    return 6.0 * mean_velocity * y * (n - y) / n ** 2


def into(side: str, kind: str) -> float:
    """Sign of the velocity along a side's axis: an inlet's flow points into the domain, a characteristic
    outlet's reference outflow out of it (+1 at a left inlet and at a right outlet)."""
    return (1.0 if side in ("left", "bottom") else -1.0) * (-1.0 if kind == "outlet" else 1.0)


def velocity_table(setup, compute) -> tuple[np.ndarray, np.ndarray]:
    """The kernels' table of the cells whose rule looks up a boundary velocity (``rules.lookup_flags``: VELOCITY
    cells, and OUTLET cells where ``outlet.characteristic_outlet``): keys (``cell_table.cell_table``) and the
    (2, size) boundary velocities per slot (compute dtype): a velocity cell's wall / inlet velocity, an outlet
    cell's reference outflow (0 where it has none: fixed pressure)."""
    flat = setup.flags.ravel()
    kept = np.isin(flat, rules.lookup_flags(setup))
    cells = np.flatnonzero(kept).astype(np.int64)
    keys, slots = cell_table(cells)
    uw = setup.boundary_velocity.reshape(2, -1)[:, cells].astype(compute)
    return keys, table_values(slots, keys.size, uw)


class NumpyLinks(ReferenceLinks):
    """The reference: the links whose source x - c_i is a velocity cell (``links.ReferenceLinks``, u = u_w)."""

    def __init__(self, setup, P, sources: np.ndarray):
        super().__init__(setup, P, sources, VELOCITY)

    def apply(self, P, flat, own_h=None) -> None:
        """Overwrite the links' pulled values (``flat``: the pulled f*_opp(i)(x) there) with the rule's (``own_h``:
        unused, the outlet's input)."""
        if self.pos.size:
            flat[self.pos] = P.velocity_bounce_back(flat[self.pos], self.w, self.cx, self.cy, self.ux, self.uy)


def force_terms(setup, mask: np.ndarray, skip: np.ndarray | None = None):
    """Momentum-exchange terms of the simple links (x fluid, x + c_i in ``mask``), F = sum c_i (m h[pos] + k)
    with h the stored shifted populations at pos = i * N + x:
        c_i (f*_i + f_opp(i)(t + 1)),  f_opp(i)(t + 1) = f*_i - 6 w_i c_i . u_w  ->  m = 2, k = 2 w_i - 6 w_i c_i . u_w.
    ``skip`` (9, N) bool: links another rule handles (interpolated links). Returns (pos, cx, cy, m, k) lists."""
    mask = np.asarray(mask, dtype=bool)
    n = mask.size
    fluid = setup.flags == FLUID
    uw = setup.boundary_velocity
    pos, cx_l, cy_l, m_l, k_l = [], [], [], [], []
    for i in range(1, lattice.Q):
        cx, cy, w = lattice.CX[i], lattice.CY[i], lattice.WEIGHTS[i]
        target = np.roll(mask, shift=(-cy, -cx), axis=(0, 1))   # x whose neighbour x + c_i is in the mask
        links = (fluid & target).ravel()
        if skip is not None:
            links &= ~skip[i]
        links = np.flatnonzero(links)
        if links.size == 0:
            continue
        cu = (cx * np.roll(uw[0], (-cy, -cx), (0, 1)).ravel()[links]
              + cy * np.roll(uw[1], (-cy, -cx), (0, 1)).ravel()[links])
        pos.append(i * n + links)
        cx_l.append(np.full(links.size, float(cx)))
        cy_l.append(np.full(links.size, float(cy)))
        m_l.append(np.full(links.size, 2.0))
        k_l.append(2.0 * w - 6.0 * w * cu)
    return pos, cx_l, cy_l, m_l, k_l


RULE = VelocityRule()
