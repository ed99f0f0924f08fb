"""How the levels of a multigrid hierarchy sit on the device: a SciPy or CuPy sparse matrix uploaded as the low
ops' :class:`~hpcsolve.fem.linalg.lowops.LevelCSR` (CSR, or by diagonals where that reads fewer bytes: the DIA
layout of structured levels), the dense coarsest level, the Jacobi diagonal, and the moves of arrays between
NumPy, CuPy and the backend's own arrays that the set-up needs."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from hpcsolve.core.backends import get_array_module
from hpcsolve.fem.linalg.lowops import LevelCSR
from hpcsolve.fem.linalg.precond.mg_options import F64

DIA_MAX_DIAGONALS = 32      # "auto" stores a level by diagonals when it has at most this many distinct offsets
                            # and that reads no more bytes than CSR (values + column indices)


# --------------------------------------------------------------------------- arrays between NumPy, CuPy and the device
def dev(low, a, xp):
    """An array of ``xp`` (NumPy or CuPy) as an array of ``low`` (``LowOps.adopt``: zero copy where it can)."""
    if low.owns(xp):
        return a
    return low.adopt(a)


def from_dev(low, a, xp):
    """An array of ``low`` as an array of ``xp`` (NumPy or CuPy; ``LowOps.as_array_of``)."""
    if low.owns(xp):
        return a
    return low.as_array_of(a, xp)


def host(a):
    """A NumPy array of a NumPy or CuPy one."""
    return a.get() if hasattr(a, "get") else np.asarray(a)


def convert(low, a):
    """A CuPy array as an array of ``low`` (the same device memory where ``low`` can see it: ``LowOps.adopt``)."""
    return low.adopt(a)


def host_csr(M) -> sp.csr_matrix:
    """A SciPy copy of a SciPy or CuPy sparse matrix."""
    if isinstance(M, sp.spmatrix) or isinstance(M, getattr(sp, "sparray", ())):
        return sp.csr_matrix(M)
    return M.get().tocsr()


def canonical(M, sparse):
    """CSR with sorted indices, no duplicates and int32 index arrays."""
    M = M.tocsr()
    M.sum_duplicates()
    if not M.has_sorted_indices:
        M.sort_indices()
    if M.indices.dtype != np.int32:
        M = sparse.csr_matrix((M.data, M.indices.astype(np.int32), M.indptr.astype(np.int32)), shape=M.shape)
    return M


def level64(low, M, xp) -> LevelCSR:
    """A float64 CSR matrix of ``xp`` as a LevelCSR of ``low`` (the probe products of the Galerkin set-up)."""
    return LevelCSR(M.shape[0], M.shape[1], dev(low, M.indptr.astype(xp.int32), xp),
                    dev(low, M.indices.astype(xp.int32), xp), dev(low, M.data.astype(xp.float64), xp), F64)


# --------------------------------------------------------------------------- level operators on the device
def _entry_rows(M, xp):
    """The row of every stored entry of CSR M, in the order of its data (int32: a level's n < 2^31)."""
    return M.tocoo().row.astype(xp.int32)


def dia_layout(M, storage):
    """(entry rows, entry offsets j - i, the distinct offsets ascending) of square M where storing it by
    diagonals pays: at most DIA_MAX_DIAGONALS offsets, and ndiag values per row read no more bytes than CSR's
    nnz / rows values and column indices; else None."""
    rows, cols = M.shape
    if rows != cols or rows == 0 or M.nnz == 0:
        return None
    xp = get_array_module(M.data)
    row = _entry_rows(M, xp)
    off = M.indices.astype(xp.int32, copy=False) - row
    offsets = _distinct(off, xp)
    s = np.dtype(storage).itemsize
    if offsets.size > DIA_MAX_DIAGONALS or offsets.size * rows * s > M.nnz * (s + 4):
        return None
    return row, off, offsets


def _distinct(off, xp):
    """The distinct values of int32 ``off``, ascending: those of a sample of about 2^20 entries, checked against
    every entry through a lookup table (no sort of every entry, no writes to a few shared addresses); the
    unique of all entries when the sample missed one."""
    step = max(1, off.size >> 20)
    cand = xp.unique(off[::step]) if step > 1 else xp.unique(off)
    if step == 1:
        return cand
    lo, hi = int(off.min()), int(off.max())
    if hi - lo >= 1 << 24 or int(cand[0]) != lo or int(cand[-1]) != hi:
        return xp.unique(off)
    known = xp.zeros(hi - lo + 1, dtype=xp.bool_)
    known[cand - lo] = True
    return cand if bool(known[off - lo].all()) else xp.unique(off)


def upload(low, M, storage, compute, scaled: bool = False, dia_layout=None) -> LevelCSR:
    """M on the device as CSR, or by diagonals with ``dia_layout`` (what :func:`dia_layout` found)."""
    rows, cols = M.shape
    data, indices, indptr = M.data, M.indices, M.indptr
    on_host = isinstance(data, np.ndarray)
    put = low.to_device if on_host else (lambda a: convert(low, a))
    xp = get_array_module(data)
    rowscale = None
    row = None
    if scaled:                     # rows scaled to a unit diagonal: no coefficient range over/underflows
        row = dia_layout[0] if dia_layout is not None else _entry_rows(M, xp)
        diag = M.diagonal()
        data = data / diag[row]
        rowscale = put(diag.astype(compute))
    if dia_layout is not None:     # by diagonals: vals[k rows + i] = a_{i, i + offsets[k]}
        row, off, offsets = dia_layout
        lo = int(offsets[0])
        slot = xp.zeros(int(offsets[-1]) - lo + 1, dtype=xp.int32)     # offset -> its diagonal
        slot[offsets - lo] = xp.arange(offsets.size, dtype=xp.int32)
        vals = xp.zeros((offsets.size, rows), dtype=storage)
        vals[slot[off - lo], row] = data.astype(storage)
        del slot
        return LevelCSR(rows, cols, None, None, put(vals.ravel()), compute, rowscale=rowscale,
                        offsets=put(offsets.astype(np.int32)), nnz=int(M.nnz))
    return LevelCSR(rows, cols, put(indptr.astype(np.int32)), put(indices.astype(np.int32)),
                    put(data.astype(storage)), compute, rowscale=rowscale)


def scale_rows_cols(M, left, right):
    """diag(left) M diag(right) as a new CSR matrix of M's kind (SciPy or CuPy); ``left`` / ``right``: float64
    NumPy vectors (moved to M's device where M is a CuPy matrix). Array-module generic."""
    M = M.tocsr()
    xp = get_array_module(M.data)
    left, right = xp.asarray(left), xp.asarray(right)
    data = M.data * left[_entry_rows(M, xp)] * right[M.indices]
    return type(M)((data, M.indices.copy(), M.indptr.copy()), shape=M.shape)


def dense(low, M: np.ndarray, compute) -> LevelCSR:
    """A dense matrix as a LevelCSR (every entry stored)."""
    rows, cols = M.shape
    indptr = (np.arange(rows + 1, dtype=np.int64) * cols).astype(np.int32)
    indices = np.tile(np.arange(cols, dtype=np.int32), rows)
    return LevelCSR(rows, cols, low.to_device(indptr), low.to_device(indices),
                    low.to_device(M.ravel().astype(compute)), compute)


def dinv(low, M, compute):
    """1 / diag(M) in ``compute`` on the device (0 where the diagonal is not positive)."""
    d = M.diagonal()
    if isinstance(d, np.ndarray):
        with np.errstate(divide="ignore"):
            inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1.0), 0.0)
        return low.to_device(inv.astype(compute))
    xp = get_array_module(d)
    inv = xp.where(d > 0, 1.0 / xp.where(d > 0, d, 1.0), 0.0)
    return convert(low, inv.astype(compute))
