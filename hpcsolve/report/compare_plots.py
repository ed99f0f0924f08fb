"""The figures of a comparison: the Pareto plot (accuracy vs speed: ``pareto``), the error drift over the output
times (phase-aligned beside the same-time error where the flow is periodic: hpcsolve/report/periodic.py) and the
residual histories; and the finishing and atomic saving every comparison figure shares.

Readable at their default size with long labels (tests/report/test_plot_layout.py checks each): the layout is constrained
(no label clipped), legends sit outside the data (``fig.legend`` outside the axes), the Pareto points carry short
numbers placed clear of each other and of the points (``plotstyle.place_labels``) with the configurations named in a
key beside the axes, the reference is a point (its error, 0, drawn at the axis floor and said so), log axes carry at
most a few labelled ticks, and past MAX_CURVES curves a figure becomes small multiples (one panel per
configuration) instead of more colours than a colour cycle has."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np

from hpcsolve.core import plotstyle

#: most curves in one axes; more become one panel per configuration (small multiples)
MAX_CURVES = 8
PANEL_COLUMNS = 3            # panels per row of the small multiples
LEGEND_WIDTH = 70            # characters per line of a legend entry
KEY_SIZE = 7                 # points, the key's font
KEY_LINE_IN = 0.14           # inches a line of the key takes (KEY_SIZE x 1.2 line spacing, and a margin)
KEY_WIDTH = 34               # characters per line of the Pareto plot's key (labels wrapped, never cut)


def pareto(comp):
    """The Pareto figure of ``comp`` (not saved): (fig, ax, xlabel, ylabel, title, legend_size) for
    ``comparison._finish``. Points numbered by error (the key beside the axes names them), the recommended one
    starred and its number bold, the reference a diamond at the axis floor (its error against itself is 0)."""
    shown = sorted((r for r in comp.runs if not r.is_reference and math.isfinite(r.error) and r.error > 0
                    and math.isfinite(r.wall_s)), key=lambda r: (r.error, r.wall_s))
    best = comp.recommendation().get("label")
    key = _key_text([(str(i), r.label + (f" [{r.error_field}]" if r.error_field else "")
                      + ("" if comp.finished(r) else f" ({r.status})"), r.label == best)
                     for i, r in enumerate(shown, start=1)])
    fig = plotstyle.new_figure((8.0, max(4.8, 1.8 + KEY_LINE_IN * key.count("\n"))), layout="constrained")
    ax, key_ax = fig.subplots(1, 2, width_ratios=[3, 2])
    key_ax.set_axis_off()
    key_ax.text(0.0, 1.0, key, fontsize=KEY_SIZE, va="top", family="monospace", transform=key_ax.transAxes)
    marked, points = False, []
    for r in shown:
        ok = comp.finished(r)
        ax.errorbar(r.wall_s, r.error, xerr=[[r.wall_s - r.wall_min], [r.wall_max - r.wall_s]],
                    fmt="o" if ok else "x", ms=6 if ok else 9, capsize=3, color="C0" if ok else "red",
                    label=None if ok or marked else "not converged / failed")
        marked = marked or not ok
        points.append((r.wall_s, r.error))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.axhline(comp.limit, color="gray", ls="--", lw=1, label=f"accepted error at most {comp.limit:.2g}")
    ref = next((r for r in comp.runs if r.is_reference), None)
    floor = min([p[1] for p in points] + [comp.limit]) / 10 if comp.limit > 0 or points else 1e-16
    at = {r.label: p for r, p in zip(shown, points)}
    if ref is not None and math.isfinite(ref.wall_s):
        ax.errorbar(ref.wall_s, floor, xerr=[[ref.wall_s - ref.wall_min], [ref.wall_max - ref.wall_s]], fmt="none",
                    color="k", capsize=3, clip_on=False)
        ax.plot(ref.wall_s, floor, "D", ms=7, color="k", clip_on=False, zorder=5,
                label=f"reference {ref.label} (error 0, drawn at the floor)")
        at[ref.label] = (ref.wall_s, floor)
    if best in at:
        ax.plot(*at[best], marker="*", ms=18, mfc="none", mec="goldenrod", mew=2, ls="none", clip_on=False,
                label=f"recommended: {best}")
    ax.set_ylim(bottom=floor / 2)
    xs = [t for r in shown + ([ref] if ref is not None else []) for t in (r.wall_min, r.wall_max)
          if math.isfinite(t) and t > 0]
    if xs:
        ax.set_xlim(min(xs) / 1.4, max(xs) * 1.4)
    plotstyle.log_ticks(ax)
    fig.canvas.draw()
    plotstyle.place_labels(ax, points, [str(i) for i in range(1, len(points) + 1)],
                           bold=[r.label == best for r in shown], avoid=list(at.values()), fontsize=8)
    return (fig, ax, "solver time [s] (median; bars: min-max of the timed runs)",
            _title(f"relative L2 error vs {comp.reference_label} ({comp._judged_text()})", 44),
            _title(f"{comp.case_name}: accuracy vs speed"), 8)


def _key_text(entries) -> str:
    """The numbered configurations for the free axes beside the data, one text: 'n  label' wrapped at KEY_WIDTH
    (never cut), the recommended one marked with a star."""
    lines = ["configurations (by error; * recommended)"]
    for n, label, best in entries:
        for j, part in enumerate(textwrap.wrap(label, KEY_WIDTH) or [""]):
            lines.append((f"{'*' if best else ' '}{n:>2}  " if j == 0 else "     ") + part)
    return "\n".join(lines)


def _title(text: str, width: int = 60) -> str:
    """``text`` wrapped at ``width`` characters, its own line breaks kept (a long label never leaves the figure)."""
    return "\n".join(part for line in text.split("\n") for part in (textwrap.wrap(line, width) or [""]))


def drift(comp, path: str | Path) -> Path | None:
    """Each run's error against the reference at each output time: the same-time error, and where the flow is
    periodic the phase-aligned error too (solid; the same-time one dashed, labelled so). None: nothing to show."""
    runs = [r for r in comp.runs if (r.drift.get("time") or (r.periodic.get("drift") or {}).get("time"))
            and not r.is_reference]
    if not runs:
        return None
    periodic = any((r.periodic.get("drift") or {}).get("time") for r in runs)
    groups = []
    for r in runs:
        curves = []
        aligned = r.periodic.get("drift") or {}
        if aligned.get("time"):
            curves.append((aligned["time"], aligned["rel_l2"], "o-", "same phase"))
        if r.drift.get("time"):
            curves.append((r.drift["time"], r.drift["rel_l2"], "x--" if periodic else "o-",
                           "same time" if periodic else "error"))
        groups.append((r.label, curves))
    name = next((d.get("field") for r in runs for d in (r.periodic.get("drift") or {}, r.drift) if d.get("field")),
                "velocity")
    what = (f"{name}: solid at the same phase of the cycle, dashed at the same time" if periodic
            else f"{name} error drift over time")
    fig = curves_figure(groups, "time [s]", f"{name} relative L2 error\nvs {comp.reference_label}",
                        _title(f"{comp.case_name}: {what}"))
    return save(fig, path)


def residuals(comp, path: str | Path) -> Path | None:
    """The residual histories of the runs that have them (FEM): the recursive residual a line, the float64 true
    residual (sampled at checks) markers; None where none has."""
    runs = [r for r in comp.runs if r.result is not None and any("residual" in k for k in r.result.series)]
    if not runs:
        return None
    groups = []
    for r in runs:
        s, curves = r.result.series, []
        for key in sorted(k for k in s if "residual" in k and not k.endswith("_iterations")):
            y = np.asarray(s[key], dtype=float)
            xkey = key + "_iterations"
            x = np.asarray(s[xkey]) if xkey in s else np.arange(y.size)
            curves.append((x, y, "o" if key == "residual_true" else "-", key.replace("residual_", "") + " residual"))
        groups.append((r.label, curves))
    fig = curves_figure(groups, "iteration", "relative residual", _title(f"{comp.case_name}: residual histories"))
    return save(fig, path)


def curves_figure(groups, xlabel: str, ylabel: str, title: str):
    """Semilog-y curves of ``groups`` ([(configuration, [(x, y, style, kind), ...]), ...]): one axes, a colour per
    configuration and a style per kind, where they are at most MAX_CURVES curves; else one panel per configuration
    (small multiples, a colour per kind, shared axes). The legend outside the axes, below them."""
    n_curves = sum(len(c) for _, c in groups)
    if n_curves <= MAX_CURVES:
        fig = plotstyle.new_figure((6.4, 4.8), layout="constrained")
        ax = fig.add_subplot()
        for k, (label, curves) in enumerate(groups):
            for x, y, style, kind in curves:
                _semilogy(ax, x, y, style, f"{label} ({kind})", color=f"C{k % 10}")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(_title(ylabel, 40))
        plotstyle.log_ticks(ax, x=False)
        axes = [ax]
    else:
        cols = min(PANEL_COLUMNS, len(groups))
        rows = -(-len(groups) // cols)
        fig = plotstyle.new_figure((3.0 * cols, 2.3 * rows + 1.3), layout="constrained")
        axes = list(np.atleast_1d(fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False)).ravel())
        kinds = sorted({kind for _, curves in groups for *_, kind in curves})
        for ax, (label, curves) in zip(axes, groups):
            for x, y, style, kind in curves:
                _semilogy(ax, x, y, style, kind, color=f"C{kinds.index(kind) % 10}")
            ax.set_title("\n".join(textwrap.wrap(label, 28)), fontsize=8)
            ax.tick_params(labelsize=7)
            plotstyle.log_ticks(ax, x=False)
        for ax in axes[len(groups):]:
            ax.set_axis_off()
        fig.supxlabel(xlabel, fontsize=9)
        fig.supylabel(_title(ylabel, 14 + 10 * rows), fontsize=9)
    fig.suptitle(title, fontsize=10)
    handles, labels = [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    if handles:     # small multiples: beside the panels (below them it met the shared x label)
        legend(fig, handles, labels, 7, where="outside lower center" if len(axes) == 1 else "outside right upper")
    return fig


def _semilogy(ax, x, y, style: str, label: str, **kw):
    err, t = np.asarray(y, dtype=float), np.asarray(x, dtype=float)
    keep = err > 0
    if not keep.any():
        return None
    return ax.semilogy(t[keep], err[keep], style, label=label, lw=1, ms=3, **kw)[0]


def finish(fig, ax, path, xlabel: str, ylabel: str, title: str, legend_size: int = 8) -> Path:
    """Label the axes, title and legend (outside the data, below the axes) of a comparison figure, then save it."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    fig.suptitle(title, fontsize=10)
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        legend(fig, handles, labels, legend_size)
    return save(fig, path)


def legend(fig, handles, labels, size: float = 8, where: str = "outside lower center") -> None:
    """The figure's legend outside the axes (never over the data; ``where``: below them by default): labels wrapped at
    LEGEND_WIDTH characters, up to three columns where they are short, one where a label is long (two long ones side
    by side overran the figure), one beside the axes."""
    width = LEGEND_WIDTH if "lower" in where else LEGEND_WIDTH // 3
    labels = [_title(lab, width) for lab in labels]
    cols = 1 if "right" in where or max(len(lab) for lab in labels) > LEGEND_WIDTH // 2 else min(3, len(labels))
    fig.legend(handles, labels, loc=where, ncols=cols, fontsize=size)


def save(fig, path) -> Path:
    """The figure as a PNG, written atomically."""
    return Path(plotstyle.save_png(fig, path, dpi=110))
