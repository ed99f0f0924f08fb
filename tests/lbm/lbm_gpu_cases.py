"""Small geometries that exercise every boundary rule, shared by the GPU and CUDA-simulator tests."""

import numpy as np

from hpcsolve.lbm.flags import OUTLET, VELOCITY, WALL
from hpcsolve.lbm.steppers.stepper import LBMSetup


def _perturbed_initial_state(ny, nx, seed, amplitude):
    rng = np.random.default_rng(seed)
    rho = 1.0 + 0.01 * rng.standard_normal((ny, nx))
    u = amplitude * rng.standard_normal((2, ny, nx))
    return rho, u


def channel(nx=10, ny=8, collision="bgk", policy=None, seed=1, characteristic=True):
    """Inlet (VELOCITY, parabolic) left, OUTLET right, walls top and bottom, a 2x2 WALL obstacle inside,
    random initial density/velocity: walls, velocity, outlet, obstacle links. The outlet's lower rows hold a
    reference outflow (the characteristic rule, ``physics.outlet_density``), its upper rows none (fixed
    pressure), so that both outlet rules are in every comparison. ``characteristic=False``: no reference
    outflow at all (the kernels compiled without the characteristic lookup)."""
    flags = np.zeros((ny, nx), np.uint8)
    flags[0, :] = flags[-1, :] = WALL
    flags[1:-1, 0] = VELOCITY
    flags[1:-1, -1] = OUTLET
    cy, cx = ny // 2, nx // 2
    flags[cy - 1:cy + 1, cx - 1:cx + 1] = WALL
    bv = np.zeros((2, ny, nx))
    y = np.arange(1, ny - 1) - 0.5
    h = ny - 2
    bv[0, 1:-1, 0] = 0.06 * 4 * y * (h - y) / h**2 + 0.01
    bv[1, 1:-1, 0] = 0.005
    low = slice(1, ny // 2)
    if characteristic:
        bv[0, low, -1] = bv[0, low, 0]      # characteristic outlet rows: the inlet's profile as reference outflow
    rho, u = _perturbed_initial_state(ny, nx, seed, 0.02)
    kw = {} if policy is None else {"policy": policy}
    return LBMSetup(flags=flags, relaxation_time=0.62, collision=collision, boundary_velocity=bv,
                    initial_density=rho, initial_velocity=u, **kw)


def periodic_couette(nx=9, ny=7, collision="bgk", policy=None, seed=2):
    """Periodic in x (wrap across the domain edge), resting wall bottom, moving wall top (tangential
    and normal wall velocity components), random initial state: periodic wrap + moving wall."""
    flags = np.zeros((ny, nx), np.uint8)
    flags[0, :] = WALL
    flags[-1, :] = VELOCITY
    bv = np.zeros((2, ny, nx))
    bv[0, -1, :] = 0.05 + 0.01 * np.arange(nx) / nx
    rho, u = _perturbed_initial_state(ny, nx, seed, 0.02)
    kw = {} if policy is None else {"policy": policy}
    return LBMSetup(flags=flags, relaxation_time=0.75, collision=collision, boundary_velocity=bv,
                    initial_density=rho, initial_velocity=u, **kw)


def fully_periodic(nx=8, ny=6, collision="bgk", policy=None, seed=3):
    """No boundary at all: wrap in x and y on every side."""
    rho, u = _perturbed_initial_state(ny, nx, seed, 0.03)
    kw = {} if policy is None else {"policy": policy}
    return LBMSetup(flags=np.zeros((ny, nx), np.uint8), relaxation_time=0.55, collision=collision,
                    initial_density=rho, initial_velocity=u, **kw)


GEOMETRIES = {"channel": channel, "periodic_couette": periodic_couette, "fully_periodic": fully_periodic}


def obstacle_mask(setup):
    """The obstacle of ``channel`` (WALL cells not on the outer rows)."""
    m = setup.flags == WALL
    m[0, :] = m[-1, :] = False
    return m


def rel_diff(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def shifted(stepper):
    """The stored state as the physics sees it: h = decode(g), float64."""
    return stepper.policy.decode(stepper.populations()).astype(np.float64)


def channel_with_bouzidi(nx=10, ny=8, collision="bgk", policy=None, seed=1):
    """``channel`` whose obstacle has interpolated (Bouzidi) links, wall fractions 0.3 and 0.8
    alternating (both branches of the rule, q < 1/2 with its fall-back where the far cell is solid)."""
    from hpcsolve.lbm.boundaries import bouzidi

    setup = channel(nx=nx, ny=ny, collision=collision, policy=policy, seed=seed)
    links = bouzidi.build_links(setup.flags, [(obstacle_mask(setup),
                                               lambda j, i, cx, cy: np.where((i + j) % 2 == 0, 0.3, 0.8))])
    setup.links = links
    setup.__post_init__()  # validate the links against the flags
    return setup


def with_layer(setup, strength=0.8):
    """``setup`` with an absorbing layer (``boundaries.layer``) over its right half, rising over a quarter of nx:
    the cells left of nx / 4 have none, those right of nx / 2 the full ``strength``."""
    import dataclasses

    from hpcsolve.lbm.boundaries.layer import AbsorbingLayer

    nx = setup.shape[1]
    ramp = nx / 4
    return dataclasses.replace(setup, absorbing_layer=AbsorbingLayer(c0=-(nx / 4) / ramp, kx=1 / ramp, ky=0.0,
                                                                      strength=strength))
