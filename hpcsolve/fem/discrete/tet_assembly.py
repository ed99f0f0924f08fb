"""P1 stiffness of a tetrahedral mesh assembled in two phases: the CSR pattern once per mesh (symbolic), then the
values of each assembly straight into the CSR data array (numeric), with no COO entries and no sort.

* :func:`pattern` (symbolic, array-module generic): the node graph of the cells as CSR (sorted columns per row, the
  diagonal in every row) and ``positions`` (m, 4, 4): for cell e and local pair (a, b), the index into the CSR
  data array of the entry (cells[e, a], cells[e, b]). Its cost is one ``unique`` (a sort) of the 6 m edge keys,
  one sort of the 2 E + n entry keys (three disjoint sets) (E unique edges, about 7 n in a Kuhn box: ~15 n keys), three
  ``searchsorted`` (E, E and n binary searches into the nnz keys) and a gather of the 16 m positions. Peak memory
  is a few times the 6 m int64 keys (CuPy's ``unique`` sorts with an argsort), paid once per mesh.
* :func:`stiffness_values` (numeric): data[positions[e, a, b]] += |T_e| c_e grad phi_a . grad phi_b. With
  CuPy, one RawKernel, one thread per tetrahedron (``_SOURCE``), ``atomicAdd`` on doubles into the zeroed data;
  with NumPy (or ``by_arrays`` on either module), the same numbers from array operations and one ``bincount``.
  The summation order of an entry's contributions differs from SciPy's COO -> CSR (and, with atomics, from run to
  run): a difference in the last bits only.
* :func:`bytes_moved`: the DRAM bytes the numeric phase must move at least, the figure its bandwidth is quoted on.

The gradients are those of :func:`hpcsolve.fem.discrete.fe_assembly.geometry`: with d_j = x_{j+1} - x_0 (the
Jacobian's columns), n_1 = d_1 x d_2, n_2 = d_2 x d_0, n_3 = d_0 x d_1, n_0 = -(n_1 + n_2 + n_3) and det = d_0 . n_1,
grad phi_a = n_a / det and |T| = |det| / 6, so the entry is c n_a . n_b / (6 |det|).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from hpcsolve.core.backends import get_array_module

#: the 6 local vertex pairs (a, b), a < b, of a tetrahedron: its edges
_A = np.array([0, 0, 0, 1, 1, 2])
_B = np.array([1, 2, 3, 2, 3, 3])
THREADS = 256

#: The numeric phase on the device. ``pos_t`` is ``int`` or ``long long``, the dtype of ``positions`` (replaced in
#: the text before compiling). Per thread (tetrahedron e) it reads cells[4e..4e+3] (16 B), the 4 vertices' 12
#: coordinates (96 B, gathered), positions[16e..16e+15] (64 or 128 B) and coef[e * coef_stride] (8 B, stride 0:
#: one value for all cells); it computes the 10 distinct entries of the symmetric 4x4 element matrix and adds each
#: into data at its 1 (diagonal) or 2 (off-diagonal) positions: 16 atomicAdd(double *) per thread (sm_60 and newer).
_SOURCE = r"""
typedef POS_T pos_t;

extern "C" __global__ void p1_tet_stiffness(
    const double* __restrict__ points,     // (n, 3) vertex coordinates
    const int* __restrict__ cells,         // (m, 4) vertex indices
    const pos_t* __restrict__ positions,   // (m, 4, 4) index into data of entry (cells[e, a], cells[e, b])
    const double* __restrict__ coef,       // coefficient of cell e: coef[e * coef_stride]
    const long long coef_stride,           // 1: one value per cell, 0: one value for all
    const long long m,                     // number of cells
    double* __restrict__ data)             // (nnz,) CSR values, zeroed by the caller; summed into
{
    const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= m) return;
    double x[4][3];                        // the cell's vertices
#pragma unroll
    for (int a = 0; a < 4; ++a) {
        const long long v = cells[4 * e + a];
#pragma unroll
        for (int k = 0; k < 3; ++k) x[a][k] = points[3 * v + k];
    }
    double d[3][3];                        // d[j] = x[j + 1] - x[0]: the Jacobian's columns
#pragma unroll
    for (int j = 0; j < 3; ++j) {
#pragma unroll
        for (int k = 0; k < 3; ++k) d[j][k] = x[j + 1][k] - x[0][k];
    }
    double g[4][3];                        // g[a] = det * grad phi_a: g[j + 1] = d[j + 1] x d[j + 2] (indices mod 3)
#pragma unroll
    for (int j = 0; j < 3; ++j) {
        const double* p = d[(j + 1) % 3];
        const double* q = d[(j + 2) % 3];
        g[j + 1][0] = p[1] * q[2] - p[2] * q[1];
        g[j + 1][1] = p[2] * q[0] - p[0] * q[2];
        g[j + 1][2] = p[0] * q[1] - p[1] * q[0];
    }
#pragma unroll
    for (int k = 0; k < 3; ++k) g[0][k] = -(g[1][k] + g[2][k] + g[3][k]);
    const double det = d[0][0] * g[1][0] + d[0][1] * g[1][1] + d[0][2] * g[1][2];
    const double s = coef[e * coef_stride] / (6.0 * fabs(det));    // |T| c / det^2
    const pos_t* pos = positions + 16 * e;
#pragma unroll
    for (int a = 0; a < 4; ++a) {
#pragma unroll
        for (int b = a; b < 4; ++b) {      // the 10 distinct entries; (b, a) gets the same value
            const double k_ab = s * (g[a][0] * g[b][0] + g[a][1] * g[b][1] + g[a][2] * g[b][2]);
            atomicAdd(&data[pos[4 * a + b]], k_ab);
            if (b != a) atomicAdd(&data[pos[4 * b + a]], k_ab);
        }
    }
}
"""
_KERNELS: dict = {}


class Pattern(NamedTuple):
    """The CSR pattern of a tetrahedral mesh's node graph and where each cell's 16 entries are in its data."""

    indptr: object        # (n + 1,) int32, int64 where nnz >= 2^31
    indices: object       # (nnz,) int32, sorted within each row
    positions: object     # (m, 4, 4) int32, int64 where nnz >= 2^31

    @property
    def nnz(self) -> int:
        return int(self.indices.shape[0])


def source(pos_dtype) -> str:
    """The CUDA C of the numeric phase for ``positions`` of ``pos_dtype`` (int32 or int64)."""
    return _SOURCE.replace("POS_T", "int" if np.dtype(pos_dtype).itemsize == 4 else "long long", 1)


def pattern(cells, n_nodes: int, xp=None) -> Pattern:
    """The symbolic phase, once per mesh: the CSR pattern of the node graph of the tetrahedra ``cells`` (m, 4) over
    ``n_nodes`` nodes, every row with its diagonal (a node no cell uses has only that, a stored zero), columns sorted,
    and the cells' ``positions`` into its data. Arrays of ``xp`` (default: the module of ``cells``)."""
    xp = get_array_module(cells) if xp is None else xp
    c = xp.asarray(cells).astype(xp.int64)
    n, m = int(n_nodes), int(c.shape[0])
    u, v = c[:, xp.asarray(_A)], c[:, xp.asarray(_B)]                            # (m, 6) each
    lo, hi = xp.minimum(u, v), xp.maximum(u, v)
    edges, edge_of = xp.unique((lo * n + hi).ravel(), return_inverse=True)      # lo * n + hi, sorted
    down = (edges % n) * n + edges // n                                         # the transposed entries
    diag = xp.arange(n, dtype=xp.int64) * (n + 1)
    # the upper entries, the lower ones and the diagonal are disjoint sets of unique keys: a sort makes the pattern
    # (numpy's unique of them took 6x as long by its hash path)
    keys = xp.sort(xp.concatenate([edges, down, diag]))                         # row * n + col, row-major order
    nnz = int(keys.shape[0])
    index = xp.int32 if nnz < 2**31 else xp.int64
    indptr = xp.zeros(n + 1, dtype=xp.int64)
    indptr[1:] = xp.cumsum(xp.bincount(keys // n, minlength=n))
    at_up, at_down = xp.searchsorted(keys, edges), xp.searchsorted(keys, down)
    at_diag = xp.searchsorted(keys, diag)
    pos = xp.empty((m, 4, 4), dtype=index)
    local = xp.arange(4)
    pos[:, local, local] = at_diag[c]
    e = edge_of.reshape(m, 6)
    forward = u < v                                   # (cells[a], cells[b]) is the entry of key lo * n + hi
    pos[:, xp.asarray(_A), xp.asarray(_B)] = xp.where(forward, at_up[e], at_down[e])
    pos[:, xp.asarray(_B), xp.asarray(_A)] = xp.where(forward, at_down[e], at_up[e])
    return Pattern(indptr.astype(index), (keys % n).astype(xp.int32), pos)


def _coefficient(xp, coefficient, m: int):
    """(coefficient as a 1-D float64 array of xp, its stride per cell: 0 for one value, 1 for one per cell)."""
    c = xp.ascontiguousarray(xp.asarray(coefficient, dtype=xp.float64).reshape(-1))
    if c.shape[0] == 1:
        return c, 0
    if c.shape[0] != m:
        raise ValueError(f"coefficient: a number or one value per cell ({m}), got {c.shape[0]} values")
    return c, 1


def by_arrays(points, cells, positions, nnz: int, coefficient=1.0):
    """The numeric phase by array operations (NumPy or CuPy): the (m, 4, 4) element matrices c n_a . n_b /
    (6 |det|) by one batched matmul, summed into data (nnz,) by one ``bincount`` over ``positions``."""
    xp = get_array_module(points)
    p = points[cells]                                                           # (m, 4, 3)
    d0, d1, d2 = p[:, 1] - p[:, 0], p[:, 2] - p[:, 0], p[:, 3] - p[:, 0]
    n1, n2, n3 = xp.cross(d1, d2), xp.cross(d2, d0), xp.cross(d0, d1)
    g = xp.stack([-(n1 + n2 + n3), n1, n2, n3], axis=1)                         # (m, 4, 3): det * gradients
    det = (d0 * n1).sum(axis=1)
    c, _ = _coefficient(xp, coefficient, int(cells.shape[0]))
    local = xp.matmul(g, g.transpose(0, 2, 1)) * (c / (6.0 * xp.abs(det)))[:, None, None]
    return xp.bincount(positions.ravel(), weights=local.ravel(), minlength=int(nnz))


def launch_arguments(xp, points, cells, positions, nnz: int, coefficient=1.0):
    """(grid, block, arguments) of the kernel's launch, in ``_SOURCE``'s parameter order, with the zeroed data
    (nnz,) float64 last: the arrays made contiguous in the dtypes the kernel reads (a copy only where they are
    not already; positions int32 or else int64), the coefficient a 1-element or per-cell array with its stride."""
    m = int(cells.shape[0])
    c, stride = _coefficient(xp, coefficient, m)
    pos_dtype = xp.int32 if np.dtype(positions.dtype) == np.int32 else xp.int64      # the kernel's pos_t
    args = (xp.ascontiguousarray(points, dtype=xp.float64), xp.ascontiguousarray(cells, dtype=xp.int32),
            xp.ascontiguousarray(positions, dtype=pos_dtype), c, np.int64(stride), np.int64(m),
            xp.zeros(int(nnz), dtype=xp.float64))
    return ((m + THREADS - 1) // THREADS,), (THREADS,), args


def stiffness_values(points, cells, positions, nnz: int, coefficient=1.0):
    """The numeric phase: the CSR data (nnz,) float64 of the P1 stiffness of -div(c grad u) on the tetrahedra
    ``cells`` (m, 4) of ``points`` (n, 3), summed at ``positions`` (:func:`pattern`); c a number or one value per
    cell. CuPy: one RawKernel launch (``_SOURCE``) on zeroed data; NumPy: :func:`by_arrays`."""
    xp = get_array_module(points)
    if xp is np:
        return by_arrays(points, cells, positions, nnz, coefficient)
    grid, block, args = launch_arguments(xp, points, cells, positions, nnz, coefficient)
    name = str(args[2].dtype)
    if name not in _KERNELS:
        _KERNELS[name] = xp.RawKernel(source(args[2].dtype), "p1_tet_stiffness")
    if grid[0]:
        _KERNELS[name](grid, block, args)
    return args[-1]


def bytes_moved(n_nodes: int, m: int, nnz: int, position_bytes: int | None = None,
                per_cell_coefficient: bool = False) -> int:
    """The DRAM bytes the numeric phase must move at least, the figure its bandwidth is quoted on:

    * cells read once: m * 4 * 4 (int32);
    * points read once: n * 3 * 8 (every vertex is gathered by its ~24 cells, from cache after the first);
    * positions read once: m * 16 * 4 (int32; 8 bytes each where nnz >= 2^31, or as ``position_bytes`` says);
    * the coefficient: m * 8 when it is one value per cell, else nothing;
    * data read and written once: nnz * 8 * 2. The m * 16 atomic read-modify-writes (m * 16 * 16 bytes, about 6
      times as much in a Kuhn box) resolve in the L2 cache: an entry's 4-24 contributions come from cells that are
      near in the cell order, so DRAM sees each entry's line fetched and written back once. Counting the atomics'
      bytes would credit the kernel with traffic it does not make (a GB/s that could pass the copy bandwidth).
      The zeroing of data before the kernel (nnz * 8, a memset inside the timed phase) is not counted: its time
      is charged, its bytes are not, which errs on the low side.
    """
    pb = (4 if nnz < 2**31 else 8) if position_bytes is None else int(position_bytes)
    return int(m * 16 + n_nodes * 24 + m * 16 * pb + (m * 8 if per_cell_coefficient else 0) + nnz * 16)
