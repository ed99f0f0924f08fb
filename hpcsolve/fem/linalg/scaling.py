"""The power-of-two scaling of a linear system's right-hand side (docs/design/fem_solvers.md, "Tiny and huge right-hand
sides"), done once on the host above every backend and precision.

A x = b is solved as A y = 2^e b with e chosen so that max |2^e b_i| lies in [0.5, 1) (:class:`RhsScale`), then
x = 2^-e y. Multiplying by a power of two only shifts exponents, so it is exact (where no entry leaves the normal
range), and every norm, dot product and relative residual of the solve (r.r, p.Ap, ||b||, the float32 casts of
fp32 and mixed) then works on numbers of order 1: b = 1e-300 * ones solves as b = ones, b = 1e300 * ones as well,
and a float32 working precision never sees an entry that under- or overflows float32 because of b's scale.

The way back is exact too, except where an entry of x leaves the normal float64 range: then it rounds (into a
subnormal) or overflows. :meth:`RhsScale.finish` detects both and re-judges the report on the x returned: the
residual of that x is recomputed (in the scaled system, which is again exact) and "converged" is said only
where it meets rtol; an overflow is "not converged" with the reason.
"""

from __future__ import annotations

import math

import numpy as np

from hpcsolve.core import scaled
from hpcsolve.core.errors import CaseError


#: a float32 working precision gets a host matrix scaled by a power of two where the middle of its range,
#: c = sqrt(max |a_ij| * min a_ii), is outside [2^-CENTER_RANGE, 2^CENTER_RANGE]: c is brought to about 1, so that
#: the entries (and the solution, about b / a) sit in float32's 2^-126..2^128 with the most room on both sides (a
#: matrix of entries 1 .. 4e34 is scaled to 1e-17 .. 1e17, not to 1e-34 .. 1, where its solution would near
#: float32's top). A matrix whose own contrast max |a_ij| / min a_ii exceeds 2^(2 CENTER_RANGE) is left as it is:
#: float32 cannot solve it wherever it is centred, and mixed precision's float64 fallback takes it (a float32
#: product that underflows says so: scaled, ir-restarted's float32 inner solve would spend every iteration instead)
CENTER_RANGE = 30
#: a prepared matrix (used as it is) is refused for float32 work where max |a_ij| is outside [2^lo, 2^hi]
MATRIX_RANGE = (-100, 120)


def matrix_in_range(max_abs: float) -> bool:
    """Whether a prepared matrix with largest entry ``max_abs`` is usable for float32 work (MATRIX_RANGE)."""
    lo, hi = MATRIX_RANGE
    return not (max_abs > 0) or 2.0 ** lo <= max_abs <= 2.0 ** hi


class RhsScale:
    """The exponents of one solve: b is scaled by 2^e (e = 0 for b = 0), A by 2^ea (0 unless
    :meth:`scale_matrix` scaled it); the scaled system's solution is y = 2^(e - ea) x."""

    def __init__(self, b64: np.ndarray):
        self.e = -scaled.pow2_exponent(scaled.peak(b64))
        self.ea = 0

    def scale_matrix(self, csr, dtype) -> object:
        """A host CSR matrix scaled by a power of two where a float32 ``dtype`` could not hold its entries or
        products (a new matrix; the caller's is never modified); as it is otherwise."""
        if np.dtype(dtype).itemsize >= 8 or not csr.nnz:
            return csr
        m, diag = scaled.peak(csr.data), csr.diagonal()
        dmin = float(diag.min()) if diag.size else 0.0
        if not (dmin > 0 and math.isfinite(m)):        # refused by the matrix check that follows
            return csr
        c = math.sqrt(m) * math.sqrt(dmin)
        if 2.0 ** -CENTER_RANGE <= c <= 2.0 ** CENTER_RANGE or m / dmin > 2.0 ** (2 * CENTER_RANGE):
            return csr
        self.ea = -round(math.log2(c))
        with np.errstate(under="ignore"):
            data = scaled.ldexp(csr.data, self.ea)
        return type(csr)((data, csr.indices, csr.indptr), shape=csr.shape)

    @property
    def shift(self) -> int:
        """y = 2^shift x (the scaled system's solution against the caller's)."""
        return self.e - self.ea

    def down(self, v: np.ndarray, field: str = "b") -> np.ndarray:
        """b * 2^e, or an initial guess x0 * 2^shift (host float64; refused where that leaves the float64 range)."""
        k = self.e if field == "b" else self.shift
        if k == 0:
            return v
        with np.errstate(over="ignore", under="ignore"):
            out = scaled.ldexp(v, k)
        if not np.all(np.isfinite(out)):
            raise CaseError.invalid(field, f"max |{field}| = {scaled.peak(v):.3e}",
                                    f"an initial guess within float64's range of the solution's scale",
                                    why="the solve works on the system scaled to max |b| ~ 1 (exact powers of two); "
                                        "this initial guess overflows there: start from x0 = 0")
        return out

    def up(self, y: np.ndarray) -> tuple[np.ndarray, "np.ndarray | None"]:
        """(x = y * 2^-shift, None) where that is exact; else (x, x * 2^shift): x rounded into subnormals (or
        overflowed), and the scaled system's vector it stands for (scaling back up is exact)."""
        if self.shift == 0:
            return y, None
        with np.errstate(over="ignore", under="ignore"):
            x = scaled.ldexp(y, -self.shift)
            back = scaled.ldexp(x, self.shift)
        return (x, None) if np.array_equal(back, y) or not np.all(np.isfinite(y)) else (x, back)

    def finish(self, y: np.ndarray, report, b_scaled: np.ndarray, host_matrix) -> np.ndarray:
        """x = y * 2^-e for the solution y of the scaled system; ``report`` re-judged where the way back was not
        exact (an overflow, or entries rounded into subnormals). ``host_matrix()`` gives the scaled system's A on
        the host (only called then). A y that is not finite keeps the solver's own verdict."""
        x, back = self.up(y)
        if back is None:
            return x
        if not np.all(np.isfinite(x)):
            report.converged = False
            report.true_residual = float("inf")
            report.reason = (f"the solution overflows float64: max |x| = {scaled.peak(y):.3e} * 2^{-self.shift} "
                             "(the solution of the system scaled to max |b| ~ 1, scaled back)")
            return x
        true = scaled.relative_norm(b_scaled - host_matrix() @ back, b_scaled)
        report.notes.append(f"the solution has entries below the normal float64 range (scaled by 2^{-self.shift} "
                            f"back from the scaled system): true residual of the x returned {true:.3e}")
        report.true_residual = true
        report.residual_gap = abs(true - report.recursive_residual)
        was = report.converged
        report.converged = bool(true <= report.rtol)
        if was and not report.converged:
            report.reason = (f"true residual {true:.3e} above rtol {report.rtol:.1e}: the solution's entries are "
                             "below the normal float64 range (about 2.2e-308), where float64 has fewer digits")
        return x
