"""Several processes (MPI ranks) on one case: the communicator and the decomposition.

hpcsolve runs one process per rank under ``mpiexec -n N``; mpi4py (optional: ``pip install
'hpcsolve[mpi]'``) gives the processes and the host-side collectives. Without mpi4py, or with one
rank, :func:`world` is a single-rank communicator and everything runs as one process.

The LBM decomposition is by slabs of rows (:func:`slabs`): rank r owns rows [y0, y1) of the
(ny, nx) lattice, in rank order, as evenly as ny allows, and keeps ``halo`` rows of each neighbour
(the lattice wraps in y, as the single-process stepper's pull does). See hpcsolve/lbm/distributed.py.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

import numpy as np

from hpcsolve.core.errors import BackendError, CaseError


class SingleRank:
    """The communicator of a run without MPI (or under ``mpiexec -n 1``): rank 0 of 1."""

    rank = 0
    size = 1

    def Get_rank(self) -> int:          # noqa: N802 (the mpi4py names)
        return 0

    def Get_size(self) -> int:          # noqa: N802
        return 1

    def Sendrecv(self, sendbuf, dest, recvbuf, source, **_):   # noqa: N802 (to itself)
        np.copyto(recvbuf, sendbuf)

    def Allgather(self, sendbuf, recvbuf):                     # noqa: N802
        np.copyto(recvbuf.reshape(sendbuf.shape), sendbuf)

    def allgather(self, obj):
        return [obj]

    def allreduce(self, value, op=None):
        return value

    def Allreduce(self, sendbuf, recvbuf, op=None):             # noqa: N802
        np.copyto(recvbuf, sendbuf)

    def alltoall(self, objs):
        return list(objs)

    def bcast(self, obj, root=0):
        return obj

    def Barrier(self):                                          # noqa: N802
        pass


#: set by MPI launchers (MPICH/Hydra and Intel MPI: PMI_*, Open MPI: OMPI_*, PMIx, MVAPICH); a process
#: started without one is a single rank and never imports mpi4py (whose import initializes MPI)
LAUNCHER_VARIABLES = ("PMI_SIZE", "PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")


def world():
    """mpi4py's COMM_WORLD when started by an MPI launcher with more than one rank (and mpi4py imports),
    else a :class:`SingleRank`."""
    if not any(os.environ.get(v) for v in LAUNCHER_VARIABLES):
        return SingleRank()
    try:
        from mpi4py import MPI   # late: optional dependency (the mpi extra), imported only under an MPI launcher
    except ImportError:
        size = max(int(os.environ.get(v, "1") or 1) for v in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE",
                                                                 "MV2_COMM_WORLD_SIZE"))
        if size > 1:     # each process would run the whole case alone, into the same folder

            raise BackendError(f"started as one of {size} MPI ranks, but mpi4py does not import here; "
                               "install it (pip install 'hpcsolve[mpi]') or run one process") from None
        return SingleRank()
    comm = MPI.COMM_WORLD
    return comm if comm.Get_size() > 1 else SingleRank()


def ranks(comm) -> int:
    return int(comm.Get_size())


@dataclass(frozen=True)
class Slab:
    """Rows [y0, y1) of an ny-row lattice owned by ``rank`` of ``size``, with ``halo`` rows on each side."""

    rank: int
    size: int
    y0: int
    y1: int
    ny: int
    halo: int

    @property
    def rows(self) -> int:
        return self.y1 - self.y0

    @property
    def local_rows(self) -> np.ndarray:
        """The global rows the rank keeps, bottom halo first (the lattice wraps in y)."""
        return np.arange(self.y0 - self.halo, self.y1 + self.halo) % self.ny

    @property
    def lower(self) -> int:
        return (self.rank - 1) % self.size

    @property
    def upper(self) -> int:
        return (self.rank + 1) % self.size


def slabs(ny: int, size: int, halo: int = 1) -> list[Slab]:
    """The row slabs of ``size`` ranks: rank r gets ny // size rows, the first ny % size ranks one more.
    A rank must own at least ``halo`` rows (its neighbours' halos come from them)."""
    if size < 1:
        raise CaseError.invalid("ranks", size, "at least 1")
    least = max(1, halo)
    if ny < size * least:
        raise CaseError.invalid("ranks", size, f"at most {ny // least} for a lattice of {ny} rows",
                                why=f"each rank owns a slab of at least {least} row(s); with {size} ranks "
                                    f"one would be left with {ny // size} (raise lattice.resolution or run "
                                    "fewer ranks)")
    base, extra = divmod(ny, size)
    out, y = [], 0
    for r in range(size):
        n = base + (1 if r < extra else 0)
        out.append(Slab(r, size, y, y + n, ny, halo))
        y += n
    return out


def check_same(comm, what: str, text: str) -> None:
    """Every rank must run the same ``what`` (e.g. the case): compares a hash of ``text`` across ranks and
    raises a CaseError on every rank when they differ."""
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    seen = comm.allgather(digest)
    if len(set(seen)) > 1:
        differ = [r for r, d in enumerate(seen) if d != seen[0]]
        raise CaseError.invalid(what, f"differs on rank(s) {differ}", "the same on every MPI rank",
                                why="each rank must be started with the same case file and --set options")
