"""Validation verdicts: a run's values against their published ranges or analytic error bounds.

``Result.validation`` maps the name of each judged value (its key in ``Result.metrics``) to a verdict::

    {"value": 0.23496, "range": [0.99, 1.01], "verdict": "outside", "by": 0.75504, "by_relative": 0.76267,
     "reference": "Schafer & Turek 1996, 2D-2"}

- ``range``: the closed interval the value should lie in: a published range as published (or widened by the case's
  ``validation.range_margin``), or ``[0, bound]`` for an error against an analytic or tabulated reference;
- ``verdict``: ``"inside"`` or ``"outside"``; a value that is not a finite number (NaN: the run measured nothing
  usable) is outside;
- ``by``: how far outside, in the value's units: ``lo - value`` below the range, ``value - hi`` above, ``0.0`` inside
  (NaN for a value that is not a finite number);
- ``by_relative``: ``by`` as a fraction of the bound it crossed (``by / |hi|`` above, ``by / |lo|`` below; by the
  range's width where that bound is 0). For an error bound ``[0, b]`` it is how much the error exceeds its bound:
  0.5 is an error 1.5 times the bound. 0.0 inside;
- ``reference``: a short citation of where the range comes from.

A case without a reference has an empty ``validation``. The families say which values are judged and against what
(``hpcsolve.lbm.reference.verdicts``, ``hpcsolve.fem.verdicts.verdicts``); this module holds the arithmetic and the
text a reader sees: the console rows and the one warning line of a run with a value outside.
"""

from __future__ import annotations

import math

INSIDE, OUTSIDE = "inside", "outside"
#: the keys of one verdict, in the order they are written
KEYS = ("value", "range", "verdict", "by", "by_relative", "reference")


def judge(value, lo: float, hi: float, reference: str) -> dict:
    """The verdict on ``value`` against the closed range [lo, hi] (module docstring)."""
    lo, hi = float(lo), float(hi)
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = math.nan
    if not math.isfinite(v):
        return {"value": v, "range": [lo, hi], "verdict": OUTSIDE, "by": math.nan, "by_relative": math.nan,
                "reference": reference}
    if lo <= v <= hi:
        by, rel, verdict = 0.0, 0.0, INSIDE
    else:
        by, bound, verdict = (lo - v, lo, OUTSIDE) if v < lo else (v - hi, hi, OUTSIDE)
        scale = abs(bound) if bound != 0.0 else hi - lo
        rel = by / scale if scale > 0 else math.inf
    return {"value": v, "range": [lo, hi], "verdict": verdict, "by": by, "by_relative": rel, "reference": reference}


def error_bound(value, bound: float, reference: str) -> dict:
    """The verdict on an error (>= 0) against its acceptance bound: the range [0, bound]."""
    return judge(value, 0.0, bound, reference)


def widened(lo: float, hi: float, margin: float) -> tuple[float, float]:
    """[lo, hi] widened by ``margin`` times each bound's magnitude on its side (0: as it is)."""
    return lo - margin * abs(lo), hi + margin * abs(hi)


def outside(validation: dict) -> dict:
    """The verdicts of ``validation`` that are outside their range."""
    return {k: v for k, v in (validation or {}).items() if v.get("verdict") == OUTSIDE}


def _num(x: float) -> str:
    return f"{x:.6g}"


def _range(v: dict) -> str:
    lo, hi = v["range"]
    return f"[{_num(lo)}, {_num(hi)}]"


def _by(v: dict) -> str:
    """'by 0.755 (76.3 % of the bound 0.99)', or '(not a finite number)' for a NaN value."""
    if not math.isfinite(v["by"]):
        return "(not a finite number)"
    rel, (lo, hi) = v["by_relative"], v["range"]
    bound = lo if v["value"] < lo else hi
    if not math.isfinite(rel):
        return f"by {v['by']:.3g}"
    return f"by {v['by']:.3g} ({100 * rel:.3g} % of the bound {_num(bound)})"


def row_text(v: dict) -> str:
    """One verdict for the console summary: '0.23496 outside [0.99, 1.01] by 0.755 (76.3 % of the bound 0.99);
    Schafer & Turek 1996, 2D-2'."""
    head = f"{_num(v['value'])} {v['verdict']} {_range(v)}"
    if v["verdict"] == OUTSIDE:
        head += f" {_by(v)}"
    return f"{head}; {v['reference']}"


def console_rows(validation: dict) -> dict:
    """``verdict_<name>`` rows for the run's summary table, one per judged value."""
    return {f"verdict_{name}": row_text(v) for name, v in (validation or {}).items()}


def warning_text(case_name: str, validation: dict, strict: bool = False) -> str:
    """The one warning line of a run with values outside their range ('' when none is): each value, its range, by
    how much and the reference; ``strict``: the case's ``run.strict_validation``."""
    out = outside(validation)
    if not out:
        return ""
    parts = [f"{name} {_num(v['value'])} outside {_range(v)} {_by(v)}, {v['reference']}" for name, v in out.items()]
    what = "a value" if len(out) == 1 else f"{len(out)} values"
    then = ("run.strict_validation = true: hpcsolve run exits 3" if strict else
            "the run's status is unchanged; run.strict_validation = true makes hpcsolve run exit 3")
    return f"{case_name}: {what} outside the reference range: " + "; ".join(parts) + f" ({then})"


def failure_text(case_name: str, validation: dict) -> str:
    """The CLI's error line under ``run.strict_validation`` (the warning line said each value)."""
    names = ", ".join(outside(validation))
    return (f"{case_name}: validation failed (run.strict_validation = true): outside the reference range: {names}")
