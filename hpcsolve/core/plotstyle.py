"""Small plotting helpers shared by the families' plots and compare (matplotlib, Agg).

Figures are made with ``matplotlib.figure.Figure`` and drawn by the Agg canvas directly: no pyplot (its
import and its figure manager cost a run that only writes PNGs), no ``bbox_inches="tight"`` where the layout
is fixed (it draws every figure twice), and a fast PNG compression (zlib level 1: the shipped cases' PNGs are
2-27 % larger). On a 2-core machine the plots of cases/poisson_manufactured.toml took 1.1-1.2 s (matplotlib's
import included) and those of cases/lid_driven_cavity.toml 1.8-1.9 s, as before these changes: the drawing,
not the set-up, is what is left."""

from __future__ import annotations

import importlib

import numpy as np

from hpcsolve.core.results import atomic_path

#: PNG writing options: zlib level 1 (PIL's default, 6, spent about 0.15 s encoding the Poisson case's 3 PNGs)
PNG_OPTIONS = {"format": "png", "pil_kwargs": {"compress_level": 1}}


def new_figure(figsize, **kwargs):
    """A Figure with an Agg canvas, not registered with pyplot (nothing to close)."""
    # late: matplotlib costs about 0.5 s to import (measured), paid only by a run that plots
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

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
    """Write ``fig`` to ``path`` (atomically: a killed run leaves no half PNG) and return ``path``."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, bbox_inches="tight" if tight else None, **PNG_OPTIONS)
    return path


def colorbar(fig, ax, mappable, label: str):
    """A colorbar exactly as tall as the axes (also with an equal aspect ratio), labelled with its unit."""
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
