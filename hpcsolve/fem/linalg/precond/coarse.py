"""The coarsest level of a multigrid hierarchy: solved directly by its dense (generalized) inverse
(:func:`coarse_inverse`), applied as one matrix-vector product on the device."""

from __future__ import annotations

import numpy as np

DENSE_COARSE_MAX = 5000     # rows of the coarsest level (solved by its dense inverse: 200 MB in float64)
COARSE_NULL_RTOL = 100 * np.finfo(np.float64).eps   # x rows: a pivot of the coarsest level's Cholesky factorization
                            # (unit diagonal) below this is round-off of zero (a singular level)


def coarse_inverse(M: np.ndarray) -> tuple[np.ndarray, int]:
    """(X, rank): the inverse of the coarsest level M (dense, symmetric) and its numerical rank; where M is singular
    or only semidefinite (a Neumann problem's constants, a level aggregation could not coarsen well), X is a
    symmetric generalized inverse instead of the LinAlgError (or 1e16-sized entries) of inverting it.

    One Cholesky factorization with pivoting (LAPACK dpstrf, as cheap as an unpivoted one) stops where every pivot
    left is round-off of zero (<= COARSE_NULL_RTOL x rows, on the unit-diagonal S M S, S = diag(m_ii)^-1/2):
    P^T S M S P = [L11; L21] [L11^T L21^T] with L11 of the rank r. X = S P diag((L11 L11^T)^-1, 0) P^T S: M X r = r
    for every r in M's range (the coarse problem of
    a consistent system is solved exactly) and X is semidefinite (an indefinite M, which the outer CG reports,
    contributes only its definite part). A definite M has r = rows and X = M^-1."""
    import scipy.linalg.lapack as lapack    # late: scipy.linalg's import costs about 0.14 s (measured)

    n = M.shape[0]
    M = 0.5 * (M + M.T)
    d = np.diag(M).copy()
    X = np.zeros((n, n))
    if not n or not np.all(np.isfinite(d)) or not np.any(d > 0):
        return X, 0                                     # nothing positive to invert: no correction
    # factored with a unit diagonal (S M S, S = diag(m_ii)^-1/2; a row with m_ii <= 0 is dropped): a pivot is
    # judged against its own row's scale, so a level with a coefficient contrast of 1e40 keeps its weak rows
    # (judged against the largest m_ii, they were taken for round-off of zero and given no correction)
    s = np.where(d > 0, 1.0 / np.sqrt(np.where(d > 0, d, 1.0)), 0.0)
    c, piv, rank, _ = lapack.dpstrf(s[:, None] * M * s[None, :], tol=COARSE_NULL_RTOL * n, lower=1)
    if rank == 0:
        return X, 0
    order = piv[:rank] - 1                              # LAPACK's pivots count from 1
    # (L11 L11^T)^-1, its lower triangle (L11's pivots are all above the tolerance: it is invertible)
    inv, _ = lapack.dpotri(np.tril(c[:rank, :rank]), lower=1)
    inv = np.tril(inv) + np.tril(inv, -1).T
    X[np.ix_(order, order)] = s[order, None] * inv * s[None, order]
    return X, int(rank)
