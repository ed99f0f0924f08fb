"""The one low-level ops interface the conjugate gradients of :mod:`hpcsolve.fem.linalg.cg` run on.

A backend provides these as one object (``Backend.piece("fem.low_ops")()``, i.e. ``low_ops()`` of
``kernels_numpy_low`` / ``kernels_cupy`` / ``kernels_numba``): arrays, a handful of fused kernels and,
where it can, CUDA graphs. The algorithm and every decision live in ``cg``; a backend supplies
kernels, not decisions. ``kernels_numpy_low`` is the reference: it computes what the GPU kernels
compute, in the same precisions, so a CPU run takes the same decisions (iteration counts) as a GPU run.

Conventions:

- Vectors are backend arrays of one working dtype T (float32 or float64); a float32 kernel really
  computes in float32. Matrices are :class:`hpcsolve.fem.linalg.matrix.DeviceCSR` (int32 ``indptr`` /
  ``indices`` shared by the float64 and float32 values, ``A.vals[dtype]``).
- Scalars live in a float64 array in device memory, ``ws``. Reductions *add* into a slot
  (``ws[i] += x.y``; the caller zeroes it), so nothing synchronizes until the host reads ``ws``.
  A slot index < 0 means "do not accumulate".
- A coefficient is a triple ``(i_num, i_den, c)`` meaning ``c * ws[i_num] / ws[i_den]``
  (``i_den < 0``: ``c * ws[i_num]``; ``i_num < 0``: ``c``); a division by zero gives 0.
  Kernels compute it in float64 and cast it to T.
- Dot products: products in T, summed in float64 (the summation order is the backend's).
- ``dinv`` arguments are the Jacobi diagonal ``1 / diag(A)`` in the vectors' dtype, or None.
"""

from __future__ import annotations

import contextlib

import numpy as np
import scipy.sparse

from hpcsolve.core.backends import get_array_module


class LowOps:
    """What a backend implements. Documentation of the contract; the backends subclass it."""

    name = "low"                 #: the backend's name (reports only; code asks capabilities)
    supports_graphs = False      #: ``capture`` can record a block of launches into a CUDA graph
    graphs = False               #: and is switched on
    compiles_lazily = False      #: kernels compile at their first launch (then never first launched in a capture)
    mixed_x_update = False       #: ``update_xp`` accepts a float64 x with float32 p (accumulate="fp64")
    host_resident = False        #: the arrays are host (NumPy) arrays: no device copies, no transfers

    def sparse_modules(self):
        """(array module, sparse module) a multigrid hierarchy is built with: on the host (NumPy, SciPy) unless
        the backend's own arrays have a sparse library (CuPy: cupy, cupyx.scipy.sparse; the set-up then stays on
        the device)."""
        return np, scipy.sparse

    def owns(self, xp) -> bool:
        """True when arrays of the array module ``xp`` already are this backend's device arrays."""
        return False

    def adopt(self, a):
        """An array of the set-up's array module (NumPy, or CuPy from ``sparse_modules``) as this backend's array:
        itself where the backend owns its module, else a copy through the host (Numba-CUDA with CuPy: a view of
        the same device memory)."""
        if self.owns(get_array_module(a)):
            return a
        return self.to_device(a.get() if hasattr(a, "get") else a)

    def as_array_of(self, a, xp):
        """This backend's array ``a`` as an array of ``xp`` (NumPy, or the CuPy of ``sparse_modules``)."""
        h = self.to_host(a)
        return h if xp is np else xp.asarray(h)

    def launch_twin(self):
        """(ops, view) for set-up work made of many small launches (the smoothers' power iterations): ops that
        launch the same kernels on this backend's stream at a lower cost per launch, and ``view(a)``, this
        backend's array ``a`` as theirs (the same memory); None where this backend's own launches are the
        cheapest (here). Numba-CUDA gives CuPy's kernels where CuPy imports (a launch from Python costs 47 us
        through Numba, 7.5 us through CuPy)."""
        return None

    # ---- arrays
    def to_device(self, a): raise NotImplementedError            # a copy of a host array
    def to_host(self, a): raise NotImplementedError              # a NumPy copy (synchronizes)
    def zeros(self, n, dtype): raise NotImplementedError
    def astype(self, a, dtype): raise NotImplementedError        # a new array, cast
    def scale_copy(self, src, dst, scale=1.0): raise NotImplementedError   # dst = scale src (wider type)
    def fill_zero(self, a): raise NotImplementedError
    def sync(self): raise NotImplementedError
    def timer(self): raise NotImplementedError                   # EventTimer of the backend's stream

    def context(self):
        """A context manager under which array-library calls (CuPy, cupyx.scipy.sparse) run on the ops'
        stream, so that they are ordered with the kernels (a set-up that mixes both must use it)."""
        return contextlib.nullcontext()

    def capture(self, fn):
        """A callable replaying what ``fn()`` launches (a CUDA graph), or None: then call ``fn`` each time."""
        return None

    # ---- kernels (bytes moved: docs/design/fem_gpu.md)
    def spmv_dot(self, A, p, q, ws, i_pq): raise NotImplementedError
    #   q = A p; ws[i_pq] += p.q
    def residual(self, A, x, b, r_out, dinv, ws, i_rz, i_rr): raise NotImplementedError
    #   r = b - A x computed in x's dtype, stored in r_out's; ws[i_rr] += r.r; with dinv ws[i_rz] += r.dinv.r
    def replace_residual(self, A, x64, b64, r, p, dinv64, ws, i_rz, i_rr): raise NotImplementedError
    #   r_true = b - A x in float64; p += [dinv] (r_true - r); r = r_true; ws[i_rr] += r.r [; ws[i_rz] += r.dinv.r]
    def dot(self, x, y, ws, i): raise NotImplementedError
    #   ws[i] += x.y
    def axpy(self, coef, x, y, ws): raise NotImplementedError
    #   y += a x (x may be float32 and y float64: computed in y's dtype)
    def precondition(self, dinv, r, z, ws, i_rz): raise NotImplementedError
    #   z = dinv r; ws[i_rz] += r.z
    def precondition_init(self, r, p, dinv, ws, i_rz, i_rr): raise NotImplementedError
    #   p = [dinv] r; ws[i_rr] += r.r; with dinv ws[i_rz] += r.dinv.r
    def update_r(self, r, q, dinv, ws, i_rho, i_pq, i_rz, i_rr): raise NotImplementedError
    #   alpha = ws[i_rho] / ws[i_pq]; r -= alpha q; ws[i_rr] += r.r; with dinv ws[i_rz] += r.dinv.r
    def update_xp(self, x, p, r, dinv, ws, i_rho, i_pq, beta): raise NotImplementedError
    #   alpha as above, beta = coefficient triple (CG: (i_rho1, i_rho, 1.0) = rho_{j+1} / rho_j; flexible
    #   CG (Notay 2000): (i_zq, i_pq, -1.0) = -z_{j+1}.q_j / p_j.q_j); x += alpha p; p = [dinv] r + beta p
    def fold(self, x64, y): raise NotImplementedError
    #   x64 += y; y = 0
    def block_start(self, ws, i_rho, i_pq, i_rr, K): raise NotImplementedError
    #   ws[i_rho+1 .. i_rho+K] = ws[i_pq .. i_pq+K-1] = ws[i_rr+1 .. i_rr+K] = 0
    def block_end(self, ws, i_rho, i_rr, k): raise NotImplementedError
    #   ws[i_rho] = ws[i_rho+k]; ws[i_rr] = ws[i_rr+k]
    # ---- multigrid (hpcsolve.fem.linalg.precond.multigrid): level matrices are LevelCSR (possibly rectangular, values
    #      stored in float64, float32 or float16, optional per-row scale; square ones possibly stored by
    #      diagonals, LevelCSR.offsets); vectors of one dtype T
    def csr_apply(self, M, x, y, a=1.0, b=None, c=0.0): raise NotImplementedError
    #   y = a (M x) + c b, computed in y's dtype T (b None: y = a M x); b may be y itself (y += a M x
    #   with c = 1). (M x)_i = rowscale_i * sum_k T(vals_k) x_j when M.rowscale is not None.
    def mg_smooth(self, M, x_in, b, dinv, d, x_out, c_d, c_r, first): raise NotImplementedError
    #   one Chebyshev (c_d != 0) or damped-Jacobi (c_d = 0) step on M x = b, in T:
    #   first: d = c_r dinv b; x_out = d              (the initial guess is 0; x_in is not read)
    #   else:  d = c_d d + c_r dinv (b - M x_in); x_out = x_in + d    (x_out never aliases x_in)

    def check_matrix(self, n, indptr, indices, vals, dinv_out, ws, base): raise NotImplementedError
    #   one pass over a CSR matrix (rows sorted, no duplicates), float64 values; accumulates into
    #   ws[base + CHECK_*] (zeroed by the caller) what hpcsolve.fem.linalg.matrix decides on, and writes
    #   dinv_out[i] = 1 / a_ii where a_ii > 0, else 0 (see CHECK_SLOTS)


class LevelCSR:
    """A matrix of a multigrid hierarchy on a backend's device: ``rows x cols`` CSR with int32 ``indptr`` /
    ``indices``, values ``vals`` stored in ``storage`` (float64, float32 or float16), applied in
    ``compute`` (float64 or float32, the dtype of the vectors). 16-bit storage keeps the rows scaled to a
    unit diagonal (``vals = a_ij / a_ii``, ``rowscale = a_ii`` in ``compute``) so that no coefficient
    range (jumps of 1e6) over- or underflows; otherwise ``rowscale`` is None. ``cache`` holds what a
    backend derives from it (e.g. a SciPy view).

    Or stored by diagonals (DIA; ``offsets`` given, ``indptr`` / ``indices`` None): a square matrix with
    ``ndiag`` distinct offsets j - i (int32 device array, ascending), ``vals`` of ndiag x rows entries,
    diagonal-major: ``vals[k rows + i] = a_{i, i + offsets[k]}``, 0 where that lies outside the matrix or is
    not stored. No column index is read: on the structured grids of geometric multigrid this moves fewer bytes
    (``Multigrid`` chooses it where it does). ``nnz`` stays the number of stored nonzeros of the matrix."""

    def __init__(self, rows, cols, indptr, indices, vals, compute, rowscale=None, *, offsets=None, nnz=None):
        self.rows, self.cols = int(rows), int(cols)
        self.indptr, self.indices, self.vals, self.rowscale = indptr, indices, vals, rowscale
        self.offsets = offsets
        self.ndiag = int(offsets.size) if offsets is not None else 0
        self.nnz = int(nnz) if nnz is not None else int(indices.size)
        self.storage = np.dtype(vals.dtype)
        self.compute = np.dtype(compute)
        self.cache: dict = {}

    @property
    def format(self) -> str:
        return "dia" if self.offsets is not None else "csr"

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.cols)

    @property
    def nbytes(self) -> int:
        """Bytes one application reads from the matrix (values, indices / offsets, row pointers, row scales)."""
        scale = self.rows * self.compute.itemsize if self.rowscale is not None else 0
        if self.offsets is not None:
            return self.ndiag * self.rows * self.storage.itemsize + self.ndiag * 4 + scale
        return self.nnz * (self.storage.itemsize + 4) + (self.rows + 1) * 4 + scale


#: ws slots of ``check_matrix`` (offsets from ``base``): counts are sums, the rest maxima of values >= 0
CHECK_NONFINITE = 0      # number of NaN / Inf values
CHECK_MAX_ABS = 1        # max |a_ij| over the finite values
CHECK_MAX_ASYM = 2       # max |a_ij - a_ji| (a missing a_ji counts as 0)
CHECK_BAD_DIAG = 3       # number of rows whose diagonal entry is missing or not > 0
CHECK_MAX_DIAG = 4       # max |a_ii|
CHECK_BAD_INDEX = 5      # number of column indices outside [0, n)
CHECK_SLOTS = 6


class EventTimer:
    """Device-event timing: ``with t: ...`` then ``t.seconds``."""

    def __init__(self, make_event, record, elapsed, wait):
        self._make, self._record, self._elapsed, self._wait = make_event, record, elapsed, wait
        self.seconds = 0.0

    def __enter__(self):
        self._a, self._b = self._make(), self._make()
        self._record(self._a)
        return self

    def __exit__(self, *exc):
        self._record(self._b)
        self._wait(self._b)
        self.seconds = self._elapsed(self._a, self._b)
        return False
