"""The LBM on several ranks: a slab of rows per rank, one-row halos exchanged after every step.

Each rank steps its own rows and one halo row on each side with the backend's ordinary stepper
(:class:`SlabStepper` wraps it). A step of the pull scheme reads only the neighbours at distance one,
so after a step every owned row holds exactly what the single-process step gives; only the halo rows
(whose own neighbours lie outside the slab) are wrong, and the exchange replaces them with the
neighbours' owned rows before the next step. The update is local, so the fields are bitwise those of
one process (tests). Boundary rules, obstacles and interpolated (Bouzidi) links that cross slab borders
need nothing else: every cell keeps its global flags, and a link's cell, partner and wall cell lie
within one row of each other.

Read-outs (``populations``, and from it ``macroscopic``, ``force``, ``finite``) gather the owned rows of
every rank (MPI Allgather, host-staged): every rank gets the global state, rank 0 writes it. That is
one copy of the whole lattice per rank at each monitor point: fine up to host memory, and the price of
results identical to a single process.

So far the local stepper is the NumPy reference (the halo exchange is host-staged MPI); the GPU
steppers, in-place streaming and NCCL are not wired yet.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from hpcsolve.core import backends, parallel
from hpcsolve.core.errors import BackendError
from hpcsolve.lbm import lattice
from hpcsolve.lbm.boundaries.bouzidi import BouzidiLinks
from hpcsolve.lbm.steppers.stepper import LBMSetup, Stepper, get_stepper

HALO = 1       # rows of each neighbour a rank keeps (the pull stencil's reach)


def local_setup(setup: LBMSetup, slab: parallel.Slab) -> LBMSetup:
    """The setup of one slab: the global rows ``slab.local_rows`` (halos included), with the links whose
    cell, partner and wall cell all lie inside them (without wrapping), re-indexed."""
    rows = slab.local_rows
    ny, nx = setup.flags.shape

    def cut(a, axis):
        return None if a is None else np.ascontiguousarray(np.take(a, rows, axis=axis))

    links = None
    if setup.links is not None and len(setup.links):
        links = _local_links(setup.links, rows, nx)
    # local row j is global row first + j: the absorbing layer's profile and fp16c's seeds take global positions
    # (the halo rows' wrapped values do not matter: exchange() overwrites them after every step)
    first = slab.y0 - slab.halo
    return dataclasses.replace(setup, flags=cut(setup.flags, 0), boundary_velocity=cut(setup.boundary_velocity, 1),
                               initial_density=cut(setup.initial_density, 0),
                               initial_velocity=cut(setup.initial_velocity, 1), links=links,
                               cell_offset=setup.cell_offset + first * nx)


def _local_links(links: BouzidiLinks, rows: np.ndarray, nx: int) -> BouzidiLinks | None:
    n = rows.size
    ny = links.shape[0]
    # a global row can appear twice in a slab (one rank holding the whole wrapped lattice, or both halos the
    # same row when ny = 3 on 2 ranks): the link's own cell takes the owned copy (local rows 1 .. n - 2), its
    # partner the copy next to that cell
    first = np.full(ny, -1, dtype=np.int64)
    second = np.full(ny, -1, dtype=np.int64)
    for k, g in enumerate(rows.tolist()):
        if first[g] < 0:
            first[g] = k
        else:
            second[g] = k
    owned = first.copy()
    if n > 2:
        owned[rows[1:-1]] = np.arange(1, n - 1)

    cy_, lx = np.divmod(links.cell, nx)
    ly = owned[cy_]
    gy, px = np.divmod(links.partner_cell, nx)
    py = np.where(np.abs(first[gy] - ly) <= 1, first[gy], second[gy])
    cy = np.asarray(lattice.CY)[links.direction]
    wy = ly + cy                               # the wall cell's local row, not wrapped
    keep = (ly >= 0) & (py >= 0) & (np.abs(py - ly) <= 1) & (wy >= 0) & (wy < n)
    if not keep.any():
        return None
    k = np.flatnonzero(keep)
    return BouzidiLinks(shape=(n, nx), cell=ly[k] * nx + lx[k], direction=links.direction[k], q=links.q[k],
                        partner_direction=links.partner_direction[k], partner_cell=py[k] * nx + px[k],
                        a=links.a[k], b=links.b[k], fallback=links.fallback)


class SlabStepper(Stepper):
    """One rank's part of a decomposed lattice; the interface of a single-process Stepper (``step``,
    ``populations`` of the whole lattice, ``load_populations`` of the whole lattice, ...)."""

    def __init__(self, backend, setup: LBMSetup, comm=None):
        super().__init__(setup)
        self.comm = comm if comm is not None else parallel.world()
        ny = setup.flags.shape[0]
        self.slabs = parallel.slabs(ny, parallel.ranks(self.comm), HALO)
        self.slab = self.slabs[self.comm.Get_rank()]
        if setup.in_place:
            raise BackendError("a decomposed run (several MPI ranks) does not support lattice.streaming = "
                               "'in-place' yet; use 'two-buffer'")
        be = backends.get(backend)
        if be.gpu:
            raise BackendError(f"backend {be.name!r} cannot run on several MPI ranks yet (the GPU steppers' halo "
                               "exchange is not written); use a CPU backend (--backend numpy), or one rank")
        self.local = get_stepper(backend, local_setup(setup, self.slab))
        self.backend = self.local.backend
        self.bouzidi = self.local.bouzidi
        self._rows_all = [s.rows for s in self.slabs]
        self.halo_seconds = 0.0       # wall time spent in exchange() (scripts/bench_ranks.py reports it)

    # -- stepping
    def _advance(self, n: int) -> None:
        for _ in range(n):
            self.local._advance(1)
            self.exchange()

    def _set_velocity_scale(self, factor: float) -> None:
        self.local._set_velocity_scale(factor)
        self.local.velocity_scale = factor

    def exchange(self) -> None:
        """Halo rows from the neighbours: my first owned row goes to the rank below (its top halo), my last
        owned row to the rank above (its bottom halo)."""
        t0 = time.perf_counter()
        g = self.local.g
        s, h, n = self.slab, HALO, self.slab.rows
        first, last = np.ascontiguousarray(g[:, h:2 * h]), np.ascontiguousarray(g[:, n:n + h])
        from_upper, from_lower = np.empty_like(first), np.empty_like(last)
        self.comm.Sendrecv(first, dest=s.lower, recvbuf=from_upper, source=s.upper)
        self.comm.Sendrecv(last, dest=s.upper, recvbuf=from_lower, source=s.lower)
        g[:, n + h:n + 2 * h] = from_upper
        g[:, 0:h] = from_lower
        self.halo_seconds += time.perf_counter() - t0

    @property
    def halo_bytes_per_step(self) -> int:
        """Bytes this rank sends per step (it receives as many): HALO rows of all populations to each neighbour."""
        g = self.local.g
        return 2 * HALO * g.shape[0] * g.shape[2] * g.dtype.itemsize

    # -- the whole lattice
    def populations(self) -> np.ndarray:
        own = np.ascontiguousarray(self.local.g[:, HALO:HALO + self.slab.rows])
        parts = self.comm.allgather(own)
        return np.concatenate(parts, axis=1)

    def load_populations(self, g: np.ndarray, time_step: int) -> None:
        g = self._check_loadable(g)
        self.local.load_populations(np.ascontiguousarray(g[:, self.slab.local_rows]), time_step)
        self.time_step = int(time_step)

    def decomposition(self) -> dict:
        """What provenance records: the ranks and the rows each owns."""
        return {"ranks": self.slab.size, "kind": "slabs of rows", "halo_rows": HALO,
                "rows_per_rank": self._rows_all}
