"""Half-way bounce-back on a resting wall (flag WALL): f_i(x, t + 1) = f*_opp(i)(x, t)
(``physics.wall_bounce_back``). Its reference is the NumPy gather itself (``kernels_numpy``: a link into a
wall reads this cell's opposite population); its force term is the bounce-back one with u_w = 0
(``links.bounce_back_terms``; the interpolated links of an obstacle replace it there, ``bouzidi.force_terms``).

- case name: ``"wall"``; kernel piece: :data:`PIECE`; registered in ``hpcsolve.lbm.rules.RULES`` as :data:`RULE`.
"""

from __future__ import annotations

from hpcsolve.lbm.boundaries.links import bounce_back_terms
from hpcsolve.lbm.flags import WALL
from hpcsolve.lbm.kernels.kernel_plan import LinkRule, Op
from hpcsolve.lbm.rules import BoundaryRule

PIECE = LinkRule("wall", WALL, (Op("physics", "wall_bounce_back", ("h",), ("hop",)),))


class WallRule(BoundaryRule):
    name, flag, sides = "wall", WALL, ("wall",)

    def kernel_piece(self, characteristic: bool = False) -> LinkRule:
        return PIECE

    def force_terms(self, setup, links):
        """m = 2, k = 2 w_i: the resting wall's momentum exchange."""
        return bounce_back_terms(links)


RULE = WallRule()
