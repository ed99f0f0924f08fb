"""CuPy kernels for the FEM Krylov solvers: own CSR SpMV (int32 indices), fused CG vector work,
device-resident scalars and CUDA graphs (CuPy stream capture).

The algorithm (fused CG, reliable updates, restarted refinement, convergence checks) lives once in
``hpcsolve.fem.linalg.cg``; this module only supplies the kernels of the ``hpcsolve.fem.linalg.lowops`` interface
(``CupyOps``). Bytes per iteration are counted in ``cg.bytes_per_iteration`` and in docs/design/fem_gpu.md.

Kernels (T = float or double, the working precision; scalars are float64 in device memory):
- ``spmv_dot``: q = A p and pq += p.q            (one pass over A and p; q written once)
- ``update_r``: r -= alpha q, rr += r.r [, rz += r.D^-1 r]   alpha = rho_j / pq_j read on the device
- ``update_xp``: x += alpha p, p = [D^-1] r + beta p          beta a coefficient triple read on the device
- ``csr_apply``: y = a (M x) + c b and ``mg_smooth`` (one Chebyshev / damped-Jacobi step, fused) on the
  multigrid levels: LevelCSR matrices stored in S = float64, float32 or float16 (``__half`` from
  cuda_fp16.h, widened with ``__half2float``), applied in T (float or double)
- ``residual``: r_out = b - A64 x64 in float64, stored as float or double, rr [, rz] in float64
- dot products: per-thread partial sums in T, block sums in float64, one atomicAdd per block.
- ``check_matrix``: the validation of a matrix before a solve (non-finite values, symmetry, diagonal),
  on the device, so that a large matrix is not checked by a slow pass on the host.

The kernels are described once in ``hpcsolve.fem.linalg.fused`` (also the source of ``kernels_numba``) and printed
to CUDA C by ``fused_cuda``; this module holds the runtime they call (warp / block reductions, ``widen``), the
module layout (``source()``) and the launches.
"""

from __future__ import annotations

import functools

import numpy as np

from hpcsolve.fem.linalg import fused, fused_cuda, kernels_common, lowops
from hpcsolve.fem.linalg import matrix

THREADS = kernels_common.THREADS

#: the backend's runtime, written here (the fused operations are described in ``fused`` and printed by
#: ``fused_cuda``): the warp / block reductions each kernel feeds, and the widening of a stored value to T
_HEAD = r"""
#include <cuda_fp16.h>
#define FULL_MASK 0xffffffffu
#define GRID_STRIDE(i, n) for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += gridDim.x * blockDim.x)

__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(FULL_MASK, v, o);
    return v;
}
// Block-wide sums of a and b, then one atomicAdd per block into ws[ia] (and ws[ib]); negative index: skip.
__device__ __forceinline__ void block_add2(double a, double b, double* ws, int ia, int ib) {
    __shared__ double sa[32], sb[32];
    a = warp_sum(a); b = warp_sum(b);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    if (lane == 0) { sa[wid] = a; sb[wid] = b; }
    __syncthreads();
    if (wid == 0) {
        const int nw = blockDim.x >> 5;
        a = lane < nw ? sa[lane] : 0.0;
        b = lane < nw ? sb[lane] : 0.0;
        a = warp_sum(a); b = warp_sum(b);
        if (lane == 0) {
            if (ia >= 0) atomicAdd(ws + ia, a);
            if (ib >= 0) atomicAdd(ws + ib, b);
        }
    }
}
"""
_MAX = r"""__device__ __forceinline__ double warp_max(double v) {
    for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_down_sync(FULL_MASK, v, o));
    return v;
}
// Block-wide maxima of a, b, c >= 0, then one atomicMax per block on their bit patterns (for doubles >= 0
// the unsigned order of the bits is the numeric order; the ws slots start at 0.0).
__device__ __forceinline__ void block_max3(double a, double b, double c, double* ws, int ia, int ib, int ic) {
    __shared__ double sa[32], sb[32], sc[32];
    a = warp_max(a); b = warp_max(b); c = warp_max(c);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    if (lane == 0) { sa[wid] = a; sb[wid] = b; sc[wid] = c; }
    __syncthreads();
    if (wid == 0) {
        const int nw = blockDim.x >> 5;
        a = lane < nw ? sa[lane] : 0.0;
        b = lane < nw ? sb[lane] : 0.0;
        c = lane < nw ? sc[lane] : 0.0;
        a = warp_max(a); b = warp_max(b); c = warp_max(c);
        if (lane == 0) {
            atomicMax((unsigned long long*)(ws + ia), (unsigned long long)__double_as_longlong(a));
            atomicMax((unsigned long long*)(ws + ib), (unsigned long long)__double_as_longlong(b));
            atomicMax((unsigned long long*)(ws + ic), (unsigned long long)__double_as_longlong(c));
        }
    }
}

"""
_WIDEN = r"""
template<typename T> __device__ __forceinline__ T widen(const double v) { return (T)v; }
template<typename T> __device__ __forceinline__ T widen(const float v) { return (T)v; }
template<typename T> __device__ __forceinline__ T widen(const __half v) { return (T)__half2float(v); }

"""

#: the module: runtime pieces and the printed descriptions, in this order
_LAYOUT = ("@head", "coef", "@max", "spmv_dot", "residual", "replace_residual", "dot", "axpy", "precondition",
           "precondition_init", "update_r", "update_xp", "@widen", "level_row", "csr_apply", "mg_smooth", "dia_row",
           "dia_apply", "dia_smooth", "fold", "check_matrix", "block_start", "block_end")
_RUNTIME = {"@head": _HEAD, "@max": _MAX, "@widen": _WIDEN}

_CT = {np.dtype(np.float16): "__half", np.dtype(np.float32): "float", np.dtype(np.float64): "double"}
#: the order of the name expressions: one type, two types, storage x compute, then the untemplated kernels
_NAME_ORDER = ("replace_residual", "spmv_dot", "dot", "precondition", "precondition_init", "update_r", "update_xp",
               "fold", "residual", "axpy", "csr_apply", "mg_smooth", "dia_apply", "dia_smooth", "block_start",
               "block_end", "check_matrix")


@functools.lru_cache(maxsize=None)
def source() -> str:
    """The CUDA C of the module (see ``_LAYOUT``)."""
    return "\n".join(_RUNTIME[k] if k.startswith("@") else fused_cuda.print_cuda(fused.BY_NAME[k]) for k in _LAYOUT)


def _names():
    return [name for k in _NAME_ORDER for name in fused_cuda.instance_names(fused.BY_NAME[k])]


@functools.lru_cache(maxsize=None)
def _module():
    import cupy  # late: optional GPU module, imported on the first kernel launch

    return cupy.RawModule(code=source(), options=("-std=c++17",), name_expressions=_names())


class CupyOps(lowops.LowOps):
    """The fused kernels as CuPy RawKernels on one non-blocking stream; CUDA graphs by stream capture."""

    name = "cupy"
    supports_graphs = True

    def sparse_modules(self):
        import cupyx.scipy.sparse as csp  # late: optional GPU module, only for a multigrid set-up on the device

        return self.cp, csp

    def owns(self, xp):
        return xp is self.cp

    def __init__(self, graphs: bool = True, stream=None):
        """``stream``: a CuPy stream to launch on (another backend's, whose arrays these kernels then work on:
        Numba-CUDA's set-up twin, ``NumbaOps.launch_twin``); by default a new non-blocking one."""
        import cupy  # late: optional GPU module, imported when the backend is first used

        self.cp = cupy
        self.mod = _module()
        self._k = {}
        self.max_blocks = kernels_common.max_blocks(cupy.cuda.Device().attributes["MultiProcessorCount"], THREADS)
        self.graphs = graphs
        self.stream = cupy.cuda.Stream(non_blocking=True) if stream is None else stream

    def _kernel(self, name, *dtypes):
        key = (name,) + tuple(np.dtype(d) for d in dtypes)
        k = self._k.get(key)
        if k is None:
            expr = name if not dtypes else f"{name}<{','.join(_CT[np.dtype(d)] for d in dtypes)}>"
            k = self._k[key] = self.mod.get_function(expr)
        return k

    def _launch(self, kernel, n, args):
        grid = (max(1, min((n + THREADS - 1) // THREADS, self.max_blocks)),)
        kernel(grid, (THREADS,), args, stream=self.stream)

    @staticmethod
    def _ptr(a):
        return np.uintp(0) if a is None else a

    # ---- arrays
    def to_device(self, a):
        with self.stream:
            return self.cp.asarray(a)

    def to_host(self, a):
        out = self.cp.asnumpy(a, stream=self.stream)
        self.stream.synchronize()
        return out

    def zeros(self, n, dtype):
        with self.stream:
            return self.cp.zeros(n, dtype=dtype)

    def astype(self, a, dtype):
        with self.stream:
            return a.astype(dtype)

    def scale_copy(self, src, dst, scale=1.0):
        with self.stream:
            if scale == 1.0:
                self.cp.copyto(dst, src, casting="unsafe")
            elif dst.dtype.itemsize >= src.dtype.itemsize:
                self.cp.copyto(dst, src, casting="unsafe")
                dst *= scale
            else:
                self.cp.multiply(src, scale, out=dst, casting="unsafe")

    def fill_zero(self, a):
        with self.stream:
            a.fill(0)

    def sync(self):
        self.stream.synchronize()

    # ---- kernels (see the CUDA source above for what each fuses and the bytes it moves)
    def spmv_dot(self, A, p, q, ws, i_pq):
        self._launch(self._kernel("spmv_dot", p.dtype), A.n,
                     (np.int32(A.n), A.indptr, A.indices, A.vals[p.dtype], p, q, ws, np.int32(i_pq)))

    def residual(self, A, x, b, r_out, dinv, ws, i_rz, i_rr):
        self._launch(self._kernel("residual", x.dtype, r_out.dtype), A.n,
                     (np.int32(A.n), A.indptr, A.indices, A.vals[x.dtype], x, b, r_out, self._ptr(dinv), ws,
                      np.int32(i_rz), np.int32(i_rr)))

    def replace_residual(self, A, x64, b64, r, p, dinv64, ws, i_rz, i_rr):
        self._launch(self._kernel("replace_residual", r.dtype), A.n,
                     (np.int32(A.n), A.indptr, A.indices, A.vals[np.dtype(np.float64)], x64, b64, r, p,
                      self._ptr(dinv64), ws, np.int32(i_rz), np.int32(i_rr)))

    def dot(self, x, y, ws, i):
        self._launch(self._kernel("dot", x.dtype), x.size, (np.int32(x.size), x, y, ws, np.int32(i)))

    def axpy(self, coef, x, y, ws):
        inum, iden, c = coef
        self._launch(self._kernel("axpy", x.dtype, y.dtype), y.size,
                     (np.int32(y.size), x, y, ws, np.int32(inum), np.int32(iden), np.float64(c)))

    def precondition(self, dinv, r, z, ws, i_rz):
        self._launch(self._kernel("precondition", r.dtype), r.size, (np.int32(r.size), dinv, r, z, ws, np.int32(i_rz)))

    def precondition_init(self, r, p, dinv, ws, i_rz, i_rr):
        self._launch(self._kernel("precondition_init", r.dtype), r.size,
                     (np.int32(r.size), r, p, self._ptr(dinv), ws, np.int32(i_rz), np.int32(i_rr)))

    def update_r(self, r, q, dinv, ws, i_rho, i_pq, i_rz, i_rr):
        self._launch(self._kernel("update_r", r.dtype), r.size,
                     (np.int32(r.size), r, q, self._ptr(dinv), ws, np.int32(i_rho), np.int32(i_pq), np.int32(i_rz),
                      np.int32(i_rr)))

    def update_xp(self, x, p, r, dinv, ws, i_rho, i_pq, beta):
        bnum, bden, bc = beta
        self._launch(self._kernel("update_xp", r.dtype), r.size,
                     (np.int32(r.size), x, p, r, self._ptr(dinv), ws, np.int32(i_rho), np.int32(i_pq),
                      np.int32(bnum), np.int32(bden), np.float64(bc)))

    # ---- multigrid levels (LevelCSR: values in S = M.vals.dtype, vectors in T)
    def csr_apply(self, M, x, y, a=1.0, b=None, c=0.0):
        if M.offsets is not None:
            self._launch(self._kernel("dia_apply", M.vals.dtype, y.dtype), M.rows,
                         (np.int32(M.rows), np.int32(M.ndiag), M.offsets, M.vals, self._ptr(M.rowscale), x,
                          self._ptr(b), y, np.float64(a), np.float64(c)))
            return
        self._launch(self._kernel("csr_apply", M.vals.dtype, y.dtype), M.rows,
                     (np.int32(M.rows), M.indptr, M.indices, M.vals, self._ptr(M.rowscale), x, self._ptr(b), y,
                      np.float64(a), np.float64(c)))

    def mg_smooth(self, M, x_in, b, dinv, d, x_out, c_d, c_r, first):
        if M.offsets is not None and not first and x_in is not None:
            self._launch(self._kernel("dia_smooth", M.vals.dtype, d.dtype), M.rows,
                         (np.int32(M.rows), np.int32(M.ndiag), M.offsets, M.vals, self._ptr(M.rowscale), x_in, b,
                          dinv, d, x_out, np.float64(c_d), np.float64(c_r)))
            return
        self._launch(self._kernel("mg_smooth", M.vals.dtype, d.dtype), M.rows,
                     (np.int32(M.rows), self._ptr(M.indptr), self._ptr(M.indices), M.vals, self._ptr(M.rowscale),
                      x_out if first or x_in is None else x_in, b, dinv, d, x_out, np.float64(c_d), np.float64(c_r),
                      np.int32(1 if first else 0)))

    def fold(self, x64, y):
        self._launch(self._kernel("fold", y.dtype), y.size, (np.int32(y.size), x64, y))

    def block_start(self, ws, i_rho, i_pq, i_rr, K):
        self._kernel("block_start")((1,), (128,), (ws, np.int32(i_rho), np.int32(i_pq), np.int32(i_rr), np.int32(K)),
                                    stream=self.stream)

    def block_end(self, ws, i_rho, i_rr, k):
        self._kernel("block_end")((1,), (32,), (ws, np.int32(i_rho), np.int32(i_rr), np.int32(k)), stream=self.stream)

    def check_matrix(self, n, indptr, indices, vals, dinv_out, ws, base):
        self._launch(self._kernel("check_matrix"), n,
                     (np.int32(n), indptr, indices, vals, dinv_out, ws, np.int32(base)))

    def context(self):
        return self.stream

    # ---- graphs and timing
    def capture(self, fn):
        """Record what ``fn()`` launches on the stream into a CUDA graph; returns its launcher (a failed capture
        raises its first cause)."""
        if not self.graphs:
            return None
        launch, err = kernels_common.capture_graph(self.stream, fn, self.stream)
        if err is not None:
            raise err
        return launch

    def timer(self):
        cp = self.cp
        return lowops.EventTimer(cp.cuda.Event, lambda e: e.record(self.stream),
                                    lambda a, b: cp.cuda.get_elapsed_time(a, b) / 1e3, lambda e: e.synchronize())


@functools.lru_cache(maxsize=None)
def low_ops(graphs: bool = True, stream=None) -> CupyOps:
    """The CuPy low ops (one per process, setting and stream; ``graphs=False``: the same kernels launched one by
    one). ``stream``: ops launching on that CuPy stream (another backend's: Numba-CUDA's set-up twin, reached through
    the backend registry by ``kernels_common.ops_on_stream``); by default a non-blocking stream of their own."""
    return CupyOps(graphs=graphs, stream=stream)


def poisson_5point_device(m: int, dtypes=(np.float64, np.float32)):
    """The 2D Poisson 5-point matrix (Dirichlet, m x m interior nodes, stencil [4, -1, -1, -1, -1]) built
    directly on the device (the P1 stiffness matrix of a uniform right-triangle mesh is the same)."""
    import cupy as cp  # late: optional GPU module, only for this device-built test matrix

    ops = low_ops()

    n = m * m
    with ops.stream:
        i = cp.arange(n, dtype=cp.int32)
        iy, ix = i // m, i % m
        cols = cp.stack([i - m, i - 1, i, i + 1, i + m], axis=1)
        mask = cp.stack([iy > 0, ix > 0, cp.ones(n, dtype=bool), ix < m - 1, iy < m - 1], axis=1)
        vals = cp.where(cp.arange(5) == 2, 4.0, -1.0)[None, :].repeat(n, axis=0)
        indices = cols[mask].astype(cp.int32)
        v64 = vals[mask].astype(cp.float64)
        indptr = cp.zeros(n + 1, dtype=cp.int32)
        cp.cumsum(mask.sum(axis=1, dtype=cp.int32), out=indptr[1:])
        del cols, mask, vals, i, iy, ix
    return matrix.from_device_arrays(ops, n, indptr, indices, v64, dtypes)
