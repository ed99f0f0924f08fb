"""Generate the example meshes shipped in cases/meshes/ (run once; no gmsh binary needed).

plate_with_hole.msh: the plate [0, 2] x [0, 1] with a circular hole of radius 0.25 at (0.7, 0.5)
(a non-convex domain), gmsh 2.2 format with physical groups: boundary lines "left", "right",
"bottom", "top", "hole"; triangle regions "plate". Points: rings around the hole, a grid
elsewhere, Delaunay triangulation (SciPy), triangles inside the hole removed.

    python cases/meshes/make_meshes.py
"""

from pathlib import Path

import meshio
import numpy as np
from scipy.spatial import Delaunay

HERE = Path(__file__).parent


def plate_with_hole(h=0.05, lx=2.0, ly=1.0, cx=0.7, cy=0.5, r=0.25):
    nseg = int(round(2 * np.pi * r / h))
    th = np.linspace(0, 2 * np.pi, nseg, endpoint=False)
    rings = []
    rad = r
    k = 0
    while rad < r + 3 * h:      # a few rings hug the hole, grid points take over further out
        rings.append(np.column_stack([cx + rad * np.cos(th + 0.5 * k * (th[1] - th[0])),
                                      cy + rad * np.sin(th + 0.5 * k * (th[1] - th[0]))]))
        rad += h * (rad / r) ** 0.5
        k += 1
    nx, ny = int(round(lx / h)), int(round(ly / h))
    X, Y = np.meshgrid(np.linspace(0, lx, nx + 1), np.linspace(0, ly, ny + 1))
    grid = np.column_stack([X.ravel(), Y.ravel()])
    grid = grid[np.hypot(grid[:, 0] - cx, grid[:, 1] - cy) > rad + 0.3 * h]
    pts = np.vstack(rings + [grid])
    tri = Delaunay(pts).simplices
    cent = pts[tri].mean(axis=1)
    tri = tri[np.hypot(cent[:, 0] - cx, cent[:, 1] - cy) > r]
    # boundary lines: outer sides and hole (hole nodes are the first nseg points)
    lines, tags = [], []
    tol = 1e-9
    for name, tag, sel, key in (("left", 1, np.abs(pts[:, 0]) < tol, 1), ("right", 2, np.abs(pts[:, 0] - lx) < tol, 1),
                                ("bottom", 3, np.abs(pts[:, 1]) < tol, 0), ("top", 4, np.abs(pts[:, 1] - ly) < tol, 0)):
        idx = np.flatnonzero(sel)
        idx = idx[np.argsort(pts[idx, key])]
        lines += list(zip(idx[:-1], idx[1:]))
        tags += [tag] * (len(idx) - 1)
    hole = np.arange(nseg)
    lines += list(zip(hole, np.roll(hole, -1)))
    tags += [5] * nseg
    field_data = {"left": np.array([1, 1]), "right": np.array([2, 1]), "bottom": np.array([3, 1]),
                  "top": np.array([4, 1]), "hole": np.array([5, 1]), "plate": np.array([10, 2])}
    mesh = meshio.Mesh(np.column_stack([pts, np.zeros(len(pts))]),
                       [("line", np.array(lines, dtype=np.int64)), ("triangle", tri.astype(np.int64))],
                       cell_data={"gmsh:physical": [np.array(tags), np.full(len(tri), 10)],
                                  "gmsh:geometrical": [np.array(tags), np.full(len(tri), 10)]},
                       field_data=field_data)
    return mesh


if __name__ == "__main__":
    m = plate_with_hole()
    out = HERE / "plate_with_hole.msh"
    meshio.write(out, m, file_format="gmsh22", binary=False)
    print(f"wrote {out}: {len(m.points)} points, {len(m.cells_dict['triangle'])} triangles")
