"""Vector operations the Krylov solvers are written against, and the NumPy/SciPy reference.

The algorithms in :mod:`hpcsolve.fem.krylov` (CG, Jacobi-PCG, restarted iterative refinement,
CG with reliable updates) touch vectors and the matrix only through an ``Ops`` object. A GPU
backend (``hpcsolve.fem.kernels_cupy``, ``hpcsolve.fem.kernels_numba``) provides its own Ops with
fused kernels behind the same methods; the algorithm does not change. See docs/fem_solvers.md.

Conventions every Ops follows:

- One Ops holds the matrix in ONE working precision (``ops.dtype``); ``ops.astype(dtype)``
  returns an Ops for the same matrix in another precision (sharing the index arrays).
- Vectors are backend arrays of the working dtype unless a method says otherwise.
- Scalars returned by reductions (``dot``, ``spmv_dot``, ``update_xr``, ``residual``) and by
  ``div`` are *device scalars*: opaque values that stay on the device. The algorithm turns them
  into host floats only through ``scalars_to_host`` / ``to_float``, and only at convergence
  checks (every ``check_every`` iterations), so a GPU iteration needs no host synchronization.
  Methods that take a scalar coefficient accept either a device scalar or a host float.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np
import scipy.sparse as sp


class Ops(Protocol):
    """What a backend provides to the Krylov solvers (the NumPy class below is the reference)."""

    backend: str
    dtype: np.dtype
    n: int

    def astype(self, dtype) -> "Ops": ...                     # same matrix, other working precision
    def vector(self, host: np.ndarray | None = None): ...     # zeros, or a copy of a host array, in ops.dtype
    def to_host(self, v) -> np.ndarray: ...
    def copy(self, src, dst, scale=1.0) -> None: ...          # dst[:] = scale * src (dtypes may differ: a cast)
    def zero(self, v) -> None: ...                             # v[:] = 0
    def spmv(self, x, y) -> None: ...                          # y = A x
    def spmv_dot(self, p, q): ...                              # q = A p; returns p.q
    def residual(self, b, x, r): ...                           # r = b - A x; returns r.r
    def dot(self, x, y): ...
    def axpy(self, a, x, y) -> None: ...                       # y += a x (x may be another dtype: cast)
    def inverse_diagonal(self): ...                            # 1 / diag(A) as a vector (Jacobi)
    def precondition(self, dinv, r, z): ...                    # z = dinv * r; returns r.z
    def update_xr(self, x, r, p, q, alpha, dinv=None, z=None): ...
    #   x += alpha p; r -= alpha q; if dinv: z = dinv * r. Returns (r.z, r.r) (r.z is r.r without dinv)
    def update_p(self, p, z, beta) -> None: ...                # p = z + beta p
    def div(self, a, b): ...                                   # a / b as a device scalar; 0 where b == 0
    def to_float(self, s) -> float: ...                        # one device scalar to the host (syncs)
    def scalars_to_host(self, seq: Sequence) -> np.ndarray: ...  # many device scalars, one sync
    def synchronize(self) -> None: ...


def _host_float(s) -> float:
    return float(s)


class NumpyOps:
    """Reference Ops: SciPy CSR SpMV and NumPy BLAS-1, all arithmetic in ``dtype``.

    float32 here really computes in float32 (SciPy's csr_matvec and BLAS sdot are templated on the
    data type), so the NumPy fp32 run shows the same attainable-accuracy floor as a GPU fp32 run.
    """

    backend = "numpy"

    def __init__(self, A: sp.csr_matrix, dtype=np.float64):
        self.dtype = np.dtype(dtype)
        A = sp.csr_matrix(A)
        if A.dtype != self.dtype:
            A = sp.csr_matrix((A.data.astype(self.dtype), A.indices, A.indptr), shape=A.shape)
        self.A = A
        self.n = A.shape[0]

    def astype(self, dtype) -> "NumpyOps":
        return NumpyOps(self.A, dtype)

    def vector(self, host=None):
        if host is None:
            return np.zeros(self.n, dtype=self.dtype)
        return np.array(host, dtype=self.dtype, copy=True)

    def to_host(self, v):
        return np.asarray(v)

    def copy(self, src, dst, scale=1.0):
        if scale == 1.0:
            dst[...] = src
        else:
            np.multiply(src, scale, out=dst, casting="unsafe")

    def zero(self, v):
        v.fill(0)

    def spmv(self, x, y):
        y[...] = self.A @ x

    def spmv_dot(self, p, q):
        q[...] = self.A @ p
        return np.dot(p, q)

    def residual(self, b, x, r):
        np.subtract(b, self.A @ x, out=r)
        return np.dot(r, r)

    def dot(self, x, y):
        return np.dot(x, y)

    def axpy(self, a, x, y):
        a = y.dtype.type(a)
        if x.dtype == y.dtype:
            y += a * x
        else:
            y += a * x.astype(y.dtype)

    def inverse_diagonal(self):
        return (1.0 / self.A.diagonal()).astype(self.dtype)

    def precondition(self, dinv, r, z):
        np.multiply(dinv, r, out=z)
        return np.dot(r, z)

    def update_xr(self, x, r, p, q, alpha, dinv=None, z=None):
        alpha = self.dtype.type(alpha)
        x += alpha * p
        r -= alpha * q
        rr = np.dot(r, r)
        if dinv is None:
            return rr, rr
        np.multiply(dinv, r, out=z)
        return np.dot(r, z), rr

    def update_p(self, p, z, beta):
        p *= self.dtype.type(beta)
        p += z

    def div(self, a, b):
        a, b = self.dtype.type(a), self.dtype.type(b)
        return a / b if b != 0 else self.dtype.type(0)

    def to_float(self, s):
        return _host_float(s)

    def scalars_to_host(self, seq):
        return np.asarray([float(s) for s in seq], dtype=np.float64)

    def synchronize(self):
        pass


def make_ops(A, backend: str = "numpy", dtype=np.float64):
    """The Ops of ``backend`` for host CSR matrix ``A`` in working precision ``dtype``.

    GPU backends live in modules another part of the project writes; each provides
    ``make_ops(A, dtype)`` returning an object with the methods of :class:`Ops`.
    """
    if backend == "numpy":
        return NumpyOps(A, dtype)
    if backend == "cupy":
        from hpcsolve.fem import kernels_cupy

        return kernels_cupy.make_ops(A, dtype)
    if backend == "numba-cuda":
        from hpcsolve.fem import kernels_numba

        return kernels_numba.make_ops(A, dtype)
    from hpcsolve.errors import CaseError

    raise CaseError.invalid("backend", backend, "numpy, cupy, numba-cuda")
