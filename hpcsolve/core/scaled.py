"""Norms and scalings that neither underflow nor overflow for any finite input (docs/design/reliability.md, "Tiny and huge
right-hand sides").

``sqrt(sum(v**2))`` underflows to 0 once the entries are below about 1e-154 (their squares are below the smallest
float64) and overflows to inf above about 1e154, although the norm itself is a fine float64 (1e-170 * ones has
norm 1e-170 * sqrt(n)). So every 2-norm here is scaled first, as LAPACK's dnrm2 does: by the power of two nearest
the largest magnitude, which is exact in floating point (a shift of the exponent), so the scaled sum of squares is
of order n and the norm is the scaled one shifted back. The same power of two scales a linear system
(:func:`pow2_exponent`, :func:`ldexp`): A x = b and A (2^-e x) = 2^-e b have the same solution up to an exact shift.

Array-module generic: NumPy or CuPy arrays (one reduction for the peak, one for the sum), host floats back.
"""

from __future__ import annotations

import math

import numpy as np

from hpcsolve.core.backends import get_array_module


def _xp(v):
    return get_array_module(v)


def peak(v) -> float:
    """max |v_i| as a host float (0.0 for an empty array; nan/inf pass)."""
    xp = _xp(v)
    if not v.size:
        return 0.0
    return float(xp.max(xp.abs(v)))


def pow2_exponent(m: float) -> int:
    """The integer e with 2^(e-1) <= m < 2^e (``math.frexp``): m * 2^-e lies in [0.5, 1). 0 for m = 0, inf or
    nan (nothing to scale). Subnormal m (down to 5e-324) is fine: e is then about -1074."""
    if not (m > 0 and math.isfinite(m)):
        return 0
    return math.frexp(m)[1]


def ldexp(v, e: int):
    """v * 2^e, exact unless an entry leaves the float range (NumPy/CuPy ``ldexp``: correct even where 2^e itself
    is not a float64, e.g. e = 1070 for a subnormal peak)."""
    xp = _xp(v)
    if e == 0:
        return v
    return xp.ldexp(v, np.int32(e)) if xp is np else xp.ldexp(v, xp.int32(e))


def norm2(v) -> float:
    """||v||_2 without underflow or overflow (scaled by the power of two of max |v_i|); inf/nan where v holds them;
    inf where the norm itself exceeds the float64 range (it can, by at most sqrt(n))."""
    v = v.reshape(-1) if getattr(v, "ndim", 1) != 1 else v
    m = peak(v)
    if not (m > 0 and math.isfinite(m)):
        return m
    e = pow2_exponent(m)
    xp = _xp(v)
    s = float(xp.linalg.norm(ldexp(v.astype(np.float64, copy=False), -e)))
    try:
        return math.ldexp(s, e)
    except OverflowError:           # the norm itself is above the float64 range (max |v| near 1.8e308)
        return math.inf


def ratio(num: float, den: float) -> float:
    """num / den for non-negative norms, inf where den = 0 < num, 0 where both are 0; no OverflowError (Python
    floats raise none on division, but the quotient of two extreme norms can overflow: inf then)."""
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    with np.errstate(over="ignore", under="ignore"):
        return float(np.float64(num) / np.float64(den))


def relative_norm(diff, ref) -> float:
    """||diff|| / ||ref|| with both norms scaled (:func:`norm2`); inf where ref = 0 < diff."""
    return ratio(norm2(diff), norm2(ref))
