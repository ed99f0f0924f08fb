"""Errors of an LBM run against analytic or published references, by ``validation.reference``: Taylor-Green,
Poiseuille, Ghia et al. (lid-driven cavity), Schaefer-Turek (cylinder 2D-1 and 2D-2); and the verdicts on them
(:func:`verdicts`, the arithmetic in hpcsolve.core.verdicts)."""

from __future__ import annotations

import math

import numpy as np

from hpcsolve.core import scaled
from hpcsolve.core.verdicts import error_bound, judge, widened
from hpcsolve.lbm import observables as obs

#: the acceptance bound of each error-type reference (``validation.max_error`` overrides it); docs/design/validation_ci.md
#: ("Validation verdicts") gives the shipped cases' measured errors these leave margin over
DEFAULT_MAX_ERROR = {
    "taylor_green": 0.01,   # relative L2 velocity error; taylor_green.toml: 6.7e-4 (fp64 and fp32)
    "poiseuille": 0.01,     # relative L2 error of the rho u profile; poiseuille.toml: 0.0040 (fp64 and fp32)
    "ghia": 0.03,           # largest centreline difference / lid speed; lid_driven_cavity.toml: 0.0056,
                            # lid_driven_cavity_re1000.toml: 0.0149 (H200, fp64 and fp32)
}
#: what each error-type reference's bound applies to, for the verdict's citation
ERROR_REFERENCES = {
    "taylor_green": "analytic Taylor-Green vortex, relative L2 velocity error",
    "poiseuille": "analytic Poiseuille parabola, relative L2 error of the rho u profile",
}


def reference_metrics(case, derived, geo, stepper, rho, ux, uy, step, result) -> dict:
    """Errors against analytic or published references, by ``validation.reference``."""
    ref = case.validation.reference
    u_lb = case.lattice.velocity
    m: dict = {}
    if ref == "taylor_green":
        ny, nx = geo.shape
        X, Y = np.meshgrid(np.arange(nx) + 0.5, np.arange(ny) + 0.5)
        ua, va = obs.taylor_green_velocity(X, Y, nx, u_lb, derived.units.lattice_viscosity, step)
        # scaled 2-norms of both components together (a sum of squares underflows for a vortex of 1e-160)
        num = scaled.norm2(np.stack([np.asarray(ux) - ua, np.asarray(uy) - va]))
        den = scaled.norm2(np.stack([ua, va]))
        # the analytic vortex decays as exp(-2 nu k^2 t): at a low Reynolds number it is 0 in float64 by the end of
        # the run, and no error is relative to it (the absolute one below still says how far the run is from it)
        m["velocity_rel_l2_error"] = scaled.ratio(num, den) if den > 0 else float("nan")
        m["velocity_max_abs_error"] = float(np.max(np.hypot(ux - ua, uy - va)) / u_lb)
    elif ref == "poiseuille":
        p = geo.pad
        ny, nx = geo.shape
        nxf = nx - p[0] - p[1]
        col = p[0] + min(nxf - 1, int(case.validation.sample_x * nxf))
        # compare the mass-flux profile rho u: the inlet imposes the mass flux (rho_w = 1), and the
        # density rises ~3 % along the channel with the pressure drop (weak compressibility), so u
        # alone is low by that factor while rho u is the incompressible solution's rho_0 u
        profile = (rho * ux)[p[2]:ny - p[3], col]
        exact = obs.poiseuille_profile(profile.size, u_lb)
        m["velocity_profile_rel_l2_error"] = obs.relative_l2(ux[p[2]:ny - p[3], col], exact)
        m["profile_rel_l2_error"] = obs.relative_l2(profile, exact)
        m["profile_max_abs_error"] = float(np.max(np.abs(profile - exact)) / u_lb)
        m["sample_column"] = int(col)
        result.series["profile_y"] = (np.arange(profile.size) + 0.5) / profile.size
        result.series["profile_u"] = profile / u_lb
        result.series["profile_u_exact"] = exact / u_lb
    elif ref == "ghia":
        lid = case.boundaries.moving_wall_velocity * u_lb
        (yl, ul), (xl, vl) = obs.centerline_profiles(ux, uy, geo, lid)
        if ("u_at_x0.5", int(round(case.physics.reynolds))) in obs.ghia_data():
            m.update(obs.ghia_errors((yl, ul), (xl, vl), case.physics.reynolds))
        else:
            m["ghia_note"] = (f"no Ghia et al. data for Re {case.physics.reynolds:g} (shipped: "
                              + ", ".join(sorted({str(k[1]) for k in obs.ghia_data()})) + "); centerlines are in the series")
        result.series.update({"centerline_y": yl, "centerline_u": ul, "centerline_x": xl, "centerline_v": vl})
    elif ref.startswith("schafer_turek") and geo.measured:
        st = obs.schafer_turek()
        which = "case_2d1" if ref.endswith("2d1") else "case_2d2"
        mask = geo.obstacles[geo.measured[0]]
        cd, cl = obs.force_coefficients(stepper.force(mask), u_lb, case.lattice.resolution)
        m["drag_coefficient"], m["lift_coefficient"] = cd, cl
        m["pressure_difference_pa"] = _pressure_difference(case, derived, geo, rho)
        ref_data = st[which]
        if which == "case_2d1":
            m["reference_c_D"], m["reference_c_L"], m["reference_dp"] = ref_data["c_D"], ref_data["c_L"], ref_data["dp"]
            m.update(_window_metrics(result.series))
        else:
            m.update(_periodic_metrics(result.series, case))
            m["reference_c_D_max"], m["reference_c_L_max"] = ref_data["c_D_max"], ref_data["c_L_max"]
            m["reference_strouhal"] = ref_data["strouhal"]
    return m


def _window_metrics(series: dict, fraction: float = 0.25) -> dict:
    """Mean and spread (max - min) of c_D and c_L over the last ``fraction`` of the monitor samples.
    After an impulsive start a 'steady' LBM run keeps a weakly damped acoustic mode between the
    velocity inlet and the pressure outlet; the tiny c_L of 2D-1 swings with it, so one final sample
    can be off by tens of per cent (seen on the H200: 0.0088 to 0.0123 at D = 40..80) while the window
    mean is stable. With the smooth start (boundaries.ramp_time) the spread shows what is left of it
    (2.5e-5 at D = 80)."""
    out = {}
    for key in ("drag_coefficient", "lift_coefficient"):
        v = np.asarray(series.get(key, ()), dtype=np.float64)
        if v.size < 8:
            continue
        w = v[-max(4, int(round(fraction * v.size))):]
        out[f"{key}_window_mean"] = float(np.mean(w))
        out[f"{key}_window_spread"] = float(np.max(w) - np.min(w))
    return out


def _pressure_difference(case, derived, geo, rho) -> float:
    """dp = p(front) - p(back) of the first circle along its centre line, at the nearest fluid cells."""
    circle = next(o for o in case.obstacles if o.shape == "circle")
    x, y = geo.cell_centres()
    j = int(np.argmin(np.abs(y - circle.center[1])))
    row_fluid = geo.fluid[j]
    front = np.flatnonzero(row_fluid & (x <= circle.center[0] - circle.diameter / 2))
    back = np.flatnonzero(row_fluid & (x >= circle.center[0] + circle.diameter / 2))
    if not front.size or not back.size:
        return float("nan")
    p = derived.units.pressure_to_physical(rho[j])
    return float(p[front[-1]] - p[back[0]])


def _periodic_metrics(series: dict, case) -> dict:
    """c_D max, c_L max over the second half of the run, Strouhal from the lift."""
    if "lift_coefficient" not in series or series["lift_coefficient"].size < 8:
        return {}
    t = series["time"]
    half = t >= t[0] + 0.5 * (t[-1] - t[0])
    out = {"drag_coefficient_max": float(np.max(series["drag_coefficient"][half])),
           "lift_coefficient_max": float(np.max(series["lift_coefficient"][half]))}
    st = obs.strouhal(t, series["lift_coefficient"], case.physics.length, case.physics.velocity)
    if st is not None:
        out["strouhal"] = st
    return out


def verdicts(case, metrics: dict, derived: dict | None = None) -> dict:
    """The verdicts (hpcsolve.core.verdicts) on this run's reference values, by ``validation.reference``: the
    errors of taylor_green, poiseuille and ghia against ``validation.max_error`` (default
    :data:`DEFAULT_MAX_ERROR`), the Schaefer-Turek values against the published ranges (widened by
    ``validation.range_margin``). Only values the run measured are judged (none after a run that stopped before
    its reference metrics), except a 2D-2 run with c_D max but no Strouhal number (the lift did not swing twice):
    that Strouhal number is outside, as NaN. Empty without a reference (and for a Ghia cavity at a Reynolds
    number Ghia et al. did not tabulate). ``derived``: unused (the FEM verdicts' bounds need the mesh size)."""
    ref = case.validation.reference
    if ref in DEFAULT_MAX_ERROR:
        bound = case.validation.max_error or DEFAULT_MAX_ERROR[ref]
        return {name: error_bound(metrics[name], bound, cite) for name, cite in _error_values(ref, metrics, case)}
    if ref.startswith("schafer_turek"):
        return _schafer_turek_verdicts(ref, metrics, case.validation.range_margin)
    return {}


def _error_values(ref: str, metrics: dict, case) -> list[tuple[str, str]]:
    """(metric name, citation) of the errors a reference's bound applies to, among those measured."""
    if ref == "ghia":
        cite = f"Ghia, Ghia & Shin 1982, Re {case.physics.reynolds:g}, largest centreline difference / lid speed"
        return [(k, cite) for k in ("ghia_u_max_abs_diff", "ghia_v_max_abs_diff") if k in metrics]
    name = "velocity_rel_l2_error" if ref == "taylor_green" else "profile_rel_l2_error"
    value = metrics.get(name)
    if ref == "taylor_green" and value is not None and not math.isfinite(value) and "velocity_max_abs_error" in metrics:
        # the analytic vortex decayed to 0 in float64: no relative error; the absolute one (in units of the
        # amplitude) takes the same bound
        return [("velocity_max_abs_error", "analytic Taylor-Green vortex, largest velocity error / amplitude")]
    return [(name, ERROR_REFERENCES[ref])] if name in metrics else []


#: Schaefer-Turek: (judged metric, fallback metric, key of the published range) per benchmark. 2D-1 judges the
#: means over the last quarter of the monitor samples (:func:`_window_metrics`: one final sample of c_L swings
#: with the remaining sound wave), the final values where the run was too short for a window
ST_VALUES = {
    "case_2d1": (("drag_coefficient_window_mean", "drag_coefficient", "c_D"),
                 ("lift_coefficient_window_mean", "lift_coefficient", "c_L"),
                 ("pressure_difference_pa", None, "dp")),
    "case_2d2": (("drag_coefficient_max", None, "c_D_max"), ("lift_coefficient_max", None, "c_L_max"),
                 ("strouhal", None, "strouhal")),
}


def _schafer_turek_verdicts(ref: str, metrics: dict, margin: float) -> dict:
    which = "case_2d1" if ref.endswith("2d1") else "case_2d2"
    data = obs.schafer_turek()[which]
    cite = f"Schafer & Turek 1996, {'2D-1' if which == 'case_2d1' else '2D-2'}"
    if margin:
        cite += f", range widened by {100 * margin:g} % (validation.range_margin)"
    out = {}
    for name, fallback, key in ST_VALUES[which]:
        if name not in metrics and fallback in metrics:
            name = fallback
        if name in metrics:
            value = metrics[name]
        elif name == "strouhal" and "drag_coefficient_max" in metrics:
            value = math.nan          # the periodic metrics were made, but fewer than two lift periods were seen
        else:
            continue
        out[name] = judge(value, *widened(*data[key], margin), cite)
    return out
