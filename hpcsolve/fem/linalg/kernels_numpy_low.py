"""The low-level ops of :mod:`hpcsolve.fem.linalg.lowops` (the interface ``CupyOps`` / ``NumbaOps`` implement)
in NumPy/SciPy: the ``numpy`` backend of ``hpcsolve.fem.solve``.

With it, the conjugate gradients of ``hpcsolve.fem.linalg.cg`` (fused CG, block-end decisions, reliable
updates, promotion, restarted refinement) run on the CPU and take the same decisions as on a GPU:
iteration counts do not depend on the hardware, so the mixed-precision strategies can be studied
here (docs/design/fem_gpu.md has the measured ratios).

Arithmetic follows the GPU kernels: vector work in the working dtype T (float32 really computes in
float32: SciPy's csr_matvec is templated on the data type), coefficients computed in float64 from
the scalar slots and cast to T, dot products as products in T summed in float64 (the GPU sums a few
products per thread in T, then in float64 across threads; the summation order differs, the
precision does not). "Device" arrays are NumPy arrays; there are no graphs (``capture`` returns None).
"""

from __future__ import annotations

import functools
import time

import numpy as np
import scipy.sparse as sp

from hpcsolve.fem.linalg import lowops

F64 = np.dtype(np.float64)


def _coef(ws, inum, iden, c):
    """c * ws[inum] / ws[iden] as the kernels compute it (float64; x / 0 -> 0)."""
    if inum < 0:
        return float(c)
    if iden < 0:
        return float(c) * float(ws[inum])
    d = float(ws[iden])
    return float(c) * float(ws[inum]) / d if d != 0.0 else 0.0


def _sum64(a):
    return float(np.add.reduce(a, dtype=np.float64))


class NumpyLowOps(lowops.LowOps):
    """The fused kernels of kernels_cupy/kernels_numba as NumPy operations (CPU, no graphs)."""

    name = "numpy"
    supports_graphs = False
    graphs = False
    mixed_x_update = True      # x64 += alpha p32 works in NumPy (accumulate="fp64", a study option)
    host_resident = True

    def owns(self, xp):
        return xp is np

    # ---- arrays
    def to_device(self, a):
        return np.array(a, copy=True)

    def to_host(self, a):
        return np.array(a, copy=True)

    def zeros(self, n, dtype):
        return np.zeros(n, dtype=dtype)

    def astype(self, a, dtype):
        return a.astype(dtype)

    def scale_copy(self, src, dst, scale=1.0):
        wide = src.dtype if src.dtype.itemsize >= dst.dtype.itemsize else dst.dtype
        if scale == 1.0:
            dst[:] = src
        else:
            dst[:] = src.astype(wide, copy=False) * wide.type(scale)

    def fill_zero(self, a):
        a.fill(0)

    def sync(self):
        pass

    def _mat(self, A, dtype):
        """A SciPy view of the DeviceCSR's values of ``dtype`` (no copy), kept on the matrix."""
        vals = A.vals[np.dtype(dtype)]
        hit = A.cache.get(("scipy", vals.dtype))
        if hit is None or hit[0] is not vals:
            M = sp.csr_matrix((vals, A.indices, A.indptr), shape=(A.n, A.ncols))   # ncols: a rank's halo too
            hit = A.cache[("scipy", vals.dtype)] = (vals, M)
        return hit[1]

    # ---- kernels (names, arguments and slot conventions as in kernels_cupy)
    def spmv_dot(self, A, p, q, ws, i_pq):
        q[:] = self._mat(A, p.dtype) @ p
        if i_pq >= 0:
            ws[i_pq] += _sum64(p * q)

    def residual(self, A, x, b, r_out, dinv, ws, i_rz, i_rr):
        ri = b - self._mat(A, x.dtype) @ x           # computed in x's precision, stored as r_out's
        r_out[:] = ri
        rr = ri * ri
        ws[i_rr] += _sum64(rr)
        if dinv is not None:
            ws[i_rz] += _sum64(rr * dinv)

    def replace_residual(self, A, x64, b64, r, p, dinv64, ws, i_rz, i_rr):
        ri = b64 - self._mat(A, F64) @ x64
        d = ri - r.astype(F64)
        r[:] = ri
        p[:] = p.astype(F64) + (dinv64 * d if dinv64 is not None else d)
        rr = ri * ri
        ws[i_rr] += _sum64(rr)
        if dinv64 is not None:
            ws[i_rz] += _sum64(rr * dinv64)

    def dot(self, x, y, ws, i):
        ws[i] += _sum64(x * y)

    def axpy(self, coef, x, y, ws):
        a = y.dtype.type(_coef(ws, *coef))
        y += a * x.astype(y.dtype, copy=False)

    def precondition(self, dinv, r, z, ws, i_rz):
        np.multiply(dinv, r, out=z)
        ws[i_rz] += _sum64(r * z)

    def precondition_init(self, r, p, dinv, ws, i_rz, i_rr):
        if dinv is not None:
            np.multiply(dinv, r, out=p)
            ws[i_rz] += _sum64(r * p)
        else:
            p[:] = r
        ws[i_rr] += _sum64(r * r)

    def update_r(self, r, q, dinv, ws, i_rho, i_pq, i_rz, i_rr):
        alpha = r.dtype.type(_coef(ws, i_rho, i_pq, 1.0))
        r -= alpha * q
        rr = r * r
        ws[i_rr] += _sum64(rr)
        if dinv is not None:
            ws[i_rz] += _sum64(rr * dinv)

    def update_xp(self, x, p, r, dinv, ws, i_rho, i_pq, beta):
        T = p.dtype.type
        alpha = T(_coef(ws, i_rho, i_pq, 1.0))
        beta = T(_coef(ws, *beta))
        x += alpha * p
        p *= beta
        p += dinv * r if dinv is not None else r

    def fold(self, x64, y):
        x64 += y
        y.fill(0)

    def block_start(self, ws, i_rho, i_pq, i_rr, K):
        ws[i_rho + 1:i_rho + 1 + K] = 0.0
        ws[i_pq:i_pq + K] = 0.0
        ws[i_rr + 1:i_rr + 1 + K] = 0.0

    def block_end(self, ws, i_rho, i_rr, k):
        ws[i_rho] = ws[i_rho + k]
        ws[i_rr] = ws[i_rr + k]

    # ---- multigrid
    def _level(self, M, dtype):
        """A SciPy view of a LevelCSR with its values in ``dtype`` (float16 storage: the float16 values
        widened exactly, as the GPU kernels read them), kept on the matrix."""
        dtype = np.dtype(dtype)
        hit = M.cache.get(("scipy", dtype))
        if hit is None:
            vals = M.vals if M.vals.dtype == dtype else M.vals.astype(dtype)
            hit = M.cache[("scipy", dtype)] = sp.csr_matrix((vals, M.indices, M.indptr), shape=M.shape)
        return hit

    def _mv(self, M, x):
        if M.offsets is not None:
            return self._dia_mv(M, x)
        y = self._level(M, x.dtype) @ x
        if M.rowscale is not None:
            y *= M.rowscale
        return y

    @staticmethod
    def _dia_mv(M, x):
        """A DIA level (vals[k n + i] = a_{i, i + offsets[k]}) times x in x's dtype, diagonal by diagonal in the
        order of the offsets (the GPU kernels' order within a row)."""
        n, T = M.rows, x.dtype
        vals = M.vals.reshape(M.ndiag, n)
        y = np.zeros(n, dtype=T)
        for k, off in enumerate(M.offsets.tolist()):
            lo, hi = max(0, -off), min(n, n - off)
            if lo < hi:
                y[lo:hi] += vals[k, lo:hi].astype(T) * x[lo + off:hi + off]
        if M.rowscale is not None:
            y *= M.rowscale
        return y

    def csr_apply(self, M, x, y, a=1.0, b=None, c=0.0):
        T = y.dtype.type
        out = self._mv(M, x)
        if a != 1.0:
            out *= T(a)
        if b is not None:
            out += T(c) * b
        y[:] = out

    def mg_smooth(self, M, x_in, b, dinv, d, x_out, c_d, c_r, first):
        T = d.dtype.type
        if first:
            np.multiply(dinv, b, out=d)
            d *= T(c_r)
            x_out[:] = d
            return
        r = b - self._mv(M, x_in)
        d *= T(c_d)
        d += T(c_r) * (dinv * r)
        np.add(x_in, d, out=x_out)

    def check_matrix(self, n, indptr, indices, vals, dinv_out, ws, base):
        finite = np.isfinite(vals)
        ws[base + lowops.CHECK_NONFINITE] += float(vals.size - np.count_nonzero(finite))
        ws[base + lowops.CHECK_BAD_INDEX] += float(np.count_nonzero((indices < 0) | (indices >= n)))
        if ws[base + lowops.CHECK_BAD_INDEX] or not finite.all():
            return      # nothing more is decided on such a matrix
        M = sp.csr_matrix((vals, indices, indptr), shape=(n, n))
        if vals.size:
            ws[base + lowops.CHECK_MAX_ABS] = max(ws[base + lowops.CHECK_MAX_ABS], float(np.abs(vals).max()))
            T = M.T.tocsr()      # sorted CSR of A^T: compare values where the patterns agree
            if np.array_equal(T.indptr, M.indptr) and np.array_equal(T.indices, M.indices):
                asym = float(np.abs(vals - T.data).max())
            else:
                asym = float(abs(M - T).max())
            ws[base + lowops.CHECK_MAX_ASYM] = max(ws[base + lowops.CHECK_MAX_ASYM], asym)
        diag = M.diagonal()
        good = diag > 0
        ws[base + lowops.CHECK_BAD_DIAG] += float(n - np.count_nonzero(good))
        if n:
            ws[base + lowops.CHECK_MAX_DIAG] = max(ws[base + lowops.CHECK_MAX_DIAG], float(np.abs(diag).max()))
        dinv_out[:] = 0.0
        np.divide(1.0, diag, out=dinv_out, where=good)

    def timer(self):
        return lowops.EventTimer(lambda: [0.0], lambda e: e.__setitem__(0, time.perf_counter()),
                                    lambda a, b: b[0] - a[0], lambda e: None)


@functools.lru_cache(maxsize=1)
def low_ops() -> NumpyLowOps:
    return NumpyLowOps()
