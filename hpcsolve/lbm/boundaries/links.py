"""The NumPy reference's boundary links, shared by the rules that need a value per link (``velocity``, ``outlet``)."""

from __future__ import annotations

import numpy as np

from hpcsolve.lbm import lattice


class ReferenceLinks:
    """The links (direction i, fluid cell) whose source x - c_i has flag ``flag``, as positions ``pos`` in the
    pulled (9, n_fluid) array (direction-major, as the NumPy gather lays it out), with their constants ``w``,
    ``cx``, ``cy`` (compute dtype), the fluid column ``column`` of each, and the boundary cell's velocity
    ``ux``, ``uy`` (``setup.boundary_velocity`` at x - c_i, times the smooth start's factor: a float64 product
    rounded to the compute dtype, :meth:`set_scale`)."""

    def __init__(self, setup, P, sources: np.ndarray, flag: int):
        """``sources`` (9, n_fluid): the flat source cell x - c_i of every pulled population."""
        ct = P.dtype
        d, self.column = np.nonzero(setup.flags.ravel()[sources] == flag)
        self.pos = (d * sources.shape[1] + self.column).astype(np.int64)
        self.w, self.cx, self.cy = (np.array(a, dtype=ct)[d] for a in (lattice.WEIGHTS, lattice.CX, lattice.CY))
        src = sources[d, self.column]
        uw = setup.boundary_velocity.reshape(2, -1)
        self._full = (uw[0][src], uw[1][src])
        self.ct = ct
        self.set_scale(1.0)

    def set_scale(self, factor: float) -> None:
        self.ux = (self._full[0] * factor).astype(self.ct)
        self.uy = (self._full[1] * factor).astype(self.ct)


def bounce_back_terms(links, uw=None) -> tuple[np.ndarray, np.ndarray]:
    """The momentum-exchange (m, k) of simple bounce-back links (``force.MaskLinks``), F = c_i (m h_i(x) + k):
        c_i (f*_i + f_opp(i)(t + 1)),  f_opp(i)(t + 1) = f*_i - 6 w_i c_i . u_w  ->  m = 2, k = 2 w_i - 6 w_i c_i . u_w
    with u_w ``uw`` (2, N) at the boundary cell x + c_i (None: a resting wall, k = 2 w_i)."""
    d = links.direction
    w = np.asarray(lattice.WEIGHTS, np.float64)[d]
    m = np.full(d.size, 2.0)
    if uw is None:
        return m, 2.0 * w
    cu = (np.asarray(lattice.CX, np.float64)[d] * uw[0][links.boundary]
          + np.asarray(lattice.CY, np.float64)[d] * uw[1][links.boundary])
    return m, 2.0 * w - 6.0 * w * cu
