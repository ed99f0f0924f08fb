"""Every plot kind a user reads (issue 50): rendered at its default size from synthetic data with long labels, and its
layout checked with matplotlib's renderer - every text inside the figure (nothing clipped), no two texts overlapping
(labels, tick labels, titles, annotations, legend entries), no legend over a data point, the compare plots' reference
drawn as a point, and no more than comparison's MAX_CURVES curves in one axes (small multiples past that)."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from hpcsolve.core.plotstyle import save_png as plots_real
from hpcsolve.core.results import Result, StructuredGrid, TriangleMesh
from hpcsolve.report import compare_plots
from hpcsolve.report.comparison import Comparison, Run

LONG = "numba-cuda/fp16s-compensated/multigrid-with-a-long-name"
SLACK_PX = 1.0          # extents may touch to within a pixel (antialiasing, rounding)


def _texts(fig):
    """Every visible, non-empty text of the figure (titles, axis labels, tick labels, annotations, legend texts)."""
    out, seen = [], set()
    from matplotlib.text import Text

    for t in fig.findobj(lambda a: isinstance(a, Text)):
        if id(t) not in seen and t.get_visible() and str(t.get_text()).strip() and _shown(t, fig):
            seen.add(id(t))
            out.append(t)
    return out


def _shown(t, fig) -> bool:
    """A tick label matplotlib draws: one of the ticks its axis draws (``Axis._update_ticks``: the current ticks inside
    the view limits), on a visible axis; tick objects left over from an earlier locator are not drawn. (A tick
    label's ``axes`` is not set: its axis is found among the figure's.)"""
    for axes in fig.axes:
        for axis in (axes.xaxis, axes.yaxis):
            every = {id(x) for tick in axis.majorTicks + axis.minorTicks for x in (tick.label1, tick.label2)}
            if id(t) not in every:
                continue
            if not (axes.axison and axis.get_visible()):
                return False
            drawn = axis._update_ticks()       # (private, stable since matplotlib 3.1: the ticks draw() draws)
            return any(t is x and tick.get_visible() for tick in drawn for x in (tick.label1, tick.label2))
    return True


def _overlap(a, b) -> bool:
    return (min(a.x1, b.x1) - max(a.x0, b.x0) > SLACK_PX) and (min(a.y1, b.y1) - max(a.y0, b.y0) > SLACK_PX)


def _data_points(fig):
    """Display coordinates of every data point drawn (lines' vertices, scatter/errorbar offsets)."""
    pts = []
    for ax in fig.axes:
        for line in ax.get_lines():
            xy = np.asarray(line.get_xydata(), dtype=float)
            if xy.size:
                pts.append(ax.transData.transform(xy[np.isfinite(xy).all(axis=1)]))
        for coll in ax.collections:
            off = np.asarray(coll.get_offsets(), dtype=float)
            if off.size and off.ndim == 2 and coll.get_offset_transform() is ax.transData:
                pts.append(ax.transData.transform(off[np.isfinite(off).all(axis=1)]))
    return np.concatenate(pts) if pts else np.zeros((0, 2))


def layout_problems(fig, tight: bool = False) -> list[str]:
    """What a reader would find wrong with ``fig``'s layout (empty: nothing)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    # what is saved: the figure, or its tight bounding box where it is saved so (the LBM plots: their colorbars sit
    # beside equal-aspect axes, where no layout engine sees them)
    box = fig.get_tightbbox(renderer).transformed(fig.dpi_scale_trans) if tight else fig.bbox
    texts = _texts(fig)
    problems = []
    extents = [(t, t.get_window_extent(renderer)) for t in texts]
    for t, e in extents:
        if e.x0 < box.x0 - SLACK_PX or e.y0 < box.y0 - SLACK_PX or e.x1 > box.x1 + SLACK_PX or e.y1 > box.y1 + SLACK_PX:
            problems.append(f"clipped: {t.get_text()!r} at {e.bounds}")
    for (t1, e1), (t2, e2) in itertools.combinations(extents, 2):
        if _overlap(e1, e2):
            problems.append(f"overlapping: {t1.get_text()!r} and {t2.get_text()!r}")
    points = _data_points(fig)
    for legend in [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]:
        e = legend.get_window_extent(renderer)
        inside = ((points[:, 0] > e.x0) & (points[:, 0] < e.x1) & (points[:, 1] > e.y0) & (points[:, 1] < e.y1))
        if inside.any():
            problems.append(f"legend over {int(inside.sum())} data points")
    for ax in fig.axes:         # curves: lines through more than 2 points (not markers, error-bar caps, limits)
        curves = [ln for ln in ax.get_lines() if len(ln.get_xdata()) > 2]
        if len(curves) > compare_plots.MAX_CURVES:
            problems.append(f"{len(curves)} curves in one axes")
    return problems


@pytest.fixture
def captured(monkeypatch, tmp_path):
    """The figures the plot functions would save, drawn instead of written."""
    figs, real = [], compare_plots.plotstyle.save_png

    def keep(fig, path, *a, **k):
        figs.append(fig)
        return real(fig, tmp_path / f"{len(figs)}.png", *a, **k)

    monkeypatch.setattr(compare_plots.plotstyle, "save_png", keep)
    return figs


def _comparison(n_configs=9, residuals=True, drift=True, periodic=False) -> Comparison:
    """A FEM-like comparison of ``n_configs`` long-labelled configurations: close errors and times (labels crowd)."""
    runs, rng = [], np.random.default_rng(5)
    for i in range(n_configs):
        ref = i == 0
        t = 0.2 + 0.01 * i
        r = Run("numba-cuda", f"fp{i}-long-precision-name", status="converged" if i % 4 else "not_converged",
                preconditioner="multigrid-with-a-long-name", wall_s=t, times=[t * 0.95, t, t * 1.07], reference_run=ref)
        err = 0.0 if ref else 10.0 ** (-12 + i) * (1 + 0.1 * i)
        r.field_errors = {"displacement_magnitude": {"rel_l2": err, "rel_max": err}}
        if drift and not ref:
            r.drift = {"field": "velocity", "time": [1, 2, 3, 4], "rel_l2": list(err * (1 + rng.random(4)))}
            if periodic:
                r.periodic = {"drift": {"time": [1, 2, 3, 4], "rel_l2": list(err * (1 + rng.random(4)))}}
        if residuals:
            its = np.arange(60)
            series = {"residual_recursive": 10.0 ** (-its / 6.0), "residual_true": 10.0 ** (-its[::10] / 6.0),
                      "residual_true_iterations": its[::10]}
            r.result = Result("case", "fem", "numpy", "fp64", series=series)
        runs.append(r)
    return Comparison("a_case_with_a_rather_long_name_for_its_benchmark", "fem", 1e-3, runs)


@pytest.mark.parametrize("n", [2, 5, 12])
def test_pareto_layout(captured, n):
    comp = _comparison(n)
    comp.plot_pareto("unused.png")
    fig = captured[-1]
    assert layout_problems(fig) == []
    ax = fig.axes[0]
    ref = [ln for ln in ax.get_lines() if ln.get_label().startswith("reference ")]
    assert len(ref) == 1 and ref[0].get_marker() == "D"              # a point, not a dotted line
    assert not [ln for ln in ax.get_lines() if ln.get_linestyle() == ":"]
    assert len([t for t in ax.texts]) == n - 1                         # one number per configuration but the reference


@pytest.mark.parametrize("n,periodic", [(3, False), (9, False), (5, True)])
def test_drift_layout(captured, n, periodic):
    compare_plots.drift(_comparison(n, periodic=periodic), "unused.png")
    fig = captured[-1]
    assert layout_problems(fig) == []
    curves = (n - 1) * (2 if periodic else 1)
    assert len(fig.axes) == (1 if curves <= compare_plots.MAX_CURVES else n - 1 + (-(n - 1)) % 3)


@pytest.mark.parametrize("n", [3, 9])
def test_residuals_layout(captured, n):
    """9 configurations x 2 residuals were 18 curves on a 10-colour cycle: now one panel each."""
    compare_plots.residuals(_comparison(n), "unused.png")
    fig = captured[-1]
    assert layout_problems(fig) == []
    if 2 * n > compare_plots.MAX_CURVES:
        panels = [ax for ax in fig.axes if ax.get_lines()]
        assert len(panels) == n and all(len(ax.get_lines()) == 2 for ax in panels)
    else:
        colours = {ln.get_color() for ln in fig.axes[0].get_lines()}
        assert len(colours) == n


def _lbm_result(kind: str) -> Result:
    nx, ny = (220, 41) if kind == "cylinder" else (64, 64)
    grid = StructuredGrid(nx, ny, spacing=0.01)
    x, y = grid.coordinates()
    X, Y = np.meshgrid(x, y)
    vel = np.stack([np.sin(Y * 3), np.cos(X * 2) * 0.1], axis=-1)
    flags = np.zeros((ny, nx), dtype=np.int8)
    if kind == "cylinder":
        flags[(X - 0.2) ** 2 + (Y - 0.2) ** 2 < 0.05**2] = 1
    fields = {"velocity": vel, "flags": flags, "vorticity": np.cos(X * 5) * np.sin(Y * 5)}
    t = np.linspace(0, 8, 200)
    series = {"time": t, "kinetic_energy": np.exp(-t), "kinetic_energy_analytic": np.exp(-t),
              "max_speed": 1 + 0 * t, "drag_coefficient": 5.5 + 0.01 * np.sin(t), "lift_coefficient": np.sin(t),
              "steady_change": 10.0 ** (-t)}
    if kind == "cavity":
        s = np.linspace(0, 1, 50)
        series.update(centerline_u=s - 0.5, centerline_y=s, centerline_x=s, centerline_v=0.2 * np.sin(6 * s))
    if kind == "channel":
        s = np.linspace(0, 1, 30)
        series.update(profile_u=6 * s * (1 - s), profile_y=s, profile_u_exact=6 * s * (1 - s))
    return Result("a_case_with_a_rather_long_name_" + kind, "lbm", "numba-cuda", "fp16s", grid=grid, fields=fields,
                  series=series, derived={"reynolds": 100})


@pytest.mark.parametrize("kind", ["cylinder", "cavity", "channel"])
def test_lbm_result_plots_layout(monkeypatch, kind, tmp_path):
    from hpcsolve.lbm import plots

    figs = []
    monkeypatch.setattr(plots, "save_png", lambda fig, path, *a, **k: figs.append(fig) or plots_real(fig, path, *a, **k))
    plots.plot_result(_lbm_result(kind), tmp_path)
    assert len(figs) >= 3
    problems = {i: layout_problems(f, tight=True) for i, f in enumerate(figs)}
    assert all(p == [] for p in problems.values()), problems


def _fem_result(with_error=True) -> Result:
    n = 12
    xs, ys = np.meshgrid(np.linspace(0, 1, n + 1), np.linspace(0, 1, n + 1))
    pts = np.stack([xs.ravel(), ys.ravel()], axis=1)
    c = (np.arange(n)[:, None] * (n + 1) + np.arange(n)[None, :]).ravel()
    tris = np.concatenate([np.stack([c, c + 1, c + n + 2], 1), np.stack([c, c + n + 2, c + n + 1], 1)])
    u = np.sin(np.pi * pts[:, 0]) * np.sin(np.pi * pts[:, 1])
    fields = {"u": u}
    if with_error:
        fields["error"] = 1e-4 * np.cos(7 * pts[:, 0])
    its = np.arange(80)
    series = {"residual_recursive": 10.0 ** (-its / 8.0), "residual_true": 10.0 ** (-its[::10] / 8.0),
              "residual_true_iterations": its[::10]}
    return Result("a_case_with_a_rather_long_name_poisson", "fem", "numba-cuda", "fp32", grid=TriangleMesh(pts, tris),
                  fields=fields, series=series, metrics={"error_l2": 1e-4, "method": "cg"},
                  derived={"rtol": 1e-8}, status="accurate_to_discretisation")


def test_fem_result_plots_layout(monkeypatch, tmp_path):
    """The FEM run's plot_result (hpcsolve/fem/plots.py): solution, error and residual plots."""
    from hpcsolve.fem import plots as runner

    figs = []
    monkeypatch.setattr(runner, "save_png", lambda fig, path, *a, **k: figs.append(fig) or plots_real(fig, path, *a, **k))
    runner.plot_result(_fem_result(), tmp_path)
    assert len(figs) == 3
    problems = {i: layout_problems(f) for i, f in enumerate(figs)}
    assert all(p == [] for p in problems.values()), problems


def test_the_checker_finds_what_it_looks_for():
    """The checks themselves: a label outside the figure, two texts on one spot, a legend over the data."""
    from hpcsolve.core import plotstyle

    fig = plotstyle.new_figure((4, 3))
    ax = fig.add_subplot()
    ax.plot(np.linspace(0, 1, 50), np.linspace(0, 1, 50), label="data")
    ax.text(0.5, 0.5, "one")
    ax.text(0.5, 0.5, "two")
    ax.set_ylabel("a y label " * 8)
    ax.legend(loc="center")
    found = layout_problems(fig)
    assert any(p.startswith("clipped") for p in found)
    assert any(p.startswith("overlapping: 'one' and 'two'") for p in found)
    assert any(p.startswith("legend over") for p in found)
    assert not math.isnan(len(found))
