"""The engine of every CG method (:class:`CGEngine`): (P)CG recurrences in one working precision, in blocks of
iterations that are three fused kernels each, captured once into a CUDA graph where the backend has graphs; and
the device-memory bytes one iteration moves (:func:`bytes_per_iteration`, docs/design/fem_gpu.md)."""

from __future__ import annotations

import numpy as np

from hpcsolve.fem.linalg.cg_decisions import Breakdown, lanczos_kappa
from hpcsolve.fem.linalg.cg_options import F64


def bytes_per_iteration(n: int, nnz: int, dtype, jacobi: bool = False, matrix_free: bool = False) -> int:
    """Device-memory bytes one fused CG iteration moves (each array read or written once).

    spmv_dot: values nnz*s + indices nnz*4 + indptr (n+1)*4 + p n*s + q n*s   (p gathers hit L1/L2)
    update_r: r, q read, r written: 3 n s         update_xp: x, p, r read, x, p written: 5 n s
    Jacobi adds dinv in both updates: 2 n s. Scalars (a few doubles) are not counted.
    """
    s = np.dtype(dtype).itemsize
    spmv = 2 * n * s if matrix_free else nnz * (s + 4) + (n + 1) * 4 + 2 * n * s
    return spmv + 3 * n * s + 5 * n * s + (2 * n * s if jacobi else 0)


class DotSlot:
    """Where a general preconditioner adds r.z for the CG (``Preconditioner.apply(r, z, rz)``): one float64 scalar of
    the CG on the device, so that the preconditioner neither knows nor picks the CG's slots. ``add`` launches the dot
    (graph-capturable); a low op that fuses the dot itself takes ``*target`` as its ``ws, i`` arguments."""

    __slots__ = ("low", "ws", "index")

    def __init__(self, low, ws, index: int):
        self.low, self.ws, self.index = low, ws, index

    def add(self, x, y) -> None:
        """ws[index] += x.y on the device."""
        self.low.dot(x, y, self.ws, self.index)

    @property
    def target(self) -> tuple:
        return self.ws, self.index


class CGEngine:
    """(P)CG recurrences in one working precision, in blocks of k <= K iterations.

    Scalar slots (float64, device): rho[0..K] (r.z), pq[0..K-1], rr[0..K] (r.r); without a
    preconditioner rho aliases rr. Iteration j of a block reads rho[j], pq[j] and writes pq[j],
    rho[j+1], rr[j+1]; ``block_end`` carries rho[k], rr[k] into slot 0.
    """

    def __init__(self, A, dtype, precond, K: int = 64, x=None):
        low = A.low
        self.low, self.A, self.dtype, self.K = low, A, np.dtype(dtype), K
        A.ensure(self.dtype)
        n = A.n
        self.x = x if x is not None else low.zeros(n, self.dtype)
        self.r = low.zeros(n, self.dtype)
        self.p = low.zeros(n, self.dtype)
        self.q = low.zeros(n, self.dtype)
        self.ws = low.zeros(4 * K + 2, F64)
        self.scratch = low.zeros(1, F64)     # a slot for reductions nobody reads
        self.PQ = K + 1
        self.RR = 2 * K + 1
        self.ZQ = 3 * K + 2                  # flexible CG: z_{j+1}.q_j
        self.RHO = self.RR if precond.identity else 0
        self.precond = precond
        self.dinv = precond.diagonal(A, self.dtype)                       # fused into the kernels
        self.dinv64 = precond.diagonal(A, F64) if self.dinv is not None else None
        self.general = None if precond.identity or self.dinv is not None else precond
        self.z = low.zeros(n, self.dtype) if self.general is not None else None
        self.flexible = self.general is not None and bool(getattr(precond, "flexible", False))
        self._graphs = {}
        self.iterations = 0
        self.alpha: list[float] = []
        self.beta: list[float] = []
        self.rho_host = 0.0
        # r holds rscale (b - A x64) and x the correction times rscale: a power of two (exact) that keeps a float32
        # residual of a tiny or huge right-hand side in range (set_residual_from's ``scale``); r64: its float64 scratch
        self.rscale = 1.0
        self.r64 = None

    def reset(self, zero_x: bool) -> None:
        """Forget a previous solve (the vectors, and the graphs that use them, are kept)."""
        self.iterations = 0
        self.alpha, self.beta = [], []
        self.rho_host = 0.0
        self.rscale = 1.0
        if zero_x:
            self.low.fill_zero(self.x)

    # -- state
    def _read_slots(self) -> float:
        """rho (of the scaled r) kept; returns r.r of the unscaled residual."""
        h = self.low.to_host(self.ws)
        self.rho_host = float(h[self.RHO])
        return float(h[self.RR]) / self.rscale ** 2

    def start_from_r(self) -> float:
        """p = M^-1 r, rho = r.z, rr = r.r from the residual already in self.r; returns r.r (syncs)."""
        low = self.low
        if self.general is not None:      # a V-cycle is ~100 launches: replayed as one graph, as the blocks are
            def start():
                low.fill_zero(self.ws)
                self.general.apply(self.r, self.z, DotSlot(low, self.ws, self.RHO))
                low.scale_copy(self.z, self.p, 1.0)
                low.dot(self.r, self.r, self.ws, self.RR)

            self._replay("start", start)
            self.general.cycles += 1
        else:
            low.fill_zero(self.ws)
            low.precondition_init(self.r, self.p, self.dinv, self.ws, self.RHO, self.RR)
        return self._read_slots()

    def set_residual_from(self, x64, b64, precondition: bool = True, scale: float | None = None) -> float:
        """r = rscale (b - A64 x64) (float64, stored in dtype), rho/rr slots reset; returns the unscaled r.r (syncs).
        ``precondition`` False: z = M^-1 r is not formed (``start_from_r`` follows and forms it). ``scale``: a new
        rscale (a power of two; the correction in x must have been folded first)."""
        low = self.low
        if scale is not None:
            self.rscale = float(scale)
        low.fill_zero(self.ws)
        if self.rscale == 1.0:
            low.residual(self.A, x64, b64, self.r, self.dinv64, self.ws, self.RHO, self.RR)
        else:       # b - A x64 in float64, scaled while cast (scale_copy computes in the wider type); r.r, r.D^-1 r
            if self.r64 is None:
                self.r64 = low.zeros(self.A.n, F64)
            low.residual(self.A, x64, b64, self.r64, None, self.scratch, -1, 0)
            low.scale_copy(self.r64, self.r, self.rscale)
            low.dot(self.r, self.r, self.ws, self.RR)
            if self.dinv is not None:          # q is scratch here (the next iteration's A p overwrites it)
                low.precondition(self.dinv, self.r, self.q, self.ws, self.RHO)
        if self.general is not None and precondition:
            self.general.apply(self.r, self.z, DotSlot(low, self.ws, self.RHO))
            self.general.cycles += 1
        return self._read_slots()

    def replace_residual(self, x64, b64) -> float:
        """Reliable update: r = b - A64 x64 and p += M^-1 (r_true - r_rec), as if p had been formed from the
        true residual (p = z_true + beta p_old); returns r.r (syncs)."""
        low = self.low
        if self.general is None and self.rscale != 1.0:      # the fused kernel's r_true is unscaled: in two steps
            low.axpy((-1, -1, -1.0), self.apply_m(self.r, self.q), self.p, self.scratch)
            rr = self.set_residual_from(x64, b64)
            low.axpy((-1, -1, 1.0), self.apply_m(self.r, self.q), self.p, self.scratch)
            return rr
        if self.general is None:
            low.fill_zero(self.ws)
            low.replace_residual(self.A, x64, b64, self.r, self.p, self.dinv64, self.ws, self.RHO, self.RR)
            return self._read_slots()
        low.axpy((-1, -1, -1.0), self.apply_m(self.r, self.z), self.p, self.scratch)
        rr = self.set_residual_from(x64, b64)          # z = M^-1 r_true
        low.axpy((-1, -1, 1.0), self.z, self.p, self.scratch)
        return rr

    def fold_into(self, x64) -> None:
        """x64 += x / rscale (in float64); x = 0."""
        if self.rscale == 1.0:
            self.low.fold(x64, self.x)
            return
        self.low.axpy((-1, -1, 1.0 / self.rscale), self.x, x64, self.scratch)
        self.low.fill_zero(self.x)

    def apply_m(self, r, out):
        """The vector holding M^-1 r: ``out`` (written) with a preconditioner, r itself without."""
        if self.dinv is not None:
            self.low.precondition(self.dinv, r, out, self.scratch, 0)
            return out
        if self.general is not None:
            self.general.apply(r, out)
            self.general.cycles += 1
            return out
        return r

    # -- the iteration
    def _launch_block(self, k):
        low, ws, A = self.low, self.ws, self.A
        low.block_start(ws, self.RHO, self.PQ, self.RR, self.K)
        if self.flexible:
            low.block_start(ws, self.ZQ - 1, self.ZQ, self.ZQ - 1, self.K)     # zq[0..K-1] = 0
        for j in range(k):
            rho, pq, rho1 = self.RHO + j, self.PQ + j, self.RHO + j + 1
            low.spmv_dot(A, self.p, self.q, ws, pq)
            if self.general is None:
                low.update_r(self.r, self.q, self.dinv, ws, rho, pq, rho1, self.RR + j + 1)
                low.update_xp(self.x, self.p, self.r, self.dinv, ws, rho, pq, (rho1, rho, 1.0))
            else:
                low.update_r(self.r, self.q, None, ws, rho, pq, -1, self.RR + j + 1)
                self.general.apply(self.r, self.z, DotSlot(low, ws, rho1))
                if self.flexible:     # Notay's flexible CG: beta = -z_{j+1}.q_j / p_j.q_j
                    low.dot(self.z, self.q, ws, self.ZQ + j)
                    beta = (self.ZQ + j, pq, -1.0)
                else:
                    beta = (rho1, rho, 1.0)
                low.update_xp(self.x, self.p, self.z, None, ws, rho, pq, beta)
        low.block_end(ws, self.RHO, self.RR, k)

    def launch(self, k):
        """Queue k iterations (graph replay when the backend has graphs); no synchronization."""
        self._replay(k, lambda: self._launch_block(k))
        self.iterations += k
        if self.general is not None:
            self.general.cycles += k

    def _replay(self, key, launches) -> None:
        """Queue what ``launches()`` launches: as a CUDA graph recorded at its first use (kept under ``key``)
        where the backend has graphs, else directly. Kernels compiled at their first launch (Numba) must not
        compile inside a capture (the capture would fail and the work would be launched one kernel at a time
        from then on): such a backend runs the work directly once and captures it at its next use."""
        g = self._graphs.get(key, False)
        if g is False and getattr(self.low, "compiles_lazily", False) and self.low.graphs:
            self._graphs[key] = "warm"
            g = None
        elif g is False or g == "warm":
            g = self._graphs[key] = self.low.capture(launches)
        if g is None:
            launches()
        else:
            g()

    def read(self, k) -> np.ndarray:
        """After launch(k): host copies of rr[1..k] (synchronizes); alpha/beta recorded; Breakdown raised
        at the first iteration with p.Ap <= 0 (indefinite) or a non-finite p.Ap / r.r."""
        h = self.low.to_host(self.ws)
        rho = np.concatenate([[self.rho_host], h[self.RHO + 1:self.RHO + k + 1]])
        pq = h[self.PQ:self.PQ + k]
        rr = h[self.RR + 1:self.RR + k + 1]
        first = len(self.alpha)
        with np.errstate(divide="ignore", invalid="ignore"):
            self.alpha.extend((rho[:-1] / pq).tolist())
            self.beta.extend((rho[1:] / rho[:-1]).tolist())
        self.rho_host = float(rho[-1])
        it0 = self.iterations - k
        bad_nf = np.flatnonzero(~np.isfinite(pq) | ~np.isfinite(rr))
        # p.Ap = 0 with r.z = 0 is the exact solution (the kernels then take alpha = 0), not a breakdown
        bad_ind = np.flatnonzero((pq < 0) | ((pq == 0) & (rho[:-1] != 0)))
        if bad_nf.size and (not bad_ind.size or bad_nf[0] < bad_ind[0]):
            i = int(bad_nf[0])
            self._keep_coefficients(first + i)
            raise Breakdown(it0 + i + 1, f"p.Ap = {pq[i]:.3e}, r.r = {rr[i]:.3e} at iteration {it0 + i + 1} "
                            f"(overflow or NaN in {self._nonfinite_where()})", "nonfinite")
        if bad_ind.size:
            i = int(bad_ind[0])
            self._keep_coefficients(first + i)
            if pq[i] == 0 and self.dtype != np.float64:
                # exactly 0 with r.z != 0 in a low working precision: every product of A p underflowed (entries
                # spanning 1e34, say), or a singular matrix met an inconsistent right-hand side; float64 tells
                # them apart (mixed precision falls back to it: a fallback, not a verdict)
                raise Breakdown(it0 + i + 1, f"p.Ap = 0 at iteration {it0 + i + 1} although r.z = {rho[i]:.3e}: "
                                f"in {self.dtype.name} either every product of A p underflowed (the matrix's "
                                f"entries span more than {self.dtype.name} holds) or the matrix is singular with "
                                "an inconsistent right-hand side (float64 tells them apart)", "underflow")
            raise Breakdown(it0 + i + 1, f"p.Ap = {pq[i]:.3e} <= 0 at iteration {it0 + i + 1}: the matrix is not "
                            "symmetric positive definite (indefinite, or singular with an inconsistent "
                            "right-hand side)", "indefinite")
        return rr / self.rscale ** 2

    def _nonfinite_where(self) -> str:
        """Where an overflow or NaN can come from: the working dtype, and a general preconditioner (its hierarchy's
        precision, where it has one), which computes in its own dtype."""
        if self.general is None:
            return self.dtype.name
        hierarchy = getattr(getattr(self.general, "options", None), "hierarchy", None)
        return f"{self.dtype.name} or in the {self.general.name} preconditioner" + (
            f" ({hierarchy} hierarchy)" if hierarchy else "")

    def _keep_coefficients(self, m: int) -> None:
        """Keep the kappa estimate of the valid coefficients only."""
        del self.alpha[m:], self.beta[m:]

    def kappa(self) -> float:
        return lanczos_kappa(self.alpha, self.beta)
