"""What a periodic flow is judged by in a comparison (``hpcsolve compare``; docs/guide/compare.md, "Periodic flows").

The snapshot error (the run's end-time fields against the reference's at the same time) of a periodic flow such as
the vortex shedding of Schafer-Turek 2D-2 mostly measures a phase lag: a run whose shedding frequency differs by
1e-4 is 1e-2 of a period behind after 100 periods, and its snapshot differs by what the flow changes in that time.
Where the comparison is periodic, a run is judged instead by

- its **phase-aligned error**: the run's end-time fields against the reference's fields *at the same phase of the
  reference's cycle* (:func:`aligned_error`), and
- its **quantities of interest** (:data:`QOI`: c_D max, c_L max, St, where the run's metrics have them) against the
  reference run's values (relative differences) and against the published ranges (the run's own verdicts).

**When a comparison is periodic** (:func:`cycle`): the reference run's monitored lift (series
``lift_coefficient``) over the last half of the run (the window of ``observables.strouhal``) crosses its mean
upward at least MIN_CROSSINGS (3: two whole periods) times, at intervals within PERIOD_SPREAD (10 %) of each other
(the start-up's sound waves and a settling flow are not that regular), and swings (max - min) by at least
MIN_SWING (5 %) of its mean |drag coefficient| there (a steady flow's lingering sound wave, Schafer-Turek 2D-1:
about 1e-4 of its c_D). A case without a monitored lift (the cavity, FEM) is never periodic.

**Phase**: a time t between two upward crossings c_k <= t < c_k+1 has phase (t - c_k) / (c_k+1 - c_k) (of a period,
0 <= phase < 1); after the last crossing, (t - c_last) / T with T the mean period of the window (at most
MAX_EXTRAPOLATE periods on); before the first crossing of the window none.

**Alignment**: the run's end-time fields (phase p in the run's own cycle) are compared with the reference's state at
phase p of the reference's cycle, made from the reference's snapshots and end-time fields inside its window: the two
nearest in phase on either side, linearly interpolated in phase where they are at most MAX_BRACKET (0.1) of a period
apart (a state within PHASE_ACCURACY, 1e-5 of a period, is taken as it is), else the two nearest on one side
extrapolated linearly (at most half their spacing beyond the nearer: MAX_EXTRAPOLATION); else the nearest where it is within MAX_NEAREST (0.01) of a period; each first among the states within a
period of the run's end time, then among all; else the phase is not resolved and the run is judged by its snapshot
error, saying so. Interpolating states of different cycles assumes the flow repeats
itself (the window is the run's second half for that reason); linear interpolation over a bracket b of a period
misses up to (pi b)^2 / 8 of the oscillating part of a field, nearest-in-phase at distance d about 2 pi d of it: the
``phase_gap`` and ``bracket`` of each alignment are reported with it. Snapshots every ``time.output_interval`` that
is nearly a whole number of periods all fall at nearly one phase: the runs' phase differences must then be small.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hpcsolve.core.results import Result
from hpcsolve.lbm import observables as obs
from hpcsolve.report.comparison import field_error

__all__ = ["QOI", "Cycle", "aligned_error", "cycle", "judge"]

MIN_CROSSINGS = 3          # upward mean-crossings in the window: two whole periods (as observables.strouhal)
PERIOD_SPREAD = 0.10       # (longest - shortest) / mean interval between crossings, at most
MIN_SWING = 0.05           # lift max - min over the window, at least this fraction of the mean |drag coefficient|
MAX_EXTRAPOLATE = 1.5      # periods after the last crossing that still have a phase
MAX_BRACKET = 0.10         # the two reference states either side in phase: interpolated when at most this apart
MAX_NEAREST = 0.01         # else the nearest one, when at most this far (of a period)
#: a phase is known to about this (of a period): a state this close is the state at it. The crossings are linear
#: interpolations between monitor samples about the signal's mean over whole cycles (observables.upward_crossings):
#: for a sine sampled 40 times a period 1e-6 of a period off where the lag is no whole number of samples, 1e-15 where
#: it is. (With the samples' mean, 1e-3: the fp32 run of 2D-2, 2.9e-4 of a period behind fp64's, was compared with
#: fp64's end state as it was, and its vorticity error 1.27e-3 was mostly that lag.)
PHASE_ACCURACY = 1e-5
#: else, without two states either side, the two nearest on one side extrapolated linearly, when at most MAX_BRACKET
#: apart and the run's phase at most MAX_EXTRAPOLATION of their spacing beyond the nearer: a run a little behind or
#: ahead of the reference's end is then compared with the reference at its own phase, not with a state further away
MAX_EXTRAPOLATION = 0.5
#: the quantities of interest of a periodic flow, where the run's metrics have them, with their short names
QOI = {"drag_coefficient_max": "c_D max", "lift_coefficient_max": "c_L max", "strouhal": "St"}


@dataclass
class Cycle:
    """The periodic lift of a run: its upward mean-crossing times in the window and the mean period."""
    crossings: np.ndarray
    period: float
    end: float                 # the last monitored time

    def phase(self, t: float) -> float | None:
        """The phase of time ``t`` (fraction of a period, 0 <= phase < 1); None outside the periodic window."""
        c = self.crossings
        if t < c[0] - 1e-12 * self.period or t > c[-1] + MAX_EXTRAPOLATE * self.period:
            return None
        if t >= c[-1]:
            return float(((t - c[-1]) / self.period) % 1.0)
        k = int(np.searchsorted(c, t, side="right")) - 1
        k = min(max(k, 0), c.size - 2)
        return float(min(max((t - c[k]) / (c[k + 1] - c[k]), 0.0), np.nextafter(1.0, 0.0)))

    def to_dict(self) -> dict:
        return {"period_s": self.period, "cycles": int(self.crossings.size - 1),
                "window_s": [float(self.crossings[0]), self.end]}


def cycle(res: Result | None) -> tuple[Cycle | None, str]:
    """The run's periodic cycle from its monitored lift (module docstring: the rule), or None and why not."""
    series = getattr(res, "series", None) or {}
    if "lift_coefficient" not in series or "time" not in series:
        return None, "no monitored lift"
    t = np.asarray(series["time"], float)
    lift = np.asarray(series["lift_coefficient"], float)
    if t.size != lift.size or not np.all(np.isfinite(lift)):
        return None, "its lift series is not finite"
    c = obs.upward_crossings(t, lift)
    if c.size < MIN_CROSSINGS:
        return None, f"its lift crosses its mean upward {c.size} times in the second half (needs {MIN_CROSSINGS})"
    gaps = np.diff(c)
    spread = float((gaps.max() - gaps.min()) / gaps.mean())
    if spread > PERIOD_SPREAD:
        return None, f"its lift's periods vary by {spread:.0%} (at most {PERIOD_SPREAD:.0%})"
    half = t >= t[0] + 0.5 * (t[-1] - t[0])
    drag = np.asarray(series.get("drag_coefficient", ()), float)
    scale = float(np.mean(np.abs(drag[half]))) if drag.size == t.size else 0.0
    swing = float(np.max(lift[half]) - np.min(lift[half]))
    if scale > 0 and swing < MIN_SWING * scale:
        return None, f"its lift swings by {swing:.2g}, under {MIN_SWING:.0%} of its drag coefficient {scale:.3g}"
    return Cycle(c, float((c[-1] - c[0]) / (c.size - 1)), float(t[-1])), ""


def _states(res: Result) -> list[tuple[float, dict]]:
    """(time, fields) of the run's snapshots and of its end-time fields (once where the last snapshot is the end)."""
    out = [(float(s.time), s.fields) for s in res.snapshots]
    end = _end_time(res)
    if res.fields and end is not None and not any(abs(t - end) <= 1e-9 * max(1.0, abs(end)) for t, _ in out):
        out.append((end, res.fields))
    return out


def _end_time(res: Result) -> float | None:
    t = res.metrics.get("simulated_time_s")
    if isinstance(t, (int, float)) and math.isfinite(t):
        return float(t)
    return float(res.snapshots[-1].time) if res.snapshots else None


def aligned_error(fields: dict, phase: float, ref_states: list, ref_cycle: Cycle, names, near: float | None = None
                  ) -> dict:
    """``fields`` (at ``phase`` of its run's cycle, at time ``near``) against the reference's state at the same
    phase of ``ref_cycle``, made from ``ref_states`` ((time, fields) pairs; module docstring): two states either
    side in phase (interpolated) before the nearest one, each first from the states within a period of ``near``
    (one cycle: no change between cycles enters), then from every state of the window. {"errors": {name:
    field_error}, "how": words, "phase", "phase_gap", "bracket"} or {"why": why the phase is not resolved}."""
    cands = [(p, t, f) for t, f in ref_states if (p := ref_cycle.phase(t)) is not None]
    if not cands:
        return {"why": "the reference has no snapshot in its periodic window"}
    close = [c for c in cands if near is not None and abs(c[1] - near) <= ref_cycle.period]
    tiers = [close, cands] if close and len(close) < len(cands) else [cands]
    found = next((f for nearest in (False, True) for tier in tiers if (f := _pick(tier, phase, nearest))), None)
    if found is None:
        gap = min(min((phase - c[0]) % 1.0, (c[0] - phase) % 1.0) for c in cands)
        return {"why": (f"the reference's {len(cands)} states in its window are {gap:.2f} of a period away "
                        f"from the run's phase {phase:.3f} at the nearest (at most {MAX_NEAREST:g}, or two either "
                        f"side within {MAX_BRACKET:g}: a time.output_interval a little off a whole number of "
                        f"periods gives more phases)"), "phase_gap": gap}
    pick, gap, bracket = found
    errors = {}
    for name in names:
        if all(name in s[2] for s, _ in pick) and name in fields:
            ref = sum(wt * np.asarray(s[2][name], dtype=np.float64) for s, wt in pick)
            errors[name] = field_error(fields[name], ref)
    at = " and ".join(f"t = {s[1]:.4g} s (phase {s[0]:.3f})" for s, _ in pick)
    how = (f"the reference's state at {at}" if len(pick) == 1 else
           f"interpolated in phase between the reference's states at {at}" if bracket >= 0 else
           f"extrapolated in phase from the reference's states at {at}")
    return {"errors": errors, "how": how, "phase": phase, "phase_gap": gap, "bracket": bracket}


def _pick(cands: list, phase: float, nearest: bool):
    """([(state, weight)], phase gap, bracket) of the reference's state at ``phase`` from ``cands`` ((phase, time,
    fields)): the one at that phase (within PHASE_ACCURACY), or the two either side within MAX_BRACKET (interpolated linearly), or with
    ``nearest`` the nearest within MAX_NEAREST (bracket nan); None where none is."""
    below = min(cands, key=lambda c: (phase - c[0]) % 1.0)
    above = min(cands, key=lambda c: (c[0] - phase) % 1.0)
    lo, hi = (phase - below[0]) % 1.0, (above[0] - phase) % 1.0
    if min(lo, hi) <= PHASE_ACCURACY:           # as close as the phase itself is known: taken as it is
        return [(below if lo <= hi else above, 1.0)], min(lo, hi), 0.0
    if below is not above and lo + hi <= MAX_BRACKET:
        w = lo / (lo + hi)
        return [(below, 1.0 - w), (above, w)], min(lo, hi), lo + hi
    near_one = below if lo <= hi else above
    gap = min(lo, hi)
    dist = (lambda c: (phase - c[0]) % 1.0) if lo <= hi else (lambda c: (c[0] - phase) % 1.0)
    farther = [c for c in cands if c is not near_one and dist(c) > gap]
    if farther:
        second = min(farther, key=dist)
        spacing = dist(second) - gap
        if 0.0 < spacing <= MAX_BRACKET and gap <= MAX_EXTRAPOLATION * spacing:
            w = gap / spacing                  # f(phase) = f1 + (f1 - f2) * gap / spacing
            return [(near_one, 1.0 + w), (second, -w)], gap, -spacing
    if nearest and min(lo, hi) <= MAX_NEAREST:
        return [(below if lo <= hi else above, 1.0)], min(lo, hi), math.nan
    return None


def _field_names(ref: Result, skip) -> list[str]:
    return [f for f, v in ref.fields.items() if f not in skip and np.issubdtype(np.asarray(v).dtype, np.floating)]


def qoi(res: Result, ref: Result) -> dict:
    """name -> {"value", "reference", "rel_diff", "range", "verdict"} of the quantities of interest the reference
    reports: the run's value against the reference's (a value the run lacks: rel_diff inf) and its published range
    (``Result.validation``)."""
    out = {}
    for name in QOI:
        b = ref.metrics.get(name)
        if not _number(b):
            continue
        a = res.metrics.get(name)
        rel = (abs(a - b) / abs(b) if b != 0 else abs(a - b)) if _number(a) else math.inf
        v = (getattr(res, "validation", None) or {}).get(name) or {}
        out[name] = {"value": a if _number(a) else None, "reference": b, "rel_diff": rel,
                     "range": v.get("range"), "verdict": v.get("verdict")}
    return out


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def judge(res: Result, ref: Result, judged, skip, snapshot_errors: dict) -> dict:
    """The periodic judgement of run ``res`` against the reference ``ref`` ({} where the reference is not periodic):
    the reference's cycle, the run's, the phase-aligned errors of the end-time fields, the quantities of interest,
    the phase-aligned drift, and ``judged_errors`` (name -> relative error) that the verdict and recommendation use:
    the phase-aligned error of each judged field (its snapshot error where the phase is not resolved, and
    ``fallback`` says why) and the relative difference of each quantity of interest (or of each judged metric)."""
    ref_cycle, why_not = cycle(ref)
    if ref_cycle is None:
        return {}
    names = _field_names(ref, skip)
    out = {"reference_cycle": ref_cycle.to_dict(), "qoi": qoi(res, ref), "aligned": {}, "fallback": ""}
    run_cycle, why = cycle(res) if res is not ref else (ref_cycle, "")
    end = _end_time(res)
    if run_cycle is None:
        out["fallback"] = f"the run's lift is not periodic ({why})"
    elif res is ref:
        out["cycle"] = ref_cycle.to_dict()
        out["aligned"] = {"errors": {n: field_error(res.fields[n], res.fields[n]) for n in names if n in res.fields},
                          "how": "the reference itself", "phase_gap": 0.0, "bracket": 0.0}
    else:
        out["cycle"] = run_cycle.to_dict()
        phase = run_cycle.phase(end) if end is not None else None
        found = (aligned_error(res.fields, phase, _states(ref), ref_cycle, names, end) if phase is not None
                 else {"why": "the run's end time has no phase in its cycle"})
        out["aligned"] = found
        if "why" in found:
            out["fallback"] = f"the phase is not resolved: {found['why']}"
        out["drift"] = _aligned_drift(res, ref, run_cycle, ref_cycle, judged, names)
    out["judged_errors"], out["judged_how"] = _judged_errors(out, judged, names, snapshot_errors)
    out["note"] = note(out)
    return out


def _judged_errors(out: dict, judged, names, snapshot_errors: dict) -> dict:
    """(name -> relative error the verdict uses, name -> how it was measured) (``judge``)."""
    aligned = (out["aligned"] or {}).get("errors") or {}
    errs, how = {}, {}
    for name in (judged if judged else names + list(out["qoi"])):
        if name in out["qoi"]:
            errs[name], how[name] = out["qoi"][name]["rel_diff"], "against the reference's value"
        elif name in aligned:
            errs[name], how[name] = aligned[name]["rel_l2"], "phase-aligned"
        elif name in snapshot_errors:
            errs[name] = snapshot_errors[name]["rel_l2"]
            how[name] = "at the same time: the phase is not aligned" if name in names else "the run's value"
    return errs, how


def _aligned_drift(res: Result, ref: Result, run_cycle: Cycle, ref_cycle: Cycle, judged, names) -> dict:
    """The phase-aligned error of the first judged field (velocity, else the first field) at each of the run's
    snapshots in its periodic window."""
    key = next((f for f in (judged or ()) if f in names), "velocity" if "velocity" in names else
               (names[0] if names else None))
    times, errs, states = [], [], _states(ref)
    for t, fields in _states(res):
        phase = run_cycle.phase(t)
        if key is None or phase is None or key not in fields:
            continue
        found = aligned_error({key: fields[key]}, phase, states, ref_cycle, [key], t)
        if key in found.get("errors", {}):
            times.append(t)
            errs.append(found["errors"][key]["rel_l2"])
    return {"field": key, "time": times, "rel_l2": errs} if times else {}


def note(p: dict) -> str:
    """The periodic judgement in words, for a run's verdict ("" where not periodic)."""
    if not p:
        return ""
    cyc = p["reference_cycle"]
    parts = [f"periodic flow (the reference's lift: period {cyc['period_s']:.4g} s, {cyc['cycles']} cycles in "
             f"its second half), judged at the same phase of the cycle and by its quantities of interest"]
    aligned = (p.get("aligned") or {}).get("errors") or {}
    if p.get("fallback"):
        parts.append(f"fields by their snapshot error: {p['fallback']}")
    elif aligned and (p.get("aligned") or {}).get("how") != "the reference itself":
        a = p["aligned"]
        parts.append("phase-aligned " + ", ".join(f"{k} {e['rel_l2']:.2g}" for k, e in aligned.items())
                     + f" (phase {a['phase']:.3f}, {a['how']})")
    q = []
    for name, v in p.get("qoi", {}).items():
        val = "not measured" if v["value"] is None else f"{v['value']:.4g}"
        rel = "" if not math.isfinite(v["rel_diff"]) else f", {v['rel_diff']:.1e} from the reference's"
        rng = v.get("range")
        pub = (f", {v['verdict']} [{', '.join(f'{x:g}' for x in rng)}]" if isinstance(rng, (list, tuple))
               and v.get("verdict") else "")
        q.append(f"{QOI[name]} {val}{rel}{pub}")
    if q:
        parts.append("; ".join(q))
    return ": ".join(parts[:1]) + ("; " + "; ".join(parts[1:]) if len(parts) > 1 else "")
