"""LBM case files: flows written in physical terms; lattice parameters derived and checked.

A case gives the Reynolds number, a characteristic length and velocity (m, m/s), the domain
size (m), the resolution (cells across the characteristic length) and the characteristic
velocity in lattice units. :func:`derive` turns that into the lattice (tau, dt, steps, grid
size) and refuses unstable settings with a message that says what to change. Example:
cases/lid_driven_cavity.toml.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field, field_validator, model_validator

from hpcsolve.core.cases import CaseBase, StrictModel
from hpcsolve.core.errors import CaseError
from hpcsolve.lbm import collision as collision_models, observables as obs, rules
from hpcsolve.lbm.units import CELL_REYNOLDS_MAX, MIN_OBSTACLE_CELLS, Units, cell_reynolds, resolution_for_cell_reynolds

#: refuse tau <= 0.5 + TAU_MARGIN (viscosity too close to zero: BGK and TRT go unstable)
TAU_MARGIN = 0.01
#: refuse tau above this (or not finite: a tiny physics.reynolds overflows nu_lb = u N / Re); tau and the collision
#: rate 1 / tau stay normal float32 numbers (the fp32/fp16 kernels take them in float32), with margin
TAU_MAX = 1e30
#: warn above this peak lattice velocity (compressibility error ~ Ma^2), refuse above the second
U_WARN, U_REFUSE = 0.1, 0.3
#: most time steps a run may take, and most cells along one side (kernels index a side with int32)
MAX_STEPS = 1_000_000_000
MAX_CELLS_PER_SIDE = 10_000_000

#: a domain side: periodic, or the case name of a registered boundary rule. The annotation lists the shipped names
#: (the generated case reference reads it); the check reads the registry at validation time
#: (``BoundarySection._registered_side``), so a rule ``rules.register`` added later is accepted too
Side = Literal[("periodic",) + tuple(rules.side_flags())]
BounceBack = Literal["simple", "bouzidi"]
REFERENCES = ("none", "taylor_green", "poiseuille", "ghia", "schafer_turek_2d1", "schafer_turek_2d2")


class PhysicsSection(StrictModel):
    reynolds: float = Field(..., gt=0, le=1e6, description="Re = U L / nu")
    length: float = Field(1.0, gt=0, description="characteristic length L, m (cavity side, cylinder diameter, channel height, TGV box side)")
    velocity: float = Field(1.0, gt=0, description="characteristic velocity U, m/s (lid speed, mean inflow speed, TGV amplitude)")
    density: float = Field(1.0, gt=0, description="reference density, kg/m^3")


class LatticeSection(StrictModel):
    resolution: int = Field(..., ge=4, le=1_000_000, description="cells across the characteristic length")
    velocity: float = Field(0.05, gt=0, description="characteristic velocity U in lattice units (Mach = u / 0.577)")
    collision: Literal[collision_models.NAMES] = "trt"
    magic: float = Field(3.0 / 16.0, gt=0, le=10, description="TRT magic parameter Lambda")
    bounce_back: BounceBack = Field("simple", description="obstacle walls: 'simple' (half-way, staircase) or 'bouzidi' "
                                    "(linear interpolated bounce-back at the exact circle/rectangle surface)")
    streaming: Literal["auto", "two-buffer", "in-place"] = Field(
        "auto", description="GPU backends: 'in-place' streams in one population array (AA pattern; half the "
        "memory, same results; 16-bit storage then runs one cell per thread); 'auto' streams in place where "
        "that keeps the lattice in the GPU's L2 cache (fp32/fp64, one array between 0.3 and 0.65 of it) and "
        "in two buffers elsewhere; the NumPy reference keeps two arrays")


class DomainSection(StrictModel):
    length: float = Field(1.0, gt=0, description="extent in x, m (fluid region between the boundaries)")
    height: float = Field(1.0, gt=0, description="extent in y, m")


class AbsorbingLayerSection(StrictModel):
    """``[boundaries.absorbing_layer]``: a layer along the outlet where the bulk viscosity rises (hpcsolve/lbm/boundaries/layer.py)."""

    width: float = Field(..., gt=0, description="m: the layer covers the fluid within this distance of the outlet side")
    ramp: float | None = Field(None, gt=0, description="m: over this length at the inner edge the bulk viscosity rises "
                               "(as s^2) to its full value; default width / 10")
    viscosity_ratio: float = Field(40.0, ge=1, le=10000, description="bulk viscosity / shear viscosity at full "
                                   "strength (1: no layer; the collision's own bulk viscosity equals the shear one)")

    @model_validator(mode="after")
    def _ramp_inside(self):
        if self.ramp is not None and self.ramp > self.width:
            raise ValueError(f"boundaries.absorbing_layer.ramp ({self.ramp}) must be <= width ({self.width})")
        return self


class BoundarySection(StrictModel):
    left: Side = "wall"
    right: Side = "wall"
    bottom: Side = "wall"
    top: Side = "moving_wall"
    moving_wall_velocity: float = Field(1.0, ge=-10, le=10,
                                        description="tangential speed of moving walls in units of U (+x on top/bottom, +y on left/right)")
    inlet_profile: Literal["parabolic", "uniform"] = Field("parabolic", description="inlet profile; mean speed = U")
    outlet: Literal["pressure", "characteristic"] = Field(
        "pressure", description="outlet rule: 'pressure' holds rho = 1 (reflects sound); 'characteristic' lets "
        "sound waves leave (rho_w = 1 + (u_n - u_ref) / c_s, u_ref the inlet profile of the opposite side); "
        "needs an inlet opposite the outlet")
    ramp_time: float = Field(0.0, ge=0, description="smooth start, s: inlet and moving-wall velocities rise as "
                             "sin^2(pi/2 t / ramp_time) to their full value (0: impulsive start). Over several "
                             "acoustic periods 4 L / c_s it avoids exciting standing sound waves between inlet "
                             "and outlet")
    absorbing_layer: AbsorbingLayerSection | None = Field(
        None, description="a layer along the outlet that damps sound by a larger bulk viscosity (off by default)")

    @field_validator("left", "right", "bottom", "top", mode="wrap")
    @classmethod
    def _registered_side(cls, value, handler):
        """A side name is ``"periodic"`` or a case name of a rule registered now (``rules.side_names``), not only
        of those the annotation saw at import; a non-string keeps the annotation's type error."""
        if not isinstance(value, str):
            return handler(value)
        names = rules.side_names()
        if value not in names:
            raise ValueError("allowed: " + ", ".join(repr(n) for n in names))
        return value

    @model_validator(mode="after")
    def _layer_along_one_outlet(self):
        if self.absorbing_layer is not None:
            n = sum(getattr(self, s) == "outlet" for s in ("left", "right", "bottom", "top"))
            if n != 1:
                raise ValueError(f"boundaries.absorbing_layer lies along the outlet: it needs exactly one side that "
                                 f"is 'outlet' (got {n})")
        return self

    @model_validator(mode="after")
    def _characteristic_outlet_faces_an_inlet(self):
        if self.outlet == "characteristic":
            for a, b in (("left", "right"), ("right", "left"), ("bottom", "top"), ("top", "bottom")):
                if getattr(self, a) == "outlet" and getattr(self, b) != "inlet":
                    raise ValueError(f"boundaries.outlet = 'characteristic' takes its reference outflow from the inlet "
                                     f"opposite the outlet: boundaries.{a} is 'outlet', so boundaries.{b} must be "
                                     f"'inlet' (got {getattr(self, b)!r})")
            if "outlet" not in (self.left, self.right, self.bottom, self.top):
                raise ValueError("boundaries.outlet = 'characteristic' needs a side that is 'outlet' (none is)")
        return self

    @model_validator(mode="after")
    def _periodic_in_pairs(self):
        for a, b in (("left", "right"), ("bottom", "top")):
            if (getattr(self, a) == "periodic") != (getattr(self, b) == "periodic"):
                raise ValueError(f"boundaries.{a} and boundaries.{b} must both be 'periodic' or neither "
                                 f"(got {getattr(self, a)!r}, {getattr(self, b)!r})")
        return self


class ObstacleSection(StrictModel):
    shape: Literal["circle", "rectangle", "mask"]
    center: tuple[float, float] | None = Field(None, description="circle centre (x, y), m, from the lower-left boundary")
    diameter: float | None = Field(None, gt=0, description="circle diameter, m")
    lower: tuple[float, float] | None = Field(None, description="rectangle lower-left corner (x, y), m")
    upper: tuple[float, float] | None = Field(None, description="rectangle upper-right corner (x, y), m")
    file: str | None = Field(None, description="mask: .npy boolean array (ny, nx) over the fluid region, path relative to the case")
    measure_force: bool = Field(True, description="report drag and lift on this obstacle")
    bounce_back: BounceBack | None = Field(None, description="'simple' or 'bouzidi' for this obstacle "
                                           "(default: lattice.bounce_back); a mask's surface is its staircase")

    @model_validator(mode="after")
    def _fields_for_shape(self):
        need = {"circle": ("center", "diameter"), "rectangle": ("lower", "upper"), "mask": ("file",)}[self.shape]
        missing = [k for k in need if getattr(self, k) is None]
        if missing:
            raise ValueError(f"a {self.shape} obstacle needs {', '.join(missing)}")
        if self.file is not None and not self.file.strip():
            raise ValueError("file: the path is empty (a mask needs file = '<mask.npy>', relative to the case file)")
        if self.shape == "rectangle" and not (self.lower[0] < self.upper[0] and self.lower[1] < self.upper[1]):
            raise ValueError("rectangle: lower must be below and left of upper")
        return self


class InitialSection(StrictModel):
    condition: Literal["rest", "taylor_green", "inflow"] = Field(
        "rest", description="rest; taylor_green (vortex with amplitude U); inflow (uniform U in +x)")


class TimeSection(StrictModel):
    end_time: float | None = Field(None, gt=0, description="physical end time, s")
    steps: int | None = Field(None, ge=1, le=MAX_STEPS, description="number of steps (overrides end_time)")
    output_interval: float = Field(0.0, ge=0, description="snapshot interval, s (0: final fields only)")
    monitor_interval: int = Field(100, ge=1, le=MAX_STEPS, description="steps between monitor points (series, NaN check)")
    checkpoint_interval: int = Field(0, ge=0, le=MAX_STEPS, description="steps between checkpoints of the full state in "
                                     "<out>/checkpoints (0: none; the last two are kept)")

    @model_validator(mode="after")
    def _has_length(self):
        if self.end_time is None and self.steps is None:
            raise ValueError("give time.end_time (s) or time.steps")
        return self


class SteadySection(StrictModel):
    enabled: bool = False
    tolerance: float = Field(1e-6, gt=0, lt=1, description="stop when ||u - u_prev|| / ||u|| over `interval` steps falls below")
    interval: int = Field(1000, ge=1, le=MAX_STEPS, description="steps between steady-state checks")


#: references judged by an error bound (validation.max_error) and by a published range (validation.range_margin)
ERROR_REFERENCES = ("taylor_green", "poiseuille", "ghia")
RANGE_REFERENCES = ("schafer_turek_2d1", "schafer_turek_2d2")


class ValidationSection(StrictModel):
    reference: Literal[REFERENCES] = "none"  # type: ignore[valid-type]
    sample_x: float = Field(0.5, ge=0, le=1, description="poiseuille: profile taken at this fraction of the channel length")
    max_error: float | None = Field(
        None, gt=0, le=10, description="taylor_green, poiseuille, ghia: the largest error the run's verdict accepts "
        "(the summary's `validation`); default taylor_green 0.01 (relative L2 velocity error), poiseuille 0.01 "
        "(relative L2 error of the rho u profile), ghia 0.03 (largest centreline difference / lid speed)")
    range_margin: float = Field(
        0.0, ge=0, le=1, description="schafer_turek_2d1/2d2: widen each published range by this fraction of its "
        "bound on both sides before the verdict (0: the range as published)")

    @model_validator(mode="after")
    def _bounds_fit_the_reference(self):
        if self.max_error is not None and self.reference not in ERROR_REFERENCES:
            other = ("use validation.range_margin to widen its published ranges" if self.reference in RANGE_REFERENCES
                     else "there is no error to bound")
            raise ValueError(f"validation.max_error bounds the error against reference {', '.join(ERROR_REFERENCES)}; "
                             f"validation.reference is {self.reference!r}: {other}")
        if self.range_margin and self.reference not in RANGE_REFERENCES:
            other = ("use validation.max_error for its error bound" if self.reference in ERROR_REFERENCES
                     else "there is no range to widen")
            raise ValueError(f"validation.range_margin widens the published ranges of reference "
                             f"{', '.join(RANGE_REFERENCES)}; validation.reference is {self.reference!r}: {other}")
        return self


class LBMCase(CaseBase):
    solver: Literal["lbm"]
    physics: PhysicsSection
    lattice: LatticeSection
    domain: DomainSection = Field(default_factory=DomainSection)
    boundaries: BoundarySection = Field(default_factory=BoundarySection)
    obstacles: list[ObstacleSection] = Field(default_factory=list)
    initial: InitialSection = Field(default_factory=InitialSection)
    time: TimeSection
    steady: SteadySection = Field(default_factory=SteadySection)
    validation: ValidationSection = Field(default_factory=ValidationSection)

    @model_validator(mode="after")
    def _layer_inside_the_domain(self):
        layer = self.boundaries.absorbing_layer
        if layer is not None:
            side = next(s for s in ("left", "right", "bottom", "top") if getattr(self.boundaries, s) == "outlet")
            extent, name = ((self.domain.length, "domain.length") if side in ("left", "right")
                            else (self.domain.height, "domain.height"))
            if layer.width > extent:
                raise ValueError(f"boundaries.absorbing_layer.width ({layer.width} m) must be <= {name} ({extent} m), "
                                 f"the extent across the outlet")
        return self

    @field_validator("obstacles")
    @classmethod
    def _few_obstacles(cls, v):
        if len(v) > 64:
            raise ValueError("at most 64 obstacles")
        return v


@dataclass
class Derived:
    """Lattice parameters derived from a case (what `hpcsolve validate` reports)."""

    units: Units
    nx: int                      # array size including boundary layers
    ny: int
    pad: tuple[int, int, int, int]  # boundary layers (left, right, bottom, top)
    steps: int
    output_every: int            # steps between snapshots (0: none)
    peak_lattice_velocity: float
    warnings: list[str] = field(default_factory=list)
    ramp_steps: int = 0          # smooth start of the boundary velocities (boundaries.ramp_time)
    #: settings known to blow up (``stability``): ``hpcsolve run`` refuses them unless forced; also in ``warnings``
    risks: list[str] = field(default_factory=list)

    def grid_text(self) -> str:
        """The lattice as a reader wants it: the array size and, where the sides carry boundary layers, the domain's
        cells and the layers (a 64-cell cavity is a 66 x 66 array: one wall layer on each side)."""
        left, right, bottom, top = self.pad
        if not any(self.pad):
            return f"{self.nx} x {self.ny}"
        return (f"{self.nx} x {self.ny} ({self.nx - left - right} x {self.ny - bottom - top} domain cells + "
                f"boundary layers)")

    def summary(self) -> dict:
        u = self.units
        return {
            "reynolds": u.reynolds, "grid": self.grid_text(), "nx": self.nx, "ny": self.ny,
            "relaxation_time": u.relaxation_time, "lattice_viscosity": u.lattice_viscosity,
            "lattice_velocity": u.lattice_velocity, "peak_lattice_velocity": self.peak_lattice_velocity,
            "lattice_mach": self.peak_lattice_velocity / math.sqrt(1.0 / 3.0),
            "dx_m": u.dx, "dt_s": u.dt, "viscosity_m2_s": u.viscosity, "steps": self.steps,
            "end_time_s": u.time_of(self.steps), "output_every_steps": self.output_every,
            "characteristic_time_s": u.characteristic_time, "ramp_steps": self.ramp_steps,
            "warnings": list(self.warnings),
        }


def _what_to_change_tau(units: Units) -> str:
    # tau - 1/2 = 3 u N / Re: raise u or N (or lower Re)
    need = TAU_MARGIN / 3.0 * units.reynolds  # u*N must exceed this
    return (f"tau = 0.5 + 3 * lattice.velocity * lattice.resolution / physics.reynolds must exceed {0.5 + TAU_MARGIN}: "
            f"raise lattice.resolution (e.g. to {math.ceil(need / units.lattice_velocity) + 1}) "
            f"or lattice.velocity, or lower physics.reynolds")


def _in_range(value: float, what: str, field: str, case_value, low: float = 0.0, high: float = math.inf,
              change: str = "") -> float:
    """A derived quantity, refused (naming the case field that makes it so) unless finite and in (low, high]."""
    if not (math.isfinite(value) and low < value <= high):
        bound = f"in ({low:g}, {high:g}]" if math.isfinite(high) else f"finite and > {low:g}"
        raise CaseError.invalid(field, case_value, f"a value that keeps it {bound}",
                                why=f"{what} would be {value:.6g}" + (f"; {change}" if change else ""))
    return value


def _check_units(case: LBMCase, units: Units) -> None:
    """Every physical quantity derived from the case is finite and positive (extreme but finite
    inputs overflow or underflow them), each naming the field responsible."""
    p = case.physics
    _in_range(units.dx, "the cell size dx = physics.length / lattice.resolution (m)", "physics.length", p.length)
    scale = units.velocity / units.lattice_velocity
    _in_range(scale * scale, "the squared velocity scale (dx/dt)^2 = "
              "(physics.velocity / lattice.velocity)^2 (m^2/s^2)", "physics.velocity", p.velocity)
    _in_range(units.dt, "the time step dt = dx * lattice.velocity / physics.velocity (s)", "physics.velocity",
              p.velocity)
    _in_range(1.0 / units.dt, "the rate 1 / dt (1/s)", "physics.velocity", p.velocity)
    _in_range(units.viscosity, "the viscosity physics.velocity * physics.length / physics.reynolds (m^2/s)",
              "physics.reynolds", p.reynolds)
    _in_range(units.characteristic_time, "the time scale physics.length / physics.velocity (s)", "physics.length",
              p.length)
    _in_range(abs(units.pressure_to_physical(2.0)), "the pressure scale physics.density * (dx/dt)^2 / 3 (Pa)",
              "physics.density", p.density)


def _check_tau_finite(case: LBMCase, units: Units) -> float:
    """The relaxation time, refused (naming physics.reynolds, the field that makes it so) unless finite and at
    most TAU_MAX: a tiny Reynolds number gives tau = inf (nu_lb = u N / Re overflows) and a run that blows up."""
    tau = units.relaxation_time
    if not (math.isfinite(tau) and tau <= TAU_MAX):
        uN3 = 3.0 * case.lattice.velocity * case.lattice.resolution
        raise CaseError.invalid(
            "physics.reynolds", case.physics.reynolds,
            f"physics.reynolds >= {uN3 / (TAU_MAX - 0.5):.6g} (tau <= {TAU_MAX:g}) and < {uN3 / TAU_MARGIN:.6g} "
            f"(tau > {0.5 + TAU_MARGIN}) at lattice.velocity = {case.lattice.velocity:g} and lattice.resolution = "
            f"{case.lattice.resolution}",
            why=f"the relaxation time tau = 0.5 + 3 * lattice.velocity * lattice.resolution / physics.reynolds would "
                f"be {tau:.6g} (at most {TAU_MAX:g} keeps tau and the collision rate 1 / tau normal float32 "
                f"numbers)")
    return tau


def _steps(units: Units, seconds: float, field: str, limit: int = MAX_STEPS) -> int:
    """Steps covering ``seconds``, refused (naming ``field``) beyond ``limit``."""
    n = _in_range(seconds / units.dt, f"the number of steps {field} / dt", field, seconds, high=limit + 0.5,
                  change=f"at most {limit:,} steps of dt = {units.dt:.6g} s")
    return max(1, int(round(n)))


def derive(case: LBMCase) -> Derived:
    """Lattice parameters of a case, or a CaseError naming the field to change."""
    units = Units(reynolds=case.physics.reynolds, length=case.physics.length, velocity=case.physics.velocity,
                  density=case.physics.density, resolution=case.lattice.resolution,
                  lattice_velocity=case.lattice.velocity)
    _check_units(case, units)
    warnings: list[str] = []
    tau = _check_tau_finite(case, units)
    if tau <= 0.5 + TAU_MARGIN:
        raise CaseError.invalid("lattice.resolution", case.lattice.resolution, f"tau > {0.5 + TAU_MARGIN}",
                                why=f"relaxation time tau = {tau:.5f} is too close to 1/2 (unstable); "
                                    + _what_to_change_tau(units))
    warnings += collision_models.get(case.lattice.collision).stability_warnings(tau)
    if tau > 5:
        warnings.append(f"tau = {tau:.3g} is large (accuracy degrades): raise physics.reynolds or lower lattice.resolution")

    b = case.boundaries
    peak = case.lattice.velocity
    if "inlet" in (b.left, b.right, b.bottom, b.top) and b.inlet_profile == "parabolic":
        peak = max(peak, 1.5 * case.lattice.velocity)
    if "moving_wall" in (b.left, b.right, b.bottom, b.top):
        peak = max(peak, abs(b.moving_wall_velocity) * case.lattice.velocity)
    if peak > U_REFUSE:
        raise CaseError.invalid("lattice.velocity", case.lattice.velocity, f"a peak lattice velocity <= {U_REFUSE}",
                                why=f"peak lattice velocity {peak:.3g} is far too compressible (Mach {peak / 0.577:.2f}); "
                                    f"lower lattice.velocity (e.g. 0.05) and, to keep tau, raise lattice.resolution")
    if peak > U_WARN:
        warnings.append(f"lattice.velocity = {case.lattice.velocity:g}: the peak lattice velocity {peak:.3g} (Mach "
                        f"{peak / 0.577:.2f}) is above {U_WARN} (Mach {U_WARN / 0.577:.2f}): compressibility errors "
                        f"~ Ma^2 = {(peak / 0.577) ** 2:.3f}; set lattice.velocity lower (e.g. 0.05) and, to keep "
                        f"tau, lattice.resolution higher")
    risks = stability(case, units, peak)
    warnings += [f"{r}; `hpcsolve run` refuses this unless forced (--force)" for r in risks]
    warnings += obstacle_warnings(case, units)

    nxf = _cells(units, case.domain.length, "domain.length")
    nyf = _cells(units, case.domain.height, "domain.height")
    pad = tuple(0 if s == "periodic" else 1 for s in (b.left, b.right, b.bottom, b.top))
    nx, ny = nxf + pad[0] + pad[1], nyf + pad[2] + pad[3]
    if case.time.steps is not None:
        steps = case.time.steps
    else:
        steps = _steps(units, case.time.end_time, "time.end_time")
    out_every = _steps(units, case.time.output_interval, "time.output_interval") if case.time.output_interval > 0 else 0
    if out_every and steps // out_every > 1000:
        raise CaseError.invalid("time.output_interval", case.time.output_interval, "at most 1000 snapshots per run",
                                why=f"{steps // out_every} snapshots")
    ramp = _steps(units, b.ramp_time, "boundaries.ramp_time") if b.ramp_time > 0 else 0
    if ramp:
        driven = [s for s in ("left", "right", "bottom", "top") if getattr(b, s) in ("inlet", "moving_wall")]
        if not driven:
            raise CaseError.invalid("boundaries.ramp_time", b.ramp_time, "0 when no side is an inlet or a moving wall",
                                    why="the smooth start ramps inlet and moving-wall velocities; this case has neither")
        if case.initial.condition == "inflow":
            raise CaseError.invalid("boundaries.ramp_time", b.ramp_time, "0 with initial.condition = 'inflow'",
                                    why="the inflow start sets the interior to full speed; ramping the inlet up "
                                        "from 0 would stop it impulsively. Use initial.condition = 'rest' or "
                                        "boundaries.ramp_time = 0")
        if ramp > steps:
            warnings.append(f"boundaries.ramp_time {b.ramp_time:g} s ({ramp} steps) is longer than the run "
                            f"({steps} steps): the boundary velocities never reach their full value")
    _check_reference(case)
    return Derived(units=units, nx=nx, ny=ny, pad=pad, steps=steps, output_every=out_every, ramp_steps=ramp,
                   peak_lattice_velocity=peak, warnings=warnings, risks=risks)


def stability(case: LBMCase, units: Units, peak: float) -> list[str]:
    """The stability rule (hpcsolve/lbm/units.py, with its measurements): why this lattice is known to blow up, as
    texts naming the field, the value, the limit and what to set; empty where it is not. It applies to a flow with
    an inlet, an outlet or an obstacle (a closed box stayed finite down to the tau floor ``derive`` refuses)."""
    b = case.boundaries
    if not (case.obstacles or {"inlet", "outlet"} & {b.left, b.right, b.bottom, b.top}):
        return []
    re_cell = cell_reynolds(peak, units.lattice_viscosity)
    if re_cell <= CELL_REYNOLDS_MAX:
        return []
    need = _whole_resolution(case, resolution_for_cell_reynolds(units, peak))
    return [f"lattice.resolution = {units.resolution}: the cell Reynolds number u_peak / nu_lattice = {peak:.3g} / "
            f"{units.lattice_viscosity:.4g} = {re_cell:.3g} (tau {units.relaxation_time:.4f}) is above "
            f"{CELL_REYNOLDS_MAX:g}, where a flow through an inlet or an outlet or past an obstacle blows up (measured: "
            f"Re_cell 12 blew up, 10 stayed finite; hpcsolve/lbm/units.py); set lattice.resolution >= {need} or lower "
            f"physics.reynolds (a lower lattice.velocity does not help: it lowers tau as much as the speed)"]


def _whole_resolution(case: LBMCase, low: int) -> int:
    """The smallest lattice.resolution >= ``low`` that divides the domain into whole cells (``low`` if none within
    100 x)."""
    p, d = case.physics, case.domain
    for n in range(low, 100 * low + 1):
        ok = all(abs(v - round(v)) <= 1e-6 * max(1.0, v) for v in (d.length * n / p.length, d.height * n / p.length))
        if ok:
            return n
    return low


def obstacle_warnings(case: LBMCase, units: Units) -> list[str]:
    """An obstacle fewer than MIN_OBSTACLE_CELLS cells across: its drag and lift are inaccurate (units.py)."""
    out = []
    for k, o in enumerate(case.obstacles):
        if o.shape == "circle":
            what, size = "diameter", o.diameter
        elif o.shape == "rectangle":
            what, size = "smaller side", min(o.upper[0] - o.lower[0], o.upper[1] - o.lower[1])
        else:
            continue
        cells = size / units.dx
        if cells < MIN_OBSTACLE_CELLS:
            need = _whole_resolution(case, math.ceil(units.resolution * MIN_OBSTACLE_CELLS / cells - 1e-9))
            out.append(f"obstacles[{k}] ({o.shape}): {cells:.3g} cells across its {what} ({size:g} m / dx "
                       f"{units.dx:.4g} m) is fewer than {MIN_OBSTACLE_CELLS}: its drag and lift are inaccurate; set "
                       f"lattice.resolution >= {need}")
    return out


def _cells(units: Units, length: float, field_name: str) -> int:
    n = _in_range(length / units.dx, f"the number of cells {field_name} / dx", field_name, length,
                  high=MAX_CELLS_PER_SIDE, change=f"at most {MAX_CELLS_PER_SIDE:,} cells of dx = {units.dx:.6g} m")
    if abs(n - round(n)) > 1e-6 * max(1.0, n) or round(n) < 2:
        raise CaseError.invalid(field_name, length, f"a whole number (>= 2) of cells of size dx = {units.dx:.6g} m",
                                why=f"{field_name} / dx = {n:.4f} cells; change lattice.resolution or {field_name}")
    return int(round(n))


def _check_reference(case: LBMCase) -> None:
    """A reference applies only to the flow it describes: its benchmark's geometry, boundary conditions and
    parameters (lengths and parameters within a relative REFERENCE_RTOL); another flow needs 'none'."""
    ref, b = case.validation.reference, case.boundaries
    sides = (b.left, b.right, b.bottom, b.top)
    if ref == "taylor_green":
        _check_taylor_green(case)
    if ref == "poiseuille" and (sides != ("inlet", "outlet", "wall", "wall") or case.obstacles):
        raise CaseError.invalid("validation.reference", ref, "a reference matching the flow",
                                why="poiseuille needs left = 'inlet', right = 'outlet', bottom = top = 'wall', no obstacles")
    if ref == "ghia":
        if sides != ("wall", "wall", "wall", "moving_wall") or case.obstacles:
            raise CaseError.invalid("validation.reference", ref, "a reference matching the flow",
                                    why="ghia needs walls left/right/bottom, a moving top wall, no obstacles")
        # Ghia et al.'s flow: a square cavity of side physics.length, the lid moving at +U (their Re is U L / nu)
        d, p = case.domain, case.physics
        for name, value, want in (("domain.height", d.height, d.length), ("physics.length", p.length, d.length),
                                   ("boundaries.moving_wall_velocity", b.moving_wall_velocity, 1.0)):
            if not math.isclose(value, want, rel_tol=1e-9):
                raise CaseError.invalid(
                    name, value, f"{want:g} with validation.reference = 'ghia'",
                    why="Ghia et al.'s data are for a square cavity (domain.height = domain.length) of side "
                        "physics.length with the lid moving at +physics.velocity (moving_wall_velocity = 1); "
                        "another flow needs validation.reference = 'none'")
    if ref.startswith("schafer_turek"):
        _check_schafer_turek(case, ref)


#: lengths and parameters of a case match its reference's benchmark within this relative tolerance
REFERENCE_RTOL = 1e-6


def _off(value: float, want: float) -> bool:
    return not math.isclose(value, want, rel_tol=REFERENCE_RTOL)


def _refuse_reference(ref: str, needs: str, got: list[str]) -> None:
    if got:
        raise CaseError.invalid("validation.reference", ref, "'none' for another flow",
                                why=f"{ref} needs {needs}, each length and parameter within a relative "
                                    f"{REFERENCE_RTOL:g}; this case differs: {'; '.join(got)}")


def _check_taylor_green(case: LBMCase) -> None:
    """The analytic vortex has period physics.length (the box side) in x and y: the case's box must be that square,
    periodic, free of obstacles and started from the vortex."""
    b, d, p = case.boundaries, case.domain, case.physics
    got = [f"boundaries.{s} = {getattr(b, s)!r}" for s in ("left", "right", "bottom", "top")
           if getattr(b, s) != "periodic"]
    if case.initial.condition != "taylor_green":
        got.append(f"initial.condition = {case.initial.condition!r}")
    got += [f"domain.{n} = {v:g} (physics.length = {p.length:g})" for n, v in (("length", d.length),
                                                                               ("height", d.height))
            if _off(v, p.length)]
    if case.obstacles:
        got.append(f"{len(case.obstacles)} obstacle(s)")
    _refuse_reference("taylor_green", "a square box of side physics.length (domain.length = domain.height = "
                      "physics.length), periodic on all four sides, no obstacles and initial.condition = "
                      "'taylor_green'", got)


def _check_schafer_turek(case: LBMCase, ref: str) -> None:
    """Schafer & Turek's channel, cylinder, inflow, walls and Reynolds number (hpcsolve/data/schafer_turek_1996.toml);
    the coefficients are made with physics.length as the diameter and physics.velocity as the mean inflow."""
    st = obs.schafer_turek()
    g, bench = st["geometry"], st["case_2d1" if ref.endswith("2d1") else "case_2d2"]
    (cx, cy), dia, u_max = g["cylinder_center"], g["cylinder_diameter"], bench["U_max"]
    b, d, p = case.boundaries, case.domain, case.physics
    got = [f"boundaries.{s} = {getattr(b, s)!r}" for s, want in
           (("left", "inlet"), ("right", "outlet"), ("bottom", "wall"), ("top", "wall")) if getattr(b, s) != want]
    if b.inlet_profile != "parabolic":
        got.append(f"boundaries.inlet_profile = {b.inlet_profile!r}")
    got += [f"domain.{n} = {v:g}" for n, v, want in (("length", d.length, g["channel_length"]),
                                                      ("height", d.height, g["channel_height"])) if _off(v, want)]
    circles = [o for o in case.obstacles if o.shape == "circle"]
    others = [o.shape for o in case.obstacles if o.shape != "circle"]
    if others:
        got.append("an extra " + " and an extra ".join(others) + " obstacle")
    if len(circles) != 1:
        got.append(f"{len(circles)} circles")
    elif _off(circles[0].diameter, dia) or _off(circles[0].center[0], cx) or _off(circles[0].center[1], cy):
        c = circles[0]
        got.append(f"a circle of diameter {c.diameter:g} at ({c.center[0]:g}, {c.center[1]:g})")
    got += [f"physics.{n} = {v:g}{what}" for n, v, want, what in (
        ("length", p.length, dia, " (the diameter)"),
        ("velocity", p.velocity, u_max / 1.5, f" (U_max 1.5 * physics.velocity = {1.5 * p.velocity:g})"),
        ("reynolds", p.reynolds, bench["Re"], ""),
        ("density", p.density, g["density"], "")) if _off(v, want)]
    if ref.endswith("2d2") and case.steady.enabled:
        got.append("steady.enabled = true (2D-2 is periodic)")
    _refuse_reference(ref, f"a channel of {g['channel_length']:g} x {g['channel_height']:g} m with one circle of "
                      f"diameter {dia:g} m at ({cx:g}, {cy:g}) (physics.length = {dia:g}), a parabolic inlet on the "
                      f"left of U_max {u_max:g} m/s (physics.velocity = {u_max / 1.5:g}, the mean), an outlet on the "
                      f"right, no-slip walls at bottom and top, density {g['density']:g} and Re {bench['Re']:g}"
                      + (", not steady" if ref.endswith("2d2") else ""), got)
