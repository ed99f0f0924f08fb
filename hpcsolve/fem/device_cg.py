"""GPU conjugate gradients written once over a small set of fused kernels (``DeviceOps``), with two
front ends for the CuPy and Numba-CUDA backends:

1. ``SeamOps``: the ``Ops`` interface of :mod:`hpcsolve.fem.ops`, so the reference algorithms of
   :mod:`hpcsolve.fem.krylov` (CG, Jacobi-PCG, ir-restarted, cg-reliable) run unchanged on the
   device (``hpcsolve.fem.solve(..., backend="cupy")``). Device scalars are slots of a float64
   device buffer; ``div`` launches nothing (a lazy ratio that the next kernel evaluates), so an
   iteration is three fused kernels and no host synchronization.
2. ``FusedCG`` + ``solve_fused``: the same algorithms restructured for speed. A block of k
   iterations (SpMV+p.Ap, r update + r.r, x and p update) is captured once into a CUDA graph
   (CuPy) and replayed; alpha and beta are computed inside the kernels from scalars in device
   memory; the host looks only every k iterations (k adaptive near convergence). The mixed
   strategies and the convergence rules follow ``krylov`` (same options, same report fields);
   decisions happen at block ends. A residual substitution at a block end comes after p was formed
   from the recursive r (p = z_rec + beta p_old), so the same kernel that computes the true residual
   also corrects p += M^-1 (r_true - r_rec), giving the p the true residual would have given
   (krylov's re-orthogonalization is not applied). When a replacement is due is
   ``reliable_criterion``: van der Vorst & Ye's rounding estimate (default; on 2D Poisson it fires at
   every block end, so the float32 partial solution never accumulates more than one block) or
   QUDA's ``reliable_delta`` drop; docs/fem_gpu.md has the measured iteration ratios of each variant
   (``reliable_p``, ``accumulate``). ``cg-reliable`` also watches the Lanczos kappa estimate and
   promotes the recurrences to float64 (keeping x, p and the Krylov space) when
   kappa exceeds ``kappa_limit`` (default 1 / u_32 = 1.7e7: kappa * u_32 > 1), where float32
   recurrences cannot reduce the residual any more.

Bytes per iteration of the fused CG are given by :func:`bytes_per_iteration` (docs/fem_gpu.md).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from hpcsolve.fem.report import SolveReport

F64 = np.dtype(np.float64)
F32 = np.dtype(np.float32)
U32 = 2.0 ** -24


def bytes_per_iteration(n: int, nnz: int, dtype, jacobi: bool = False, matrix_free: bool = False) -> int:
    """Device-memory bytes one fused CG iteration moves (each array read or written once).

    spmv_dot: values nnz*s + indices nnz*4 + indptr (n+1)*4 + p n*s + q n*s   (p gathers hit L1/L2)
    update_r: r, q read, r written: 3 n s         update_xp: x, p, r read, x, p written: 5 n s
    Jacobi adds dinv in both updates: 2 n s. Scalars (a few doubles) are not counted.
    """
    s = np.dtype(dtype).itemsize
    spmv = 2 * n * s if matrix_free else nnz * (s + 4) + (n + 1) * 4 + 2 * n * s
    return spmv + 3 * n * s + 5 * n * s + (2 * n * s if jacobi else 0)


# --------------------------------------------------------------------------- backend interface
class DeviceOps:
    """What a GPU backend implements (kernels, arrays, graphs). Coefficients are passed as
    (i_num, i_den, c) meaning c * ws[i_num] / ws[i_den] (i_den < 0: c * ws[i_num]; i_num < 0: c)."""

    name = "device"
    supports_graphs = False

    def to_device(self, a): raise NotImplementedError
    def to_host(self, a): raise NotImplementedError
    def zeros(self, n, dtype): raise NotImplementedError
    def sync(self): raise NotImplementedError

    def capture(self, fn):
        """A callable replaying what ``fn`` launches (a CUDA graph), or None (then call fn each time)."""
        return None


class EventTimer:
    """Device-event timing: ``with t: ...`` then ``t.seconds``."""

    def __init__(self, make_event, record, elapsed, wait):
        self._make, self._record, self._elapsed, self._wait = make_event, record, elapsed, wait
        self.seconds = 0.0

    def __enter__(self):
        self._a, self._b = self._make(), self._make()
        self._record(self._a)
        return self

    def __exit__(self, *exc):
        self._record(self._b)
        self._wait(self._b)
        self.seconds = self._elapsed(self._a, self._b)
        return False


class DeviceCSR:
    """A CSR matrix on the device: one int32 indptr/indices shared by the float64 and float32 values."""

    def __init__(self, n, nnz, indptr, indices, vals: dict, diag_host: np.ndarray | None = None, ops=None):
        self.n, self.nnz = int(n), int(nnz)
        self.indptr, self.indices, self.vals = indptr, indices, vals
        self._diag = diag_host
        self._dinv = {}
        self.ops = ops

    @classmethod
    def from_scipy(cls, ops, A, dtypes=(F64, F32)):
        import scipy.sparse as sp

        A = sp.csr_matrix(A)
        indptr = ops.to_device(A.indptr.astype(np.int32))
        indices = ops.to_device(A.indices.astype(np.int32))
        vals = {np.dtype(d): ops.to_device(A.data.astype(d)) for d in dtypes}
        return cls(A.shape[0], A.nnz, indptr, indices, vals, A.diagonal().astype(np.float64), ops)

    @classmethod
    def from_device_arrays(cls, ops, n, indptr, indices, vals64, dtypes=(F64, F32)):
        vals = {np.dtype(d): (vals64 if np.dtype(d) == F64 else ops.astype(vals64, d)) for d in dtypes}
        return cls(n, int(indices.size), indptr, indices, vals, None, ops)

    def host_diagonal(self) -> np.ndarray:
        """diag(A) in float64 on the host (for a matrix built on the device; a copy of the matrix)."""
        import scipy.sparse as sp

        o = self.ops
        M = sp.csr_matrix((o.to_host(self.vals[F64]), o.to_host(self.indices), o.to_host(self.indptr)),
                          shape=(self.n, self.n))
        return M.diagonal().astype(np.float64)

    def ensure(self, dtype):
        dtype = np.dtype(dtype)
        if dtype not in self.vals:
            self.vals[dtype] = self.ops.astype(self.vals[F64], dtype)
        return self.vals[dtype]

    def dinv(self, dtype):
        dtype = np.dtype(dtype)
        if dtype not in self._dinv:
            if self._diag is None:
                self._diag = self.host_diagonal()
            self._dinv[dtype] = self.ops.to_device((1.0 / self._diag).astype(dtype))
        return self._dinv[dtype]


# --------------------------------------------------------------------------- 1. the Ops seam
class DeviceScalar:
    """A float64 value in slot ``i`` of the backend's scalar pool (never read until to_float)."""

    __slots__ = ("i",)

    def __init__(self, i):
        self.i = i


class Ratio:
    """num / den, evaluated inside the kernel that consumes it (no launch for ``div``)."""

    __slots__ = ("num", "den")

    def __init__(self, num, den):
        self.num, self.den = num, den


class ScalarPool:
    POOL = 1 << 16
    CHUNK = 1 << 10

    def __init__(self, low):
        self.low = low
        self.ws = low.zeros(self.POOL, F64)
        self.next = 0

    def take(self) -> DeviceScalar:
        i = self.next
        if i % self.CHUNK == 0:
            self.low.zero_range(self.ws, i, self.CHUNK)
        self.next = (i + 1) % self.POOL
        return DeviceScalar(i)


def _coef(c, sign=1.0):
    """(i_num, i_den, c) of a host float, a DeviceScalar or a Ratio of those."""
    if isinstance(c, DeviceScalar):
        return c.i, -1, sign
    if isinstance(c, Ratio):
        num, den = c.num, c.den
        if isinstance(num, DeviceScalar) and isinstance(den, DeviceScalar):
            return num.i, den.i, sign
        if isinstance(den, DeviceScalar):   # host / device: c * 1 / den is not expressible: sync once
            raise TypeError("Ratio(host, device) is not supported")
        if isinstance(num, DeviceScalar):
            return num.i, -1, sign / float(den)
        return -1, -1, sign * float(num) / float(den)
    return -1, -1, sign * float(c)


def _slots(s):
    if isinstance(s, DeviceScalar):
        return [s.i]
    if isinstance(s, Ratio):
        return _slots(s.num) + _slots(s.den)
    return []


class SeamOps:
    """``hpcsolve.fem.ops.Ops`` on a GPU backend, built from the fused kernels of ``low``."""

    def __init__(self, low, A: DeviceCSR, dtype, pool: ScalarPool | None = None):
        self.low = low
        self.backend = low.name
        self.dtype = np.dtype(dtype)
        self.A = A
        A.ensure(self.dtype)
        self.n = A.n
        self.pool = pool or ScalarPool(low)

    @property
    def ws(self):
        return self.pool.ws

    def astype(self, dtype):
        return SeamOps(self.low, self.A, dtype, self.pool)

    def vector(self, host=None):
        if host is None:
            return self.low.zeros(self.n, self.dtype)
        return self.low.to_device(np.asarray(host, dtype=self.dtype))

    def to_host(self, v):
        return self.low.to_host(v)

    def copy(self, src, dst, scale=1.0):
        self.low.scale_copy(src, dst, float(scale))

    def zero(self, v):
        self.low.fill_zero(v)

    def spmv(self, x, y):
        self.low.spmv_dot(self.A, x, y, self.ws, -1)

    def spmv_dot(self, p, q):
        s = self.pool.take()
        self.low.spmv_dot(self.A, p, q, self.ws, s.i)
        return s

    def residual(self, b, x, r):
        s = self.pool.take()
        self.low.residual(self.A, x, b, r, None, self.ws, -1, s.i)
        return s

    def dot(self, x, y):
        s = self.pool.take()
        self.low.dot(x, y, self.ws, s.i)
        return s

    def axpy(self, a, x, y):
        self.low.axpy(_coef(a), x, y, self.ws)

    def inverse_diagonal(self):
        return self.A.dinv(self.dtype)

    def precondition(self, dinv, r, z):
        s = self.pool.take()
        self.low.precondition(dinv, r, z, self.ws, s.i)
        return s

    def update_xr(self, x, r, p, q, alpha, dinv=None, z=None):
        rr = self.pool.take()
        rz = self.pool.take() if dinv is not None else rr
        self.low.update_xr(x, r, p, q, _coef(alpha), dinv, z, self.ws, rz.i, rr.i)
        return rz, rr

    def update_p(self, p, z, beta):
        self.low.update_p(p, z, _coef(beta), self.ws)

    def div(self, a, b):
        return Ratio(a, b)

    def _value(self, s, host_ws):
        if isinstance(s, DeviceScalar):
            return float(host_ws[s.i])
        if isinstance(s, Ratio):
            num, den = self._value(s.num, host_ws), self._value(s.den, host_ws)
            return num / den if den != 0 else (math.copysign(math.inf, num) if num else math.nan)
        return float(s)

    def to_float(self, s):
        return self.scalars_to_host([s])[0]

    def scalars_to_host(self, seq):
        idx = [i for s in seq for i in _slots(s)]
        if not idx:
            return np.asarray([self._value(s, None) for s in seq], dtype=np.float64)
        lo, hi = min(idx), max(idx)
        host_ws = np.zeros(self.pool.POOL)
        host_ws[lo:hi + 1] = self.low.to_host(self.ws[lo:hi + 1])   # one synchronization
        return np.asarray([self._value(s, host_ws) for s in seq], dtype=np.float64)

    def synchronize(self):
        self.low.sync()


def make_seam_ops(low, A, dtype):
    """``make_ops(A, dtype)`` of a GPU backend: upload A once (float64 and the working precision)."""
    dtypes = (F64,) if np.dtype(dtype) == F64 else (F64, np.dtype(dtype))
    dA = DeviceCSR.from_scipy(low, A, dtypes)
    return SeamOps(low, dA, dtype)


# --------------------------------------------------------------------------- 2. fused, graph-captured CG
class FusedCG:
    """(P)CG recurrences in one working precision, in blocks of k iterations.

    Scalar slots (float64, device): rho[0..K] (r.z), pq[0..K-1], rr[0..K] (r.r); without Jacobi
    rho aliases rr. Iteration j of a block reads rho[j], pq[j] and writes pq[j], rho[j+1], rr[j+1];
    ``block_end`` carries rho[k], rr[k] into slot 0.
    """

    def __init__(self, low, A: DeviceCSR, dtype, jacobi=False, K=64, x=None):
        self.low, self.A, self.dtype, self.K = low, A, np.dtype(dtype), K
        A.ensure(self.dtype)
        n = A.n
        self.x = x if x is not None else low.zeros(n, self.dtype)
        self.r = low.zeros(n, self.dtype)
        self.p = low.zeros(n, self.dtype)
        self.q = low.zeros(n, self.dtype)
        self.ws = low.zeros(3 * K + 2, F64)
        self.PQ = K + 1
        self.RR = 2 * K + 1
        self.RHO = 0 if jacobi else self.RR
        self.dinv = A.dinv(self.dtype) if jacobi else None
        self._graphs = {}
        self.iterations = 0
        self.alpha: list[float] = []
        self.beta: list[float] = []
        self.rho_host = 0.0

    # -- state
    def start_from_r(self):
        """p = M^-1 r, rho = r.z, rr = r.r from the residual already in self.r."""
        self.low.fill_zero(self.ws)
        self.low.precondition_init(self.r, self.p, self.dinv, self.ws, self.RHO, self.RR)
        h = self.low.to_host(self.ws)
        self.rho_host = float(h[self.RHO])
        return float(h[self.RR])

    def set_residual_from(self, x64, b64, keep_direction=True):
        """r = b - A64 x64 (float64, stored in dtype), rho/rr slots reset; returns r.r (syncs)."""
        self.low.fill_zero(self.ws)
        dinv64 = self.A.dinv(F64) if self.dinv is not None else None
        self.low.residual(self.A, x64, b64, self.r, dinv64, self.ws, self.RHO, self.RR)
        h = self.low.to_host(self.ws)
        self.rho_host = float(h[self.RHO])
        return float(h[self.RR])

    def replace_residual(self, x64, b64):
        """Reliable update: r = b - A64 x64 and p += M^-1 (r_true - r_rec), as if p had been formed from the
        true residual (p = z_true + beta p_old); returns r.r (syncs)."""
        self.low.fill_zero(self.ws)
        dinv64 = self.A.dinv(F64) if self.dinv is not None else None
        self.low.replace_residual(self.A, x64, b64, self.r, self.p, dinv64, self.ws, self.RHO, self.RR)
        h = self.low.to_host(self.ws)
        self.rho_host = float(h[self.RHO])
        return float(h[self.RR])

    # -- the iteration
    def _launch_block(self, k):
        low, ws = self.low, self.ws
        low.block_start(ws, self.RHO, self.PQ, self.RR, self.K)
        for j in range(k):
            low.spmv_dot(self.A, self.p, self.q, ws, self.PQ + j)
            low.update_r(self.r, self.q, self.dinv, ws, self.RHO + j, self.PQ + j, self.RHO + j + 1, self.RR + j + 1)
            low.update_xp(self.x, self.p, self.r, self.dinv, ws, self.RHO + j, self.PQ + j, self.RHO + j + 1)
        low.block_end(ws, self.RHO, self.RR, k)

    def launch(self, k):
        """Queue k iterations (graph replay when the backend has graphs); no synchronization."""
        g = self._graphs.get(k, False)
        if g is False:
            g = self._graphs[k] = self.low.capture(lambda: self._launch_block(k))
        if g is None:
            self._launch_block(k)
        else:
            g()
        self.iterations += k

    def read(self, k):
        """After launch(k): host copies of rr[1..k] (synchronizes), and alpha/beta recorded."""
        h = self.low.to_host(self.ws)
        rho = np.concatenate([[self.rho_host], h[self.RHO + 1:self.RHO + k + 1]])
        pq = h[self.PQ:self.PQ + k]
        rr = h[self.RR + 1:self.RR + k + 1]
        with np.errstate(divide="ignore", invalid="ignore"):
            self.alpha.extend((rho[:-1] / pq).tolist())
            self.beta.extend((rho[1:] / rho[:-1]).tolist())
        self.rho_host = float(rho[-1])
        bad = np.flatnonzero(~(pq > 0))
        if bad.size:
            i = int(bad[0])
            raise _Breakdown(f"p.Ap = {pq[i]:.3e} at iteration {self.iterations - k + i + 1}: the matrix is not "
                             "symmetric positive definite (or the data hold NaN/Inf)")
        bad = np.flatnonzero(~np.isfinite(rr))
        if bad.size:
            i = int(bad[0])
            raise _Breakdown(f"the residual became {rr[i]} at iteration {self.iterations - k + i + 1} "
                             f"(overflow or NaN in {self.dtype.name})")
        return rr

    def kappa(self):
        from hpcsolve.fem.krylov import lanczos_kappa

        return lanczos_kappa(self.alpha, self.beta)


class _Breakdown(Exception):
    pass


@dataclass
class FusedOptions:
    rtol: float = 1e-8
    maxiter: int = 10_000
    check_every: int = 64          # k: iterations per graph block (host looks once per block)
    true_every: int = 0
    preconditioner: str = "none"
    inner_rtol: float = 1e-4
    max_outer: int = 30
    stagnation: float = 0.9
    reliable_delta: float = 0.1
    reliable_patience: int = 8
    kappa_limit: float = 1.0 / U32  # cg-reliable: promote to float64 recurrences above this kappa estimate
    #                                (kappa u32 > 1: float32 recurrences cannot reduce the residual; measured on
    #                                the H200 at 4096^2, kappa 6.8e6, promoting at 3e6 cost 1.02x fp64's time,
    #                                staying in float32 0.73x)
    kappa_min_iterations: int = 256
    stall_checks: int = 3          # fp32 plain CG: true checks without 10% improvement -> stalled
    reliable_criterion: str = "vdvye"   # "vdvye" (accumulated rounding estimate, van der Vorst & Ye) | "delta" (QUDA)
    reliable_p: str = "correct"    # at a replacement: "correct" p += M^-1 (r_true - r_rec) | "keep" | "rebeta"
    accumulate: str = "replace"    # where x is accumulated: "replace" (y fp32, fold at replacements) | "block" | "fp64"

    CHOICES = {"reliable_criterion": ("delta", "vdvye"), "reliable_p": ("correct", "keep", "rebeta"),
               "accumulate": ("replace", "block", "fp64")}

    def __post_init__(self):
        from hpcsolve.fem.krylov import _check_choices

        _check_choices(self, self.CHOICES)
    extra: dict = field(default_factory=dict)


class _Run:
    """Shared state of one fused solve: float64 b, x, histories, report."""

    def __init__(self, low, A, b64, x0, opts: FusedOptions, report: SolveReport):
        self.low, self.A, self.opts, self.report = low, A, opts, report
        self.b = low.to_device(np.asarray(b64, dtype=np.float64))
        self.bnorm = float(np.linalg.norm(b64))
        self.x64 = low.to_device(np.asarray(x0, dtype=np.float64))
        self.rec: list[float] = []
        self.true_its: list[int] = []
        self.true: list[float] = []
        self._r64 = None
        self._tmp_ws = low.zeros(2, F64)

    def true_residual(self, x) -> float:
        low = self.low
        if np.dtype(x.dtype) != F64:
            xx = low.zeros(self.A.n, F64)
            low.scale_copy(x, xx, 1.0)
            x = xx
        if self._r64 is None:
            self._r64 = low.zeros(self.A.n, F64)
        low.fill_zero(self._tmp_ws)
        low.residual(self.A, x, self.b, self._r64, None, self._tmp_ws, 0, 1)
        return math.sqrt(max(float(low.to_host(self._tmp_ws)[1]), 0.0)) / self.bnorm

    def add_true(self, it, t):
        self.true_its.append(int(it))
        self.true.append(float(t))

    def block_size(self, eng: FusedCG, target_rel: float) -> int:
        """k for the next block: K, or a smaller power of two when the recent rate says convergence is near."""
        K = eng.K
        if len(self.rec) < 2 * K or target_rel <= 0:
            return K
        a, b = self.rec[-K], self.rec[-1]
        if not (a > 0 and b > 0) or b >= a:
            return K
        rate = math.log(b / a) / (K - 1)
        need = math.log(target_rel / b) / rate if b > target_rel else 1
        k = 8
        while k < K and k < need:
            k *= 2
        return min(k, K)


def _run_cg(run: _Run, eng: FusedCG, maxiter: int, it0: int, x_is_solution: bool, target: float | None = None):
    """Run eng's CG until the recursive residual meets target (relative to ||b||), then check the true one.

    x_is_solution: eng.x is the float64 solution itself (fp64 CG / promoted) or, for float32, the
    whole solution (fp32 CG). Returns (reason, converged)."""
    opts = run.opts
    target = opts.rtol if target is None else target
    next_true = opts.true_every or None
    best_true, since = math.inf, 0
    while eng.iterations - it0 < maxiter:
        k = min(run.block_size(eng, target), maxiter - (eng.iterations - it0))
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


def solve_fused(low, A, b, *, precision="fp64", method=None, rtol=1e-8, maxiter=None, x0=None,
                **options):
    """Fused, graph-captured device CG. A is a DeviceCSR (float64 values present) or a host CSR
    matrix (uploaded here); b, x0 host arrays. ``options.graphs`` is the low ops' business (dropped).

    Returns (x as a float64 NumPy array, SolveReport). Methods: cg, pcg-jacobi (fp64/fp32);
    cg-reliable (default), ir-restarted (mixed)."""
    options.pop("graphs", None)
    if not isinstance(A, DeviceCSR):
        A = DeviceCSR.from_scipy(low, A)
    precision = str(precision)
    method = method or ("cg-reliable" if precision == "mixed" else "cg")
    opts = FusedOptions(rtol=float(rtol), maxiter=int(maxiter or max(10 * A.n, 100)), **options)
    jacobi = method == "pcg-jacobi" or opts.preconditioner == "jacobi"
    if opts.accumulate == "fp64" and low.name != "numpy":
        from hpcsolve.errors import CaseError

        raise CaseError.invalid("accumulate", "fp64", "replace, block",
                                why="x64 += alpha p32 in the fused kernels exists only in the NumPy low ops (a study option)")
    report = SolveReport(method=method + ("+jacobi" if jacobi and method != "pcg-jacobi" else ""),
                         precision=precision, backend=low.name, rtol=float(rtol))
    report.notes.append(f"fused device CG, {'CUDA graphs' if low.supports_graphs and low.graphs else 'no graphs'}, "
                        f"host check every <= {opts.check_every} iterations")
    b = np.asarray(b, dtype=np.float64)
    x0 = np.zeros(A.n) if x0 is None else np.asarray(x0, dtype=np.float64)
    if not np.any(b):
        report.converged, report.reason, report.true_residual = True, "b = 0: x = 0 is exact", 0.0
        return np.zeros(A.n), report
    run = _Run(low, A, b, x0, opts, report)
    low.sync()
    t0 = time.perf_counter()
    if precision in ("fp64", "fp32"):
        x, reason = _solve_plain(run, F64 if precision == "fp64" else F32, jacobi)
    elif method == "cg-reliable":
        x, reason = _solve_reliable(run, jacobi)
    elif method == "ir-restarted":
        x, reason = _solve_ir(run, jacobi)
    else:
        raise ValueError(f"method {method!r} with precision {precision!r}")
    true = run.true_residual(x)
    low.sync()
    report.time_s = time.perf_counter() - t0
    xh = np.asarray(low.to_host(x), dtype=np.float64)
    _finish(run, true, reason)
    return xh, report


def _finish(run: _Run, true: float, reason: str):
    run.report.finish(run.rec, run.true_its, run.true, true, reason)


def _solve_plain(run: _Run, dtype, jacobi):
    low, opts = run.low, run.opts
    if dtype == F64:
        eng = FusedCG(low, run.A, F64, jacobi, opts.check_every, x=run.x64)
        rr = eng.set_residual_from(run.x64, run.b)
    else:
        eng = FusedCG(low, run.A, dtype, jacobi, opts.check_every)
        low.scale_copy(run.x64, eng.x, 1.0)
        eng.set_residual_from(run.x64, run.b)
        rr = None
    rr0 = eng.start_from_r()
    run.rec.append(math.sqrt(max(rr0 if rr is None else rr, 0.0)) / run.bnorm)
    t = run.true_residual(run.x64)
    run.add_true(0, t)
    if t <= opts.rtol:
        return run.x64, "true residual met rtol at the initial guess"
    try:
        reason, _ = _run_cg(run, eng, opts.maxiter, 0, True)
    except _Breakdown as exc:
        reason = f"breakdown: {exc}"
    run.report.iterations = eng.iterations
    run.report.kappa_estimate = eng.kappa()
    return eng.x, reason


def _promote(run: _Run, eng32: FusedCG, jacobi, why: str):
    """Continue from the float32 recurrences in float64: x64 += y, r = b - A x64, p kept (cast)."""
    low = run.low
    if eng32.x is not run.x64:
        low.fold(run.x64, eng32.x)
    eng64 = FusedCG(low, run.A, F64, jacobi, eng32.K, x=run.x64)
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


def _replace(run: _Run, eng: FusedCG, mode: str) -> float:
    """Substitute the float64 true residual b - A x64 into eng.r (after a block); returns r.r (syncs).

    mode "correct": p += M^-1 (r_true - r_rec) (one fused pass); "keep": p as it is;
    "rebeta": p = M^-1 r_true + (rz_true / rz_rec) (p - M^-1 r_rec), i.e. beta recomputed from the new r."""
    low = run.low
    if mode == "correct":
        return eng.replace_residual(run.x64, run.b)
    if mode == "keep":
        return eng.set_residual_from(run.x64, run.b)
    rz_rec = eng.rho_host
    tmp = low.zeros(2, F64)
    if eng.dinv is not None:
        low.precondition(eng.dinv, eng.r, eng.q, tmp, 0)
        low.axpy((-1, -1, -1.0), eng.q, eng.p, tmp)
    else:
        low.axpy((-1, -1, -1.0), eng.r, eng.p, tmp)
    rr = eng.set_residual_from(run.x64, run.b)
    low.scale_copy(eng.p, eng.p, eng.rho_host / rz_rec if rz_rec > 0 else 0.0)
    if eng.dinv is not None:
        low.precondition(eng.dinv, eng.r, eng.q, tmp, 0)
        low.axpy((-1, -1, 1.0), eng.q, eng.p, tmp)
    else:
        low.axpy((-1, -1, 1.0), eng.r, eng.p, tmp)
    return rr


def _solve_reliable(run: _Run, jacobi):
    low, opts, rep = run.low, run.opts, run.report
    x_fp64 = opts.accumulate == "fp64"
    eng = FusedCG(low, run.A, F32, jacobi, opts.check_every,   # eng.x is y: float32 partial solution
                  x=run.x64 if x_fp64 else None)               # (or x64 itself, accumulate="fp64")
    rr = eng.set_residual_from(run.x64, run.b)
    res = math.sqrt(max(rr, 0.0)) / run.bnorm
    run.rec.append(res)
    run.add_true(0, res)
    if res <= opts.rtol:
        return run.x64, "true residual met rtol at the initial guess"
    eng.start_from_r()
    max_r, min_rec = res, res
    reason, fallback_why, promote_why = "maxiter reached", "", ""
    next_kappa = opts.kappa_min_iterations
    vdvye = opts.reliable_criterion == "vdvye"
    from hpcsolve.fem.krylov import ReplacementWatch

    watch = ReplacementWatch(opts, vdvye, res)
    if vdvye:
        from hpcsolve.fem.krylov import _RoundingEstimate, lanczos_extremes

        rate = None       # ||A||: the largest Ritz value after the first block (no host copy of A needed)
        ytmp = low.zeros(1, F64)

    def fold():
        if not x_fp64:
            low.fold(run.x64, eng.x)

    def phase(name, t_start):
        rep.phase_time_s[name] = rep.phase_time_s.get(name, 0.0) + time.perf_counter() - t_start

    try:
        while eng.iterations < opts.maxiter:
            target = opts.reliable_delta * max_r if not vdvye else opts.rtol
            k = min(run.block_size(eng, target), opts.maxiter - eng.iterations)
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
            if vdvye:
                if x_fp64:
                    ynorm = 0.0
                else:
                    t_phase = time.perf_counter()
                    low.fill_zero(ytmp)
                    low.dot(eng.x, eng.x, ytmp, 0)
                    ynorm = math.sqrt(max(float(low.to_host(ytmp)[0]), 0.0)) / run.bnorm
                    phase("y_norm", t_phase)
                if rate is None:
                    hi = lanczos_extremes(eng.alpha, eng.beta)[1] if eng.dinv is None else math.nan
                    if not (math.isfinite(hi) and hi > 0):   # Jacobi: T is of D^-1 A; bound ||A|| by 2 max a_ii
                        diag = run.A._diag if run.A._diag is not None else run.A.host_diagonal()
                        hi = 2.0 * float(np.max(np.abs(diag)))
                    rate = _RoundingEstimate(None, res, norm_a=hi, row_nnz=run.A.nnz / run.A.n)
                due = rate.due(k, ynorm, new, rel) or rel <= opts.rtol
            else:
                due = rel <= opts.reliable_delta * max_r or rel <= opts.rtol
            if due:
                t_phase = time.perf_counter()
                fold()                                           # x64 += y; y = 0
                rr = _replace(run, eng, opts.reliable_p)         # r = b - A x64 in float64, stored float32
                phase("replace", t_phase)
                t = math.sqrt(max(rr, 0.0)) / run.bnorm
                run.add_true(it, t)
                rep.outer_iterations += 1
                run.rec[-1] = t
                if vdvye:
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
    except _Breakdown as exc:
        fallback_why = f"breakdown in the float32 recurrences: {exc}"
    rep.iterations = eng.iterations
    if rep.kappa_estimate != rep.kappa_estimate:
        rep.kappa_estimate = eng.kappa()
    if reason == "true residual met rtol":
        fold()
        return run.x64, reason
    if promote_why and eng.iterations < opts.maxiter:
        eng64, t = _promote(run, eng, jacobi, promote_why)
        if t <= opts.rtol:
            return run.x64, "true residual met rtol"
        try:
            reason, _ = _run_cg(run, eng64, opts.maxiter - eng.iterations, eng.iterations, True)
        except _Breakdown as exc:
            reason = f"breakdown: {exc}"
        rep.iterations = eng64.iterations
        return run.x64, reason + " (float64 recurrences after promotion)"
    fold()
    if fallback_why and eng.iterations < opts.maxiter:
        return run.x64, _fallback_fp64(run, jacobi, fallback_why)
    return run.x64, fallback_why or reason


def _fallback_fp64(run: _Run, jacobi, why: str) -> str:
    rep = run.report
    rep.fallback = f"fell back to float64 CG: {why}"
    rep.notes.append(rep.fallback)
    eng = FusedCG(run.low, run.A, F64, jacobi, run.opts.check_every, x=run.x64)
    eng.set_residual_from(run.x64, run.b)
    eng.start_from_r()
    it0 = rep.iterations
    eng.iterations = it0
    try:
        reason, _ = _run_cg(run, eng, max(run.opts.maxiter - it0, 1), it0, True)
    except _Breakdown as exc:
        reason = f"breakdown: {exc}"
    rep.iterations = eng.iterations
    return reason + " (in the float64 fallback)"


def _solve_ir(run: _Run, jacobi):
    from hpcsolve.fem.krylov import RefinementWatch

    low, opts, rep = run.low, run.opts, run.report
    eng = FusedCG(low, run.A, F32, jacobi, opts.check_every)
    rr = eng.set_residual_from(run.x64, run.b)
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
        try:
            while eng.iterations < opts.maxiter - total:
                k = min(eng.K, opts.maxiter - total - eng.iterations)
                eng.launch(k)
                rrs = eng.read(k)
                run.rec.extend((np.sqrt(np.maximum(rrs, 0.0)) / run.bnorm).tolist())
                if math.sqrt(max(rrs[-1], 0.0)) <= tol * inner0:
                    break
        except _Breakdown as exc:
            reason = f"breakdown in the float32 inner solve: {exc}"
        total += eng.iterations
        rep.iterations = total
        rep.outer_iterations = outer
        if eng.iterations > longest:
            longest, rep.kappa_estimate = eng.iterations, eng.kappa()
        if reason:
            break
        low.fold(run.x64, eng.x)
        new = math.sqrt(max(eng.set_residual_from(run.x64, run.b), 0.0)) / run.bnorm
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
    return run.x64, _fallback_fp64(run, jacobi, reason)


def time_iterations(low, A: DeviceCSR, dtype, n_iter: int = 200, k: int = 50, repeats: int = 3, jacobi=False,
                    seed: int = 0) -> dict:
    """Median seconds per fused CG iteration at a fixed iteration count (graph replays, device events).

    Starts from a random right-hand side (never zeros); the iteration count is fixed, not a solve."""
    rng = np.random.default_rng(seed)
    b = rng.standard_normal(A.n)
    eng = FusedCG(low, A, dtype, jacobi, K=k)
    x64 = low.zeros(A.n, F64)
    b_dev = low.to_device(b)
    times = []
    for rep in range(repeats + 1):
        low.fill_zero(eng.x)
        eng.set_residual_from(x64, b_dev)
        eng.start_from_r()
        low.sync()
        blocks = max(1, n_iter // k)
        with low.timer() as t:
            for _ in range(blocks):
                eng.launch(k)
        if rep:
            times.append(t.seconds / (blocks * k))
    rr = eng.read(k)
    return {"seconds_per_iteration": float(np.median(times)), "all": times, "iterations": blocks * k,
            "final_rel_residual": float(math.sqrt(max(rr[-1], 0)) / np.linalg.norm(b))}
