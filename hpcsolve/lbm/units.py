"""Physical <-> lattice units, in one place.

A case gives a Reynolds number, a characteristic length L (m) and velocity U (m/s), the
resolution N (cells across L) and the characteristic velocity in lattice units u_lb. Then

    dx = L / N                    (m per cell)
    dt = dx * u_lb / U            (s per step)
    nu_lb = u_lb * N / Re         (lattice viscosity)
    tau = nu_lb / c_s^2 + 1/2     (relaxation time), c_s^2 = 1/3

Lattice density 1 corresponds to the physical reference density rho (kg/m^3); pressure is
p - p_ref = c_s^2 (rho_lb - 1) rho (dx/dt)^2.

Stable lattices (``hpcsolve.lbm.case.stability``)
-------------------------------------------------
BGK and TRT go unstable as tau -> 1/2 when the flow is fast against the lattice viscosity: the number that decides
is the cell Reynolds number Re_cell = u_peak / nu_lb = 3 u_peak / (tau - 1/2) (= (u_peak / u_lb) Re / N: lowering
lattice.velocity lowers tau but leaves Re_cell as it is; only a finer lattice.resolution or a lower Reynolds number
lowers it). Measured on the NumPy fp64 reference (TRT, magic 3/16; 2026-12-07; each run to the step named or until
it blew up, i.e. a lattice speed above 0.5 at a monitor point every 50 steps):

=========================================================  =====  ======  =================================
setting (``--set``)                                         tau    Re_cell  outcome
=========================================================  =====  ======  =================================
cylinder_2d2 resolution=10 (Re 100, u 0.05)                 0.515  15.0     blew up at step ~1,050
cylinder_2d2 resolution=10 reynolds=80                      0.519  12.0     blew up at step ~3,200
cylinder_2d2 resolution=10 reynolds=67                      0.522  10.05    finite to step 8,000
cylinder_2d2 resolution=10 reynolds=67 velocity=0.025       0.511  10.05    finite to step 8,000
cylinder_2d2 resolution=10 reynolds=53                      0.528  7.95     finite to step 8,000
cylinder_2d2 resolution=20 reynolds=200                     0.515  15.0     blew up at step ~1,200
cylinder_2d2 resolution=20 reynolds=160                     0.519  12.0     blew up at step ~3,250
cylinder_2d2 resolution=20 reynolds=133                     0.523  9.98     finite to step 8,000
cylinder_2d2 resolution=20 (Re 100, shipped physics)        0.530  7.5      finite to step 20,000
poiseuille reynolds=230 / 200 / 150                         0.510+ 21.6-14.1 blew up at step ~500 / 650 / 2,900
poiseuille reynolds=130                                     0.519  12.2     blew up at step ~8,950
poiseuille reynolds=120 / 107                               0.520+ 11.3/10.0 finite to step 10,000
lid_driven_cavity resolution=4 / 5 / 6 (Re 100, u 0.1)      0.512+ 25-16.7  finite to step 10,000
lid_driven_cavity reynolds=1000 resolution=48 / 64 / 80     0.514+ 20.8-12.5 finite to step 20,000
lid_driven_cavity resolution=32 velocity=0.2 / 0.25 / 0.3   0.69+  3.1      finite to step 5,000 (Mach 0.35-0.52)
=========================================================  =====  ======  =================================

So a flow through an inlet or an outlet (or past an obstacle: its wake is what blew the cylinder up) blows up above
Re_cell ~12 whatever the resolution and tau, while a closed box stays finite up to the tau > 0.51 floor
(``case.TAU_MARGIN``) that ``derive`` refuses outright. The rule: ``hpcsolve run`` refuses (unless ``--force``) an
open or obstructed flow above ``CELL_REYNOLDS_MAX`` = 10.5, just inside the smallest Re_cell seen to blow up (12.0),
and ``validate`` warns. The Mach number (u_peak / c_s) is warned about above ``case.U_WARN`` (compressibility
errors ~ Ma^2) and refused at ``case.U_REFUSE``; an obstacle fewer than ``MIN_OBSTACLE_CELLS`` cells across is
warned about as inaccurate (Schafer-Turek 2D-1 at 10 cells across: c_D 5.564 with interpolated bounce-back, 5.637
with the staircase, against the published 5.57-5.59; fewer cells leave a few-cell staircase).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from hpcsolve.lbm import lattice, physics


@dataclass(frozen=True)
class Units:
    reynolds: float
    length: float            # characteristic length L, m
    velocity: float          # characteristic velocity U, m/s
    density: float           # reference density, kg/m^3
    resolution: int          # cells across L
    lattice_velocity: float  # U in lattice units

    @property
    def dx(self) -> float:
        """Cell size, m."""
        return self.length / self.resolution

    @property
    def dt(self) -> float:
        """Time step, s."""
        return self.dx * self.lattice_velocity / self.velocity

    @property
    def lattice_viscosity(self) -> float:
        return self.lattice_velocity * self.resolution / self.reynolds

    @property
    def viscosity(self) -> float:
        """Kinematic viscosity, m^2/s."""
        return self.velocity * self.length / self.reynolds

    @property
    def relaxation_time(self) -> float:
        return physics.tau_from_viscosity(self.lattice_viscosity)

    @property
    def characteristic_time(self) -> float:
        """L / U, s."""
        return self.length / self.velocity

    def steps_for(self, time: float) -> int:
        """Number of steps that covers ``time`` seconds (rounded to nearest, at least 1)."""
        return max(1, int(round(time / self.dt)))

    def pressure_to_physical(self, rho_lb):
        """Pressure relative to the reference, Pa."""
        return lattice.CS2 * (rho_lb - 1.0) * self.density * (self.dx / self.dt) ** 2

    def time_of(self, steps: int) -> float:
        return steps * self.dt

    def summary(self) -> dict:
        d = asdict(self)
        d.update(dx=self.dx, dt=self.dt, lattice_viscosity=self.lattice_viscosity,
                 viscosity=self.viscosity, relaxation_time=self.relaxation_time,
                 characteristic_time=self.characteristic_time)
        return d


def lattice_mach(u_lb: float) -> float:
    return u_lb / math.sqrt(lattice.CS2)


#: the largest peak cell Reynolds number u_peak / nu_lb ``hpcsolve run`` takes without --force for a flow with an
#: inlet, an outlet or an obstacle (the module docstring's table: blew up at 12.0, finite at 11.3 and below)
CELL_REYNOLDS_MAX = 10.5
#: an obstacle fewer cells across than this is warned about (its forces are inaccurate)
MIN_OBSTACLE_CELLS = 10


def cell_reynolds(peak_velocity: float, lattice_viscosity: float) -> float:
    """u_peak / nu_lb: the cell Reynolds number that decides stability as tau -> 1/2 (module docstring)."""
    return peak_velocity / lattice_viscosity


def resolution_for_cell_reynolds(units: Units, peak_velocity: float, limit: float = CELL_REYNOLDS_MAX) -> int:
    """The smallest lattice.resolution keeping u_peak / nu_lb <= ``limit`` (Re_cell falls as 1 / resolution)."""
    re_cell = cell_reynolds(peak_velocity, units.lattice_viscosity)
    return math.ceil(units.resolution * re_cell / limit - 1e-9)

