"""The momentum-exchange force on an obstacle: one home for every backend.

Each boundary rule gives its links' terms (simple links: :func:`hpcsolve.lbm.boundaries.velocity.force_terms`;
interpolated links: :func:`hpcsolve.lbm.boundaries.bouzidi.force_terms`); :func:`force_links` gathers them as one
list F = sum_k c_k (m_k h[pos_k] + k_k) over the stored shifted populations h (positions i * N + x, float64
coefficients). The GPU steppers reduce that list on the device (``kernel_plan``'s ``lbm_force``);
:func:`momentum_exchange_force` evaluates the same list on the host (the NumPy stepper, and the reference the
GPU force is tested against).
"""

from __future__ import annotations

import numpy as np

from hpcsolve.lbm.boundaries import bouzidi, velocity


def force_links(setup, mask: np.ndarray):
    """The momentum-exchange terms on ``mask`` (an (ny, nx) bool array of obstacle cells) of ``setup`` (an
    LBMSetup): (pos int64, cx, cy, m, k float64) arrays, or None when no link enters the mask."""
    mask = np.asarray(mask, dtype=bool)
    skip, extra = None, ([], [], [], [], [])
    if bouzidi.has_links(setup):
        skip, extra = bouzidi.force_terms(setup.links, mask)
    terms = [a + b for a, b in zip(velocity.force_terms(setup, mask, skip), extra)]
    if not terms[0]:
        return None
    return (np.concatenate(terms[0]).astype(np.int64),) + tuple(np.concatenate(a).astype(np.float64)
                                                                for a in terms[1:])


def momentum_exchange_force(g: np.ndarray, setup, mask: np.ndarray) -> tuple[float, float]:
    """F = sum over links (x fluid, x + c_i in mask) of c_i (f*_i(x) + f_opp(i)(x, t+1)) from the stored state
    ``g`` (host array), evaluated in float64 from :func:`force_links`: a simple link bounces back
    f*_i(x) - 6 w_i (c_i . u_w(x + c_i)), an interpolated link a f*_i(x) + b f*_partner.

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
