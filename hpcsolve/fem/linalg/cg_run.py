"""One solve's shared state (:class:`SolveState`: the matrix, float64 b and x, options, histories, report, the
engines and the block sizes), the CG loop every method finishes with (:func:`run_cg`), plain CG in one precision
(:func:`solve_plain`), and the two ways a mixed-precision method hands over to float64 recurrences
(:func:`fallback_fp64`, :func:`promote`)."""

from __future__ import annotations

import math

import numpy as np

from hpcsolve.fem.linalg.cg_decisions import Breakdown
from hpcsolve.fem.linalg.cg_engine import CGEngine
from hpcsolve.fem.linalg.cg_options import F64, CGOptions
from hpcsolve.fem.linalg.report import SolveReport

FIRST_SHORT_BLOCK = 4  # a V-cycle preconditioner, before the rate is known: blocks of this many iterations
SCALE_FREE_RANGE = 2.0 ** 20   # a float32 residual of norm within [1 / this, this] is kept unscaled (tiny residuals
                               # and their squares underflow float32 below it: 1e-20 b ended in "not SPD")


def residual_scale(norm: float) -> float:
    """The power of two that brings a residual of 2-norm ``norm`` to about 1 for a float32 engine (``rscale``); 1.0
    where ``norm`` is within SCALE_FREE_RANGE (or not a positive finite number)."""
    if not (math.isfinite(norm) and norm > 0) or 1.0 / SCALE_FREE_RANGE <= norm <= SCALE_FREE_RANGE:
        return 1.0
    # math.ldexp: exact for any positive norm (2.0 ** 1063 for a subnormal norm would raise OverflowError): the exponent is
    # clamped to the float64 range (the solve scales b to max |b| ~ 1 first, so the residual is far from it)
    return math.ldexp(1.0, max(-1000, min(1000, -round(math.log2(norm)))))


class SolveState:
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
        if not short_block_of(self.precond):
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
        short = short_block(eng)
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


def short_block(eng: CGEngine) -> int:
    """The block length a costly general preconditioner asks for (``Preconditioner.block``), else 0."""
    return short_block_of(eng.general) if eng.general is not None else 0


def short_block_of(precond) -> int:
    return 0 if precond is None or precond.identity else int(getattr(precond, "block", 0) or 0)


def run_cg(run: SolveState, eng: CGEngine, maxiter: int, it0: int, target: float | None = None):
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


def solve_plain(run: SolveState, dtype):
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
        reason, _ = run_cg(run, eng, opts.maxiter, 0)
    except Breakdown as exc:
        reason = f"breakdown: {exc}"
    run.report.iterations = eng.iterations
    run.report.kappa_estimate = eng.kappa()
    return eng.x, reason


def fallback_fp64(run: SolveState, why: str) -> str:
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
        reason, _ = run_cg(run, eng, max(run.opts.maxiter - it0, 1), it0)
    except Breakdown as exc:
        reason = f"breakdown: {exc}"
    rep.iterations = eng.iterations
    return reason + " (in the float64 fallback)"


def promote(run: SolveState, eng32: CGEngine, why: str):
    """Continue from the float32 recurrences in float64: x64 += y, r = b - A x64, p kept (cast)."""
    low = run.low
    if eng32.x is not run.x64:
        eng32.fold_into(run.x64)
    eng64 = run.engine(F64, x=run.x64)
    low.scale_copy(eng32.p, eng64.p, 1.0 / eng32.rscale)         # the float32 vectors carry rscale
    low.scale_copy(eng32.r, eng64.r, 1.0 / eng32.rscale)
    eng64.iterations = eng32.iterations
    eng64.alpha, eng64.beta = list(eng32.alpha), list(eng32.beta)
    rr = eng64.replace_residual(run.x64, run.b)
    run.report.fallback = f"promoted the recurrences to float64 (x, p and the Krylov space kept): {why}"
    run.report.notes.append(run.report.fallback)
    t = math.sqrt(max(rr, 0.0)) / run.bnorm
    run.add_true(eng64.iterations, t)
    return eng64, t

