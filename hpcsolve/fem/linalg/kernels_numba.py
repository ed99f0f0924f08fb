"""Numba-CUDA kernels for the FEM Krylov solvers: the same fused kernels as ``kernels_cupy`` (own CSR
SpMV with int32 indices, p.Ap fused into the SpMV, r.r fused into the r update, alpha/beta read from
float64 scalars in device memory, one atomicAdd per block), written with ``numba.cuda.jit``.

The algorithm lives in ``hpcsolve.fem.linalg.cg``; this module supplies the kernels of the
``hpcsolve.fem.linalg.lowops`` interface (``NumbaOps``). CUDA graphs: numba-cuda 0.30 has no stream-capture
API of its own. Where CuPy imports, NumbaOps launches on a CuPy stream (``numba.cuda.external_stream``
of a ``cupy.cuda.Stream``) and records a block of launches with CuPy's stream capture,
as ``kernels_cupy`` does; a failed capture is not fatal (``capture`` returns None, the caller launches
directly, ``graph_error`` says why). Without CuPy (and under the simulator) each block of k iterations
is 3k kernel launches from Python on one stream, with no host synchronization until the convergence
check; Python launch overhead (tens of microseconds per launch) then dominates at small sizes.

Arrays given to these ops must be numba device arrays (``DeviceNDArray``: what ``to_device`` / ``zeros``
return, or ``numba.cuda.as_cuda_array(cupy_array)`` views made once, outside a capture). A CuPy array
passed directly is imported by numba at every launch (DLPack with a stream handshake), which costs time
and cannot be recorded into a graph.

The kernels are not written here: each fused operation is described once in ``hpcsolve.fem.linalg.fused`` (the
same description ``kernels_cupy`` prints to CUDA C), printed to Python by ``fused_numba`` and exec'd per type
binding (``_typed(T)``, ``_pair(TA, TO)``, ``_dia(T, ndiag)``, ``_core()``), so float32 work really is float32:
declarations and coefficients are cast to T. What stays here is this backend's runtime: the block reductions
(a shared-memory tree, which also runs under the CUDA simulator, then one float64 atomic per block), the index
type, the launch bounds, and the launches. What both GPU backends share (the block size, the grid cap, the CuPy
stream capture, the lookup of CuPy's ops for the set-up twin through the backend registry) is in ``kernels_common``:
this module does not import ``kernels_cupy``. ``NumbaOps`` is split by job: ``_CupyStream`` (CuPy's stream, graphs,
set-up arrays and twin), ``_LevelKernels`` (the multigrid level kernels) and the CG kernels and arrays.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from hpcsolve.core.backends import cuda_simulator_enabled, owner_of
from hpcsolve.core.cudasim import serialise_shared_arrays
from hpcsolve.fem.linalg import fused, fused_numba, kernels_common, lowops
from hpcsolve.fem.linalg.lowops import LevelCSR

THREADS = kernels_common.THREADS          # also the shared-memory size of the block reduction (power of two)
#: every kernel is compiled for THREADS-thread blocks, 2048 // THREADS of them resident per SM (at most 32
#: registers a thread), the occupancy the grid size assumes (SMs x 2048 / THREADS blocks). Without the bound,
#: ptxas gave the CG kernels 36-40 registers and the DIA smoothers 48-64, so 4-6 blocks fit per SM and the
#: grid ran in partly filled extra waves (the CuPy kernels compile to <= 32 registers).
LAUNCH_BOUNDS = (THREADS, kernels_common.RESIDENT_THREADS // THREADS)
cuda = None            # numba.cuda, imported lazily by _core(); a module global so that the CUDA
                       # simulator can substitute its own module inside the kernels


def _index_type():
    """The row-index type of the hot kernels: numba's uint64 on a GPU (no negative-index wraparound on loads;
    offsets and indices taken modulo 2^64, bounded by one unsigned compare), Python int under the simulator."""
    if cuda_simulator_enabled():
        return int
    from numba import uint64  # late: optional GPU module, imported after NUMBA_ENABLE_CUDASIM is read

    return uint64


def _kernel_decorator():
    """``cuda.jit`` with LAUNCH_BOUNDS (the CUDA simulator takes no launch bounds)."""
    if cuda_simulator_enabled():
        return cuda.jit
    return functools.partial(cuda.jit, launch_bounds=LAUNCH_BOUNDS)


def _block_reduction_source(name: str, n: int, combine: str, atomic: str, sync_first: bool) -> str:
    """Python source of the device function ``name(v0 .. v<n-1>, ws, i0 .. i<n-1>)``: a shared-memory tree over the
    block of each of the n float64 values (``combine``: the step, ``{a}`` / ``{b}`` the two operands), then one
    ``cuda.atomic.<atomic>`` of each block result into ``ws[i_k]`` (an index < 0 skips); ``sync_first``: wait for
    the block's earlier reductions first (thread 0 reads their shared arrays)."""
    k = range(n)
    lines = [f"def {name}({', '.join(f'v{j}' for j in k)}, ws, {', '.join(f'i{j}' for j in k)}):"]
    lines += ["    cuda.syncthreads()"] if sync_first else []
    lines += [f"    s{j} = cuda.shared.array(THREADS, float64)" for j in k] + ["    t = cuda.threadIdx.x"]
    lines += [f"    s{j}[t] = v{j}" for j in k] + ["    cuda.syncthreads()", "    s = cuda.blockDim.x // 2",
                                                  "    while s > 0:", "        if t < s:"]
    lines += [f"            s{j}[t] = " + combine.format(a=f"s{j}[t]", b=f"s{j}[t + s]") for j in k]
    lines += ["        cuda.syncthreads()", "        s //= 2", "    if t == 0:"]
    for j in k:
        lines += [f"        if i{j} >= 0:", f"            cuda.atomic.{atomic}(ws, i{j}, s{j}[0])"]
    return "\n".join(lines) + "\n"


def _reductions():
    """The backend's block reductions (the kernels' ``block_add2`` / ``block_max3``, see ``fused``): a shared-memory
    tree (it also runs under the CUDA simulator), then one float64 atomic per block; the maxima are of values >= 0."""
    from numba import float64  # late: optional GPU module, imported after NUMBA_ENABLE_CUDASIM is read

    ns = {"cuda": cuda, "float64": float64, "THREADS": THREADS}
    for name, n, combine, atomic, sync_first in (("block_add2", 2, "{a} + {b}", "add", False),
                                                 ("block_max3", 3, "max({a}, {b})", "max", True)):
        exec(compile(_block_reduction_source(name, n, combine, atomic, sync_first), f"<{name}>", "exec"), ns)
    return tuple(cuda.jit(device=True, inline=True)(ns[name]) for name in ("block_add2", "block_max3"))


@dataclasses.dataclass(frozen=True)
class Core:
    """The untyped kernels and the helpers every typed kernel calls."""

    cuda: object
    block_add2: object
    block_max3: object
    coef: object
    block_start: object
    block_end: object
    fill_zero: object
    check_matrix: object


def _build(ops, label, count=None, helpers=None, **types):
    """The descriptions ``ops`` printed for Numba (``fused_numba``) and compiled lazily, with the type parameters
    ``types`` bound (T=np.float32, ...) and the helpers they call (``_core``'s unless given); returns
    {name: kernel}."""
    from numba import float32, float64  # late: optional GPU module, imported after NUMBA_ENABLE_CUDASIM is read

    if helpers is None:
        core = _core()              # (first: it imports numba.cuda into the module global ``cuda``)
        helpers = dict(block_add2=core.block_add2, block_max3=core.block_max3, coef=core.coef)
    index_type = _index_type()
    scope = {"cuda": cuda, "math": math, "float64": float64, "float32": float32, "I": index_type,
             "kernel": _kernel_decorator(), "device": cuda.jit(device=True, inline=True), **types, **helpers}
    return fused_numba.build(ops, scope, unsigned=index_type is not int, count=count, label=label)


@functools.lru_cache(maxsize=None)
def _core() -> Core:
    global cuda
    from numba import cuda as numba_cuda  # late: optional GPU module, imported after NUMBA_ENABLE_CUDASIM is read

    cuda = numba_cuda
    if cuda_simulator_enabled():
        serialise_shared_arrays()             # the simulator's cuda.shared.array is not thread-safe (hpcsolve.core.cudasim)
    helpers = dict(zip(("block_add2", "block_max3"), _reductions()))
    k = _build((fused.COEF, fused.BLOCK_START, fused.BLOCK_END, fused.FILL_ZERO, fused.CHECK_MATRIX), "core",
               helpers=helpers)
    return Core(cuda, **helpers, **k)


@functools.lru_cache(maxsize=None)
def _typed(T):
    """Kernels in working precision T (np.float32 or np.float64); the multigrid level kernels take values stored in
    any of float64 / float32 / float16 (one compiled specialization per storage dtype), widened to T value by value.
    The CG iteration's kernels index with I (uint64 on a GPU: no negative-index wraparound on their loads)."""
    ops = (fused.SPMV_DOT, fused.DOT, fused.PRECONDITION, fused.PRECONDITION_INIT, fused.UPDATE_R, fused.UPDATE_XP,
           fused.FOLD, fused.LEVEL_ROW, fused.CSR_APPLY, fused.MG_SMOOTH)
    return _build(ops, f"T={np.dtype(T).name}", T=T)


@functools.lru_cache(maxsize=None)
def _pair(TA, TO):
    """Kernels across two precisions: residual computed in TA stored as TO; y(TO) += a x(TA); dst(TO) = scale src."""
    ops = (fused.RESIDUAL, fused.REPLACE_RESIDUAL, fused.AXPY, fused.CAST_COPY)
    return _build(ops, f"TA={np.dtype(TA).name}, TO={np.dtype(TO).name}", TA=TA, TO=TO, TX=TA, TY=TO)


@functools.lru_cache(maxsize=None)
def _dia(T, ndiag: int):
    """dia_apply and dia_smooth in working precision T for levels with ``ndiag`` diagonals: the loop over the
    diagonals written out (offsets read once per thread, before the row loop), as the CUDA C template's loop
    unrolls there; one pair per (T, ndiag), a level has at most DIA_MAX_DIAGONALS.

    On a GPU the row and column indices are uint64 (``_index_type``), the offsets taken modulo 2^64, so that one
    unsigned compare ``j < n`` bounds a column on both sides and numba emits no negative-index wraparound on
    any load (with signed indices it does, on every one); the simulator keeps Python ints and both bounds."""
    return _build((fused.DIA_ROW, fused.DIA_APPLY, fused.DIA_SMOOTH), f"T={np.dtype(T).name}, {ndiag} diagonals",
                  count=ndiag, T=T)


_TYPES = {np.dtype(np.float32): np.float32, np.dtype(np.float64): np.float64}


class _LevelKernels(lowops.LowOps):
    """NumbaOps' multigrid level kernels (``csr_apply``, ``mg_smooth``: CSR or DIA levels, see ``lowops``);
    the launches go through ``NumbaOps._go`` / ``_dinv``."""

    # LevelCSR: values in M.vals.dtype, vectors in T; a None rowscale / b is a flag and a placeholder array of
    # dtype T, never read
    def csr_apply(self, M, x, y, a=1.0, b=None, c=0.0):
        rs, has_rs = self._dinv(M.rowscale, y.dtype)
        bb, has_b = self._dinv(b, y.dtype)
        if M.offsets is not None:
            self._go(_dia(_TYPES[y.dtype], M.ndiag)["dia_apply"], M.rows, np.int32(M.rows), M.offsets, M.vals, rs,
                     has_rs, x, bb, has_b, y, np.float64(a), np.float64(c))
            return
        self._go(_typed(_TYPES[y.dtype])["csr_apply"], M.rows, np.int32(M.rows), M.indptr, M.indices, M.vals, rs,
                 has_rs, x, bb, has_b, y, np.float64(a), np.float64(c))

    def mg_smooth(self, M, x_in, b, dinv, d, x_out, c_d, c_r, first):
        rs, has_rs = self._dinv(M.rowscale, d.dtype)
        first = bool(first)
        if M.offsets is not None and not first and x_in is not None:
            self._go(_dia(_TYPES[d.dtype], M.ndiag)["dia_smooth"], M.rows, np.int32(M.rows), M.offsets, M.vals, rs,
                     has_rs, x_in, b, dinv, d, x_out, np.float64(c_d), np.float64(c_r))
            return
        if M.offsets is not None:       # the first step reads no matrix: the CSR kernel with placeholder indices
            M = self._dia_as_csr_placeholder(M)
        self._go(_typed(_TYPES[d.dtype])["mg_smooth"], M.rows, np.int32(M.rows), M.indptr, M.indices, M.vals, rs,
                 has_rs, x_out if first or x_in is None else x_in, b, dinv, d, x_out, np.float64(c_d),
                 np.float64(c_r), first)

    def _dia_as_csr_placeholder(self, M):
        """For ``mg_smooth``'s first step (no matrix read): the DIA level with int32 placeholder index arrays, made
        once (never inside a capture: the first step runs before any capture of the V-cycle)."""
        hit = M.cache.get("numba-csr-placeholder")
        if hit is None:

            z = self.cuda.to_device(np.zeros(2, np.int32), stream=self.stream)
            hit = M.cache["numba-csr-placeholder"] = LevelCSR(M.rows, M.cols, z, z, M.vals, M.compute)
        return hit


class _CupyStream(lowops.LowOps):
    """NumbaOps' side that works with CuPy where it imports: the launches on a CuPy stream, CUDA graphs by CuPy's
    stream capture (``kernels_common.capture_graph``), the multigrid set-up on CuPy's arrays and the launch
    twin (CuPy's kernels, reached through the backend registry: this module imports no CuPy backend)."""

    #: launch-bound set-up work (the power iterations) through CuPy's kernels where it can (``launch_twin``)
    set_up_on_cupy = True

    def _use_cupy_stream(self, device_id):
        """Launch on a CuPy stream of the same device (primary context), so that CuPy's stream capture can
        record the launches; on any failure stay on a numba stream and say why. The stream is a blocking one,
        as numba's own streams are: it stays ordered after work on the legacy default stream (numba's
        ``cuda.to_device`` without a stream, say), so arrays made that way elsewhere are ready for it."""
        try:
            import cupy  # late: optional GPU module, only for launches on a CuPy stream (CUDA graphs)
        except Exception as exc:                          # no CuPy: no graphs, nothing else changes
            self.graph_error = f"no CUDA graphs: cupy does not import ({type(exc).__name__}: {exc})"
            return
        try:
            device = cupy.cuda.Device(device_id)
            with device:
                stream = cupy.cuda.Stream(non_blocking=False)
            self.stream = cuda.external_stream(stream.ptr)
        except Exception as exc:
            self.graph_error = f"no CUDA graphs: a CuPy stream for numba failed ({type(exc).__name__}: {exc})"
            self.stream = None
            return
        self._cp, self._cp_stream, self._cp_device = cupy, stream, device
        self.supports_graphs = self.graphs = True

    # ---- the multigrid set-up's arrays: CuPy's where it imports (the set-up stays on the device, as on CuPy)
    def sparse_modules(self):
        """(cupy, cupyx.scipy.sparse) where this backend launches on a CuPy stream (CuPy imports: the hierarchy
        is built on the device with CuPy's arrays, then seen by these kernels through the CUDA array interface),
        else NumPy / SciPy on the host."""
        if self._cp is None or owner_of(self._cp) is None:     # CuPy's own probe must pass too
            return super().sparse_modules()
        import cupyx.scipy.sparse as csp  # late: optional GPU module, only for a multigrid set-up on the device

        return self._cp, csp

    def context(self):
        """CuPy's work of the set-up on this backend's stream (ordered with the kernels it feeds)."""
        if self._cp is None:
            return super().context()
        return self._cp_stream

    def adopt(self, a):
        """A CuPy array as a numba device array on the same memory (``numba.cuda.as_cuda_array``, made outside any
        capture; the view keeps the CuPy array alive); NumPy arrays are copied to the device."""
        if self._cp is not None and isinstance(a, self._cp.ndarray):
            return self.cuda.as_cuda_array(a)
        return super().adopt(a)

    def launch_twin(self):
        """CuPy's kernels (the CuPy backend's low ops, ``kernels_cupy.CupyOps``: the same fused descriptions printed
        to CUDA C, from the backend registry through ``kernels_common.ops_on_stream``, not imported) on this
        backend's CuPy stream, and ``cupy.asarray`` (the same memory, through the CUDA array interface), where CuPy
        imports and its own probe passes and ``set_up_on_cupy`` is on; else None (Numba's own launches). The
        smoothers' power iterations are about 75 launches: through Numba's dispatcher 9.8-12.8 ms of a 2048^2 set-up,
        4.4-6.2 ms through CuPy's (docs/design/fem_gpu.md)."""
        if self._cp is None or not self.set_up_on_cupy or owner_of(self._cp) is None:
            return None
        if self._twin is None:
            with self._cp_device:              # the module loads on this backend's device
                self._twin = kernels_common.ops_on_stream(self._cp, self._cp_stream, graphs=False)
        return self._twin, self._cp.asarray

    def as_array_of(self, a, xp):
        if self._cp is not None and xp is self._cp:
            return self._cp.asarray(a)          # the same device memory (CUDA array interface)
        return super().as_array_of(a, xp)

    def capture(self, fn):
        """Record what ``fn()`` launches on the stream into a CUDA graph (CuPy stream capture, relaxed mode);
        returns its launcher, or None (no graphs, or the capture failed: ``graph_error`` says why; nothing
        recorded has run, so the caller then launches ``fn()`` directly)."""
        if not self.graphs:
            return None
        launch, err = kernels_common.capture_graph(self._cp_stream, fn, self._cp_device)
        if launch is None:
            self.graph_error = f"CUDA graph capture failed, launching directly ({type(err).__name__}: {err})"
            return None
        self.graph_error = None          # a capture that worked: no failure to report any more
        return launch


class NumbaOps(_CupyStream, _LevelKernels, lowops.LowOps):
    """The fused kernels as numba.cuda.jit kernels on one stream; CUDA graphs through CuPy's stream capture
    where CuPy imports and ``graphs`` is True (see the module docstring)."""

    compiles_lazily = True   # kernels compile at their first launch: cg runs a block once before capturing it
    name = "numba-cuda"
    supports_graphs = False      # per instance: True when launching on a CuPy stream (capture possible)
    graphs = False

    def __init__(self, graphs: bool = True):
        self.cuda = _core().cuda
        self.sim = cuda_simulator_enabled()
        self.threads = 8 if self.sim else THREADS
        self.graph_error = None          #: why there are no graphs / why the last capture failed (None: fine)
        self._cp = self._cp_stream = self._cp_device = None
        self._twin = None
        self.supports_graphs = self.graphs = False
        if self.sim:
            self.max_blocks = 2
            self.stream = 0
            self.graph_error = "the CUDA simulator has no CUDA graphs"
        else:
            dev = cuda.get_current_device()
            self.max_blocks = kernels_common.max_blocks(dev.MULTIPROCESSOR_COUNT, THREADS)
            self.stream = None
            if graphs:
                self._use_cupy_stream(dev.id)
            else:
                self.graph_error = "graphs switched off (NumbaOps(graphs=False))"
            if self.stream is None:
                self.stream = cuda.stream()
        # placeholders for absent optional arrays (dinv, rowscale, b), made now: never inside a capture
        self._dummy = {}
        for dt in (np.float32, np.float64):
            self._dinv(None, dt)

    def _grid(self, n):
        return max(1, min((n + self.threads - 1) // self.threads, self.max_blocks))

    def _go(self, kernel, n, *args):
        kernel[self._grid(n), self.threads, self.stream](*args)

    def _dinv(self, dinv, dtype):
        if dinv is not None:
            return dinv, True
        d = self._dummy.get(np.dtype(dtype))
        if d is None:
            d = self._dummy[np.dtype(dtype)] = self.cuda.to_device(np.zeros(1, dtype=dtype))
        return d, False

    # ---- arrays
    def to_device(self, a):
        return self.cuda.to_device(np.ascontiguousarray(a), stream=self.stream)

    def to_host(self, a):
        out = a.copy_to_host(stream=self.stream)
        self.sync()
        return out

    def zeros(self, n, dtype):
        if self._cp is not None:
            # CuPy's pool and memset on this stream, seen through the CUDA array interface (the view keeps the CuPy
            # array alive): a numba allocation and its zeroing launch cost about 100 us, this about half
            with self._cp_stream:
                a = self._cp.zeros(n, dtype=dtype)
            return self.cuda.as_cuda_array(a, sync=False)      # its memset is on this stream: no host wait
        a = self.cuda.device_array(n, dtype=dtype, stream=self.stream)
        self.fill_zero(a)
        return a

    def astype(self, a, dtype):
        out = self.cuda.device_array(a.size, dtype=dtype, stream=self.stream)
        self.scale_copy(a, out, 1.0)
        return out

    def scale_copy(self, src, dst, scale=1.0):
        wide = src.dtype if src.dtype.itemsize >= dst.dtype.itemsize else dst.dtype
        k = _pair(_TYPES[np.dtype(wide)], _TYPES[np.dtype(dst.dtype)])["cast_copy"]
        self._go(k, dst.size, np.int32(dst.size), src, dst, _TYPES[np.dtype(wide)](scale))

    def fill_zero(self, a):
        self.zero_range(a, 0, a.size)

    def zero_range(self, a, start, count):
        count = min(count, a.size - start)
        self._go(_core().fill_zero, count, a, np.int32(start), np.int32(count))

    def sync(self):
        if self.sim:
            return
        self.stream.synchronize()

    # ---- kernels
    def spmv_dot(self, A, p, q, ws, i_pq):
        k = _typed(_TYPES[p.dtype])["spmv_dot"]
        self._go(k, A.n, np.int32(A.n), A.indptr, A.indices, A.vals[p.dtype], p, q, ws, np.int32(i_pq))

    def residual(self, A, x, b, r_out, dinv, ws, i_rz, i_rr):
        k = _pair(_TYPES[x.dtype], _TYPES[r_out.dtype])["residual"]
        d, has = self._dinv(dinv, x.dtype)
        self._go(k, A.n, np.int32(A.n), A.indptr, A.indices, A.vals[x.dtype], x, b, r_out, d, has, ws,
                 np.int32(i_rz), np.int32(i_rr))

    def replace_residual(self, A, x64, b64, r, p, dinv64, ws, i_rz, i_rr):
        k = _pair(np.float64, _TYPES[r.dtype])["replace_residual"]
        d, has = self._dinv(dinv64, np.float64)
        self._go(k, A.n, np.int32(A.n), A.indptr, A.indices, A.vals[np.dtype(np.float64)], x64, b64, r, p, d, has,
                 ws, np.int32(i_rz), np.int32(i_rr))

    def dot(self, x, y, ws, i):
        self._go(_typed(_TYPES[x.dtype])["dot"], x.size, np.int32(x.size), x, y, ws, np.int32(i))

    def axpy(self, coef, x, y, ws):
        inum, iden, c = coef
        k = _pair(_TYPES[x.dtype], _TYPES[y.dtype])["axpy"]
        self._go(k, y.size, np.int32(y.size), x, y, ws, np.int32(inum), np.int32(iden), np.float64(c))

    def precondition(self, dinv, r, z, ws, i_rz):
        self._go(_typed(_TYPES[r.dtype])["precondition"], r.size, np.int32(r.size), dinv, r, z, ws, np.int32(i_rz))

    def precondition_init(self, r, p, dinv, ws, i_rz, i_rr):
        d, has = self._dinv(dinv, r.dtype)
        self._go(_typed(_TYPES[r.dtype])["precondition_init"], r.size, np.int32(r.size), r, p, d, has, ws,
                 np.int32(i_rz), np.int32(i_rr))

    def update_r(self, r, q, dinv, ws, i_rho, i_pq, i_rz, i_rr):
        d, has = self._dinv(dinv, r.dtype)
        self._go(_typed(_TYPES[r.dtype])["update_r"], r.size, np.int32(r.size), r, q, d, has, ws, np.int32(i_rho),
                 np.int32(i_pq), np.int32(i_rz), np.int32(i_rr))

    def update_xp(self, x, p, r, dinv, ws, i_rho, i_pq, beta):
        bnum, bden, bc = beta
        d, has = self._dinv(dinv, r.dtype)
        self._go(_typed(_TYPES[r.dtype])["update_xp"], r.size, np.int32(r.size), x, p, r, d, has, ws,
                 np.int32(i_rho), np.int32(i_pq), np.int32(bnum), np.int32(bden), np.float64(bc))

    def fold(self, x64, y):
        self._go(_typed(_TYPES[y.dtype])["fold"], y.size, np.int32(y.size), x64, y)

    def block_start(self, ws, i_rho, i_pq, i_rr, K):
        _core().block_start[1, 32, self.stream](ws, np.int32(i_rho), np.int32(i_pq), np.int32(i_rr), np.int32(K))

    def block_end(self, ws, i_rho, i_rr, k):
        _core().block_end[1, 32, self.stream](ws, np.int32(i_rho), np.int32(i_rr), np.int32(k))

    def check_matrix(self, n, indptr, indices, vals, dinv_out, ws, base):
        self._go(_core().check_matrix, n, np.int32(n), indptr, indices, vals, dinv_out, ws, np.int32(base))

    # ---- timing
    def timer(self):
        c = self.cuda
        return lowops.EventTimer(c.event, lambda e: e.record(self.stream),
                                    lambda a, b: c.event_elapsed_time(a, b) / 1e3, lambda e: e.synchronize())


@functools.lru_cache(maxsize=2)
def low_ops(graphs: bool = True) -> NumbaOps:
    """The Numba-CUDA low ops (one per process and setting; ``graphs=False``: a numba stream, no CuPy, the
    kernels launched one by one)."""
    return NumbaOps(graphs=graphs)


def view_of(dA):
    """A device matrix built by another backend's ops (CuPy) seen by Numba's: zero-copy, through the CUDA array
    interface (the benchmarks time both backends on one matrix)."""
    ops = low_ops()
    return dA.on(ops, ops.cuda.as_cuda_array)
