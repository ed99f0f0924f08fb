"""The momentum-exchange force has one home (hpcsolve.lbm.boundaries.force): its term list (what the GPU backends
reduce on the device) evaluated on the host agrees with an independent evaluation written here, direction by
direction over the lattice (the formula the NumPy stepper used before the force had one home), with simple and
with interpolated (Bouzidi) links."""

import numpy as np
import pytest

from hpcsolve.core.precision import FP16S, FP64
from hpcsolve.lbm import lattice
from hpcsolve.lbm.boundaries.force import force_links, momentum_exchange_force
from hpcsolve.lbm.flags import FLUID
from hpcsolve.lbm.steppers.stepper import get_stepper

from lbm_gpu_cases import channel, channel_with_bouzidi, obstacle_mask


def _by_directions(g, setup, mask):
    """F = sum over links (x fluid, x + c_i in mask) of c_i (f*_i(x) + f_opp(i)(x, t+1)): simple links bounce back
    f*_i - 6 w_i c_i . u_w(x + c_i); interpolated links a f*_i(x) + b f*_partner (shifted: plus w_i)."""
    h = setup.policy.decode(np.asarray(g)).astype(np.float64)
    fluid = setup.flags == FLUID
    uw = setup.boundary_velocity
    interpolated = np.zeros((lattice.Q,) + mask.shape, dtype=bool)
    lk = setup.links
    into = None
    if lk is not None and len(lk):
        into = mask.ravel()[lk.solid]
        interpolated.reshape(lattice.Q, -1)[lk.direction[into], lk.cell[into]] = True
    fx = fy = 0.0
    for i in range(1, lattice.Q):
        cx, cy, w = lattice.CX[i], lattice.CY[i], lattice.WEIGHTS[i]
        links = fluid & np.roll(mask, shift=(-cy, -cx), axis=(0, 1)) & ~interpolated[i]
        f_out = h[i][links] + w
        cu = cx * np.roll(uw[0], (-cy, -cx), (0, 1))[links] + cy * np.roll(uw[1], (-cy, -cx), (0, 1))[links]
        s = float(np.sum(2.0 * f_out - 6.0 * w * cu))
        fx, fy = fx + cx * s, fy + cy * s
    if into is not None and into.any():
        flat = h.reshape(-1)
        w = np.asarray(lattice.WEIGHTS)[lk.direction[into]]
        back = lk.a[into] * flat[lk.slot[into]] + lk.b[into] * flat[lk.partner[into]] + w
        s = flat[lk.slot[into]] + w + back
        fx += float(np.sum(np.asarray(lattice.CX)[lk.direction[into]] * s))
        fy += float(np.sum(np.asarray(lattice.CY)[lk.direction[into]] * s))
    return fx, fy


@pytest.mark.parametrize("make", [channel, channel_with_bouzidi], ids=["simple", "bouzidi"])
@pytest.mark.parametrize("policy", [FP64, FP16S], ids=lambda p: p.name)
def test_the_one_force_agrees_with_a_direction_by_direction_evaluation(make, policy):
    setup = make(collision="trt", policy=policy)
    stepper = get_stepper("numpy", setup)
    stepper.step(7)
    g = stepper.populations()
    mask = obstacle_mask(setup)
    assert force_links(setup, mask) is not None
    ref = _by_directions(g, setup, mask)
    got = momentum_exchange_force(g, setup, mask)
    assert stepper.force(mask) == got                      # the stepper's force is the one home's
    assert abs(ref[0]) > 1e-6
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-15)
