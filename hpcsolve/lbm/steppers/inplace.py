"""In-place streaming (the AA pattern of Bailey et al. 2009) for the GPU steppers: one population
array instead of two, so the resident bytes per cell are halved (fp64 73, fp32 37, fp16s 19).

The stored state is still the post-collision f*(t) of docs/design/lbm_algorithm.md; only *where* each value
lives alternates with the parity of the steps done since the state was loaded:

- **even layout** (the two-buffer layout): slot (i, x) holds f*_i(x);
- **odd layout**: slot (opp(i), x + c_i) holds f*_i(x) (periodic wrap), see :func:`odd_positions`.

A step from the even layout pulls exactly as the two-buffer step (f*_i(x - c_i) from slot (i, x - c_i);
at a boundary link the rule's f*_opp(i)(x) from slot (opp(i), x)) and writes f*_j(x) to slot
(opp(j), x + c_j): every slot it writes is one it read (or a non-fluid cell's slot nobody reads), so
the threads do not race. A step from the odd layout finds f*_i(x - c_i) in its own slot (opp(i), x),
the boundary rule's f*_opp(i)(x) in slot (i, x - c_i), and writes f*_j(x) to its own slot (j, x).

A rule that needs the cell's own velocity at time t (``BoundaryRule.needs_own_velocity``: the pressure
outlet) reads the moments of all nine f*_k(x); in place, neighbours overwrite some of those slots during
the step. So the fluid cells next to such a rule's cells keep their velocity in a small table
(:func:`own_velocity_cells` sorted, ``own_u`` (2, n), :func:`own_velocities`): each such cell writes the
moments of its *stored* (rounded) post-collision populations there after its collision, as the
two-buffer kernels read them from the stored state. A cell with both such a link and an interpolated
(Bouzidi) link is refused: the two-buffer rule reads its own velocity after the pre-pass changed one of
its slots.

The interpolated bounce-back pre-pass, the device force terms and the moments map their positions
with :func:`odd_positions` on odd parity; ``populations()`` returns the even layout, non-fluid cells 0.
"""

from __future__ import annotations

import numpy as np

from hpcsolve.core.errors import CaseError
from hpcsolve.lbm import lattice, physics, rules
from hpcsolve.lbm.flags import FLUID


def odd_positions(pos: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Flat positions i * N + x of f*_i(x) in the even layout -> their positions in the odd layout,
    opp(i) * N + (x + c_i) (periodic wrap)."""
    ny, nx = shape
    n = ny * nx
    pos = np.asarray(pos, dtype=np.int64)
    i, cell = np.divmod(pos, n)
    y, x = np.divmod(cell, nx)
    cx = np.asarray(lattice.CX, dtype=np.int64)[i]
    cy = np.asarray(lattice.CY, dtype=np.int64)[i]
    opp = np.asarray(lattice.OPPOSITE, dtype=np.int64)[i]
    return opp * n + ((y + cy) % ny) * nx + (x + cx) % nx


def to_even(g_odd: np.ndarray, flags: np.ndarray) -> np.ndarray:
    """The even-layout state (9, ny, nx) from an odd-layout array; non-fluid cells 0. One direction
    at a time (f*_i(x) = slot opp(i) at x + c_i: a roll by -c_i), so the host needs one population
    array plus one (ny, nx) plane."""
    ny, nx = flags.shape
    g = np.asarray(g_odd).reshape(lattice.Q, ny, nx)
    solid = np.asarray(flags) != FLUID
    out = np.empty_like(g)
    for i in range(lattice.Q):
        out[i] = np.roll(g[lattice.OPPOSITE[i]], shift=(-lattice.CY[i], -lattice.CX[i]), axis=(0, 1))
        out[i][solid] = 0
    return out


def even_layout(g: np.ndarray, flags: np.ndarray, parity: int) -> np.ndarray:
    """The even-layout state (what a stepper's ``populations()`` returns) from the in-place array ``g``
    (9, ny, nx) after steps of ``parity``; non-fluid cells 0 (in place they hold values a step wrote
    there and nobody reads)."""
    if parity:
        return to_even(g, flags)
    g = g.copy()
    g[:, flags != FLUID] = 0
    return g


def own_velocity_cells(setup) -> np.ndarray:
    """Sorted flat indices of the fluid cells with a neighbour x - c_i (periodic wrap) whose rule reads the cell's
    own velocity (``rules.own_velocity_flags``: the outlet's)."""
    flags = setup.flags
    source = np.isin(flags, rules.own_velocity_flags())
    near = np.zeros(flags.shape, dtype=bool)
    for i in range(1, lattice.Q):
        # the neighbour x - c_i of x: roll the source mask by +c_i
        near |= np.roll(source, shift=(lattice.CY[i], lattice.CX[i]), axis=(0, 1))
    return np.flatnonzero((near & (flags == FLUID)).ravel()).astype(np.int64)


def own_velocities(g_cells: np.ndarray, setup) -> np.ndarray:
    """(2, n) velocities from the stored even-layout populations ``g_cells`` (9, n) of n cells, in the
    compute dtype: the moments an own-velocity rule takes (physics.moments of h = decode(g))."""
    ct = np.dtype(setup.policy.compute)
    h = setup.policy.decode(np.asarray(g_cells).reshape(lattice.Q, -1))
    _, ux, uy = physics.physics_for(ct).moments(tuple(h))
    return np.ascontiguousarray(np.stack([ux, uy]).astype(ct))


def check(setup) -> np.ndarray:
    """The own-velocity cells of ``setup`` (:func:`own_velocity_cells`); CaseError where in-place streaming
    cannot reproduce the two-buffer algorithm (a cell with an own-velocity link, e.g. an outlet's, and an
    interpolated link)."""
    cells = own_velocity_cells(setup)
    links = getattr(setup, "links", None)
    if links is not None and len(links) and cells.size:
        both = np.intersect1d(cells, links.cell)
        if both.size:
            ny, nx = setup.shape
            y, x = divmod(int(both[0]), nx)
            names = "/".join(r.name for r in rules.rules() if r.needs_own_velocity)
            raise CaseError.invalid("lattice.streaming", "in-place", "'two-buffer' for this geometry",
                                    why=f"{both.size} cells (first at x={x}, y={y}) touch both the {names} and an "
                                        f"interpolated (Bouzidi) wall; move the obstacle away from the {names}")
    return cells


class OddLinks:
    """``BouzidiLinks`` seen from the odd layout: the pre-pass's slot and partner positions mapped by
    :func:`odd_positions` (the wall rule of an odd step reads slot (i, x - c_i), which is where f*_ib(x)
    lives then); weights unchanged."""

    def __init__(self, links):
        self.links = links

    def __len__(self) -> int:
        return len(self.links)

    def device_arrays(self, compute, xp=np):
        slot, partner, a, b = self.links.device_arrays(compute, np)
        shape = self.links.shape
        return tuple(xp.asarray(np.ascontiguousarray(v)) for v in
                     (odd_positions(slot, shape), odd_positions(partner, shape), a, b))
