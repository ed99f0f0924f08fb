"""Plots of an LBM Result (the Result's ``plotter``): flow field, vorticity, monitored series,
and the reference comparison where the case has one. Matplotlib, Agg backend, PNG."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hpcsolve.core.plotstyle import colorbar, new_figure, run_label, save_png
from hpcsolve.lbm.observables import ghia_data


#: most cells per side drawn in a field plot (a 7-inch figure at 110 dpi has ~770 pixels)
PLOT_CELLS = 1000


def plot_result(result, plot_dir: Path) -> list[Path]:
    """The PNG plots of ``result`` in ``plot_dir`` (those its fields and series allow); their paths."""
    plt = _Figures()     # figures without pyplot (hpcsolve.core.plotstyle): its import and figure manager cost
    plot_dir = Path(plot_dir)
    files: list[Path] = []
    if "velocity" in result.fields and result.grid is not None:
        files += _plot_fields(plt, result, plot_dir)
    s = result.series
    monitored = [k for k in ("kinetic_energy", "max_speed", "drag_coefficient", "lift_coefficient", "steady_change")
                 if k in s and np.size(s[k]) > 1]
    if monitored and "time" in s:
        files.append(_plot_series(plt, result, monitored, plot_dir))
    if "centerline_u" in s:
        files.append(_plot_centerlines(plt, result, plot_dir))
    if "profile_u" in s:
        files.append(_plot_profile(plt, result, plot_dir))
    return files


def _plot_fields(plt, result, plot_dir: Path) -> list[Path]:
    """Velocity magnitude with streamlines, and the vorticity where the result has it."""
    files: list[Path] = []
    f = result.fields
    x, y = result.grid.coordinates()
    # a figure shows well under PLOT_CELLS cells per side: every k-th cell keeps large grids' plots cheap
    k = max(1, -(-max(len(x), len(y)) // PLOT_CELLS))
    x, y = x[::k], y[::k]
    vel = np.asarray(f["velocity"])[::k, ::k]
    flags = np.asarray(f.get("flags", np.zeros(vel.shape[:2])))[::k, ::k]
    solid = flags != 0
    speed = np.ma.masked_where(solid, np.hypot(vel[..., 0], vel[..., 1]))
    aspect = (x[-1] - x[0]) / max(y[-1] - y[0], 1e-30)
    size = (min(14, 4 + 4 * aspect), 4.5) if aspect > 1.5 else (7, 6)

    fig, ax = plt.subplots(figsize=size)
    im = ax.pcolormesh(x, y, speed, shading="auto", cmap="viridis")
    colorbar(fig, ax, im, "|u| (m/s)")
    u = np.where(solid, 0.0, vel[..., 0])
    v = np.where(solid, 0.0, vel[..., 1])
    if np.any(u) or np.any(v):
        try:
            ax.streamplot(x, y, u, v, color="w", linewidth=0.6, density=1.2, arrowsize=0.6)
        except ValueError:  # grids streamplot rejects (e.g. not strictly increasing); the colour map stays
            pass
    ax.set_aspect("equal")
    ax.set_xlabel("x (m)")
    ax.set_ylabel("y (m)")
    ax.set_title(f"{result.case_name}: velocity magnitude and streamlines ({run_label(result)})")
    files.append(_save(fig, plot_dir / "velocity.png"))

    if "vorticity" in f:
        w = np.ma.masked_where(solid, np.asarray(f["vorticity"])[::k, ::k])
        lim = float(np.percentile(np.abs(w.compressed()), 99)) if w.count() else 1.0
        fig, ax = plt.subplots(figsize=size)
        im = ax.pcolormesh(x, y, w, shading="auto", cmap="RdBu_r", vmin=-lim, vmax=lim)
        ax.set_aspect("equal")
        colorbar(fig, ax, im, "vorticity (1/s)")
        ax.set_xlabel("x (m)")
        ax.set_ylabel("y (m)")
        ax.set_title(f"{result.case_name}: vorticity ({run_label(result)})")
        files.append(_save(fig, plot_dir / "vorticity.png"))
    return files


def _plot_series(plt, result, monitored: list[str], plot_dir: Path) -> Path:
    """The monitored series over time, one panel each."""
    s = result.series
    fig, axes = plt.subplots(len(monitored), 1, figsize=(7, 2.2 * len(monitored)), sharex=True, squeeze=False)
    t = np.asarray(s["time"])
    for ax, k in zip(axes[:, 0], monitored):
        vals = np.asarray(s[k], float)
        if k == "steady_change":
            ok = np.isfinite(vals) & (vals > 0)
            ax.semilogy(t[ok], vals[ok], "o-", ms=2)
        else:
            ax.plot(t, vals, label="hpcsolve")
        if k == "kinetic_energy" and "kinetic_energy_analytic" in s:
            ax.plot(t, np.asarray(s["kinetic_energy_analytic"], float), "k--", lw=1, label="analytic decay")
            ax.legend(fontsize=7)
        ax.set_ylabel(SERIES_LABELS.get(k, k.replace("_", " ")), fontsize=8)
    axes[-1, 0].set_xlabel("time (s)")
    fig.suptitle(f"{result.case_name}: monitored series ({run_label(result)})")
    return _save(fig, plot_dir / "series.png")


def _plot_centerlines(plt, result, plot_dir: Path) -> Path:
    """The cavity's centerline velocities against Ghia et al. where they have the Reynolds number."""
    s = result.series
    re = int(round(float(result.derived.get("reynolds", 0) or 0))) or None
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4.5))
    a1.plot(s["centerline_u"], s["centerline_y"], "-", label="hpcsolve")
    a2.plot(s["centerline_x"], s["centerline_v"], "-", label="hpcsolve")
    data = ghia_data()
    if re and ("u_at_x0.5", re) in data:
        yg, ug = data[("u_at_x0.5", re)]
        xg, vg = data[("v_at_y0.5", re)]
        a1.plot(ug, yg, "o", label=f"Ghia et al. 1982, Re {re}")
        a2.plot(xg, vg, "o", label=f"Ghia et al. 1982, Re {re}")
    a1.set_xlabel("u / U_lid at x = 0.5")
    a1.set_ylabel("y / L")
    a2.set_xlabel("x / L")
    a2.set_ylabel("v / U_lid at y = 0.5")
    a1.legend(fontsize=8)
    a2.legend(fontsize=8)
    fig.suptitle(f"{result.case_name}: cavity centerlines ({run_label(result)})")
    return _save(fig, plot_dir / "centerlines.png")


def _plot_profile(plt, result, plot_dir: Path) -> Path:
    """The channel's velocity profile against the analytic one."""
    s = result.series
    fig, ax = plt.subplots(figsize=(5, 4.5))
    ax.plot(s["profile_u"], s["profile_y"], "o", ms=3, label="hpcsolve")
    ax.plot(s["profile_u_exact"], s["profile_y"], "-", label="analytic")
    ax.set_xlabel("u / U_mean")
    ax.set_ylabel("y / H")
    ax.legend(fontsize=8)
    ax.set_title(f"{result.case_name}: velocity profile ({run_label(result)})")
    return _save(fig, plot_dir / "profile.png")


SERIES_LABELS = {"kinetic_energy": "kinetic energy\n(J per m depth)", "max_speed": "max |u| (m/s)",
                 "drag_coefficient": "c_D (-)", "lift_coefficient": "c_L (-)",
                 "steady_change": "relative change\nper interval (-)"}


class _Figures:
    """``subplots`` as pyplot's, on a Figure of hpcsolve.core.plotstyle (no pyplot)."""

    @staticmethod
    def subplots(nrows=1, ncols=1, figsize=None, **kwargs):
        # constrained layout: the long titles, colorbars and tick labels are fitted inside the figure itself (the
        # tight bbox of the saved PNG then clips nothing: tests/report/test_plot_layout.py)
        fig = new_figure(figsize, layout="constrained")
        axes = fig.subplots(nrows, ncols, **kwargs)
        return fig, axes


def _save(fig, path: Path) -> Path:
    """The PNG (fast compression); bbox 'tight' keeps the colorbars and suptitles of these layouts inside it."""
    return save_png(fig, path, dpi=110, tight=True)
