"""The figures of a comparison other than its Pareto plot (``Comparison.plot_pareto``): the error drift over the
output times (phase-aligned beside the same-time error where the flow is periodic: hpcsolve/report/periodic.py)
and the residual histories; and the finishing and atomic saving every comparison figure shares."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hpcsolve.core.results import atomic_path


def drift(comp, path: str | Path) -> Path | None:
    """Each run's error against the reference at each output time: the same-time error, and where the flow is
    periodic the phase-aligned error too (solid; the same-time one dashed, labelled so). None: nothing to show."""
    runs = [r for r in comp.runs if (r.drift.get("time") or (r.periodic.get("drift") or {}).get("time"))
            and not r.is_reference]
    if not runs:
        return None
    import matplotlib.pyplot as plt   # late: start-up cost (0.7 s), only when plotting

    fig, ax = plt.subplots(figsize=(6, 4.5))
    periodic = any((r.periodic.get("drift") or {}).get("time") for r in runs)
    for r in runs:
        aligned = r.periodic.get("drift") or {}
        line = None
        if aligned.get("time"):
            line = _semilogy(ax, aligned, "o-", f"{r.label} (same phase)")
        if r.drift.get("time"):
            _semilogy(ax, r.drift, "x--" if periodic else "o-", f"{r.label} (same time)" if periodic else r.label,
                      color=line.get_color() if line is not None else None, alpha=0.6 if periodic else 1.0)
    name = next((d.get("field") for r in runs for d in (r.periodic.get("drift") or {}, r.drift) if d.get("field")),
                "velocity")
    what = (f"{name}: solid at the same phase of the cycle, dashed at the same time" if periodic
            else f"{name} error drift over time")
    return finish(fig, ax, path, "time [s]", f"{name} relative L2 error vs {comp.reference_label}",
                  f"{comp.case_name}: {what}", legend_size=7 if periodic else 8)


def _semilogy(ax, d: dict, style: str, label: str, **kw):
    err, t = np.asarray(d["rel_l2"], dtype=float), np.asarray(d["time"], dtype=float)
    keep = err > 0
    if not keep.any():
        return None
    return ax.semilogy(t[keep], err[keep], style, label=label, **{k: v for k, v in kw.items() if v is not None})[0]


def residuals(comp, path: str | Path) -> Path | None:
    """The residual histories of the runs that have them (FEM); None where none has."""
    runs = [r for r in comp.runs if r.result is not None and any("residual" in k for k in r.result.series)]
    if not runs:
        return None
    import matplotlib.pyplot as plt   # late: start-up cost, as in drift

    fig, ax = plt.subplots(figsize=(6, 4.5))
    for r in runs:
        s = r.result.series
        for key in sorted(k for k in s if "residual" in k and not k.endswith("_iterations")):
            y = np.asarray(s[key], dtype=float)
            xkey = key + "_iterations"
            x = np.asarray(s[xkey]) if xkey in s else np.arange(y.size)
            sparse = key == "residual_true"     # sampled at checks, not every iteration: markers, no line
            ax.semilogy(x, y, "o" if sparse else "-", lw=1, ms=3, label=f"{r.label} {key}")
    return finish(fig, ax, path, "iteration", "relative residual", f"{comp.case_name}: residual histories",
                  legend_size=6)


def finish(fig, ax, path, xlabel: str, ylabel: str, title: str, legend_size: int = 8) -> Path:
    """Label the axes, title and legend of a comparison figure, then save it (:func:`save`)."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=legend_size)
    fig.tight_layout()
    return save(fig, path)


def save(fig, path) -> Path:
    """The figure as a PNG, written atomically, and closed."""
    import matplotlib.pyplot as plt   # late: start-up cost, as in drift

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    return Path(path)
