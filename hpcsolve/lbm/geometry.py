"""Geometry: flags, boundary velocities and obstacle masks of a case on the lattice.

Array index (j, i) is row j (y) and column i (x). Non-periodic sides get one layer of boundary
cells. Fluid cell centres sit at x = (i - pad_left + 0.5) dx, y = (j - pad_bottom + 0.5) dx,
so the half-way boundaries lie at x = 0, x = domain.length, y = 0, y = domain.height.
Side layers are laid down left/right first, then bottom/top, so a moving top wall (a lid)
spans the corners, and channel walls cover the corners of inlet and outlet columns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hpcsolve.core.errors import CaseError
from hpcsolve.core.safe_io import load_npy
from hpcsolve.lbm import rules
from hpcsolve.lbm.boundaries import bouzidi
from hpcsolve.lbm.flags import FLUID, WALL


@dataclass
class Geometry:
    flags: np.ndarray                 # (ny, nx) uint8
    boundary_velocity: np.ndarray     # (2, ny, nx) lattice units
    obstacles: list[np.ndarray] = field(default_factory=list)   # (ny, nx) bool mask per obstacle
    measured: list[int] = field(default_factory=list)           # obstacle indices whose force is reported
    pad: tuple[int, int, int, int] = (0, 0, 0, 0)
    dx: float = 1.0
    links: bouzidi.BouzidiLinks | None = None                   # interpolated bounce-back links (None: all simple)
    interpolated: list[int] = field(default_factory=list)       # obstacle indices with bounce_back = "bouzidi"

    @property
    def shape(self) -> tuple[int, int]:
        return self.flags.shape

    def cell_centres(self) -> tuple[np.ndarray, np.ndarray]:
        """Physical x (nx,) and y (ny,) of cell centres, m, measured from the lower-left boundary."""
        ny, nx = self.shape
        x = (np.arange(nx) - self.pad[0] + 0.5) * self.dx
        y = (np.arange(ny) - self.pad[2] + 0.5) * self.dx
        return x, y

    @property
    def fluid(self) -> np.ndarray:
        return self.flags == FLUID


def build(case, derived) -> Geometry:
    """Flags, boundary velocities (lattice units) and obstacle masks of ``case``."""
    b = case.boundaries
    nx, ny, pad = derived.nx, derived.ny, derived.pad
    flags = np.zeros((ny, nx), np.uint8)
    bv = np.zeros((2, ny, nx))
    nyf = ny - pad[2] - pad[3]
    nxf = nx - pad[0] - pad[1]
    rows = slice(pad[2], ny - pad[3])
    cols = slice(pad[0], nx - pad[1])
    side_rule = rules.side_rules()      # each registered rule's case names -> the rule
    for side, col in (("left", 0), ("right", nx - 1)):
        kind = getattr(b, side)
        if kind == "periodic":
            continue
        flags[:, col] = side_rule[kind].flag
        # the rule's velocity of the side: a moving wall's (along y), an inlet's or a characteristic outlet's (x)
        value = side_rule[kind].side_velocity(kind, side, case, nyf)
        if value is not None:
            role, v = value
            if role == "tangential":
                bv[1, :, col] = v
            else:
                bv[0, rows, col] = v
    for side, row in (("bottom", 0), ("top", ny - 1)):
        kind = getattr(b, side)
        if kind == "periodic":
            continue
        flags[row, :] = side_rule[kind].flag
        bv[:, row, :] = 0.0
        value = side_rule[kind].side_velocity(kind, side, case, nxf)
        if value is not None:
            role, v = value
            if role == "tangential":
                bv[0, row, :] = v
            else:
                bv[1, row, cols] = v
    geo = Geometry(flags=flags, boundary_velocity=bv, pad=pad, dx=derived.units.dx)
    x, y = geo.cell_centres()
    X, Y = np.meshgrid(x, y)
    for k, obs in enumerate(case.obstacles):
        with np.errstate(over="ignore", invalid="ignore"):   # far-away shapes overflow to inf: outside
            mask = _obstacle_mask(obs, X, Y, geo, case, k) & (flags == FLUID)
        if not mask.any():
            raise CaseError.invalid(f"obstacles[{k}]", obs.shape, "an obstacle covering at least one fluid cell centre",
                                    why="the obstacle misses every fluid cell (too small for lattice.resolution, or outside the domain)")
        flags[mask] = WALL
        if not (flags == FLUID).any():
            raise CaseError.invalid(f"obstacles[{k}]", obs.shape, "obstacles that leave fluid cells",
                                    why="with this obstacle no fluid cell is left (it covers the whole domain)")
        geo.obstacles.append(mask)
        if obs.measure_force:
            geo.measured.append(k)
    walls = []
    for k, obs in enumerate(case.obstacles):
        if (obs.bounce_back or case.lattice.bounce_back) == "bouzidi":
            geo.interpolated.append(k)
            walls.append((geo.obstacles[k], _fraction_function(obs, x, y, geo.dx)))
    if walls:
        try:
            geo.links = bouzidi.build_links(flags, walls)
        except ValueError as exc:  # a shape whose links wrap around a periodic side, say
            raise CaseError.invalid("obstacles[].bounce_back", "bouzidi", "'simple' for this geometry",
                                    why=str(exc)) from None
    return geo


def _fraction_function(obs, x: np.ndarray, y: np.ndarray, dx: float):
    """fraction(j, i, cx, cy): where the obstacle's exact surface crosses the links from the fluid
    cell centres (x[i], y[j]) along c * dx (q = 1/2 for a mask: its surface is the staircase)."""
    def fraction(j, i, cx, cy):
        px, py = x[i], y[j]
        if obs.shape == "circle":
            return bouzidi.circle_fraction(px, py, cx * dx, cy * dx, obs.center, obs.diameter / 2)
        if obs.shape == "rectangle":
            return bouzidi.rectangle_fraction(px, py, cx * dx, cy * dx, obs.lower, obs.upper)
        return np.full(np.shape(px), 0.5)
    return fraction


def _obstacle_mask(obs, X, Y, geo: Geometry, case, k: int) -> np.ndarray:
    if obs.shape == "circle":
        r = obs.diameter / 2
        return (X - obs.center[0]) ** 2 + (Y - obs.center[1]) ** 2 <= r * r
    if obs.shape == "rectangle":
        return (X >= obs.lower[0]) & (X <= obs.upper[0]) & (Y >= obs.lower[1]) & (Y <= obs.upper[1])

    path = case.base_dir / obs.file
    field_name = f"obstacles[{k}].file"
    ny, nx = geo.shape
    p = geo.pad
    inner = (ny - p[2] - p[3], nx - p[0] - p[1])
    arr = load_npy(path, field_name, shape=inner,
                   allowed=f"an .npy boolean (or numeric) array of shape {inner} (fluid region, rows = y)")
    mask = np.zeros(geo.shape, bool)
    mask[p[2]:ny - p[3], p[0]:nx - p[1]] = arr.astype(bool)
    return mask
