"""Batched monitor points on the device: a point's values go into a row of a device buffer, and the host reads
the rows in batches (issue 34, part 3).

At a monitor point ``BatchedPoints.point`` launches, with no host synchronization: the stepper's moments kernel
into a buffer allocated once, a block reduction over the fluid cells (``monitor_partial``: sum rho |u|^2, max |u|,
sum |u|^2 and, at a steady check, sum |u - u_ref|^2 against the reference velocity kept on the device, which the
point's velocity then replaces), its final reduction into the row (``monitor_final``), the finite check of the
stored populations (a flag per row) and the momentum-exchange force of each measured obstacle (``lbm_force``
adding into the row). The reductions sum in a fixed order (per-thread strides, then a tree; no atomics), so a
row's values are the same from run to run; they equal the host path's (``Monitor.record`` on host or CuPy
fields) to round-off, the peak speed exactly.

The host reads the rows (``BatchedPoints.flush``) when :data:`ROWS` are queued, :data:`FLUSH_SECONDS` after the
last read, at a steady check (so that the steady stop and the stall are decided at the point the per-point path
decides them: a batch always ends at a check), and wherever the runner needs the host to be current (outputs,
checkpoints, a requested stop, the end). A flush records the good points' series in order and returns the first
bad one (NaN/Inf in the populations, or a lattice speed above the blow-up limit), if any; the points queued
after it were stepped but are not recorded. The runner keeps the fields of the last flush as its last good
fields (hpcsolve/lbm/runner.py).

The kernels exist twice behind one small interface: CUDA C for the CuPy stepper (:class:`CupyPointKernels`) and
``numba.cuda.jit`` for the Numba-CUDA stepper (:class:`NumbaPointKernels`, which also runs under the CUDA
simulator). The steppers hand them out (``stepper.point_kernels()``); a stepper without that method (NumPy,
the distributed slab stepper) keeps the per-point host path. Step time is measured with device events around
each step run (no synchronization; the host clock where the backend has no events: the simulator).
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass

import numpy as np

from hpcsolve.core import backends, cudasim
from hpcsolve.lbm.flags import FLUID
from hpcsolve.lbm.kernels.population_code import cuda_code
from hpcsolve.lbm.monitor import ON_DEVICE

#: threads per block of the reductions; blocks of the partial reduction at most MAX_BLOCKS (grid-stride); under
#: the CUDA simulator SIM_BLOCK (it runs each thread as a Python thread)
BLOCK = 128
SIM_BLOCK = 32
MAX_BLOCKS = 256
#: a row's first columns: sum rho |u|^2, max |u|, sum |u|^2, sum |u - u_ref|^2 (fluid cells, lattice units);
#: then (Fx, Fy) per measured obstacle
SUMS = 4
#: rows of the device buffer: at most this many points per batch
ROWS = 1024
#: the host reads a batch at least this often (wall clock): on the H200 a 2D-2 point at D = 80 is ~0.7 ms of
#: steps, so ~350 points a batch
FLUSH_SECONDS = 0.25
#: ``Monitor.steady_action`` -> the reduction's mode: 0 no steady work, 1 compare with the reference and replace
#: it, 2 replace it, 3 compare with it and keep it (the stall test's peek)
MODES = {None: 0, "clear": 0, "check": 1, "set": 2, "peek": 3}

_CUDA_SOURCE = r"""
#define BLOCK {block}
__device__ __forceinline__ double peak_max(const double a, const double b) {{
  return (!(b <= a) && a == a) ? b : a;      // max that keeps a NaN once seen
}}
__device__ void tree(double (*s)[BLOCK], const int t) {{
  __syncthreads();
  for (int o = BLOCK / 2; o > 0; o >>= 1) {{
    if (t < o) {{
      s[0][t] += s[0][t + o]; s[1][t] = peak_max(s[1][t], s[1][t + o]);
      s[2][t] += s[2][t + o]; s[3][t] += s[3][t + o];
    }}
    __syncthreads();
  }}
}}
extern "C" __global__ void monitor_partial(const real_t* m, const unsigned char* flags, double* uref,
                                           const long long n, const int mode, double* partial) {{
  __shared__ double s[4][BLOCK];
  const int t = threadIdx.x;
  double e = 0.0, p = 0.0, q2 = 0.0, d2 = 0.0;
  for (long long k = (long long)blockIdx.x * BLOCK + t; k < n; k += (long long)gridDim.x * BLOCK) {{
    if ((flags[k] & 0x7f) != {fluid}) continue;
    const double rho = 1.0 + (double)m[k], ux = (double)m[n + k], uy = (double)m[2 * n + k];
    const double q = ux * ux + uy * uy;
    e += rho * q; q2 += q; p = peak_max(p, hypot(ux, uy));
    if (mode & 1) {{ const double dx = ux - uref[k], dy = uy - uref[n + k]; d2 += dx * dx + dy * dy; }}
    if (mode == 1 || mode == 2) {{ uref[k] = ux; uref[n + k] = uy; }}
  }}
  s[0][t] = e; s[1][t] = p; s[2][t] = q2; s[3][t] = d2;
  tree(s, t);
  if (t == 0) for (int j = 0; j < 4; ++j) partial[j * gridDim.x + blockIdx.x] = s[j][0];
}}
extern "C" __global__ void monitor_final(const double* partial, const int blocks, double* values,
                                         const long long row, const int width, int* bad) {{
  __shared__ double s[4][BLOCK];
  const int t = threadIdx.x;
  double e = 0.0, p = 0.0, q2 = 0.0, d2 = 0.0;
  for (int j = t; j < blocks; j += BLOCK) {{
    e += partial[j]; p = peak_max(p, partial[blocks + j]); q2 += partial[2 * blocks + j]; d2 += partial[3 * blocks + j];
  }}
  s[0][t] = e; s[1][t] = p; s[2][t] = q2; s[3][t] = d2;
  tree(s, t);
  if (t == 0) {{
    double* r = values + row * width;
    for (int j = 0; j < 4; ++j) r[j] = s[j][0];
    for (int c = 4; c < width; ++c) r[c] = 0.0;
    bad[row] = 0;
  }}
}}
extern "C" __global__ void monitor_nonfinite(const store_t* A, const long long n, int* bad, const long long row) {{
  const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (k < n) {{
    const double v = (double)load_pop(A[k]);
    if (!(v - v == 0.0)) bad[row] = 1;
  }}
}}
"""


def cuda_source(policy) -> str:
    """The CUDA C of the point kernels for ``policy`` (its population load for the finite check)."""
    code = cuda_code(policy)
    prelude = (f"{code.header}\ntypedef {code.real_t} real_t;\ntypedef {code.store_t} store_t;\n"
               f"__device__ __forceinline__ real_t load_pop(const store_t v) {{ return {code.decode('v')}; }}\n")
    return prelude + _CUDA_SOURCE.format(block=BLOCK, fluid=FLUID)


@functools.lru_cache(maxsize=None)
def _cupy_module(policy):
    import cupy  # late: optional GPU dependency: imported only where a CuPy object is built

    return cupy.RawModule(code=cuda_source(policy), options=("--std=c++17",))


class CupyPointKernels:
    """The point kernels of a ``kernels_cupy.CupyStepper`` (CUDA C, :func:`cuda_source`), launched on CuPy's
    current stream like the stepper's own kernels."""

    def __init__(self, stepper):
        import cupy  # late: optional GPU dependency: imported only where a CuPy object is built

        self.cp, self.stepper = cupy, stepper
        self.n = stepper.nx * stepper.ny
        self.blocks = min(MAX_BLOCKS, -(-self.n // BLOCK))
        module = _cupy_module(stepper.policy)
        self._partial, self._final, self._nonfinite = (module.get_function(k) for k in (
            "monitor_partial", "monitor_final", "monitor_nonfinite"))
        self.m = cupy.empty((3, stepper.ny, stepper.nx), dtype=stepper.ct)
        self.partial = cupy.empty(SUMS * self.blocks, dtype=np.float64)
        self.uref = cupy.zeros(2 * self.n, dtype=np.float64)

    def alloc(self, rows: int, width: int) -> None:
        self.width = width
        self.values = self.cp.zeros((rows, width), dtype=np.float64)
        self.bad = self.cp.zeros(rows, dtype=np.int32)

    def point(self, mode: int, row: int) -> None:
        st = self.stepper
        st.macroscopic_device(self.m)
        self._partial((self.blocks,), (BLOCK,), (self.m, st.flags, self.uref, np.int64(self.n), np.int32(mode),
                                                 self.partial))
        self._final((1,), (BLOCK,), (self.partial, np.int32(self.blocks), self.values, np.int64(row),
                                     np.int32(self.width), self.bad))
        na = st.a.size
        self._nonfinite(((na + 255) // 256,), (256,), (st.a, np.int64(na), self.bad, np.int64(row)))

    def force(self, mask, row: int, col: int) -> None:
        self.stepper.force_into(mask, self.values[row, col:col + 2])

    def fetch(self, rows: int):
        return self.values[:rows].get(), self.bad[:rows].get()

    def set_reference(self, u: np.ndarray) -> None:
        self.uref[...] = self.cp.asarray(np.ascontiguousarray(u, dtype=np.float64).ravel())

    def get_reference(self) -> np.ndarray:
        return self.uref.get()

    def event(self):
        ev = self.cp.cuda.Event()
        ev.record()
        return ev

    def elapsed(self, start, stop) -> float:
        return self.cp.cuda.get_elapsed_time(start, stop) / 1e3


_NUMBA_SOURCE = """
def peak_max(a, b):
    return b if (not (b <= a) and a == a) else a


def tree(s, t):
    cuda.syncthreads()
    o = BLOCK // 2
    while o > 0:
        if t < o:
            s[0, t] += s[0, t + o]
            s[1, t] = peak_max(s[1, t], s[1, t + o])
            s[2, t] += s[2, t + o]
            s[3, t] += s[3, t + o]
        cuda.syncthreads()
        o //= 2


def monitor_partial(m, flags, uref, n, mode, partial):
    s = cuda.shared.array((4, BLOCK), float64)
    t = cuda.threadIdx.x
    e, p, q2, d2 = 0.0, 0.0, 0.0, 0.0
    k = cuda.blockIdx.x * BLOCK + t
    while k < n:
        if (flags[k] & 0x7f) == FLUID:
            rho, ux, uy = 1.0 + float64(m[k]), float64(m[n + k]), float64(m[2 * n + k])
            q = ux * ux + uy * uy
            e += rho * q
            q2 += q
            p = peak_max(p, math.hypot(ux, uy))
            if mode & 1:
                dx, dy = ux - uref[k], uy - uref[n + k]
                d2 += dx * dx + dy * dy
            if mode == 1 or mode == 2:
                uref[k] = ux
                uref[n + k] = uy
        k += cuda.gridDim.x * BLOCK
    s[0, t] = e
    s[1, t] = p
    s[2, t] = q2
    s[3, t] = d2
    tree(s, t)
    if t == 0:
        for j in range(4):
            partial[j * cuda.gridDim.x + cuda.blockIdx.x] = s[j, 0]


def monitor_final(partial, blocks, values, row, bad):
    s = cuda.shared.array((4, BLOCK), float64)
    t = cuda.threadIdx.x
    e, p, q2, d2 = 0.0, 0.0, 0.0, 0.0
    j = t
    while j < blocks:
        e += partial[j]
        p = peak_max(p, partial[blocks + j])
        q2 += partial[2 * blocks + j]
        d2 += partial[3 * blocks + j]
        j += BLOCK
    s[0, t] = e
    s[1, t] = p
    s[2, t] = q2
    s[3, t] = d2
    tree(s, t)
    if t == 0:
        for c in range(4):
            values[row, c] = s[c, 0]
        for c in range(4, values.shape[1]):
            values[row, c] = 0.0
        bad[row] = 0
"""


@functools.lru_cache(maxsize=None)
def numba_kernels():
    """(partial, final, threads per block): ``numba.cuda.jit`` twins of ``monitor_partial`` / ``monitor_final``
    (Python source run with ``cuda`` among its globals, which the simulator swaps for its own module)."""
    from numba import cuda, float64  # late: optional GPU dependency, imported on first use (after NUMBA_ENABLE_CUDASIM is read)

    block = BLOCK
    if backends.cuda_simulator_enabled():
        cudasim.serialise_shared_arrays()     # its cuda.shared.array is not thread-safe (hpcsolve.core.cudasim)
        block = SIM_BLOCK
    ns = {"cuda": cuda, "float64": float64, "math": math, "BLOCK": block, "FLUID": FLUID}
    exec(compile(_NUMBA_SOURCE, "<hpcsolve.lbm.device_monitor>", "exec"), ns)
    for name in ("peak_max", "tree"):
        ns[name] = cuda.jit(device=True)(ns[name])
    return cuda.jit(ns["monitor_partial"]), cuda.jit(ns["monitor_final"]), block


class NumbaPointKernels:
    """The point kernels of a ``kernels_numba.NumbaCudaStepper`` (:func:`numba_kernels`, and the stepper's own
    ``lbm_nonfinite``), launched on the stepper's stream."""

    def __init__(self, stepper):
        from numba import cuda  # late: optional GPU dependency, imported on first use (after NUMBA_ENABLE_CUDASIM is read)

        self.cuda, self.stepper, self.stream = cuda, stepper, stepper.stream
        self.n = stepper.nx * stepper.ny
        self._partial, self._final, self.block = numba_kernels()
        self.blocks = min(MAX_BLOCKS, -(-self.n // self.block))
        self.m = cuda.device_array(3 * self.n, dtype=stepper.ct, stream=self.stream)
        self.partial = cuda.device_array(SUMS * self.blocks, dtype=np.float64, stream=self.stream)
        self.uref = cuda.to_device(np.zeros(2 * self.n), stream=self.stream)
        self.events = not backends.cuda_simulator_enabled()   # the simulator's events record no time

    def alloc(self, rows: int, width: int) -> None:
        self.values = self.cuda.to_device(np.zeros((rows, width)), stream=self.stream)
        self.bad = self.cuda.to_device(np.zeros(rows, dtype=np.int32), stream=self.stream)

    def point(self, mode: int, row: int) -> None:
        st, stream = self.stepper, self.stream
        st.macroscopic_device(self.m)
        self._partial[self.blocks, self.block, stream](self.m, st.flags, self.uref, np.int64(self.n),
                                                       np.int32(mode), self.partial)
        self._final[1, self.block, stream](self.partial, np.int32(self.blocks), self.values, np.int64(row), self.bad)
        st.nonfinite_into(self.bad[row:row + 1])

    def force(self, mask, row: int, col: int) -> None:
        self.stepper.force_into(mask, self.values[row, col:col + 2])

    def fetch(self, rows: int):
        values = self.values[:rows].copy_to_host(stream=self.stream)
        bad = self.bad[:rows].copy_to_host(stream=self.stream)
        self.stream.synchronize()
        return values, bad

    def set_reference(self, u: np.ndarray) -> None:
        self.uref.copy_to_device(np.ascontiguousarray(u, dtype=np.float64).ravel(), stream=self.stream)

    def get_reference(self) -> np.ndarray:
        u = self.uref.copy_to_host(stream=self.stream)
        self.stream.synchronize()
        return u

    def event(self):
        if not self.events:
            return None
        ev = self.cuda.event()
        ev.record(self.stream)
        return ev

    def elapsed(self, start, stop) -> float:
        return self.cuda.event_elapsed_time(start, stop) / 1e3


@dataclass(frozen=True)
class BadPoint:
    """The first bad point of a batch: its step, the step of the last good point before it, and why
    (``finite`` False: NaN/Inf in the populations; else ``peak``, the lattice speed above the limit)."""

    step: int
    good_step: int
    finite: bool
    peak: float


class BatchedPoints:
    """The monitor points of one run queued on the device and read in batches (the module docstring). ``monitor``:
    the run's ``Monitor`` (its series and steady state); ``kernels``: ``stepper.point_kernels()``; ``peak_limit``:
    the lattice speed that counts as a blow-up; ``good_step``: the step of the last point already checked."""

    def __init__(self, monitor, stepper, kernels, peak_limit: float, good_step: int, rows: int = ROWS,
                 flush_seconds: float = FLUSH_SECONDS):
        self.monitor, self.stepper, self.kernels = monitor, stepper, kernels
        self.peak_limit, self.good_step = peak_limit, good_step
        self.rows, self.flush_seconds = rows, flush_seconds
        geo = monitor.geo
        self.masks = [geo.obstacles[k] for k in geo.measured]
        kernels.alloc(rows, SUMS + 2 * len(self.masks))
        self.fluid = np.asarray(monitor.fluid, dtype=bool).ravel()
        self.pending: list[tuple[int, str | None, int]] = []      # (step, action, reference step)
        self._clock: list = []            # (start, stop) events of the step runs since the last flush
        self._seconds = 0.0               # step seconds where the backend has no events
        self._last_flush = time.perf_counter()
        if isinstance(monitor.last_steady_u, np.ndarray):       # the reference of step 0 or of a checkpoint
            full = np.zeros((2, self.fluid.size))
            full[:, self.fluid] = monitor.last_steady_u
            kernels.set_reference(full)

    def step(self, n: int, timer) -> None:
        """``stepper.step(n)`` timed by device events (``timer``: the backend's synchronizing timer, used where
        there are none)."""
        start = self.kernels.event()
        if start is None:
            with timer() as t:
                self.stepper.step(n)
            self._seconds += t.seconds
            return
        self.stepper.step(n)
        self._clock.append((start, self.kernels.event()))

    def point(self, step: int) -> None:
        """Queue the monitor point of ``step`` (the stepper's current state) into the next row."""
        action = self.monitor.steady_action(step)
        reference_step = self.monitor.last_steady_step      # the reference this point compares with (before it moves)
        row = len(self.pending)
        self.kernels.point(MODES[action], row)
        for j, mask in enumerate(self.masks):
            self.kernels.force(mask, row, SUMS + 2 * j)
        self.monitor.steady_moved(step, action, ON_DEVICE)
        self.pending.append((step, action, reference_step))

    def due(self) -> bool:
        """The batch is to be read now: full, ending at a steady check, or FLUSH_SECONDS after the last read."""
        if not self.pending:
            return False
        return (len(self.pending) >= self.rows or self.pending[-1][1] == "check"
                or time.perf_counter() - self._last_flush >= self.flush_seconds)

    def flush(self) -> tuple[BadPoint | None, float]:
        """Read the queued rows (one synchronization), record the good points' series in order; returns the first
        bad point (or None) and the step seconds since the last flush."""
        pending, self.pending = self.pending, []
        values, bad = self.kernels.fetch(len(pending))
        seconds = self._seconds + sum(self.kernels.elapsed(a, b) for a, b in self._clock)
        self._clock, self._seconds = [], 0.0
        self._last_flush = time.perf_counter()
        for (step, action, reference_step), v, b in zip(pending, values, bad):
            if b or v[1] > self.peak_limit:
                return BadPoint(step, self.good_step, not b, float(v[1])), seconds
            change = None
            if action in ("check", "peek"):
                change = math.sqrt(v[3]) / math.sqrt(v[2]) if v[2] > 0.0 else math.inf
            forces = [(float(v[SUMS + 2 * j]), float(v[SUMS + 2 * j + 1])) for j in range(len(self.masks))]
            self.monitor.record_values(step, float(v[0]), float(v[1]), forces, action, change=change, moved=True,
                                       reference_step=reference_step)
            self.good_step = step
        return None, seconds

    def host_reference(self) -> None:
        """Bring the steady reference to the host (``Monitor.last_steady_u``, for a checkpoint); after a flush."""
        if isinstance(self.monitor.last_steady_u, str) and self.monitor.last_steady_u == ON_DEVICE:
            u = self.kernels.get_reference().reshape(2, -1)
            self.monitor.last_steady_u = np.ascontiguousarray(u[:, self.fluid])


def batched_points(monitor, stepper, peak_limit: float, good_step: int) -> BatchedPoints | None:
    """The batched points of a run on ``stepper``, or None where the stepper has no point kernels (the per-point
    host path)."""
    make = getattr(stepper, "point_kernels", None)
    if make is None:
        return None
    return BatchedPoints(monitor, stepper, make(), peak_limit, good_step, rows=ROWS, flush_seconds=FLUSH_SECONDS)
