"""What the two GPU steppers (``kernels_cupy.CupyStepper``, ``kernels_numba.NumbaCudaStepper``) share:
host-side tables and decisions that do not depend on the kernel language.

- the kernel shape: :func:`step_kernel_shape` (16-bit pair kernel or one/several cells per thread)
  and the traffic count :func:`bytes_per_cell`;
- the device flag array (:func:`device_flags`: the flag code plus :data:`BOUNDARY_BIT` on fluid cells
  next to a non-fluid cell, the branch both step kernels test) and the table of boundary velocities
  (:func:`velocity_table`);
- observables: the momentum-exchange terms the device reduces (``boundaries.force.force_links``,
  :class:`ForceTerms`) and the host conversion of device moments (:func:`host_macroscopic`);
- in-place streaming: :class:`InPlaceTables` (the own-velocity table of the rules that read it, odd-layout force
  terms and Bouzidi pre-pass, hpcsolve/lbm/steppers/inplace.py).

Nothing here imports a GPU package: each stepper passes its own ``to_device`` and pre-pass factory.
"""

from __future__ import annotations

import numpy as np

from hpcsolve.core.errors import CaseError
from hpcsolve.lbm.boundaries import bouzidi
from hpcsolve.lbm.steppers import inplace
from hpcsolve.lbm.kernels import kernel_plan
from hpcsolve.lbm import lattice
from hpcsolve.lbm.boundaries.force import force_links
from hpcsolve.lbm.kernels.cell_table import cell_table, table_values
from hpcsolve.lbm.flags import BOUNDARY_BIT, FLUID
from hpcsolve.lbm.steppers.stepper import LBMSetup, SavedState



def pair_kernel_applies(policy, nx: int) -> bool:
    """The two-cells-per-thread kernel (one 32-bit word per population and pair of cells) serves 16-bit
    storage (fp16s as __half2, FP16C as two codes) on grids with an even nx."""
    return np.dtype(policy.storage).itemsize == 2 and nx % 2 == 0


#: ``LBMSetup.in_place`` None (case: ``lattice.streaming = "auto"``): the GPU steppers stream in place when the
#: one-array lattice (``bytes_per_cell(policy, True)[1]`` per cell) takes more than the first and at most the
#: second fraction of the device's L2 cache, and the storage is 4 or 8 bytes. There the in-place step's array
#: stays in L2 from one step to the next while two buffers do not.
#: (the measurements: docs/measured/notes_lbm_kernels_comments.md)
AUTO_IN_PLACE_L2 = (0.3, 0.65)


def auto_in_place(setup: LBMSetup, l2_bytes: int) -> bool:
    """The automatic streaming choice (:data:`AUTO_IN_PLACE_L2`) for ``setup`` on a device with ``l2_bytes``
    of L2 cache (0: unknown, never in place); never where in-place streaming cannot run the setup
    (``inplace.check``: a cell with an own-velocity (outlet) link and an interpolated link)."""
    policy, (ny, nx) = setup.policy, setup.shape
    if not l2_bytes or policy.storage_bytes < 4:
        return False
    resident = bytes_per_cell(policy, True)[1] * ny * nx
    lo, hi = AUTO_IN_PLACE_L2
    if not lo * l2_bytes < resident <= hi * l2_bytes:
        return False
    try:
        inplace.check(setup)
    except CaseError:
        return False
    return True


#: rows of at most this many cells take a backend's ``launch_short`` shape (one cell per thread), with at most
#: one warp more than the row needs (one block per row: a 128-cell row runs 128 threads, not 256)
SHORT_ROW = 256


def step_kernel_shape(setup: LBMSetup, launch: dict, launch_pairs: tuple, pairs, cells_per_thread, block_x,
                      l2_bytes: int = 0, launch_short: dict | None = None, per_cell_cells: int = 0):
    """(in_place, pairs, cells per thread, threads per block) of a GPU stepper: in place as ``setup.in_place``
    says (None: :func:`auto_in_place` with the device's ``l2_bytes``); the 16-bit pair kernel on an even nx
    where ``pairs`` is True, or where it is None (the default) and the grid has more than ``per_cell_cells``
    cells (the backend's measured bound: on smaller grids one cell per thread is faster); never in place (one
    cell per thread then); the backend's tuned ``launch`` / ``launch_pairs`` shapes, ``launch_short`` (by
    storage bytes, where it has an entry) on rows of at most :data:`SHORT_ROW` cells, its block cut to the row
    rounded up to whole warps; explicit ``cells_per_thread`` / ``block_x`` override them."""
    pol, (ny, nx) = setup.policy, setup.shape
    in_place = auto_in_place(setup, l2_bytes) if setup.in_place is None else bool(setup.in_place)
    wanted = nx * ny > per_cell_cells if pairs is None else bool(pairs)
    use_pairs = wanted and pair_kernel_applies(pol, nx) and not in_place
    short = (launch_short or {}).get(pol.storage_bytes) if nx <= SHORT_ROW else None
    if use_pairs:
        cpt0, bx0 = launch_pairs
    elif short:
        cpt0, bx0 = short[0], min(short[1], -(-nx // (32 * short[0])) * 32)
    else:
        cpt0, bx0 = launch[pol.storage_bytes]
    cpt = 2 if use_pairs else 1 if in_place else int(cells_per_thread or cpt0)
    return in_place, use_pairs, cpt, int(block_x or bx0)


def layer_args(setup: LBMSetup) -> tuple:
    """The step kernels' absorbing-layer arguments (``boundaries.layer.ARGS``, compute dtype); () without a layer."""
    lay = setup.absorbing_layer
    return () if lay is None else lay.args(setup.policy.compute)


def bytes_per_cell(policy, in_place: bool = False) -> tuple[int, int]:
    """(moved per step, resident) bytes per cell: 9 populations read and 9 written plus the flag byte
    per step; two population arrays resident, one with in-place streaming (``hpcsolve.lbm.steppers.inplace``),
    which moves the same bytes (kernels_cupy's docstring has the figures)."""
    s = np.dtype(policy.storage).itemsize
    return 2 * lattice.Q * s + 1, (1 if in_place else 2) * lattice.Q * s + 1


def device_flags(flags: np.ndarray) -> np.ndarray:
    """Flag codes with BOUNDARY_BIT on fluid cells that have a non-fluid neighbour (periodic wrap)."""
    flags = np.asarray(flags, dtype=np.uint8)
    fluid = flags == FLUID
    near = np.zeros_like(fluid)
    for i in range(1, lattice.Q):
        near |= ~np.roll(fluid, shift=(lattice.CY[i], lattice.CX[i]), axis=(0, 1))
    out = flags.copy()
    out[fluid & near] |= BOUNDARY_BIT
    return out


def device_macroscopic(cp, m, solid):
    """``host_macroscopic`` on the device: (rho, ux, uy) float64 CuPy arrays from the moments ``m`` (3, ny, nx)
    and the device mask ``solid`` (flags != FLUID), without a host synchronization. A monitor point reduces
    them there (kinetic energy, peak speed) and copies scalars back, not the fields."""
    rho = cp.where(solid, 1.0, 1.0 + m[0].astype(cp.float64))
    return rho, m[1].astype(cp.float64), m[2].astype(cp.float64)


def host_macroscopic(m: np.ndarray, flags: np.ndarray):
    """(rho, ux, uy) as float64 host arrays from the device moments (drho, ux, uy) of one (3, ny, nx)
    array; non-fluid cells get rho = 1."""
    rho = 1.0 + m[0].astype(np.float64)
    ux, uy = m[1].astype(np.float64), m[2].astype(np.float64)
    rho[flags != FLUID] = 1.0
    return rho, ux, uy


class ForceTerms:
    """``force_links`` per obstacle mask, built once and moved to the device with ``to_device``
    (shared by the CuPy and Numba steppers; None for a mask without links)."""

    def __init__(self, setup: LBMSetup, to_device, position_map=None):
        self.setup, self.to_device, self.position_map = setup, to_device, position_map
        self._by_mask: dict = {}

    def __call__(self, mask: np.ndarray):
        """(pos, cx, cy, m, c) on the device; ``position_map`` (in-place streaming, odd layout) moves the
        positions to where the populations are stored."""
        key = np.asarray(mask, dtype=bool).tobytes()
        if key not in self._by_mask:
            links = force_links(self.setup, mask)
            if links is not None and self.position_map is not None:
                links = (self.position_map(links[0]),) + tuple(links[1:])
            self._by_mask[key] = None if links is None else tuple(self.to_device(a) for a in links)
        return self._by_mask[key]


class InPlaceTables:
    """What in-place streaming adds to a GPU stepper (shared by CuPy and Numba): the fluid cells whose rules read
    their own velocity (``BoundaryRule.needs_own_velocity``: next to an outlet; the kernels' ``out_cells``) and
    their velocity table, the odd-layout force positions and Bouzidi pre-pass (hpcsolve/lbm/steppers/inplace.py).
    ``to_device`` copies a host array to the backend's device; ``make_prepass(links)`` is the stepper's
    Bouzidi pre-pass over a link list."""

    def __init__(self, setup: LBMSetup, to_device, make_prepass):
        self.setup, self.to_device = setup, to_device
        self.cells = inplace.check(setup)
        shape = setup.shape
        self.force_terms_odd = ForceTerms(setup, to_device, lambda pos: inplace.odd_positions(pos, shape))
        self.bouzidi_odd = make_prepass(inplace.OddLinks(setup.links)) if bouzidi.has_links(setup) else None
        keys, self._slots = cell_table(self.cells)
        self.n_out = keys.size
        self.out_cells = to_device(keys)

    def own_velocity_table(self, fetch):
        """The device velocity table (2 * n_out, compute dtype, per slot of ``out_cells``) of the own-velocity
        cells; ``fetch(cells)`` returns the stored even-layout populations (9, n) of those cells on the
        host (called only when the lattice has such cells)."""
        ct = np.dtype(self.setup.policy.compute)
        u = (inplace.own_velocities(fetch(self.cells), self.setup) if self.cells.size
             else np.zeros((2, 0), dtype=ct))
        return self.to_device(table_values(self._slots, self.n_out, np.asarray(u, dtype=ct)).ravel())



#: lengths of the step runs recorded as CUDA graphs, longest first; even, so that a replay leaves the two
#: buffers (and the in-place parity) where it found them and the host-side state needs no update
GRAPH_STEPS = (64, 32, 16, 8, 4, 2)


class StepGraphs:
    """Time steps replayed as CUDA graphs: on small grids a step's launches (and Numba's launch cost, tens of
    microseconds) take longer than the step itself. ``capture(fn)`` records what ``fn()`` launches and returns
    the replay (or raises); ``direct(k)`` launches k steps one by one. A run of k steps is recorded per starting
    state (the buffers' identity and the parity), at its second use: the first runs directly, so that kernels
    compiled at their first launch (Numba) never compile inside a capture. A capture that fails switches the
    graphs off (``error`` says why); the steps then run directly. ``clear()`` after the buffers are replaced."""

    def __init__(self, capture=None, why_not: str | None = None):
        self._capture = capture
        self.enabled = capture is not None
        self.error = None if capture is not None else why_not
        self._cache: dict = {}

    def clear(self) -> None:
        self._cache.clear()

    def advance(self, n: int, direct, buffers: tuple, parity: int, restore) -> int:
        """Run what even-length graphs can of n steps; returns the steps left (0 or 1; n when off).
        ``restore(buffers, parity)`` puts the stepper back in that state after a failed capture (whose
        launches, recorded or not, never ran)."""
        while self.enabled and n >= 2:
            k = next(s for s in GRAPH_STEPS if s <= n)
            key = (k, parity) + tuple(id(b) for b in buffers)
            entry = self._cache.get(key)
            if entry is None or any(a is not b for a, b in zip(entry[0], buffers)):
                self._cache[key] = (buffers, None)        # first use: directly (compiles what is lazy)
                direct(k)
            else:
                replay = entry[1]
                if replay is None:
                    try:
                        replay = self._capture(lambda: direct(k))
                    except Exception as exc:          # nothing recorded has run: run directly from now on
                        restore(buffers, parity)
                        self.enabled, self.error = False, f"CUDA graph capture failed ({type(exc).__name__}: {exc})"
                        self._cache.clear()
                        return n
                    self._cache[key] = (buffers, replay)
                replay()
            n -= k
        return n


class PlanSteps:
    """What the two GPU steppers share around the kernel plan (hpcsolve/lbm/kernels/kernel_plan.py): the step layouts
    they alternate (``self.layouts``: the two-buffer step, or the AA pair even / odd) and ``self.parity``, the
    index of the next one (always 0 with two buffers); per state layout the stored state is in (even, odd:
    ``self.state``), the Bouzidi pre-pass and the force terms on its positions; the steps themselves, what
    :class:`StepGraphs` (``self.graphs``) can replay and the rest one launch at a time through the stepper's
    ``_launch_step(layout)``. ``self.a`` / ``self.b`` are the population buffers (``b`` None in place)."""

    def _kernel_shape(self, setup: LBMSetup, tuning: tuple, l2_bytes: int, pairs, cells_per_thread, block_x) -> None:
        """What a GPU stepper fixes before it compiles: the compute dtype ``ct``, ``nx`` / ``ny``, the kernel shape
        (:func:`step_kernel_shape` with the backend's ``tuning``: its LAUNCH, LAUNCH_PAIRS, LAUNCH_SHORT and
        PER_CELL_CELLS, and the device's ``l2_bytes``), the relaxation rates in the compute dtype, the absorbing
        layer's arguments and the bytes per cell."""
        launch, launch_pairs, launch_short, per_cell_cells = tuning
        self.ct = ct = np.dtype(self.policy.compute)
        self.ny, self.nx = setup.shape
        self.in_place, self.pairs, self.cells_per_thread, self.block_x = step_kernel_shape(
            setup, launch, launch_pairs, pairs, cells_per_thread, block_x, l2_bytes, launch_short, per_cell_cells)
        om_p, om_m = setup.omegas
        self.omega_plus, self.omega_minus = ct.type(om_p), ct.type(om_m)
        self._layer_args = layer_args(setup)
        self.bytes_per_cell_step, self.bytes_per_cell_resident = bytes_per_cell(self.policy, self.in_place)

    def _plan(self, setup: LBMSetup, to_device, make_prepass) -> None:
        """The layouts, the pre-passes and the force terms; in place also the outlet velocity table
        (``self.own_u``, after ``self.a`` exists) from ``self._fetch_cells``."""
        self.layouts = kernel_plan.step_layouts(self.in_place)
        self.parity = 0
        self.bouzidi = make_prepass(setup.links) if bouzidi.has_links(setup) else None
        self._force_terms = ForceTerms(setup, to_device)
        self._prepasses, self._forces = (self.bouzidi,), (self._force_terms,)
        self._aa = None
        if self.in_place:
            self._aa = InPlaceTables(setup, to_device, make_prepass)
            self._prepasses += (self._aa.bouzidi_odd,)
            self._forces += (self._aa.force_terms_odd,)

    @property
    def state(self) -> kernel_plan.StateLayout:
        """The layout the stored state is in now (``kernel_plan.EVEN`` or ``ODD``)."""
        return self.layouts[self.parity].reads

    def _advance(self, n: int) -> None:
        n = self.graphs.advance(n, self._advance_direct, (self.a, self.b), self.parity, self._restore)
        self._advance_direct(n)

    def _advance_direct(self, n: int) -> None:
        for _ in range(n):
            prepass = self._prepasses[self.parity]
            if prepass is not None:
                prepass(self.a)   # interpolated links: sparse gather/scatter into the wall slots
            self._launch_step(self.layouts[self.parity])
            if self.in_place:
                self.parity ^= 1
            else:
                self.a, self.b = self.b, self.a

    def _restore(self, buffers, parity) -> None:
        self.a, self.b = buffers
        self.parity = parity

    def _outlet_table_args(self, layout) -> tuple:
        """The arguments of a step that keeps the outlet velocity in a table (``StepLayout.own_velocity``)."""
        if layout.own_velocity != "table":
            return ()
        return (self._aa.out_cells, self.own_u, self._index_type(self._aa.n_out))

    def force(self, mask: np.ndarray) -> tuple[float, float]:
        """The momentum-exchange force on the cells of ``mask``: the terms on the positions of the current state
        layout, summed on the device (``lbm_force``, float64) by the stepper's ``_device_force``."""
        links = self._forces[self.parity](mask)
        if links is None:
            return 0.0, 0.0
        fx, fy = self._device_force(*links)
        return float(fx), float(fy)

    def force_into(self, mask: np.ndarray, out) -> None:
        """``force(mask)`` added to the device float64 pair ``out`` (a view of a batched monitor row,
        ``hpcsolve.lbm.device_monitor``), without a host synchronization; nothing where the mask has no links."""
        links = self._forces[self.parity](mask)
        if links is not None:
            self._launch_force(links, out)

    def _even(self, g: np.ndarray) -> np.ndarray:
        """The even-layout state (what ``populations()`` returns) from the host copy ``g`` (9, ny, nx)."""
        return inplace.even_layout(g, self.setup.flags, self.parity) if self.in_place else g

    def _loaded(self, to_device, fetch, time_step: int) -> None:
        """A state (even layout) is put on the device by ``to_device()``, called once in place and twice (the
        two buffers) otherwise; in place the parity restarts and the outlet velocity table follows (``fetch``
        as in ``InPlaceTables.own_velocity_table``)."""
        self.graphs.clear()            # recorded for the old buffers
        self.a = to_device()
        self.parity = 0
        if self.in_place:
            self.own_u = self._aa.own_velocity_table(fetch)
        else:
            self.b = to_device()
        self.time_step = int(time_step)

    def _require_even(self, what: str) -> None:
        if self.parity:
            raise RuntimeError(f"{what} needs the even layout: call it before stepping or after an even number "
                               "of steps")

    # ---- the state as CuPy arrays (``Stepper``'s docstring; ``array_module`` cupy): rewinding on the device
    def _xp(self, buf):
        """``buf`` (a population buffer or the outlet table) as an ``array_module`` array (the stepper's own)."""
        return buf

    def save_state(self) -> SavedState:
        if self.array_module is None:
            return super().save_state()
        copies = (self.array_module.array(self._xp(self.a), copy=True),)
        if self.in_place:
            copies += (self.array_module.array(self._xp(self.own_u), copy=True),)
        return SavedState(copies, (self.a, self.b), self.parity, self.time_step)

    def restore_state(self, saved: SavedState) -> None:
        """Back to ``saved``: its buffers in their order and parity (the step graphs recorded on them replay), the
        stored state copied into the first (two buffers: the second's fluid cells are written by the next step
        before they are read, its other cells never change)."""
        if not saved.buffers:
            return super().restore_state(saved)
        self.a, self.b = saved.buffers
        self.parity = saved.parity
        self._xp(self.a)[...] = saved.arrays[0]
        if self.in_place:
            self._xp(self.own_u)[...] = saved.arrays[1]
        self.time_step = int(saved.time_step)

    def state_array(self):
        if self.in_place and self.parity:
            return None
        return self._xp(self.a).reshape(lattice.Q, self.ny, self.nx)

    def load_state_array(self, g, time_step: int) -> None:
        """Copied into the stepper's buffers (they and their step graphs stay); in place the parity restarts and
        the outlet velocity table follows (a host fetch of the outlet cells, and the graphs are recorded again)."""
        want = (lattice.Q, self.ny, self.nx)
        if tuple(g.shape) != want or g.dtype != np.dtype(self.policy.storage):
            raise CaseError.invalid("populations", f"{g.dtype} {tuple(g.shape)}",
                                    f"{np.dtype(self.policy.storage)} {want}")
        self._xp(self.a).reshape(want)[...] = g
        if self.b is not None:
            self._xp(self.b).reshape(want)[...] = g
        self.parity = 0
        self.time_step = int(time_step)
        if self.in_place:
            self._perturbed()

    def velocity_array(self):
        m = self.macroscopic_device(out=getattr(self, "_velocity_out", None))
        self._velocity_out = m
        return self._xp(m).reshape(3, self.ny, self.nx)[1:]

    def _perturbed(self) -> None:
        """After the stored state changed in place on the device: the outlet velocity table follows it."""
        if self.in_place:
            self.own_u = self._aa.own_velocity_table(self._fetch_cells)
            self.graphs.clear()            # recorded with the old outlet-velocity table


def cupy_stream_capture(stream):
    """``capture`` for :class:`StepGraphs` on a CuPy stream (launches inside ``fn`` go to ``stream``: CuPy's
    kernels launch on the current stream, Numba's must be bound to it)."""
    def capture(fn):
        with stream:
            stream.begin_capture()
            try:
                fn()
            finally:
                graph = stream.end_capture()
        return lambda: graph.launch(stream=stream)

    return capture
