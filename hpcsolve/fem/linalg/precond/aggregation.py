"""The algebraic levels (pyamg) and the coarsest level of a multigrid hierarchy.

- :func:`pyamg_levels`: smoothed aggregation (:func:`sa_levels`, pyamg's pieces with a Lanczos estimate of
  rho(D^-1 A), :func:`rho_dinv_a`) or pyamg's classical Ruge-Stueben, on the host, stopping early where the
  strength threshold leaves nothing to coarsen along; :func:`rigid_body_modes`, the near-null space of 2D elasticity
  that smoothed aggregation takes.
- :func:`coarse_inverse`: the dense (generalized) inverse that solves the coarsest level.
"""

from __future__ import annotations


import numpy as np
import scipy.sparse as sp

from hpcsolve.core.errors import CaseError
from hpcsolve.fem.linalg.precond.mg_options import MGOptions
from hpcsolve.fem.linalg.precond.sa_device import rho_dinv_a_xp

DENSE_COARSE_MAX = 5000     # rows of the coarsest level (solved by its dense inverse: 200 MB in float64)
COARSE_NULL_RTOL = 100 * np.finfo(np.float64).eps   # x rows: a pivot of the coarsest level's Cholesky factorization
                            # (unit diagonal) below this is round-off of zero (a singular level)

SA_OMEGA = 4.0 / 3.0          # prolongation smoothing P = (I - omega / rho(D^-1 A) D^-1 A) T, pyamg's default
SA_LANCZOS_STEPS = 20


def pyamg_levels(A_host: sp.csr_matrix, opts: MGOptions, near_nullspace=None, max_levels: int = 30):
    """[(A_l, P_l), ...] and the coarsest A of an aggregation hierarchy (host, SciPy): smoothed aggregation
    (:func:`sa_levels`, pyamg's pieces) or pyamg's Ruge-Stueben. Either stops early (the coarsest level still
    above ``coarse_size`` with levels to spare) where the strength threshold leaves nothing to coarsen along."""
    try:
        import pyamg    # late: its import costs about 0.25 s (measured), and only aggregation needs it
    except ImportError as exc:      # pragma: no cover - pyamg is a dependency
        raise CaseError.invalid("preconditioner", "amg", "none, jacobi, mg",
                                why=f"algebraic multigrid needs pyamg ({exc})") from None
    if opts.amg == "sa":
        return sa_levels(A_host, opts, near_nullspace, max_levels)
    # pyamg's own smoothers are not set up: the V-cycle brings its own (about a fifth of pyamg's set-up time)
    ml = pyamg.ruge_stuben_solver(A_host, max_coarse=opts.coarse_size, max_levels=max_levels, keep=False,
                                  presmoother=None, postsmoother=None,
                                  strength=("classical", {"theta": opts.strength or 0.25}))
    pairs = [(lvl.A, lvl.P) for lvl in ml.levels[:-1]]
    return pairs, ml.levels[-1].A



def sa_levels(A: sp.csr_matrix, opts: MGOptions, B=None, max_levels: int = 30):
    """Smoothed aggregation as pyamg's ``smoothed_aggregation_solver`` builds it by default (symmetric strength,
    standard aggregation, candidates improved by 4 symmetric block Gauss-Seidel sweeps on the finest level,
    tentative prolongator by ``fit_candidates``, one Jacobi smoothing step with omega 4/3 over rho(D^-1 A),
    Galerkin coarse operators), with pyamg's own pieces, except rho: pyamg estimates it by restarted Arnoldi
    (5 x 15 steps, most of its set-up time); D^-1 A is similar to the symmetric D^-1/2 A D^-1/2, so
    :func:`rho_dinv_a` takes 20 Lanczos steps instead."""
    # late, as in pyamg_levels: pyamg's import costs about 0.25 s (measured)
    from pyamg.aggregation.aggregate import standard_aggregation
    from pyamg.aggregation.tentative import fit_candidates
    from pyamg.relaxation.utils import relaxation_as_linear_operator
    from pyamg.strength import symmetric_strength_of_connection

    A = sp.csr_matrix(A)
    n = A.shape[0]
    B = np.ones((n, 1)) if B is None else np.asarray(B, dtype=np.float64).reshape(n, -1)
    pairs = []
    while len(pairs) < max_levels - 1 and A.shape[0] > opts.coarse_size:
        C = symmetric_strength_of_connection(A, theta=opts.strength)
        agg, roots = standard_aggregation(C)
        if len(roots) == 0:
            # no connection is as strong as the threshold (every node isolated): pyamg then returns one empty
            # aggregate, whose coarse level would be a singular zero. This level cannot be coarsened: it is the
            # coarsest (the set-up names the strength where it is too large to solve directly)
            break
        if not pairs:                 # pyamg's default improve_candidates (finest level only)
            zero = np.zeros((A.shape[0], 1))
            B = relaxation_as_linear_operator(("block_gauss_seidel", {"sweep": "symmetric", "iterations": 4}),
                                              A, zero) @ B
        T, Bc = fit_candidates(agg, B)
        T = sp.csr_matrix(T)
        d = A.diagonal()
        dinv = np.where(d != 0, 1.0 / np.where(d != 0, d, 1.0), 0.0)
        rho = rho_dinv_a(A, dinv)
        P = sp.csr_matrix(T - sp.diags((SA_OMEGA / rho) * dinv) @ (A @ T))
        if P.shape[1] == 0 or P.shape[1] >= A.shape[0]:
            break
        pairs.append((A, P))
        A = sp.csr_matrix(P.T @ A @ P)
        A.sum_duplicates()
        B = Bc
    return pairs, A


def rho_dinv_a(A: sp.csr_matrix, dinv: np.ndarray, steps: int = SA_LANCZOS_STEPS, seed: int = 0) -> float:
    """The spectral radius of D^-1 A (A SPD): the largest Ritz value of ``steps`` Lanczos steps on the similar
    S = D^-1/2 A D^-1/2 (no reorthogonalization: lost orthogonality only repeats converged Ritz values); small
    matrices exactly. Ritz values lie inside the spectrum, so this never overestimates. The Lanczos of the device
    set-up (``sa_device.rho_dinv_a_xp``) with NumPy."""
    return rho_dinv_a_xp(A, dinv, np, steps=steps, seed=seed)


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


def rigid_body_modes(points: np.ndarray, free: np.ndarray) -> np.ndarray:
    """Near-null space of 2D elasticity (interleaved DOFs): two translations and the rotation, on the free DOFs."""
    x, y = points[:, 0], points[:, 1]
    n = len(points)
    B = np.zeros((2 * n, 3))
    B[0::2, 0] = 1.0
    B[1::2, 1] = 1.0
    B[0::2, 2] = -(y - y.mean())
    B[1::2, 2] = x - x.mean()
    return B[np.asarray(free)]
