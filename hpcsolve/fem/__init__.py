"""P1 finite elements and Krylov solvers with fp64 / fp32 / mixed precision.

``hpcsolve.fem.solve(A, b, precision=..., backend=..., rtol=..., maxiter=..., method=...)``
returns ``(x, SolveReport)``; see docs/fem_solvers.md.
"""

from hpcsolve.fem.api import METHODS, check_system, solve
from hpcsolve.fem.report import SolveReport

__all__ = ["solve", "check_system", "SolveReport", "METHODS"]
