"""Judge a saved comparison again (``hpcsolve compare --rejudge DIR --tolerance T --fields ... --judge ...``): its
comparison.json read back into a Comparison (the runs' times, errors, residuals, verdict inputs), the tolerance, the
fields judged or the judge (hpcsolve.report.compare_judge) changed, and the table, recommendation and plots written
again - nothing is run (a scalar metric the saved errors lack is read from the run folders' summary.json)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from hpcsolve.core.errors import CaseError
from hpcsolve.report.compare_inputs import check_out, checked_tolerance
from hpcsolve.report.compare_judge import JUDGES
from hpcsolve.report.comparison import Comparison

__all__ = ["load", "rejudge"]


def load(folder) -> Comparison:
    """The Comparison saved in ``folder``/comparison.json (its runs as Run objects, without results); CaseError
    naming ``--rejudge`` where the folder holds none or it cannot be read."""
    path = Path(folder) / "comparison.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CaseError.invalid("--rejudge", str(folder), "a folder holding a comparison (comparison.json)",
                                why="it has no comparison.json") from None
    except (OSError, ValueError) as exc:
        raise CaseError.invalid("--rejudge", str(folder), "a folder holding a readable comparison.json",
                                why=f"cannot read it ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        raise CaseError.invalid("--rejudge", str(folder), "a folder holding a comparison's comparison.json",
                                why="its comparison.json has no runs")
    return Comparison.from_dict(data)


def metric_errors(folder, comp, names) -> None:
    """Scalar metrics of ``names`` that the saved runs have no error for: their relative difference to the
    reference's value, from the run folders' summary.json (``folder``/<backend>-<precision>[-<pc>]/)."""
    def metrics(r) -> dict:
        name = f"{r.backend}-{r.precision}" + (f"-{r.preconditioner}" if r.preconditioner else "")
        try:
            return json.loads((Path(folder) / name / "summary.json").read_text(encoding="utf-8")).get("metrics") or {}
        except (OSError, ValueError):
            return {}

    ref = next((r for r in comp.runs if r.is_reference), None)
    if ref is None:
        return
    ref_m = metrics(ref)
    for r in comp.runs:
        missing = [n for n in names if n not in r.field_errors]
        if not missing or r.status == "skipped":
            continue
        mine = metrics(r)
        for n in missing:
            a, b = mine.get(n), ref_m.get(n)
            if _number(a) and _number(b):
                rel = abs(a - b) / abs(b) if b != 0 else abs(a - b)
                r.field_errors[n] = {"rel_l2": rel, "rel_max": rel}


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_rejudge_fields(comp, fields) -> None:
    """Every name of ``fields`` is a field or metric some saved run has an error for, else CaseError naming
    ``--fields`` with the names there are."""
    have = sorted({k for r in comp.runs for k in r.field_errors})
    unknown = [f for f in fields if f not in have]
    if unknown:
        raise CaseError.invalid("--fields", " ".join(unknown), ", ".join(have) or "none (no run has an error)",
                                why="the saved comparison has no error for it (a metric is read from the run "
                                    "folders' summary.json: is the folder complete?)")


def rejudge(folder, tolerance: float | None = None, fields=None, judge: str | None = None, *, out=None,
            overwrite: bool = False):
    """The saved comparison in ``folder`` judged again with another ``tolerance`` / ``fields`` / ``judge`` (None:
    as saved), nothing run: (the Comparison, the files written). Written to ``out`` (default ``folder``/rejudged):
    comparison.json, comparison.md and plots/pareto.png, drift.png (residuals.png needs the runs' histories: not
    rewritten). ``out`` holding a comparison is refused unless ``overwrite``; ``out`` == ``folder`` with
    ``overwrite`` replaces the original comparison.json / .md / plots (the run folders are never touched)."""
    comp = load(folder)
    saved = {"tolerance": comp.tolerance, "fields": comp.fields, "judge": comp.judge}
    if tolerance is not None:
        comp.tolerance = checked_tolerance(tolerance)
    if fields is not None:
        fields = [fields] if isinstance(fields, str) else list(fields)
        metric_errors(folder, comp, fields)
        check_rejudge_fields(comp, fields)
        comp.fields = fields
        for r in comp.runs:
            r.judged = fields
            if r.periodic.get("judged_errors") is not None:     # phase-aligned errors of the names still judged
                kept = {k: v for k, v in r.periodic["judged_errors"].items() if k in fields}
                r.periodic["judged_errors"] = kept or None
    if judge is not None:
        if str(judge).strip().lower() not in JUDGES:
            raise CaseError.invalid("--judge", judge, ", ".join(JUDGES))
        judge = str(judge).strip().lower()
        if judge == "solution" and not comp.discretisation.get("error"):
            raise CaseError.invalid("--judge", judge, "residual", why="the saved comparison has no discretisation "
                                    "error (an LBM case, or a FEM reference without an analytic solution or estimate)")
        comp.judge, comp.judge_note = judge, None
    comp.rejudged_from = {"folder": str(folder), **saved}
    out = Path(out) if out is not None else Path(folder) / "rejudged"
    if out.resolve() != Path(folder).resolve():
        check_out(out, overwrite)
    elif not overwrite:
        raise CaseError.invalid("--out", str(out), "another folder, or --overwrite to replace the saved comparison's "
                                "files there", why="it is the folder judged again")
    return comp, comp.write(out)


def command(args) -> int:
    """``hpcsolve compare --rejudge DIR`` (the parsed arguments): options that run something are refused (exit 2),
    the table printed and the files written said."""
    ignored = [o for o, v in (("case", args.case), ("--set", args.overrides), ("--backends", args.backends),
                              ("--precisions", args.precisions), ("--preconditioners", args.preconditioners),
                              ("--reference", args.reference), ("--budget", args.budget), ("--repeats", args.repeats))
               if v]
    if ignored:
        raise CaseError.invalid("--rejudge", str(args.rejudge), "--tolerance, --fields, --judge, --out, --overwrite, "
                                "--wide", why=f"nothing is run again, so {', '.join(ignored)} cannot apply")
    comp, files = rejudge(args.rejudge, args.tolerance, args.fields, args.judge, out=args.out,
                          overwrite=args.overwrite)
    print(comp.table(wide=args.wide))
    print(f"judged again in {files['md'].parent}/ (" + ", ".join(Path(f).name for f in files.values())
          + f"; the run folders and anything else in {args.rejudge}/ are unchanged)")
    return 0
