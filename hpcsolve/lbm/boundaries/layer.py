"""The absorbing layer (``[boundaries.absorbing_layer]``): a region next to the outlet where the bulk viscosity
rises, so that sound (and the wall-to-wall modes of a channel, which no outlet rule can let out) is damped
before it comes back, while shear viscosity, mass and momentum stay as they are.

In the layer the trace of the non-equilibrium stress relaxes at a rate s_b below the collision's omega+
(``physics.add_bulk_relaxation``), so the bulk viscosity is zeta = c_s^2 (1/s_b - 1/2) = ratio * nu at full
strength. Per fluid cell (x, y) (lattice indices) the collision gets

    layer(x, y) = strength * t^2,   t = clamp(c0 + kx x + ky y, 0, 1),   strength = omega+ - s_b,

t = 0 further than ``width`` from the outlet side, rising over ``ramp`` to 1 and 1 from there to the outlet
(a smooth start: an abrupt jump in the bulk viscosity reflects a little of the sound it should absorb).

- reference: :meth:`AbsorbingLayer.coefficient` (NumPy, the compute dtype);
- device tables: none: the four numbers :meth:`AbsorbingLayer.args` are kernel arguments;
- force term: none;
- kernel piece: :data:`C_SOURCE` (CUDA C) and :data:`PYTHON_SOURCE` (Numba; both in ``kernels.layer_code``, the
  kernel room's, re-exported here), the same expression, and the
  collision ``physics.collide_trt_layer`` / ``collide_bgk_layer``. Kernels are compiled with the layer only
  where a case has one (``layer=True`` of the emitters); without it their sources are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hpcsolve.lbm import lattice, physics
from hpcsolve.lbm.kernels.layer_code import ARGS, C_SOURCE, PYTHON_SOURCE

#: the kernel piece (``kernels.layer_code``): the kernel arguments after omega_minus, the CUDA C and Python sources
__all__ = ["ARGS", "C_SOURCE", "PYTHON_SOURCE", "AbsorbingLayer", "bulk_rate", "from_case"]


@dataclass(frozen=True)
class AbsorbingLayer:
    """t = clamp(c0 + kx x + ky y, 0, 1) over the lattice indices (x, y); layer = strength t^2 (lattice units)."""

    c0: float
    kx: float
    ky: float
    strength: float          # omega+ - s_b >= 0

    def args(self, dtype) -> tuple:
        """The kernel arguments (``ARGS``) in the compute dtype."""
        t = np.dtype(dtype).type
        return tuple(t(v) for v in (self.c0, self.kx, self.ky, self.strength))

    def coefficient(self, x, y, dtype) -> np.ndarray:
        """layer(x, y) of the cells with lattice indices x, y (integer arrays), in ``dtype``: the reference of the
        kernels' ``layer_coefficient`` (the same operations, left to right)."""
        c0, kx, ky, s = self.args(dtype)
        ct = np.dtype(dtype).type
        t = c0 + kx * np.asarray(x).astype(ct) + ky * np.asarray(y).astype(ct)
        t = np.where(t < 0, ct(0), np.where(t > 1, ct(1), t)).astype(dtype)
        return s * t * t


def bulk_rate(viscosity_ratio: float, tau: float) -> float:
    """s_b of a bulk viscosity ``viscosity_ratio`` times the shear viscosity (c_s^2 (tau - 1/2))."""
    zeta = viscosity_ratio * physics.viscosity_from_tau(tau)
    return 1.0 / (zeta / lattice.CS2 + 0.5)


def from_case(spec, boundaries, geometry, domain, tau: float, omega_plus: float) -> AbsorbingLayer:
    """The layer of ``[boundaries.absorbing_layer]`` (``spec``: width and ramp in m, viscosity_ratio) along the one
    side of ``boundaries`` that is an outlet (the case validation checks there is one), on the cells of ``geometry``
    (``Geometry.cell_centres``, m); ``tau`` and ``omega_plus`` of the collision."""
    side = next(s for s in ("left", "right", "bottom", "top") if getattr(boundaries, s) == "outlet")
    extent = domain.length if side in ("left", "right") else domain.height    # (the case checked width <= extent)
    x, y = geometry.cell_centres()
    dx = geometry.dx
    # the distance d (m) of a cell centre from the outlet side as d0 + dd * index along the outlet's normal
    if side == "left":
        d0, dd = x[0], dx
    elif side == "right":
        d0, dd = extent - x[0], -dx
    elif side == "bottom":
        d0, dd = y[0], dx
    else:
        d0, dd = extent - y[0], -dx
    ramp = spec.ramp if spec.ramp is not None else 0.1 * spec.width
    # t = (width - d) / ramp
    c0, k = (spec.width - d0) / ramp, -dd / ramp
    kx, ky = (k, 0.0) if side in ("left", "right") else (0.0, k)
    return AbsorbingLayer(c0=c0, kx=kx, ky=ky, strength=omega_plus - bulk_rate(spec.viscosity_ratio, tau))
