"""The FEM run's host work on the device: the mesh uploaded once, P1 assembly, COO -> CSR with duplicates summed,
Dirichlet condensation, and the solution's error norms and probe, all in array-module-generic code.

The same functions run with ``xp = numpy`` (CI, and the tests that compare them with the SciPy path of
``assembly``) and with ``xp = cupy`` on a GPU. The element kernels are those of ``assembly`` (generic); what
SciPy does on the host is done here with array operations that NumPy and CuPy share:

* COO -> CSR: the entries' keys ``row * n + col`` (int64) are sorted (``argsort``: CUB/Thrust radix sort in
  CuPy), equal neighbours mark one segment, and ``bincount(segment, weights=values)`` sums the duplicates (float64
  atomics in CuPy: the summation order of an entry's 2-6 contributions may differ from SciPy's, a difference in
  the last bit). Entries that sum to zero are kept, as SciPy's ``sum_duplicates`` keeps them.
* Condensation on the sorted unique entries (before any CSR is made): the lifted right side is
  ``bincount(row, values * u_d[col])``, the free block keeps the entries whose row and column are free, renumbered by
  the running count of free DOFs (monotone, so the rows stay sorted), and ``indptr`` is the cumulative
  ``bincount`` of the kept rows.

The result is int32 CSR arrays on the device, handed to the solver as a
``hpcsolve.fem.linalg.matrix.DeviceCSR`` (``from_device_arrays``: checked there, never copied to the host).
Numba-CUDA uses the same CuPy arrays (when CuPy imports), seen by its kernels through
``numba.cuda.as_cuda_array`` (the CUDA array interface, zero copy), as ``kernels_numba.view_of`` does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hpcsolve.core.backends import get_array_module
from hpcsolve.fem.discrete.mesh import Mesh
from hpcsolve.fem.linalg import matrix


@dataclass
class DeviceMesh:
    """A mesh's points (n, 2) float64 and triangles (m, 3) int32 as arrays of ``xp`` (uploaded once)."""

    xp: object
    points: object
    triangles: object

    @property
    def n_points(self) -> int:
        return int(self.points.shape[0])

    @property
    def n_triangles(self) -> int:
        return int(self.triangles.shape[0])

    areas = Mesh.areas          # array-module generic (indexing and arithmetic only)


def array_module(backend):
    """The array module the run's assembly uses on ``backend``: its own (CuPy), CuPy for a GPU backend whose
    arrays are not CuPy's (Numba-CUDA: its kernels see CuPy arrays through the CUDA array interface) when CuPy
    imports and answers, else None (the host path)."""
    xp = backend.xp
    if xp is not np:
        return xp
    if not backend.gpu or backend.simulator:
        return None
    try:
        import cupy  # late: optional GPU module, only on a GPU backend whose arrays are not CuPy's
    except Exception:                     # no CuPy: the host assembly, uploaded by the solver
        return None
    try:
        return cupy if cupy.is_available() else None
    except Exception:
        return None


def upload(mesh: Mesh, xp) -> DeviceMesh:
    """The mesh's points and triangles on the device of ``xp`` (one copy each)."""
    return DeviceMesh(xp, xp.asarray(mesh.points, dtype=xp.float64), xp.asarray(mesh.triangles, dtype=xp.int32))


def coo_sum(dofs, local, n: int):
    """Element matrices ``local`` (m, k, k) on element DOFs ``dofs`` (m, k) summed into their sorted unique
    entries: (rows int64, cols int64, values float64), sorted by (row, col)."""
    xp = get_array_module(local)
    idx = dofs.astype(xp.int64)
    key = (idx[:, :, None] * n + idx[:, None, :]).ravel()          # row-major: (i, j) of each element matrix
    order = xp.argsort(key)
    ks = key[order]
    vs = local.reshape(-1)[order]
    new = xp.empty(ks.size, dtype=xp.bool_)
    new[:1] = True
    new[1:] = ks[1:] != ks[:-1]
    seg = xp.cumsum(new) - 1
    uniq = ks[new]
    vals = xp.bincount(seg, weights=vs, minlength=int(uniq.size))
    return uniq // n, uniq % n, vals


def csr_entries(indptr, indices, data):
    """The sorted unique COO entries (rows int64, cols int64, values) of CSR arrays with sorted columns: what
    :func:`coo_sum` returns, for :func:`condense` (the row of entry k: how many row ends are at or before k)."""
    xp = get_array_module(data)
    rows = xp.searchsorted(indptr[1:], xp.arange(int(data.size), dtype=indptr.dtype), side="right")
    return rows.astype(xp.int64), indices.astype(xp.int64), data


def condense(rows, cols, vals, b, n: int, fixed, values):
    """Dirichlet by condensation on sorted unique COO entries (``coo_sum``): (indptr int32, indices int32,
    data float64 of the free block, b_f - A_fd u_d, free DOFs int64), all arrays of the input's module."""
    xp = get_array_module(vals)
    is_fixed = xp.zeros(n, dtype=xp.bool_)
    is_fixed[fixed] = True
    ud = xp.zeros(n, dtype=xp.float64)
    ud[fixed] = values
    rhs = b - xp.bincount(rows, weights=vals * ud[cols], minlength=n)
    is_free = ~is_fixed
    free = xp.flatnonzero(is_free)
    newidx = xp.cumsum(is_free) - 1                      # the free index of each free DOF
    keep = is_free[rows] & is_free[cols]
    r = newidx[rows[keep]]
    nf = int(free.size)
    indptr = xp.zeros(nf + 1, dtype=xp.int64)
    indptr[1:] = xp.cumsum(xp.bincount(r, minlength=nf))
    return (indptr.astype(xp.int32), newidx[cols[keep]].astype(xp.int32), vals[keep], rhs[free], free)


def csr(rows, cols, vals, n: int):
    """CSR arrays (indptr int32, indices int32, data) of sorted unique COO entries."""
    xp = get_array_module(vals)
    indptr = xp.zeros(n + 1, dtype=xp.int64)
    indptr[1:] = xp.cumsum(xp.bincount(rows, minlength=n))
    return indptr.astype(xp.int32), cols.astype(xp.int32), vals


def norm2(v) -> float:
    """The 2-norm of ``v`` without overflow (scaled by its largest magnitude), as a host float; inf/nan pass."""
    xp = get_array_module(v)
    if not v.size:
        return 0.0
    peak = float(xp.max(xp.abs(v)))
    if not (peak > 0 and np.isfinite(peak)):
        return peak
    return peak * float(xp.linalg.norm(v / peak))


def device_solver_matrix(low, xp, indptr, indices, data, n: int):
    """A ``DeviceCSR`` of ``low`` (the backend's low ops) from CSR arrays of ``xp``, checked on the device and
    not copied: ``low``'s own arrays where it owns ``xp`` (CuPy), else views through the CUDA array interface
    (Numba-CUDA). The device is synchronized first: the arrays were made on ``xp``'s current stream, the
    solver's ops launch on their own."""
    synchronize(xp)
    view = (lambda a: a) if xp is np or low.owns(xp) else low.cuda.as_cuda_array
    return matrix.from_device_arrays(low, n, view(indptr), view(indices), view(data))


def synchronize(xp) -> None:
    """Wait for the work queued on ``xp``'s current stream (nothing for NumPy)."""
    if xp is not np:
        xp.cuda.get_current_stream().synchronize()


def nearest_node(points, xy) -> int:
    """Index of the node nearest to ``xy`` ((x, y) or (x, y, z), as the points' columns; ties: the first, as
    ``numpy.argmin``)."""
    xp = get_array_module(points)
    dist = xp.hypot(points[:, 0] - xy[0], points[:, 1] - xy[1])      # hypot: no overflow of squares (1e200 meshes)
    for k in range(2, len(xy)):
        dist = xp.hypot(dist, points[:, k] - xy[k])
    return int(xp.argmin(dist))
