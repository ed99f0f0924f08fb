"""CuPy backend: one fused CUDA kernel per time step, generated from the physics in ``physics.py``.

The kernel source is not hand-written physics: ``emit_cuda`` writes the kernel plan
(``kernel_plan.py``) as CUDA C, with ``physics.physics_for(dtype)`` *traced* into straight-line code (every
``+ - * /`` one line, in the order the reference evaluates them; lattice constants from ``lattice.py``).
So the NumPy reference and this kernel evaluate the same expressions (the GPU may contract a*b+c into an
FMA), and no physics constant is typed twice. Population loads and stores are the policy's
(``population_code.cuda_code``). One source per (policy, collision model, kernel shape), compiled once per
process by CuPy (RawModule cache). This module holds the stepper: launches, buffers, observables.

The step kernel (``lbm_step``) fuses, per fluid cell, as docs/design/lbm_algorithm.md specifies:
pull streaming from the 9 neighbours (periodic wrap), the boundary rule of the cell the
population comes from (wall / velocity bounce-back, outlet anti-bounce-back), the collision
(BGK or TRT), and the store. Layout: structure of arrays ``g[i, y, x]``; one thread per cell,
x fastest (coalesced), 2D launch (blockIdx.y = row). 16-bit storage on an even nx and more than ``PER_CELL_CELLS`` cells uses
``lbm_step_pair`` instead: two adjacent cells per thread, one 4-byte word (``__half2``; FP16C: two
codes in an ``unsigned int``) per population loaded and stored, the neighbouring words passed by warp shuffles (``kernels/pair_plan.py``); on the H200 that
took fp16s from 78,969 to 93,784 MLUPS (71% -> 84% of the copy bandwidth, cavity 8192^2).

Bytes moved per cell per step (the benchmark's count):

    read 9 populations + write 9 populations + read 1 flag byte = 18 * sizeof(storage) + 1
    fp64: 145 B   fp32: 73 B   fp16s: 37 B

Neighbour flags and the populations of boundary-adjacent cells re-read from L1/L2 are not
counted: each byte of device memory is fetched once per step. Non-fluid cells are read (flag)
and skipped. Two population buffers (A, B, swapped each step): resident bytes per cell are
``2 * 9 * sizeof(storage) + 1`` plus O(boundary) for the velocity-boundary table. With
``LBMSetup.in_place`` (case: ``lattice.streaming = "in-place"``) the step kernels are the AA-pattern
pair ``lbm_step_aa_even`` / ``_odd`` on one array (hpcsolve/lbm/steppers/inplace.py): the same bytes moved,
``9 * sizeof(storage) + 1`` resident; one cell per thread (no 16-bit pair kernel).

The flag array on the device is the setup's flag code (bits 0-6) plus bit 7 set on fluid cells
that have at least one non-fluid neighbour; cells without it take the branch-free interior path.
Boundary velocities u_w are kept only for VELOCITY cells (a hash table of their cell indices with the
values per slot, ``gpu_common.cell_table``, looked up by the few links that need them), not as a full
(2, ny, nx) field; the in-place kernels find outlet cells the same way.

Interpolated bounce-back (``setup.links``, hpcsolve/lbm/boundaries/bouzidi.py): the reference's pre-pass runs on
the current buffer before each step launch, a gather/scatter over the link list only (no second
pass over the domain); drag and lift include the interpolated links (``boundaries.force.force_links``), reduced on
the device. Host tables shared with the Numba stepper (device flags, velocity table, force terms,
in-place tables) are in ``gpu_common``.

Observables on the device at monitor intervals: ``macroscopic_device()`` (rho, ux, uy from the
stored state, one small kernel), ``force(mask)`` (momentum exchange over a link list prepared
once per mask, summed on the device by float64 atomics: last bits vary run to run), ``finite()`` (one device reduction).
No host synchronization happens in ``step``.
"""

from __future__ import annotations

import functools

import numpy as np

from hpcsolve.lbm.kernels import kernel_plan
from hpcsolve.lbm import lattice
from hpcsolve.lbm.device_monitor import CupyPointKernels
from hpcsolve.lbm.kernels.emit_cuda import bouzidi_source, kernel_source
from hpcsolve.lbm.flags import FLUID
from hpcsolve.lbm.boundaries.outlet import characteristic_outlet
from hpcsolve.lbm.boundaries.velocity import velocity_table
from hpcsolve.lbm.steppers.gpu_common import (PlanSteps, StepGraphs, cupy_stream_capture, device_flags,
                                              device_macroscopic, host_macroscopic)
from hpcsolve.lbm.steppers import launch
from hpcsolve.lbm.steppers.stepper import LBMSetup, Stepper

#: (cells per thread, threads per block) by storage bytes: the fastest measured on the H200
#: (scripts/tune_lbm_gpu.py; the measurements: docs/measured/notes_lbm_kernels_comments.md)
LAUNCH = {8: (1, 256), 4: (1, 256), 2: (1, 128)}
#: (cells per thread, threads per block) of the 16-bit pair kernel (lbm_step_pair): the fastest measured
#: (docs/measured/notes_lbm_kernels_comments.md)
LAUNCH_PAIRS = (2, 64)
#: 16-bit storage on grids of at most this many cells runs one cell per thread by default (``pairs=True`` forces
#: the pair kernel): small grids need the threads more than fewer instructions per cell
#: (docs/measured/notes_lbm_kernels_comments.md)
PER_CELL_CELLS = 512 * 512
#: (cells per thread, threads per block) by storage bytes on rows of at most gpu_common.SHORT_ROW cells: one block
#: per row of 256 was faster for 16-bit storage (docs/measured/notes_lbm_kernels_comments.md)
LAUNCH_SHORT = {2: (1, 256)}


def l2_cache_bytes(cupy) -> int:
    """The current device's L2 cache in bytes (``gpu_common.auto_in_place``)."""
    return int(cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["l2CacheSize"])


class CupyBouzidi:
    """The pre-pass on the device with two RawKernels (gather into V, then scatter: every link value
    is read before any slot is written, as ``bouzidi.prepass`` requires)."""

    def __init__(self, links, policy):
        import cupy  # late: optional GPU dependency: imported only where a CuPy object is built

        ct = np.dtype(policy.compute)
        self.n = len(links)
        self.arrays = links.device_arrays(ct, cupy)
        self.values = cupy.empty(self.n, dtype=policy.storage)
        module = cupy.RawModule(code=bouzidi_source(policy), options=("--std=c++17",))
        self._gather = module.get_function("bouzidi_gather")
        self._scatter = module.get_function("bouzidi_scatter")
        self.grid = (launch.blocks(self.n),)

    def __call__(self, A) -> None:
        slot, partner, a, b = self.arrays
        n = np.int64(self.n)
        self._gather(self.grid, (launch.THREADS,), (A, slot, partner, a, b, self.values, n))
        self._scatter(self.grid, (launch.THREADS,), (A, slot, self.values, n))


@functools.lru_cache(maxsize=None)
def _scale_kernel():
    import cupy  # late: optional GPU dependency: imported only where a CuPy object is built

    return cupy.ElementwiseKernel("float64 u, float64 s", "T out", "out = (T)(u * s)", "hpcsolve_lbm_scale_velocity")


def initial_state(setup: LBMSetup, xp):
    """The stored initial state on the device. At rest (no initial density/velocity given) it is
    exactly zero (h^eq(0, 0) = 0), made on the device; otherwise ``setup.initial_populations()``."""
    if setup.initial_density is None and setup.initial_velocity is None:
        return xp.zeros((lattice.Q,) + setup.shape, dtype=setup.policy.storage)
    return xp.asarray(setup.initial_populations())


class CupyStepper(PlanSteps, Stepper):
    backend = "cupy"

    def __init__(self, setup: LBMSetup, cells_per_thread: int | None = None, block_x: int | None = None,
                 pairs: bool | None = None, max_registers: int | None = None, graphs: bool = True):
        import cupy  # late: optional GPU dependency: imported only where a CuPy object is built

        super().__init__(setup)
        self.cp = self.array_module = cupy
        # runs of steps replayed as CUDA graphs on a blocking stream (ordered with the default stream, where
        # everything else runs); graphs=False launches every step from Python
        self._stream = cupy.cuda.Stream(non_blocking=False)
        self.graphs = StepGraphs(cupy_stream_capture(self._stream) if graphs else None,
                                 why_not="graphs switched off (graphs=False)")
        pol = self.policy
        # 16-bit storage on an even nx and more than PER_CELL_CELLS cells: two adjacent cells per thread with
        # __half2 loads (lbm_step_pair)
        self._kernel_shape(setup, (LAUNCH, LAUNCH_PAIRS, LAUNCH_SHORT, PER_CELL_CELLS), l2_cache_bytes(cupy), pairs,
                           cells_per_thread, block_x)
        ct, ny, nx = self.ct, self.ny, self.nx
        src = kernel_source(pol, setup.collision, 1 if self.pairs else self.cells_per_thread, self.block_x,
                            self.in_place, characteristic_outlet(setup), setup.absorbing_layer is not None,
                            max_registers)
        self.source = src
        module = cupy.RawModule(code=src, options=("--std=c++17",))
        # one kernel per step layout (kernel_plan.step_layouts) and per state layout it starts from
        layouts = kernel_plan.step_layouts(self.in_place)
        self._k_steps = {layout: module.get_function("lbm_step_pair" if self.pairs else layout.kernel)
                         for layout in layouts}
        self._k_moments = {layout.reads: module.get_function(layout.reads.moments_kernel) for layout in layouts}
        self._k_force = module.get_function(kernel_plan.FORCE_KERNEL.name)
        self.flags = cupy.asarray(device_flags(setup.flags))
        cells, uw = velocity_table(setup, ct)
        self.vel_cells, self.vel_u = cupy.asarray(cells), cupy.asarray(uw)
        self._vel_full = None   # float64 copy on the device, made at the first smooth-start step
        self.n_vel = np.int32(cells.size)
        self.a = initial_state(setup, cupy)
        # non-fluid cells hold the initial value (0) in both buffers; in place: one array
        self.b = None if self.in_place else self.a.copy()
        self.grid = launch.step_grid(nx, ny, self.block_x, self.cells_per_thread)   # pairs: 2 adjacent cells
        self.block = (self.block_x, 1)
        self._plan(setup, cupy.asarray, lambda links: CupyBouzidi(links, pol))
        if self.in_place:
            self.own_u = self._aa.own_velocity_table(self._fetch_cells)

    _index_type = np.int32      # the kernels' int arguments

    def _launch_step(self, layout) -> None:
        buffers = (self.a,) if layout.in_place else (self.a, self.b)
        self._k_steps[layout](self.grid, self.block, buffers + (self.flags, self.vel_cells, self.vel_u, self.n_vel)
                              + self._outlet_table_args(layout)
                              + (np.int32(self.nx), np.int32(self.ny), self.omega_plus, self.omega_minus)
                              + self._layer_args)

    def _set_velocity_scale(self, factor: float) -> None:
        cp = self.cp
        if self._vel_full is None:
            self._vel_full = cp.asarray(velocity_table(self.setup, np.float64)[1])
        # float64 product rounded to the compute dtype in place (the kernel keeps its pointer)
        _scale_kernel()(self._vel_full, np.float64(factor), self.vel_u)

    def _fetch_cells(self, cells: np.ndarray) -> np.ndarray:
        """Stored populations (9, n) of ``cells`` (even layout) on the host."""
        return self.a.reshape(lattice.Q, -1)[:, self.cp.asarray(cells)].get()

    def populations(self) -> np.ndarray:
        return self._even(self.a.get())

    def load_populations(self, g: np.ndarray, time_step: int) -> None:
        g = self._check_loadable(g)
        self._loaded(lambda: self.cp.array(g, order="C"), self._fetch_cells, time_step)

    def macroscopic_device(self, out=None):
        """(drho, ux, uy) as one (3, ny, nx) device array in the compute dtype (non-fluid: 0), into ``out`` where
        given (a batched monitor point's buffer, allocated once)."""
        cp = self.cp
        n = self.nx * self.ny
        if out is None:
            out = cp.empty((3, self.ny, self.nx), dtype=self.ct)
        self._k_moments[self.state]((launch.blocks(n),), (launch.THREADS,), (self.a, self.flags, out, np.int32(self.nx), np.int32(self.ny)))
        return out

    def macroscopic(self):
        return host_macroscopic(self.macroscopic_device().get(), self.setup.flags)

    def fields_on_device(self):
        if getattr(self, "_solid_device", None) is None:
            self._solid_device = self.cp.asarray(self.setup.flags != FLUID)
        return device_macroscopic(self.cp, self.macroscopic_device(), self._solid_device)

    def _device_force(self, pos, cx, cy, m, c) -> np.ndarray:
        f = self.cp.zeros(2, dtype=np.float64)
        self._launch_force((pos, cx, cy, m, c), f)
        return f.get()

    def _launch_force(self, links, out) -> None:
        """``lbm_force`` over ``links`` (pos, cx, cy, m, c), added to the float64 pair ``out`` on the device."""
        pos, cx, cy, m, c = links
        self._k_force((launch.blocks(pos.size),), (launch.THREADS,), (self.a, pos, cx, cy, m, c, out, np.int64(pos.size)))

    def point_kernels(self):
        """The batched monitor points' kernels for this stepper (``device_monitor.CupyPointKernels``)."""
        return CupyPointKernels(self)

    def finite(self) -> bool:
        return self.policy.all_finite(self.a)

    def perturb(self, amplitude: float = 1e-3, seed: int = 0) -> None:
        """Add amplitude * w_i * U(-1, 1) to every fluid population (benchmarks: never time on zeros)."""
        cp = self.cp
        pol = self.policy
        self._require_even("perturb()")
        rng = cp.random.default_rng(seed)
        fluid = cp.asarray(self.setup.flags == FLUID)
        w = cp.asarray(lattice.weights(self.ct)).reshape(lattice.Q, 1, 1)
        noise = rng.uniform(-1.0, 1.0, size=self.a.shape).astype(self.ct)
        h = pol.decode(self.a) + amplitude * w * noise * fluid
        self.a[...] = pol.encode(h)
        del noise, h
        self._perturbed()


def make_stepper(setup: LBMSetup, **options) -> CupyStepper:
    return CupyStepper(setup, **options)
