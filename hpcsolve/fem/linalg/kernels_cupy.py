"""CuPy kernels for the FEM Krylov solvers: own CSR SpMV (int32 indices), fused CG vector work,
device-resident scalars and CUDA graphs (CuPy stream capture).

The algorithm (fused CG, reliable updates, restarted refinement, convergence checks) lives once in
``hpcsolve.fem.linalg.cg``; this module only supplies the kernels of the ``hpcsolve.fem.linalg.lowops`` interface
(``CupyOps``). Bytes per iteration are counted in ``cg.bytes_per_iteration`` and in docs/fem_gpu.md.

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
"""

from __future__ import annotations

import functools

import numpy as np

from hpcsolve.fem.linalg import lowops

THREADS = 256

_SOURCE = r"""
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
// coefficient c * ws[inum] / ws[iden] (iden < 0: c * ws[inum]; inum < 0: c); x / 0 -> 0
__device__ __forceinline__ double coef(const double* ws, int inum, int iden, double c) {
    if (inum < 0) return c;
    if (iden < 0) return c * ws[inum];
    const double d = ws[iden];
    return d != 0.0 ? c * ws[inum] / d : 0.0;
}
__device__ __forceinline__ double warp_max(double v) {
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

// q = A p (CSR, int32 indices, one thread per row, grid-stride); ws[i_pq] += p.q
// bytes: nnz*(sizeof(T)+4) + (n+1)*4 + n*sizeof(T) (p; neighbour gathers hit L1/L2) + n*sizeof(T) (q)
template<typename T>
__global__ void spmv_dot(const int n, const int* __restrict__ indptr, const int* __restrict__ indices,
        const T* __restrict__ vals, const T* __restrict__ p, T* __restrict__ q, double* ws, const int i_pq) {
    T acc = 0;
    GRID_STRIDE(i, n) {
        T s = 0;
        const int end = indptr[i + 1];
        for (int k = indptr[i]; k < end; ++k) s += vals[k] * __ldg(p + indices[k]);
        q[i] = s;
        acc += p[i] * s;
    }
    if (i_pq >= 0) block_add2((double)acc, 0.0, ws, i_pq, -1);
}

// r = b - A x computed in TA (A, x, b in TA), stored as TO; ws[i_rr] += r.r; with dinv: ws[i_rz] += r.dinv.r
template<typename TA, typename TO>
__global__ void residual(const int n, const int* __restrict__ indptr, const int* __restrict__ indices,
        const TA* __restrict__ vals, const TA* __restrict__ x, const TA* __restrict__ b, TO* __restrict__ r,
        const TA* __restrict__ dinv, double* ws, const int i_rz, const int i_rr) {
    TA acc_rr = 0, acc_rz = 0;
    GRID_STRIDE(i, n) {
        TA s = 0;
        const int end = indptr[i + 1];
        for (int k = indptr[i]; k < end; ++k) s += vals[k] * __ldg(x + indices[k]);
        const TA ri = b[i] - s;
        r[i] = (TO)ri;
        acc_rr += ri * ri;
        if (dinv) acc_rz += ri * ri * dinv[i];
    }
    block_add2((double)acc_rr, (double)acc_rz, ws, i_rr, dinv ? i_rz : -1);
}

// reliable update: r_true = b - A x in float64; p += [dinv] (r_true - r_old) so that p is the direction
// the true residual would have given; r = r_true (stored TO); ws[i_rr] += r.r; [ws[i_rz] += r.dinv.r]
template<typename TO>
__global__ void replace_residual(const int n, const int* __restrict__ indptr, const int* __restrict__ indices,
        const double* __restrict__ vals, const double* __restrict__ x, const double* __restrict__ b,
        TO* __restrict__ r, TO* __restrict__ p, const double* __restrict__ dinv, double* ws, const int i_rz,
        const int i_rr) {
    double acc_rr = 0, acc_rz = 0;
    GRID_STRIDE(i, n) {
        double s = 0;
        const int end = indptr[i + 1];
        for (int k = indptr[i]; k < end; ++k) s += vals[k] * __ldg(x + indices[k]);
        const double ri = b[i] - s;
        const double d = ri - (double)r[i];
        r[i] = (TO)ri;
        p[i] = (TO)((double)p[i] + (dinv ? dinv[i] * d : d));
        acc_rr += ri * ri;
        if (dinv) acc_rz += ri * ri * dinv[i];
    }
    block_add2(acc_rr, acc_rz, ws, i_rr, dinv ? i_rz : -1);
}

template<typename T>
__global__ void dot(const int n, const T* __restrict__ x, const T* __restrict__ y, double* ws, const int i) {
    T acc = 0;
    GRID_STRIDE(k, n) acc += x[k] * y[k];
    block_add2((double)acc, 0.0, ws, i, -1);
}

// y += a x, computed in TY (x is cast)
template<typename TX, typename TY>
__global__ void axpy(const int n, const TX* __restrict__ x, TY* __restrict__ y, const double* ws,
        const int inum, const int iden, const double c) {
    const TY a = (TY)coef(ws, inum, iden, c);
    GRID_STRIDE(i, n) y[i] += a * (TY)x[i];
}

// z = dinv r; ws[i] += r.z
template<typename T>
__global__ void precondition(const int n, const T* __restrict__ dinv, const T* __restrict__ r, T* __restrict__ z,
        double* ws, const int i_rz) {
    T acc = 0;
    GRID_STRIDE(i, n) { const T zi = dinv[i] * r[i]; z[i] = zi; acc += r[i] * zi; }
    block_add2((double)acc, 0.0, ws, i_rz, -1);
}

// p = [dinv] r; ws[i_rr] += r.r; with dinv ws[i_rz] += r.dinv.r (start of a CG run)
template<typename T>
__global__ void precondition_init(const int n, const T* __restrict__ r, T* __restrict__ p, const T* __restrict__ dinv,
        double* ws, const int i_rz, const int i_rr) {
    T acc_rr = 0, acc_rz = 0;
    GRID_STRIDE(i, n) {
        const T ri = r[i];
        const T zi = dinv ? dinv[i] * ri : ri;
        p[i] = zi;
        acc_rr += ri * ri;
        acc_rz += ri * zi;
    }
    block_add2((double)acc_rr, (double)acc_rz, ws, i_rr, dinv ? i_rz : -1);
}

// fused CG: r -= alpha q (alpha = ws[i_rho]/ws[i_pq]); ws[i_rr] += r.r; [ws[i_rz] += r.dinv.r]. bytes 3 n s (+ n s)
template<typename T>
__global__ void update_r(const int n, T* __restrict__ r, const T* __restrict__ q, const T* __restrict__ dinv,
        double* ws, const int i_rho, const int i_pq, const int i_rz, const int i_rr) {
    const T alpha = (T)coef(ws, i_rho, i_pq, 1.0);
    T acc_rr = 0, acc_rz = 0;
    GRID_STRIDE(i, n) {
        const T ri = r[i] - alpha * q[i];
        r[i] = ri;
        acc_rr += ri * ri;
        if (dinv) acc_rz += ri * ri * dinv[i];
    }
    block_add2((double)acc_rr, (double)acc_rz, ws, i_rr, dinv ? i_rz : -1);
}

// fused CG: x += alpha p; p = [dinv] r + beta p (beta = coefficient (bnum, bden, bc): CG rho_{j+1}/rho_j,
// flexible CG -z_{j+1}.q_j / p_j.q_j). bytes 5 n s (+ n s)
template<typename T>
__global__ void update_xp(const int n, T* __restrict__ x, T* __restrict__ p, const T* __restrict__ r,
        const T* __restrict__ dinv, const double* ws, const int i_rho, const int i_pq, const int bnum,
        const int bden, const double bc) {
    const T alpha = (T)coef(ws, i_rho, i_pq, 1.0);
    const T beta = (T)coef(ws, bnum, bden, bc);
    GRID_STRIDE(i, n) {
        const T pi = p[i];
        x[i] += alpha * pi;
        p[i] = (dinv ? dinv[i] * r[i] : r[i]) + beta * pi;
    }
}

// ---- multigrid levels: CSR (rows x cols, int32 indices) with values stored in S (double, float or __half),
// applied in T; optional per-row scale (16-bit storage keeps rows scaled to a unit diagonal):
// (M x)_i = rowscale_i * sum_k T(vals_k) x_{indices_k}
template<typename T> __device__ __forceinline__ T widen(const double v) { return (T)v; }
template<typename T> __device__ __forceinline__ T widen(const float v) { return (T)v; }
template<typename T> __device__ __forceinline__ T widen(const __half v) { return (T)__half2float(v); }

template<typename S, typename T>
__device__ __forceinline__ T level_row(const int i, const int* __restrict__ indptr, const int* __restrict__ indices,
        const S* __restrict__ vals, const T* __restrict__ rowscale, const T* __restrict__ x) {
    T s = 0;
    const int end = indptr[i + 1];
    for (int k = indptr[i]; k < end; ++k) s += widen<T>(vals[k]) * __ldg(x + indices[k]);
    return rowscale ? rowscale[i] * s : s;
}

// y = a (M x) + c b in T (b null: y = a M x). b may be y itself: each row reads its own b[i] before writing y[i]
// (so neither carries __restrict__). bytes: nnz (sizeof(S) + 4) + (rows+1) 4 [+ rows sizeof(T)] + cols sizeof(T)
// + rows sizeof(T) [+ rows sizeof(T) for b]
template<typename S, typename T>
__global__ void csr_apply(const int rows, const int* __restrict__ indptr, const int* __restrict__ indices,
        const S* __restrict__ vals, const T* __restrict__ rowscale, const T* __restrict__ x, const T* b, T* y,
        const double a, const double c) {
    const T ta = (T)a, tc = (T)c;
    GRID_STRIDE(i, rows) {
        const T s = level_row<S, T>(i, indptr, indices, vals, rowscale, x);
        y[i] = b ? ta * s + tc * b[i] : ta * s;
    }
}

// one Chebyshev (c_d != 0) or damped-Jacobi (c_d = 0) step on M x = b, in T:
// first: d = c_r dinv b; x_out = d (x_in not read)
// else:  d = c_d d + c_r dinv (b - M x_in); x_out = x_in + d (x_out never aliases x_in)
template<typename S, typename T>
__global__ void mg_smooth(const int n, const int* __restrict__ indptr, const int* __restrict__ indices,
        const S* __restrict__ vals, const T* __restrict__ rowscale, const T* __restrict__ x_in,
        const T* __restrict__ b, const T* __restrict__ dinv, T* __restrict__ d, T* __restrict__ x_out,
        const double c_d, const double c_r, const int first) {
    const T cd = (T)c_d, cr = (T)c_r;
    if (first) {
        GRID_STRIDE(i, n) { const T di = (dinv[i] * b[i]) * cr; d[i] = di; x_out[i] = di; }
    } else {
        GRID_STRIDE(i, n) {
            const T ri = b[i] - level_row<S, T>(i, indptr, indices, vals, rowscale, x_in);
            const T di = cd * d[i] + cr * (dinv[i] * ri);
            d[i] = di;
            x_out[i] = x_in[i] + di;
        }
    }
}

// ---- the same on a level stored by diagonals (DIA: square n x n, ndiag offsets, values diagonal-major,
// vals[d n + i] = a_{i, i + offsets[d]}, 0 where that is outside the matrix): no column indices to read.
// bytes: ndiag n sizeof(S) + ndiag 4 [+ n sizeof(T)] + vectors as above
template<typename S, typename T>
__device__ __forceinline__ T dia_row(const int i, const int n, const int ndiag, const int* __restrict__ offsets,
        const S* __restrict__ vals, const T* __restrict__ rowscale, const T* __restrict__ x) {
    T s = 0;
    for (int k = 0; k < ndiag; ++k) {
        const int j = i + __ldg(offsets + k);
        if (j >= 0 && j < n) s += widen<T>(vals[(size_t)k * n + i]) * __ldg(x + j);
    }
    return rowscale ? rowscale[i] * s : s;
}

template<typename S, typename T>
__global__ void dia_apply(const int n, const int ndiag, const int* __restrict__ offsets, const S* __restrict__ vals,
        const T* __restrict__ rowscale, const T* __restrict__ x, const T* b, T* y, const double a, const double c) {
    const T ta = (T)a, tc = (T)c;
    GRID_STRIDE(i, n) {
        const T s = dia_row<S, T>(i, n, ndiag, offsets, vals, rowscale, x);
        y[i] = b ? ta * s + tc * b[i] : ta * s;
    }
}

template<typename S, typename T>
__global__ void dia_smooth(const int n, const int ndiag, const int* __restrict__ offsets, const S* __restrict__ vals,
        const T* __restrict__ rowscale, const T* __restrict__ x_in, const T* __restrict__ b,
        const T* __restrict__ dinv, T* __restrict__ d, T* __restrict__ x_out, const double c_d, const double c_r) {
    const T cd = (T)c_d, cr = (T)c_r;
    GRID_STRIDE(i, n) {
        const T ri = b[i] - dia_row<S, T>(i, n, ndiag, offsets, vals, rowscale, x_in);
        const T di = cd * d[i] + cr * (dinv[i] * ri);
        d[i] = di;
        x_out[i] = x_in[i] + di;
    }
}

// x64 += y; y = 0 (fold a float32 correction into the float64 solution)
template<typename T>
__global__ void fold(const int n, double* __restrict__ x, T* __restrict__ y) {
    GRID_STRIDE(i, n) { x[i] += (double)y[i]; y[i] = 0; }
}

// Validation of a CSR matrix (rows sorted, no duplicates; float64 values), one row per thread, before a solve:
// ws[base+0] += non-finite values, ws[base+5] += column indices outside [0, n), ws[base+3] += rows whose
// diagonal entry is missing or not > 0; maxima of |a_ij| (base+1), |a_ij - a_ji| (base+2; a_ji found by binary
// search in row j, 0 where missing) and |a_ii| (base+4); dinv[i] = 1 / a_ii where a_ii > 0, else 0.
// One pass over A plus one search per off-diagonal entry (a check once per matrix, not a hot loop).
__global__ void check_matrix(const int n, const int* __restrict__ indptr, const int* __restrict__ indices,
        const double* __restrict__ vals, double* __restrict__ dinv, double* ws, const int base) {
    double nonfinite = 0, bad_index = 0, bad_diag = 0, max_abs = 0, max_asym = 0, max_diag = 0;
    GRID_STRIDE(i, n) {
        double d = 0.0;
        const int end = indptr[i + 1];
        for (int k = indptr[i]; k < end; ++k) {
            const int j = indices[k];
            const double v = vals[k];
            if (!isfinite(v)) { nonfinite += 1.0; continue; }
            if (j < 0 || j >= n) { bad_index += 1.0; continue; }
            max_abs = fmax(max_abs, fabs(v));
            if (j == i) { d = v; continue; }
            int lo = indptr[j], hi = indptr[j + 1];
            while (lo < hi) {
                const int mid = lo + ((hi - lo) >> 1);
                if (indices[mid] < i) lo = mid + 1; else hi = mid;
            }
            const double w = (lo < indptr[j + 1] && indices[lo] == i) ? vals[lo] : 0.0;
            max_asym = fmax(max_asym, fabs(v - w));
        }
        if (d > 0.0) { dinv[i] = 1.0 / d; } else { dinv[i] = 0.0; bad_diag += 1.0; }
        max_diag = fmax(max_diag, fabs(d));
    }
    block_add2(nonfinite, bad_index, ws, base + 0, base + 5);
    __syncthreads();   // block_add2's shared arrays are reused by the next call
    block_add2(bad_diag, 0.0, ws, base + 3, -1);
    block_max3(max_abs, max_asym, max_diag, ws, base + 1, base + 2, base + 4);
}

// zero the block's accumulators: rho[1..K], pq[0..K-1], rr[1..K]
__global__ void block_start(double* ws, const int i_rho, const int i_pq, const int i_rr, const int K) {
    for (int j = threadIdx.x; j < K; j += blockDim.x) {
        ws[i_rho + 1 + j] = 0.0; ws[i_pq + j] = 0.0; ws[i_rr + 1 + j] = 0.0;
    }
}
// carry the last iteration's scalars into slot 0 for the next block
__global__ void block_end(double* ws, const int i_rho, const int i_rr, const int k) {
    if (threadIdx.x == 0) { ws[i_rho] = ws[i_rho + k]; ws[i_rr] = ws[i_rr + k]; }
}
"""

_CT = {np.dtype(np.float16): "__half", np.dtype(np.float32): "float", np.dtype(np.float64): "double"}
_ONE = ("replace_residual", "spmv_dot", "dot", "precondition", "precondition_init", "update_r", "update_xp", "fold")
_TWO = ("residual", "axpy")
_LEVEL = ("csr_apply", "mg_smooth", "dia_apply", "dia_smooth")          # <storage S, compute T>


def _names():
    out = [f"{k}<{t}>" for k in _ONE for t in ("float", "double")]
    out += [f"{k}<{a},{b}>" for k in _TWO for a in ("float", "double") for b in ("float", "double")]
    out += [f"{k}<{s},{t}>" for k in _LEVEL for s in ("__half", "float", "double") for t in ("float", "double")]
    return out + ["block_start", "block_end", "check_matrix"]


@functools.lru_cache(maxsize=None)
def _module():
    import cupy

    return cupy.RawModule(code=_SOURCE, options=("-std=c++17",), name_expressions=_names())


class CupyOps(lowops.LowOps):
    """The fused kernels as CuPy RawKernels on one non-blocking stream; CUDA graphs by stream capture."""

    name = "cupy"
    supports_graphs = True

    def sparse_modules(self):
        import cupyx.scipy.sparse as csp

        return self.cp, csp

    def owns(self, xp):
        return xp is self.cp

    def __init__(self, graphs: bool = True):
        import cupy

        self.cp = cupy
        self.mod = _module()
        self._k = {}
        sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
        self.max_blocks = sms * (2048 // THREADS)
        self.graphs = graphs
        self.stream = cupy.cuda.Stream(non_blocking=True)

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
        """Record what ``fn()`` launches on the stream into a CUDA graph; returns its launcher."""
        if not self.graphs:
            return None
        s = self.stream
        s.synchronize()
        with s:
            s.begin_capture()
            try:
                fn()
            finally:
                graph = s.end_capture()
        return lambda: graph.launch(stream=s)

    def timer(self):
        cp = self.cp
        return lowops.EventTimer(cp.cuda.Event, lambda e: e.record(self.stream),
                                    lambda a, b: cp.cuda.get_elapsed_time(a, b) / 1e3, lambda e: e.synchronize())


@functools.lru_cache(maxsize=2)
def low_ops(graphs: bool = True) -> CupyOps:
    """The CuPy low ops (one per process; ``graphs=False``: the same kernels launched one by one)."""
    return CupyOps(graphs=graphs)


def poisson_5point_device(m: int, dtypes=(np.float64, np.float32)):
    """The 2D Poisson 5-point matrix (Dirichlet, m x m interior nodes, stencil [4, -1, -1, -1, -1]) built
    directly on the device (the P1 stiffness matrix of a uniform right-triangle mesh is the same)."""
    import cupy as cp

    from hpcsolve.fem.linalg import matrix

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
