"""Multigrid preconditioners for the one CG of :mod:`hpcsolve.fem.linalg.cg`: geometric ("mg") and algebraic ("amg").

A hierarchy is a list of levels ``A_0 = A, A_1 = R_0 A_0 P_0, ...`` (Galerkin coarse operators, R = P^T)
and a coarsest level solved directly (its dense inverse, applied as one matrix-vector product on the
device). A coarsest level that is singular or only semidefinite (a Neumann problem's constants, an
aggregate whose candidates vanish) gets a generalized inverse instead (:func:`coarse_inverse`, a
pivoted Cholesky factorization that stops at the level's rank): the correction is exact on the
level's range. The two kinds differ only in where the prolongations P come from:

- ``mg``: nested structured meshes (the rectangle and Cook's-membrane generators number their nodes
  on an (nx+1) x (ny+1) grid). P is P1 interpolation from the grid with half the cells: a fine node
  takes the mean of the two coarse nodes at the ends of the coarse edge it halves (the (/) diagonal
  included), a node that is also coarse takes its value. P is built on the free DOFs only: a coarse
  node that is fixed (Dirichlet) on the fine level is fixed on the coarse one, so the correction is
  zero there and Dirichlet rows stay consistent on every level. Several components per node
  (elasticity) interpolate componentwise. When the grid cannot be halved any more (odd cells) and the
  level is still above ``coarse_size``, the remaining levels are aggregation (pyamg).
- ``amg``: smoothed aggregation (``amg = "sa"``, with a near-null space such as the rigid-body modes)
  or classical Ruge-Stueben (``"rs"``) from pyamg, for any SPD matrix (file meshes, the
  ``hpcsolve.fem.solve`` API). A level on which the strength threshold (``strength``) leaves no
  connection to aggregate or coarsen along cannot be coarsened: it becomes the coarsest level
  (solved directly), and where it is too large for that, the set-up raises a CaseError naming
  ``strength``.

The V-cycle (``Multigrid.apply``) is written once over the backend's low ops (``csr_apply``,
``mg_smooth``): on each level ``degree`` Chebyshev (or damped-Jacobi) smoothing steps with the Jacobi
diagonal, the residual, the restriction, recursion, the prolongation added, ``degree`` smoothing
steps again. Every step is SpMV-like, launched on the backend's stream without allocation or
synchronization, so a block of preconditioned CG iterations is captured into one CUDA graph as the
unpreconditioned ones are. The pre- and post-smoother are the same polynomial in D^-1 A, so the
V-cycle is symmetric in exact arithmetic; in float32 or 16-bit storage it is only nearly so, and the
outer iteration is flexible CG by default (``flexible``), whose beta = -z.Aq / p.Aq does not assume a
symmetric M. ``symmetry_defect`` measures |x.My - y.Mx| / (|x| |My|) of the actual hierarchy.

Hierarchy precision (``hierarchy``): "fp64", "fp32" (the default: a preconditioner only has to be
approximately right) or "fp16" (16-bit storage of the level operators, rows scaled to a unit diagonal,
float32 arithmetic). The outer CG converges on the float64 true residual in every case.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, fields

import numpy as np
import scipy.sparse as sp

from hpcsolve.core.backends import get_array_module
from hpcsolve.core.errors import CaseError
from hpcsolve.fem.linalg.lowops import LevelCSR
from hpcsolve.fem.linalg.precond.base import Preconditioner

F64 = np.dtype(np.float64)
F32 = np.dtype(np.float32)
F16 = np.dtype(np.float16)

KINDS = ("mg", "amg")
HIERARCHIES = {"fp64": (F64, F64), "fp32": (F32, F32), "fp16": (F16, F32)}   # name: (storage, compute)
SMOOTHERS = ("chebyshev", "jacobi")
AMG_METHODS = ("sa", "rs")
DENSE_COARSE_MAX = 5000     # rows of the coarsest level (solved by its dense inverse: 200 MB in float64)
COARSE_NULL_RTOL = 100 * np.finfo(np.float64).eps   # x rows x max diagonal: a pivot of the coarsest level's
                            # Cholesky factorization below this is round-off of zero (a singular level)
LEVEL_FORMATS = ("auto", "dia", "csr")
HOST_BUILD_ROWS = 1 << 12   # a level this small is built on the host: on a GPU its set-up is launches, not work
HOST_PRODUCTS_ROWS = 1 << 17  # a hierarchy built on the host (Numba) runs its probe products on the host below this
DIA_MAX_DIAGONALS = 32      # "auto" stores a level by diagonals when it has at most this many distinct offsets
                            # and that reads no more bytes than CSR (values + column indices)


@dataclass
class MGOptions:
    """Options of the multigrid preconditioners (docs/fem_solvers.md, case section ``[solve.multigrid]``)."""

    hierarchy: str = "fp32"        # precision of the level operators and V-cycle vectors: fp64 | fp32 | fp16
    smoother: str = "chebyshev"    # chebyshev | jacobi (damped, weight jacobi_weight / lambda_max(D^-1 A))
    degree: int = 2                # smoothing steps before and after the coarse correction (Chebyshev degree)
    coarse_size: int = 400         # a level with at most this many unknowns is solved directly (dense inverse)
    max_levels: int = 30
    amg: str = "sa"                # aggregation of "amg" (and below the geometric levels): sa | rs
    strength: float = 0.0          # pyamg strength threshold (sa: symmetric, 0 = pyamg's default; rs: classical 0.25)
    cheby_lower: float = 0.3       # Chebyshev interval [cheby_lower, 1.1] x lambda_max(D^-1 A)
    jacobi_weight: float = 4.0 / 3.0  # damped Jacobi: omega = jacobi_weight / lambda_max
    power_iterations: int = 15     # power iterations estimating lambda_max(D^-1 A) per level
    flexible: bool = True          # outer flexible CG (beta = -z.Aq / p.Aq); False: standard PCG beta
    level_format: str = "auto"     # dia: levels with few diagonals (structured grids) stored by diagonals, the
                                   # others CSR | csr | auto: dia on the GPU, csr on the CPU (SciPy's CSR product)

    CHOICES = {"hierarchy": tuple(HIERARCHIES), "smoother": SMOOTHERS, "amg": AMG_METHODS,
               "level_format": LEVEL_FORMATS}
    INTEGERS = {"degree": (1, 10), "coarse_size": (1, 5_000), "max_levels": (2, 60), "power_iterations": (2, 200)}

    def __post_init__(self):
        for name, allowed in self.CHOICES.items():
            v = getattr(self, name)
            if not isinstance(v, str) or v.lower() not in allowed:
                raise CaseError.invalid(f"multigrid.{name}", v, ", ".join(allowed))
            setattr(self, name, v.lower())
        for name, (lo, hi) in self.INTEGERS.items():
            v = getattr(self, name)
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or not lo <= v <= hi:
                raise CaseError.invalid(f"multigrid.{name}", v, f"an integer in [{lo}, {hi}]")
            setattr(self, name, int(v))
        for name, lo, hi in (("strength", 0.0, 1.0), ("cheby_lower", 1e-3, 0.9), ("jacobi_weight", 0.1, 2.0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not lo <= v <= hi:
                raise CaseError.invalid(f"multigrid.{name}", v, f"a number in [{lo:g}, {hi:g}]")
            setattr(self, name, float(v))
        if not isinstance(self.flexible, (bool, np.bool_)):
            raise CaseError.invalid("multigrid.flexible", self.flexible, "true or false")
        self.flexible = bool(self.flexible)

    @classmethod
    def from_dict(cls, d: dict | None, field_name: str = "multigrid") -> "MGOptions":
        if d is not None and not isinstance(d, dict):
            raise CaseError.invalid(field_name, d, "a dict of multigrid options (e.g. {'hierarchy': 'fp16'}) or "
                                    "a hpcsolve.fem.linalg.precond.multigrid.MGOptions")
        d = dict(d or {})
        known = {f.name for f in fields(cls)}
        for k in d:
            if k not in known:
                raise CaseError.invalid(f"{field_name}.{k}", d[k], ", ".join(sorted(known)), why="unknown multigrid option")
        return cls(**d)

    def key(self) -> tuple:
        return tuple(getattr(self, f.name) for f in fields(self) if f.name != "flexible")


@dataclass
class StructuredGrid:
    """How the unknowns of a matrix sit on a structured (nx+1) x (ny+1) node grid (row-major, x fastest),
    ``ncomp`` unknowns per node (interleaved), only the DOFs ``free`` (indices into the full DOF list,
    increasing) kept in the matrix."""

    nx: int
    ny: int
    free: object = None     # None: every node off the boundary (Dirichlet all round); NumPy or CuPy array
    ncomp: int = 1

    def __post_init__(self):
        if self.free is not None and not hasattr(self.free, "__cuda_array_interface__"):
            self.free = np.asarray(self.free, dtype=np.int64)
        self.nx, self.ny, self.ncomp = int(self.nx), int(self.ny), int(self.ncomp)

    def free_array(self, xp=np):
        """The free DOFs as an int64 array of ``xp``."""
        if self.free is None:
            nx, ny, nc = self.nx, self.ny, self.ncomp
            j, i = xp.divmod(xp.arange((nx - 1) * (ny - 1), dtype=xp.int64), nx - 1)
            node = (j + 1) * (nx + 1) + (i + 1)
            return (node[:, None] * nc + xp.arange(nc, dtype=xp.int64)[None, :]).ravel()
        if xp is np:
            return np.asarray(_host(self.free), dtype=np.int64)
        return xp.asarray(self.free, dtype=xp.int64)

    @property
    def n_full(self) -> int:
        return (self.nx + 1) * (self.ny + 1) * self.ncomp

    def halvable(self) -> bool:
        return self.nx % 2 == 0 and self.ny % 2 == 0 and self.nx >= 2 and self.ny >= 2


# --------------------------------------------------------------------------- building a hierarchy
class _Phases:
    """Wall seconds of the set-up's phases (the device synchronized at each phase's end), summed by name."""

    def __init__(self, low):
        self.low, self.seconds, self._t = low, {}, time.perf_counter()

    def done(self, name: str) -> None:
        self.low.sync()
        t = time.perf_counter()
        self.seconds[name] = self.seconds.get(name, 0.0) + (t - self._t)
        self._t = t


def geometric_prolongation(grid: StructuredGrid, xp=np, sparse=sp):
    """(P, coarse grid, coarse index): P1 interpolation from the grid with half the cells, restricted to the
    free DOFs (rows: the free DOFs, columns: the coarse free DOFs) as a CSR matrix of ``sparse``, built row by
    row without sorting (every fine DOF has at most two coarse parents); the coarse index maps a coarse
    full DOF to its free index (-1: fixed)."""
    nx, ny, nc = grid.nx, grid.ny, grid.ncomp
    cx, cy = nx // 2, ny // 2
    it = _index_dtype(grid.n_full, xp)             # int32 index arithmetic where it fits: half the traffic
    free = grid.free_array(xp).astype(it, copy=False)
    node, comp = free // nc, free % nc
    i, j = node % (nx + 1), node // (nx + 1)
    i0, j0 = i // 2, j // 2
    i1, j1 = i0 + (i & 1), j0 + (j & 1)        # odd-odd: the (/) diagonal's far end
    # coarse DOF (I, J, c) sits on fine DOF (2I, 2J, c); it is free where that one is free
    fine_free = xp.zeros((ny + 1) * (nx + 1) * nc, dtype=xp.bool_)
    fine_free[free] = True
    cJ, cI = xp.divmod(xp.arange((cx + 1) * (cy + 1), dtype=it), cx + 1)
    cnode_fine = 2 * cJ * (nx + 1) + 2 * cI
    cfree_mask = fine_free[(cnode_fine[:, None] * nc + xp.arange(nc, dtype=it)[None, :]).ravel()]
    cfree = xp.flatnonzero(cfree_mask)
    cindex = xp.full(cfree_mask.size, -1, dtype=it)
    cindex[cfree] = xp.arange(cfree.size, dtype=it)
    ca = cindex[(j0 * (cx + 1) + i0) * nc + comp]
    cb = cindex[(j1 * (cx + 1) + i1) * nc + comp]
    same = ca == cb
    lo, hi = xp.minimum(ca, cb), xp.maximum(ca, cb)
    cols = xp.stack([lo, hi], axis=1)
    vals = xp.stack([xp.where(same, 1.0, 0.5), xp.full(lo.shape, 0.5)], axis=1)
    mask = xp.stack([lo >= 0, (hi >= 0) & ~same], axis=1)
    indptr = xp.zeros(free.size + 1, dtype=xp.int64)
    indptr[1:] = xp.cumsum(mask.sum(axis=1))
    P = sparse.csr_matrix((vals[mask], cols[mask].astype(xp.int32), indptr.astype(xp.int32)),
                          shape=(int(free.size), int(cfree.size)))
    return P, StructuredGrid(cx, cy, cfree, nc), cindex


def _index_dtype(n_full: int, xp):
    """int32 for index arithmetic on a grid of n_full DOFs (every product stays below n_full), else int64."""
    return xp.int32 if n_full < 2**31 - 1 else xp.int64


def coarse_rows_in_fine(grid: StructuredGrid, coarse: StructuredGrid, xp=np):
    """For each free coarse DOF (I, J, c), the row of the fine free DOF (2I, 2J, c) it sits on."""
    nc = grid.ncomp
    free = grid.free_array(xp)
    index = xp.full(grid.n_full, -1, dtype=xp.int64)
    index[free] = xp.arange(free.size, dtype=xp.int64)
    cfree = coarse.free_array(xp)
    node, comp = cfree // nc, cfree % nc
    ci, cj = node % (coarse.nx + 1), node // (coarse.nx + 1)
    return index[(2 * cj * (grid.nx + 1) + 2 * ci) * nc + comp]


def galerkin_by_probing(low, A, P, R, coarse: StructuredGrid, cindex, xp=np, sparse=sp):
    """R A P on a structured coarse grid from 9 x ncomp products with probe vectors.

    With P1 interpolation on the (/)-triangulated grid, a coarse DOF couples only with the DOFs of its
    3 x 3 coarse neighbourhood (its hexagon, in fact), so colouring the coarse nodes by (I mod 3, J mod 3)
    separates every row's neighbours: y = R A P v, with v the indicator of one colour and component,
    holds in row I the entry of the one neighbour of that colour. The products run on the device
    (``csr_apply``); the coarse CSR is assembled by index arithmetic. Exact zeros are dropped.
    A, P, R: float64 CSR matrices of ``sparse``."""
    nc = coarse.ncomp
    cx = coarse.nx
    it = _index_dtype(coarse.n_full, xp)
    free = coarse.free_array(xp).astype(it, copy=False)
    n_c, n_f = int(free.size), A.shape[0]
    node, comp = free // nc, free % nc
    ci, cj = node % (cx + 1), node // (cx + 1)
    color = (ci % 3) + 3 * (cj % 3)
    dA_, dP, dR = (_level64(low, M, xp) for M in (A, P, R))
    pv, apv, y = low.zeros(n_f, F64), low.zeros(n_f, F64), low.zeros(n_c, F64)
    Y = []
    for c in range(9):
        for b in range(nc):
            v = ((color == c) & (comp == b)).astype(xp.float64)
            low.csr_apply(dP, _dev(low, v, xp), pv)
            low.csr_apply(dA_, pv, apv)
            low.csr_apply(dR, apv, y)
            Y.append(_from_dev(low, y, xp).copy())
    Y = xp.stack(Y)                                     # (9 nc, n_c)
    rows = xp.arange(n_c, dtype=it)
    off = [(di, dj, b) for dj in (-1, 0, 1) for di in (-1, 0, 1) for b in range(nc)]
    di = xp.asarray([o[0] for o in off], dtype=it)[None, :]
    dj = xp.asarray([o[1] for o in off], dtype=it)[None, :]
    bb = xp.asarray([o[2] for o in off], dtype=it)[None, :]
    ni, nj = ci[:, None] + di, cj[:, None] + dj
    inside = (ni >= 0) & (ni <= cx) & (nj >= 0) & (nj <= coarse.ny)
    nnode = xp.where(inside, nj * (cx + 1) + ni, 0)
    cols = xp.where(inside, cindex[nnode * nc + bb], -1)
    ncolor = (ni % 3) + 3 * (nj % 3)
    vals = Y[ncolor * nc + bb, rows[:, None]]
    mask = (cols >= 0) & (vals != 0)
    indptr = xp.zeros(n_c + 1, dtype=xp.int64)
    indptr[1:] = xp.cumsum(mask.sum(axis=1))
    return sparse.csr_matrix((vals[mask], cols[mask].astype(xp.int32, copy=False), indptr.astype(xp.int32)), shape=(n_c, n_c))


def _level64(low, M, xp) -> LevelCSR:
    return LevelCSR(M.shape[0], M.shape[1], _dev(low, M.indptr.astype(xp.int32), xp),
                    _dev(low, M.indices.astype(xp.int32), xp), _dev(low, M.data.astype(xp.float64), xp), F64)


def _dev(low, a, xp):
    """An array of ``xp`` (NumPy or CuPy) as an array of ``low``."""
    if low.owns(xp):
        return a
    return low.to_device(_host(a))


def _from_dev(low, a, xp):
    if low.owns(xp):
        return a
    return low.to_host(a)


def _host(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)


def _canonical(M, sparse):
    """CSR with sorted indices, no duplicates and int32 index arrays."""
    M = M.tocsr()
    M.sum_duplicates()
    if not M.has_sorted_indices:
        M.sort_indices()
    if M.indices.dtype != np.int32:
        M = sparse.csr_matrix((M.data, M.indices.astype(np.int32), M.indptr.astype(np.int32)), shape=M.shape)
    return M


def _pyamg_levels(A_host: sp.csr_matrix, opts: MGOptions, near_nullspace=None, max_levels: int = 30):
    """[(A_l, P_l), ...] and the coarsest A of an aggregation hierarchy (host, SciPy): smoothed aggregation
    (:func:`_sa_levels`, pyamg's pieces) or pyamg's Ruge-Stueben. Either stops early (the coarsest level still
    above ``coarse_size`` with levels to spare) where the strength threshold leaves nothing to coarsen along."""
    try:
        import pyamg
    except ImportError as exc:      # pragma: no cover - pyamg is a dependency
        raise CaseError.invalid("preconditioner", "amg", "none, jacobi, mg",
                                why=f"algebraic multigrid needs pyamg ({exc})") from None
    if opts.amg == "sa":
        return _sa_levels(A_host, opts, near_nullspace, max_levels)
    # pyamg's own smoothers are not set up: the V-cycle brings its own (about a fifth of pyamg's set-up time)
    ml = pyamg.ruge_stuben_solver(A_host, max_coarse=opts.coarse_size, max_levels=max_levels, keep=False,
                                  presmoother=None, postsmoother=None,
                                  strength=("classical", {"theta": opts.strength or 0.25}))
    pairs = [(lvl.A, lvl.P) for lvl in ml.levels[:-1]]
    return pairs, ml.levels[-1].A


SA_OMEGA = 4.0 / 3.0          # prolongation smoothing P = (I - omega / rho(D^-1 A) D^-1 A) T, pyamg's default
SA_LANCZOS_STEPS = 20


def _sa_levels(A: sp.csr_matrix, opts: MGOptions, B=None, max_levels: int = 30):
    """Smoothed aggregation as pyamg's ``smoothed_aggregation_solver`` builds it by default (symmetric strength,
    standard aggregation, candidates improved by 4 symmetric block Gauss-Seidel sweeps on the finest level,
    tentative prolongator by ``fit_candidates``, one Jacobi smoothing step with omega 4/3 over rho(D^-1 A),
    Galerkin coarse operators), with pyamg's own pieces, except rho: pyamg estimates it by restarted Arnoldi
    (5 x 15 steps, most of its set-up time); D^-1 A is similar to the symmetric D^-1/2 A D^-1/2, so
    :func:`_rho_dinv_a` takes 20 Lanczos steps instead."""
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
            # coarsest (``Multigrid._build`` names the strength where it is too large to solve directly)
            break
        if not pairs:                 # pyamg's default improve_candidates (finest level only)
            zero = np.zeros((A.shape[0], 1))
            B = relaxation_as_linear_operator(("block_gauss_seidel", {"sweep": "symmetric", "iterations": 4}),
                                              A, zero) @ B
        T, Bc = fit_candidates(agg, B)
        T = sp.csr_matrix(T)
        d = A.diagonal()
        dinv = np.where(d != 0, 1.0 / np.where(d != 0, d, 1.0), 0.0)
        rho = _rho_dinv_a(A, dinv)
        P = sp.csr_matrix(T - sp.diags((SA_OMEGA / rho) * dinv) @ (A @ T))
        if P.shape[1] == 0 or P.shape[1] >= A.shape[0]:
            break
        pairs.append((A, P))
        A = sp.csr_matrix(P.T @ A @ P)
        A.sum_duplicates()
        B = Bc
    return pairs, A


def _rho_dinv_a(A: sp.csr_matrix, dinv: np.ndarray, steps: int = SA_LANCZOS_STEPS, seed: int = 0) -> float:
    """The spectral radius of D^-1 A (A SPD): the largest Ritz value of ``steps`` Lanczos steps on the similar
    S = D^-1/2 A D^-1/2 (no reorthogonalization: lost orthogonality only repeats converged Ritz values); small
    matrices exactly. Ritz values lie inside the spectrum, so this never overestimates."""
    n = A.shape[0]
    s = np.sqrt(np.maximum(dinv, 0.0))
    if n <= 4 * steps:
        S = s[:, None] * A.toarray() * s[None, :]
        return float(np.max(np.abs(np.linalg.eigvalsh(0.5 * (S + S.T))))) if n else 1.0
    v = np.random.default_rng(seed).standard_normal(n)
    v /= np.linalg.norm(v)
    v_prev = np.zeros(n)
    alpha, beta = [], []
    b = 0.0
    for _ in range(steps):
        w = s * (A @ (s * v))
        a = float(v @ w)
        w -= a * v + b * v_prev
        alpha.append(a)
        b = float(np.linalg.norm(w))
        if not b > 1e-12 * abs(a):
            break
        beta.append(b)
        v_prev, v = v, w / b
    k = len(alpha)
    Tk = np.diag(alpha) + np.diag(beta[:k - 1], 1) + np.diag(beta[:k - 1], -1)
    return float(np.max(np.abs(np.linalg.eigvalsh(Tk))))


@dataclass
class Level:
    A: LevelCSR                      # the level operator (storage precision)
    dinv: object                     # 1 / diag(A_l) in the compute dtype
    P: LevelCSR | None = None        # to the next level (None on the coarsest)
    R: LevelCSR | None = None
    lam: float = float("nan")        # lambda_max(D^-1 A_l) estimate
    coefs: list = field(default_factory=list)   # smoothing steps [(c_d, c_r), ...]
    kind: str = "geometric"          # geometric | aggregation | coarse
    bufs: dict = field(default_factory=dict)    # b, x0, x1, d, r (compute dtype)


class Multigrid(Preconditioner):
    """A V-cycle preconditioner (see the module docstring). ``kind`` "mg" needs ``grid`` (a
    :class:`StructuredGrid`); ``near_nullspace`` (n x k, host) is smoothed aggregation's B (e.g. rigid-body
    modes of elasticity). ``field``: the name of the options in the set-up's errors ("multigrid", the
    argument of ``hpcsolve.fem.solve``; "solve.multigrid", a case's section)."""

    identity = False
    block = 8              # CG iterations per block at most (each costs a V-cycle; the host checks between)

    def __init__(self, kind: str = "amg", options: "MGOptions | dict | None" = None, *, grid: StructuredGrid | None = None,
                 near_nullspace=None, field: str = "multigrid"):
        if not isinstance(kind, str) or kind.lower() not in KINDS:
            raise CaseError.invalid("preconditioner", kind, ", ".join(KINDS))
        self.kind = self.name = kind.lower()
        self.field = field
        self.options = options if isinstance(options, MGOptions) else MGOptions.from_dict(options, field)
        self.grid = grid
        self.near_nullspace = near_nullspace
        if self.kind == "mg" and grid is None:
            raise CaseError.invalid("preconditioner", "mg", "amg (any matrix), or mg with a structured grid",
                                    why="geometric multigrid needs the structured mesh behind the matrix (the rectangle "
                                        "and cook_membrane generators give it); pass "
                                        "hpcsolve.fem.linalg.precond.multigrid.Multigrid('mg', grid=StructuredGrid(nx, ny, free)) "
                                        "or use preconditioner='amg'")
        self.flexible = self.options.flexible
        self.levels: list[Level] = []
        self.coarse: LevelCSR | None = None
        self.setup_time_s = 0.0
        self.setup_phases_s: dict[str, float] = {}
        self.symmetry_defect = float("nan")
        self.symmetry_check_s = 0.0
        self.cycles = 0
        self.level_time_s: list[float] = []
        self._A = None
        self._scale = 1.0
        self._coarse_rank = 0
        self.coarsening = ""

    # ---- set-up
    def setup(self, A) -> None:
        """Build the hierarchy on A's device (kept on A for later solves with the same options)."""
        # the cached entry holds the grid and near-null space themselves: a hit must be for these very objects
        key = self._key = ("multigrid", self.kind, self.options.key())     # one hierarchy per kind and options
        hit = A.cache.get(key)
        if hit is not None and hit["_grid"] is self.grid and hit["_nns"] is self.near_nullspace:
            self.__dict__.update({k: v for k, v in hit.items() if not k.startswith("_grid") and k != "_nns"})
            return
        self._check_grid(A)
        if hit is not None:           # another grid or near-null space: the old hierarchy and its engines go
            old = Multigrid.__new__(Multigrid)
            old.__dict__.update(hit, _key=key)
            old.release(A)
        t0 = time.perf_counter()
        self._A = A
        with A.low.context():       # CuPy set-up work on the stream of the kernels it feeds (no races)
            self._build(A)
        A.low.sync()
        self.setup_time_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.symmetry_defect = self._symmetry_defect()       # a diagnostic, timed apart from the set-up
        self.symmetry_check_s = time.perf_counter() - t0
        A.cache[key] = {k: self.__dict__[k] for k in ("levels", "coarse", "setup_time_s", "setup_phases_s",
                                                      "symmetry_defect", "_A",
                                                      "level_time_s", "symmetry_check_s", "_scale",
                                                      "_coarse_rows", "_coarse_nnz", "_coarse_rank", "_coarse_b",
                                                      "_coarse_x", "coarsening")}
        A.cache[key].update(_grid=self.grid, _nns=self.near_nullspace)

    def _check_grid(self, A) -> None:
        """The grid (and near-null space) must describe A's unknowns; a CaseError names what does not fit."""
        if self.near_nullspace is not None:
            B = np.asarray(self.near_nullspace)
            if B.ndim != 2 or B.shape[0] != A.n or not np.all(np.isfinite(B)):
                raise CaseError.invalid("near_nullspace", f"shape {B.shape}", f"a finite ({A.n}, k) array",
                                        why="one row per unknown of the matrix")
        if self.kind != "mg":
            return
        g = self.grid
        if g.nx < 1 or g.ny < 1 or g.ncomp < 1:
            raise CaseError.invalid("grid", (g.nx, g.ny, g.ncomp), "nx, ny, ncomp >= 1")
        n = (g.nx - 1) * (g.ny - 1) * g.ncomp if g.free is None else int(np.size(g.free))
        top = g.n_full - 1 if g.free is None else int(_host(g.free).max(initial=-1))
        if n != A.n or top >= g.n_full:
            raise CaseError.invalid("grid", f"{g.nx} x {g.ny} cells, {g.ncomp} per node, {n} free unknowns",
                                    f"a grid whose free unknowns are the {A.n} rows of the matrix",
                                    why="geometric multigrid interpolates on this grid")

    def _build(self, A) -> None:
        low = A.low
        opts = self.options
        storage, compute = HIERARCHIES[opts.hierarchy]
        xp, sparse = low.sparse_modules()
        ph = _Phases(low)
        # a matrix outside [1e-20, 1e20] is built as A / s, s a power of two near max a_ii, so that float32 and
        # 16-bit levels hold any matrix float64 can (M(A) = M(A / s) / s: apply() scales z back)
        d = A.max_diag
        self._scale = 2.0 ** round(math.log2(d)) if d > 0 and math.isfinite(d) and not 1e-20 <= d <= 1e20 else 1.0
        inv_s = 1.0 / self._scale
        if xp is np:
            cur = A.to_scipy() if not low.host_resident else sp.csr_matrix((A.vals[F64], A.indices, A.indptr), shape=A.shape)
        else:
            cur = sparse.csr_matrix((A.vals[F64], A.indices, A.indptr), shape=A.shape)
        if self._scale != 1.0:
            cur = cur * inv_s             # a new matrix; A itself is untouched
        nns = None if self.near_nullspace is None else np.asarray(self.near_nullspace, dtype=np.float64)
        ph.done("matrix")
        mats: list = []       # (A_l, P_l, kind) in float64, SciPy or CuPy sparse
        grid = self.grid if self.kind == "mg" else None
        plow = low            # where the Galerkin products run
        while grid is not None and grid.halvable() and cur.shape[0] > opts.coarse_size \
                and len(mats) < opts.max_levels - 1:
            small = HOST_BUILD_ROWS if xp is not np else HOST_PRODUCTS_ROWS
            if cur.shape[0] <= small and not plow.host_resident:     # the small levels: on the host
                from hpcsolve.fem.linalg.kernels_numpy_low import low_ops

                xp, sparse, plow = np, sp, low_ops()
                cur = _host_csr(cur)
                grid = StructuredGrid(grid.nx, grid.ny, None if grid.free is None else _host(grid.free), grid.ncomp)
            P, cgrid, cindex = geometric_prolongation(grid, xp, sparse)
            if P.shape[1] == 0 or P.shape[1] >= P.shape[0]:
                break
            if nns is not None:           # coarse DOFs are fine DOFs (2I, 2J): the near-null space by injection
                nns = nns[_host(coarse_rows_in_fine(grid, cgrid, xp))]
            R = P.T.tocsr()
            mats.append((cur, P, "geometric", R))
            ph.done("prolongation")
            cur = galerkin_by_probing(plow, cur, P, R, cgrid, cindex, xp, sparse)
            ph.done("galerkin")
            grid = cgrid
        if cur.shape[0] > opts.coarse_size and len(mats) < opts.max_levels - 1:
            # aggregation from here on (pyamg, host); the near-null space applies on the finest level only
            pairs, cur = _pyamg_levels(_host_csr(cur), opts, nns, opts.max_levels - len(mats))
            for Al, Pl in pairs:
                Al, Pl = _canonical(sp.csr_matrix(Al), sp), _canonical(sp.csr_matrix(Pl), sp)
                if xp is not np:
                    Al, Pl = sparse.csr_matrix(Al), sparse.csr_matrix(Pl)
                mats.append((Al, Pl, "aggregation", None))
            ph.done("aggregation")
        self.levels = []
        fmt = opts.level_format if opts.level_format != "auto" else ("csr" if low.host_resident else "dia")
        for l, (Al, Pl, kind, Rl) in enumerate(mats):
            dia = _dia_layout(Al, storage) if fmt == "dia" else None
            ph.done("dia layout")
            if l == 0 and storage == compute and self._scale == 1.0 and dia is None:   # the solve's own arrays
                op = LevelCSR(A.n, A.n, A.indptr, A.indices, A.ensure(compute), compute)
            else:
                op = self._upload(low, Al, storage, compute, scaled=storage == F16, dia_layout=dia)
            lvl = Level(A=op, dinv=self._dinv(low, Al, compute), kind=kind)
            ph.done("operators")
            lvl.P = self._upload(low, Pl, compute, compute)
            # a geometric R = P^T came from a transpose (sorted, no duplicates); an aggregation one is made here
            lvl.R = self._upload(low, Rl if Rl is not None else _canonical(Pl.T.tocsr(), sparse), compute, compute)
            self.levels.append(lvl)
            ph.done("transfers")
        # the coarsening stopped above coarse_size with levels to spare: aggregation found nothing to coarsen the
        # last level along. That level is the coarsest, solved directly (the report says why it is so large), or,
        # beyond a dense solve, a CaseError naming the strength threshold
        stalled = cur.shape[0] > opts.coarse_size and len(mats) < opts.max_levels - 1
        self.coarsening = self._stall_note(cur.shape[0], len(mats)) if stalled else ""
        if cur.shape[0] > DENSE_COARSE_MAX:
            why = f"the coarsest level has {cur.shape[0]:,} unknowns, more than the {DENSE_COARSE_MAX:,} a dense " \
                  "direct solve takes"
            if stalled:
                raise CaseError.invalid(f"{self.field}.strength", opts.strength,
                                        "a lower strength threshold (0: pyamg's default), or the jacobi preconditioner "
                                        "for a matrix with (nearly) no off-diagonal coupling",
                                        why=f"{self.coarsening}; {why}")
            raise CaseError.invalid(f"{self.field}.max_levels", opts.max_levels,
                                    "more levels (or a larger mesh coarsening)", why=why)
        # coarsest: dense (generalized) inverse (float64 on the host, stored in the compute dtype)
        Ac = _host_csr(cur)
        inv, self._coarse_rank = coarse_inverse(Ac.toarray())
        self.coarse = self._dense(low, inv, compute)
        self._coarse_rows, self._coarse_nnz = Ac.shape[0], Ac.nnz
        ph.done("coarse inverse")
        for lvl in self.levels:
            self._alloc(low, lvl, compute)
        self._coarse_b = low.zeros(self._coarse_rows, compute)
        self._coarse_x = low.zeros(self._coarse_rows, compute)
        ph.done("buffers")
        for lvl, (Al, *_) in zip(self.levels, mats):
            lvl.lam = self._lambda_max(low, lvl, compute) if Al.shape[0] > HOST_BUILD_ROWS else self._lambda_max_host(Al)
            lvl.coefs = self._smoother_coefficients(lvl.lam)
        ph.done("lambda_max")
        self.setup_phases_s = ph.seconds

    def _stall_note(self, rows: int, level: int) -> str:
        """Why aggregation left level ``level`` (``rows`` unknowns) uncoarsened: no connection as strong as the
        strength threshold (every node isolated, or too few aggregates to shrink the level)."""
        opts = self.options
        theta = opts.strength if opts.amg == "sa" else (opts.strength or 0.25)     # rs: 0 means pyamg's 0.25
        rule = "smoothed aggregation" if opts.amg == "sa" else "Ruge-Stueben coarsening"
        return (f"{rule} could not coarsen level {level} ({rows:,} unknowns) with strength threshold {theta:g} "
                f"({self.field}.strength): too few connections that strong; it is the coarsest level, solved directly")

    @staticmethod
    def _dense(low, M: np.ndarray, compute) -> LevelCSR:
        """A dense matrix as a LevelCSR (every entry stored)."""
        rows, cols = M.shape
        indptr = (np.arange(rows + 1, dtype=np.int64) * cols).astype(np.int32)
        indices = np.tile(np.arange(cols, dtype=np.int32), rows)
        return LevelCSR(rows, cols, low.to_device(indptr), low.to_device(indices),
                        low.to_device(M.ravel().astype(compute)), compute)

    @staticmethod
    def _upload(low, M, storage, compute, scaled: bool = False, dia_layout=None) -> LevelCSR:
        """M on the device as CSR, or by diagonals with ``dia_layout`` (what :func:`_dia_layout` found)."""
        rows, cols = M.shape
        data, indices, indptr = M.data, M.indices, M.indptr
        host = isinstance(data, np.ndarray)
        put = low.to_device if host else (lambda a: _convert(low, a))
        xp = np if host else _cupy()
        rowscale = None
        row = None
        if scaled:                     # rows scaled to a unit diagonal: no coefficient range over/underflows
            row = dia_layout[0] if dia_layout is not None else _entry_rows(M, xp)
            diag = M.diagonal()
            data = data / diag[row]
            rowscale = put(diag.astype(compute))
        if dia_layout is not None:     # by diagonals: vals[k rows + i] = a_{i, i + offsets[k]}
            row, off, offsets = dia_layout
            lo = int(offsets[0])
            slot = xp.zeros(int(offsets[-1]) - lo + 1, dtype=xp.int32)     # offset -> its diagonal
            slot[offsets - lo] = xp.arange(offsets.size, dtype=xp.int32)
            vals = xp.zeros((offsets.size, rows), dtype=storage)
            vals[slot[off - lo], row] = data.astype(storage)
            del slot
            return LevelCSR(rows, cols, None, None, put(vals.ravel()), compute, rowscale=rowscale,
                            offsets=put(offsets.astype(np.int32)), nnz=int(M.nnz))
        return LevelCSR(rows, cols, put(indptr.astype(np.int32)), put(indices.astype(np.int32)),
                        put(data.astype(storage)), compute, rowscale=rowscale)

    @staticmethod
    def _dinv(low, M, compute):
        d = M.diagonal()
        if isinstance(d, np.ndarray):
            with np.errstate(divide="ignore"):
                inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1.0), 0.0)
            return low.to_device(inv.astype(compute))
        import cupy

        inv = cupy.where(d > 0, 1.0 / cupy.where(d > 0, d, 1.0), 0.0)
        return _convert(low, inv.astype(compute))

    @staticmethod
    def _alloc(low, lvl: Level, compute):
        n = lvl.A.rows
        lvl.bufs = {k: low.zeros(n, compute) for k in ("b", "x0", "x1", "d", "r")}

    def _lambda_max(self, low, lvl: Level, compute) -> float:
        """lambda_max(D^-1 A) by power iteration on the device (float64 scalars; a few syncs)."""
        n = lvl.A.rows
        x = low.astype(self._start_vector(low, n), compute)       # a fixed rough start, made on the device
        y, t = lvl.bufs["r"], lvl.bufs["d"]
        ws = low.zeros(1, F64)
        lam = 0.0
        for _ in range(self.options.power_iterations):
            low.csr_apply(lvl.A, x, y)                                     # y = A x
            low.mg_smooth(lvl.A, x, y, lvl.dinv, t, x, 0.0, 1.0, True)     # x = t = D^-1 y
            low.fill_zero(ws)
            low.dot(x, x, ws, 0)
            nrm = math.sqrt(max(float(low.to_host(ws)[0]), 0.0))
            if not nrm > 0 or not math.isfinite(nrm):
                break
            lam = nrm
            low.scale_copy(x, t, 1.0 / nrm)
            low.scale_copy(t, x, 1.0)
        return float(lam)

    def _lambda_max_host(self, M) -> float:
        """lambda_max(D^-1 M) of a small level: the power iteration of :meth:`_lambda_max` in float64 on the host
        (on a GPU, a small level's iterations cost their launches and synchronizations, not their work)."""
        M = _host_csr(M)
        d = M.diagonal()
        with np.errstate(divide="ignore"):
            dinv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1.0), 0.0)
        x = np.sin(np.arange(M.shape[0], dtype=np.float64) * 12.9898 + 78.233)
        lam = 0.0
        for _ in range(self.options.power_iterations):
            x = dinv * (M @ x)
            nrm = float(np.linalg.norm(x))
            if not nrm > 0 or not math.isfinite(nrm):
                break
            lam = nrm
            x /= nrm
        return lam

    @staticmethod
    def _start_vector(low, n: int, shift: float = 0.0):
        """sin(12.9898 i + 78.233 + 37.719 shift): deterministic, rough (every frequency present), built on
        the device (a host random vector of 16.7M entries cost 0.3 s of set-up)."""
        with low.context():
            xp, _ = low.sparse_modules()
            v = xp.sin(xp.arange(n, dtype=xp.float64) * 12.9898 + (78.233 + 37.719 * shift)).astype(F64)
        return _dev(low, v, xp)

    def _smoother_coefficients(self, lam: float) -> list:
        """[(c_d, c_r)] of ``degree`` steps: Chebyshev on [cheby_lower, 1.1] x lam (Saad's three-term
        recurrence, as PETSc and hypre), or damped Jacobi omega = jacobi_weight / lam."""
        opts = self.options
        if not lam > 0:
            lam = 2.0
        if opts.smoother == "jacobi":
            w = opts.jacobi_weight / lam
            return [(0.0, w)] * opts.degree
        up = 1.1 * lam
        lo = opts.cheby_lower * up
        theta, delta = 0.5 * (up + lo), 0.5 * (up - lo)
        sigma = theta / delta
        rho = 1.0 / sigma
        coefs = [(0.0, 1.0 / theta)]
        for _ in range(opts.degree - 1):
            rho_new = 1.0 / (2.0 * sigma - rho)
            coefs.append((rho_new * rho, 2.0 * rho_new / delta))
            rho = rho_new
        return coefs

    def release(self, A) -> None:
        """Forget the hierarchy kept on A (its device memory is freed with the last reference)."""
        A.cache.pop(getattr(self, "_key", None), None)
        for k in [k for k, v in A.cache.items() if isinstance(k, tuple) and k[:1] == ("cg-engine",)
                  and getattr(v.precond, "levels", None) is self.levels]:
            del A.cache[k]          # the CG engines (and graphs) built around this hierarchy
        self.levels, self.coarse, self._A = [], None, None

    # ---- the V-cycle
    def _smooth(self, low, lvl: Level, first: bool, cur: int) -> int:
        """The smoothing steps; the iterate moves between x0 and x1; returns where it is."""
        B = lvl.bufs
        for step, (c_d, c_r) in enumerate(lvl.coefs):
            src, dst = B[f"x{cur}"], B[f"x{1 - cur}"]
            if first and step == 0:
                low.mg_smooth(lvl.A, src, B["b"], lvl.dinv, B["d"], B["x0"], c_d, c_r, True)
                cur = 0
                continue
            low.mg_smooth(lvl.A, src, B["b"], lvl.dinv, B["d"], dst, c_d, c_r, False)
            cur = 1 - cur
        return cur

    def _cycle(self, low, l: int, recurse: bool = True) -> None:
        """x of level l ~ A_l^-1 b_l (b_l in lvl.bufs['b']); the result ends in x1 (degree steps each side).
        ``recurse`` False: this level's work only, the next level's x as it stands (``time_levels``)."""
        if l == len(self.levels):
            low.csr_apply(self.coarse, self._coarse_b, self._coarse_x)
            return
        lvl = self.levels[l]
        B = lvl.bufs
        cur = self._smooth(low, lvl, True, 0)
        x = B[f"x{cur}"]
        low.csr_apply(lvl.A, x, B["r"], -1.0, B["b"], 1.0)                    # r = b - A x
        nb = self._coarse_b if l + 1 == len(self.levels) else self.levels[l + 1].bufs["b"]
        low.csr_apply(lvl.R, B["r"], nb)                                    # b_{l+1} = R r
        if recurse:
            self._cycle(low, l + 1)
        nx = self._coarse_x if l + 1 == len(self.levels) else self.levels[l + 1].bufs[f"x{self._final}"]
        low.csr_apply(lvl.P, nx, x, 1.0, x, 1.0)                            # x += P x_{l+1}
        cur = self._smooth(low, lvl, False, cur)
        if cur != self._final:
            low.scale_copy(B[f"x{cur}"], B[f"x{self._final}"], 1.0)

    @property
    def _final(self) -> int:
        return (2 * len(self.levels[0].coefs) - 1) % 2 if self.levels else 1

    def apply(self, low, A, r, z, ws, i_rz) -> None:
        """z = M^-1 r (one V-cycle) and ws[i_rz] += r.z; launches only (graph-capturable)."""
        if not self.levels:
            low.scale_copy(r, self._coarse_b, 1.0)
            low.csr_apply(self.coarse, self._coarse_b, self._coarse_x)
            low.scale_copy(self._coarse_x, z, 1.0 / self._scale)
        else:
            top = self.levels[0].bufs
            low.scale_copy(r, top["b"], 1.0)
            self._cycle(low, 0)
            low.scale_copy(top[f"x{self._final}"], z, 1.0 / self._scale)
        if i_rz >= 0:
            low.dot(r, z, ws, i_rz)

    # ---- what the report shows
    def _symmetry_defect(self) -> float:
        """|x.My - y.Mx| / (|x| |My|) for two random vectors, in the hierarchy's precision (float64 sums)."""
        A = self._A
        low = A.low
        x, y = self._start_vector(low, A.n, 0.0), self._start_vector(low, A.n, 1.0)   # made on the device
        mx, my = low.zeros(A.n, F64), low.zeros(A.n, F64)
        ws = low.zeros(4, F64)
        self.apply(low, A, x, mx, ws, -1)
        self.apply(low, A, y, my, ws, -1)
        low.dot(x, my, ws, 0)
        low.dot(y, mx, ws, 1)
        low.dot(x, x, ws, 2)
        low.dot(my, my, ws, 3)
        h = low.to_host(ws)
        den = math.sqrt(max(h[2], 0.0) * max(h[3], 0.0))
        return abs(h[0] - h[1]) / den if den > 0 else float("nan")

    def time_levels(self, repeat: int = 5, replays: int = 10) -> list[float]:
        """Median device time of one V-cycle's work on each level (smoothing, residual, transfers), and the
        coarse solve last. Where the backend records CUDA graphs, each level's work is captured into a graph and
        timed over ``replays`` replays, as it runs inside a solve; otherwise its launches are timed one by one."""
        A = self._A
        low = A.low
        out = []
        for l in range(len(self.levels) + 1):        # the last: the coarse solve
            work = (lambda l=l: self._cycle(low, l, recurse=False))
            work()                                   # compiled and warm before any capture
            graph = low.capture(work) if low.graphs else None
            run, per = (graph, replays) if graph is not None else (work, 1)
            ts = []
            for _ in range(repeat):
                with low.timer() as t:
                    for _ in range(per):
                        run()
                ts.append(t.seconds / per)
            out.append(float(np.median(ts)))
        self.level_time_s = out
        return out

    def info(self) -> dict:
        """Levels, complexities, set-up time, precision: what SolveReport.preconditioner_info holds."""
        rows = [lvl.A.rows for lvl in self.levels] + [self._coarse_rows]
        nnz = [lvl.A.nnz for lvl in self.levels] + [self._coarse_nnz]
        return {
            "kind": self.kind, "hierarchy": self.options.hierarchy, "smoother": self.options.smoother,
            "degree": self.options.degree, "amg": self.options.amg if (self.kind == "amg" or any(
                lvl.kind == "aggregation" for lvl in self.levels)) else "",
            "levels": len(rows), "rows": rows, "nnz": nnz,
            "level_kinds": [lvl.kind for lvl in self.levels] + ["direct"],
            # the coarsest level's numerical rank: below its rows where it is singular (coarse_inverse)
            "coarse_rank": self._coarse_rank,
            "coarsening": self.coarsening,     # why the coarsest level is above coarse_size ("": it is not)
            "level_formats": [lvl.A.format for lvl in self.levels] + ["dense"],
            "operator_complexity": float(sum(nnz) / nnz[0]) if nnz and nnz[0] else float("nan"),
            "grid_complexity": float(sum(rows) / rows[0]) if rows and rows[0] else float("nan"),
            "lambda_max": [lvl.lam for lvl in self.levels],
            "setup_time_s": self.setup_time_s, "setup_phases_s": dict(self.setup_phases_s), "cycles": self.cycles,
            "flexible": self.flexible, "symmetry_defect": self.symmetry_defect,
            "symmetry_check_s": self.symmetry_check_s,
            "level_time_s": list(self.level_time_s),
        }


def coarse_inverse(M: np.ndarray) -> tuple[np.ndarray, int]:
    """(X, rank): the inverse of the coarsest level M (dense, symmetric) and its numerical rank; where M is singular
    or only semidefinite (a Neumann problem's constants, a level aggregation could not coarsen well), X is a
    symmetric generalized inverse instead of the LinAlgError (or 1e16-sized entries) of inverting it.

    One Cholesky factorization with pivoting (LAPACK dpstrf, as cheap as an unpivoted one) stops where every pivot
    left is round-off of zero (<= COARSE_NULL_RTOL x rows x max m_ii): P^T M P = [L11; L21] [L11^T L21^T] with
    L11 of the rank r. X = P diag((L11 L11^T)^-1, 0) P^T: M X r = r for every r in M's range (the coarse problem of
    a consistent system is solved exactly) and X is semidefinite (an indefinite M, which the outer CG reports,
    contributes only its definite part). A definite M has r = rows and X = M^-1."""
    import scipy.linalg.lapack as lapack

    n = M.shape[0]
    M = 0.5 * (M + M.T)
    scale = float(np.max(np.diag(M))) if n else 0.0
    X = np.zeros((n, n))
    if not scale > 0 or not math.isfinite(scale):
        return X, 0                                     # nothing positive to invert: no correction
    c, piv, rank, _ = lapack.dpstrf(M, tol=COARSE_NULL_RTOL * n * scale, lower=1)
    if rank == 0:
        return X, 0
    order = piv[:rank] - 1                              # LAPACK's pivots count from 1
    # (L11 L11^T)^-1, its lower triangle (L11's pivots are all above the tolerance: it is invertible)
    inv, _ = lapack.dpotri(np.tril(c[:rank, :rank]), lower=1)
    inv = np.tril(inv) + np.tril(inv, -1).T
    X[np.ix_(order, order)] = inv
    return X, int(rank)


def _cupy():
    import cupy

    return cupy


def _entry_rows(M, xp):
    """The row of every stored entry of CSR M, in the order of its data (int32: a level's n < 2^31)."""
    return M.tocoo().row.astype(xp.int32)


def _dia_layout(M, storage):
    """(entry rows, entry offsets j - i, the distinct offsets ascending) of square M where storing it by
    diagonals pays: at most DIA_MAX_DIAGONALS offsets, and ndiag values per row read no more bytes than CSR's
    nnz / rows values and column indices; else None."""
    rows, cols = M.shape
    if rows != cols or rows == 0 or M.nnz == 0:
        return None
    xp = np if isinstance(M.data, np.ndarray) else _cupy()
    row = _entry_rows(M, xp)
    off = M.indices.astype(xp.int32, copy=False) - row
    offsets = _distinct(off, xp)
    s = np.dtype(storage).itemsize
    if offsets.size > DIA_MAX_DIAGONALS or offsets.size * rows * s > M.nnz * (s + 4):
        return None
    return row, off, offsets


def _distinct(off, xp):
    """The distinct values of int32 ``off``, ascending: those of a sample of about 2^20 entries, checked against
    every entry through a lookup table (no sort of every entry, no writes to a few shared addresses); the
    unique of all entries when the sample missed one."""
    step = max(1, off.size >> 20)
    cand = xp.unique(off[::step]) if step > 1 else xp.unique(off)
    if step == 1:
        return cand
    lo, hi = int(off.min()), int(off.max())
    if hi - lo >= 1 << 24 or int(cand[0]) != lo or int(cand[-1]) != hi:
        return xp.unique(off)
    known = xp.zeros(hi - lo + 1, dtype=xp.bool_)
    known[cand - lo] = True
    return cand if bool(known[off - lo].all()) else xp.unique(off)


def _convert(low, a):
    """A CuPy array as an array of ``low`` (the same device memory)."""
    if low.owns(get_array_module(a)):
        return a
    return low.to_device(_host(a))


def _host_csr(M) -> sp.csr_matrix:
    """A SciPy copy of a SciPy or CuPy sparse matrix."""
    if isinstance(M, sp.spmatrix) or isinstance(M, getattr(sp, "sparray", ())):
        return sp.csr_matrix(M)
    return M.get().tocsr()


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
