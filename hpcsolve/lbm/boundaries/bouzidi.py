"""Interpolated bounce-back for curved resting walls (Bouzidi, Firdaouss & Lallemand 2001, linear).

A *link* joins a fluid cell x to a solid cell x + c_ib of an obstacle; the wall crosses it at the
fraction q in (0, 1] of its length (q = 1/2 is the half-way wall of simple bounce-back). The
population that must arrive at x in direction i = opp(ib) at t + 1 is

    q <  1/2:  f_i(x) = 2q f*_ib(x) + (1 - 2q) f*_ib(x + c_i)         (x + c_i must be fluid)
    q >= 1/2:  f_i(x) = 1/(2q) f*_ib(x) + (1 - 1/(2q)) f*_i(x)

with f* the stored post-collision state. The weights (a, b) sum to 1 and w_i = w_ib, so the same
formula holds for the stored shifted values h = f - w (``physics.interpolated_bounce_back``).
A link with q < 1/2 whose cell x + c_i is not fluid (a one-cell gap) keeps simple bounce-back.

The fused step kernels of every backend already do simple bounce-back: for a WALL source cell
they read A_ib(x). Interpolation is therefore a sparse **pre-pass** run before each step on the
stored state A, proportional to the number of links, not a second pass over the domain:

1. gather: V_k = storage(compute(a_k h(slot_k) + b_k h(partner_k)) * scale) for every link k,
   reading A only (loads and the store rounding exactly as in the step kernel);
2. scatter: A(slot_k) = V_k, slot_k = ib * N + x.

Two phases, so no link reads a value another link overwrote (a partner f*_i(x) is itself a slot
when the cell x + c_i is solid too). The slot A_ib(x) is read by nothing else in the step (its pull
target x + c_ib is solid) except by the outlet rule of a cell next to both an obstacle and an
outlet (its own velocity); the step then rewrites every population of x. So the state seen at
monitor points (populations, moments, force) is the unmodified post-collision state.

Links with q = 1/2 exactly (masks, grid-aligned faces) are simple bounce-back and are not listed.

Backends: each Stepper builds its pre-pass, a callable ``prepass(A)`` run on its current state
buffer at the start of every step (None without links, :func:`has_links`): the NumPy reference runs
the array-module function :func:`prepass` (:class:`NumpyPrepass`), ``numba-cuda`` two small
``numba.cuda.jit`` kernels (``kernels_numba.NumbaPrepass``) and ``cupy`` two RawKernels
(``kernels_cupy.CupyBouzidi``), both emitted from the list kernels :data:`GATHER` / :data:`SCATTER`
(``kernel_plan.ListKernel`` in ``kernels.prepass_plan``, re-exported here: the same physics function, the loads
and stores of ``population_code``). ``Backend.piece("lbm.bouzidi_prepass")(links, policy)`` gives the one of a backend.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hpcsolve.lbm import lattice, physics
from hpcsolve.lbm.flags import FLUID
from hpcsolve.lbm.kernels.prepass_plan import GATHER, SCATTER

__all__ = ["GATHER", "SCATTER", "BouzidiLinks", "NumpyPrepass", "build_links", "circle_fraction", "force_terms",
           "has_links", "prepass", "rectangle_fraction", "reference_values", "weights"]


@dataclass(frozen=True)
class BouzidiLinks:
    """Interpolated links of a lattice, precomputed on the host from the obstacle geometry.

    Per link k: the fluid cell x (flat index y * nx + x), the direction ib (c_ib points into the
    wall), the wall fraction q, the partner population (direction, flat cell) and the weights
    (a, b) of f_opp(ib)(x, t+1) = a f*_ib(x) + b f*_partner. Weights in float64, b = 1 - a.
    """

    shape: tuple[int, int]            # (ny, nx)
    cell: np.ndarray                  # int64 fluid cell x
    direction: np.ndarray             # int64 ib
    q: np.ndarray                     # float64 wall fraction in (0, 1]
    partner_direction: np.ndarray     # int64
    partner_cell: np.ndarray          # int64
    a: np.ndarray                     # float64
    b: np.ndarray                     # float64
    fallback: int = 0                 # links with q < 1/2 left at simple bounce-back (far cell not fluid)

    def __len__(self) -> int:
        return int(self.cell.size)

    @property
    def cells(self) -> int:
        return self.shape[0] * self.shape[1]

    @property
    def slot(self) -> np.ndarray:
        """Flat position ib * N + x of f*_ib(x): read by the step's bounce-back, written by the pre-pass."""
        return self.direction * self.cells + self.cell

    @property
    def partner(self) -> np.ndarray:
        return self.partner_direction * self.cells + self.partner_cell

    @property
    def solid(self) -> np.ndarray:
        """Flat index of the solid cell x + c_ib of each link (periodic wrap)."""
        ny, nx = self.shape
        y, x = np.divmod(self.cell, nx)
        cx = np.asarray(lattice.CX)[self.direction]
        cy = np.asarray(lattice.CY)[self.direction]
        return ((y + cy) % ny) * nx + (x + cx) % nx

    def device_arrays(self, compute, xp=np):
        """(slot int64, partner int64, a, b) as ``xp`` arrays; a, b in the compute dtype with
        b = 1 - a evaluated in that dtype (the pair sums to 1 as exactly as it can)."""
        ct = np.dtype(compute)
        a = self.a.astype(ct)
        b = (ct.type(1.0) - a).astype(ct)
        return tuple(xp.asarray(np.ascontiguousarray(v)) for v in (self.slot, self.partner, a, b))


def weights(q: np.ndarray, far_fluid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(a, b, use_far) of the linear Bouzidi rule: q < 1/2 interpolates with the far population
    f*_ib(x + c_i) (use_far True), q >= 1/2 with f*_i(x). Links with q < 1/2 and no fluid far cell
    get a = 1, b = 0 (simple bounce-back)."""
    q = np.asarray(q, dtype=np.float64)
    near = q < 0.5
    a = np.where(near, 2.0 * q, 1.0 / (2.0 * np.maximum(q, 0.5)))
    a = np.where(near & ~far_fluid, 1.0, a)
    return a, 1.0 - a, near


def build_links(flags: np.ndarray, walls) -> BouzidiLinks | None:
    """Links of the fluid cells of ``flags`` into each wall of ``walls``.

    ``walls``: iterable of ``(mask, fraction)``, ``mask`` a (ny, nx) bool array of non-fluid cells,
    ``fraction(j, i, cx, cy)`` the wall fraction q of the links from fluid cells (row j, column i)
    along (cx, cy) (arrays). q is clipped to (0, 1]. Returns None when no link differs from simple
    bounce-back.
    """
    flags = np.asarray(flags)
    ny, nx = flags.shape
    fluid = flags == FLUID
    parts = []
    fallback = 0
    for mask, fraction in walls:
        mask = np.asarray(mask, dtype=bool)
        if (mask & fluid).any():
            raise ValueError("a wall mask covers fluid cells")
        for ib in range(1, lattice.Q):
            cx, cy = lattice.CX[ib], lattice.CY[ib]
            j, i = np.nonzero(fluid & np.roll(mask, shift=(-cy, -cx), axis=(0, 1)))
            if j.size == 0:
                continue
            q = np.asarray(fraction(j, i, cx, cy), dtype=np.float64)
            if not np.all(np.isfinite(q)) or np.any(q <= -1e-9) or np.any(q > 1 + 1e-9):
                raise ValueError(f"wall fractions outside (0, 1] in direction {ib}: {q.min()} .. {q.max()}")
            q = np.clip(q, 1e-12, 1.0)
            q[np.abs(q - 0.5) < 1e-9] = 0.5  # a grid-aligned face computed in metres: half-way
            fj, fi = (j - cy) % ny, (i - cx) % nx
            far_fluid = fluid[fj, fi]
            a, b, near = weights(q, far_fluid)
            fallback += int(np.count_nonzero(near & ~far_fluid))
            keep = a != 1.0  # q = 1/2 and fallbacks are simple bounce-back already
            cell = (j * nx + i)[keep]
            use_far = near[keep]
            parts.append(dict(
                cell=cell, direction=np.full(cell.size, ib), q=q[keep],
                partner_direction=np.where(use_far, ib, lattice.OPPOSITE[ib]),
                partner_cell=np.where(use_far, (fj * nx + fi)[keep], cell),
                a=a[keep], b=b[keep]))
    if not parts or sum(p["cell"].size for p in parts) == 0:
        return None
    cat = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    ints = ("cell", "direction", "partner_direction", "partner_cell")
    cat = {k: (v.astype(np.int64) if k in ints else v.astype(np.float64)) for k, v in cat.items()}
    return BouzidiLinks(shape=(ny, nx), fallback=fallback, **cat)


# ------------------------------------------------------------------------------------------------
# wall fractions of exact shapes (any consistent length unit; points are fluid cell centres)

def circle_fraction(px, py, dx, dy, center, radius) -> np.ndarray:
    """Smallest t in (0, 1] with |p + t d - centre| = radius, for p outside and p + d inside the
    circle (the link p -> p + d enters it). Stable form t = 2c / (-b + sqrt(b^2 - 4 a c))."""
    ox, oy = px - center[0], py - center[1]
    a = dx * dx + dy * dy
    b = 2.0 * (ox * dx + oy * dy)
    c = ox * ox + oy * oy - radius * radius
    disc = np.maximum(b * b - 4.0 * a * c, 0.0)
    return 2.0 * c / (-b + np.sqrt(disc))


def rectangle_fraction(px, py, dx, dy, lower, upper) -> np.ndarray:
    """Entry parameter t of the segment p -> p + d into the box [lower, upper] (slab method), for p
    outside and p + d inside."""
    t = np.full(np.shape(px), -np.inf)
    for p, d, lo, hi in ((px, dx, lower[0], upper[0]), (py, dy, lower[1], upper[1])):
        if d == 0:
            continue
        t1, t2 = (lo - p) / d, (hi - p) / d
        t = np.maximum(t, np.minimum(t1, t2))
    return t


# ------------------------------------------------------------------------------------------------
# the pre-pass

def prepass(A, slot, partner, a, b, policy) -> None:
    """Interpolated bounce-back pre-pass on the stored state ``A`` (any shape, C-contiguous; NumPy or
    CuPy), in place: gather every link value from A, then scatter them into their slots.

    ``slot``, ``partner`` int64 flat positions; ``a``, ``b`` in the compute dtype (from
    :meth:`BouzidiLinks.device_arrays`). Loads and the store are the policy's ``decode`` and
    ``encode``, those of the step kernels."""
    flat = A.reshape(-1)
    P = physics.physics_for(np.dtype(policy.compute))
    v = P.interpolated_bounce_back(policy.decode(flat[slot]), policy.decode(flat[partner]), a, b)
    flat[slot] = policy.encode(v)  # the gather above is complete: fancy indexing copied


def reference_values(g: np.ndarray, links: BouzidiLinks, policy) -> np.ndarray:
    """The pre-pass's link values (storage dtype), one link at a time in plain Python scalars of
    the compute dtype: the definition :func:`prepass` and the kernels are tested against."""
    ct = np.dtype(policy.compute).type
    flat = np.asarray(g).reshape(-1)
    out = np.empty(len(links), dtype=policy.storage)
    for k, (s, p, a) in enumerate(zip(links.slot, links.partner, links.a)):
        ak = ct(a)
        bk = ct(ct(1.0) - ak)
        hn, hf = policy.decode(flat[s]), policy.decode(flat[p])   # compute-dtype scalars
        v = ct(ct(ak * hn) + ct(bk * hf))
        out[k] = policy.encode(v)
    return out


class NumpyPrepass:
    """The pre-pass on the CPU (:func:`prepass` over the link arrays, built once)."""

    def __init__(self, links: BouzidiLinks, policy):
        self.links, self.policy, self.n = links, policy, len(links)
        self.arrays = links.device_arrays(np.dtype(policy.compute), np)

    def __call__(self, A) -> None:
        prepass(A, *self.arrays, self.policy)


def force_terms(links: BouzidiLinks, mask: np.ndarray):
    """The interpolated links' momentum-exchange terms (``force.force_links`` adds the registered rules'): for a
    link into ``mask``, c_ib (f*_ib + a f*_ib + b f*_partner) -> two terms, pos = slot, m = 1 + a, k = 2 w_ib and
    pos = partner, m = b, k = 0. Returns (skip, (pos, cx, cy, m, k) lists): ``skip`` (9, N) marks the links the
    registered rules must leave out.

    Why this is not a ``BoundaryRule.force_terms``: the interpolated walls are no rule of a cell flag (their solid
    cells are WALL cells, the step kernels bounce back there and the pre-pass rewrites the slot; which links are
    interpolated comes from the obstacle's wall fraction per link, not from a flag the rules are keyed by), a link's
    term reaches a second population (the partner, another position than the link's own, which a rule's per-link
    (m, k) cannot say), and it replaces the wall rule's term on its links (``skip``) rather than adding one. Its
    terms stay after the rules' in the list, the order the forces have always been summed in."""
    mask = np.asarray(mask, dtype=bool)
    into = mask.ravel()[links.solid]
    skip = np.zeros((lattice.Q, mask.size), dtype=bool)
    skip[links.direction[into], links.cell[into]] = True
    if not into.any():
        return skip, ([], [], [], [], [])
    d = links.direction[into]
    cx, cy, w = (np.asarray(a, dtype=np.float64)[d] for a in (lattice.CX, lattice.CY, lattice.WEIGHTS))
    return skip, ([links.slot[into], links.partner[into]], [cx, cx], [cy, cy],
                  [1.0 + links.a[into], links.b[into]], [2.0 * w, np.zeros_like(w)])


def has_links(setup) -> bool:
    """True when ``setup`` (an LBMSetup) has interpolated links, so its steppers run a pre-pass."""
    links = getattr(setup, "links", None)
    return links is not None and len(links) > 0
