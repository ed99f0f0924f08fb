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
Bytes per iteration: :func:`hpcsolve.fem.linalg.cg_engine.bytes_per_iteration`; docs/design/fem_gpu.md.

This module is the entry (:func:`run`); the pieces live beside it by job: ``methods`` (the method objects: what
each name means and its algorithm), ``cg_options`` (:class:`CGOptions`), ``cg_decisions`` (breakdowns, the watches of the mixed methods, Lanczos estimates), ``cg_engine``
(:class:`~hpcsolve.fem.linalg.cg_engine.CGEngine`), ``cg_run`` (one solve's state, plain CG, the float64 fallback
and promotion), ``cg_reliable`` and ``cg_ir`` (the two mixed-precision methods).
"""

from __future__ import annotations

import time

import numpy as np

from hpcsolve.core.errors import CaseError
from hpcsolve.fem.linalg import methods
from hpcsolve.fem.linalg.cg_options import ACCUMULATIONS, CGOptions
from hpcsolve.fem.linalg.cg_run import SolveState
from hpcsolve.fem.linalg.report import SolveReport


def run(A, b64, bnorm: float, x64, *, policy, method, opts: CGOptions, precond) -> tuple[np.ndarray, SolveReport]:
    """Solve A x = b with ``method`` (a :class:`hpcsolve.fem.linalg.methods.Method` or its name) on A's device. A: a
    checked DeviceCSR; b64, x64: float64 device vectors (x64 is updated in place); bnorm = ||b|| > 0. Returns (x as a
    float64 NumPy array, SolveReport with everything but setup_time_s)."""
    low = A.low
    method = methods.get(method)
    if method.algorithm is None or method.mixed != bool(policy.refinement):
        raise ValueError(f"method {method.name!r} with precision {policy.name!r}")
    report = SolveReport(method=method.label(precond), precision=policy.name, backend=low.name, rtol=opts.rtol)
    report.notes.append(f"fused device CG on {low.name} ({'CUDA graphs' if low.graphs else 'no graphs'}), "
                        f"host check every <= {opts.check_every} iterations")
    if opts.accumulation.wide_x and not low.mixed_x_update:
        raise CaseError.invalid("accumulate", opts.accumulate,
                                ", ".join(a.name for a in ACCUMULATIONS.values() if not a.wide_x),
                                why=f"x64 += alpha p32 in the fused kernels exists only in the NumPy low ops "
                                    f"(a study option), not on {low.name}")
    state = SolveState(A, b64, bnorm, x64, opts, precond, report)
    precond.cycles = 0
    low.sync()
    t0 = time.perf_counter()
    x, reason = method.algorithm(state, policy)
    true = state.true_residual(x)
    low.sync()
    report.time_s = time.perf_counter() - t0
    x_host = np.asarray(low.to_host(x), dtype=np.float64)
    report.finish(state.rec, state.true_its, state.true, true, reason)
    report.preconditioner = precond.info()
    if low.graphs and getattr(low, "graph_error", None):
        report.notes.append(f"CUDA graphs: {low.graph_error}")
    if report.preconditioner.get("scaling"):      # a multigrid hierarchy scaled or widened for its range
        report.notes.append(report.preconditioner["scaling"])
    if report.preconditioner.get("flexible"):
        report.notes.append("flexible CG (beta = -z.Aq / p.Aq): the V-cycle need not be exactly symmetric")
    return x_host, report
