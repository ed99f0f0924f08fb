"""``hpcsolve.fem.solve``: a SciPy-like linear solver front end with an honest report.

    x, report = solve(A, b, precision="mixed", method="cg-reliable", rtol=1e-10)

Compare ``scipy.sparse.linalg.cg(A, b, rtol=...)`` (returns ``x, info``) and ``spsolve``.
Here the report says what happened, and ``report.converged`` means the float64 true residual
||b - A x|| / ||b|| met ``rtol``, never the recursive residual alone.

Repeated solves with one matrix: ``M = prepare_matrix(A, backend="cupy")`` converts, uploads and
checks A once; ``solve(M, b, ...)`` then starts at once (``report.setup_time_s`` says what the
set-up of each call cost, apart from ``report.time_s``, the solve); the multigrid hierarchy is kept on M.
``update_matrix(M, A_new)`` gives M new values of the same sparsity: the next "amg" set-up is numeric only.
"""

from __future__ import annotations

import math
import time

import numpy as np
import scipy.sparse as sp

from hpcsolve.core import backends, scaled
from hpcsolve.core.errors import CaseError
from hpcsolve.fem.linalg import cg, matrix, methods, precond
from hpcsolve.fem.linalg.cg_options import CGOptions
from hpcsolve.fem.linalg.methods import Method
from hpcsolve.fem.linalg.precond import auto, registry
from hpcsolve.fem.linalg.matrix import DeviceCSR
from hpcsolve.fem.linalg.report import SolveReport
from hpcsolve.fem.linalg.scaling import MATRIX_RANGE, RhsScale, matrix_in_range
from hpcsolve.core.precision import POLICIES, Precision, get_precision

METHODS = methods.names()      # the method names registered at import (hpcsolve.fem.linalg.methods)
DEFAULT_METHOD = {p.name: p.fem_method for p in POLICIES.values() if p.supports("fem")}
F64 = np.dtype(np.float64)
#: ``solve``'s preconditioner where none is given: "auto" (Jacobi-PCG, switching to AMG where the cost model says it
#: pays: hpcsolve.fem.linalg.precond.auto); with method="cg" named it is plain CG, as the registry's rule says
DEFAULT_PRECONDITIONER = "auto"


def check_system(A, b, *, symmetric_tol: float = matrix.SYMMETRIC_TOL) -> tuple[sp.csr_matrix, np.ndarray]:
    """Validate and normalize (A, b) on the host: square sparse float64 CSR with int32 indices (sorted rows,
    no duplicates), finite, symmetric (``max |A - A^T| <= symmetric_tol max |A|``), positive diagonal; b
    real, finite, of matching length. Raises CaseError naming what is wrong. (``solve`` does the same
    checks on the backend's device.)"""
    A = matrix.as_csr(A)
    b, _ = _vector(b, "b", A.shape[0])
    matrix.check_host(A, symmetric_tol=symmetric_tol)
    return A, b


def prepare_matrix(A, backend: "str | backends.Backend" = "numpy") -> DeviceCSR:
    """A on ``backend``'s device, converted, uploaded and checked once, for any number of ``solve(M, b)``
    calls (with any precision, method and preconditioner). Raises CaseError as ``solve`` does."""
    if isinstance(A, DeviceCSR):
        return A
    be = backends.resolve(backend, field="backend")
    return matrix.prepare(A, be.piece("fem.low_ops")())


def update_matrix(M: DeviceCSR, A) -> DeviceCSR:
    """New values for the prepared matrix ``M`` (same sparsity: a time loop, a nonlinear iteration), uploaded and
    checked. The next ``solve(M, b, preconditioner="amg")`` rebuilds only the numeric part of the hierarchy where it
    was set up on the device (aggregates kept; ``report.preconditioner["setup_kind"]`` is "numeric" and
    ``["full_setup_time_s"]`` the first set-up's time). Raises CaseError where the sparsity differs."""
    if not isinstance(M, DeviceCSR):
        raise CaseError.invalid("M", type(M).__name__, "a matrix from hpcsolve.fem.prepare_matrix")
    return M.update_values(A)


def _vector(v, field: str, n: int) -> tuple[np.ndarray, float]:
    """v as a float64 host vector of length n, finite, and its 2-norm (scaled: ``hpcsolve.core.scaled.norm2``; inf
    only where finite entries near 1.8e308 have a norm above the float64 range)."""
    what = {"b": "the right-hand side", "x0": "the initial guess"}.get(field, field)
    v = np.asarray(v)
    if v.ndim != 1 or v.shape[0] != n:
        raise CaseError.invalid(field, f"shape {v.shape}", f"a vector of length {n} (the size of A)",
                                why=f"{what} does not match the matrix")
    if not np.issubdtype(v.dtype, np.number) or np.iscomplexobj(v):
        raise CaseError.invalid(field, str(v.dtype), "real numbers")
    v = v.astype(np.float64, copy=False)
    norm = scaled.norm2(v)       # scaled (no underflow for 1e-170 * ones, no overflow for 1e300 * ones)
    if not math.isfinite(norm):
        bad = np.flatnonzero(~np.isfinite(v))
        if bad.size:
            k = int(bad[0])
            raise CaseError.invalid(field, float(v[k]), "finite entries", why=f"{what} holds NaN or Inf (entry {k})")
        # finite entries whose norm exceeds float64 (max |v| near 1.8e308): the solve scales by a power of two
    return v, norm


def _method_for(policy: Precision, method) -> Method:
    """The method object of ``method`` (a name, a Method or None: the precision's default), checked against the
    precision (``methods.for_precision``)."""
    return methods.for_precision(policy, method)


def solve(A, b, precision: str | Precision = "fp64", backend: "str | backends.Backend | None" = None,
          rtol: float = 1e-8, maxiter: int | None = None, method: str | None = None, *, x0=None,
          preconditioner: "str | precond.Preconditioner | None" = None, M=None, check_every: int | None = None,
          true_every: int = 0, multigrid: dict | None = None, near_nullspace=None,
          **options) -> tuple[np.ndarray, SolveReport]:
    """Solve the SPD system A x = b on a backend, in a precision; return (x, SolveReport).

    Parameters
    ----------
    A : scipy.sparse matrix, ndarray or prepared matrix
        A SciPy sparse or dense SPD matrix, or a matrix from :func:`prepare_matrix` (then nothing is converted,
        checked or uploaded again).
    b : ndarray
        The right-hand side (length n).
    precision : str or Precision
        'fp64', 'fp32' or 'mixed' (float32 inner work, float64 solution and true residual).
    backend : str or Backend, optional
        'numpy' (default; for a prepared matrix, its backend), 'cupy', 'numba-cuda' or 'auto'.
    rtol : float
        Target on the float64 true relative residual ||b - A x|| / ||b||.
    maxiter : int, optional
        Total Krylov iterations (default 10 n).
    method : str, optional
        'cg', 'pcg-jacobi', 'spsolve' (fp64 direct) for fp64/fp32; 'ir-restarted' or 'cg-reliable' (the
        default) for mixed.
    x0 : ndarray, optional
        The initial guess (default zero).
    preconditioner : str or Preconditioner, optional
        'auto' (the default: Jacobi-PCG that switches to 'amg' where its probe and the cost model say the AMG set-up
        pays; ``report.chosen`` / ``report.chosen_why`` say what it chose and why; with ``method='cg'`` named, plain
        CG), 'none', 'jacobi' (for any CG method; 'pcg-jacobi' implies it), 'amg' (algebraic multigrid V-cycle, any
        SPD matrix), 'mg' (geometric: needs the structured grid, so pass
        ``hpcsolve.fem.Multigrid('mg', grid=hpcsolve.fem.StructuredGrid(nx, ny, free))``), a
        :class:`hpcsolve.fem.linalg.precond.Preconditioner`, or (NumPy backend) a
        ``scipy.sparse.linalg.LinearOperator`` or matrix applied as z = M @ r (M ~ A^-1, SciPy's convention;
        refused on a GPU backend: it would copy every residual to the host).
    M : optional
        SciPy's name for ``preconditioner`` (give one of the two).
    check_every : int, optional
        Iterations per block between host decisions (default 64; one CUDA graph per block on CuPy).
    true_every : int
        Also record the true residual every N iterations (0: never).
    multigrid : dict, optional
        Options of 'mg'/'amg' (:class:`hpcsolve.fem.linalg.precond.mg_options.MGOptions`: hierarchy, smoother,
        degree, coarse_size, amg 'sa'|'rs', flexible, ...); ``report.preconditioner`` shows the hierarchy.
    near_nullspace : ndarray, optional
        The n x k near-null space of 'amg' (and of the AMG that 'auto' may switch to): smoothed aggregation's
        candidates, e.g. the rigid-body modes of elasticity (``hpcsolve.fem.linalg.precond.aggregation.
        rigid_body_modes``); default the constant vector.
    **options
        :class:`hpcsolve.fem.linalg.cg_options.CGOptions` (inner_rtol, max_outer, stagnation, reliable_criterion,
        reliable_delta, reliable_patience, reliable_p, accumulate, kappa_limit, kappa_min_iterations,
        stall_checks).

    Returns
    -------
    x : ndarray
        The solution, float64, on the host.
    report : SolveReport
        ``converged``, ``reason``, ``iterations``, ``true_residual`` (float64, recomputed, never only the
        recursive one), ``recursive_residual``, ``residual_gap``, histories, timings, the preconditioner (and
        what 'auto' chose: ``chosen``, ``chosen_why``, ``preconditioner["auto"]``).

    Raises
    ------
    CaseError
        A bad precision, method, preconditioner or option (one message naming it and what is allowed); a matrix
        that is not square, finite and symmetric, or a vector of the wrong length or type.
    BackendError
        The backend cannot run here.
    TypeError
        SciPy's ``tol`` or a nonzero ``atol``: the message names ``rtol`` (the same relative measure; SciPy
        removed ``tol`` in 1.14).

    Notes
    -----
    Long because its docstring is the API reference (numpydoc sections, runnable examples); the body is one
    sequence: options, the direct path, the scaled system, the preconditioner's set-up, the CG run.

    Examples
    --------
    The 1D Poisson matrix tridiag(-1, 2, -1) of order 100, with the exact solution all ones:

    >>> import numpy as np
    >>> import scipy.sparse as sp
    >>> from hpcsolve.fem import solve
    >>> A = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(100, 100), format="csr")
    >>> b = A @ np.ones(100)
    >>> x, report = solve(A, b, rtol=1e-10, check_every=1)
    >>> report.converged, report.iterations        # CG in exact arithmetic: 50 distinct eigenvalues in b
    (True, 50)
    >>> report.chosen, report.method               # preconditioner "auto": this small matrix takes Jacobi-PCG
    ('jacobi', 'pcg-jacobi')
    >>> bool(report.true_residual <= 1e-10), bool(np.abs(x - 1).max() < 1e-12)
    (True, True)

    float32 alone stalls near kappa x its unit roundoff; mixed precision reaches the float64 target:

    >>> x, report = solve(A, b, precision="fp32", rtol=1e-10)
    >>> report.converged, bool(1e-7 < report.true_residual < 1e-5)
    (False, True)
    >>> x, report = solve(A, b, precision="mixed", rtol=1e-10)
    >>> report.converged, report.method, bool(report.true_residual <= 1e-10)
    (True, 'cg-reliable+jacobi', True)
    """
    t_start = time.perf_counter()
    preconditioner = _scipy_keywords(options, preconditioner, M)
    if preconditioner is None:
        preconditioner = DEFAULT_PRECONDITIONER
    policy = get_precision(precision, family="fem", field="precision")
    named = method is not None
    method = asked = _method_for(policy, method)
    opts = _options(rtol, maxiter, check_every, true_every, options)
    field = "M" if M is not None else "preconditioner"
    if _is_auto(preconditioner):
        pc, cycle, fixed_why = _auto_preconditioners(method, named, A, multigrid, field, near_nullspace)
    else:
        pc, cycle, fixed_why = _preconditioner(method, preconditioner, multigrid, field, near_nullspace), None, ""
    method = methods.with_preconditioner(method, registry.spec_of(pc).name)     # cg with jacobi: pcg-jacobi
    be = _backend_for(A, backend)

    if method.direct:
        host = A.to_scipy() if isinstance(A, DeviceCSR) else matrix.as_csr(A)
        b64, bnorm = _vector(b, "b", host.shape[0])
        if not isinstance(A, DeviceCSR):
            matrix.check_host(host)
        report = SolveReport(method=method.name, precision=policy.name, backend=be.name, rtol=opts.rtol)
        report.setup_time_s = time.perf_counter() - t_start
        if fixed_why:
            auto.note(report, registry.spec_of(pc).name, fixed_why)
        if bnorm == 0.0:
            return _zero_rhs(host.shape[0], report)
        return _spsolve(host, b64, report)       # (factor_solve scales b by its power of two)

    dA, rhs, b64, bnorm, x0 = _scaled_system(A, b, x0, be, policy)
    if isinstance(pc, precond.HostOperator):
        pc.scale = 2.0 ** -rhs.ea          # A was scaled by 2^ea for float32 (scaling.py): M ~ (2^ea A)^-1
    n = dA.global_n
    if maxiter is None:
        opts.maxiter = max(10 * n, 100)
    if bnorm == 0.0:
        report = SolveReport(method=method.label(pc), precision=policy.name, backend=be.name, rtol=opts.rtol)
        report.setup_time_s = time.perf_counter() - t_start
        return _zero_rhs(n, report)
    low = dA.low
    if dA.distributed:
        registry.check_distributed(registry.spec_of(pc))
    dA.ensure(policy.compute)
    pc.setup(dA)
    b_dev = low.to_device(dA.local(b64))
    x_dev = _solution_vector(dA, cycle if cycle is not None else pc, x0)     # "auto": the buffer a V-cycle keeps
    low.sync()
    setup = time.perf_counter() - t_start
    chooser = None
    if cycle is not None:         # "auto": Jacobi-PCG that may switch to the V-cycle (precond/auto.py)
        model = auto.CostModel.of_matrix(dA, policy, getattr(getattr(cycle, "options", None), "coarse_size", 400))
        chooser = auto.AutoRun(asked, model, pc, cycle, n)
        method = auto.method_for(method, chooser)
    x, report = cg.run(dA, b_dev, scaled.norm2(b64), x_dev, policy=policy, method=method, opts=opts, precond=pc)
    if chooser is not None:
        chooser.finish(report)
    elif fixed_why:
        auto.note(report, registry.spec_of(pc).name, fixed_why)
    report.setup_time_s = setup
    x = rhs.finish(dA.gather(x), report, b64, dA.to_scipy)
    if dA.distributed:
        report.notes.append(f"{len(dA.blocks)} MPI ranks, rows in blocks of {[r1 - r0 for r0, r1 in dA.blocks]}")
    return x, report


def _preconditioner(method: Method, preconditioner, multigrid, field: str,
                    near_nullspace=None) -> precond.Preconditioner:
    """The preconditioner object of a solve (``precond.get``); a method that always runs with one (pcg-jacobi: jacobi;
    spsolve: none) takes that one or none (``methods.check_preconditioner``)."""
    if method.preconditioner is None:
        return precond.get(preconditioner, multigrid=multigrid, field=field, near_nullspace=near_nullspace)
    if preconditioner is not None:
        methods.check_preconditioner(method, _name_of(preconditioner), field)
    return precond.get(method.preconditioner, multigrid=multigrid, field=field, near_nullspace=near_nullspace)


def _is_auto(preconditioner) -> bool:
    """Whether ``preconditioner=`` asks for "auto" (a name or the spec; its rule chooses another)."""
    if not isinstance(preconditioner, (str, registry.PreconditionerSpec)):
        return False
    try:
        return registry.get(preconditioner).choose is not None
    except CaseError:
        return False


def _auto_preconditioners(method: Method, named: bool, A, multigrid, field: str, near_nullspace=None):
    """(preconditioner, V-cycle, why) of "auto": where the method or the MPI ranks fix the choice
    (``registry.choose_fixed``), that one, None and the report's line; else the probe's Jacobi and the AMG object it
    may switch to (built now, so that bad ``multigrid`` options are refused before the solve; set up only at a switch)
    and "" (the probe says why)."""
    ranks = len(A.blocks) if isinstance(A, DeviceCSR) and A.distributed else 1
    situation = registry.Situation(method=method, named=named, ranks=ranks, unknowns=lambda: 0,
                                   structured=lambda: False)       # a user's matrix: no grid known
    fixed = registry.choose_fixed(situation)
    if fixed is not None:
        nns = near_nullspace if registry.get(fixed).near_nullspace else None      # a fixed Jacobi or none: unused
        return (precond.get(fixed, multigrid=multigrid, field=field, near_nullspace=nns), None,
                auto.fixed_reason(situation, fixed))
    return (precond.get(registry.AUTO_PROBE, field=field),
            precond.get(registry.AUTO_CYCLE, multigrid=multigrid, field=field, near_nullspace=near_nullspace), "")


def _name_of(preconditioner) -> str:
    """The name of what ``preconditioner=`` was given, without building it: an object's spec's, a registered name
    (or alias) as the registry spells it, else the value's own name."""
    if isinstance(preconditioner, precond.Preconditioner):
        return registry.spec_of(preconditioner).name
    if not isinstance(preconditioner, str):
        return type(preconditioner).__name__
    try:
        return registry.get(preconditioner).name
    except CaseError:
        return preconditioner


def _scaled_system(A, b, x0, be, policy):
    """(dA, RhsScale, b, ||b||, x0) of the system as the CG methods solve it: b scaled to max |b| ~ 1 by a power of
    two (exact; x scaled back after), a host matrix scaled too where a float32 working precision could not hold its
    entries (docs/design/fem_solvers.md, "Tiny and huge right-hand sides"); b, x0 float64 host vectors (x0 this block's)."""
    if isinstance(A, DeviceCSR):
        dA = A
        b64, bnorm = _vector(b, "b", dA.global_n)      # a distributed matrix (fem.distributed): the whole b
        rhs = RhsScale(b64)
        _check_range(dA, policy)
    else:
        csr = matrix.as_csr(A)
        b64, bnorm = _vector(b, "b", csr.shape[0])
        rhs = RhsScale(b64)
        dA = matrix.prepare(rhs.scale_matrix(csr, policy.compute), be.piece("fem.low_ops")())
    b64 = rhs.down(b64)
    if x0 is not None:
        x0, _ = _vector(x0, "x0", dA.global_n)
        x0 = dA.local(rhs.down(x0, "x0"))
    return dA, rhs, b64, bnorm, x0


def _check_range(dA: DeviceCSR, policy: Precision) -> None:
    """A prepared matrix is used as it is: refused for a float32 working precision where its entries are outside
    the range the float32 work needs (a host matrix would have been scaled)."""
    if np.dtype(policy.compute).itemsize < 8 and not matrix_in_range(dA.max_abs):
        lo, hi = MATRIX_RANGE
        raise CaseError.invalid("A", f"max |a_ij| = {dA.max_abs:.3e}", f"a largest entry in 2^{lo}..2^{hi} for "
                                f"precision {policy.name!r}",
                                why="float32 work on this prepared matrix would under- or overflow; prepare it scaled by "
                                    "a power of two (A * 2.0**k, then x * 2.0**k), pass the SciPy matrix (it is then "
                                    "scaled for you) or use precision 'fp64'")


def _solution_vector(dA: DeviceCSR, pc, x0):
    """The float64 solution vector on the device. With a costly general preconditioner it is one buffer kept
    on the matrix (the CG engines and CUDA graphs built around it are reused by the next solve)."""
    low = dA.low
    if not (not pc.identity and getattr(pc, "block", 0)):
        return low.to_device(x0) if x0 is not None else low.zeros(dA.n, F64)
    x = dA.cache.get("solution-vector")
    if x is None:
        x = dA.cache["solution-vector"] = low.zeros(dA.n, F64)
    if x0 is not None:
        low.scale_copy(low.to_device(x0), x, 1.0)
    else:
        low.fill_zero(x)
    return x


#: SciPy keywords that ``solve`` does not take, and what to pass instead
SCIPY_KEYWORDS = {
    "tol": "pass rtol= (the same relative measure ||b - A x|| / ||b||, here judged on the float64 true residual; "
           "SciPy renamed tol to rtol in 1.12 and removed tol in 1.14)",
    "atol": "solve() stops on the relative true residual only: pass rtol= (for an absolute target, rtol = atol / "
            "||b||)",
    "callback": "the residual history is in the report: report.history_recursive (every iteration) and "
                "report.history_true at report.history_true_iterations",
}


def _scipy_keywords(options: dict, preconditioner, M):
    """The preconditioner from ``preconditioner`` or SciPy's ``M``; SciPy's ``tol``/``atol``/``callback`` refused with
    a TypeError that says what to pass (``atol=0``/None, a no-op, is accepted and dropped)."""
    if options.get("atol", 1) in (0, 0.0, None):
        options.pop("atol")
    for k in SCIPY_KEYWORDS:
        if k in options:
            raise TypeError(f"solve() got an unexpected keyword argument {k!r}: {SCIPY_KEYWORDS[k]}")
    if M is None:
        return preconditioner
    if preconditioner is not None:
        raise TypeError("solve() got both M= and preconditioner=: they are the same argument (M is SciPy's name); "
                        "give one")
    return M


def _options(rtol, maxiter, check_every, true_every, options: dict) -> CGOptions:
    known = set(CGOptions.names()) - {"rtol", "maxiter", "check_every", "true_every"}
    for k in options:
        if k not in known:
            raise CaseError.invalid(k, options[k], ", ".join(sorted(known)), why="unknown solver option")
    kw = dict(options, rtol=rtol, true_every=true_every)
    if maxiter is not None:
        kw["maxiter"] = maxiter
    if check_every is not None:
        kw["check_every"] = check_every
    return CGOptions(**kw)


def _backend_for(A, backend) -> backends.Backend:
    if not isinstance(A, DeviceCSR):
        return backends.resolve(backend if backend is not None else "numpy", field="backend")
    if backend is not None and backends.resolve(backend, field="backend") is not A.backend:
        raise CaseError.invalid("backend", str(backend), f"{A.backend.name} (the backend A was prepared on)",
                                why="a prepared matrix lives on one backend's device")
    return A.backend


def _zero_rhs(n: int, report: SolveReport):
    report.converged, report.reason = True, "b = 0: x = 0 is exact"
    report.true_residual = report.recursive_residual = report.residual_gap = 0.0
    return np.zeros(n), report


#: the reference factorization's kinds, as reports name them
REFERENCE_SYMMETRIC = "SuperLU, reverse Cuthill-McKee then MMD ordering of A^T + A, symmetric mode (no pivoting)"
REFERENCE_GENERAL = "SuperLU, COLAMD ordering, partial pivoting"


def factor_solve(A, b, rtol: float = 1e-10) -> tuple[np.ndarray, float, str]:
    """(x, true relative residual, kind) of the float64 direct solve of a symmetric matrix with a positive diagonal.

    First SuperLU with the minimum-degree ordering of A^T + A in symmetric mode without pivoting (the choice for
    SPD FEM matrices: measured on a 261k-unknown 2D Laplacian, one core, 4.2 s and L+U 17.1 M nonzeros against
    8.6 s and 31.7 M with SciPy spsolve's default COLAMD), on the matrix renumbered by reverse Cuthill-McKee first:
    the minimum-degree ordering's own run time depends on the numbering it starts from, and on refined meshes it
    was most of the solve (2-core machine, the shipped cases: heat plate refine=3, 41.6k unknowns, 3.50 -> 0.23 s
    with the same fill; refine=4, 166k, 1.78 -> 1.51 s; Poisson nx=512, 261k, 2.65 -> 1.84 s, L+U 28.1 -> 21.2 M;
    Cook nx=128 0.24 -> 0.23 s; solutions equal to 3e-12). Pivoting on the diagonal alone is only safe for SPD
    matrices: a symmetric indefinite matrix (``solve`` accepts any symmetric one with a positive diagonal) can meet
    a zero or tiny pivot. So the result is checked: where the factorization fails or its true residual is above
    max(rtol, 1e-10), the general factorization (COLAMD, partial pivoting: ``spsolve``'s) is tried and the better of
    the two kept; the kind says which."""
    d = DirectSolve(A, b, rtol)
    d.factorize()
    return d.finish()


class DirectSolve:
    """:func:`factor_solve` in three steps, so that its factorization can run in another thread (the FEM run's
    reference beside a GPU solve, ``hpcsolve.fem.reference``): the constructor orders and permutes the matrix
    (reverse Cuthill-McKee: work that holds the GIL), :meth:`factorize` is SuperLU's factorization and triangular
    solves (which release it), :meth:`finish` the residual check and, where the symmetric factorization failed, the
    general one."""

    def __init__(self, A, b, rtol: float = 1e-10):
        from scipy.sparse.csgraph import reverse_cuthill_mckee    # late: it imports scipy.sparse.linalg (0.25 s)

        self.A, self.b, self.rtol = A, np.asarray(b, dtype=np.float64), rtol
        self.rhs = RhsScale(self.b)              # solved scaled to max |b| ~ 1 (a power of two), as solve() does
        self.b = self.rhs.down(self.b)
        self.csc = A.tocsc()
        self.bnorm = scaled.norm2(self.b)
        self.p = reverse_cuthill_mckee(self.csc.tocsr(), symmetric_mode=True)
        self.permuted = self.csc[self.p][:, self.p].tocsc()
        self.y = None

    def factorize(self) -> None:
        import scipy.sparse.linalg as spla    # late: its import costs about 0.25 s (measured), for spsolve only

        try:
            lu = spla.splu(self.permuted, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0,
                           options=dict(SymmetricMode=True))
            self.y = lu.solve(self.b[self.p])
        except RuntimeError:              # "Factor is exactly singular": a zero pivot without pivoting
            self.y = None

    def _residual(self, x) -> float:
        return scaled.ratio(scaled.norm2(self.b - self.A @ x), self.bnorm) if np.all(np.isfinite(x)) else float("nan")

    def finish(self) -> tuple[np.ndarray, float, str]:
        """(x, its true relative residual, the factorization's kind), x scaled back to the caller's b."""
        x, true, kind = self._best()
        out, back = self.rhs.up(x)
        if back is not None:          # x rounded into subnormals or overflowed: the residual of the x returned
            true = self._residual(back) if np.all(np.isfinite(out)) else float("inf")
        return out, true, kind

    def _best(self) -> tuple[np.ndarray, float, str]:
        import scipy.sparse.linalg as spla  # late: as in factorize (0.1 s of import, only for a direct solve)

        x, true = None, float("nan")
        if self.y is not None:
            x = np.empty(self.csc.shape[0], dtype=np.float64)
            x[self.p] = self.y
            true = self._residual(x)
        if math.isfinite(true) and true <= max(self.rtol, 1e-10):
            return x, true, REFERENCE_SYMMETRIC
        x2 = np.asarray(spla.spsolve(self.csc, self.b), dtype=np.float64)
        true2 = self._residual(x2)
        if x is None or not (true <= true2):
            return x2, true2, REFERENCE_GENERAL
        return x, true, REFERENCE_SYMMETRIC


def _spsolve(A, b, report: SolveReport):
    t0 = time.perf_counter()
    x, true, kind = factor_solve(A, b, report.rtol)
    report.time_s = time.perf_counter() - t0
    report.history_recursive = np.asarray([true])
    report.history_true_iterations = np.asarray([0])
    report.history_true = np.asarray([true])
    report.true_residual = report.recursive_residual = true
    report.residual_gap = 0.0
    report.converged = bool(math.isfinite(true) and true <= report.rtol)
    report.notes.append(f"direct solve: {kind}")
    report.reason = "direct solve (SuperLU)" if report.converged else (
        f"direct solve gave true residual {true:.3e} (singular or badly conditioned matrix)")
    return np.asarray(x, dtype=np.float64), report
