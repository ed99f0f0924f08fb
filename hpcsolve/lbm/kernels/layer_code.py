"""The absorbing layer's kernel piece (``hpcsolve/lbm/boundaries/layer.py`` holds the layer, its reference and its
case): the kernel arguments and the device function ``layer_coefficient`` in CUDA C and in Python for Numba, the
same expression as ``AbsorbingLayer.coefficient``. It lives in the kernel room, below the boundaries, because the
step descriptions and both printers take the arguments; ``boundaries.layer`` re-exports it."""

from __future__ import annotations

#: the kernel arguments of the layer, after omega_minus, in this order
ARGS = ("lay_c0", "lay_kx", "lay_ky", "lay_s")

C_SOURCE = """
// absorbing layer (hpcsolve/lbm/boundaries/layer.py): the extra bulk relaxation of the cell (x, y)
__device__ __forceinline__ real_t layer_coefficient(const int x, const int y, const real_t c0, const real_t kx,
                                                    const real_t ky, const real_t s) {
  real_t t = c0 + kx * (real_t)x + ky * (real_t)y;
  t = t < (real_t)0 ? (real_t)0 : (t > (real_t)1 ? (real_t)1 : t);
  return s * t * t;
}
"""

PYTHON_SOURCE = """
def layer_coefficient(x, y, c0, kx, ky, s):
    # absorbing layer (hpcsolve/lbm/boundaries/layer.py): the extra bulk relaxation of the cell (x, y)
    t = c0 + kx * CT(x) + ky * CT(y)
    t = ZERO if t < ZERO else (ONE if t > ONE else t)
    return s * t * t
"""
