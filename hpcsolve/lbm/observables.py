"""Observables computed from macroscopic fields (host NumPy arrays, lattice units unless named).

Reference solutions and published data used for the validation metrics live here too.
"""

from __future__ import annotations

import csv
import math
import tomllib
from functools import lru_cache
from importlib import resources

import numpy as np

from hpcsolve.core import scaled
from hpcsolve.core.backends import get_array_module

# ------------------------------------------------------------------------------------------------
# fields


def vorticity(ux: np.ndarray, uy: np.ndarray, fluid: np.ndarray | None = None,
              wall_ux: np.ndarray | None = None, wall_uy: np.ndarray | None = None,
              open_boundary: np.ndarray | None = None) -> np.ndarray:
    """omega_z = d uy/dx - d ux/dy (lattice units, per step); 0 off-fluid.

    Without ``fluid``: central differences everywhere (periodic wrap). With it, derivatives at fluid
    cells never use a non-fluid cell's value: a non-fluid neighbour is a wall half-way between the two
    cell centres (bounce-back), moving with (``wall_ux``, ``wall_uy``) at that neighbour (default at
    rest), and the derivative comes from the quadratic through the wall value at distance 1/2, the
    cell and the fluid neighbour on the other side (exact for a parabolic profile). A neighbour in
    ``open_boundary`` (outlet cells) has no prescribed velocity: the derivative there is one-sided
    over fluid cells only.

    The fluid cells within OPEN_LAYER cells of an open boundary take the vorticity of the first cell beyond (along
    the boundary's normal): their velocity, or their difference stencil, carries the outlet rule's correction
    rather than the flow. The characteristic outlet holds
    a density that varies along the outlet (rho_w = 1 + (u_n - u_ref) / c_s per row), and that transverse pressure
    gradient drives a transverse velocity in the last fluid column (2D-2 at D = 10, Re 40, 3,000 steps: u_y up to
    0.4 m/s there against 0.03-0.08 inward; the column before it alternates in sign), whose x-derivative drew a +-
    stripe over the last three columns, up to 4x the vorticity anywhere inside (at D = 20 too; fp64 as well; the
    fixed-pressure outlet shows none). The velocity field keeps it as computed."""
    if fluid is None:
        return np.gradient(uy, axis=1) - np.gradient(ux, axis=0)
    fluid = np.asarray(fluid, dtype=bool)
    zeros = np.zeros_like(ux, dtype=np.float64)
    wx = zeros if wall_ux is None else np.asarray(wall_ux, dtype=np.float64)
    wy = zeros if wall_uy is None else np.asarray(wall_uy, dtype=np.float64)
    open_b = np.zeros_like(fluid) if open_boundary is None else np.asarray(open_boundary, dtype=bool)
    w = wall_derivative(uy, wy, fluid, open_b, axis=1) - wall_derivative(ux, wx, fluid, open_b, axis=0)
    if open_b.any():
        w = inward_at_open(w, fluid, open_b)
    return np.where(fluid, w, 0.0)


#: fluid cells this deep from an open boundary take the vorticity of the next one inward (``vorticity``): the
#: outlet rule perturbs the velocity of the last two fluid cells and a central difference reaches one more
OPEN_LAYER = 3


def inward_at_open(w: np.ndarray, fluid: np.ndarray, open_b: np.ndarray, depth: int = OPEN_LAYER) -> np.ndarray:
    """``w`` with the fluid cells within ``depth`` cells of an open boundary cell (along an axis, through fluid)
    given the value of the fluid cell ``depth + 1`` cells from it on the same line, where that line is fluid
    (``vorticity``)."""
    out = np.array(w, dtype=np.float64)
    for axis in (0, 1):
        for s in (1, -1):                       # the open cell lies at i + s * d
            for d in range(depth, 0, -1):
                near = fluid & np.roll(open_b, -s * d, axis=axis)
                for k in range(1, d):           # the cells between are fluid
                    near &= np.roll(fluid, -s * k, axis=axis)
                back = depth + 1 - d            # the source cell i - s * back, and the cells up to it, are fluid
                for k in range(1, back + 1):
                    near &= np.roll(fluid, s * k, axis=axis)
                out = np.where(near, np.roll(w, s * back, axis=axis), out)
    return out


def wall_derivative(f: np.ndarray, wall: np.ndarray, fluid: np.ndarray, open_b: np.ndarray, axis: int) -> np.ndarray:
    """df/d(axis) at fluid cells (unit spacing, periodic wrap), with half-way walls carrying ``wall``.

    Each side of a cell contributes a sample: the fluid neighbour's value at distance 1, or the wall
    value at distance 1/2; the derivative is the exact one of the quadratic through the two samples
    and the cell (central difference when both neighbours are fluid). An open side (``open_b``) or a
    side with no sample falls back to a one-sided difference over the fluid cells of the other side."""
    f = np.asarray(f, dtype=np.float64)

    def side(shift):
        nb = np.roll(f, shift, axis=axis)
        nb_fluid = np.roll(fluid, shift, axis=axis)
        nb_open = np.roll(open_b, shift, axis=axis)
        value = np.where(nb_fluid, nb, np.roll(wall, shift, axis=axis))
        dist = np.where(nb_fluid, 1.0, 0.5)
        return value, dist, ~nb_open

    (fm, am, okm), (fp, ap, okp) = side(1), side(-1)       # minus side (index - 1), plus side (index + 1)
    both = okm & okp
    with np.errstate(divide="ignore", invalid="ignore"):
        # f'(0) through (-am, fm), (0, f), (ap, fp)
        central = (-ap / (am * (am + ap)) * fm + (ap - am) / (am * ap) * f + am / (ap * (am + ap)) * fp)
    out = np.where(both, central, 0.0)
    # one-sided over fluid cells where one side is open: second order if two fluid cells lie there
    f2p, f2m = np.roll(f, -2, axis=axis), np.roll(f, 2, axis=axis)
    fl2p, fl2m = np.roll(fluid, -2, axis=axis), np.roll(fluid, 2, axis=axis)
    flp, flm = np.roll(fluid, -1, axis=axis), np.roll(fluid, 1, axis=axis)
    fwd = np.where(flp & fl2p, (-3 * f + 4 * np.roll(f, -1, axis=axis) - f2p) / 2, np.roll(f, -1, axis=axis) - f)
    bwd = np.where(flm & fl2m, (3 * f - 4 * np.roll(f, 1, axis=axis) + f2m) / 2, f - np.roll(f, 1, axis=axis))
    out = np.where(~okm & okp & flp, fwd, out)
    out = np.where(okm & ~okp & flm, bwd, out)
    return out


def boundary_field_velocity(ux: np.ndarray, uy: np.ndarray, flags: np.ndarray, wall_velocity: np.ndarray,
                            fluid_code: int, velocity_code: int, outlet_code: int) -> tuple[np.ndarray, np.ndarray]:
    """The velocity a written field shows at boundary cells: moving walls and inlets their prescribed
    velocity, outlets the mean velocity of their fluid neighbours (the velocity the outlet rule uses),
    resting walls and obstacles 0; fluid cells unchanged."""
    ux, uy = np.array(ux, dtype=np.float64), np.array(uy, dtype=np.float64)
    vel = flags == velocity_code
    ux[vel], uy[vel] = wall_velocity[0][vel], wall_velocity[1][vel]
    out = flags == outlet_code
    if out.any():
        fluid = flags == fluid_code
        sx, sy, count = (np.zeros_like(ux) for _ in range(3))
        for shift, axis in ((1, 0), (-1, 0), (1, 1), (-1, 1)):
            nf = np.roll(fluid, shift, axis=axis)
            sx += np.where(nf, np.roll(ux, shift, axis=axis), 0.0)
            sy += np.where(nf, np.roll(uy, shift, axis=axis), 0.0)
            count += nf
        has = out & (count > 0)
        ux[has], uy[has] = sx[has] / count[has], sy[has] / count[has]
    return ux, uy


def speed(ux, uy):
    return np.hypot(ux, uy)


def kinetic_energy(rho, ux, uy, fluid) -> float:
    """0.5 sum over fluid cells of rho |u|^2. NumPy or CuPy arrays (``fluid`` on the same side); on the device
    only the sum comes back."""
    xp = get_array_module(rho)
    # u scaled by the power of two of its peak first: |u|^2 of a velocity below 1e-154 would underflow (0, or
    # subnormals without digits) although the energy is a normal float64 (the peak pass costs one reduction)
    k = scaled.pow2_exponent(max(scaled.peak(ux), scaled.peak(uy)))
    ux, uy = scaled.ldexp(ux, -k), scaled.ldexp(uy, -k)
    e = float(0.5 * xp.sum(xp.where(fluid, rho * (ux * ux + uy * uy), 0.0)))
    try:
        return math.ldexp(e, 2 * k)
    except OverflowError:
        return math.inf


def peak_speed(ux, uy, fluid) -> float:
    """max |u| over fluid cells (NaN if any is NaN). NumPy or CuPy arrays, as ``kinetic_energy``."""
    xp = get_array_module(ux)
    return float(xp.max(xp.where(fluid, xp.hypot(ux, uy), 0.0)))


def relative_change(u_new: np.ndarray, u_old: np.ndarray) -> float:
    """||u_new - u_old|| / ||u_new|| (2-norms over all given values); inf if u_new is zero."""
    den = scaled.norm2(np.asarray(u_new))          # scaled 2-norms: no underflow for a velocity of 1e-170
    if den == 0.0:
        return math.inf
    return scaled.ratio(scaled.norm2(np.asarray(u_new) - np.asarray(u_old)), den)


def force_coefficients(force: tuple[float, float], u_ref: float, length_cells: float, rho_ref: float = 1.0):
    """(c_D, c_L) = 2 F / (rho U^2 D), all in lattice units."""
    q = 0.5 * rho_ref * u_ref * u_ref * length_cells
    return force[0] / q, force[1] / q


def upward_crossings(times: np.ndarray, signal: np.ndarray, last_fraction: float = 0.5) -> np.ndarray:
    """Times at which ``signal`` crosses its mean upward in its last part (the last ``last_fraction`` of the time
    span; the mean is taken there), by linear interpolation between samples; empty with fewer than 8 samples.
    The phase of a periodic signal counts from these (``strouhal``; hpcsolve/report/periodic.py)."""
    t = np.asarray(times, float)
    y = np.asarray(signal, float)
    keep = t >= t[0] + (1 - last_fraction) * (t[-1] - t[0]) if t.size else np.zeros(0, bool)
    t, y = t[keep], y[keep]
    if t.size < 8:
        return np.zeros(0)
    level, found = y.mean(), np.zeros(0)
    for _ in range(CROSSING_PASSES):
        z = y - level
        idx = np.flatnonzero((z[:-1] < 0) & (z[1:] >= 0))
        found = t[idx] - z[idx] * (t[idx + 1] - t[idx]) / (z[idx + 1] - z[idx])
        if found.size < 2:
            break
        level = _mean_between(t, y, found[0], found[-1])     # the mean over whole cycles
    return found


#: passes of ``upward_crossings``: the samples' mean, then the mean over the whole cycles between the first and the
#: last crossing (twice). The samples' mean over a window that is not a whole number of periods is off by up to
#: amplitude / (2 pi cycles), which moves every crossing by about that over the swing's slope: 7e-4 of a period for
#: 2D-2's 35 cycles, more than the lag of an fp32 run behind fp64's (2.9e-4 on the H100; hpcsolve/report/periodic.py)
CROSSING_PASSES = 3


def _mean_between(t: np.ndarray, y: np.ndarray, a: float, b: float) -> float:
    """The mean of the piecewise-linear signal (t, y) over [a, b] (trapezoid rule, exact for it)."""
    inner = (t > a) & (t < b)
    tt = np.concatenate([[a], t[inner], [b]])
    yy = np.interp(tt, t, y)
    return float(np.sum(0.5 * (yy[1:] + yy[:-1]) * np.diff(tt)) / (b - a))


def strouhal(times: np.ndarray, lift: np.ndarray, length: float, velocity: float, last_fraction: float = 0.5):
    """St = f D / U, f from upward mean-crossings of the lift signal in its last part (linear
    interpolation between samples: ``upward_crossings``). None when fewer than two full periods are seen."""
    crossings = upward_crossings(times, lift, last_fraction)
    if crossings.size < 3:
        return None
    freq = (crossings.size - 1) / (crossings[-1] - crossings[0])
    return float(freq * length / velocity)


# ------------------------------------------------------------------------------------------------
# centerlines and references


def centerline_profiles(ux, uy, geometry, lid_velocity: float):
    """Cavity centerlines, normalized by the lid speed, including the wall values.

    Returns (y, u(x=L/2, y)) and (x, v(x, y=L/2)) with coordinates in units of the cavity side
    (0 and 1 are the half-way walls). The centerline between two cell columns is their mean."""
    p = geometry.pad
    ny, nx = ux.shape
    inner_u = ux[p[2]:ny - p[3], p[0]:nx - p[1]] / lid_velocity
    inner_v = uy[p[2]:ny - p[3], p[0]:nx - p[1]] / lid_velocity
    nyf, nxf = inner_u.shape
    u_mid = _mid(inner_u, axis=1)
    v_mid = _mid(inner_v, axis=0)
    y = np.concatenate([[0.0], (np.arange(nyf) + 0.5) / nyf, [1.0]])
    x = np.concatenate([[0.0], (np.arange(nxf) + 0.5) / nxf, [1.0]])
    u_line = np.concatenate([[0.0], u_mid, [1.0]])  # no-slip bottom, lid at the top
    v_line = np.concatenate([[0.0], v_mid, [0.0]])
    return (y, u_line), (x, v_line)


def _mid(a: np.ndarray, axis: int) -> np.ndarray:
    n = a.shape[axis]
    if n % 2:
        return np.take(a, n // 2, axis=axis)
    return 0.5 * (np.take(a, n // 2 - 1, axis=axis) + np.take(a, n // 2, axis=axis))


@lru_cache(maxsize=None)
def ghia_data() -> dict:
    """{(table, Re): (coord array, value array)} from Ghia, Ghia & Shin (1982)."""
    text = resources.files("hpcsolve.data").joinpath("ghia1982_cavity.csv").read_text()
    rows = [r for r in csv.reader(line for line in text.splitlines() if line and not line.startswith("#"))]
    out: dict = {}
    for table, re, coord, value in rows:
        out.setdefault((table, int(float(re))), []).append((float(coord), float(value)))
    return {k: (np.array([c for c, _ in v]), np.array([x for _, x in v])) for k, v in out.items()}


def ghia_errors(u_line, v_line, reynolds: float) -> dict:
    """Max abs differences (in lid-speed units) of the centerlines from Ghia et al. at their points."""
    re = int(round(reynolds))
    data = ghia_data()
    yg, ug = data[("u_at_x0.5", re)]
    xg, vg = data[("v_at_y0.5", re)]
    du = np.interp(yg, *u_line) - ug
    dv = np.interp(xg, *v_line) - vg
    return {"ghia_u_max_abs_diff": float(np.max(np.abs(du))), "ghia_v_max_abs_diff": float(np.max(np.abs(dv))),
            "ghia_max_abs_diff": float(max(np.max(np.abs(du)), np.max(np.abs(dv))))}


@lru_cache(maxsize=None)
def schafer_turek() -> dict:
    text = resources.files("hpcsolve.data").joinpath("schafer_turek_1996.toml").read_text()
    return tomllib.loads(text)


def taylor_green_velocity(X, Y, length: float, amplitude: float, viscosity: float, time: float):
    """Analytic decaying Taylor-Green vortex on a periodic square of side ``length`` (any consistent units)."""
    k = 2 * math.pi / length
    decay = math.exp(-2 * viscosity * k * k * time)
    ux = -amplitude * np.cos(k * X) * np.sin(k * Y) * decay
    uy = amplitude * np.sin(k * X) * np.cos(k * Y) * decay
    return ux, uy


def taylor_green_pressure(X, Y, length: float, amplitude: float, density: float = 1.0):
    k = 2 * math.pi / length
    return -density * amplitude ** 2 / 4 * (np.cos(2 * k * X) + np.cos(2 * k * Y))


def poiseuille_profile(n: int, mean_velocity: float) -> np.ndarray:
    """Analytic u at the n cell centres of a channel with half-way walls: 6 U y (H - y) / H^2."""
    y = np.arange(n) + 0.5
    return 6.0 * mean_velocity * y * (n - y) / n ** 2


def relative_l2(a: np.ndarray, ref: np.ndarray) -> float:
    return scaled.relative_norm(np.asarray(a) - np.asarray(ref), np.asarray(ref))
