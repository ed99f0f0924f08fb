"""Small plotting helpers shared by the families' plots and compare (matplotlib, Agg).

Figures are made with ``matplotlib.figure.Figure`` and drawn by the Agg canvas directly: no pyplot (its
import and its figure manager cost a run that only writes PNGs), no ``bbox_inches="tight"`` where the layout
is fixed (it draws every figure twice), and a fast PNG compression (zlib level 1: the shipped cases' PNGs are
2-27 % larger). On a 2-core machine the plots of cases/poisson_manufactured.toml took 1.1-1.2 s (matplotlib's
import included) and those of cases/lid_driven_cavity.toml 1.8-1.9 s, as before these changes: the drawing,
not the set-up, is what is left."""

from __future__ import annotations

import importlib
import re
import textwrap

import numpy as np

from hpcsolve.core.results import atomic_path

#: PNG writing options: zlib level 1 (PIL's default, 6, spent about 0.15 s encoding the Poisson case's 3 PNGs)
PNG_OPTIONS = {"format": "png", "pil_kwargs": {"compress_level": 1}}


def new_figure(figsize, **kwargs):
    """A Figure with an Agg canvas, not registered with pyplot (nothing to close)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # late: heavy (matplotlib, 0.5 s), only for plots
    from matplotlib.figure import Figure  # late: heavy (matplotlib), only for plots

    fig = Figure(figsize=figsize, **kwargs)
    FigureCanvasAgg(fig)
    return fig


def warm_up() -> None:
    """Import what the figures need and load their font by drawing one text: a run that waits on work which releases
    the GIL (the FEM reference's factorization beside a GPU solve) does it then, and its plots do not pay it again
    (on the H200 machine's host the imports alone were 0.27-0.38 s)."""
    for name in ("matplotlib.tri", "mpl_toolkits.axes_grid1"):     # the triangulations', colorbar's
        importlib.import_module(name)
    fig = new_figure((1, 1))
    fig.text(0.5, 0.5, "T")
    fig.canvas.draw()


def save_png(fig, path, dpi: int, tight: bool = False):
    """Write ``fig`` to ``path`` (atomically: a killed run leaves no half PNG) and return ``path``; titles wider
    than the figure wrapped first (:func:`fit_titles`)."""
    fit_titles(fig)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, bbox_inches="tight" if tight else None, **PNG_OPTIONS)
    return path


#: a title may take at most this fraction of the figure's width before it is wrapped
TITLE_FRACTION = 0.96
NBSP = "\u00a0"


def fit_titles(fig) -> None:
    """Wrap every axes title and the figure's suptitle that is wider than TITLE_FRACTION of the figure (a case
    name, a long configuration label) onto more lines, so that no title leaves the figure. Measures the texts only
    (no draw)."""
    renderer = fig.canvas.get_renderer()
    titles = [(t, fig.bbox.width) for ax in fig.axes
              for t in (ax.title, getattr(ax, "_left_title", None), getattr(ax, "_right_title", None)) if t is not None]
    if getattr(fig, "_suptitle", None) is not None:
        titles.append((fig._suptitle, fig.bbox.width))
    for t, room in titles:
        limit = TITLE_FRACTION * room
        text = t.get_text()
        width = t.get_window_extent(renderer).width if text.strip() else 0.0
        if width > limit:
            chars = max(20, int(max(len(line) for line in text.split("\n")) * limit / width) - 2)
            # a parenthesised part (the run: "(numpy, fp64)") is kept on one line
            kept = re.sub(r"\([^()]*\)", lambda m: m.group(0).replace(" ", NBSP), text)
            lines = [p for line in kept.split("\n") for p in (textwrap.wrap(line, chars, break_on_hyphens=False) or [""])]
            t.set_text("\n".join(lines).replace(NBSP, " "))


def colorbar(fig, ax, mappable, label: str):
    """A colorbar exactly as tall as the axes (also with an equal aspect ratio), labelled with its unit. (A constrained
    layout does not see it: a figure that has one is saved with a tight bounding box, as the LBM plots are.)"""
    from mpl_toolkits.axes_grid1 import make_axes_locatable   # late: with matplotlib, for plots only

    cax = make_axes_locatable(ax).append_axes("right", size="3%", pad=0.08)
    return fig.colorbar(mappable, cax=cax, label=label)


def run_label(result) -> str:
    """'backend, precision' of a Result, for plot titles (a plot read alone says which run it shows)."""
    return f"{result.backend}, {result.precision}"


def symmetric_limits(values) -> tuple[float, float]:
    """(-m, m) with m the largest finite |value| (1.0 when there is none): a diverging colormap centred on zero."""
    a = np.abs(np.asarray(values, dtype=np.float64))
    a = a[np.isfinite(a)]
    m = float(a.max()) if a.size else 0.0
    m = m if m > 0 else 1.0
    return -m, m


#: offsets (points) tried for a point's label, nearest first; then the same twice as far
LABEL_CANDIDATES = ((5, 5), (5, -12), (-13, 5), (-13, -12), (8, -3), (-16, -3), (-3, 8), (-3, -15))
MARKER_HALF_PX = 6           # half the size of a marker's box (pixels at the figure's dpi) that labels keep clear of


def place_labels(ax, points, texts, bold=None, avoid=(), fontsize: float = 8) -> list:
    """Annotate each of ``points`` (data coordinates) with its text, at the first of LABEL_CANDIDATES offsets (then
    twice as far) whose box stays inside the axes and clear of the labels placed before it and of the markers at
    ``avoid`` (data coordinates; the points themselves by default): a small repel, so neighbouring labels do not
    overlap (adjustText does this more thoroughly; it is not a dependency). Where none is clear, the candidate
    overlapping least. The annotations, in order."""
    renderer = ax.figure.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    marks = [ax.transData.transform(p) for p in (avoid or points)]
    marks = [(x - MARKER_HALF_PX, y - MARKER_HALF_PX, x + MARKER_HALF_PX, y + MARKER_HALF_PX) for x, y in marks]
    placed, out = [], []
    for i, (p, text) in enumerate(zip(points, texts)):
        best, best_cost = None, None
        for scale in (1, 2, 3):
            for dx, dy in LABEL_CANDIDATES:
                ann = ax.annotate(text, p, textcoords="offset points", xytext=(dx * scale, dy * scale),
                                  fontsize=fontsize, fontweight="bold" if bold and bold[i] else "normal")
                b = ann.get_window_extent(renderer)
                box = (b.x0, b.y0, b.x1, b.y1)
                cost = sum(_overlap(box, o) for o in placed + marks)
                if not (frame.x0 <= b.x0 and b.x1 <= frame.x1 and frame.y0 <= b.y0 and b.y1 <= frame.y1):
                    cost += 1e6
                if best_cost is None or cost < best_cost:
                    if best is not None:
                        best[0].remove()
                    best, best_cost = (ann, box), cost
                else:
                    ann.remove()
                if best_cost == 0:
                    break
            if best_cost == 0:
                break
        placed.append(best[1])
        out.append(best[0])
    return out


def _overlap(a, b) -> float:
    """The area two boxes (x0, y0, x1, y1) share."""
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return w * h if w > 0 and h > 0 else 0.0


def log_ticks(ax, x: bool = True, y: bool = True, most: int = 6) -> None:
    """At most ``most`` labelled ticks on each log axis (1, 2 and 5 per decade where the axis spans little, fewer
    decades labelled where it spans many), no minor-tick labels, and short labels ("0.002", "1e-06"): log axes
    spanning less than a decade used to label their minor ticks, which collided."""
    from matplotlib import ticker   # late: matplotlib's start-up cost, for plots only

    for axis, on, lim in ((ax.xaxis, x, ax.get_xlim), (ax.yaxis, y, ax.get_ylim)):
        if not on or axis.get_scale() != "log":
            continue
        lo, hi = sorted(lim())
        span = np.log10(hi / lo) if lo > 0 and hi > lo else 1.0
        if span < 1.0:      # less than a decade: LogLocator would fall back to a dense linear locator
            axis.set_major_locator(ticker.MaxNLocator(nbins=4, steps=[1, 2, 2.5, 5, 10]))
        else:
            subs = (1.0, 2.0, 5.0) if span <= 1.6 else (1.0, 3.0) if span <= 2.6 else (1.0,)
            axis.set_major_locator(ticker.LogLocator(base=10, subs=subs, numticks=most))
        axis.set_major_formatter(ticker.FuncFormatter(lambda v, _pos: f"{v:.3g}"))
        axis.set_minor_formatter(ticker.NullFormatter())
