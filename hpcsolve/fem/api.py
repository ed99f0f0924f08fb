"""``hpcsolve.fem.solve``: a SciPy-like linear solver front end with an honest report.

    x, report = solve(A, b, precision="mixed", method="cg-reliable", rtol=1e-10)

Compare ``scipy.sparse.linalg.cg(A, b, rtol=...)`` (returns ``x, info``) and ``spsolve``.
Here the report says what happened, and ``report.converged`` means the float64 true residual
||b - A x|| / ||b|| met ``rtol``, never the recursive residual alone.
"""

from __future__ import annotations

import math
import time

import numpy as np
import scipy.sparse as sp

from hpcsolve import backends
from hpcsolve.errors import CaseError
from hpcsolve.fem import krylov
from hpcsolve.fem.ops import make_ops
from hpcsolve.fem.report import SolveReport
from hpcsolve.precision import Precision, get_precision

METHODS = ("cg", "pcg-jacobi", "ir-restarted", "cg-reliable", "spsolve")
DEFAULT_METHOD = {"fp64": "cg", "fp32": "cg", "mixed": "cg-reliable"}


def check_system(A, b, *, symmetric_tol: float = 1e-10) -> tuple[sp.csr_matrix, np.ndarray]:
    """Validate and normalize (A, b): square sparse float64 CSR with int32 indices, finite, symmetric,
    positive diagonal; b finite of matching length. Raises CaseError naming what is wrong."""
    if not sp.issparse(A):
        A = np.asarray(A)
        if A.ndim != 2:
            raise CaseError.invalid("A", f"array of shape {A.shape}", "a square 2D matrix (SciPy sparse or dense)")
    A = sp.csr_matrix(A, dtype=np.float64)
    n, m = A.shape
    if n != m:
        raise CaseError.invalid("A", f"shape {A.shape}", "a square matrix")
    b = np.asarray(b)
    if b.ndim != 1 or b.shape[0] != n:
        raise CaseError.invalid("b", f"shape {b.shape}", f"a vector of length {n} (the size of A)",
                                why="right-hand side does not match the matrix")
    if not np.issubdtype(b.dtype, np.number) or np.iscomplexobj(b):
        raise CaseError.invalid("b", str(b.dtype), "real numbers")
    b = b.astype(np.float64)
    if not np.all(np.isfinite(A.data)):
        k = int(np.flatnonzero(~np.isfinite(A.data))[0])
        raise CaseError.invalid("A", float(A.data[k]), "finite entries", why="the matrix holds NaN or Inf")
    if not np.all(np.isfinite(b)):
        k = int(np.flatnonzero(~np.isfinite(b))[0])
        raise CaseError.invalid("b", float(b[k]), "finite entries", why=f"the right-hand side holds NaN or Inf (entry {k})")
    A.sum_duplicates()
    A.sort_indices()
    if n and A.nnz < 2**31 - 1:
        A.indices = A.indices.astype(np.int32, copy=False)
        A.indptr = A.indptr.astype(np.int32, copy=False)
    diag = A.diagonal()
    if n and np.any(diag <= 0):
        k = int(np.flatnonzero(diag <= 0)[0])
        raise CaseError.invalid("A", f"A[{k},{k}] = {diag[k]:g}", "a symmetric positive definite matrix",
                                why="CG needs an SPD matrix and this one has a non-positive diagonal entry")
    scale = float(abs(A).max()) if A.nnz else 0.0
    asym = float(abs(A - A.T).max()) if A.nnz else 0.0
    if asym > symmetric_tol * max(scale, 1e-300):
        raise CaseError.invalid("A", f"max |A - A^T| = {asym:.3e}", "a symmetric matrix",
                                why="CG needs a symmetric matrix")
    return A, b


def _method_for(policy: Precision, method: str | None) -> str:
    method = (method or DEFAULT_METHOD[policy.name]).lower()
    if method not in METHODS:
        raise CaseError.invalid("method", method, ", ".join(METHODS))
    if policy.refinement and method not in krylov.MIXED_METHODS:
        raise CaseError.invalid("method", method, ", ".join(krylov.MIXED_METHODS),
                                why="precision 'mixed' is float32 work with float64 accuracy; pick a strategy")
    if not policy.refinement and method in krylov.MIXED_METHODS:
        raise CaseError.invalid("method", method, ", ".join(m for m in METHODS if m not in krylov.MIXED_METHODS),
                                why=f"{method} is a mixed-precision strategy; use precision='mixed'")
    if method == "spsolve" and policy.name != "fp64":
        raise CaseError.invalid("method", method, "cg, pcg-jacobi", why="spsolve is the float64 direct reference")
    return method


def solve(A, b, precision: str | Precision = "fp64", backend: str = "numpy", rtol: float = 1e-8,
          maxiter: int | None = None, method: str | None = None, *, x0=None, preconditioner: str | None = None,
          check_every: int | None = None, true_every: int = 0, device_path: str = "fused",
          **options) -> tuple[np.ndarray, SolveReport]:
    """Solve the SPD system A x = b; return (x as a float64 NumPy array, SolveReport).

    precision: 'fp64', 'fp32' or 'mixed'. method: 'cg', 'pcg-jacobi', 'spsolve' (fp64 direct) for
    fp64/fp32; 'ir-restarted' or 'cg-reliable' (default) for mixed. preconditioner: 'none' or
    'jacobi' (for any CG method; 'pcg-jacobi' implies it). backend: 'numpy', 'cupy', 'numba-cuda'
    or 'auto'. rtol: target on the float64 true relative residual. maxiter: total Krylov iterations
    (default 10 n). check_every: host-side convergence checks every k iterations (default 10 on the
    CPU; on a GPU the largest CUDA-graph block, default 64). device_path (GPU backends): 'fused'
    (default: fused kernels, CUDA graphs where the backend has them, docs/fem_gpu.md) or 'seam'
    (the krylov.py algorithms over the backend's Ops, no graphs). true_every: also
    record the true residual every N iterations. Other keywords go to :class:`krylov.KrylovOptions`
    (inner_rtol, max_outer, stagnation, reliable_delta, reliable_patience).
    """
    policy = get_precision(precision, family="fem", field="precision")
    method = _method_for(policy, method)
    backend = backends.resolve(backend, field="backend")
    if not (isinstance(rtol, (int, float)) and 0 < rtol < 1):
        raise CaseError.invalid("rtol", rtol, "a number in (0, 1)")
    A, b = check_system(A, b)
    n = A.shape[0]
    if maxiter is None:
        maxiter = max(10 * n, 100)
    if not isinstance(maxiter, (int, np.integer)) or maxiter < 1:
        raise CaseError.invalid("maxiter", maxiter, "a positive integer")
    if check_every is not None and (not isinstance(check_every, (int, np.integer)) or check_every < 1):
        raise CaseError.invalid("check_every", check_every, "a positive integer")
    if device_path not in ("fused", "seam"):
        raise CaseError.invalid("device_path", device_path, "fused, seam")
    precond = (preconditioner or ("jacobi" if method == "pcg-jacobi" else "none")).lower()
    if precond not in ("none", "jacobi"):
        raise CaseError.invalid("preconditioner", preconditioner, "none, jacobi")
    if method == "cg" and precond == "jacobi":
        method = "pcg-jacobi"
    known = set(krylov.KrylovOptions.__dataclass_fields__) - {"rtol", "maxiter", "check_every", "true_every",
                                                              "preconditioner"}
    for k in options:
        if k not in known:
            raise CaseError.invalid(k, options[k], ", ".join(sorted(known)), why="unknown solver option")
    if backend.gpu and device_path == "fused" and method != "spsolve":
        import importlib

        module = importlib.import_module(backend.fem_module)
        fused = dict(options)
        if check_every is not None:
            fused["check_every"] = int(check_every)
        return module.solve_fused(A, b, precision=policy.name, method=method, rtol=float(rtol), maxiter=int(maxiter),
                                  x0=x0, true_every=int(true_every), preconditioner=precond, **fused)
    if check_every is None:
        check_every = 10
    opts = krylov.KrylovOptions(rtol=float(rtol), maxiter=int(maxiter), check_every=int(check_every),
                                true_every=int(true_every), preconditioner=precond, **options)
    label = method if precond == "none" or method == "pcg-jacobi" else f"{method}+jacobi"
    report = SolveReport(method=label, precision=policy.name, backend=backend.name, rtol=float(rtol))
    if x0 is None:
        x0 = np.zeros(n)
    else:
        x0 = np.asarray(x0, dtype=np.float64)
        if x0.shape != (n,) or not np.all(np.isfinite(x0)):
            raise CaseError.invalid("x0", f"shape {x0.shape}", f"a finite vector of length {n}")
    bnorm = float(np.linalg.norm(b))
    if bnorm == 0.0:
        report.converged, report.reason = True, "b = 0: x = 0 is exact"
        report.true_residual = report.recursive_residual = report.residual_gap = 0.0
        return np.zeros(n), report

    if method == "spsolve":
        return _spsolve(A, b, report)

    t_setup = time.perf_counter()
    ops64 = make_ops(A, backend.name, np.float64)
    ops_w = ops64 if policy.compute == np.float64 else ops64.astype(np.float32)
    prob = krylov._Problem(ops64, b)
    ops64.synchronize()
    report.setup_time_s = time.perf_counter() - t_setup

    with backend.timer() as timer:
        if method in krylov.PLAIN_METHODS:
            x, hist, reason = krylov.solve_plain(prob, ops_w, x0, opts, report)
        elif method == "ir-restarted":
            x, hist, reason = krylov.solve_ir_restarted(prob, ops_w, x0, opts, report)
        else:
            x, hist, reason = krylov.solve_cg_reliable(prob, ops_w, x0, opts, report)
        true = prob.true_residual(x)
    report.time_s = timer.seconds
    x_host = np.asarray(ops_w.to_host(x) if np.dtype(x.dtype) == ops_w.dtype else ops64.to_host(x), dtype=np.float64)
    _finish(report, hist, true, reason)
    return x_host, report


def _finish(report: SolveReport, hist, true: float, reason: str) -> None:
    report.finish(hist.recursive, hist.true_its, hist.true, true, reason)


def _spsolve(A, b, report: SolveReport):
    import scipy.sparse.linalg as spla

    t0 = time.perf_counter()
    x = spla.spsolve(A.tocsc(), b)
    report.time_s = time.perf_counter() - t0
    true = float(np.linalg.norm(b - A @ x) / np.linalg.norm(b)) if np.all(np.isfinite(x)) else float("nan")
    report.history_recursive = np.asarray([true])
    report.history_true_iterations = np.asarray([0])
    report.history_true = np.asarray([true])
    report.true_residual = report.recursive_residual = true
    report.residual_gap = 0.0
    report.converged = bool(math.isfinite(true) and true <= report.rtol)
    report.reason = "direct solve (SuperLU)" if report.converged else (
        f"direct solve gave true residual {true:.3e} (singular or badly conditioned matrix)")
    return np.asarray(x, dtype=np.float64), report
