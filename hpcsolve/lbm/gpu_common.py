"""What the two GPU steppers (``kernels_cupy.CupyStepper``, ``kernels_numba.NumbaCudaStepper``) share:
host-side tables and decisions that do not depend on the kernel language.

- the kernel shape: :func:`step_kernel_shape` (16-bit pair kernel or one/several cells per thread)
  and the traffic count :func:`bytes_per_cell`;
- the device flag array (:func:`device_flags`: the flag code plus :data:`BOUNDARY_BIT` on fluid cells
  next to a non-fluid cell, the branch both step kernels test) and the table of boundary velocities
  (:func:`velocity_table`);
- observables: the momentum-exchange terms the device reduces (:func:`force_links`,
  :class:`ForceTerms`) and the host conversion of device moments (:func:`host_macroscopic`);
- in-place streaming: :class:`InPlaceTables` (outlet velocity table, odd-layout force terms and
  Bouzidi pre-pass, hpcsolve/lbm/inplace.py).

Nothing here imports a GPU package: each stepper passes its own ``to_device`` and pre-pass factory.
"""

from __future__ import annotations

import numpy as np

from hpcsolve.lbm import bouzidi, inplace, lattice
from hpcsolve.lbm.flags import FLUID, OUTLET, VELOCITY
from hpcsolve.lbm.stepper import LBMSetup

BOUNDARY_BIT = 0x80   # set on fluid cells with a non-fluid neighbour


def pair_kernel_applies(policy, nx: int) -> bool:
    """The two-cells-per-thread kernel (one 32-bit word per population and pair of cells) serves 16-bit
    storage (fp16s as __half2, FP16C as two codes) on grids with an even nx."""
    return np.dtype(policy.storage).itemsize == 2 and nx % 2 == 0


def step_kernel_shape(setup: LBMSetup, launch: dict, launch_pairs: tuple, pairs, cells_per_thread, block_x):
    """(in_place, pairs, cells per thread, threads per block) of a GPU stepper: the 16-bit pair kernel
    on an even nx unless ``pairs`` is False or the setup streams in place (one cell per thread then);
    explicit ``cells_per_thread`` / ``block_x`` override the backend's tuned ``launch`` / ``launch_pairs``."""
    pol, nx = setup.policy, setup.shape[1]
    in_place = bool(setup.in_place)
    use_pairs = (pairs is None or bool(pairs)) and pair_kernel_applies(pol, nx) and not in_place
    cpt0, bx0 = launch_pairs if use_pairs else launch[pol.storage_bytes]
    cpt = 2 if use_pairs else 1 if in_place else int(cells_per_thread or cpt0)
    return in_place, use_pairs, cpt, int(block_x or bx0)


def bytes_per_cell(policy, in_place: bool = False) -> tuple[int, int]:
    """(moved per step, resident) bytes per cell: 9 populations read and 9 written plus the flag byte
    per step; two population arrays resident, one with in-place streaming (``hpcsolve.lbm.inplace``),
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


#: Fibonacci-hashing multiplier of the cell tables below (the kernels compute the same home slot)
HASH_MULT = 0x9E3779B97F4A7C15


def table_home(cells: np.ndarray, size: int) -> np.ndarray:
    """Home slot of each cell in a table of ``size`` slots (a power of two): bits 32.. of cell * HASH_MULT
    (mod 2^64), as the kernels' ``table_home`` computes it."""
    h = (np.asarray(cells, dtype=np.int64).astype(np.uint64) * np.uint64(HASH_MULT)) >> np.uint64(32)
    return (h & np.uint64(size - 1)).astype(np.int64)


def cell_table(cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(keys, slots): an open-addressing hash table of the linear cell indices ``cells`` (linear probing,
    at least twice as many slots as cells, a power of two; empty slots hold -1) and each cell's slot.
    A kernel finds a boundary cell's entry in one or two dependent loads, where a binary search over a
    sorted table took log2(n): on small grids those dependent loads set the step time (the lid row's
    velocity links did three searches each)."""
    cells = np.asarray(cells, dtype=np.int64).ravel()
    size = 2
    while size < 2 * cells.size:
        size *= 2
    keys = np.full(size, -1, dtype=np.int64)
    slots = np.empty(cells.size, dtype=np.int64)
    for j, (c, k) in enumerate(zip(cells.tolist(), table_home(cells, size).tolist())):
        while keys[k] != -1:
            k = (k + 1) & (size - 1)
        keys[k] = c
        slots[j] = k
    return keys, slots


def table_values(slots: np.ndarray, size: int, values: np.ndarray) -> np.ndarray:
    """(2, size) per-slot copy of per-cell ``values`` (2, n) (zeros in empty slots), contiguous."""
    out = np.zeros((values.shape[0], size), dtype=values.dtype)
    out[:, slots] = values
    return out


def characteristic_outlet(setup: LBMSetup) -> bool:
    """True where an OUTLET cell holds a reference outflow (``physics.outlet_density``): the step kernels are then
    compiled with the characteristic rule, which looks that value up per outlet link; without one they keep
    the fixed-pressure rule (drho_w = 0) and no lookup, whose cost (6-8 % of a 2D-1 step at D = 80 on the
    H200: a table probe, a square root and a division per outlet link) only the characteristic rule needs."""
    outlet = setup.flags.ravel() == OUTLET
    return bool(np.any(setup.boundary_velocity.reshape(2, -1)[:, outlet]))


def velocity_table(setup: LBMSetup, compute) -> tuple[np.ndarray, np.ndarray]:
    """The kernels' table of VELOCITY cells (and OUTLET cells where :func:`characteristic_outlet`): keys (size
    slots, see :func:`cell_table`) and the (2, size) boundary velocities per slot (compute dtype): a velocity
    cell's wall / inlet velocity, an outlet cell's reference outflow (0 where it has none: fixed pressure)."""
    flat = setup.flags.ravel()
    kept = (flat == VELOCITY) | ((flat == OUTLET) & characteristic_outlet(setup))
    cells = np.flatnonzero(kept).astype(np.int64)
    keys, slots = cell_table(cells)
    uw = setup.boundary_velocity.reshape(2, -1)[:, cells].astype(compute)
    return keys, table_values(slots, keys.size, uw)


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


def force_links(setup: LBMSetup, mask: np.ndarray):
    """Momentum-exchange terms on ``mask`` as a list the device reduces: F = sum_k c_k (m_k h[pos_k] + k_k),
    h the stored shifted populations (positions i*N + x), float64 coefficients. The same terms as
    ``stepper.momentum_exchange_force``:
      simple link (x fluid, x + c_i in the mask): c_i (f*_i + f*_i - 6 w_i c_i.u_w)  -> m = 2, k = 2 w_i - 6 w_i c_i.u_w
      interpolated link (setup.links): c_ib (f*_ib + a f*_ib + b f*_partner)           -> two terms:
          pos = slot, m = 1 + a, k = 2 w_ib;   pos = partner, m = b, k = 0."""
    mask = np.asarray(mask, dtype=bool)
    ny, nx = setup.shape
    n = ny * nx
    fluid = setup.flags == FLUID
    uw = setup.boundary_velocity
    interpolated = np.zeros((lattice.Q, n), dtype=bool)
    lk = setup.links if bouzidi.has_links(setup) else None
    if lk is not None:
        into = mask.ravel()[lk.solid]
        interpolated[lk.direction[into], lk.cell[into]] = True
    pos, cx_l, cy_l, m_l, k_l = [], [], [], [], []
    for i in range(1, lattice.Q):
        cx, cy, w = lattice.CX[i], lattice.CY[i], lattice.WEIGHTS[i]
        target = np.roll(mask, shift=(-cy, -cx), axis=(0, 1))
        links = np.flatnonzero((fluid & target).ravel() & ~interpolated[i])
        if links.size == 0:
            continue
        cu = (cx * np.roll(uw[0], (-cy, -cx), (0, 1)).ravel()[links]
              + cy * np.roll(uw[1], (-cy, -cx), (0, 1)).ravel()[links])
        pos.append(i * n + links)
        cx_l.append(np.full(links.size, float(cx)))
        cy_l.append(np.full(links.size, float(cy)))
        m_l.append(np.full(links.size, 2.0))
        k_l.append(2.0 * w - 6.0 * w * cu)
    if lk is not None and into.any():
        d = lk.direction[into]
        cx = np.asarray(lattice.CX, dtype=np.float64)[d]
        cy = np.asarray(lattice.CY, dtype=np.float64)[d]
        w = np.asarray(lattice.WEIGHTS, dtype=np.float64)[d]
        pos += [lk.slot[into], lk.partner[into]]
        cx_l += [cx, cx]
        cy_l += [cy, cy]
        m_l += [1.0 + lk.a[into], lk.b[into]]
        k_l += [2.0 * w, np.zeros_like(w)]
    if not pos:
        return None
    return (np.concatenate(pos).astype(np.int64),) + tuple(np.concatenate(a).astype(np.float64)
                                                           for a in (cx_l, cy_l, m_l, k_l))


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
    """What in-place streaming adds to a GPU stepper (shared by CuPy and Numba): the outlet cells and
    their velocity table, the odd-layout force positions and Bouzidi pre-pass (hpcsolve/lbm/inplace.py).
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

    def outlet_velocity(self, fetch):
        """The device velocity table (2 * n_out, compute dtype, per slot of ``out_cells``) of the outlet
        cells; ``fetch(cells)`` returns the stored even-layout populations (9, n) of those cells on the
        host (called only when the lattice has outlet cells)."""
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


class GraphedSteps:
    """``Stepper._advance`` of the two GPU steppers: what :class:`StepGraphs` (``self.graphs``) can replay, the
    rest through the stepper's ``_advance_direct(n)``. ``self.a`` / ``self.b`` are the population buffers
    (``b`` None in place), ``self.parity`` the in-place parity."""

    def _advance(self, n: int) -> None:
        n = self.graphs.advance(n, self._advance_direct, (self.a, self.b), getattr(self, "parity", 0),
                                self._restore)
        self._advance_direct(n)

    def _restore(self, buffers, parity) -> None:
        self.a, self.b = buffers
        if self.in_place:
            self.parity = parity


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
