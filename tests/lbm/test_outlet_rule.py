"""The outlet rules: anti-bounce-back at a fixed density, and the characteristic outlet
(``boundaries.outlet = "characteristic"``, ``physics.outlet_density``) that lets sound leave.

A plane sound pulse (a simple wave: drho = A exp(-(x - x0)^2 / s^2), u' = c_s drho) runs into the outlet
of a channel periodic across; what comes back is the reflection. The GPU kernels get the same rule from
``physics`` (compared against this reference in test_cudasim_lbm.py / test_gpu_lbm.py, whose channel has
rows of both rules)."""

from __future__ import annotations

import numpy as np
import pytest

from hpcsolve.core.cases import load_case
from hpcsolve.core.errors import CaseError
from hpcsolve.lbm import lattice, physics
from hpcsolve.lbm.flags import OUTLET, VELOCITY
from hpcsolve.lbm.setup import build_setup
from hpcsolve.lbm.steppers.stepper import LBMSetup, get_stepper
from hpcsolve.core.precision import FP64, get_precision

U0, AMP = 0.05, 1e-3


def _reflection(outlet: str, nx: int = 240, ny: int = 4) -> tuple[float, float]:
    """(largest |drho| arriving at the outlet side, largest |drho| back in the left half after the reflection)."""
    flags = np.zeros((ny, nx), np.uint8)
    flags[:, 0], flags[:, -1] = VELOCITY, OUTLET
    bv = np.zeros((2, ny, nx))
    bv[0, :, 0] = U0
    if outlet == "characteristic":
        bv[0, :, -1] = U0
    x = np.arange(nx)
    g = AMP * np.exp(-((x - nx / 2) / 8.0) ** 2)
    u = np.zeros((2, ny, nx))
    u[0] = U0 + g * np.sqrt(lattice.CS2)
    st = get_stepper("numpy", LBMSetup(flags, 0.8, collision="bgk", policy=FP64, boundary_velocity=bv,
                                       initial_density=np.broadcast_to(1.0 + g, (ny, nx)).copy(), initial_velocity=u))
    st.step(150)                      # the pulse is in the right half, not yet at the outlet
    arriving = float(np.abs(st.macroscopic()[0][1, nx // 2:-1] - 1.0).max())
    st.step(270)                      # to the outlet and (what reflects) back past the middle
    back = float(np.abs(st.macroscopic()[0][1, 1:nx // 2] - 1.0).max())
    return arriving, back


def test_characteristic_outlet_lets_a_sound_pulse_out():
    """The fixed-density outlet sends most of the pulse back (an open pipe end); the characteristic one less
    than 1 % of it (seen: 0.78 and 0.004)."""
    arriving, back = _reflection("pressure")
    assert arriving > 0.5 * AMP and back > 0.5 * arriving
    arriving_c, back_c = _reflection("characteristic")
    assert arriving_c == pytest.approx(arriving, rel=1e-9)        # the same pulse reaches either outlet
    assert back_c < 0.01 * arriving_c, back_c / arriving_c


def test_outlet_density_is_the_normal_velocity_excess_over_c_s():
    P = physics.physics_for(np.float64)
    assert P.outlet_density(0.07, 0.01, 0.05, 0.0) == pytest.approx((0.07 - 0.05) / np.sqrt(lattice.CS2))
    assert P.outlet_density(0.01, -0.08, 0.0, -0.05) == pytest.approx(0.03 / np.sqrt(lattice.CS2))   # outflow -y
    assert P.outlet_density(0.3, 0.2, 0.0, 0.0) == 0.0                 # no reference: the fixed-pressure outlet
    # with drho_w = 0 the rule is the fixed-pressure one, bit for bit
    h, w, cx, cy, ux, uy = 0.0123, 1 / 9, 1.0, 0.0, 0.04, 0.003
    cu = cx * ux + cy * uy
    assert P.pressure_anti_bounce_back(h, w, cx, cy, ux, uy, 0.0) == -h + 2 * w * (4.5 * cu * cu - 1.5 * (ux * ux + uy * uy))


def test_characteristic_case_takes_the_inlet_profile_as_reference_outflow():
    case = load_case("cases/cylinder_2d1.toml", ["lattice.resolution=10", "boundaries.outlet=characteristic"])
    _, _, setup = build_setup(case, get_precision("fp64", "lbm"))
    inlet, outlet = setup.flags[:, 0] == VELOCITY, setup.flags[:, -1] == OUTLET
    assert inlet.sum() == outlet.sum() > 10
    assert np.array_equal(setup.boundary_velocity[:, outlet, -1], setup.boundary_velocity[:, inlet, 0])
    plain = build_setup(load_case("cases/cylinder_2d1.toml", ["lattice.resolution=10"]), FP64)[2]
    assert not plain.boundary_velocity[:, :, -1].any()               # the default outlet holds rho = 1


def test_characteristic_outlet_needs_an_inlet_opposite():
    with pytest.raises(CaseError, match="boundaries.left.*'inlet'"):
        load_case("cases/cylinder_2d1.toml", ["boundaries.outlet=characteristic", "boundaries.left=wall"])
    with pytest.raises(CaseError, match="needs a side that is 'outlet'"):
        load_case("cases/lid_driven_cavity.toml", ["boundaries.outlet=characteristic"])
