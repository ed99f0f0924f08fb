"""The LBM run's setup: derived parameters, geometry and the stepper's ``LBMSetup`` of a case (``build_setup``),
and the interpolated bounce-back summary that ``describe`` and the result report."""

from __future__ import annotations

import dataclasses

import numpy as np

from hpcsolve.core.precision import Precision
from hpcsolve.lbm import geometry as geom
from hpcsolve.lbm import lattice, observables as obs
from hpcsolve.lbm.boundaries import layer
from hpcsolve.lbm.case import Derived, LBMCase, derive
from hpcsolve.lbm.steppers.stepper import STREAMING, LBMSetup


def build_setup(case: LBMCase, policy: Precision, built: tuple[Derived, geom.Geometry] | None = None
                ) -> tuple[Derived, geom.Geometry, LBMSetup]:
    """Derived parameters, geometry and the stepper's setup; ``built``: (derived, geometry) that
    ``describe`` already made for this case."""
    derived, geo = built if built is not None else (derive(case), None)
    if geo is None:
        geo = geom.build(case, derived)
    rho0 = u0 = None
    u_lb = case.lattice.velocity
    fluid = geo.fluid
    if case.initial.condition == "taylor_green":
        ny, nx = geo.shape
        X, Y = np.meshgrid(np.arange(nx) + 0.5, np.arange(ny) + 0.5)
        side = nx  # periodic box, lattice units
        ux, uy = obs.taylor_green_velocity(X, Y, side, u_lb, 0.0, 0.0)
        rho0 = 1.0 + obs.taylor_green_pressure(X, Y, side, u_lb) / lattice.CS2
        u0 = np.stack([ux, uy])
    elif case.initial.condition == "inflow":
        u0 = np.zeros((2,) + geo.shape)
        u0[0][fluid] = u_lb
    setup = LBMSetup(flags=geo.flags, relaxation_time=derived.units.relaxation_time,
                     collision=case.lattice.collision, magic=case.lattice.magic, policy=policy,
                     boundary_velocity=geo.boundary_velocity, initial_density=rho0, initial_velocity=u0,
                     links=geo.links, ramp_steps=derived.ramp_steps,
                     in_place=STREAMING[case.lattice.streaming])
    if case.boundaries.absorbing_layer is not None:
        setup = dataclasses.replace(setup, absorbing_layer=layer.from_case(
            case.boundaries.absorbing_layer, case.boundaries, geo, case.domain, setup.relaxation_time, setup.omegas[0]))
    return derived, geo, setup


def bounce_back_summary(geo: geom.Geometry) -> dict:
    """Which obstacles use interpolated bounce-back and how many links it touches."""
    if not geo.interpolated:
        return {}
    links = geo.links
    return {"interpolated_obstacles": list(geo.interpolated),
            "interpolated_links": 0 if links is None else len(links),
            "interpolated_links_simple_fallback": 0 if links is None else links.fallback}