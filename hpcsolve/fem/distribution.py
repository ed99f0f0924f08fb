"""An FEM run on several MPI ranks: the matrix split into row blocks (:mod:`hpcsolve.fem.linalg.distributed`), and
what cannot run so refused, each by the object that knows it (the preconditioner's spec, the solve method, the
backend)."""

from __future__ import annotations

from hpcsolve.core import backends, parallel
from hpcsolve.core.errors import BackendError, CaseError
from hpcsolve.fem.linalg.distributed import prepare_distributed
from hpcsolve.fem.linalg.methods import Method
from hpcsolve.fem.linalg.precond import registry


def distribute(disc, backend, method: Method, pc):
    """(matrix, preconditioner) of the solve: the host matrix on one rank; under mpiexec -n N a block of rows per
    rank, refused with what cannot run distributed (a preconditioner whose spec is not ``distributed``, a direct
    method, a GPU backend)."""
    comm = parallel.world()
    if parallel.ranks(comm) <= 1:
        return disc.A, pc
    registry.check_distributed(registry.spec_of(pc), "solve.preconditioner")
    if method.direct:
        raise CaseError.invalid("solve.method", method.name, "a CG method on several MPI ranks",
                                why="a matrix distributed over ranks has no single copy to factorize")
    be = backends.get(backend)
    if be.gpu:
        raise BackendError(f"backend {be.name!r} cannot solve on several MPI ranks yet; use a CPU backend (--backend "
                           "numpy), or one rank")
    return prepare_distributed(disc.A, comm), pc
