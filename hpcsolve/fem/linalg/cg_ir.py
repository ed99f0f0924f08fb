"""``ir-restarted``: restarted iterative refinement.

Residual and update in float64; the correction solves A d = r with float32 CG to an adaptive inner tolerance
(``RefinementWatch``). Falls back to float64 CG on stagnation, divergence or after ``max_outer`` steps, as MAGMA's
dsposv.
"""

from __future__ import annotations

import math

import numpy as np

from hpcsolve.fem.linalg.cg_decisions import Breakdown, RefinementWatch
from hpcsolve.fem.linalg.cg_options import F32
from hpcsolve.fem.linalg.cg_run import SolveState, fallback_fp64, residual_scale, short_block


def _scaled_residual(eng, run: SolveState) -> float:
    """r = b - A x64 into the float32 engine, scaled by the power of two that keeps its norm near 1
    (``residual_scale``); returns ||r|| / ||b|| (float64). One residual pass where the scale stays (the usual case:
    no extra pass over A per outer step), a second where it changes."""
    norm = math.sqrt(max(eng.set_residual_from(run.x64, run.b, precondition=False), 0.0))
    scale = residual_scale(norm)
    if scale != eng.rscale:
        eng.set_residual_from(run.x64, run.b, precondition=False, scale=scale)
    return norm / run.bnorm


def solve_ir(run: SolveState):
    """ir-restarted from run.x64: (x, reason); x64 is the solution."""
    low, opts, rep = run.low, run.opts, run.report
    eng = run.engine(F32)
    # each inner solve solves for r scaled to about unit norm (a power of two) and its correction is scaled back
    res = _scaled_residual(eng, run)
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
                k = eng.K if not short_block(eng) else run.block_size(eng, tol * inner0 / run.bnorm)
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
        eng.fold_into(run.x64)
        new = _scaled_residual(eng, run)
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
    return run.x64, fallback_fp64(run, reason)
