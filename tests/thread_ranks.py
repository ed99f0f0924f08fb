"""Ranks as threads of one process, with an in-memory communicator: the mpi4py calls hpcsolve makes
(Sendrecv, allgather, allreduce, alltoall, bcast), so decomposed code runs in CI without MPI."""

import queue
import threading

import numpy as np


class _Hub:
    def __init__(self, n):
        self.n = n
        self.queues = {(a, b): queue.Queue() for a in range(n) for b in range(n)}
        self.barrier = threading.Barrier(n)
        self.slots = [None] * n


class ThreadComm:
    """Rank ``rank`` of ranks that are threads of one process (mpi4py's semantics for the calls used)."""

    def __init__(self, hub, rank):
        self.hub, self.rank = hub, rank

    def Get_rank(self):  # noqa: N802
        return self.rank

    def Get_size(self):  # noqa: N802
        return self.hub.n

    def Sendrecv(self, sendbuf, dest, recvbuf, source, **_):  # noqa: N802
        self.hub.queues[(self.rank, dest)].put(np.array(sendbuf, copy=True))
        np.copyto(recvbuf, self.hub.queues[(source, self.rank)].get(timeout=60))

    def allgather(self, obj):
        self.hub.slots[self.rank] = obj
        self.hub.barrier.wait(timeout=60)
        out = list(self.hub.slots)
        self.hub.barrier.wait(timeout=60)
        return out

    def allreduce(self, value, op=None):
        parts = self.allgather(value)          # summed in rank order on every rank
        total = parts[0]
        for p in parts[1:]:
            total = total + p
        return total

    def Allreduce(self, sendbuf, recvbuf, op=None):  # noqa: N802
        np.copyto(recvbuf, self.allreduce(np.array(sendbuf, copy=True)))

    def alltoall(self, objs):
        rows = self.allgather(list(objs))
        return [rows[src][self.rank] for src in range(self.hub.n)]

    def bcast(self, obj, root=0):
        return self.allgather(obj)[root]


def on_ranks(n, fn):
    """[fn(comm) for each of n thread ranks], run concurrently; the first exception is raised."""
    hub = _Hub(n)
    out, errors = [None] * n, []

    def work(r):
        try:
            out[r] = fn(ThreadComm(hub, r))
        except BaseException as exc:  # noqa: BLE001 (re-raised below)
            errors.append(exc)
            hub.barrier.abort()

    threads = [threading.Thread(target=work, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    if errors:
        raise errors[0]
    return out
