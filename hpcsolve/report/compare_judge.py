"""What a comparison judges a FEM run by (``hpcsolve compare --judge``, the case's ``[compare] judge``).

``solution``: a FEM run is judged by its *solution error* (the relative L2 difference of its solution from the fp64
reference's, the error ``compare`` measures) against the *discretisation error* of the mesh (the fp64 reference's
own error against the analytic solution at the nodes, the same norm; where the case has no analytic solution, the
estimate the FEM run reports as ``discretisation_error``, e.g. a twice-refined run). A precision whose solution error
is at most NEGLIGIBLE_FRACTION (1/10, ``hpcsolve.fem.judge``) of the discretisation error changes the answer by less
than a tenth of what the mesh already gets wrong: it is acceptable even where its solve stalled above ``rtol``
(status ``not_converged``: fp32 CG stalls at about kappa x its unit roundoff, a residual fp64 reaches easily but
which the solution no longer shows), and it can be recommended. The acceptance limit is then
min(--tolerance, NEGLIGIBLE_FRACTION x discretisation error): never looser than the tolerance asked for.

``residual``: the behaviour before: a run counts only when its solve finished (converged: the residual met
``rtol``) and its field error is within ``--tolerance``.

**Default** (``None``): ``solution`` for a FEM case whose reference has a discretisation error (an analytic
solution, or the estimate in its metrics), else ``residual`` (every LBM case: "residual" is the field error against
the reference within ``--tolerance``). Why solution first: the question a FEM user asks of a precision is "is its
error small against my discretisation error?" - a residual that stalls at 1e-4 says nothing about a solution that
differs from fp64's by 1e-6 on a mesh whose own error is 1e-4, and judging by the residual excluded fp32 from every
FEM comparison although its answer was indistinguishable at the mesh's accuracy. ``--judge residual`` keeps the
stricter rule for users who need the algebraic accuracy itself (e.g. a solve inside a longer computation).

:func:`hpcsolve.report.compare_rejudge.rejudge` judges a saved comparison again (``hpcsolve compare --rejudge
DIR``) from its comparison.json, without running anything.
"""

from __future__ import annotations

import math

import numpy as np

from hpcsolve.core import scaled
from hpcsolve.core.errors import CaseError

JUDGES = ("solution", "residual")
#: statuses of a FEM solve that ended above rtol: a stalled or capped solve ("not_converged"), and one the FEM runner
#: found accurate to its discretisation (hpcsolve.fem.judge.ACCURATE_STATUS; tests/report/test_compare_rejudge.py keeps the
#: two in step). Judged by solution, their solutions count (``Comparison.finished``)
STALLED = ("not_converged", "accurate_to_discretisation")
FALLBACK_FRACTION = 0.1      # hpcsolve.fem.judge.NEGLIGIBLE_FRACTION, where that module is not there
#: the metrics of a FEM run that say how its precision's error compares with the discretisation error (the FEM
#: runner's, hpcsolve.fem.judge); kept in each Run (``Run.solution``) and in comparison.json
SOLUTION_KEYS = ("discretisation_error", "discretisation_error_source", "precision_error", "precision_error_ratio",
                 "precision_negligible")


def negligible_fraction() -> float:
    """The fraction of the discretisation error below which a precision's error is negligible (the FEM rule)."""
    try:
        from hpcsolve.fem.judge import NEGLIGIBLE_FRACTION   # late: optional (a FEM module; its package's start-up cost)
    except ImportError:
        return FALLBACK_FRACTION
    return float(NEGLIGIBLE_FRACTION)


def check_judge(case, judge) -> str | None:
    """``judge`` (None: the case's ``compare.judge`` where it has one, else the default) checked before anything
    runs: one of JUDGES, ``solution`` for a FEM case only. CaseError naming ``--judge`` otherwise."""
    field_name = "--judge"
    if judge is None:
        judge, field_name = getattr(getattr(case, "compare", None), "judge", None), "compare.judge"
    if judge is None:
        return None
    if not isinstance(judge, str) or judge.strip().lower() not in JUDGES:
        raise CaseError.invalid(field_name, judge, ", ".join(JUDGES))
    judge = judge.strip().lower()
    if judge == "solution" and case.solver != "fem":
        raise CaseError.invalid(field_name, judge, "residual (the field error against the reference within "
                                "--tolerance) for an LBM case",
                                why="solution judges a FEM run by its discretisation error; an LBM case has none")
    return judge


def discretisation(ref_result) -> dict:
    """The discretisation error a comparison judges FEM runs against, from the fp64 reference run ``ref_result``:
    the ``discretisation_error`` its metrics report (hpcsolve.fem.judge: relative L2 against the analytic solution,
    or a recovery estimate where there is none), else its solution against the analytic solution at the nodes
    (relative L2 of the nodal values; P1 nodal values are superconvergent, so this is smaller than the L2 error and
    the judgement stricter); {} where neither is known."""
    fields, metrics = getattr(ref_result, "fields", {}) or {}, getattr(ref_result, "metrics", {}) or {}
    out = {"fraction": negligible_fraction()}
    d = metrics.get("discretisation_error")
    if isinstance(d, (int, float)) and not isinstance(d, bool) and math.isfinite(d) and d > 0:
        src = str(metrics.get("discretisation_error_source") or "the reference run's estimate")
        norm = metrics.get("discretisation_error_norm")
        return {**out, "error": float(d), "source": src + (f", {norm}" if norm else "")}
    if "u" in fields and "u_exact" in fields:
        u, exact = np.asarray(fields["u"], dtype=np.float64), np.asarray(fields["u_exact"], dtype=np.float64)
        norm = scaled.norm2(exact)
        err = scaled.ratio(scaled.norm2(u - exact), norm) if norm > 0 else math.nan   # as comparison.field_error
        if math.isfinite(err) and err > 0:
            return {**out, "error": float(err), "source": "analytic, relative L2 of the nodal values"}
    return {}


def resolve(comp, asked: str | None, family: str) -> None:
    """Set ``comp.judge`` (and ``comp.judge_note``) once the reference has run: ``asked``, else the default (module
    docstring); ``solution`` without a discretisation error falls back to ``residual`` saying why."""
    has = bool(comp.discretisation.get("error"))
    if asked is None:
        comp.judge = "solution" if family == "fem" and has else "residual"
    elif asked == "solution" and not has:
        comp.judge = "residual"
        comp.judge_note = ("judge solution asked, but the reference has no discretisation error (no analytic "
                           "solution, no estimate in its metrics): judged by the residual instead")
    else:
        comp.judge = asked


def solution_metrics(res) -> dict:
    """The run's own solution-vs-discretisation metrics (SOLUTION_KEYS) and, where hpcsolve.fem.judge is there, its
    judgement {"accurate", "reason"}; {} for a run without them (LBM, or a FEM runner without the metrics)."""
    metrics = getattr(res, "metrics", None) or {}
    out = {k: metrics[k] for k in SOLUTION_KEYS if k in metrics}
    if not out:
        return out
    try:
        from hpcsolve.fem.judge import judge_solution   # late: optional (a FEM module; its package's start-up cost)
    except ImportError:
        return out
    accurate, reason = judge_solution(metrics)
    out["accurate"], out["reason"] = accurate, str(reason)
    return out


def note(comp, r) -> str:
    """The verdict's words on a run's solution error against the discretisation error (judge solution), "" else."""
    d = comp.discretisation.get("error")
    if comp.judge != "solution" or not d or r.is_reference or not math.isfinite(r.error):
        return ""
    frac = comp.discretisation.get("fraction", FALLBACK_FRACTION)
    ratio = r.error / d
    text = (f"its solution error {r.error:.2g} (against {comp.reference_label}) is {ratio:.2g} x the "
            f"discretisation error {d:.2g} ({comp.discretisation.get('source', '')}): "
            f"{'negligible' if ratio <= frac else 'not negligible'} (<= {frac:g} x is)")
    if r.status in STALLED and comp.acceptable(r):
        true = r.residuals.get("true_residual")
        at = f" (true residual {true:.2g})" if isinstance(true, (int, float)) else ""
        text += f"; its solve stalled above rtol{at}, which its solution does not show at this mesh's accuracy"
    return text


def ratio_text(comp, r) -> str:
    """The compact table's error class under judge solution: "0.0016 x disc." ("" where not judged so)."""
    d = comp.discretisation.get("error")
    if comp.judge != "solution" or not d or not math.isfinite(r.error) or r.is_reference:
        return ""
    return f"{r.error / d:.2g} x disc."
