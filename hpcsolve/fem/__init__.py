"""P1 finite elements and Krylov solvers with fp64 / fp32 / mixed precision.

``hpcsolve.fem.solve(A, b, precision=..., backend=..., rtol=..., maxiter=..., method=..., M=...)`` returns
``(x, SolveReport)``, as ``scipy.sparse.linalg.cg`` returns ``(x, info)``; ``prepare_matrix(A, backend=...)``
uploads and checks a matrix once for repeated solves; ``assemble(case)`` gives a case's system (``.A``, ``.b``).
Geometric multigrid on a structured mesh::

    pc = Multigrid("mg", {"hierarchy": "fp32"}, grid=StructuredGrid(nx, ny, free))
    x, report = solve(A, b, preconditioner=pc, rtol=1e-10)

The names ``preconditioner=`` and a case's ``solve.preconditioner`` take are the registered ones
(``hpcsolve.fem.linalg.precond.registry``: ``register`` adds a preconditioner); ``method=`` takes those of
``hpcsolve.fem.linalg.methods``.

The case-level entry points (``run_case``, ``compare``, ``load_case``, ``load_result``) are importable from here too;
they are ``hpcsolve``'s own.
"""

from hpcsolve.core import backends
from hpcsolve.core.errors import CaseError
from hpcsolve.core.lazy import lazy_attributes
from hpcsolve.fem.api import METHODS, check_system, prepare_matrix, solve, update_matrix
from hpcsolve.fem.linalg.cg_options import CGOptions
from hpcsolve.fem.linalg.precond import Jacobi, Multigrid, Preconditioner
from hpcsolve.fem.linalg.precond.geometric import StructuredGrid
from hpcsolve.fem.linalg.precond.mg_options import MGOptions
from hpcsolve.fem.linalg.report import SolveReport

#: hpcsolve's case-level API, loaded on first use (PEP 562): they import the whole package
_LAZY = {"run_case": ("hpcsolve.run", "run_case"), "compare": ("hpcsolve.report.compare", "compare"),
         "load_case": ("hpcsolve.core.cases", "load_case"), "load_result": ("hpcsolve.core.results", "load_result")}


def assemble(case, overrides=(), backend=None):
    """The discrete system of a FEM case: ``case`` a case file path (with ``overrides`` as in ``--set``) or a loaded
    case (``hpcsolve.load_case``). Returns a ``Discrete``: ``A`` (SciPy CSR of the free unknowns; a device matrix
    where ``backend`` is a GPU backend: pass it to ``solve`` as it is), ``b``, ``mesh``, ``free``/``fixed`` and
    ``full_solution(x)`` (x of the free unknowns -> the nodal field, Dirichlet values put back)."""
    from hpcsolve.core.cases import load_case      # late: pydantic and the case models, for this call only
    from hpcsolve.fem.discrete import problem       # late: assembly and meshes, 0.15 s more than hpcsolve.fem

    if not hasattr(case, "solver"):
        case = load_case(case, list(overrides))
    elif overrides:
        raise CaseError.invalid("overrides", list(overrides), "() with a loaded case",
                                why="a loaded case is already overridden; pass them to hpcsolve.load_case")
    if case.solver != "fem":
        raise CaseError.invalid("case", f"an {case.solver.upper()} case", "a FEM case (problem and mesh sections)")
    be = backends.resolve(backend, field="backend") if backend is not None else None
    return problem.build(case, backend=be if be is not None and be.gpu else None)


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())


__all__ = ["solve", "prepare_matrix", "update_matrix", "check_system", "assemble", "SolveReport", "CGOptions",
           "METHODS", "Multigrid", "StructuredGrid", "MGOptions", "Preconditioner", "Jacobi",
           "run_case", "compare", "load_case", "load_result"]
