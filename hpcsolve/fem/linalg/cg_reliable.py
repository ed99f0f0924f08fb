"""``cg-reliable``: CG with reliable updates (van der Vorst & Ye 2000; QUDA's mixed CG).

float32 recurrences accumulate a partial solution y; when a replacement is due (``reliable_criterion``), x64 += y,
the true residual b - A x64 is computed in float64 and substituted, y = 0, and the search direction is kept
(``reliable_p``). Falls back to float64 CG when the true residual stops improving (``ReplacementWatch``); promotes
the recurrences to float64 (keeping x, p and the Krylov space) when the Lanczos kappa estimate says float32 cannot
reduce the residual (``kappa_limit``).
"""

from __future__ import annotations

import math
import time

import numpy as np

from hpcsolve.fem.linalg.cg_decisions import Breakdown, ReplacementWatch, RoundingEstimate, lanczos_extremes
from hpcsolve.fem.linalg.cg_engine import CGEngine
from hpcsolve.fem.linalg.cg_options import F32, F64, U32
from hpcsolve.fem.linalg.cg_run import SolveState, fallback_fp64, promote, residual_scale, run_cg, short_block

SHORT_WINDOW = 1e-5    # cg-reliable with a V-cycle: replace once the recursive residual fell this far


def replace_residual(run: SolveState, eng: CGEngine, mode: str) -> float:
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


def solve_reliable(run: SolveState):
    """cg-reliable from run.x64: (x, reason); x64 is the solution."""
    x_fp64 = run.opts.accumulation.wide_x
    eng = run.engine(F32, x=run.x64 if x_fp64 else None)    # eng.x is y: the float32 partial solution
    # (or x64 itself, accumulate="fp64"). The float32 residual is scaled to about unit norm (a power of two, kept for
    # the whole solve; y is scaled back when folded): a tiny or huge b would under- or overflow in float32
    res = run.true_residual(run.x64)
    scale = 1.0 if x_fp64 else residual_scale(res * run.bnorm)
    rr = eng.set_residual_from(run.x64, run.b, precondition=False, scale=scale)
    res = math.sqrt(max(rr, 0.0)) / run.bnorm
    run.rec.append(res)
    run.add_true(0, res)
    if res <= run.opts.rtol:
        return run.x64, "true residual met rtol at the initial guess"
    eng.start_from_r()
    loop = _ReliableLoop(run, eng, res)
    loop.iterate()
    return loop.finish()


class _ReliableLoop:
    """The blocks of float32 iterations of one cg-reliable solve and the decisions between them: a kappa check
    (promote to float64 recurrences), a replacement due (fold y into x64, substitute the true residual), the
    ``true_every`` records. ``reason`` / ``fallback_why`` / ``promote_why`` say how the loop ended."""

    def __init__(self, run: SolveState, eng: CGEngine, res: float):
        opts = run.opts
        self.run, self.eng, self.opts, self.low, self.rep = run, eng, opts, run.low, run.report
        self.x_fp64 = opts.accumulation.wide_x
        self.res = res
        self.max_r = self.min_rec = res
        self.reason, self.fallback_why, self.promote_why = "maxiter reached", "", ""
        self.next_kappa = opts.kappa_min_iterations
        self.next_true = opts.true_every or None
        self.vdvye = opts.reliable_criterion == "vdvye"
        self.watch = ReplacementWatch(opts, self.vdvye, res)
        self.rate = None    # vdvye: ||A|| from the largest Ritz value after the first block (no host copy of A needed)
        self.ytmp = self.low.zeros(1, F64)
        self.short = short_block(eng)   # a V-cycle preconditioner: replace by a fixed window, restart at replacements

    def fold(self) -> None:
        if not self.x_fp64:
            self.eng.fold_into(self.run.x64)

    def phase(self, name: str, t_start: float) -> None:
        self.rep.phase_time_s[name] = self.rep.phase_time_s.get(name, 0.0) + time.perf_counter() - t_start

    def iterate(self) -> None:
        """Blocks until convergence, maxiter, a promotion, a fallback or a breakdown."""
        try:
            while self.eng.iterations < self.opts.maxiter:
                if self._block():
                    break
        except Breakdown as exc:
            if exc.kind == "indefinite":
                self.reason = f"breakdown: {exc}"           # float64 CG would break down too
            else:
                self.fallback_why = f"breakdown in the float32 recurrences: {exc}"

    def _block(self) -> bool:
        """One block of iterations and the decisions after it; True: the loop ends."""
        opts, eng, run = self.opts, self.eng, self.run
        target = opts.reliable_delta * self.max_r if not self.vdvye else opts.rtol
        if self.short:
            target = max(opts.rtol, SHORT_WINDOW * self.max_r)
        cap = self.next_true - eng.iterations if self.next_true else None
        k = min(run.block_size(eng, target, cap), opts.maxiter - eng.iterations)
        eng.launch(k)
        rr = eng.read(k)
        new = (np.sqrt(np.maximum(rr, 0.0)) / run.bnorm).tolist()
        run.rec.extend(new)
        rel, it = run.rec[-1], eng.iterations
        self.min_rec = min(self.min_rec, min(new))
        if opts.kappa_limit and it >= self.next_kappa and self._kappa_too_large(it):
            return True
        due = self._due(k, new, rel, target)
        if due:
            if self._replace(it):
                return True
        else:
            self.max_r = max(self.max_r, max(new))
            if opts.accumulation.every_block:
                self.fold()
        if self.next_true and it >= self.next_true:
            if not due:
                run.add_true(it, run.true_residual(run.x64, plus=None if self.x_fp64 else eng.x))
            self.next_true += opts.true_every
        return False

    def _kappa_too_large(self, it: int) -> bool:
        """The Lanczos kappa check after ``it`` iterations; True (and promote_why set): promote to float64."""
        opts = self.opts
        t_phase = time.perf_counter()
        kap = self.eng.kappa()
        self.phase("kappa", t_phase)
        self.rep.kappa_estimate = kap
        # at doublings of the iteration count: the Lanczos solve on the host costs O(iterations)
        # (about 4 ms at 7,500 on a 2-core CPU), checks every it / 8 cost 2048^2 ~10% of its time
        self.next_kappa = max(2 * it, it + opts.check_every)
        if math.isfinite(kap) and kap > opts.kappa_limit:
            self.promote_why = (f"Lanczos kappa estimate {kap:.2e} after {it} iterations exceeds {opts.kappa_limit:.1e} "
                                f"(kappa * u32 = {kap * U32:.2f}): float32 recurrences would cost more iterations "
                                "than they save")
            return True
        return False

    def _due(self, k: int, new: list, rel: float, target: float) -> bool:
        """Whether a replacement is due after a block of k iterations (recursive residuals ``new``)."""
        opts, run, low, eng = self.opts, self.run, self.low, self.eng
        if self.short:
            # each V-cycle iteration gains about a digit: the float32 recurrences are trusted for
            # SHORT_WINDOW below the last true residual, then the true residual is substituted
            return rel <= target
        if not self.vdvye:
            return rel <= opts.reliable_delta * self.max_r or rel <= opts.rtol
        if self.x_fp64:
            ynorm = 0.0
        else:
            t_phase = time.perf_counter()
            low.fill_zero(self.ytmp)
            low.dot(eng.x, eng.x, self.ytmp, 0)
            ynorm = math.sqrt(max(float(low.to_host(self.ytmp)[0]), 0.0)) / run.bnorm / eng.rscale
            self.phase("y_norm", t_phase)
        if self.rate is None:
            hi = lanczos_extremes(eng.alpha, eng.beta)[1] if run.precond.identity else math.nan
            if not (math.isfinite(hi) and hi > 0):   # preconditioned: T is of M A; bound ||A|| by 2 max a_ii
                hi = 2.0 * run.A.max_diag
            self.rate = RoundingEstimate(self.res, norm_a=hi, row_nnz=run.A.row_nnz)
        return self.rate.due(k, ynorm, new, rel) or rel <= opts.rtol

    def _replace(self, it: int) -> bool:
        """x64 += y, the true residual substituted; True: converged or falling back (the loop ends)."""
        run, rep = self.run, self.rep
        t_phase = time.perf_counter()
        self.fold()                                           # x64 += y; y = 0
        rr = replace_residual(run, self.eng, "restart" if self.short else self.opts.reliable_p)   # r = b - A x64
        self.phase("replace", t_phase)
        t = math.sqrt(max(rr, 0.0)) / run.bnorm
        run.add_true(it, t)
        rep.outer_iterations += 1
        run.rec[-1] = t
        if self.rate is not None:
            self.rate.reset(t)
        done, self.fallback_why = self.watch.after(t, self.min_rec, rep.outer_iterations)
        if done or self.fallback_why:
            self.reason = done or self.reason
            return True
        self.max_r = self.min_rec = t
        return False

    def finish(self):
        """(x, reason) after the loop: converged, promoted to float64 recurrences, or fallen back to float64 CG."""
        run, rep, eng, opts = self.run, self.rep, self.eng, self.opts
        rep.iterations = eng.iterations
        if rep.kappa_estimate != rep.kappa_estimate:
            rep.kappa_estimate = eng.kappa()
        if self.reason == "true residual met rtol":
            self.fold()
            return run.x64, self.reason
        if self.promote_why and eng.iterations < opts.maxiter:
            eng64, t = promote(run, eng, self.promote_why)
            if t <= opts.rtol:
                return run.x64, "true residual met rtol"
            try:
                reason, _ = run_cg(run, eng64, opts.maxiter - eng.iterations, eng.iterations)
            except Breakdown as exc:
                reason = f"breakdown: {exc}"
            rep.iterations = eng64.iterations
            return run.x64, reason + " (float64 recurrences after promotion)"
        self.fold()
        if self.fallback_why and eng.iterations < opts.maxiter:
            return run.x64, fallback_fp64(run, self.fallback_why)
        return run.x64, self.fallback_why or self.reason
