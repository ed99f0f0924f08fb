"""Physical <-> lattice units, in one place.

A case gives a Reynolds number, a characteristic length L (m) and velocity U (m/s), the
resolution N (cells across L) and the characteristic velocity in lattice units u_lb. Then

    dx = L / N                    (m per cell)
    dt = dx * u_lb / U            (s per step)
    nu_lb = u_lb * N / Re         (lattice viscosity)
    tau = nu_lb / c_s^2 + 1/2     (relaxation time), c_s^2 = 1/3

Lattice density 1 corresponds to the physical reference density rho (kg/m^3); pressure is
p - p_ref = c_s^2 (rho_lb - 1) rho (dx/dt)^2.
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
