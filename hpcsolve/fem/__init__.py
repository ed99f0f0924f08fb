"""P1 finite elements and Krylov solvers with fp64 / fp32 / mixed precision.

``hpcsolve.fem.solve(A, b, precision=..., backend=..., rtol=..., maxiter=..., method=...)``
returns ``(x, SolveReport)``; ``prepare_matrix(A, backend=...)`` uploads and checks a matrix once
for repeated solves; see docs/fem_solvers.md.
"""

from hpcsolve.fem.api import METHODS, check_system, prepare_matrix, solve, update_matrix
from hpcsolve.fem.linalg.cg_options import CGOptions
from hpcsolve.fem.linalg.report import SolveReport

__all__ = ["solve", "prepare_matrix", "update_matrix", "check_system", "SolveReport", "CGOptions", "METHODS"]
