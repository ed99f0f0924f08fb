"""The table of a comparison (``Comparison.table``): a compact default - one row per configuration with its time and
spread, speed-up, error, error class and a short verdict, each row short enough to read (COMPACT_WIDTH) - and the
wide one (every column: throughput, memory, iterations, residuals, every field's error, published values) in
comparison.json (``table_rows``) and with ``hpcsolve compare --wide``. Each quantity is shown once: a published
quantity that the run's validation judged (e.g. the window mean of c_D, ``drag_coefficient_window_mean``) is shown
there, under its own name, and not again as the final value beside it (``vs_published/analytic``)."""

from __future__ import annotations

import math

from hpcsolve.report import compare_judge

#: the longest line of the compact table (characters) that the tests hold it to
COMPACT_WIDTH = 160
#: the compact table's columns
COMPACT_COLUMNS = ("configuration", "status", "time_s (min-max, n)", "speed-up", "error", "class", "verdict")


def table(comp, wide: bool = False) -> str:
    """The table, the reference, what the columns mean, the recommendation and every run's verdict (in full)."""
    rows = wide_rows(comp) if wide else compact_rows(comp)
    cols = [c for c in rows[0] if any(row[c] for row in rows)] if rows else []
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(str(row[c]) for c in cols) + " |" for row in rows]
    rec = comp.recommendation()
    lines.append("")
    lines += reference_lines(comp)
    if comp.reference_failed:
        lines += [f"**Failed reference**: {comp.reference_failed}; no run is judged against it (error and "
                  f"speedup columns empty).", ""]
    if comp.interrupted:
        lines += [f"**Interrupted**: {comp.interrupted}.", ""]
    lines += wide_legend(comp, rows) if wide else compact_legend(comp)
    lines.append("")
    if rec["backend"]:
        pc = f" / {rec['preconditioner']}" if rec.get("preconditioner") else ""
        lines.append(f"Recommendation: **{rec['backend']} / {rec['precision']}{pc}** ({rec['why']}).")
    else:
        lines.append(f"Recommendation: none ({rec['why']}).")
    lines.append("")
    for k, why in comp.verdicts().items():
        lines.append(f"- {k}: {why}")
    for k, why in comp.skipped.items():
        lines.append(f"- skipped {k}: {why}")
    return "\n".join(lines)


def compact_rows(comp) -> list[dict]:
    """One short row per configuration (COMPACT_COLUMNS)."""
    rec = comp.recommendation().get("label")
    rows = []
    for r in comp.runs:
        err = ""
        if math.isfinite(r.error) and not r.is_reference:
            err = f"{r.error:.2e}" + (f" {_short(r.error_field, 18)}" if r.error_field else "")
        elif r.is_reference and comp.status == "complete":
            err = "0 (reference)"
        judged = compare_judge.ratio_text(comp, r)
        cls = (judged or (f"{comp._bin(r):g}" if (r.is_reference or math.isfinite(r.error)) and comp.limit > 0
                          and comp.status == "complete" else ""))
        rows.append({
            "configuration": _short(r.label + (" (ref)" if r.is_reference else ""), 40),
            "status": r.status,
            "time_s (min-max, n)": (f"{r.wall_s:.3g} ({r.wall_min:.3g}-{r.wall_max:.3g}, n={len(r.times)})"
                                    if r.times else f"{r.wall_s:.3g}" if math.isfinite(r.wall_s) else ""),
            "speed-up": f"{r.speedup:.2f}x" if math.isfinite(r.speedup) else "",
            "error": err, "class": cls, "verdict": short_verdict(comp, r, rec),
        })
    return rows


def short_verdict(comp, r, rec_label) -> str:
    """A few words of the run's verdict (the whole verdict is listed below the table)."""
    if r.label == rec_label:
        return "**recommended**"
    if r.status == "skipped":
        return "skipped (budget)"
    if r.is_reference and comp.reference_failed:
        return "failed reference"
    if comp.status != "complete":
        return "not judged"
    if not comp.finished(r):
        return r.status.replace("_", " ")
    if r.error_note:
        return "not judged"
    if not comp.acceptable(r):
        return "error above limit"
    return "acceptable, not chosen"


def compact_legend(comp) -> list[str]:
    """What the compact table's columns mean."""
    judged = (f"class: the run's error as a multiple of the discretisation error {comp.discretisation['error']:.3g} "
              f"({comp.discretisation.get('source', '')}); <= {comp.discretisation.get('fraction', 0.1):g} x is "
              "negligible (judge solution)" if comp.judge == "solution" and comp.discretisation.get("error") else
              f"class: the accuracy class, 0 for errors at or below {comp.equal_below:.3g} (equal: round-off), then "
              "one per decade above; within a class the faster time is preferred")
    lines = ["time_s: median solver time of the timed runs (min-max, number of runs) after one untimed warm-up; "
             "speed-up against the reference's median.",
             f"error: relative L2 error vs {comp._ref_text()}, {comp._judged_text()}, with the field it is in.",
             judged + ".",
             f"Judged by: {comp.judge}" + (f" ({comp.judge_note})" if comp.judge_note else "")
             + f"; accepted at most: {comp.limit_text()}.",
             "Every column (throughput, memory, iterations, residuals, each field's error, published values): "
             "Comparison.table(wide=True), --wide on the command line, or comparison.json's table_rows."]
    if comp.rejudged_from:
        src = comp.rejudged_from
        lines.append(f"Judged again from {src.get('folder')} (saved with tolerance {src.get('tolerance')}, fields "
                     f"{src.get('fields') or 'every field'}, judge {src.get('judge')}); nothing was run.")
    return lines


def _short(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters (an ellipsis marking the cut)."""
    return text if len(text) <= width else text[:width - 1] + "…"


def _published(r) -> dict:
    """The run's analytic / published values, less those its validation judged in another form (a window mean of
    the same quantity): one value per quantity, the validation's named (``outside_published_range``)."""
    judged = set(r.validation)
    return {k: v for k, v in r.reference_errors.items()
            if k not in judged and not any(j.startswith(k + "_") for j in judged)}


def _validation_text(r) -> str:
    """The run's outside-range validation verdicts in one cell: "c_D_max 3.44 outside [3.22, 3.24]"."""
    parts = []
    for name, v in r.outside_range.items():
        val, rng = v.get("value"), v.get("range")
        shown = f"{val:.4g}" if isinstance(val, (int, float)) and not isinstance(val, bool) else str(val)
        rng = f"[{', '.join(f'{x:g}' for x in rng)}]" if isinstance(rng, (list, tuple)) else str(rng or "")
        parts.append(f"{name} {shown} outside {rng}".rstrip())
    return "; ".join(parts)


def wide_rows(comp) -> list[dict]:
    """Every column of every run (comparison.json's ``table_rows``; the table with ``--wide``)."""
    rows = []
    for r in comp.runs:
        thr = r.throughput
        if "mlups" in thr:
            throughput = f"{thr['mlups']:.1f} MLUPS"
        elif "time_per_iteration_s" in thr:
            throughput = f"{thr['time_per_iteration_s'] * 1e3:.3g} ms/it"
        else:
            throughput = ""
        ref_err = ", ".join(f"{k}={v:.3g}" for k, v in list(_published(r).items())[:3])
        res = ""
        if "true_residual" in r.residuals:
            res = f"{r.residuals['true_residual']:.2e}"
            if "residual_gap" in r.residuals:
                res += f" (gap {r.residuals['residual_gap']:.1e})"
        pc = r.preconditioner or r.preconditioner_used or ""
        if r.preconditioner and r.preconditioner_used and r.preconditioner_used != r.preconditioner:
            pc += f" ({r.preconditioner_used})"          # auto -> what it resolved to
        its = r.residuals.get("iterations")
        pc_setup = r.setup_s if r.setup_times else r.preconditioner_info.get("setup_time_s")
        rows.append({
            "backend": r.backend, "precision": r.precision + (" (ref)" if r.is_reference else ""),
            "preconditioner": pc,
            "status": r.status, "time_s": (f"{r.wall_s:.3g} ({r.wall_min:.3g}-{r.wall_max:.3g}, n={len(r.times)})"
                                           if r.times else f"{r.wall_s:.3g}" if math.isfinite(r.wall_s) else ""),
            "throughput": throughput,
            "speedup": f"{r.speedup:.2f}x" if math.isfinite(r.speedup) else "",
            "iterations": str(int(its)) if isinstance(its, (int, float)) and math.isfinite(its) else "",
            "pc_setup_s": f"{pc_setup:.3g}" if isinstance(pc_setup, (int, float)) else "",
            "state_MiB": f"{r.state_bytes / 2**20:.3g}" if r.state_bytes else "",
            "process_peak_est_MiB": f"{r.memory_bytes / 2**20:.1f}" if r.memory_bytes else "",
            "err_vs_fp64_L2": (f"{r.error:.2e}" + (f" ({r.error_field})" if r.error_field else "")
                               if math.isfinite(r.error) else ""),
            "snapshot_err_L2": (f"{max(r.snapshot_errors.values()):.2e}" if r.periodic and r.snapshot_errors
                                else ""),
            "qoi_vs_ref": ", ".join(f"{k} {v['rel_diff']:.1e}" for k, v in (r.periodic.get("qoi") or {}).items()
                                    if not r.is_reference),
            "err_L2_by_field": ", ".join(f"{k} {e['rel_l2']:.2e}" for k, e in r.field_errors.items()),
            "accuracy_class": (f"{comp._bin(r):g}" if (r.is_reference or math.isfinite(r.error)) and comp.limit > 0
                               and comp.status == "complete" else ""),
            "err_vs_fp64_max": (f"{max(e['rel_max'] for e in r.field_errors.values()):.2e}"
                                if r.field_errors else ""),
            "vs_discretisation": compare_judge.ratio_text(comp, r),
            "true_residual": res, "vs_published/analytic": ref_err,
            "predicted_s": f"{r.predicted_s:.3g}" if isinstance(r.predicted_s, (int, float)) else "",
            "outside_published_range": _validation_text(r),
        })
    return rows


def reference_lines(comp) -> list[str]:
    """How the reference was chosen and checked (``reference_info``), for the table."""
    info = comp.reference_info
    if not info:
        return []
    lines = [f"Reference: **{info['label']}** ({info['how']})" + (f"; {info['note']}" if info.get("note") else "")
             + "."]
    check = info.get("cross_check") or {}
    if check.get("status") == "not needed":
        lines.append(f"Cross-check: not needed ({check.get('why', '')}).")
    elif check:
        err = check.get("error")
        measured = (f"relative L2 {err:.3g}" + (f" in {check['error_field']}" if check.get("error_field") else "")
                    if isinstance(err, float) and math.isfinite(err) else "no error measured")
        lines.append(f"Cross-check against {check.get('against')} on {check.get('reduction')}: {measured}, needed "
                     f"<= {check.get('threshold', math.nan):.3g} ({check.get('threshold_rule', '')}): "
                     f"**{check.get('status')}**" + (f" ({check['why']})" if check.get("why") else "") + ".")
    if info.get("budget_s") is not None:
        lines.append(f"Budget: {info['budget_s']:.3g} s per run ({info.get('budget_how', '')}).")
    return lines + [""]


def wide_legend(comp, rows: list[dict]) -> list[str]:
    """What the columns of the table mean (and how the recommendation weighs them)."""
    setup = any(row["pc_setup_s"] for row in rows)
    lines = ["time_s: median solver time of the timed runs (min-max, number of runs), after one untimed warm-up"
             + ("; FEM: the solve plus the preconditioner set-up (pc_setup_s), the time to solution the "
                "recommendation decides on." if setup else ".")]
    if setup:
        lines.append("pc_setup_s: median time building the preconditioner (multigrid hierarchy), included in time_s.")
    lines.append(f"err_vs_fp64_L2: relative L2 error vs {comp._ref_text()}, {comp._judged_text()}, with the field "
                 "it is in; err_L2_by_field: every field (and selected metric) compared.")
    if any(row["snapshot_err_L2"] for row in rows):
        lines.append("Periodic flow (its lift repeats: docs/guide/compare.md, 'Periodic flows'): err_vs_fp64_L2 is the "
                     "largest of the phase-aligned field errors (the end-time fields against the reference's at the "
                     "same phase of its cycle) and the quantities of interest's relative differences (qoi_vs_ref); "
                     "snapshot_err_L2: the fields against the reference's at the same time, which a phase lag "
                     "dominates.")
    if any(row["predicted_s"] for row in rows):
        lines.append("predicted_s: the run-time estimate of one run, made before running (hpcsolve run --dry-run).")
    if any(row["outside_published_range"] for row in rows):
        lines.append("outside_published_range: the run's values outside their published reference range.")
    if comp.limit > 0:
        lines.append(f"accuracy_class: 0 for errors at or below tolerance/{comp.limit / comp.equal_below:.3g} "
                     f"({comp.equal_below:.3g}), then one class per decade above; runs of one class "
                     "count as equally accurate, and among them the faster time_s is preferred.")
    if any(row["state_MiB"] for row in rows):
        lines.append("state_MiB: the solver state of this configuration (LBM: the population arrays; FEM: matrix, "
                     "Krylov vectors and preconditioner hierarchy); process_peak_est_MiB: the estimated peak of "
                     "the whole process (interpreter, libraries, set-up, output), much the same for every precision.")
    return lines
