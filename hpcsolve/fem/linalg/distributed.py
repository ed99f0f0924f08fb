"""Conjugate gradients on several ranks: a block of matrix rows per rank, halo SpMV, summed dot products.

    M = prepare_distributed(A)          # on every rank, the same A (SciPy, checked once)
    x, report = solve(M, b, rtol=1e-10) # the ordinary hpcsolve.fem.solve; x is the whole solution

Rank r owns rows [r0, r1) of A (contiguous blocks in rank order, as even as n allows) and the same
entries of every vector. Its block of A keeps the owned columns first (local indices 0 .. n_own - 1),
then the other columns it touches (its halo, ascending global index). An SpMV first fetches the halo
entries of the vector from the ranks that own them (``Sendrecv`` rounds, host-staged), then multiplies
the local block; every reduction (p.Ap, r.r, r.z) is the sum over ranks of the local sums (``Allreduce``),
so every rank takes the same decisions (block lengths, convergence, breakdowns) from the same
scalars. The one CG of :mod:`hpcsolve.fem.linalg.cg` runs unchanged on these low ops
(:class:`MPINumpyOps`): plain CG, Jacobi-PCG and the mixed methods. The float64 true residual is
computed the same way, so ``report.converged`` means what it means on one rank. The solution agrees
with one rank's to the solve's tolerance (the sums are grouped per rank, so rounding differs).

So far on the NumPy backend (the reference); multigrid preconditioners on several ranks are refused.
"""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from hpcsolve.core import parallel
from hpcsolve.core.errors import CaseError
from hpcsolve.fem.linalg import matrix
from hpcsolve.fem.linalg.kernels_numpy_low import NumpyLowOps, _coef, _sum64
from hpcsolve.fem.linalg.matrix import DeviceCSR

F64 = np.dtype(np.float64)


def row_blocks(n: int, size: int) -> list[tuple[int, int]]:
    """[r0, r1) of each rank: n // size rows, the first n % size ranks one more; every rank needs a row."""
    if n < size:
        raise CaseError.invalid("ranks", size, f"at most {n} for a system of {n} unknowns",
                                why="each rank owns a block of at least one row (run fewer ranks)")
    base, extra = divmod(n, size)
    out, r0 = [], 0
    for r in range(size):
        r1 = r0 + base + (1 if r < extra else 0)
        out.append((r0, r1))
        r0 = r1
    return out


class DistributedCSR(DeviceCSR):
    """One rank's block of rows of a matrix, with the plan of its halo exchange. ``n`` is the number of owned
    rows (the length of the rank's vectors); ``global_n`` that of the whole system."""

    def __init__(self, low, host: sp.csr_matrix, comm, blocks):
        rank = comm.Get_rank()
        r0, r1 = blocks[rank]
        n_own = r1 - r0
        rows = host[r0:r1]
        cols = rows.indices.astype(np.int64)
        halo = np.unique(cols[(cols < r0) | (cols >= r1)])
        local = np.where((cols >= r0) & (cols < r1), cols - r0, n_own + np.searchsorted(halo, cols))
        dinv = np.zeros(n_own)
        d = rows.diagonal(k=r0)
        np.divide(1.0, d, out=dinv, where=d > 0)
        super().__init__(low, n_own, rows.nnz, rows.indptr.astype(np.int32), local.astype(np.int32),
                         np.ascontiguousarray(rows.data, dtype=np.float64), dinv64=dinv,
                         max_abs=float(np.max(np.abs(host.data), initial=0.0)),
                         max_diag=float(np.max(np.abs(host.diagonal()), initial=0.0)))
        self.comm, self.blocks, self.global_n, self.r0, self.r1 = comm, blocks, host.shape[0], r0, r1
        self.ncols = n_own + halo.size
        self.row_nnz = host.nnz / max(host.shape[0], 1)     # of the whole matrix: the same on every rank
        self.distributed = True
        # halo exchange plan: which of my halo entries each rank owns (I receive them in that order), and
        # which of my owned entries each rank asks for (I send them)
        starts = np.asarray([b[0] for b in blocks])
        owner = np.searchsorted(starts, halo, side="right") - 1
        want = [halo[owner == q] for q in range(len(blocks))]
        self._recv_slices = np.concatenate([[0], np.cumsum([w.size for w in want])])
        asked = comm.alltoall([w for w in want])
        self._send = [np.asarray(a, dtype=np.int64) - r0 for a in asked]
        self._want = [w.size for w in want]
        self._rank, self._size = rank, len(blocks)
        self.halo_entries = int(halo.size)                                  # received per SpMV
        self.sent_entries = int(sum(s.size for q, s in enumerate(self._send) if q != rank))
        self.exchange_seconds = 0.0

    def exchange(self, v: np.ndarray) -> np.ndarray:
        """[v_own, v_halo]: the rank's vector extended by the halo entries the other ranks own."""
        t0 = time.perf_counter()
        r, size = self._rank, self._size
        got = [np.empty(k, dtype=v.dtype) for k in self._want]
        for d in range(1, size):         # round d: send to rank + d, receive from rank - d (possibly nothing)
            to, frm = (r + d) % size, (r - d) % size
            self.comm.Sendrecv(np.ascontiguousarray(v[self._send[to]]), dest=to, recvbuf=got[frm], source=frm)
        out = np.concatenate([v] + got)
        self.exchange_seconds += time.perf_counter() - t0
        return out

    def local(self, v: np.ndarray) -> np.ndarray:
        """The owned entries of a whole-system vector."""
        return np.ascontiguousarray(np.asarray(v)[self.r0:self.r1])

    def gather(self, v: np.ndarray) -> np.ndarray:
        """The whole-system vector from every rank's owned entries."""
        return np.concatenate(self.comm.allgather(np.asarray(v)))

    def to_scipy(self) -> sp.csr_matrix:
        raise CaseError.invalid("method", "spsolve", "cg, pcg-jacobi or a mixed method",
                                why="a matrix distributed over ranks has no single host copy to factorize")


class MPINumpyOps(NumpyLowOps):
    """The NumPy low ops of a rank: SpMVs on the rank's block with the halo fetched first, reductions summed
    over the ranks (one ``Allreduce`` per kernel that reduces)."""

    def __init__(self, comm):
        self.comm = comm

    def _sum(self, *values) -> np.ndarray:
        local = np.asarray(values, dtype=np.float64)
        total = np.empty_like(local)
        self.comm.Allreduce(local, total)            # a buffer reduction (sum), no pickling
        return total

    def spmv_dot(self, A, p, q, ws, i_pq):
        q[:] = self._mat(A, p.dtype) @ A.exchange(p)
        if i_pq >= 0:
            ws[i_pq] += self._sum(_sum64(p * q))[0]

    def residual(self, A, x, b, r_out, dinv, ws, i_rz, i_rr):
        ri = b - self._mat(A, x.dtype) @ A.exchange(x)
        r_out[:] = ri
        rr = ri * ri
        s = self._sum(_sum64(rr), _sum64(rr * dinv) if dinv is not None else 0.0)
        ws[i_rr] += s[0]
        if dinv is not None:
            ws[i_rz] += s[1]

    def replace_residual(self, A, x64, b64, r, p, dinv64, ws, i_rz, i_rr):
        ri = b64 - self._mat(A, F64) @ A.exchange(x64)
        d = ri - r.astype(F64)
        r[:] = ri
        p[:] = p.astype(F64) + (dinv64 * d if dinv64 is not None else d)
        rr = ri * ri
        s = self._sum(_sum64(rr), _sum64(rr * dinv64) if dinv64 is not None else 0.0)
        ws[i_rr] += s[0]
        if dinv64 is not None:
            ws[i_rz] += s[1]

    def dot(self, x, y, ws, i):
        ws[i] += self._sum(_sum64(x * y))[0]

    def precondition(self, dinv, r, z, ws, i_rz):
        np.multiply(dinv, r, out=z)
        if i_rz >= 0:
            ws[i_rz] += self._sum(_sum64(r * z))[0]

    def precondition_init(self, r, p, dinv, ws, i_rz, i_rr):
        if dinv is not None:
            np.multiply(dinv, r, out=p)
        else:
            p[:] = r
        s = self._sum(_sum64(r * p) if dinv is not None else 0.0, _sum64(r * r))
        if dinv is not None:
            ws[i_rz] += s[0]
        ws[i_rr] += s[1]

    def update_r(self, r, q, dinv, ws, i_rho, i_pq, i_rz, i_rr):
        alpha = r.dtype.type(_coef(ws, i_rho, i_pq, 1.0))
        r -= alpha * q
        rr = r * r
        s = self._sum(_sum64(rr), _sum64(rr * dinv) if dinv is not None else 0.0)
        ws[i_rr] += s[0]
        if dinv is not None:
            ws[i_rz] += s[1]

    def csr_apply(self, M, x, y, a=1.0, b=None, c=0.0):
        raise CaseError.invalid("preconditioner", "mg / amg", "none or jacobi on several ranks",
                                why="the multigrid hierarchy is not distributed over ranks yet")

    mg_smooth = csr_apply


def prepare_distributed(A, comm=None, field: str = "A") -> DistributedCSR:
    """This rank's part of A (the same A on every rank): checked on the host, then cut into row blocks."""
    comm = comm if comm is not None else parallel.world()
    csr = matrix.as_csr(A, field)
    matrix.check_host(csr)
    return DistributedCSR(MPINumpyOps(comm), csr, comm, row_blocks(csr.shape[0], parallel.ranks(comm)))
