"""The figures of an FEM run (its Result's plotter): solution.png, error.png and residuals.png, drawn on a subsample of
a large mesh."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from hpcsolve.core import plotstyle
from hpcsolve.core.plotstyle import colorbar, new_figure, run_label, save_png, symmetric_limits
from hpcsolve.core.results import Result
from hpcsolve.fem.discrete.simplex import P2_SUBTRIANGLES, SimplexMesh, boundary_facets


def warm_up_plots() -> float:
    """The figures' imports and font while SuperLU works beside (it releases the GIL); its seconds. A failure here
    is not the run's: the plots say theirs when they are drawn."""
    t0 = time.perf_counter()
    try:
        plotstyle.warm_up()
    except Exception:       # noqa: BLE001  (matplotlib, a font: the write turns a plotting failure into a note)
        pass
    return time.perf_counter() - t0


#: a structured grid of more cells a side is drawn from every k-th node (a 768 x 576-pixel figure, its axes about
#: 500 x 400 pixels, shows no more): the 4 M-node mesh took 3.9 s of Gouraud triangles per figure (mesh.nx = 1024,
#: 2-core machine); 256 as mesh.DISPLAY_MAX_TRIANGLES (a 256 x 256-cell grid's triangles)
PLOT_MAX_CELLS = 256


def display_triangles(result: Result, triangles: np.ndarray, display=None):
    """(nodes drawn: a slice or index array, their triangles): all of them; on a structured grid of more than
    PLOT_MAX_CELLS cells a side, the triangulated grid of every k-th node (the last row and column kept); on a refined
    mesh of more than ``mesh.DISPLAY_MAX_TRIANGLES`` triangles, ``display`` (``Mesh.display_level``: the coarser mesh
    it was refined from, whose nodes are its first ones)."""
    if display is not None:
        n, tris = display
        return slice(0, int(n)), np.asarray(tris)
    grid = result.derived.get("structured_grid")
    if not grid or max(grid) <= PLOT_MAX_CELLS:
        return slice(None), triangles
    nx, ny = int(grid[0]), int(grid[1])
    k = -(-max(nx, ny) // PLOT_MAX_CELLS)
    ii = np.unique(np.r_[0:nx + 1:k, nx])
    jj = np.unique(np.r_[0:ny + 1:k, ny])
    keep = (jj[:, None] * (nx + 1) + ii[None, :]).ravel()
    w = ii.size
    c = (np.arange(jj.size - 1)[:, None] * w + np.arange(w - 1)[None, :]).ravel()
    tris = np.concatenate([np.stack([c, c + 1, c + w + 1], 1), np.stack([c, c + w + 1, c + w], 1)])
    return keep, tris


def plot_result(result: Result, plot_dir: Path, display=None) -> list[Path]:
    """solution.png (tripcolor on the mesh; deformed for elasticity), residuals.png, error.png if known. ``display``:
    the coarser mesh a large refined one is drawn on (:func:`display_triangles`).
    Figures without pyplot, PNGs quickly compressed (hpcsolve.core.plotstyle): the 3 figures of the 64 x 64
    Poisson case in 0.5-0.7 s after matplotlib's import (2-core machine)."""
    import matplotlib.tri as mtri    # late: matplotlib costs about 0.5 s to import (measured), for plots only

    files = []
    g = result.grid
    pts = np.asarray(g.points)
    elastic = "displacement" in result.fields
    kind = getattr(g, "cell_type", "triangle")
    if kind.startswith("tetra"):
        return _plot_solid(result, plot_dir)
    name = result.derived.get("field_label") or "u"
    if elastic:
        d = result.fields["displacement"]
        mag = np.hypot(d[:, 0], d[:, 1])
        d = d[:, :2]
        span = np.ptp(pts, axis=0).max()
        scale = 0.1 * span / mag.max() if mag.max() > 0 else 0.0
        shown = pts + scale * d
        values, label = mag, f"|u| (mesh deformed x{scale:.3g})"
    else:
        shown, values, label = pts, result.fields["u"], name
    cells = np.asarray(g.triangles)
    # a P2 field: each triangle6 drawn as four triangles through its edge midpoints
    keep, tris = display_triangles(result, cells if kind == "triangle" else cells[:, P2_SUBTRIANGLES].reshape(-1, 3),
                                   display)
    shown, values = shown[keep], values[keep]
    tri = mtri.Triangulation(shown[:, 0], shown[:, 1], tris)
    run = run_label(result)

    def save(fig, fname):
        files.append(save_png(fig, plot_dir / fname, dpi=120))

    fig = new_figure((6.4, 4.8))
    ax = fig.add_subplot()
    pc = ax.tripcolor(tri, values, shading="gouraud", cmap="viridis")
    if len(tris) <= 5000:
        ax.triplot(tri, lw=0.2, color="k", alpha=0.4)
    ax.set_aspect("equal")
    colorbar(fig, ax, pc, label)
    ax.set_xlabel("x (mesh units)")
    ax.set_ylabel("y (mesh units)")
    ax.set_title(f"{result.case_name}: {label if elastic else name}\n({run})", pad=12)
    save(fig, "solution.png")

    if "error" in result.fields:
        err = np.asarray(result.fields["error"])[keep]
        lo, hi = symmetric_limits(err)      # RdBu centred on zero: white is no error
        fig = new_figure((6.4, 4.8))
        ax = fig.add_subplot()
        pc = ax.tripcolor(tri, err, shading="gouraud", cmap="RdBu_r", vmin=lo, vmax=hi)
        ax.set_aspect("equal")
        colorbar(fig, ax, pc, f"{name}_h - {name}_exact at the nodes")
        ax.set_xlabel("x (mesh units)")
        ax.set_ylabel("y (mesh units)")
        l2 = result.metrics.get("error_l2", float("nan"))
        ax.set_title(f"{result.case_name}: error, L2 {l2:.3e}\n({run})", pad=12)
        save(fig, "error.png")

    return files + _residuals(result, plot_dir, run)


def _plot_solid(result: Result, plot_dir: Path) -> list[Path]:
    """solution.png (and error.png where known) of a tetrahedral mesh: its boundary surface and three mid-plane
    slices coloured by the field (``simplex_io.plot_field_3d``; |u| for elasticity); residuals.png as in 2D."""
    from hpcsolve.fem.discrete import simplex_io  # late: the 3D figure's module, for tetrahedral results only

    g = result.grid
    cells = np.asarray(g.triangles)[:, :4]
    nv = int(cells.max()) + 1                        # the vertices come first (P2: then the edge midpoints)
    facets = boundary_facets(cells, 3)
    mesh = SimplexMesh(np.asarray(g.points)[:nv], cells, facets, np.full(len(facets), "boundary"))
    name = result.derived.get("field_label") or "u"
    if "displacement" in result.fields:
        values, label = np.linalg.norm(result.fields["displacement"], axis=1), "|u|"
    else:
        values, label = np.asarray(result.fields["u"]), name
    run = run_label(result)
    files = [simplex_io.plot_field_3d(plot_dir / "solution.png", mesh, values[:nv],
                                      f"{result.case_name}: {label}\n({run})", label=label)]
    if "error" in result.fields:
        l2 = result.metrics.get("error_l2", float("nan"))
        files.append(simplex_io.plot_field_3d(plot_dir / "error.png", mesh, np.asarray(result.fields["error"])[:nv],
                                              f"{result.case_name}: error, L2 {l2:.3e}\n({run})",
                                              label=f"{name}_h - {name}_exact"))
    return files + _residuals(result, plot_dir, run)


def _residuals(result: Result, plot_dir: Path, run: str) -> list[Path]:
    """residuals.png: the recursive and sampled true residuals against rtol."""
    files: list[Path] = []

    def save(fig, fname):
        files.append(save_png(fig, plot_dir / fname, dpi=120))

    rec = np.asarray(result.series.get("residual_recursive", []))
    if rec.size:
        fig = new_figure((6.4, 4.8))
        fig.subplots_adjust(top=0.82)       # room for a title of three lines (a long case name wraps)
        ax = fig.add_subplot()
        ax.semilogy(np.arange(rec.size), np.maximum(rec, 1e-300), lw=1, label="recursive residual")
        ti = np.asarray(result.series.get("residual_true_iterations", []))
        tv = np.asarray(result.series.get("residual_true", []))
        if tv.size:
            ax.semilogy(ti, np.maximum(tv, 1e-300), "o", ms=4, ls="none", label="true residual (float64, sampled)")
        ax.axhline(result.derived.get("rtol", np.nan), color="gray", ls="--", lw=0.8, label="rtol")
        ax.set_xlabel("Krylov iteration")
        ax.set_ylabel("||r|| / ||b||")
        ax.set_title(f"{result.case_name}: {result.metrics.get('method', '')}, {result.status}\n({run})")
        ax.legend()
        ax.grid(True, which="both", alpha=0.3)
        save(fig, "residuals.png")
    return files
