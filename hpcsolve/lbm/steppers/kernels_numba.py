"""Numba-CUDA backend: one fused ``numba.cuda.jit`` kernel per time step.

The physics is ``physics.physics_for(compute_dtype, jit=cuda.jit(device=True))``: the very
functions the NumPy reference evaluates (moments, equilibrium, BGK/TRT collision, boundary
rules), compiled as device functions. The kernel around them (pull streaming with periodic
wrap, the boundary rule chosen by the source cell's flag, loads and stores with the policy's
scale, as ``population_code.numba_code`` spells them) is generated as Python source
(``emit_numba.kernel_source``, from the kernel plan of ``kernel_plan.py``), unrolled over the 9 directions with the constants of ``lattice.py``, and
compiled once per (policy, collision, kernel shape). The host tables are those of the CuPy stepper
(``gpu_common``); this module does not import ``kernels_cupy`` (nor cupy).

Layout and traffic are those of the CuPy kernel (``kernels_cupy``): structure of arrays
``g[i, y, x]`` viewed flat, one thread per cell, x fastest, 2D launch (16-bit storage on an even nx and more
than ``PER_CELL_CELLS`` cells:
``lbm_step_pair``, two cells per thread on int32 words of float16 or FP16C pairs, see ``kernels/pair_plan.py``);
bytes per cell per step = 9 reads + 9 writes of the storage dtype + 1 flag byte
(fp64 145 B, fp32 73 B, fp16s 37 B). Population loads and stores go through ``load_at`` / ``store_at``
(``_raw_access``): Numba's indexing adds a negative-index wraparound to every access, which cost the
16-bit pair kernel 16 % of its speed. fp16s: float16 arrays, every load widened to float32,
arithmetic in float32, stores rounded to nearest. Two buffers, or one with in-place streaming
(``LBMSetup.in_place``: the AA-pattern kernels, hpcsolve/lbm/steppers/inplace.py). The kernels are emitted from the
plan of ``kernel_plan.py`` (per-layout positions, the boundary rules' pieces of ``boundaries/``, the list
kernels), as ``kernels_cupy`` emits CUDA C from it.

Runs unchanged under the CUDA simulator (NUMBA_ENABLE_CUDASIM=1), which the CI tests use on
tiny grids.
"""

from __future__ import annotations

import functools

import numpy as np

from hpcsolve.core import backends, codecs, cudasim
from hpcsolve.lbm.kernels import kernel_plan
from hpcsolve.lbm import lattice, physics
from hpcsolve.lbm.device_monitor import NumbaPointKernels
from hpcsolve.lbm.rules import link_rules
from hpcsolve.lbm.kernels.cell_table import HASH_MULT
from hpcsolve.lbm.kernels.emit_numba import bouzidi_source, kernel_source
from hpcsolve.lbm.flags import FLUID
from hpcsolve.lbm.boundaries.outlet import characteristic_outlet
from hpcsolve.lbm.boundaries.velocity import velocity_table
from hpcsolve.lbm.steppers.gpu_common import (PlanSteps, StepGraphs, cupy_stream_capture, device_flags,
                                              device_macroscopic, host_macroscopic)
from hpcsolve.lbm.kernels.population_code import numba_code
from hpcsolve.lbm.steppers import launch
from hpcsolve.lbm.steppers.stepper import LBMSetup, Stepper, get_stepper


#: float16 halves of an int32 word <-> float32 (the fp16s codec's pair functions, hpcsolve/core/codecs.py)
_half_bits = codecs.half_pair_functions


@functools.lru_cache(maxsize=None)
def _raw_access():
    """(load_at, store_at): ``arr[k]`` / ``arr[k] = v`` on 1D arrays without the negative-index
    wraparound Numba adds to every access with a signed index (a shift, an and and an add, in 64-bit
    integers, per load and store). The step kernels index with k >= 0 only; under the simulator, plain
    indexing."""
    if backends.cuda_simulator_enabled():
        def load_at(arr, k):
            return arr[k]

        def store_at(arr, k, v):
            arr[k] = v

        return load_at, store_at

    from numba import types  # late: optional GPU dependency, imported on first use (after NUMBA_ENABLE_CUDASIM is read)
    from numba.cuda import cgutils  # late: optional GPU dependency, imported on first use (after NUMBA_ENABLE_CUDASIM is read)
    from numba.cuda.extending import intrinsic  # late: optional GPU dependency, imported on first use (after NUMBA_ENABLE_CUDASIM is read)

    def _item_pointer(context, builder, aryty, ary_val, kty, k):
        ary = context.make_array(aryty)(context, builder, ary_val)
        return cgutils.get_item_pointer(context, builder, aryty, ary, [context.cast(builder, k, kty, types.intp)])

    @intrinsic
    def load_at(typingctx, arr, k):
        """arr[k] of a 1D array without Numba's negative-index wraparound (three 64-bit integer
        instructions per access; every index here is >= 0)."""
        if not (isinstance(arr, types.Array) and arr.ndim == 1 and isinstance(k, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            return builder.load(_item_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1]))
        return arr.dtype(arr, k), codegen

    @intrinsic
    def store_at(typingctx, arr, k, v):
        """arr[k] = v of a 1D array without the wraparound (see load_at); v converted to arr.dtype."""
        if not (isinstance(arr, types.Array) and arr.ndim == 1 and isinstance(k, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            aryty = sig.args[0]
            ptr = _item_pointer(context, builder, aryty, args[0], sig.args[1], args[1])
            builder.store(context.cast(builder, args[2], sig.args[2], aryty.dtype), ptr)
            return context.get_dummy_value()
        return types.void(arr, k, v), codegen

    return load_at, store_at


#: (cells per thread, threads per block) by storage bytes: the fastest measured on the H200
#: (scripts/tune_lbm_gpu.py; the measurements: docs/measured/notes_lbm_kernels_comments.md)
LAUNCH = {8: (1, 256), 4: (1, 128), 2: (1, 128)}
#: (cells per thread, threads per block) of the 16-bit pair kernel (lbm_step_pair), and how it passes a word's half
#: to the neighbouring thread (PAIR_EXCHANGE): the fastest measured (docs/measured/notes_lbm_kernels_comments.md)
LAUNCH_PAIRS = (2, 64)
#: rows of at most gpu_common.SHORT_ROW cells: 256 threads per block, one block per row, was faster
#: (docs/measured/notes_lbm_kernels_comments.md)
LAUNCH_SHORT = {4: (1, 256), 2: (1, 256)}
#: 16-bit storage on grids of at most this many cells runs one cell per thread by default (``pairs=True`` forces
#: the pair kernel): faster there (docs/measured/notes_lbm_kernels_comments.md)
PER_CELL_CELLS = 512 * 512
PAIR_EXCHANGE = "smem"


def l2_cache_bytes(cuda) -> int:
    """The current device's L2 cache in bytes (``gpu_common.auto_in_place``); 0 under the CUDA simulator."""
    try:
        return int(cuda.get_current_device().L2_CACHE_SIZE)
    except AttributeError:   # the simulator's device has no such attribute: never in place by itself
        return 0


@functools.lru_cache(maxsize=None)
def compiled_kernels(policy, collision: str, cpt: int = 1, block_x: int = 256, max_registers: int | None = None,
                     pairs: bool = False, exchange: str = "smem", in_place: bool = False, characteristic: bool = False,
                     layer: bool = False):
    """(step, moments, force, nonfinite, fill_zero, perturb, scale_velocity) kernels and the source, for one policy
    and collision model; ``step`` maps each step layout (``kernel_plan.step_layouts``: the two-buffer step, or the
    AA pair even / odd) to its kernel and ``moments`` each state layout a step starts from (even, odd) to its
    moments kernel; ``pairs``: the two-buffer step is the 16-bit two-cells-per-thread ``lbm_step_pair``; ``layer``: the
    step kernels add the absorbing layer's bulk relaxation (``boundaries.layer``)."""
    from numba import cuda, float64, int32, int64, uint64  # late: optional GPU dependency, imported on first use (after NUMBA_ENABLE_CUDASIM is read)

    ct = np.dtype(policy.compute)
    device = cuda.jit(device=True)
    P = physics.physics_for(ct, jit=device)
    if backends.cuda_simulator_enabled():
        exchange = "smem"      # the simulator has no warp shuffles
        cudasim.serialise_shared_arrays()     # its cuda.shared.array is not thread-safe (hpcsolve.core.cudasim)
    rules = link_rules(characteristic)
    ns = {"cuda": cuda, "float64": float64, "int32": int32, "int64": int64, "uint64": uint64,
          "HASH_MULT": np.uint64(HASH_MULT), "SHIFT32": np.uint64(32), **numba_code(policy).namespace(),
          "ZERO": ct.type(0.0), "ZERO9": (ct.type(0.0),) * lattice.Q,
          "moments": P.moments, "collide_bgk": P.collide_bgk, "collide_trt": P.collide_trt,
          "collide_bgk_layer": P.collide_bgk_layer, "collide_trt_layer": P.collide_trt_layer, "ONE": ct.type(1.0)}
    # the physics the rules' pieces call, by name
    ns.update({op.fn: getattr(P, op.fn) for rule in rules for op in rule.piece if isinstance(op, kernel_plan.PhysicsOp)})
    ns["load_at"], ns["store_at"] = _raw_access()
    for i in range(lattice.Q):
        ns[f"W{i}"], ns[f"CX{i}"], ns[f"CY{i}"] = P.W[i], P.CX[i], P.CY[i]
    src = kernel_source(policy, collision, cpt, block_x, pairs, exchange, in_place, characteristic, layer)
    if pairs and not in_place:
        ns["half_lo"], ns["half_hi"], ns["pack_halves"] = policy.codec.numba_pair_functions()
    storage = np.dtype(policy.storage).str
    exec(compile(src, f"<hpcsolve.lbm.steppers.kernels_numba {storage}/{ct.str}/{collision}>", "exec"), ns)
    layouts = kernel_plan.step_layouts(in_place)
    for name in ("load_pop", "own_velocity", "table_home", "boundary_velocity", "outlet_index") + (
            ("layer_coefficient",) if layer else ()) + tuple(
            f"pull_cell_{layout.tag}" for layout in layouts):
        ns[name] = device(ns[name])
    step_opts = {} if max_registers is None or backends.cuda_simulator_enabled() else {"max_registers": max_registers}
    step = {layout: cuda.jit(**step_opts)(ns["lbm_step_pair" if pairs and not in_place else layout.kernel])
            for layout in layouts}
    moments = {layout.reads: cuda.jit(ns[layout.reads.moments_kernel]) for layout in layouts}
    kernels = (step, moments) + tuple(
        cuda.jit(ns[name]) for name in ("lbm_force", "lbm_nonfinite", "lbm_fill_zero", "lbm_perturb",
                                        "lbm_scale_velocity"))
    return kernels + (src,)


@functools.lru_cache(maxsize=None)
def bouzidi_kernels(policy):
    """(gather, scatter) ``numba.cuda.jit`` kernels of the pre-pass for one policy; the link value is
    ``physics.interpolated_bounce_back`` compiled as a device function. V (storage dtype) holds the
    link values between the two launches."""
    from numba import cuda  # late: optional GPU dependency, imported on first use (after NUMBA_ENABLE_CUDASIM is read)

    ct = np.dtype(policy.compute)
    device = cuda.jit(device=True)
    P = physics.physics_for(ct, jit=device)
    ns = {"cuda": cuda, **numba_code(policy).namespace(), "interpolated_bounce_back": P.interpolated_bounce_back}
    exec(compile(bouzidi_source(policy), f"<hpcsolve.lbm.steppers.kernels_numba bouzidi {np.dtype(policy.storage).str}/{ct.str}>",
                 "exec"), ns)
    ns["load_pop"] = device(ns["load_pop"])
    return cuda.jit(ns["bouzidi_gather"]), cuda.jit(ns["bouzidi_scatter"])


class NumbaPrepass:
    """The pre-pass on the device with the two kernels of :func:`bouzidi_kernels` on ``stream`` (gather
    into V, then scatter: every link value is read before any slot is written, as ``bouzidi.prepass``
    requires)."""

    def __init__(self, links, policy, stream=None):
        from numba import cuda  # late: optional GPU dependency, imported on first use (after NUMBA_ENABLE_CUDASIM is read)

        self.links, self.policy, self.n = links, policy, len(links)
        ct = np.dtype(policy.compute)
        self.stream = stream if stream is not None else cuda.default_stream()
        self.arrays = tuple(cuda.to_device(v, stream=self.stream) for v in links.device_arrays(ct))
        self.values = cuda.device_array(self.n, dtype=policy.storage, stream=self.stream)
        gather, scatter = bouzidi_kernels(policy)
        blocks = launch.blocks(self.n)
        self._gather = gather[blocks, launch.THREADS, self.stream]
        self._scatter = scatter[blocks, launch.THREADS, self.stream]

    def __call__(self, A) -> None:
        slot, partner, a, b = self.arrays
        n = np.int64(self.n)
        flat = A.reshape(-1) if A.ndim > 1 else A
        self._gather(flat, slot, partner, a, b, self.values, n)
        self._scatter(flat, slot, self.values, n)


def _launch_stream(cuda, graphs: bool):
    """(numba stream, StepGraphs): a blocking CuPy stream seen by numba (``external_stream``), so that CuPy's
    stream capture records the step kernels, where CuPy imports and ``graphs`` is True; else numba's default
    stream and no graphs (the simulator, no CuPy, graphs=False). A blocking stream stays ordered with work on the
    legacy default stream (``cuda.to_device`` without a stream, the backend's events)."""
    if backends.cuda_simulator_enabled() or not graphs:
        why = "the CUDA simulator has no CUDA graphs" if graphs else "graphs switched off (graphs=False)"
        return cuda.default_stream(), StepGraphs(None, why)
    try:
        import cupy  # late: optional GPU dependency: imported only where a CuPy object is built

        with cupy.cuda.Device(cuda.get_current_device().id):
            cp_stream = cupy.cuda.Stream(non_blocking=False)
        stream = cuda.external_stream(cp_stream.ptr)
    except Exception as exc:          # no CuPy (or no stream): launches from Python, as before
        return cuda.default_stream(), StepGraphs(None, f"no CUDA graphs: {type(exc).__name__}: {exc}")
    graphs = StepGraphs(cupy_stream_capture(cp_stream))
    graphs.cupy_stream = cp_stream    # kept alive with the stepper
    return stream, graphs


def _cupy_or_none():
    """CuPy where it imports on a real device (the state as CuPy arrays: ``Stepper.state_array``), else None."""
    if backends.cuda_simulator_enabled():
        return None
    try:
        import cupy  # late: optional GPU dependency: imported only where a CuPy object is built
    except Exception:       # no CuPy: the host copies of Stepper's defaults
        return None
    return cupy if backends.owner_of(cupy) is not None else None     # CuPy's own probe passes (NVRTC, device)


class NumbaCudaStepper(PlanSteps, Stepper):
    backend = "numba-cuda"

    def __init__(self, setup: LBMSetup, cells_per_thread: int | None = None, block_x: int | None = None,
                 max_registers: int | None = None, pairs: bool | None = None, exchange: str | None = None,
                 graphs: bool = True):
        from numba import cuda  # late: optional GPU dependency, imported on first use (after NUMBA_ENABLE_CUDASIM is read)

        super().__init__(setup)
        self.cuda = cuda
        pol = self.policy
        # 16-bit storage on an even nx and more than PER_CELL_CELLS cells: two adjacent cells per thread with
        # 4-byte loads (lbm_step_pair)
        self._kernel_shape(setup, (LAUNCH, LAUNCH_PAIRS, LAUNCH_SHORT, PER_CELL_CELLS), l2_cache_bytes(cuda), pairs,
                           cells_per_thread, block_x)
        ct, ny, nx = self.ct, self.ny, self.nx
        (self._k_step, self._k_moments, self._k_force, self._k_nonfinite, self._k_fill, self._k_perturb,
         self._k_scale, self.source) = compiled_kernels(
            pol, setup.collision, 1 if self.pairs else self.cells_per_thread, self.block_x, max_registers,
            self.pairs, exchange or PAIR_EXCHANGE, self.in_place, characteristic_outlet(setup),
            setup.absorbing_layer is not None)
        self.stream, self.graphs = _launch_stream(cuda, graphs)
        self.array_module = _cupy_or_none()
        self._views: dict = {}
        self.flags = cuda.to_device(device_flags(setup.flags).ravel())
        cells, uw = velocity_table(setup, ct)
        self.vel_cells, self.vel_u = cuda.to_device(cells), cuda.to_device(uw.ravel())
        self.n_vel = np.int64(cells.size)
        self._vel_full = None   # float64 copy on the device, made at the first smooth-start step
        self.b = None   # in place: one population array
        if setup.initial_density is None and setup.initial_velocity is None:
            # at rest the stored state is exactly 0 (h^eq(0, 0) = 0): make it on the device
            n = lattice.Q * nx * ny
            grid1 = launch.blocks(n)
            self.a = cuda.device_array(n, dtype=pol.storage, stream=self.stream)
            self._k_fill[grid1, launch.THREADS, self.stream](self.a, np.int64(n))
            if not self.in_place:
                self.b = cuda.device_array(n, dtype=pol.storage, stream=self.stream)
                self._k_fill[grid1, launch.THREADS, self.stream](self.b, np.int64(n))
        else:
            g0 = setup.initial_populations().ravel()
            self.a = cuda.to_device(g0)
            if not self.in_place:
                self.b = cuda.to_device(g0)   # non-fluid cells hold the initial value (0) in both buffers
        grid = launch.step_grid(nx, ny, self.block_x, self.cells_per_thread)   # pairs: 2 adjacent cells per thread
        self._word_views: dict = {}
        self._plan(setup, lambda v: cuda.to_device(v, stream=self.stream),
                   lambda links: NumbaPrepass(links, pol, self.stream))
        # one launcher per step layout (kernel_plan.step_layouts)
        self._launch = {layout: k[grid, (self.block_x, 1), self.stream] for layout, k in self._k_step.items()}
        if self.in_place:
            g_host = (np.zeros((lattice.Q, ny * nx), dtype=pol.storage) if setup.initial_density is None
                      and setup.initial_velocity is None else setup.initial_populations().reshape(lattice.Q, -1))
            self.own_u = self._aa.own_velocity_table(lambda cells: g_host[:, cells])

    def _fetch_cells(self, cells: np.ndarray) -> np.ndarray:
        """Stored populations (9, n) of ``cells`` (even layout) on the host (after perturb(): the whole
        array is copied; construction and restarts use the host state they already have)."""
        return self.a.copy_to_host(stream=self.stream).reshape(lattice.Q, -1)[:, cells]

    def _set_velocity_scale(self, factor: float) -> None:
        if self._vel_full is None:
            self._vel_full = self.cuda.to_device(velocity_table(self.setup, np.float64)[1].ravel(), stream=self.stream)
        n = self.vel_u.shape[0]
        # float64 product rounded to the compute dtype in place (the step kernel keeps its pointer)
        self._k_scale[launch.blocks(n), launch.THREADS, self.stream](self._vel_full, np.float64(factor), self.vel_u, np.int64(n))

    _index_type = np.int64      # the kernels' int arguments

    def _launch_step(self, layout) -> None:
        buffers = (self.a,) if layout.in_place else (self.a, self.b)
        if self.pairs:                  # the 16-bit pair kernel also takes the int32 word views
            buffers += (self._words(self.a), self._words(self.b))
        self._launch[layout](*buffers, self.flags, self.vel_cells, self.vel_u, self.n_vel,
                             *self._outlet_table_args(layout), np.int64(self.nx), np.int64(self.ny),
                             self.omega_plus, self.omega_minus, *self._layer_args)

    def array_twin(self, setup: LBMSetup):
        """Its state is CuPy arrays: the guard's float32 shadow is a CuPy stepper (compiled by NVRTC in a fraction of
        a second and cached on disk; Numba compiled the float32 kernels in 5.6 s on the H200); None without CuPy."""
        home = None if self.array_module is None else backends.owner_of(self.array_module)
        return None if home is None else get_stepper(home, setup)

    def _xp(self, buf):
        """``buf`` as a CuPy array on the same memory (``__cuda_array_interface__``), made once per buffer. CuPy works
        on its current stream (the legacy default), ordered with the step stream (a blocking stream)."""
        v = self._views.get(id(buf))
        if v is None or v[0] is not buf:
            v = self._views[id(buf)] = (buf, self.array_module.asarray(buf))
        return v[1]

    def _words(self, arr):
        """The int32 view of a 16-bit population buffer (pairs of halves), made once per buffer."""
        v = self._word_views.get(id(arr))
        if v is None or v[0] is not arr:
            v = self._word_views[id(arr)] = (arr, arr.view(np.int32))
        return v[1]

    def populations(self) -> np.ndarray:
        return self._even(self.a.copy_to_host(stream=self.stream).reshape(lattice.Q, self.ny, self.nx))

    def load_populations(self, g: np.ndarray, time_step: int) -> None:
        from numba import cuda  # late: optional GPU dependency, imported on first use (after NUMBA_ENABLE_CUDASIM is read)

        g = np.ascontiguousarray(self._check_loadable(g)).reshape(-1)
        self._loaded(lambda: cuda.to_device(g, stream=self.stream), lambda cells: g.reshape(lattice.Q, -1)[:, cells],
                     time_step)
        self.stream.synchronize()

    def macroscopic_device(self, out=None):
        """(drho, ux, uy) as one flat (3 * ny * nx) device array in the compute dtype (non-fluid: 0), into ``out``
        where given (a batched monitor point's buffer, allocated once)."""
        n = self.nx * self.ny
        if out is None:
            out = self.cuda.device_array(3 * n, dtype=self.ct, stream=self.stream)
        self._k_moments[self.state][launch.blocks(n), launch.THREADS, self.stream](self.a, self.flags, out, np.int64(self.nx), np.int64(self.ny))
        return out

    def macroscopic(self):
        m = self.macroscopic_device().copy_to_host(stream=self.stream).reshape(3, self.ny, self.nx)
        return host_macroscopic(m, self.setup.flags)

    def fields_on_device(self):
        cupy_stream = getattr(self.graphs, "cupy_stream", None)     # launches on a CuPy stream: CuPy imports
        if cupy_stream is None:
            return None
        import cupy  # late: optional GPU dependency: imported only where a CuPy object is built

        if getattr(self, "_solid_device", None) is None:
            self._solid_device = cupy.asarray(self.setup.flags != FLUID)
        m = self.macroscopic_device()
        self.stream.synchronize()          # CuPy's work below goes on its own current stream
        return device_macroscopic(cupy, cupy.asarray(m).reshape(3, self.ny, self.nx), self._solid_device)

    def _device_force(self, pos, cx, cy, m, c) -> np.ndarray:
        out = self.cuda.to_device(np.zeros(2), stream=self.stream)
        self._launch_force((pos, cx, cy, m, c), out)
        return out.copy_to_host(stream=self.stream)

    def _launch_force(self, links, out) -> None:
        """``lbm_force`` over ``links`` (pos, cx, cy, m, c), added to the float64 pair ``out`` on the device."""
        pos, cx, cy, m, c = links
        n = pos.shape[0]
        self._k_force[launch.blocks(n), launch.THREADS, self.stream](self.a, pos, cx, cy, m, c, out, np.int64(n))

    def point_kernels(self):
        """The batched monitor points' kernels for this stepper (``device_monitor.NumbaPointKernels``)."""
        return NumbaPointKernels(self)

    def perturb(self, amplitude: float = 1e-3, seed: int = 0) -> None:
        """Add amplitude * w_i * r (r in [-1, 1), hashed) to every fluid population (benchmarks:
        never time on zeros)."""
        n = self.nx * self.ny
        weights = self.cuda.to_device(lattice.weights(self.ct), stream=self.stream)
        self._require_even("perturb()")
        self._k_perturb[launch.blocks(lattice.Q * n), launch.THREADS, self.stream](
            self.a, self.flags, weights, np.int64(n), self.ct.type(amplitude), np.int64(seed))
        self._perturbed()

    def finite(self) -> bool:
        out = self.cuda.to_device(np.zeros(1, dtype=np.int32), stream=self.stream)
        self.nonfinite_into(out)
        return int(out.copy_to_host(stream=self.stream)[0]) == 0

    def nonfinite_into(self, out) -> None:
        """Set the int32 ``out[0]`` to 1 where a stored population is NaN/Inf (``lbm_nonfinite``), on the device."""
        n = self.a.shape[0]
        self._k_nonfinite[launch.blocks(n), launch.THREADS, self.stream](self.a, np.int64(n), out)


def make_stepper(setup: LBMSetup, **options) -> NumbaCudaStepper:
    """The stepper for ``setup``; ``Backend.piece`` has checked that numba.cuda answers."""
    return NumbaCudaStepper(setup, **options)
