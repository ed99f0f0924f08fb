"""Written LBM fields at walls: boundary cells carry their velocity, and the vorticity next to a wall
uses the wall velocity at the half-way wall (never a solid cell's zero)."""

from pathlib import Path

import numpy as np
import pytest

from hpcsolve import run as runmod
from hpcsolve.lbm import observables as obs
from hpcsolve.lbm.flags import FLUID, OUTLET, VELOCITY, WALL

CASES = Path(__file__).parent.parent.parent / "cases"


def _channel(ny=18, nx=6, top=WALL):
    flags = np.full((ny, nx), FLUID, dtype=np.uint8)
    flags[0, :], flags[-1, :] = WALL, top
    y = np.arange(ny) - 0.5          # cell centres measured from the bottom wall (half-way below row 1)
    return flags, y, ny - 2          # channel height in cells


def test_poiseuille_vorticity_is_exact_up_to_the_walls():
    flags, y, H = _channel()
    U = 0.05
    profile = 4 * U * y * (H - y) / H**2
    ux = np.repeat(profile[:, None], flags.shape[1], axis=1)
    ux[flags != FLUID] = 0.0
    uy = np.zeros_like(ux)
    fluid = flags == FLUID
    w = obs.vorticity(ux, uy, fluid)
    exact = -4 * U * (H - 2 * y) / H**2
    err = np.max(np.abs(w - exact[:, None])[fluid]) / np.max(np.abs(exact))
    assert err < 1e-12
    old = np.where(fluid, np.gradient(uy, axis=1) - np.gradient(ux, axis=0), 0.0)   # solid zeros at distance 1
    assert np.max(np.abs(old - exact[:, None])[fluid]) / np.max(np.abs(exact)) > 0.1


def test_couette_vorticity_uses_the_moving_wall_velocity():
    flags, y, H = _channel(top=VELOCITY)
    U = 0.1
    wall = np.zeros((2,) + flags.shape)
    wall[0][flags == VELOCITY] = U
    ux = np.repeat((U * y / H)[:, None], flags.shape[1], axis=1)
    ux[flags != FLUID] = 0.0
    uy = np.zeros_like(ux)
    fluid = flags == FLUID
    w = obs.vorticity(ux, uy, fluid, wall[0], wall[1])
    assert np.allclose(w[fluid], -U / H, rtol=1e-12, atol=0)
    bx, by = obs.boundary_field_velocity(ux, uy, flags, wall, FLUID, VELOCITY, OUTLET)
    assert np.all(bx[-1] == U) and np.all(bx[0] == 0.0) and np.array_equal(bx[fluid], ux[fluid])


def test_an_outlet_shows_its_neighbours_velocity_and_one_sided_derivatives():
    flags = np.full((6, 8), FLUID, dtype=np.uint8)
    flags[:, -1], flags[:, 0] = OUTLET, VELOCITY                # an inlet-outlet channel (x wraps)
    ux = np.tile(np.linspace(0.0, 0.07, 8), (6, 1)) ** 2       # quadratic in x: one-sided 2nd order is exact
    uy = ux.copy()
    wall = np.zeros((2,) + flags.shape)
    bx, _ = obs.boundary_field_velocity(ux, uy, flags, wall, FLUID, VELOCITY, OUTLET)
    assert np.allclose(bx[:, -1], ux[:, -2])                     # the fluid neighbour's velocity
    dudx = obs.wall_derivative(uy, wall[1], flags == FLUID, flags == OUTLET, axis=1)
    x = np.linspace(0.0, 0.07, 8)
    exact = 2 * x * (x[1] - x[0])                                 # d(x^2)/d(index)
    assert np.allclose(dudx[:, -2], exact[-2], rtol=1e-10)       # next to the outlet: backward differences


def test_cavity_lid_row_and_the_vorticity_below_it_converge_with_resolution():
    values = []
    for n in (16, 32, 64):
        res = runmod.run_case(CASES / "lid_driven_cavity.toml", "numpy", progress=False,
                              overrides=[f"lattice.resolution={n}", "time.end_time=2", "steady.enabled=false"])
        vel, w, flags = res.fields["velocity"], res.fields["vorticity"], res.fields["flags"]
        lid = flags == VELOCITY
        assert np.allclose(vel[..., 0][lid], 1.0)                 # the lid moves at 1 m/s in the written field
        first = np.flatnonzero((flags == FLUID).any(axis=1))[-1]  # first fluid row below the lid
        row = w[first]
        interior = slice(int(0.25 * row.size), int(0.75 * row.size))
        assert np.all(row[interior] < 0)                          # du/dy > 0 below a lid moving in +x
        values.append(float(np.mean(row[row.size // 2 - 1:row.size // 2 + 1])))
    d1, d2 = abs(values[1] - values[0]), abs(values[2] - values[1])
    assert d2 < d1, values                                        # converging toward the wall vorticity
