"""The momentum-exchange term list the GPU backends reduce on the device (gpu_common.force_links)
sums to the reference force, with simple and with interpolated (Bouzidi) links."""

import numpy as np
import pytest

from hpcsolve.lbm.steppers.gpu_common import force_links
from hpcsolve.lbm.steppers.stepper import get_stepper, momentum_exchange_force
from hpcsolve.core.precision import FP16S, FP64

from lbm_gpu_cases import channel, channel_with_bouzidi, obstacle_mask


@pytest.mark.parametrize("make", [channel, channel_with_bouzidi], ids=["simple", "bouzidi"])
@pytest.mark.parametrize("policy", [FP64, FP16S], ids=lambda p: p.name)
def test_force_link_terms_sum_to_the_reference_force(make, policy):
    setup = make(collision="trt", policy=policy)
    stepper = get_stepper("numpy", setup)
    stepper.step(7)
    g = stepper.populations()
    mask = obstacle_mask(setup)
    pos, cx, cy, m, k = force_links(setup, mask)
    h = setup.policy.decode(g).astype(np.float64).reshape(-1)[pos]
    s = m * h + k
    fx, fy = float(np.sum(cx * s)), float(np.sum(cy * s))
    ref = momentum_exchange_force(g, setup, mask)
    assert abs(ref[0]) > 1e-6
    np.testing.assert_allclose((fx, fy), ref, rtol=1e-12, atol=1e-15)
