"""The algebraic levels of a multigrid hierarchy: the builders of "amg" (:class:`AggregationBuilder` picks
:class:`PyamgBuilder` or ``sa_device.DeviceSABuilder``) and pyamg's pieces they use.

- :func:`pyamg_levels`: smoothed aggregation (:func:`sa_levels`, pyamg's pieces with a Lanczos estimate of
  rho(D^-1 A), :func:`rho_dinv_a`) or pyamg's classical Ruge-Stueben, on the host, stopping early where the
  strength threshold leaves nothing to coarsen along;
- :func:`rigid_body_modes`: the near-null space of 2D elasticity that smoothed aggregation takes.
"""

from __future__ import annotations


import numpy as np
import scipy.sparse as sp

from hpcsolve.core.backends import get_array_module
from hpcsolve.core.errors import CaseError
from hpcsolve.fem.linalg.precond.hierarchy import Hierarchy, HierarchyBuilder
from hpcsolve.fem.linalg.precond.layout import canonical, host_csr
from hpcsolve.fem.linalg.precond.mg_options import DENSE_COARSENING, SLOW_COARSENING, MGOptions
from hpcsolve.fem.linalg.precond.sa_device import DeviceSABuilder, rho_dinv_a_xp

SA_OMEGA = 4.0 / 3.0          # prolongation smoothing P = (I - omega / rho(D^-1 A) D^-1 A) T, pyamg's default
SA_LANCZOS_STEPS = 20


class AggregationBuilder(HierarchyBuilder):
    """Algebraic multigrid ("amg", any SPD matrix): the levels by aggregation from the finest on. Smoothed
    aggregation is set up on the device (``sa_device.DeviceSABuilder``) with ``amg_setup = "device"``, or with
    "auto" where the backend's arrays have a sparse library (CuPy); otherwise, and for Ruge-Stueben, by pyamg's pieces
    on the host (:class:`PyamgBuilder`). Geometric multigrid picks its builder for the levels below its grids the
    same way."""

    algebraic = True

    @classmethod
    def choose(cls, options: MGOptions, xp) -> type[HierarchyBuilder]:
        where = options.amg_setup
        device = options.amg == "sa" and (where == "device" or (where == "auto" and xp is not np))
        return DeviceSABuilder if device else PyamgBuilder


class PyamgBuilder(AggregationBuilder):
    """Aggregation levels by pyamg's pieces on the host (:func:`pyamg_levels`), the CPU reference; level matrices and
    prolongations are moved to the backend's sparse module (CuPy) where the set-up runs there."""

    @classmethod
    def choose(cls, options: MGOptions, xp) -> type[HierarchyBuilder]:
        return cls

    def aggregate(self, A, h: Hierarchy, cur, nns, xp, sparse):
        opts = self.options
        h.amg_setup = "pyamg"
        rhos: list = []
        pairs, cur = pyamg_levels(host_csr(cur), opts, nns, opts.max_levels - len(self.mats), rhos=rhos)
        for l, (Al, Pl) in enumerate(pairs):
            if l < len(rhos):
                self.lambdas[len(self.mats)] = rhos[l]
            Al, Pl = canonical(sp.csr_matrix(Al), sp), canonical(sp.csr_matrix(Pl), sp)
            if xp is not np:
                Al, Pl = sparse.csr_matrix(Al), sparse.csr_matrix(Pl)
            self.mats.append((Al, Pl, "aggregation", None))
        return cur


def pyamg_levels(A_host: sp.csr_matrix, opts: MGOptions, near_nullspace=None, max_levels: int = 30,
                 rhos: list | None = None):
    """[(A_l, P_l), ...] and the coarsest A of an aggregation hierarchy (host, SciPy): smoothed aggregation
    (:func:`sa_levels`, pyamg's pieces) or pyamg's Ruge-Stueben. Either stops early (the coarsest level still
    above ``coarse_size`` with levels to spare) where the strength threshold leaves nothing to coarsen along.
    ``rhos`` (smoothed aggregation): a list that gets each level's rho(D^-1 A_l), as :func:`sa_levels` computes it."""
    try:
        import pyamg    # late: its import costs about 0.25 s (measured), and only aggregation needs it
    except ImportError as exc:      # pragma: no cover - pyamg is a dependency
        raise CaseError.invalid("preconditioner", "amg", "none, jacobi, mg",
                                why=f"algebraic multigrid needs pyamg ({exc})") from None
    if opts.amg == "sa":
        return sa_levels(A_host, opts, near_nullspace, max_levels, rhos=rhos)
    # pyamg's own smoothers are not set up: the V-cycle brings its own (about a fifth of pyamg's set-up time)
    ml = pyamg.ruge_stuben_solver(A_host, max_coarse=opts.coarse_size, max_levels=max_levels, keep=False,
                                  presmoother=None, postsmoother=None,
                                  strength=("classical", {"theta": opts.strength or 0.25}))
    pairs = [(lvl.A, lvl.P) for lvl in ml.levels[:-1]]
    return pairs, ml.levels[-1].A



def sa_levels(A: sp.csr_matrix, opts: MGOptions, B=None, max_levels: int = 30, rhos: list | None = None):
    """Smoothed aggregation as pyamg's ``smoothed_aggregation_solver`` builds it by default (symmetric strength,
    standard aggregation, candidates improved by 4 symmetric block Gauss-Seidel sweeps on the finest level,
    tentative prolongator by ``fit_candidates``, one Jacobi smoothing step with omega 4/3 over rho(D^-1 A),
    Galerkin coarse operators), with pyamg's own pieces, except rho: pyamg estimates it by restarted Arnoldi
    (5 x 15 steps, most of its set-up time); D^-1 A is similar to the symmetric D^-1/2 A D^-1/2, so
    :func:`rho_dinv_a` takes 20 Lanczos steps instead."""
    from pyamg.relaxation.utils import relaxation_as_linear_operator   # late: pyamg's import costs about 0.25 s

    A = sp.csr_matrix(A)
    n = A.shape[0]
    B = np.ones((n, 1)) if B is None else np.asarray(B, dtype=np.float64).reshape(n, -1)
    pairs = []
    while len(pairs) < max_levels - 1 and A.shape[0] > opts.coarse_size:
        if not pairs:                 # pyamg's default improve_candidates (finest level only)
            zero = np.zeros((A.shape[0], 1))
            B = relaxation_as_linear_operator(("block_gauss_seidel", {"sweep": "symmetric", "iterations": 4}),
                                              A, zero) @ B
        theta = opts.strength_at(len(pairs), B.shape[1])
        level = _sa_level(A, B, theta)
        if theta > 0 and level is not None and too_coarse(level[1].shape[0], level[1].nnz, A):
            level = _sa_level(A, B, 0.0)          # too few strong connections: along every connection
        if level is None:
            # no connection is as strong as the threshold (every node isolated): pyamg then returns one empty
            # aggregate, whose coarse level would be a singular zero. This level cannot be coarsened: it is the
            # coarsest (the set-up names the strength where it is too large to solve directly)
            break
        P, Ac, Bc, rho = level
        if P.shape[1] == 0 or P.shape[1] >= A.shape[0]:
            break
        pairs.append((A, P))
        if rhos is not None:
            rhos.append(rho)
        A, B = Ac, Bc
    return pairs, A


def _sa_level(A: sp.csr_matrix, B: np.ndarray, theta: float):
    """(P, A_c = P^T A P, the coarse candidates, rho(D^-1 A)) of one smoothed-aggregation level at strength threshold
    ``theta``, or None where no connection is that strong."""
    from pyamg.aggregation.aggregate import standard_aggregation      # late: pyamg's import costs about 0.25 s
    from pyamg.aggregation.tentative import fit_candidates             # late: pyamg's import costs about 0.25 s
    from pyamg.strength import symmetric_strength_of_connection        # late: pyamg's import costs about 0.25 s

    agg, roots = standard_aggregation(symmetric_strength_of_connection(A, theta=theta))
    if len(roots) == 0:
        return None
    T, Bc = fit_candidates(agg, B)
    T = sp.csr_matrix(T)
    d = A.diagonal()
    dinv = np.where(d != 0, 1.0 / np.where(d != 0, d, 1.0), 0.0)
    rho = rho_dinv_a(A, dinv)
    P = sp.csr_matrix(T - sp.diags((SA_OMEGA / rho) * dinv) @ (A @ T))
    Ac = sp.csr_matrix(P.T @ A @ P)
    Ac.sum_duplicates()
    return P, Ac, Bc, rho


def too_coarse(coarse_rows: int, coarse_nnz: int, A) -> bool:
    """Whether a level aggregated at a strength threshold should be aggregated again along every connection: its
    coarse level keeps more than ``SLOW_COARSENING`` of the rows, or has more than ``DENSE_COARSENING`` times the
    nonzeros of A (the aggregates too small for their candidates)."""
    return coarse_rows > SLOW_COARSENING * A.shape[0] or coarse_nnz > DENSE_COARSENING * A.nnz


def rho_dinv_a(A: sp.csr_matrix, dinv: np.ndarray, steps: int = SA_LANCZOS_STEPS, seed: int = 0) -> float:
    """The spectral radius of D^-1 A (A SPD): the largest Ritz value of ``steps`` Lanczos steps on the similar
    S = D^-1/2 A D^-1/2 (no reorthogonalization: lost orthogonality only repeats converged Ritz values); small
    matrices exactly. Ritz values lie inside the spectrum, so this never overestimates. The Lanczos of the device
    set-up (``sa_device.rho_dinv_a_xp``) with NumPy."""
    return rho_dinv_a_xp(A, dinv, np, steps=steps, seed=seed)


def rigid_body_modes(points: np.ndarray, free: np.ndarray | None = None) -> np.ndarray:
    """Near-null space of elasticity (interleaved DOFs: component c of node i is DOF d i + c) on the free DOFs (all
    where ``free`` is None): in 2D the two translations and the rotation (3 columns), in 3D three translations and
    three rotations (6), the rotations about the points' centroid; array-module generic (NumPy or CuPy points)."""
    xp = get_array_module(points)
    n, d = points.shape
    c = points - points.mean(axis=0)
    B = xp.zeros((d * n, 3 if d == 2 else 6))
    for k in range(d):
        B[k::d, k] = 1.0
    if d == 2:
        B[0::2, 2], B[1::2, 2] = -c[:, 1], c[:, 0]
    else:
        for j, (a, b) in enumerate(((0, 1), (1, 2), (2, 0))):   # rotation in the (a, b) plane: u_a = -x_b, u_b = x_a
            B[a::3, 3 + j], B[b::3, 3 + j] = -c[:, b], c[:, a]
    return B if free is None else B[xp.asarray(free)]
