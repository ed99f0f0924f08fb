"""Conjugate gradients and mixed-precision refinement, written once over the low ops of a backend.

Methods (``method=`` in :func:`hpcsolve.fem.solve`):

- ``cg`` / ``pcg-jacobi``: (preconditioned) CG wholly in the working precision (fp64 or fp32). When
  the recursive residual meets rtol, the float64 true residual decides; in fp32 it usually misses
  (the attainable accuracy is about kappa * u_32) and the solve stops once the true residual has
  stopped improving (``stall_checks``).
- ``cg-reliable``: CG with reliable updates (van der Vorst & Ye 2000; QUDA's mixed CG). float32
  recurrences accumulate a partial solution y; when a replacement is due (``reliable_criterion``),
  x64 += y, the true residual b - A x64 is computed in float64 and substituted, y = 0, and the
  search direction is kept (``reliable_p``). Falls back to float64 CG when the true residual stops
  improving (``ReplacementWatch``); promotes the recurrences to float64 (keeping x, p and the Krylov
  space) when the Lanczos kappa estimate says float32 cannot reduce the residual (``kappa_limit``).
- ``ir-restarted``: restarted iterative refinement. Residual and update in float64; the correction
  solves A d = r with float32 CG to an adaptive inner tolerance (``RefinementWatch``). Falls back to
  float64 CG on stagnation, divergence or after ``max_outer`` steps, as MAGMA's dsposv.

Every method runs on :class:`CGEngine`: a block of k iterations is three fused kernels per iteration
(SpMV + p.Ap, r update + r.r, x and p update; alpha and beta computed inside the kernels from
scalars in device memory), captured once into a CUDA graph where the backend has graphs and
replayed; the host looks once per block (k = ``check_every``, smaller near convergence) and takes
every decision there. "Converged" always means the float64 true residual met rtol. A preconditioner
(:mod:`hpcsolve.fem.linalg.precond`) is fused into the kernels (diagonal) or applied between them (general).
Bytes per iteration: :func:`bytes_per_iteration`; docs/fem_gpu.md.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, fields

import numpy as np

from hpcsolve.core.errors import CaseError
from hpcsolve.fem.linalg.report import SolveReport

MIXED_METHODS = ("ir-restarted", "cg-reliable")
PLAIN_METHODS = ("cg", "pcg-jacobi")
F64 = np.dtype(np.float64)
F32 = np.dtype(np.float32)
U32 = 2.0 ** -24
MAX_BLOCK = 10_000
FIRST_SHORT_BLOCK = 4  # ... and before the rate is known, blocks of this many iterations
SHORT_WINDOW = 1e-5    # cg-reliable with a V-cycle: replace once the recursive residual fell this far


# --------------------------------------------------------------------------- options
@dataclass
class CGOptions:
    """The options of every method and backend, with one set of defaults (docs/fem_solvers.md)."""

    rtol: float = 1e-8             # target on the float64 true relative residual ||b - A x|| / ||b||
    maxiter: int = 10_000          # total Krylov iterations (float32 + float64); solve() defaults to 10 n
    check_every: int = 64          # k: iterations per block (one CUDA graph); the host decides once per block
    true_every: int = 0            # also record the float64 true residual every N iterations (0: at decisions)
    stall_checks: int = 3          # fp32 CG: true-residual checks without a 10% improvement -> stalled
    # ir-restarted
    inner_rtol: float = 1e-4       # smallest inner tolerance asked of float32 CG (it adapts upward)
    max_outer: int = 30            # refinement steps before falling back to float64 CG (MAGMA dsposv)
    stagnation: float = 0.9        # an outer step that reduces the true residual by less than this stagnates
    # cg-reliable
    reliable_criterion: str = "vdvye"  # when to replace: "vdvye" (rounding estimate, van der Vorst & Ye) | "delta" (QUDA)
    reliable_delta: float = 0.1    # "delta": replace when the residual has fallen by this factor since the last one
    reliable_patience: int = 8     # replacements without halving the best true residual -> fall back to float64
    reliable_p: str = "correct"    # p at a replacement: "correct" p += M^-1 (r_true - r_rec) | "keep" | "rebeta"
    accumulate: str = "replace"    # fold y into x64: "replace" (at replacements) | "block" (every block) | "fp64"
    kappa_limit: float = 1.0 / U32  # promote to float64 recurrences above this Lanczos kappa estimate (0: never);
    #                                kappa u32 > 1: float32 recurrences cannot reduce the residual (measured on
    #                                the H200 at 4096^2, kappa 6.8e6: promoting at 3e6 cost 1.02x fp64's time,
    #                                staying in float32 0.73x)
    kappa_min_iterations: int = 256  # first kappa check; then at doublings of the iteration count

    CHOICES = {"reliable_criterion": ("vdvye", "delta"), "reliable_p": ("correct", "keep", "rebeta"),
               "accumulate": ("replace", "block", "fp64")}
    INTEGERS = {"maxiter": 1, "check_every": 1, "true_every": 0, "stall_checks": 1, "max_outer": 1,
                "reliable_patience": 1, "kappa_min_iterations": 1}     # name: smallest value
    FRACTIONS = ("rtol", "inner_rtol", "stagnation", "reliable_delta")  # numbers in (0, 1)

    def __post_init__(self):
        for name, low in self.INTEGERS.items():
            value = getattr(self, name)
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < low:
                raise CaseError.invalid(name, value, f"an integer >= {low}")
            setattr(self, name, int(value))
        if self.check_every > MAX_BLOCK:
            raise CaseError.invalid("check_every", self.check_every, f"an integer in [1, {MAX_BLOCK}]")
        for name in self.FRACTIONS:
            value = getattr(self, name)
            if not _real(value) or not 0 < value < 1:
                raise CaseError.invalid(name, value, "a number in (0, 1)")
            setattr(self, name, float(value))
        if not _real(self.kappa_limit) or math.isnan(self.kappa_limit) or self.kappa_limit < 0:
            raise CaseError.invalid("kappa_limit", self.kappa_limit, "a number >= 0 (0 or inf: never promote)")
        self.kappa_limit = float(self.kappa_limit)
        for name, allowed in self.CHOICES.items():
            value = getattr(self, name)
            if not isinstance(value, str) or value not in allowed:
                raise CaseError.invalid(name, value, ", ".join(allowed))

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


def _real(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


# --------------------------------------------------------------------------- decisions
class Breakdown(Exception):
    """kind: "indefinite" (p.Ap <= 0: the matrix is not SPD) or "nonfinite" (overflow / NaN)."""

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
    from scipy.linalg import eigvalsh_tridiagonal

    try:
        lo = eigvalsh_tridiagonal(diag, off, select="i", select_range=(0, 0))[0]
        hi = eigvalsh_tridiagonal(diag, off, select="i", select_range=(m - 1, m - 1))[0]
    except Exception:  # LAPACK failure on a pathological T
        return nan
    return float(lo), float(hi)


def bytes_per_iteration(n: int, nnz: int, dtype, jacobi: bool = False, matrix_free: bool = False) -> int:
    """Device-memory bytes one fused CG iteration moves (each array read or written once).

    spmv_dot: values nnz*s + indices nnz*4 + indptr (n+1)*4 + p n*s + q n*s   (p gathers hit L1/L2)
    update_r: r, q read, r written: 3 n s         update_xp: x, p, r read, x, p written: 5 n s
    Jacobi adds dinv in both updates: 2 n s. Scalars (a few doubles) are not counted.
    """
    s = np.dtype(dtype).itemsize
    spmv = 2 * n * s if matrix_free else nnz * (s + 4) + (n + 1) * 4 + 2 * n * s
    return spmv + 3 * n * s + 5 * n * s + (2 * n * s if jacobi else 0)


# --------------------------------------------------------------------------- the engine
class CGEngine:
    """(P)CG recurrences in one working precision, in blocks of k <= K iterations.

    Scalar slots (float64, device): rho[0..K] (r.z), pq[0..K-1], rr[0..K] (r.r); without a
    preconditioner rho aliases rr. Iteration j of a block reads rho[j], pq[j] and writes pq[j],
    rho[j+1], rr[j+1]; ``block_end`` carries rho[k], rr[k] into slot 0.
    """

    def __init__(self, A, dtype, precond, K: int = 64, x=None):
        low = A.low
        self.low, self.A, self.dtype, self.K = low, A, np.dtype(dtype), K
        A.ensure(self.dtype)
        n = A.n
        self.x = x if x is not None else low.zeros(n, self.dtype)
        self.r = low.zeros(n, self.dtype)
        self.p = low.zeros(n, self.dtype)
        self.q = low.zeros(n, self.dtype)
        self.ws = low.zeros(4 * K + 2, F64)
        self.scratch = low.zeros(1, F64)     # a slot for reductions nobody reads
        self.PQ = K + 1
        self.RR = 2 * K + 1
        self.ZQ = 3 * K + 2                  # flexible CG: z_{j+1}.q_j
        self.RHO = self.RR if precond.identity else 0
        self.precond = precond
        self.dinv = precond.diagonal(A, self.dtype)                       # fused into the kernels
        self.dinv64 = precond.diagonal(A, F64) if self.dinv is not None else None
        self.general = None if precond.identity or self.dinv is not None else precond
        self.z = low.zeros(n, self.dtype) if self.general is not None else None
        self.flexible = self.general is not None and bool(getattr(precond, "flexible", False))
        self._graphs = {}
        self.iterations = 0
        self.alpha: list[float] = []
        self.beta: list[float] = []
        self.rho_host = 0.0

    def reset(self, zero_x: bool) -> None:
        """Forget a previous solve (the vectors, and the graphs that use them, are kept)."""
        self.iterations = 0
        self.alpha, self.beta = [], []
        self.rho_host = 0.0
        if zero_x:
            self.low.fill_zero(self.x)

    # -- state
    def _read_slots(self) -> float:
        h = self.low.to_host(self.ws)
        self.rho_host = float(h[self.RHO])
        return float(h[self.RR])

    def start_from_r(self) -> float:
        """p = M^-1 r, rho = r.z, rr = r.r from the residual already in self.r; returns r.r (syncs)."""
        low = self.low
        if self.general is not None:      # a V-cycle is ~100 launches: replayed as one graph, as the blocks are
            def start():
                low.fill_zero(self.ws)
                self.general.apply(low, self.A, self.r, self.z, self.ws, self.RHO)
                low.scale_copy(self.z, self.p, 1.0)
                low.dot(self.r, self.r, self.ws, self.RR)

            self._replay("start", start)
            self.general.cycles += 1
        else:
            low.fill_zero(self.ws)
            low.precondition_init(self.r, self.p, self.dinv, self.ws, self.RHO, self.RR)
        return self._read_slots()

    def set_residual_from(self, x64, b64, precondition: bool = True) -> float:
        """r = b - A64 x64 (float64, stored in dtype), rho/rr slots reset; returns r.r (syncs).
        ``precondition`` False: z = M^-1 r is not formed (``start_from_r`` follows and forms it)."""
        low = self.low
        low.fill_zero(self.ws)
        low.residual(self.A, x64, b64, self.r, self.dinv64, self.ws, self.RHO, self.RR)
        if self.general is not None and precondition:
            self.general.apply(low, self.A, self.r, self.z, self.ws, self.RHO)
            self.general.cycles += 1
        return self._read_slots()

    def replace_residual(self, x64, b64) -> float:
        """Reliable update: r = b - A64 x64 and p += M^-1 (r_true - r_rec), as if p had been formed from the
        true residual (p = z_true + beta p_old); returns r.r (syncs)."""
        low = self.low
        if self.general is None:
            low.fill_zero(self.ws)
            low.replace_residual(self.A, x64, b64, self.r, self.p, self.dinv64, self.ws, self.RHO, self.RR)
            return self._read_slots()
        low.axpy((-1, -1, -1.0), self.apply_m(self.r, self.z), self.p, self.scratch)
        rr = self.set_residual_from(x64, b64)          # z = M^-1 r_true
        low.axpy((-1, -1, 1.0), self.z, self.p, self.scratch)
        return rr

    def apply_m(self, r, out):
        """The vector holding M^-1 r: ``out`` (written) with a preconditioner, r itself without."""
        if self.dinv is not None:
            self.low.precondition(self.dinv, r, out, self.scratch, 0)
            return out
        if self.general is not None:
            self.general.apply(self.low, self.A, r, out, self.scratch, 0)
            self.general.cycles += 1
            return out
        return r

    # -- the iteration
    def _launch_block(self, k):
        low, ws, A = self.low, self.ws, self.A
        low.block_start(ws, self.RHO, self.PQ, self.RR, self.K)
        if self.flexible:
            low.block_start(ws, self.ZQ - 1, self.ZQ, self.ZQ - 1, self.K)     # zq[0..K-1] = 0
        for j in range(k):
            rho, pq, rho1 = self.RHO + j, self.PQ + j, self.RHO + j + 1
            low.spmv_dot(A, self.p, self.q, ws, pq)
            if self.general is None:
                low.update_r(self.r, self.q, self.dinv, ws, rho, pq, rho1, self.RR + j + 1)
                low.update_xp(self.x, self.p, self.r, self.dinv, ws, rho, pq, (rho1, rho, 1.0))
            else:
                low.update_r(self.r, self.q, None, ws, rho, pq, -1, self.RR + j + 1)
                self.general.apply(low, A, self.r, self.z, ws, rho1)
                if self.flexible:     # Notay's flexible CG: beta = -z_{j+1}.q_j / p_j.q_j
                    low.dot(self.z, self.q, ws, self.ZQ + j)
                    beta = (self.ZQ + j, pq, -1.0)
                else:
                    beta = (rho1, rho, 1.0)
                low.update_xp(self.x, self.p, self.z, None, ws, rho, pq, beta)
        low.block_end(ws, self.RHO, self.RR, k)

    def launch(self, k):
        """Queue k iterations (graph replay when the backend has graphs); no synchronization."""
        self._replay(k, lambda: self._launch_block(k))
        self.iterations += k
        if self.general is not None:
            self.general.cycles += k

    def _replay(self, key, launches) -> None:
        """Queue what ``launches()`` launches: as a CUDA graph recorded at its first use (kept under ``key``)
        where the backend has graphs, else directly. Kernels compiled at their first launch (Numba) must not
        compile inside a capture (the capture would fail and the work would be launched one kernel at a time
        from then on): such a backend runs the work directly once and captures it at its next use."""
        g = self._graphs.get(key, False)
        if g is False and getattr(self.low, "compiles_lazily", False) and self.low.graphs:
            self._graphs[key] = "warm"
            g = None
        elif g is False or g == "warm":
            g = self._graphs[key] = self.low.capture(launches)
        if g is None:
            launches()
        else:
            g()

    def read(self, k) -> np.ndarray:
        """After launch(k): host copies of rr[1..k] (synchronizes); alpha/beta recorded; Breakdown raised
        at the first iteration with p.Ap <= 0 (indefinite) or a non-finite p.Ap / r.r."""
        h = self.low.to_host(self.ws)
        rho = np.concatenate([[self.rho_host], h[self.RHO + 1:self.RHO + k + 1]])
        pq = h[self.PQ:self.PQ + k]
        rr = h[self.RR + 1:self.RR + k + 1]
        first = len(self.alpha)
        with np.errstate(divide="ignore", invalid="ignore"):
            self.alpha.extend((rho[:-1] / pq).tolist())
            self.beta.extend((rho[1:] / rho[:-1]).tolist())
        self.rho_host = float(rho[-1])
        it0 = self.iterations - k
        bad_nf = np.flatnonzero(~np.isfinite(pq) | ~np.isfinite(rr))
        # p.Ap = 0 with r.z = 0 is the exact solution (the kernels then take alpha = 0), not a breakdown
        bad_ind = np.flatnonzero((pq < 0) | ((pq == 0) & (rho[:-1] != 0)))
        if bad_nf.size and (not bad_ind.size or bad_nf[0] < bad_ind[0]):
            i = int(bad_nf[0])
            self._keep_coefficients(first + i)
            raise Breakdown(it0 + i + 1, f"p.Ap = {pq[i]:.3e}, r.r = {rr[i]:.3e} at iteration {it0 + i + 1} "
                            f"(overflow or NaN in {self.dtype.name})", "nonfinite")
        if bad_ind.size:
            i = int(bad_ind[0])
            self._keep_coefficients(first + i)
            raise Breakdown(it0 + i + 1, f"p.Ap = {pq[i]:.3e} <= 0 at iteration {it0 + i + 1}: the matrix is not "
                            "symmetric positive definite (indefinite, or singular with an inconsistent "
                            "right-hand side)", "indefinite")
        return rr

    def _keep_coefficients(self, m: int) -> None:
        """Keep the kappa estimate of the valid coefficients only."""
        del self.alpha[m:], self.beta[m:]

    def kappa(self) -> float:
        return lanczos_kappa(self.alpha, self.beta)


# --------------------------------------------------------------------------- one solve
class _Run:
    """Shared state of one solve: the matrix, float64 b and x, options, histories, report."""

    def __init__(self, A, b64, bnorm: float, x64, opts: CGOptions, precond, report: SolveReport):
        self.A, self.low = A, A.low
        self.b, self.bnorm, self.x64 = b64, float(bnorm), x64
        self.opts, self.precond, self.report = opts, precond, report
        self.rec: list[float] = []
        self.true_its: list[int] = []
        self.true: list[float] = []
        self._r64 = self._tmp64 = None
        self._ws = self.low.zeros(2, F64)

    def engine(self, dtype, x=None) -> CGEngine:
        """A CGEngine for this solve. With a costly general preconditioner (``block``: a V-cycle) the engine
        is kept on the matrix and reused by later solves with the same preconditioner object: its vectors
        and so its captured CUDA graphs stay valid (capturing a block of V-cycles launches every kernel
        once from Python, which costs more than the solve on small grids)."""
        if not _short_block_of(self.precond):
            return CGEngine(self.A, dtype, self.precond, self.opts.check_every, x=x)
        # one engine per role on the matrix, replaced (and freed) when the hierarchy or x differs; reused, graphs
        # and all, by a preconditioner object sharing the same hierarchy (the same levels on the device)
        key = ("cg-engine", np.dtype(dtype), self.opts.check_every, x is not None)
        eng = self.A.cache.get(key)
        same = eng is not None and (eng.precond is self.precond or (
            getattr(eng.precond, "levels", None) is not None and eng.precond.levels is getattr(self.precond, "levels", ())
            and eng.precond.flexible == self.precond.flexible))
        if not same or (x is not None and eng.x is not x):
            self.A.cache.pop(key, None)
            eng = self.A.cache[key] = CGEngine(self.A, dtype, self.precond, self.opts.check_every, x=x)
        else:
            eng.precond = eng.general = self.precond          # cycles are counted on the caller's object
            eng.reset(zero_x=x is None)
        return eng

    def true_residual(self, x, plus=None) -> float:
        """||b - A (x + plus)|| / ||b|| in float64 (x, plus of any working precision)."""
        low = self.low
        if np.dtype(x.dtype) != F64 or plus is not None:
            if self._tmp64 is None:
                self._tmp64 = low.zeros(self.A.n, F64)
            low.scale_copy(x, self._tmp64, 1.0)
            if plus is not None:
                low.axpy((-1, -1, 1.0), plus, self._tmp64, self._ws)
            x = self._tmp64
        if self._r64 is None:
            self._r64 = low.zeros(self.A.n, F64)
        low.fill_zero(self._ws)
        low.residual(self.A, x, self.b, self._r64, None, self._ws, 0, 1)
        return math.sqrt(max(float(low.to_host(self._ws)[1]), 0.0)) / self.bnorm

    def add_true(self, it, t):
        self.true_its.append(int(it))
        self.true.append(float(t))

    def block_size(self, eng: CGEngine, target_rel: float, cap: int | None = None) -> int:
        """k for the next block: K, or a smaller power of two when the recent rate says convergence is
        near; at most ``cap`` (the iterations to the next ``true_every`` record)."""
        K = eng.K
        k = K
        short = _short_block(eng)
        if short:
            # a preconditioned iteration (a V-cycle) costs many plain ones: short blocks, sized by the recent
            # rate, so that the solve stops within an iteration or two of convergence
            k = min(K, short, FIRST_SHORT_BLOCK if len(self.rec) < 2 else short)
            m = min(len(self.rec), short)
            if m >= 2 and target_rel > 0:
                a, b = self.rec[-m], self.rec[-1]
                if a > 0 and b > 0 and b < a:
                    need = math.log(target_rel / b) / (math.log(b / a) / (m - 1)) if b > target_rel else 1
                    k = max(1, min(K, short, math.ceil(need)))
            return max(1, min(k, cap)) if cap else k
        if len(self.rec) >= 2 * K and target_rel > 0:
            a, b = self.rec[-K], self.rec[-1]
            if a > 0 and b > 0 and b < a:
                rate = math.log(b / a) / (K - 1) if K > 1 else math.log(b / a)
                need = math.log(target_rel / b) / rate if b > target_rel else 1
                k = 8
                while k < K and k < need:
                    k *= 2
                k = min(k, K)
        return max(1, min(k, cap)) if cap else k


def _short_block(eng: CGEngine) -> int:
    """The block length a costly general preconditioner asks for (``Preconditioner.block``), else 0."""
    return _short_block_of(eng.general) if eng.general is not None else 0


def _short_block_of(precond) -> int:
    return 0 if precond is None or precond.identity else int(getattr(precond, "block", 0) or 0)


def _run_cg(run: _Run, eng: CGEngine, maxiter: int, it0: int, target: float | None = None):
    """Run eng's CG until the recursive residual meets target (relative to ||b||), then check the true
    one; eng.x is the whole solution. Returns (reason, converged)."""
    opts = run.opts
    target = opts.rtol if target is None else target
    next_true = opts.true_every or None
    best_true, since = math.inf, 0
    while eng.iterations - it0 < maxiter:
        done = eng.iterations - it0
        k = min(run.block_size(eng, target, next_true - done if next_true else None), maxiter - done)
        eng.launch(k)
        rr = eng.read(k)
        run.rec.extend((np.sqrt(np.maximum(rr, 0.0)) / run.bnorm).tolist())
        rel = run.rec[-1]
        it = eng.iterations
        if next_true and it - it0 >= next_true:
            run.add_true(it, run.true_residual(eng.x))
            next_true += opts.true_every
        if rel <= target:
            t = run.true_residual(eng.x)
            if not run.true_its or run.true_its[-1] != it:
                run.add_true(it, t)
            if t <= opts.rtol:
                return "true residual met rtol", True
            if t < 0.9 * best_true:
                best_true, since = t, 0
            else:
                since += 1
                if since >= opts.stall_checks:
                    return (f"the recursive residual met rtol but the float64 true residual stalled at {best_true:.3e} "
                            f"(attainable accuracy of CG in {eng.dtype.name} is about kappa * unit roundoff)"), False
    return "maxiter reached", False


def _solve_plain(run: _Run, dtype):
    low, opts = run.low, run.opts
    if dtype == F64:
        eng = run.engine(F64, x=run.x64)
    else:
        eng = run.engine(dtype)
        low.scale_copy(run.x64, eng.x, 1.0)
    rr64 = eng.set_residual_from(run.x64, run.b, precondition=False)
    rr = eng.start_from_r()                   # r.r of r as stored (float32 for fp32 CG)
    run.rec.append(math.sqrt(max(rr64 if dtype == F64 else rr, 0.0)) / run.bnorm)
    t = run.true_residual(run.x64)
    run.add_true(0, t)
    if t <= opts.rtol:
        return run.x64, "true residual met rtol at the initial guess"
    try:
        reason, _ = _run_cg(run, eng, opts.maxiter, 0)
    except Breakdown as exc:
        reason = f"breakdown: {exc}"
    run.report.iterations = eng.iterations
    run.report.kappa_estimate = eng.kappa()
    return eng.x, reason


def _fallback_fp64(run: _Run, why: str) -> str:
    """Finish with float64 (P)CG from the current float64 solution; say so in the report."""
    rep = run.report
    rep.fallback = f"fell back to float64 CG: {why}"
    rep.notes.append(rep.fallback)
    eng = run.engine(F64, x=run.x64)
    eng.set_residual_from(run.x64, run.b, precondition=False)
    eng.start_from_r()
    it0 = rep.iterations
    eng.iterations = it0
    try:
        reason, _ = _run_cg(run, eng, max(run.opts.maxiter - it0, 1), it0)
    except Breakdown as exc:
        reason = f"breakdown: {exc}"
    rep.iterations = eng.iterations
    return reason + " (in the float64 fallback)"


def _promote(run: _Run, eng32: CGEngine, why: str):
    """Continue from the float32 recurrences in float64: x64 += y, r = b - A x64, p kept (cast)."""
    low = run.low
    if eng32.x is not run.x64:
        low.fold(run.x64, eng32.x)
    eng64 = run.engine(F64, x=run.x64)
    low.scale_copy(eng32.p, eng64.p, 1.0)
    low.scale_copy(eng32.r, eng64.r, 1.0)
    eng64.iterations = eng32.iterations
    eng64.alpha, eng64.beta = list(eng32.alpha), list(eng32.beta)
    rr = eng64.replace_residual(run.x64, run.b)
    run.report.fallback = f"promoted the recurrences to float64 (x, p and the Krylov space kept): {why}"
    run.report.notes.append(run.report.fallback)
    t = math.sqrt(max(rr, 0.0)) / run.bnorm
    run.add_true(eng64.iterations, t)
    return eng64, t


def _replace(run: _Run, eng: CGEngine, mode: str) -> float:
    """Substitute the float64 true residual b - A x64 into eng.r (after a block); returns r.r (syncs).

    mode "correct": p += M^-1 (r_true - r_rec) (one fused pass); "keep": p as it is;
    "rebeta": p = M^-1 r_true + (rz_true / rz_rec) (p - M^-1 r_rec), i.e. beta recomputed from the new r."""
    low = run.low
    if mode == "restart":        # r = b - A x64, p = M^-1 r: one V-cycle (correcting p would cost two)
        rr = eng.set_residual_from(run.x64, run.b, precondition=False)
        if math.sqrt(max(rr, 0.0)) / run.bnorm <= run.opts.rtol:
            return rr                # converged: no V-cycle for a direction that is not needed
        return eng.start_from_r()
    if mode == "correct":
        return eng.replace_residual(run.x64, run.b)
    if mode == "keep":
        return eng.set_residual_from(run.x64, run.b)
    rz_rec = eng.rho_host
    low.axpy((-1, -1, -1.0), eng.apply_m(eng.r, eng.q), eng.p, eng.scratch)
    rr = eng.set_residual_from(run.x64, run.b)
    low.scale_copy(eng.p, eng.p, eng.rho_host / rz_rec if rz_rec > 0 else 0.0)
    low.axpy((-1, -1, 1.0), eng.apply_m(eng.r, eng.q), eng.p, eng.scratch)
    return rr


def _solve_reliable(run: _Run):
    low, opts, rep = run.low, run.opts, run.report
    x_fp64 = opts.accumulate == "fp64"
    eng = run.engine(F32, x=run.x64 if x_fp64 else None)    # eng.x is y: the float32 partial solution
    rr = eng.set_residual_from(run.x64, run.b, precondition=False)                # (or x64 itself, accumulate="fp64")
    res = math.sqrt(max(rr, 0.0)) / run.bnorm
    run.rec.append(res)
    run.add_true(0, res)
    if res <= opts.rtol:
        return run.x64, "true residual met rtol at the initial guess"
    eng.start_from_r()
    max_r, min_rec = res, res
    reason, fallback_why, promote_why = "maxiter reached", "", ""
    next_kappa = opts.kappa_min_iterations
    next_true = opts.true_every or None
    vdvye = opts.reliable_criterion == "vdvye"
    watch = ReplacementWatch(opts, vdvye, res)
    rate = None       # vdvye: ||A|| from the largest Ritz value after the first block (no host copy of A needed)
    ytmp = low.zeros(1, F64)

    def fold():
        if not x_fp64:
            low.fold(run.x64, eng.x)

    def phase(name, t_start):
        rep.phase_time_s[name] = rep.phase_time_s.get(name, 0.0) + time.perf_counter() - t_start

    short = _short_block(eng)     # a V-cycle preconditioner: replace by a fixed window, restart at replacements
    try:
        while eng.iterations < opts.maxiter:
            target = opts.reliable_delta * max_r if not vdvye else opts.rtol
            if short:
                target = max(opts.rtol, SHORT_WINDOW * max_r)
            cap = next_true - eng.iterations if next_true else None
            k = min(run.block_size(eng, target, cap), opts.maxiter - eng.iterations)
            eng.launch(k)
            rr = eng.read(k)
            new = (np.sqrt(np.maximum(rr, 0.0)) / run.bnorm).tolist()
            run.rec.extend(new)
            rel, it = run.rec[-1], eng.iterations
            min_rec = min(min_rec, min(new))
            if opts.kappa_limit and it >= next_kappa:
                t_phase = time.perf_counter()
                kap = eng.kappa()
                phase("kappa", t_phase)
                rep.kappa_estimate = kap
                # at doublings of the iteration count: the Lanczos solve on the host costs O(iterations)
                # (about 4 ms at 7,500 on a 2-core CPU), checks every it / 8 cost 2048^2 ~10% of its time
                next_kappa = max(2 * it, it + opts.check_every)
                if math.isfinite(kap) and kap > opts.kappa_limit:
                    promote_why = (f"Lanczos kappa estimate {kap:.2e} after {it} iterations exceeds {opts.kappa_limit:.1e} "
                                   f"(kappa * u32 = {kap * U32:.2f}): float32 recurrences would cost more iterations "
                                   "than they save")
                    break
            if short:
                # each V-cycle iteration gains about a digit: the float32 recurrences are trusted for
                # SHORT_WINDOW below the last true residual, then the true residual is substituted
                due = rel <= target
            elif vdvye:
                if x_fp64:
                    ynorm = 0.0
                else:
                    t_phase = time.perf_counter()
                    low.fill_zero(ytmp)
                    low.dot(eng.x, eng.x, ytmp, 0)
                    ynorm = math.sqrt(max(float(low.to_host(ytmp)[0]), 0.0)) / run.bnorm
                    phase("y_norm", t_phase)
                if rate is None:
                    hi = lanczos_extremes(eng.alpha, eng.beta)[1] if run.precond.identity else math.nan
                    if not (math.isfinite(hi) and hi > 0):   # preconditioned: T is of M A; bound ||A|| by 2 max a_ii
                        hi = 2.0 * run.A.max_diag
                    rate = RoundingEstimate(res, norm_a=hi, row_nnz=run.A.row_nnz)
                due = rate.due(k, ynorm, new, rel) or rel <= opts.rtol
            else:
                due = rel <= opts.reliable_delta * max_r or rel <= opts.rtol
            if due:
                t_phase = time.perf_counter()
                fold()                                           # x64 += y; y = 0
                rr = _replace(run, eng, "restart" if short else opts.reliable_p)   # r = b - A x64 (float64)
                phase("replace", t_phase)
                t = math.sqrt(max(rr, 0.0)) / run.bnorm
                run.add_true(it, t)
                rep.outer_iterations += 1
                run.rec[-1] = t
                if rate is not None:
                    rate.reset(t)
                done, fallback_why = watch.after(t, min_rec, rep.outer_iterations)
                if done or fallback_why:
                    reason = done or reason
                    break
                max_r = min_rec = t
            else:
                max_r = max(max_r, max(new))
                if opts.accumulate == "block":
                    fold()
            if next_true and it >= next_true:
                if not due:
                    run.add_true(it, run.true_residual(run.x64, plus=None if x_fp64 else eng.x))
                next_true += opts.true_every
    except Breakdown as exc:
        if exc.kind == "indefinite":
            reason = f"breakdown: {exc}"           # float64 CG would break down too
        else:
            fallback_why = f"breakdown in the float32 recurrences: {exc}"
    rep.iterations = eng.iterations
    if rep.kappa_estimate != rep.kappa_estimate:
        rep.kappa_estimate = eng.kappa()
    if reason == "true residual met rtol":
        fold()
        return run.x64, reason
    if promote_why and eng.iterations < opts.maxiter:
        eng64, t = _promote(run, eng, promote_why)
        if t <= opts.rtol:
            return run.x64, "true residual met rtol"
        try:
            reason, _ = _run_cg(run, eng64, opts.maxiter - eng.iterations, eng.iterations)
        except Breakdown as exc:
            reason = f"breakdown: {exc}"
        rep.iterations = eng64.iterations
        return run.x64, reason + " (float64 recurrences after promotion)"
    fold()
    if fallback_why and eng.iterations < opts.maxiter:
        return run.x64, _fallback_fp64(run, fallback_why)
    return run.x64, fallback_why or reason


def _solve_ir(run: _Run):
    low, opts, rep = run.low, run.opts, run.report
    eng = run.engine(F32)
    rr = eng.set_residual_from(run.x64, run.b, precondition=False)
    res = math.sqrt(max(rr, 0.0)) / run.bnorm
    run.rec.append(res)
    run.add_true(0, res)
    watch = RefinementWatch(opts, res)
    longest, reason = 0, ""
    total = 0
    for outer in range(1, opts.max_outer + 1):
        res = watch.res
        if res <= opts.rtol:
            return run.x64, "true residual met rtol"
        if not math.isfinite(res) or total >= opts.maxiter:
            break
        tol = watch.inner_tol()
        # the float32 residual is b - A x64 as computed; the inner solve finds d with A d = r (d in eng.x)
        low.fill_zero(eng.x)
        rr0 = eng.start_from_r()
        inner0 = math.sqrt(max(rr0, 0.0))
        eng.iterations = 0
        eng.alpha, eng.beta = [], []
        indefinite = False
        try:
            while eng.iterations < opts.maxiter - total:
                k = eng.K if not _short_block(eng) else run.block_size(eng, tol * inner0 / run.bnorm)
                k = min(k, opts.maxiter - total - eng.iterations)
                eng.launch(k)
                rrs = eng.read(k)
                run.rec.extend((np.sqrt(np.maximum(rrs, 0.0)) / run.bnorm).tolist())
                if math.sqrt(max(rrs[-1], 0.0)) <= tol * inner0:
                    break
        except Breakdown as exc:
            reason = f"breakdown in the float32 inner solve: {exc}"
            indefinite = exc.kind == "indefinite"
        total += eng.iterations
        rep.iterations = total
        rep.outer_iterations = outer
        if eng.iterations > longest:
            longest, rep.kappa_estimate = eng.iterations, eng.kappa()
        if indefinite:
            return run.x64, reason                 # float64 CG would break down too
        if reason:
            break
        low.fold(run.x64, eng.x)
        new = math.sqrt(max(eng.set_residual_from(run.x64, run.b, precondition=False), 0.0)) / run.bnorm
        run.add_true(total, new)
        done, reason = watch.after(outer, tol, eng.iterations, new, rep.notes)
        if done:
            return run.x64, done
        if reason:
            break
    else:
        reason = f"no convergence after {opts.max_outer} refinement steps (MAGMA dsposv's limit)"
    if total >= opts.maxiter:
        return run.x64, "maxiter reached"
    return run.x64, _fallback_fp64(run, reason)


def run(A, b64, bnorm: float, x64, *, policy, method: str, opts: CGOptions, precond) -> tuple[np.ndarray, SolveReport]:
    """Solve A x = b with ``method`` on A's device. A: a checked DeviceCSR; b64, x64: float64 device vectors
    (x64 is updated in place); bnorm = ||b|| > 0. Returns (x as a float64 NumPy array, SolveReport with
    everything but setup_time_s)."""
    low = A.low
    label = method if precond.identity or method == "pcg-jacobi" else f"{method}+{precond.name}"
    report = SolveReport(method=label, precision=policy.name, backend=low.name, rtol=opts.rtol)
    report.notes.append(f"fused device CG on {low.name} ({'CUDA graphs' if low.graphs else 'no graphs'}), "
                        f"host check every <= {opts.check_every} iterations")
    if opts.accumulate == "fp64" and not low.mixed_x_update:
        raise CaseError.invalid("accumulate", "fp64", "replace, block",
                                why=f"x64 += alpha p32 in the fused kernels exists only in the NumPy low ops "
                                    f"(a study option), not on {low.name}")
    state = _Run(A, b64, bnorm, x64, opts, precond, report)
    precond.cycles = 0
    low.sync()
    t0 = time.perf_counter()
    if not policy.refinement:
        x, reason = _solve_plain(state, np.dtype(policy.compute))
    elif method == "cg-reliable":
        x, reason = _solve_reliable(state)
    elif method == "ir-restarted":
        x, reason = _solve_ir(state)
    else:
        raise ValueError(f"method {method!r} with precision {policy.name!r}")
    true = state.true_residual(x)
    low.sync()
    report.time_s = time.perf_counter() - t0
    x_host = np.asarray(low.to_host(x), dtype=np.float64)
    report.finish(state.rec, state.true_its, state.true, true, reason)
    report.preconditioner = precond.info()
    if low.graphs and getattr(low, "graph_error", None):
        report.notes.append(f"CUDA graphs: {low.graph_error}")
    if report.preconditioner.get("flexible"):
        report.notes.append("flexible CG (beta = -z.Aq / p.Aq): the V-cycle need not be exactly symmetric")
    return x_host, report
