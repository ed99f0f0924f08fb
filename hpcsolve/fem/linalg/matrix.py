"""The matrix of a solve, on a backend's device, checked once.

``prepare(A, low, backend)`` turns a SciPy (or dense) matrix into a :class:`DeviceCSR`: the host does
only what is structural and cheap (sparse format, dtype, sorted rows without duplicates, int32
indices: no pass over the values when the matrix already has that form), uploads the float64 values
and the index arrays once, and the backend's ``check_matrix`` kernel then checks the values on the
device in one pass (non-finite entries, symmetry ``max |a_ij - a_ji|`` by a search for a_ji in row j,
a positive diagonal) and leaves ``1 / diag(A)`` there for Jacobi. :func:`judge` turns what the kernel
found into one CaseError; the same function judges the host check of ``check_system`` (NumPy low ops).

A DeviceCSR can be passed to ``hpcsolve.fem.solve`` as ``A`` again and again (``prepare_matrix``):
nothing is converted, checked or uploaded a second time; float32 values are made on the device the
first time a float32 solve needs them.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from hpcsolve.core.errors import CaseError
from hpcsolve.fem.linalg import lowops
from hpcsolve.core import backends
from hpcsolve.fem.linalg.kernels_numpy_low import low_ops

F64 = np.dtype(np.float64)
F32 = np.dtype(np.float32)
SYMMETRIC_TOL = 1e-10          # max |A - A^T| <= SYMMETRIC_TOL * max |A|
_INT32_MAX = 2**31 - 1


class DeviceCSR:
    """A CSR matrix on the device of ``low``: one int32 indptr/indices pair shared by the float64 values
    and those of other working precisions (``vals[dtype]``, made on the device by ``ensure``)."""

    def __init__(self, low, n: int, nnz: int, indptr, indices, vals64, *, dinv64, max_abs: float,
                 max_diag: float):
        self.low = low
        self.n, self.nnz = int(n), int(nnz)
        self.indptr, self.indices = indptr, indices
        self.vals = {F64: vals64}
        self._dinv = {F64: dinv64}
        self.max_abs = float(max_abs)      # max |a_ij|
        self.max_diag = float(max_diag)    # max |a_ii|: bounds ||A|| by 2 max a_ii for Jacobi's rounding estimate
        self.cache: dict = {}              # the backend's own derived objects (e.g. a SciPy view)
        # the whole system: one block of rows here; a rank's block of a distributed matrix
        # (hpcsolve.fem.linalg.distributed.DistributedCSR) overrides these
        self.global_n = self.n             # unknowns of the whole system (the length of b and x)
        self.ncols = self.n                # columns of the stored block (a rank's halo columns follow its own)
        self.row_nnz = self.nnz / max(self.n, 1)     # nonzeros per row of the whole matrix
        self.distributed = False

    def local(self, v):
        """This block's entries of a whole-system vector."""
        return v

    def gather(self, v):
        """The whole-system vector from every block's entries."""
        return v

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.n)

    @property
    def backend(self):
        """The hpcsolve.core.backends.Backend whose device holds the matrix."""

        return backends.get(self.low.name)

    def __repr__(self) -> str:
        return f"<DeviceCSR {self.n}x{self.n}, {self.nnz} nonzeros, on {self.low.name}>"

    def ensure(self, dtype):
        """The values in ``dtype`` (cast on the device once, then kept)."""
        dtype = np.dtype(dtype)
        if dtype not in self.vals:
            self.vals[dtype] = self.low.astype(self.vals[F64], dtype)
        return self.vals[dtype]

    def dinv(self, dtype):
        """1 / diag(A) in ``dtype`` (the Jacobi preconditioner), computed in float64 and cast."""
        dtype = np.dtype(dtype)
        if dtype not in self._dinv:
            self._dinv[dtype] = self.low.astype(self._dinv[F64], dtype)
        return self._dinv[dtype]

    def on(self, low, convert) -> "DeviceCSR":
        """The same device arrays seen by another low ops on the same device (zero copy; ``convert`` makes
        one array of this backend an array of that one, e.g. numba.cuda.as_cuda_array)."""
        other = DeviceCSR(low, self.n, self.nnz, convert(self.indptr), convert(self.indices),
                          convert(self.vals[F64]), dinv64=convert(self._dinv[F64]), max_abs=self.max_abs,
                          max_diag=self.max_diag)
        other.vals.update({d: convert(v) for d, v in self.vals.items()})
        other._dinv.update({d: convert(v) for d, v in self._dinv.items()})
        return other

    def update_values(self, A, field: str = "A") -> "DeviceCSR":
        """New values with the same sparsity (a time loop, a nonlinear iteration): uploaded and checked as
        ``prepare`` does, the other precisions' values made again; everything derived from the old values is
        dropped from ``cache`` except entries keyed ("structure", ...), which depend on the sparsity only (the
        aggregates of smoothed aggregation: the next multigrid set-up is numeric only). A CaseError where the
        sparsity differs."""
        if self.distributed:
            raise CaseError.invalid(field, "a distributed matrix", "a matrix on one device",
                                    why="values-only updates of a distributed matrix are not implemented")
        csr = as_csr(A, field)
        low = self.low
        same = csr.shape == self.shape and csr.nnz == self.nnz and np.array_equal(low.to_host(self.indptr), csr.indptr) \
            and np.array_equal(low.to_host(self.indices), csr.indices)
        if not same:
            raise CaseError.invalid(field, f"shape {csr.shape}, {csr.nnz} nonzeros, another sparsity",
                                    f"the sparsity of the prepared matrix ({self.n} x {self.n}, {self.nnz} nonzeros)",
                                    why="a values-only update keeps the structure; prepare_matrix the new matrix")
        fresh = _checked(low, self.n, self.indptr, self.indices, low.to_device(csr.data), field, host=csr)
        others = [d for d in self.vals if d != F64]
        self.vals, self._dinv = {F64: fresh.vals[F64]}, {F64: fresh._dinv[F64]}
        self.max_abs, self.max_diag = fresh.max_abs, fresh.max_diag
        for d in others:
            self.ensure(d)
        self.cache = {k: v for k, v in self.cache.items() if isinstance(k, tuple) and k[:1] == ("structure",)}
        return self

    def to_scipy(self) -> sp.csr_matrix:
        """A host copy (float64), e.g. for the direct solver or an error message."""
        low = self.low
        return sp.csr_matrix((low.to_host(self.vals[F64]), low.to_host(self.indices), low.to_host(self.indptr)),
                             shape=self.shape)


def as_csr(A, field: str = "A") -> sp.csr_matrix:
    """A square real CSR matrix with float64 values, sorted rows without duplicates and int32 indices.

    Structural only (no pass over the values): a float64 CSR matrix in canonical form with int32
    indices is returned as is (sharing its arrays); anything else is converted into a new matrix, the
    caller's is never modified."""
    if not sp.issparse(A):
        if hasattr(A, "__cuda_array_interface__") or type(A).__module__.startswith("cupy"):
            raise CaseError.invalid(field, type(A).__name__, "a SciPy sparse matrix or a NumPy array (host memory)",
                                    why="pass a device matrix through hpcsolve.fem.prepare_matrix")
        kind = type(A).__name__
        try:
            A = np.asarray(A)
        except Exception as exc:
            raise CaseError.invalid(field, kind, "a square 2D matrix (SciPy sparse or dense)",
                                    why=f"not an array ({type(exc).__name__})") from None
        if A.ndim != 2:
            raise CaseError.invalid(field, f"{kind} of shape {A.shape}", "a square 2D matrix (SciPy sparse or dense)")
    _check_real(A.dtype, field)
    n, m = A.shape
    if n != m:
        raise CaseError.invalid(field, f"shape {A.shape}", "a square matrix")
    if sp.issparse(A) and A.format == "csr" and A.dtype == F64:
        csr = A                                      # used as is, never modified
    else:
        csr = sp.csr_matrix(A, dtype=np.float64)     # new arrays
    if csr.nnz > _INT32_MAX or n > _INT32_MAX:
        raise CaseError.invalid(field, f"{n} rows, {csr.nnz} nonzeros", f"at most {_INT32_MAX} of each",
                                why="the kernels index with int32")
    if not csr.has_canonical_format:                 # scipy keeps this flag; computed once otherwise
        csr = sp.csr_matrix(csr, copy=True)
        csr.sum_duplicates()                         # sorts the rows, too
    if csr.indices.dtype != np.int32 or csr.indptr.dtype != np.int32:
        csr = sp.csr_matrix((csr.data, csr.indices.astype(np.int32), csr.indptr.astype(np.int32)), shape=csr.shape)
    return csr


def _check_real(dtype, field: str) -> None:
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        raise CaseError.invalid(field, f"{dtype} entries", "a real matrix (float or integer entries)",
                                why="CG here solves real symmetric positive definite systems; a complex matrix "
                                    "would lose its imaginary part")
    if dtype.kind not in "biuf":
        raise CaseError.invalid(field, f"{dtype} entries", "a real matrix (float or integer entries)")


def prepare(A, low, field: str = "A") -> DeviceCSR:
    """Upload a host matrix once (float64 values, int32 indices) and check it on the device."""
    csr = as_csr(A, field)
    n = csr.shape[0]
    return _checked(low, n, low.to_device(csr.indptr), low.to_device(csr.indices), low.to_device(csr.data),
                    field, host=csr)


def from_device_arrays(low, n, indptr, indices, vals64, dtypes=(F64,), field: str = "A") -> DeviceCSR:
    """A matrix already on the device (int32 CSR arrays, rows sorted without duplicates), checked there."""
    A = _checked(low, int(n), indptr, indices, vals64, field)
    for d in dtypes:
        A.ensure(d)
    return A


def _checked(low, n, indptr, indices, vals64, field, host=None) -> DeviceCSR:
    nnz = int(indices.size)
    ws = low.zeros(lowops.CHECK_SLOTS, F64)
    dinv64 = low.zeros(n, F64)
    if n:
        low.check_matrix(n, indptr, indices, vals64, dinv64, ws, 0)
    found = low.to_host(ws)
    judge(found, lambda: host if host is not None else sp.csr_matrix(
        (low.to_host(vals64), low.to_host(indices), low.to_host(indptr)), shape=(n, n)), field)
    return DeviceCSR(low, n, nnz, indptr, indices, vals64, dinv64=dinv64, max_abs=found[lowops.CHECK_MAX_ABS],
                     max_diag=found[lowops.CHECK_MAX_DIAG])


def judge(found, host, field: str = "A", symmetric_tol: float = SYMMETRIC_TOL) -> None:
    """Raise the CaseError for what ``check_matrix`` found, if anything; ``host()`` gives the matrix on the
    host to name an entry (called only then)."""
    asym, scale = float(found[lowops.CHECK_MAX_ASYM]), float(found[lowops.CHECK_MAX_ABS])
    if not (found[lowops.CHECK_NONFINITE] or found[lowops.CHECK_BAD_INDEX] or found[lowops.CHECK_BAD_DIAG]
            or asym > symmetric_tol * max(scale, 1e-300)):
        return
    M = host()
    if found[lowops.CHECK_NONFINITE]:
        k = int(np.flatnonzero(~np.isfinite(M.data))[0])
        raise CaseError.invalid(field, float(M.data[k]), "finite entries", why="the matrix holds NaN or Inf")
    if found[lowops.CHECK_BAD_INDEX]:
        bad = M.indices[(M.indices < 0) | (M.indices >= M.shape[0])]
        raise CaseError.invalid(field, f"column index {int(bad[0])}", f"indices in [0, {M.shape[0]})",
                                why="the CSR structure is broken")
    if found[lowops.CHECK_BAD_DIAG]:
        diag = M.diagonal()
        k = int(np.flatnonzero(~(diag > 0))[0])
        raise CaseError.invalid(field, f"A[{k},{k}] = {diag[k]:g}", "a symmetric positive definite matrix",
                                why="CG needs an SPD matrix and this one has a non-positive diagonal entry")
    raise CaseError.invalid(field, f"max |A - A^T| = {asym:.3e}", "a symmetric matrix",
                            why="CG needs a symmetric matrix")


def check_host(csr: sp.csr_matrix, field: str = "A", symmetric_tol: float = SYMMETRIC_TOL) -> None:
    """The same check on a host matrix (from ``as_csr``), by the NumPy low ops."""

    n = csr.shape[0]
    ws = np.zeros(lowops.CHECK_SLOTS)
    if n:
        low_ops().check_matrix(n, csr.indptr, csr.indices, csr.data, np.zeros(n), ws, 0)
    judge(ws, lambda: csr, field, symmetric_tol)
