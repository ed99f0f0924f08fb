"""SolveReport: what a linear solve did, the same for every backend and precision.

"converged" means the float64 true residual ||b - A x|| / ||b|| met the target, never the
recursive residual alone.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np


@dataclass(repr=False)
class SolveReport:
    """What one ``hpcsolve.fem.solve`` did. ``repr`` is one line (outcome, counts, final residuals, time); the
    residual histories are the arrays ``history_recursive`` / ``history_true`` (``to_dict(histories=True)``)."""

    method: str                    # the method's name (hpcsolve.fem.linalg.methods), "+" a general preconditioner's
    precision: str                 # fp64 | fp32 | mixed
    backend: str                   # numpy | cupy | numba-cuda
    rtol: float                    # target on the true relative residual
    converged: bool = False
    reason: str = ""               # why it stopped: "true residual met rtol", "maxiter", "stagnation", ...
    iterations: int = 0            # total Krylov iterations (matrix-vector products in the working precision)
    outer_iterations: int = 0      # refinement steps (ir-restarted) or residual replacements (cg-reliable)
    true_residual: float = float("nan")       # final ||b - A x|| / ||b||, computed in float64
    recursive_residual: float = float("nan")  # final recursively updated residual / ||b||
    residual_gap: float = float("nan")        # |true - recursive| at the end (Greenbaum's gap)
    history_recursive: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per iteration
    history_true_iterations: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    history_true: np.ndarray = field(default_factory=lambda: np.zeros(0))       # true residual at those iterations
    kappa_estimate: float = float("nan")      # Lanczos estimate from the CG coefficients, when available
    fallback: str = ""             # non-empty when the solver switched strategy (e.g. to fp64 CG), says why
    time_s: float = 0.0            # wall time of the solve (synchronized)
    setup_time_s: float = 0.0      # building the backend's Ops (matrix copies/uploads), not in time_s
    notes: list[str] = field(default_factory=list)
    preconditioner: dict = field(default_factory=dict)  # multigrid: levels, rows, nnz, operator/grid complexity,
    #                                                   setup_time_s, cycles, level_time_s, symmetry_defect, ...
    phase_time_s: dict = field(default_factory=dict)  # fused cg-reliable: synchronized wall time of the parts
    #                                                   outside the iteration blocks (kappa, replace, y_norm)
    chosen: str = ""               # preconditioner="auto": the preconditioner it chose ("jacobi", "amg"); "" if named
    chosen_why: str = ""           # ... and why, one line ("auto: jacobi (probe: 32 iterations, kappa ...)")

    def __repr__(self) -> str:
        pc = (self.preconditioner.get("kind") or self.preconditioner.get("name")) if self.preconditioner else None
        parts = [f"method={self.method!r}", f"precision={self.precision!r}", f"backend={self.backend!r}",
                 f"converged={self.converged}", f"iterations={self.iterations}"]
        if self.outer_iterations:
            parts.append(f"outer_iterations={self.outer_iterations}")
        parts += [f"true_residual={self.true_residual:.3g}", f"rtol={self.rtol:.3g}"]
        if pc:
            parts.append(f"preconditioner={pc!r}")
        if self.chosen:
            parts.append(f"chosen={self.chosen!r}")
        if self.fallback:
            parts.append(f"fallback={self.fallback!r}")
        parts += [f"time_s={self.time_s:.3g}", f"reason={self.reason!r}"]
        return f"SolveReport({', '.join(parts)})"

    @property
    def time_per_iteration_s(self) -> float:
        return self.time_s / self.iterations if self.iterations else float("nan")

    def finish(self, recursive, true_iterations, true_values, true: float, reason: str) -> None:
        """Fill the histories and the final figures; 'converged' is decided on the float64 true residual."""
        its, vals = list(true_iterations), list(true_values)
        if not its or its[-1] != self.iterations or vals[-1] != true:
            its.append(self.iterations)
            vals.append(true)
        self.history_recursive = np.asarray(recursive, dtype=np.float64)
        self.history_true_iterations = np.asarray(its, dtype=np.int64)
        self.history_true = np.asarray(vals, dtype=np.float64)
        self.true_residual = float(true)
        self.recursive_residual = float(recursive[-1]) if len(recursive) else float("nan")
        self.residual_gap = abs(self.true_residual - self.recursive_residual)
        self.converged = bool(math.isfinite(true) and true <= self.rtol)
        if self.converged and not reason.startswith("true residual met"):
            reason = f"true residual met rtol ({reason})"
        if not self.converged and reason.startswith("true residual met"):
            reason = f"true residual {true:.3e} above rtol {self.rtol:.1e}"
        if not self.converged and math.isfinite(self.kappa_estimate) and self.kappa_estimate > 1e14:
            reason += f"; the Lanczos estimate kappa ~ {self.kappa_estimate:.1e} suggests a singular matrix"
        self.reason = reason

    def to_dict(self, histories: bool = False) -> dict:
        d = asdict(self)
        d["time_per_iteration_s"] = self.time_per_iteration_s
        for k in ("history_recursive", "history_true_iterations", "history_true"):
            if histories:
                d[k] = np.asarray(d[k]).tolist()
            else:
                d.pop(k)
        return d
