"""The momentum-exchange force on an obstacle: one home for every backend.

Each registered boundary rule gives the terms of its links (``BoundaryRule.force_terms``: the wall's and the
velocity rule's bounce-back, a plugin rule's own; a rule without one exerts no counted force), and the
interpolated (Bouzidi) links theirs (:func:`hpcsolve.lbm.boundaries.bouzidi.force_terms`, which replace the wall
rule's term on their links); :func:`force_links` gathers them as one list F = sum_k c_k (m_k h[pos_k] + k_k) over
the stored shifted populations h (positions i * N + x, float64 coefficients). The GPU steppers reduce that list on
the device (``kernel_plan``'s ``lbm_force``); :func:`momentum_exchange_force` evaluates the same list on the host
(the NumPy stepper, and the reference the GPU force is tested against).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hpcsolve.lbm import lattice, rules
from hpcsolve.lbm.boundaries import bouzidi
from hpcsolve.lbm.flags import FLUID


@dataclass(frozen=True)
class MaskLinks:
    """Simple links (x fluid, x + c_i in a mask) handed to a rule's ``force_terms``: flat int64 arrays of the
    direction i, the fluid cell x and the boundary cell x + c_i (periodic wrap), in position order i * N + x."""

    direction: np.ndarray
    cell: np.ndarray
    boundary: np.ndarray

    def select(self, which: np.ndarray) -> "MaskLinks":
        return MaskLinks(self.direction[which], self.cell[which], self.boundary[which])


def mask_links(setup, mask: np.ndarray, skip: np.ndarray | None = None) -> MaskLinks:
    """The simple links into ``mask`` of ``setup``; ``skip`` (9, N) bool: links another rule handles
    (interpolated links)."""
    ny, nx = mask.shape
    fluid = setup.flags == FLUID
    parts = []
    for i in range(1, lattice.Q):
        cx, cy = lattice.CX[i], lattice.CY[i]
        links = (fluid & np.roll(mask, shift=(-cy, -cx), axis=(0, 1))).ravel()   # x whose x + c_i is in the mask
        if skip is not None:
            links &= ~skip[i]
        x = np.flatnonzero(links).astype(np.int64)
        y, col = np.divmod(x, nx)
        parts.append((np.full(x.size, i, np.int64), x, ((y + cy) % ny) * nx + (col + cx) % nx))
    return MaskLinks(*(np.concatenate([p[j] for p in parts]) for j in range(3)))


def rule_terms(setup, links: MaskLinks):
    """(pos, cx, cy, m, k) of the links whose boundary cell's rule gives a force term (``BoundaryRule.force_terms``),
    in the order of ``links``; the links of rules without one are left out."""
    flag_of = setup.flags.ravel()[links.boundary]
    m, k = np.zeros(flag_of.size), np.zeros(flag_of.size)
    keep = np.zeros(flag_of.size, dtype=bool)
    for rule in rules.rules():
        sel = np.flatnonzero(flag_of == rule.flag)
        terms = rule.force_terms(setup, links.select(sel)) if sel.size else None
        if terms is not None:
            m[sel], k[sel] = terms
            keep[sel] = True
    d = links.direction[keep]
    return (d * setup.flags.size + links.cell[keep], np.asarray(lattice.CX, np.float64)[d],
            np.asarray(lattice.CY, np.float64)[d], m[keep], k[keep])


def force_links(setup, mask: np.ndarray):
    """The momentum-exchange terms on ``mask`` (an (ny, nx) bool array of obstacle cells) of ``setup`` (an
    LBMSetup): (pos int64, cx, cy, m, k float64) arrays, or None when no link enters the mask."""
    mask = np.asarray(mask, dtype=bool)
    skip, extra = None, ([], [], [], [], [])
    if bouzidi.has_links(setup):
        skip, extra = bouzidi.force_terms(setup.links, mask)
    terms = [[a] + b for a, b in zip(rule_terms(setup, mask_links(setup, mask, skip)), extra)]
    if not sum(a.size for a in terms[0]):
        return None
    return (np.concatenate(terms[0]).astype(np.int64),) + tuple(np.concatenate(a).astype(np.float64)
                                                                for a in terms[1:])


def momentum_exchange_force(g: np.ndarray, setup, mask: np.ndarray) -> tuple[float, float]:
    """F = sum over links (x fluid, x + c_i in mask) of c_i (f*_i(x) + f_opp(i)(x, t+1)) from the stored state
    ``g`` (host array), evaluated in float64 from :func:`force_links`: a simple link bounces back
    f*_i(x) - 6 w_i (c_i . u_w(x + c_i)), an interpolated link a f*_i(x) + b f*_partner, a plugin rule's link what
    its ``force_terms`` says.

    The stored state holds f*(t); the result is the force the body receives between t and t+1. u_w is the
    setup's full boundary velocity: measured masks are obstacles (resting walls, u_w = 0); a force on moving-wall
    cells during a smooth start (``ramp_steps``) would miss the ramp factor."""
    terms = force_links(setup, mask)
    if terms is None:
        return 0.0, 0.0
    pos, cx, cy, m, k = terms
    h = setup.policy.decode(np.asarray(g)).astype(np.float64).reshape(-1)
    s = m * h[pos] + k
    return float(np.dot(cx, s)), float(np.dot(cy, s))
