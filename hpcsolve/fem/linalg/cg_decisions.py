"""The decisions the host takes between blocks of CG iterations: a breakdown (:class:`Breakdown`), cg-reliable's
replacements (:class:`ReplacementWatch`, :class:`RoundingEstimate`), ir-restarted's refinement steps
(:class:`RefinementWatch`), and the Lanczos estimates of the spectrum from CG's coefficients (:func:`lanczos_kappa`,
:func:`lanczos_extremes`)."""

from __future__ import annotations

import math

import numpy as np

from hpcsolve.fem.linalg.cg_options import U32


class Breakdown(Exception):
    """kind: "indefinite" (p.Ap <= 0: the matrix is not SPD), "nonfinite" (overflow / NaN) or "underflow" (p.Ap
    exactly 0 with r.z != 0 in a low working precision: its products underflowed, or a singular matrix met an
    inconsistent right-hand side; float64 decides)."""

    def __init__(self, iteration: int, what: str, kind: str):
        self.iteration = iteration
        self.kind = kind
        super().__init__(what)


class ReplacementWatch:
    """What cg-reliable decides after each residual replacement: converged, non-finite, or stagnating
    (``reliable_patience`` replacements without halving the best true residual; with the van der Vorst-Ye
    criterion only replacements after which the recurrences had claimed a halving count)."""

    def __init__(self, opts, vdvye: bool, start: float):
        self.opts, self.vdvye = opts, vdvye
        self.best, self.since_best = start, 0

    def after(self, t: float, min_rec: float, count: int) -> tuple[str, str]:
        """(reason, fallback_why) after replacement number ``count`` gave the true residual ``t``
        (``min_rec``: the smallest recursive residual since the previous one). reason non-empty:
        converged, stop; fallback_why non-empty: fall back to float64; both empty: go on."""
        if t <= self.opts.rtol:
            return "true residual met rtol", ""
        if not math.isfinite(t):
            return "", f"the true residual became {t} after reliable update {count}"
        if t < 0.5 * self.best:
            self.best, self.since_best = t, 0
        elif not self.vdvye or min_rec < 0.5 * self.best:
            self.since_best += 1
            if self.since_best >= self.opts.reliable_patience:
                return "", (f"reliable updates stagnated: {self.since_best} replacements without halving the "
                            f"true residual (best {self.best:.3e})")
        return "", ""


class RefinementWatch:
    """ir-restarted's decisions between refinement steps: the inner tolerance to ask for (what is still
    needed, but not less than float32 has been seen to deliver) and, after a step, converged / diverged /
    stagnated."""

    def __init__(self, opts, res: float):
        self.opts, self.res, self.floor = opts, res, opts.inner_rtol

    def inner_tol(self) -> float:
        return min(0.5, max(0.5 * self.opts.rtol / self.res, self.floor))

    def after(self, outer: int, tol: float, inner_iterations: int, new: float, notes: list) -> tuple[str, str]:
        """(reason, failure) after refinement step ``outer`` took the true residual from ``self.res`` to
        ``new``; a note goes to ``notes``. reason non-empty: converged; failure non-empty: stop the
        refinement (diverged or stagnated); both empty: go on."""
        rho = new / self.res if self.res > 0 else 0.0
        notes.append(f"refinement step {outer}: inner tol {tol:.1e}, {inner_iterations} float32 iterations, "
                     f"true residual {self.res:.3e} -> {new:.3e}")
        self.res = new
        if not math.isfinite(new) or rho > 1.0:
            return "", f"refinement diverged at step {outer} (true residual {new:.3e}, factor {rho:.3g})"
        if rho > 10 * tol:
            self.floor = min(0.5, 2 * rho)   # float32 could not deliver the requested reduction: ask for less
        if new <= self.opts.rtol:
            return "true residual met rtol", ""
        if rho > self.opts.stagnation:
            return "", f"refinement stagnated at step {outer} (true residual fell only by a factor {rho:.3g})"
        return "", ""


class RoundingEstimate:
    """van der Vorst & Ye (2000) residual-replacement test, with their group update (x64 += y).

    d accumulates an estimate of the rounding error of the float32 recurrences since the last
    replacement, relative to ||b||: d += u32 (k N ||A|| ||y|| + sum_j ||r_j||) over the k iterations
    since the last check (N = mean nonzeros per row, ||A|| from the largest Ritz value or 2 max |a_ii|,
    ||y|| at the check). A replacement is due when d > sqrt(u32) ||r|| and d > 1.1 d_init
    (d_init = u32 ||r|| after the last replacement): the residual gap may then be sqrt(u32) of ||r||."""

    def __init__(self, res0: float, norm_a: float, row_nnz: float):
        self.norm_a, self.row_nnz = float(norm_a), float(row_nnz)
        self.reset(res0)

    def reset(self, res: float):
        self.d = self.d_init = U32 * res

    def due(self, k: int, ynorm: float, recent, rel: float) -> bool:
        self.d += U32 * (k * self.row_nnz * self.norm_a * ynorm + float(sum(recent)))
        return self.d > math.sqrt(U32) * rel and self.d > 1.1 * self.d_init


def lanczos_kappa(alpha, beta) -> float:
    """Condition number estimate of the (preconditioned) matrix from CG's alpha/beta (Lanczos T)."""
    lo, hi = lanczos_extremes(alpha, beta)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return float("nan")
    return float(hi / lo) if lo > 0 else float("inf")


def lanczos_extremes(alpha, beta) -> tuple[float, float]:
    """Smallest and largest Ritz values of the Lanczos T built from CG's alpha/beta (nan if unusable)."""
    nan = (float("nan"), float("nan"))
    a = np.asarray(alpha, dtype=np.float64)
    m = len(a)
    if m < 2:
        return nan
    b = np.asarray(beta, dtype=np.float64)[: m - 1]
    if len(b) < m - 1 or np.any(~np.isfinite(a)) or np.any(a <= 0) or np.any(b < 0):
        return nan
    diag = 1.0 / a
    diag[1:] += b / a[:-1]
    off = np.sqrt(b) / a[:-1]
    from scipy.linalg import eigvalsh_tridiagonal    # late: scipy.linalg's import costs about 0.14 s (measured)

    try:
        lo = eigvalsh_tridiagonal(diag, off, select="i", select_range=(0, 0))[0]
        hi = eigvalsh_tridiagonal(diag, off, select="i", select_range=(m - 1, m - 1))[0]
    except Exception:  # LAPACK failure on a pathological T
        return nan
    return float(lo), float(hi)
