"""Bounce-back with a wall velocity (flag VELOCITY: moving lids, velocity inlets; rho_w = 1):
f_i(x, t + 1) = f*_opp(i)(x, t) + 6 w_i (c_i . u_w) (``physics.velocity_bounce_back``), u_w the velocity of
the boundary cell x - c_i.

- reference: :class:`NumpyLinks` (every link into a velocity cell, applied after the NumPy gather; ``links.py``);
- device table: :func:`velocity_table` (a hash table of the velocity cells and their u_w; the characteristic
  outlet keeps its reference outflow there too);
- force term: :meth:`VelocityRule.force_terms`, the momentum exchange of a bounce-back link with u_w
  (``links.bounce_back_terms``);
- kernel piece: :data:`PIECE`; case names ``"moving_wall"``, ``"inlet"``; registered in ``hpcsolve.lbm.rules.RULES``
  as :data:`RULE`.
"""

from __future__ import annotations

import numpy as np

from hpcsolve.lbm import rules
from hpcsolve.lbm.boundaries.links import ReferenceLinks, bounce_back_terms
from hpcsolve.lbm.kernels.cell_table import cell_table, table_values
from hpcsolve.lbm.flags import VELOCITY
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

    def force_terms(self, setup, links):
        """m = 2, k = 2 w_i - 6 w_i c_i . u_w with u_w the boundary cell's velocity."""
        return bounce_back_terms(links, setup.boundary_velocity.reshape(2, -1))


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


RULE = VelocityRule()
