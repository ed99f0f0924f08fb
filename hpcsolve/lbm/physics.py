"""LBM physics, defined once: moments, equilibrium, BGK and TRT collision (and their bulk relaxation in an
absorbing layer), boundary rules.

Every function here is *arithmetic only* (``+ - * /``, tuple indexing, no ``np.*`` calls),
so one definition serves

- the NumPy reference (arguments are NumPy arrays, evaluated element-wise), and
- GPU kernels: ``physics_for(np.float32, jit=numba.cuda.jit(device=True))`` returns the same
  functions compiled as Numba device functions (arguments are scalars).

All populations are *shifted*: ``h_i = f_i - w_i`` (the rest-state equilibrium subtracted),
so that their digits are spent on the deviation from rest, not on the constant w_i (see
docs/design/lbm_algorithm.md). ``drho = rho - 1``. Velocities are in lattice units.

Numeric constants are captured per compute dtype (``np.float32(4.5)`` etc.), so a float32
kernel does float32 arithmetic: Numba freezes closure variables as typed constants, and NumPy
keeps float32 arrays float32 when multiplied by np.float32 scalars.
"""

from __future__ import annotations

import functools
import math
from types import SimpleNamespace

import numpy as np

from hpcsolve.lbm import lattice


def _identity(fn):
    return fn


def physics_for(dtype=np.float64, jit=None) -> SimpleNamespace:
    """The physics functions with constants typed as ``dtype`` (the policy's compute dtype).

    ``jit``: a decorator applied to every function, in dependency order (e.g.
    ``numba.cuda.jit(device=True)`` or ``numba.njit``); None for plain Python/NumPy.
    """
    dtype = np.dtype(dtype)
    if jit is None:
        return _numpy_physics(dtype.type)
    return _build(dtype.type, jit)


@functools.lru_cache(maxsize=None)
def _numpy_physics(scalar_type) -> SimpleNamespace:
    return _build(scalar_type, _identity)


def _build(T, jit) -> SimpleNamespace:
    """Every physics function with constants typed ``T``, each wrapped in ``jit`` (callees first). The functions
    are closures: Numba freezes their constants (and the functions they call) as typed values per dtype."""
    moments, equilibrium = _moments(T, jit)
    return SimpleNamespace(
        dtype=np.dtype(T), ZERO=T(0.0), ONE=T(1.0),
        W=tuple(T(w) for w in lattice.WEIGHTS),
        CX=tuple(T(c) for c in lattice.CX), CY=tuple(T(c) for c in lattice.CY),
        moments=moments, equilibrium=equilibrium,
        **_collisions(T, jit, moments, equilibrium), **_boundary_rules(T, jit))


def _moments(T, jit):
    """(moments, equilibrium) of the shifted populations."""
    ONE, THREE, C45, C15 = T(1.0), T(3.0), T(4.5), T(1.5)
    W0, W1, W2 = T(lattice.WEIGHTS[0]), T(lattice.WEIGHTS[1]), T(lattice.WEIGHTS[5])

    @jit
    def moments(h):
        """(drho, ux, uy) from the 9 shifted populations; fixed summation order."""
        drho = h[0] + h[1] + h[2] + h[3] + h[4] + h[5] + h[6] + h[7] + h[8]
        jx = (h[1] + h[5] + h[8]) - (h[3] + h[6] + h[7])
        jy = (h[2] + h[5] + h[6]) - (h[4] + h[7] + h[8])
        rho = ONE + drho
        return drho, jx / rho, jy / rho

    @jit
    def equilibrium(drho, ux, uy):
        """Shifted second-order equilibrium h_i^eq = w_i (drho + rho (3 cu + 4.5 cu^2 - 1.5 u^2)). The opposite
        directions' pairs are written out: one device function for a pair cost the Numba
        fp64 in-place step 4-5 % on the H200 (512^2, 3 interleaved rounds: 24,400 -> 22,800-23,700 MLUPS)."""
        rho = ONE + drho
        usq = C15 * (ux * ux + uy * uy)
        e0 = W0 * (drho - rho * usq)
        # axis directions 1..4: cu = +ux, +uy, -ux, -uy
        a1 = rho * (C45 * ux * ux - usq)
        a2 = rho * (C45 * uy * uy - usq)
        e1 = W1 * (drho + rho * THREE * ux + a1)
        e3 = W1 * (drho - rho * THREE * ux + a1)
        e2 = W1 * (drho + rho * THREE * uy + a2)
        e4 = W1 * (drho - rho * THREE * uy + a2)
        # diagonals: 5 (+,+), 7 (-,-) share cu = ux + uy; 6 (-,+), 8 (+,-) share cu = uy - ux
        s = ux + uy
        d = uy - ux
        bs = rho * (C45 * s * s - usq)
        bd = rho * (C45 * d * d - usq)
        e5 = W2 * (drho + rho * THREE * s + bs)
        e7 = W2 * (drho - rho * THREE * s + bs)
        e6 = W2 * (drho + rho * THREE * d + bd)
        e8 = W2 * (drho - rho * THREE * d + bd)
        return (e0, e1, e2, e3, e4, e5, e6, e7, e8)

    return moments, equilibrium


def _collisions(T, jit, moments, equilibrium) -> dict:
    """BGK and TRT collision, and the bulk relaxation of an absorbing layer, on top of ``moments`` and
    ``equilibrium`` (``_moments``)."""
    TWO, HALF, C23, C112 = T(2.0), T(0.5), T(2.0 / 3.0), T(1.0 / 12.0)

    @jit
    def collide_bgk(h, omega):
        """BGK: h_i* = h_i - omega (h_i - h_i^eq). Returns the 9 post-collision populations."""
        drho, ux, uy = moments(h)
        e = equilibrium(drho, ux, uy)
        return (h[0] - omega * (h[0] - e[0]), h[1] - omega * (h[1] - e[1]),
                h[2] - omega * (h[2] - e[2]), h[3] - omega * (h[3] - e[3]),
                h[4] - omega * (h[4] - e[4]), h[5] - omega * (h[5] - e[5]),
                h[6] - omega * (h[6] - e[6]), h[7] - omega * (h[7] - e[7]),
                h[8] - omega * (h[8] - e[8]))

    @jit
    def trt_pair(hi, hj, ei, ej, omega_plus, omega_minus):
        """TRT relaxation of one pair (i, opposite(i)): symmetric part with omega+, antisymmetric with omega-."""
        sym = omega_plus * ((hi + hj) * HALF - (ei + ej) * HALF)
        asym = omega_minus * ((hi - hj) * HALF - (ei - ej) * HALF)
        return hi - sym - asym, hj - sym + asym

    @jit
    def collide_trt(h, omega_plus, omega_minus):
        """TRT with pairs (1,3), (2,4), (5,7), (6,8); the rest population relaxes with omega+."""
        drho, ux, uy = moments(h)
        e = equilibrium(drho, ux, uy)
        p1, p3 = trt_pair(h[1], h[3], e[1], e[3], omega_plus, omega_minus)
        p2, p4 = trt_pair(h[2], h[4], e[2], e[4], omega_plus, omega_minus)
        p5, p7 = trt_pair(h[5], h[7], e[5], e[7], omega_plus, omega_minus)
        p6, p8 = trt_pair(h[6], h[8], e[6], e[8], omega_plus, omega_minus)
        return (h[0] - omega_plus * (h[0] - e[0]), p1, p2, p3, p4, p5, p6, p7, p8)

    @jit
    def bulk_trace(h, e):
        """Trace of the non-equilibrium second moment, sum_i |c_i|^2 (h_i - h_i^eq) (the bulk mode)."""
        return (((h[1] - e[1]) + (h[2] - e[2])) + ((h[3] - e[3]) + (h[4] - e[4]))
                + TWO * (((h[5] - e[5]) + (h[6] - e[6])) + ((h[7] - e[7]) + (h[8] - e[8]))))

    @jit
    def add_bulk_relaxation(p, h, layer):
        """Post-collision populations ``p`` with the trace of the non-equilibrium stress relaxed further by
        ``layer`` = omega+ - s_b >= 0 (absorbing layer, hpcsolve/lbm/boundaries/layer.py): the trace T then
        relaxes at s_b, the bulk viscosity is c_s^2 (1/s_b - 1/2) while the shear viscosity, mass and momentum
        stay. The change is along the second-order Hermite polynomial of the trace, (9/4) w_i (|c_i|^2 - 2 c_s^2) T:
        -2/3 b on the rest population, +b/12 on the others, b = layer T (sum |c_i|^2 change = layer T, sum 0).
        Projected on the Hermite polynomial rather than the orthogonal MRT vector (-4, -1, 2): that one went
        unstable at tau = 0.57 (bulk rate 0.5); this one stays stable down to a rate of 0.04 (docs)."""
        drho, ux, uy = moments(h)
        b = layer * bulk_trace(h, equilibrium(drho, ux, uy))
        r = b * C112
        return (p[0] - b * C23, p[1] + r, p[2] + r, p[3] + r, p[4] + r, p[5] + r, p[6] + r, p[7] + r, p[8] + r)

    @jit
    def collide_bgk_layer(h, omega, layer):
        """BGK with the bulk mode relaxed at omega - layer (``add_bulk_relaxation``)."""
        return add_bulk_relaxation(collide_bgk(h, omega), h, layer)

    @jit
    def collide_trt_layer(h, omega_plus, omega_minus, layer):
        """TRT with the bulk mode relaxed at omega+ - layer (``add_bulk_relaxation``)."""
        return add_bulk_relaxation(collide_trt(h, omega_plus, omega_minus), h, layer)

    return dict(collide_bgk=collide_bgk, collide_trt=collide_trt, bulk_trace=bulk_trace,
                add_bulk_relaxation=add_bulk_relaxation, collide_bgk_layer=collide_bgk_layer,
                collide_trt_layer=collide_trt_layer, trt_pair=trt_pair)


def _boundary_rules(T, jit) -> dict:
    """The boundary rules: bounce-back (resting, moving, interpolated), anti-bounce-back, the outlet density."""
    ONE, TWO, HALF, SIX, C45, C15 = T(1.0), T(2.0), T(0.5), T(6.0), T(4.5), T(1.5)
    SQRT3, TINY = T(np.sqrt(3.0)), T(1e-30)         # 1 / c_s; TINY keeps u_ref = 0 at 0 / TINY = 0

    @jit
    def wall_bounce_back(h_opp_post):
        """Half-way bounce-back on a resting wall: f_i(x, t+1) = f*_opp(i)(x, t) (w_i = w_opp: same shifted)."""
        return h_opp_post

    @jit
    def velocity_bounce_back(h_opp_post, w_i, cx_i, cy_i, uwx, uwy):
        """Moving wall / velocity inlet (rho_w = 1): f_i = f*_opp(i) + 6 w_i rho_w (c_i . u_w)."""
        return h_opp_post + SIX * w_i * (cx_i * uwx + cy_i * uwy)

    @jit
    def pressure_anti_bounce_back(h_opp_post, w_i, cx_i, cy_i, ux, uy, drho_w):
        """Pressure outlet at rho_w = 1 + drho_w (Krueger et al. 2017 eq. 5.53), u_w = the fluid cell's own u:
        f_i = -f*_opp(i) + 2 w_i rho_w (1 + 4.5 (c_i.u_w)^2 - 1.5 u_w^2); shifted,
        h_i = -h*_opp(i) + 2 w_i (4.5 (c_i.u_w)^2 - 1.5 u_w^2) + 2 w_i drho_w (1 + 4.5 (c_i.u_w)^2 - 1.5 u_w^2)
        (drho_w = 0: the fixed-pressure outlet, the last term exactly 0)."""
        cu = cx_i * ux + cy_i * uy
        q = C45 * cu * cu - C15 * (ux * ux + uy * uy)
        return -h_opp_post + TWO * w_i * q + TWO * w_i * drho_w * (ONE + q)

    @jit
    def outlet_density(ux, uy, urx, ury):
        """drho_w of the characteristic (non-reflecting) outlet: the incoming Riemann invariant u_n - c_s drho
        held at its reference value, drho_w = (u_n - u_ref,n) / c_s, the normal n = u_ref / |u_ref| taken from
        the reference outflow u_ref of the outlet cell (an outgoing sound wave, drho = u'_n / c_s, leaves
        without a reflected one). u_ref = 0 (a fixed-pressure outlet, or the first smooth-start step): 0."""
        ur2 = urx * urx + ury * ury
        return SQRT3 * (ux * urx + uy * ury - ur2) / (ur2 ** HALF + TINY)

    @jit
    def interpolated_bounce_back(h_near, h_far, a, b):
        """Interpolated bounce-back on a curved resting wall (Bouzidi, Firdaouss & Lallemand 2001,
        linear): f_i(x, t+1) = a f*_ib(x) + b f*_j(y) with a + b = 1, so the same weights apply to
        the shifted values (w_i = w_ib). a, b and the far population (j, y) depend on the wall
        fraction q of the link (hpcsolve/lbm/boundaries/bouzidi.py)."""
        return a * h_near + b * h_far

    return dict(wall_bounce_back=wall_bounce_back, velocity_bounce_back=velocity_bounce_back,
                pressure_anti_bounce_back=pressure_anti_bounce_back, outlet_density=outlet_density,
                interpolated_bounce_back=interpolated_bounce_back)


# ------------------------------------------------------------------------------------------------
# relaxation parameters (host side, float64)

def omega_from_tau(tau: float) -> float:
    return 1.0 / tau


def trt_omegas(tau: float, magic: float = 3.0 / 16.0) -> tuple[float, float]:
    """(omega+, omega-) for TRT: omega+ = 1/tau sets the viscosity; the magic parameter
    Lambda = (1/omega+ - 1/2)(1/omega- - 1/2) fixes omega-. Lambda = 3/16 puts a half-way
    bounce-back wall exactly half-way for Poiseuille flow."""
    lam_plus = tau - 0.5
    lam_minus = magic / lam_plus
    return 1.0 / tau, 1.0 / (lam_minus + 0.5)


def ramp_factor(step: int, ramp_steps: int) -> float:
    """Factor on every boundary velocity (velocity inlets, moving walls) during the time step that
    ends at ``step`` (1, 2, ...): a smooth start sin^2(pi/2 step / ramp_steps), 1 from ``ramp_steps``
    on (and always when ``ramp_steps`` is 0). Its time derivative is a half-sine pulse, so a ramp
    over several acoustic periods of the domain barely excites the weakly damped standing sound
    waves an impulsive start leaves between a velocity inlet and a pressure outlet
    (docs/design/lbm_algorithm.md, "Smooth start")."""
    if ramp_steps <= 0 or step >= ramp_steps:
        return 1.0
    if step <= 0:
        return 0.0
    return math.sin(0.5 * math.pi * step / ramp_steps) ** 2


def viscosity_from_tau(tau: float) -> float:
    """Kinematic viscosity in lattice units: nu = c_s^2 (tau - 1/2)."""
    return lattice.CS2 * (tau - 0.5)


def tau_from_viscosity(nu: float) -> float:
    return nu / lattice.CS2 + 0.5
