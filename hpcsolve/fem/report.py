"""SolveReport: what a linear solve did, the same for every backend and precision.

"converged" means the float64 true residual ||b - A x|| / ||b|| met the target, never the
recursive residual alone.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np


@dataclass
class SolveReport:
    method: str                    # "cg" | "pcg-jacobi" | "ir-restarted" | "cg-reliable" | "spsolve" ...
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

    @property
    def time_per_iteration_s(self) -> float:
        return self.time_s / self.iterations if self.iterations else float("nan")

    def to_dict(self, histories: bool = False) -> dict:
        d = asdict(self)
        d["time_per_iteration_s"] = self.time_per_iteration_s
        for k in ("history_recursive", "history_true_iterations", "history_true"):
            if histories:
                d[k] = np.asarray(d[k]).tolist()
            else:
                d.pop(k)
        return d
