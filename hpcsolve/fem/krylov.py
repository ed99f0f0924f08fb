"""Conjugate gradients and mixed-precision refinement, written once against an ``Ops`` object.

Methods (``method=`` in :func:`hpcsolve.fem.solve`):

- ``cg`` / ``pcg-jacobi``: (Jacobi-preconditioned) CG entirely in the working precision (fp64 or
  fp32). It stops when the recursive residual meets rtol; then the float64 true residual decides
  whether that counts as converged (in fp32 it usually does not: the attainable accuracy is
  about kappa * u_32).
- ``ir-restarted``: restarted iterative refinement. Residual r = b - A x and update x += d in
  float64; the correction solves A d = r by float32 (P)CG on a float32 copy of A to an adaptive
  inner tolerance. Stops on the float64 true residual. Falls back to float64 CG (and says so)
  when refinement stagnates or diverges, or after ``max_outer`` (30) steps, as MAGMA's dsposv.
- ``cg-reliable``: CG with reliable updates (van der Vorst & Ye 2000; QUDA's mixed CG). float32
  recurrences accumulate a partial solution y; when the recursive residual has fallen by
  ``reliable_delta`` since the last update, x64 += y, the true residual b - A x64 is computed in
  float64 and substituted, y = 0, and the search direction is kept (re-orthogonalized against the
  new residual). Falls back to float64 CG if the true residual stops improving.

Host synchronization happens only at convergence checks (every ``check_every`` iterations): the
CG scalars stay device scalars in between (see :mod:`hpcsolve.fem.ops`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hpcsolve.fem.report import SolveReport

MIXED_METHODS = ("ir-restarted", "cg-reliable")
PLAIN_METHODS = ("cg", "pcg-jacobi")


@dataclass
class KrylovOptions:
    rtol: float = 1e-8             # target on the float64 true relative residual ||b - A x|| / ||b||
    maxiter: int = 10_000          # total Krylov iterations (inner + fallback)
    check_every: int = 10          # host-side convergence / replacement decisions every k iterations
    true_every: int = 0            # also record the float64 true residual every N iterations (0: only when deciding)
    preconditioner: str = "none"   # "none" | "jacobi"
    # ir-restarted
    inner_rtol: float = 1e-4       # smallest inner tolerance asked of float32 CG (it adapts upward)
    max_outer: int = 30            # refinement steps before falling back to float64 CG (MAGMA dsposv)
    stagnation: float = 0.9        # an outer step that reduces the true residual by less than this stagnates
    # cg-reliable
    reliable_delta: float = 0.1    # replace the residual when it has fallen by this factor since the last update
    reliable_patience: int = 8     # replacements without halving the best true residual -> fall back to fp64 CG
    reliable_criterion: str = "vdvye"  # "vdvye" (rounding estimate, van der Vorst & Ye) | "delta" (QUDA: r fell by reliable_delta)
    reliable_p: str = "reorth"     # p at a replacement: "reorth" | "correct" | "keep" | "rebeta" (docs/fem_gpu.md)
    accumulate: str = "replace"    # fold the float32 partial solution into x64: "replace" | "block" (every check)

    CHOICES = {"reliable_criterion": ("delta", "vdvye"), "reliable_p": ("reorth", "correct", "keep", "rebeta"),
               "accumulate": ("replace", "block")}

    def __post_init__(self):
        _check_choices(self, self.CHOICES)


def _check_choices(opts, choices: dict) -> None:
    from hpcsolve.errors import CaseError

    for name, allowed in choices.items():
        value = getattr(opts, name)
        if value not in allowed:
            raise CaseError.invalid(name, value, ", ".join(allowed))


class _Breakdown(Exception):
    """kind: "indefinite" (p.Ap <= 0: the matrix is not SPD) or "nonfinite" (overflow / NaN)."""

    def __init__(self, iteration: int, what: str, kind: str):
        self.iteration = iteration
        self.kind = kind
        super().__init__(what)


class _CGCore:
    """The (P)CG recurrences in one Ops. Holds p, q = A p, z = M^-1 r and the device scalars.

    One iteration is ``step`` (q = A p, alpha, x and r update) then ``direction`` (beta, p update);
    between the two the caller may check convergence or substitute the residual (``replaced``).
    """

    def __init__(self, ops, dinv=None):
        self.ops = ops
        self.dinv = dinv
        self.p = ops.vector()
        self.q = ops.vector()
        self.z = ops.vector() if dinv is not None else None
        self._pending: dict[str, list] = {"alpha": [], "beta": [], "pap": [], "rr": [], "rz": []}
        self.alpha: list[float] = []
        self.beta: list[float] = []
        self.rr: list[float] = []          # recursive r.r per iteration (host, after flush)
        self.iterations = 0
        self.rz = None
        self._rz_new = None

    def begin(self, r, rr=None):
        """Start a fresh Krylov space from residual r (p = M^-1 r)."""
        ops = self.ops
        if self.dinv is not None:
            self.rz = ops.precondition(self.dinv, r, self.z)
            ops.copy(self.z, self.p)
        else:
            self.rz = rr if rr is not None else ops.dot(r, r)
            ops.copy(r, self.p)

    def step(self, x, r):
        ops = self.ops
        pap = ops.spmv_dot(self.p, self.q)
        alpha = ops.div(self.rz, pap)
        self._rz_new, rr = ops.update_xr(x, r, self.p, self.q, alpha, self.dinv, self.z)
        self._pending["alpha"].append(alpha)
        self._pending["pap"].append(pap)
        self._pending["rz"].append(self.rz)
        self._pending["rr"].append(rr)
        self.iterations += 1

    def direction(self, r):
        ops = self.ops
        beta = ops.div(self._rz_new, self.rz)
        ops.update_p(self.p, self.z if self.dinv is not None else r, beta)
        self.rz = self._rz_new
        self._pending["beta"].append(beta)

    def replaced(self, r, rr, mode: str = "reorth"):
        """r now holds a substituted (true) residual with r.r = rr; the next ``direction`` forms p from it.

        mode "reorth" (QUDA): p made orthogonal to r, beta from the new r; "rebeta": beta from the new r;
        "correct": beta of the recursive r (p = M^-1 r_true + beta_rec p, as device_cg's block-end kernel);
        "keep": call ``direction`` with the recursive r before substituting it (``keep_direction``)."""
        ops = self.ops
        if mode == "reorth":
            rr_h = ops.to_float(rr)
            if rr_h > 0:
                ops.axpy(-ops.to_float(ops.dot(r, self.p)) / rr_h, r, self.p)
        if self.dinv is not None:
            rz = ops.precondition(self.dinv, r, self.z)
        else:
            rz = rr
        if mode != "correct":
            self._rz_new = rz
        if self._pending["rr"]:
            self._pending["rr"][-1] = rr

    def keep_direction(self, r):
        """reliable_p = "keep": p from the recursive r now; returns a function to call after r is replaced."""
        self.direction(r)

        def after(r_true, rr):
            ops = self.ops
            self.rz = ops.precondition(self.dinv, r_true, self.z) if self.dinv is not None else rr
            if self._pending["rr"]:
                self._pending["rr"][-1] = rr
        return after

    def flush(self) -> None:
        """Bring the pending device scalars to the host (one sync) and check for breakdown."""
        ops = self.ops
        first = len(self.rr)
        host = {k: ops.scalars_to_host(v) if v else np.zeros(0) for k, v in self._pending.items()}
        for v in self._pending.values():
            v.clear()
        self.alpha.extend(host["alpha"].tolist())
        self.beta.extend(host["beta"].tolist())
        self.rr.extend(host["rr"].tolist())
        pap, rz, rr = host["pap"], host["rz"], host["rr"]
        # p.Ap = 0 with r.z = 0 is the exact solution (div gives alpha = 0), not a breakdown
        bad_nf = np.flatnonzero(~np.isfinite(pap) | ~np.isfinite(rr))
        bad_ind = np.flatnonzero((pap < 0) | ((pap == 0) & (rz != 0)))
        if bad_nf.size and (not bad_ind.size or bad_nf[0] < bad_ind[0]):
            i = int(bad_nf[0])
            raise _Breakdown(first + i + 1, f"p.Ap = {pap[i]:.3e}, r.r = {rr[i]:.3e} at iteration {first + i + 1} "
                             f"(overflow or NaN in {ops.dtype.name})", "nonfinite")
        if bad_ind.size:
            i = int(bad_ind[0])
            self.alpha = self.alpha[: first + i]   # keep the kappa estimate of the valid coefficients
            self.beta = self.beta[: first + i]
            raise _Breakdown(first + i + 1, f"p.Ap = {pap[i]:.3e} <= 0 at iteration {first + i + 1}: the matrix is "
                             "not symmetric positive definite (indefinite, or singular with an inconsistent "
                             "right-hand side)", "indefinite")

    def kappa_estimate(self) -> float:
        return lanczos_kappa(self.alpha, self.beta)


class ReplacementWatch:
    """What cg-reliable decides after each residual replacement, shared by the seam (this module) and
    the fused device path (device_cg): converged, non-finite, or stagnating (``reliable_patience``
    replacements without halving the best true residual; with the van der Vorst-Ye criterion only
    replacements after which the recurrences had claimed a halving count)."""

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
    """ir-restarted's decisions between refinement steps, shared by the seam (this module) and the
    fused device path (device_cg): the inner tolerance to ask for (what is still needed, but not less
    than float32 has been seen to deliver) and, after a step, converged / diverged / stagnated."""

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


class _History:
    """Residual histories of one solve, relative to ||b||."""

    def __init__(self):
        self.recursive: list[float] = []
        self.true_its: list[int] = []
        self.true: list[float] = []

    def add_true(self, it: int, value: float):
        self.true_its.append(int(it))
        self.true.append(float(value))


class _Problem:
    """The float64 side every method shares: b, ||b||, the float64 Ops and a true-residual helper."""

    def __init__(self, ops64, b64: np.ndarray):
        self.ops64 = ops64
        self.b = ops64.vector(b64)
        self.bnorm = float(np.linalg.norm(b64))
        self.r64 = ops64.vector()
        self._x64 = None

    def true_residual(self, x) -> float:
        """||b - A x|| / ||b|| in float64 (x of any working precision is cast first)."""
        o = self.ops64
        if np.dtype(getattr(x, "dtype", o.dtype)) != o.dtype:
            if self._x64 is None:
                self._x64 = o.vector()
            o.copy(x, self._x64)
            x = self._x64
        return math.sqrt(max(o.to_float(o.residual(self.b, x, self.r64)), 0.0)) / self.bnorm


def _plain_cg(prob: _Problem, ops, x, opts: KrylovOptions, hist: _History, maxiter: int, it0: int = 0):
    """(P)CG in ``ops``'s precision from the initial guess held in x (updated in place).

    Returns (iterations, reason, converged, kappa). Converged only if the float64 true residual met rtol.
    """
    dinv = ops.inverse_diagonal() if opts.preconditioner == "jacobi" else None
    core = _CGCore(ops, dinv)
    b_w = prob.b if ops.dtype == prob.ops64.dtype else ops.vector(prob.ops64.to_host(prob.b))
    r = ops.vector()
    rr0 = ops.residual(b_w, x, r)
    core.begin(r, rr0)
    res0 = math.sqrt(max(ops.to_float(rr0), 0.0)) / prob.bnorm
    hist.recursive.append(res0)
    t = prob.true_residual(x)
    hist.add_true(it0, t)
    if t <= opts.rtol:
        return 0, "true residual met rtol at the initial guess", True, float("nan")
    next_true = opts.true_every if opts.true_every > 0 else None
    reason, converged = "maxiter reached", False
    base = len(hist.recursive)   # history entries before this run's first iteration
    try:
        while core.iterations < maxiter:
            core.step(x, r)
            it = core.iterations
            if it % opts.check_every == 0 or it == maxiter:
                core.flush()
                hist.recursive.extend(math.sqrt(max(v, 0.0)) / prob.bnorm for v in core.rr[len(hist.recursive) - base:])
                rel = hist.recursive[-1]
                if next_true is not None and it >= next_true:
                    hist.add_true(it0 + it, prob.true_residual(x))
                    next_true += opts.true_every
                if rel <= opts.rtol or rel == 0.0:
                    t = prob.true_residual(x)
                    if not hist.true_its or hist.true_its[-1] != it0 + it:
                        hist.add_true(it0 + it, t)
                    if t <= opts.rtol:
                        reason, converged = "true residual met rtol", True
                    else:
                        reason = (f"the recursive residual met rtol but the float64 true residual stalled at {t:.3e} "
                                  f"(attainable accuracy of CG in {ops.dtype.name} is about kappa * unit roundoff)")
                    break
            core.direction(r)
    except _Breakdown as exc:
        reason = f"breakdown: {exc}"
    if len(hist.recursive) - base < len(core.rr):
        hist.recursive.extend(math.sqrt(max(v, 0.0)) / prob.bnorm for v in core.rr[len(hist.recursive) - base:])
    return core.iterations, reason, converged, core.kappa_estimate()


def solve_plain(prob: _Problem, ops_w, x0: np.ndarray, opts: KrylovOptions, report: SolveReport):
    hist = _History()
    x = ops_w.vector(x0)
    its, reason, converged, kappa = _plain_cg(prob, ops_w, x, opts, hist, opts.maxiter)
    report.iterations = its
    report.kappa_estimate = kappa
    return x, hist, reason


def _fallback_fp64(prob: _Problem, x64, opts: KrylovOptions, hist: _History, report: SolveReport, why: str):
    """Finish with float64 (P)CG from the current float64 solution; say so in the report."""
    budget = max(opts.maxiter - report.iterations, 1)
    report.fallback = f"fell back to float64 CG: {why}"
    report.notes.append(report.fallback)
    its, reason, converged, kappa = _plain_cg(prob, prob.ops64, x64, opts, hist, budget, it0=report.iterations)
    report.iterations += its
    return reason + " (in the float64 fallback)"


def solve_ir_restarted(prob: _Problem, ops32, x0: np.ndarray, opts: KrylovOptions, report: SolveReport):
    o64 = prob.ops64
    hist = _History()
    x64 = o64.vector(x0)
    d = ops32.vector()
    r32 = ops32.vector()
    dinv = ops32.inverse_diagonal() if opts.preconditioner == "jacobi" else None
    res = math.sqrt(max(o64.to_float(o64.residual(prob.b, x64, prob.r64)), 0.0)) / prob.bnorm
    hist.recursive.append(res)
    hist.add_true(0, res)
    watch = RefinementWatch(opts, res)
    kappa = float("nan")
    longest = 0
    reason = ""
    for outer in range(1, opts.max_outer + 1):
        res = watch.res
        if res <= opts.rtol:
            return x64, hist, "true residual met rtol"
        if not math.isfinite(res):
            break
        if report.iterations >= opts.maxiter:
            return x64, hist, "maxiter reached"
        tol = watch.inner_tol()
        rnorm = res * prob.bnorm
        ops32.copy(prob.r64, r32, scale=1.0 / rnorm)   # unit-norm right-hand side: no fp32 range trouble
        ops32.zero(d)
        core = _CGCore(ops32, dinv)
        core.begin(r32)
        indefinite = False
        try:
            while core.iterations < opts.maxiter - report.iterations:
                core.step(d, r32)
                if core.iterations % opts.check_every == 0:
                    core.flush()
                    if math.sqrt(max(core.rr[-1], 0.0)) <= tol:
                        break
                core.direction(r32)
            core.flush()
        except _Breakdown as exc:
            reason = f"breakdown in the float32 inner solve: {exc}"
            indefinite = exc.kind == "indefinite"
        hist.recursive.extend(math.sqrt(max(v, 0.0)) * res for v in core.rr)
        report.iterations += core.iterations
        report.outer_iterations = outer
        if core.iterations > longest:
            longest, kappa = core.iterations, core.kappa_estimate()
        report.kappa_estimate = kappa
        if indefinite:
            return x64, hist, reason   # float64 CG would break down too
        if reason:
            break
        o64.axpy(rnorm, d, x64)
        new = math.sqrt(max(o64.to_float(o64.residual(prob.b, x64, prob.r64)), 0.0)) / prob.bnorm
        hist.add_true(report.iterations, new)
        done, reason = watch.after(outer, tol, core.iterations, new, report.notes)
        if done:
            return x64, hist, done
        if reason:
            break
    else:
        reason = f"no convergence after {opts.max_outer} refinement steps (MAGMA dsposv's limit)"
    if report.iterations >= opts.maxiter:
        return x64, hist, "maxiter reached"
    return x64, hist, _fallback_fp64(prob, x64, opts, hist, report, reason)


def solve_cg_reliable(prob: _Problem, ops32, x0: np.ndarray, opts: KrylovOptions, report: SolveReport):
    o64 = prob.ops64
    hist = _History()
    x64 = o64.vector(x0)
    y = ops32.vector()                     # float32 partial solution since the last reliable update
    r = ops32.vector()
    rr64 = o64.residual(prob.b, x64, prob.r64)
    res = math.sqrt(max(o64.to_float(rr64), 0.0)) / prob.bnorm
    hist.recursive.append(res)
    hist.add_true(0, res)
    if res <= opts.rtol:
        return x64, hist, "true residual met rtol at the initial guess"
    ops32.copy(prob.r64, r)
    dinv = ops32.inverse_diagonal() if opts.preconditioner == "jacobi" else None
    core = _CGCore(ops32, dinv)
    core.begin(r)
    max_r = res                            # largest recursive residual since the last update (QUDA's maxrr)
    min_rec = res                          # smallest recursive residual since the last update
    next_true = opts.true_every if opts.true_every > 0 else None
    reason = "maxiter reached"
    fallback_why = ""
    vdvye = opts.reliable_criterion == "vdvye"
    watch = ReplacementWatch(opts, vdvye, res)
    if vdvye:
        rate = _RoundingEstimate(o64, res)
    last_check = 0
    try:
        while core.iterations < opts.maxiter:
            core.step(y, r)
            it = core.iterations
            skip_direction = False
            if it % opts.check_every == 0 or it == opts.maxiter:
                core.flush()
                new = [math.sqrt(max(v, 0.0)) / prob.bnorm for v in core.rr[len(hist.recursive) - 1:]]
                hist.recursive.extend(new)
                rel = hist.recursive[-1]
                min_rec = min([min_rec, *new])
                if vdvye:
                    ynorm = math.sqrt(max(ops32.to_float(ops32.dot(y, y)), 0.0)) / prob.bnorm
                    due = rate.due(it - last_check, ynorm, new, rel) or rel <= opts.rtol
                else:
                    due = rel <= opts.reliable_delta * max_r or rel <= opts.rtol
                last_check = it
                if due:
                    o64.axpy(1.0, y, x64)
                    ops32.zero(y)
                    rr64 = o64.residual(prob.b, x64, prob.r64)
                    t = math.sqrt(max(o64.to_float(rr64), 0.0)) / prob.bnorm
                    hist.add_true(it, t)
                    report.outer_iterations += 1
                    if vdvye:
                        rate.reset(t)
                    done, fallback_why = watch.after(t, min_rec, report.outer_iterations)
                    if done or fallback_why:
                        reason = done or reason
                        break
                    if opts.reliable_p == "keep":
                        after = core.keep_direction(r)
                        ops32.copy(prob.r64, r)
                        after(r, ops32.dot(r, r))
                        skip_direction = True
                    else:
                        ops32.copy(prob.r64, r)
                        core.replaced(r, ops32.dot(r, r), opts.reliable_p)
                    hist.recursive[-1] = t
                    max_r = min_rec = t
                else:
                    max_r = max(max_r, max(new) if new else rel)
                    if opts.accumulate == "block":
                        o64.axpy(1.0, y, x64)
                        ops32.zero(y)
                if next_true is not None and it >= next_true:
                    if report.outer_iterations == 0 or hist.true_its[-1] != it:
                        x_now = o64.vector()
                        o64.copy(x64, x_now)
                        o64.axpy(1.0, y, x_now)
                        hist.add_true(it, prob.true_residual(x_now))
                    next_true += opts.true_every
            if not skip_direction:
                core.direction(r)
    except _Breakdown as exc:
        if exc.kind == "indefinite":
            reason = f"breakdown: {exc}"
        else:
            fallback_why = f"breakdown in the float32 recurrences: {exc}"
    o64.axpy(1.0, y, x64)
    ops32.zero(y)
    report.iterations = core.iterations
    report.kappa_estimate = core.kappa_estimate()
    if fallback_why and report.iterations < opts.maxiter:
        return x64, hist, _fallback_fp64(prob, x64, opts, hist, report, fallback_why)
    if fallback_why:
        reason = fallback_why
    return x64, hist, reason


U32 = 2.0 ** -24


class _RoundingEstimate:
    """van der Vorst & Ye (2000) residual-replacement test, with their group update (x64 += y).

    d accumulates an estimate of the rounding error of the float32 recurrences since the last
    replacement, relative to ||b||: d += u32 (k N ||A|| ||y|| + sum_j ||r_j||) over the k iterations
    since the last check (N = mean nonzeros per row, ||A|| <= 2 max |a_ii| for a diagonally dominant
    matrix, ||y|| at the check). A replacement is due when d > sqrt(u32) ||r|| and d > 1.1 d_init
    (d_init = u32 ||r|| after the last replacement): the residual gap may then be sqrt(u32) of ||r||.
    Used by krylov (at checks) and device_cg (at block ends) alike."""

    def __init__(self, ops64, res0: float, norm_a: float | None = None, row_nnz: float | None = None):
        if norm_a is None or row_nnz is None:
            A = getattr(ops64, "A", None)
            if A is not None and hasattr(A, "nnz"):
                row_nnz = A.nnz / (A.shape[0] if hasattr(A, "shape") else A.n)
            else:
                row_nnz = 5.0
            dinv = ops64.to_host(ops64.inverse_diagonal())
            norm_a = 2.0 / float(np.min(np.abs(dinv)))
        self.norm_a, self.row_nnz = float(norm_a), float(row_nnz)
        self.reset(res0)

    def reset(self, res: float):
        self.d = self.d_init = U32 * res

    def due(self, k: int, ynorm: float, recent, rel: float) -> bool:
        self.d += U32 * (k * self.row_nnz * self.norm_a * ynorm + float(sum(recent)))
        return self.d > math.sqrt(U32) * rel and self.d > 1.1 * self.d_init
