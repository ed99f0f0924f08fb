"""The pressure outlet (flag OUTLET): anti-bounce-back at rho_w = 1 + drho_w with u_w the fluid cell's own
velocity (``physics.pressure_anti_bounce_back``); drho_w = 0 (fixed pressure, ``boundaries.outlet =
"pressure"``) or the characteristic (non-reflecting) value ``physics.outlet_density`` from the outlet cell's
reference outflow (``"characteristic"``; geometry.py puts the opposite inlet's profile there).

- reference: :class:`NumpyLinks` (the links into outlet cells, the own velocity from the stored state);
- device tables: the reference outflow rides in ``velocity.velocity_table`` where
  :func:`characteristic_outlet`; the rule reads its fluid cell's own velocity (``needs_own_velocity``), which
  in-place streaming keeps in a table (``steppers.inplace.own_velocity_cells``, ``gpu_common.InPlaceTables``);
- force term: none (outlets are not obstacles);
- kernel piece: :func:`rule`; case name ``"outlet"``; registered in ``hpcsolve.lbm.rules.RULES`` as :data:`RULE`.
"""

from __future__ import annotations

import numpy as np

from hpcsolve.lbm import rules
from hpcsolve.lbm.boundaries import velocity
from hpcsolve.lbm.boundaries.links import ReferenceLinks
from hpcsolve.lbm.flags import OUTLET
from hpcsolve.lbm.kernels.kernel_plan import LinkRule, Op


def rule(characteristic: bool) -> LinkRule:
    """The kernel piece; ``characteristic``: drho_w from the looked-up reference outflow, else drho_w = 0
    (no lookup compiled: it costs a table probe, a square root and a division per outlet link)."""
    own = Op("own_velocity", out=("own_ux", "own_uy"))
    abb = ("hop", "w_i", "cx_i", "cy_i", "own_ux", "own_uy")
    if not characteristic:
        return LinkRule("outlet", OUTLET, (own, Op("physics", "pressure_anti_bounce_back", ("h",), abb + ("ZERO",))))
    return LinkRule("outlet", OUTLET, (
        own, Op("lookup", out=("urx", "ury"), args=("s",)),
        Op("physics", "outlet_density", ("drho_w",), ("own_ux", "own_uy", "urx", "ury")),
        Op("physics", "pressure_anti_bounce_back", ("h",), abb + ("drho_w",))))


class OutletRule(rules.BoundaryRule):
    name, flag, sides = "outlet", OUTLET, ("outlet",)
    needs_own_velocity = True

    def kernel_piece(self, characteristic: bool = False) -> LinkRule:
        return rule(characteristic)

    def numpy_links(self, setup, P, sources, fluid):
        return NumpyLinks(setup, P, sources, fluid)

    def looks_up(self, setup) -> bool:
        """Only the characteristic outlet looks up its reference outflow."""
        return characteristic_outlet(setup)

    def side_velocity(self, kind: str, side: str, case, n: int):
        """A characteristic outlet's reference outflow: the opposite inlet's profile, pointing out of the domain; a
        fixed-pressure outlet has none."""
        b = case.boundaries
        if b.outlet != "characteristic":
            return None
        return "normal", velocity.into(side, kind) * velocity.inlet_profile(n, case.lattice.velocity, b.inlet_profile)


def characteristic_outlet(setup) -> bool:
    """True where an OUTLET cell holds a reference outflow (``physics.outlet_density``): the step kernels are then
    compiled with the characteristic rule, which looks that value up per outlet link; without one they keep
    the fixed-pressure rule (drho_w = 0) and no lookup, whose cost (6-8 % of a 2D-1 step at D = 80 on the
    H200: a table probe, a square root and a division per outlet link) only the characteristic rule needs."""
    outlet = setup.flags.ravel() == OUTLET
    return bool(np.any(setup.boundary_velocity.reshape(2, -1)[:, outlet]))


class NumpyLinks(ReferenceLinks):
    """The reference: the links whose source x - c_i is an outlet cell (``links.ReferenceLinks``, u = the
    reference outflow, 0 at a fixed pressure), with the fluid cells ``cells`` whose own velocity they take."""

    def __init__(self, setup, P, sources: np.ndarray, fluid: np.ndarray):
        super().__init__(setup, P, sources, OUTLET)
        cells, inverse = np.unique(self.column, return_inverse=True)
        self.cells, self.link_cell = fluid[cells], inverse.reshape(-1)

    def apply(self, P, flat, own_h) -> None:
        """The rule on the links; ``own_h(cells)``: the decoded stored populations (9, n) of those cells at t."""
        if not self.pos.size:
            return
        _, ux, uy = P.moments(tuple(own_h(self.cells)))
        uxl, uyl = ux[self.link_cell], uy[self.link_cell]
        flat[self.pos] = P.pressure_anti_bounce_back(flat[self.pos], self.w, self.cx, self.cy, uxl, uyl,
                                                     P.outlet_density(uxl, uyl, self.ux, self.uy))


RULE = OutletRule()
