"""Simplex mesh files read into a :class:`~hpcsolve.fem.discrete.simplex.SimplexMesh`, and the element-generic path's
results written out: XDMF + HDF5 fields (P1 and P2) and a PNG of a 2D or 3D field.

:func:`read_simplex_mesh` reads what meshio reads (gmsh .msh 2.2 / 4.1, .vtu, .xdmf, ...): tetrahedra (``tetra``,
``tetra10``) or triangles (``triangle``, ``triangle6``). A file that does not tile its domain once (coincident nodes,
a facet in three cells, a hanging node, overlapping or flat cells) would be assembled as given and solved to a wrong
answer without a sign of it, so each is refused with one CaseError naming the field, as
:func:`hpcsolve.fem.discrete.mesh.read_mesh` does for 2D P1 triangles. A second-order file is read as straight-sided:
its mid-edge nodes must be the edge midpoints and are then dropped (P2 DOFs are numbered from the edges by the DOF
map), so a curved mesh is refused rather than flattened silently.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from hpcsolve.core.errors import CaseError, clip
from hpcsolve.core.plotstyle import colorbar, new_figure, save_png
from hpcsolve.fem.discrete.mesh import MAX_EXTENT, MIN_EXTENT, MIN_EXTENT_RATIO, converted, read_meshio
from hpcsolve.fem.discrete.simplex import EDGES, FACETS, P2_SUBTRIANGLES, DofMap, SimplexMesh

#: meshio cell types read as the volume cells, by dimension: (first order, second order)
VOLUME_TYPES = {3: ("tetra", "tetra10"), 2: ("triangle", "triangle6")}
#: meshio cell types whose physical groups tag boundary facets, by mesh dimension
FACET_TYPES = {3: ("triangle", "triangle6"), 2: ("line", "line3")}
#: a mid-edge node further than this fraction of its edge's length from the edge's midpoint makes a curved cell
STRAIGHT_TOL = 1e-8
#: a cell whose |measure| is at most this times its longest edge to the power d is degenerate
FLAT_TOL = 1e-12
#: two nodes closer than this fraction of the mesh size (its bounding box diagonal) are one node given twice
COINCIDENT_TOL = 1e-12
#: a node closer than this fraction of a facet's longest edge to the facet (barycentric coordinates likewise) lies on it
ON_FACET_TOL = 1e-9
#: at most this many boundary facets, and cut polygons per slice, are drawn in a 3D figure (more take seconds each
#: and are not seen at the figure's resolution): every k-th one beyond
PLOT_MAX_FACETS = 100_000

ALLOWED = ("a mesh file meshio can read (gmsh .msh, .vtu, .xdmf) of tetrahedra (tetra, tetra10) or triangles "
           "(triangle, triangle6); relative paths: to the case file")


def read_simplex_mesh(path: str | Path, field_name: str = "mesh.path") -> tuple[SimplexMesh, int]:
    """(mesh, degree in the file: 1 or 2) of a tetrahedral (3D) or triangular (2D) mesh file.

    The highest-dimensional cells are the mesh; a triangle file whose z column is constant is 2D. Lower-dimensional
    cells (triangles of a tetrahedral file, lines of a triangle file) with gmsh physical groups (``gmsh:physical``
    cell data, names from ``field_data``) tag the boundary facets they cover; an untagged boundary facet is
    "boundary", a tagged facet that is not on the boundary is ignored. Physical groups of the volume cells name
    ``cell_regions``. Refused, each with a CaseError naming ``field_name``:

    - a file that is not a regular file of at most MESH_FILE_MAX_BYTES, a gmsh file whose counts or ids are
      impossible, a file no meshio reader accepts (as :func:`hpcsolve.fem.discrete.mesh.read_mesh`);
    - cells other than tetrahedra / triangles of order 1 or 2, both orders in one file, a non-flat triangle mesh;
    - non-finite coordinates, coordinates beyond the extent ``mesh.check_extent`` allows;
    - a second-order cell whose mid-edge node is off its edge's midpoint by more than STRAIGHT_TOL of the edge (curved);
    - degenerate cells: a repeated node, or |measure| <= FLAT_TOL x (longest edge)^d;
    - two nodes used by cells within COINCIDENT_TOL x the mesh size (an unmerged duplicate: a crack);
    - a cell listed twice, a facet of three or more cells (non-manifold), two cells on the same side of their shared
      facet, or cells around a node covering more than a full angle (2 pi; 4 pi steradians in 3D): overlaps;
    - a hanging node: a node on a boundary facet (on its interior or its edges' interiors) that is not one of its
      vertices. A facet with a node on it is a facet of one cell (its neighbours have the node as a vertex), so every
      hanging node on a facet or an edge is found; a node inside a cell is an overlap, found by the angle sums.

    Negatively oriented cells are turned (two vertices swapped; the mid-edge nodes are dropped anyway, so the P2 DOFs
    follow the turned vertices), nodes used by no cell are dropped and the rest renumbered in file order. ``info``
    says ``degree_in_file`` and, where nonzero, ``reoriented_cells``, ``unused_nodes``, ``mid_edge_nodes``.
    """
    path = Path(path)
    mm = read_meshio(path, field_name, ALLOWED)       # the 2D reader's checks of the file and meshio's errors
    return converted(lambda: _simplex_from_meshio(mm, clip(str(path)), field_name), path, field_name, ALLOWED,
                     "a simplex mesh")


def _simplex_from_meshio(mm, where: str, field_name: str) -> tuple[SimplexMesh, int]:
    """The checked SimplexMesh of a meshio mesh (what :func:`read_simplex_mesh` says), and the degree in the file."""
    dim, kind = _volume_kind(mm, where, field_name)
    degree = VOLUME_TYPES[dim].index(kind) + 1
    pts = np.asarray(mm.points, dtype=np.float64)
    blocks = [i for i, b in enumerate(mm.cells) if b.type == kind]
    cells = np.concatenate([np.asarray(mm.cells[i].data) for i in blocks])
    if not np.issubdtype(cells.dtype, np.integer) or cells.min() < 0 or cells.max() >= len(pts):
        bad = cells[(cells < 0) | (cells >= len(pts))] if np.issubdtype(cells.dtype, np.integer) else cells.ravel()
        raise CaseError.invalid(field_name, where, "cells whose nodes are in the file",
                                why=f"a {kind} cell refers to node index {clip(str(bad[:1].tolist()), 40)}, not one "
                                    f"of the {len(pts)} nodes")
    in_cells = np.unique(cells)
    pts = _coordinates(pts, in_cells, dim, where, field_name)
    if degree == 2:
        _refuse_curved(pts, cells, dim, where, field_name)
    vertices = cells[:, :dim + 1]
    used = np.unique(vertices)
    remap = np.full(len(pts), -1, dtype=np.int64)
    remap[used] = np.arange(len(used))
    pts, vertices = pts[used], remap[vertices].astype(np.int32)
    _check_extent(pts, field_name, where)
    signed = _check_cells(pts, vertices, dim, where, field_name)
    turned = signed < 0
    vertices[turned, 1], vertices[turned, 2] = vertices[turned, 2].copy(), vertices[turned, 1].copy()
    facets = _check_conforming(pts, vertices, dim, where, field_name)
    names = {(int(dim_), int(tag)): name for name, (tag, dim_) in (mm.field_data or {}).items()}
    phys = mm.cell_data.get("gmsh:physical")
    regions = None
    if phys is not None and all(phys[i] is not None for i in blocks):
        tags = np.concatenate([np.asarray(phys[i]).ravel() for i in blocks]).astype(np.int64)
        uniq, inv = np.unique(tags, return_inverse=True)
        regions = np.array([names.get((dim, int(t)), str(int(t))) for t in uniq], dtype=str)[inv.ravel()]
    facet_tags = _facet_tags(mm, phys, names, dim, remap, facets, where, field_name)
    mid = len(np.unique(cells[:, dim + 1:])) if degree == 2 else 0
    counts = {"reoriented_cells": int(turned.sum()), "unused_nodes": len(mm.points) - len(in_cells),
              "mid_edge_nodes": mid}
    info = {"degree_in_file": degree, **{k: v for k, v in counts.items() if v}}
    mesh = SimplexMesh(pts, vertices, facets, facet_tags, regions, source=where, info=info)
    return mesh, degree


def _volume_kind(mm, where: str, field_name: str) -> tuple[int, str]:
    """(dimension, meshio cell type) of the file's volume cells: its highest-dimensional cells, which must be
    tetrahedra or triangles of one order."""
    dims = {b.type: int(b.dim) for b in mm.cells if len(b.data)}      # meshio's topological dimension
    dim = max(dims.values(), default=-1)
    if dim not in (2, 3):
        raise CaseError.invalid(field_name, where, ALLOWED,
                                why=f"no triangles or tetrahedra in the file (cells: {', '.join(dims) or 'none'})")
    kinds = [t for t, d in dims.items() if d == dim]
    other = [t for t in kinds if t not in VOLUME_TYPES[dim]]
    if other:     # solving on part of the cells would leave out part of the domain, silently
        raise CaseError.invalid(field_name, where, ALLOWED,
                                why=f"it has {', '.join(other)} cells; only {' and '.join(VOLUME_TYPES[dim])} are read "
                                    "(mesh with simplices of order 1 or 2: gmsh Mesh.RecombineAll = 0, "
                                    "Mesh.ElementOrder = 1 or 2)")
    if len(kinds) > 1:
        raise CaseError.invalid(field_name, where, ALLOWED,
                                why=f"it mixes {' and '.join(kinds)} cells; a file holds cells of one order")
    return dim, kinds[0]


def _coordinates(pts: np.ndarray, used: np.ndarray, dim: int, where: str, field_name: str) -> np.ndarray:
    """The points with ``dim`` columns: finite where cells use them; a triangle mesh's constant z column dropped."""
    if pts.ndim != 2 or pts.shape[1] < dim or (dim == 3 and pts.shape[1] > 3):
        raise CaseError.invalid(field_name, where, f"points with {dim} coordinates",
                                why=f"its points have shape {pts.shape}")
    if not np.isfinite(pts[used]).all():
        k = int(used[~np.isfinite(pts[used]).all(axis=1)][0])
        raise CaseError.invalid(field_name, where, "finite node coordinates",
                                why=f"the mesh has NaN/Inf coordinates, first: node index {k}")
    if pts.shape[1] > dim:
        rest = pts[used, dim:]
        scale = max(float(np.ptp(pts[used, :dim], axis=0).max()), float(np.abs(rest).max()))
        if float(np.ptp(rest, axis=0).max()) > 1e-12 * scale:
            raise CaseError.invalid(field_name, where, "a planar triangle mesh (one z for every node) or tetrahedra",
                                    why="its triangles are not in one plane z = constant (a surface mesh in 3D)")
    return np.ascontiguousarray(pts[:, :dim])


def _at(p) -> str:
    return "(" + ", ".join(f"{float(x):g}" for x in p) + ")"


def _refuse_curved(pts: np.ndarray, cells: np.ndarray, dim: int, where: str, field_name: str) -> None:
    """Refuse a second-order cell with a mid-edge node off its edge's midpoint: the P2 path maps every cell affinely,
    so a curved side would be straightened without a word."""
    e = EDGES[dim]
    a, b = pts[cells[:, e[:, 0]]], pts[cells[:, e[:, 1]]]
    off = np.linalg.norm(pts[cells[:, dim + 1:]] - 0.5 * (a + b), axis=-1)
    length = np.linalg.norm(b - a, axis=-1)
    bad = off > STRAIGHT_TOL * length
    if bad.any():
        k, j = (int(v[0]) for v in np.nonzero(bad))
        raise CaseError.invalid(field_name, where, "straight-sided cells: every mid-edge node at its edge's midpoint "
                                                   f"(within {STRAIGHT_TOL:g} of the edge's length)",
                                why=f"curved cells are not supported: {int(bad.any(axis=1).sum())} cell(s) with a "
                                    f"mid-edge node off its edge's midpoint, first: cell {k}, node "
                                    f"{_at(pts[cells[k, dim + 1 + j]])} is {off[k, j] / max(length[k, j], 1e-300):.3g} "
                                    f"edge lengths from the midpoint of {_at(a[k, j])} - {_at(b[k, j])}; mesh with "
                                    "Mesh.SecondOrderLinear = 1 in gmsh, or first order (P2 is built from the edges)")


def _check_extent(points: np.ndarray, field_name: str, where: str) -> None:
    """Refuse coordinates beyond the extent the 2D reader allows (``mesh.check_extent``), measured in d dimensions."""
    with np.errstate(over="ignore"):                       # a span beyond the float range is inf: refused
        extent = float(np.linalg.norm(np.ptp(points, axis=0)))
    magnitude = float(np.abs(points).max())
    if not (magnitude <= MAX_EXTENT and MIN_EXTENT <= extent <= MAX_EXTENT and extent >= MIN_EXTENT_RATIO * magnitude):
        allowed = (f"node coordinates within +-{MAX_EXTENT:g}, an extent from {MIN_EXTENT:g} to {MAX_EXTENT:g} and at "
                   f"least {MIN_EXTENT_RATIO:g} of the coordinates' magnitude (rescale or shift the mesh)")
        raise CaseError.invalid(field_name, where, allowed,
                                why=f"the mesh has extent {extent:g} at coordinates up to {magnitude:g}")


def _check_cells(pts: np.ndarray, cells: np.ndarray, dim: int, where: str, field_name: str) -> np.ndarray:
    """The signed measure of every cell, refusing degenerate cells: a repeated node, or a measure that is no more than
    FLAT_TOL times the longest edge to the power d."""
    s = np.sort(cells, axis=1)
    repeated = (s[:, 1:] == s[:, :-1]).any(axis=1)
    p = pts[cells]
    signed = np.linalg.det((p[:, 1:] - p[:, :1]).transpose(0, 2, 1)) / math.factorial(dim)
    e = EDGES[dim]
    longest = np.linalg.norm(p[:, e[:, 1]] - p[:, e[:, 0]], axis=-1).max(axis=1)
    flat = repeated | (np.abs(signed) <= FLAT_TOL * longest ** dim)
    if flat.any():
        k = np.flatnonzero(flat)
        measure = "volume" if dim == 3 else "area"
        raise CaseError.invalid(field_name, where, "a mesh of non-degenerate cells",
                                why=f"{k.size} degenerate cell(s) (repeated nodes or zero {measure}), first: cell "
                                    f"{int(k[0])} with nodes {cells[k[0]].tolist()} at "
                                    + ", ".join(_at(x) for x in p[k[0]]))
    return signed


def _check_conforming(pts: np.ndarray, cells: np.ndarray, dim: int, where: str, field_name: str) -> np.ndarray:
    """The boundary facets (k, d) (facets of one cell, vertices in the order of ``simplex.FACETS``: outward normals)
    of positively oriented cells, refusing a mesh that does not tile its domain once: coincident nodes, a cell listed
    twice, a facet of three or more cells, two cells on the same side of their shared facet, more than a full angle
    of cells around a node, a hanging node."""
    from scipy.spatial import cKDTree  # late: 0.1 s of import, only for a mesh file's check

    tree = cKDTree(pts)
    pairs = tree.query_pairs(r=COINCIDENT_TOL * float(np.linalg.norm(np.ptp(pts, axis=0))), output_type="ndarray")
    if len(pairs):
        raise CaseError.invalid(field_name, where, "a conforming mesh: one node per position",
                                why=f"{len(pairs)} pair(s) of coincident nodes (unmerged duplicates leave a crack in "
                                    f"the mesh), first: nodes at {_at(pts[pairs[0, 0]])}; merge them (e.g. gmsh "
                                    "Coherence)")
    if len(np.unique(np.sort(cells, axis=1), axis=0)) < len(cells):
        raise CaseError.invalid(field_name, where, "a conforming mesh: each cell once", why="a cell is listed twice")
    local = cells[:, FACETS[dim]].reshape(-1, dim)              # every cell's facets, outward
    key, first, inv, count = np.unique(np.sort(local, axis=1), axis=0, return_index=True, return_inverse=True,
                                       return_counts=True)
    inv = inv.ravel()
    what = "facet" if dim == 3 else "edge"
    if (count > 2).any():
        f = key[int(np.argmax(count > 2))]
        raise CaseError.invalid(field_name, where, f"a conforming mesh: every {what} in one or two cells",
                                why=f"{int((count > 2).sum())} {what}(s) shared by three or more cells (a non-manifold "
                                    f"or overlapping mesh), first: the {what} at " + ", ".join(_at(pts[v]) for v in f))
    # a shared facet's two outward orders are of opposite parity unless both cells lie on the same side of it
    i, j = np.triu_indices(dim, 1)
    odd = (local[:, i] > local[:, j]).sum(axis=1) % 2               # inversions of each facet's order
    same_side = (count == 2) & (np.bincount(inv, weights=odd, minlength=len(key)) != 1)
    if same_side.any():
        raise CaseError.invalid(field_name, where, "a conforming mesh: cells that do not overlap",
                                why=f"{int(same_side.sum())} {what}(s) with both of their cells on the same side "
                                    "(overlapping cells), first: the " + what + " at "
                                    + ", ".join(_at(pts[v]) for v in key[int(np.argmax(same_side))]))
    _refuse_overfull_angles(pts, cells, dim, where, field_name)
    facets = local[first[count == 1]].astype(np.int32)
    _refuse_hanging_nodes(pts, facets, tree, where, field_name)
    return facets


def _refuse_overfull_angles(pts: np.ndarray, cells: np.ndarray, dim: int, where: str, field_name: str) -> None:
    """The cells around a node fill at most a full angle (2 pi; 4 pi steradians in 3D): more means some overlap."""
    full = 2 * np.pi if dim == 2 else 4 * np.pi
    total = np.zeros(len(pts))
    for k in range(dim + 1):
        u = [pts[cells[:, (k + j) % (dim + 1)]] - pts[cells[:, k]] for j in range(1, dim + 1)]
        if dim == 2:
            angle = np.arctan2(np.abs(u[0][:, 0] * u[1][:, 1] - u[0][:, 1] * u[1][:, 0]), (u[0] * u[1]).sum(axis=1))
        else:        # the solid angle at a corner (Van Oosterom and Strackee)
            a, b, c = u
            na, nb, nc = (np.linalg.norm(v, axis=1) for v in u)
            den = na * nb * nc + (a * b).sum(1) * nc + (a * c).sum(1) * nb + (b * c).sum(1) * na
            angle = 2 * np.arctan2(np.abs((a * np.cross(b, c)).sum(axis=1)), den)
        total += np.bincount(cells[:, k], weights=angle, minlength=len(pts))
    over = np.flatnonzero(total > full * (1 + 1e-9))
    if over.size:
        raise CaseError.invalid(field_name, where, "a conforming mesh: cells that do not overlap",
                                why=f"at {over.size} node(s) the cells around it cover more than a full angle "
                                    f"(overlapping cells), first: the node at {_at(pts[over[0]])}")


def _refuse_hanging_nodes(pts: np.ndarray, facets: np.ndarray, tree, where: str, field_name: str) -> None:
    """Refuse a node on a boundary facet (on its interior or on one of its edges) that is not one of its vertices: a
    hanging node leaves the large facet and the small ones beside it all "boundary", the two sides uncoupled. Only the
    nodes within each facet's circumscribing ball around its centroid are looked at: O(n log n)."""
    if not len(facets):
        return
    v = pts[facets]                                             # (k, d, d)
    centre = v.mean(axis=1)
    radius = np.linalg.norm(v - centre[:, None], axis=-1).max(axis=1)
    near = tree.query_ball_point(centre, r=radius * (1 + 1e-9), return_sorted=False)
    counts = np.fromiter((len(n) for n in near), dtype=np.int64, count=len(near))
    f = np.repeat(np.arange(len(facets)), counts)
    node = np.concatenate([np.asarray(n, dtype=np.int64) for n in near])
    keep = (node[:, None] != facets[f]).all(axis=1)
    f, node = f[keep], node[keep]
    if not f.size:
        return
    span = v[f, 1:] - v[f, :1]                                  # (p, d - 1, d): the facet's edges from vertex 0
    rel = pts[node] - v[f, 0]
    lam = np.linalg.solve(span @ span.transpose(0, 2, 1), (span @ rel[:, :, None]))[:, :, 0]
    off = np.linalg.norm(rel - (lam[:, :, None] * span).sum(axis=1), axis=1)
    edges = v[f][:, :, None] - v[f][:, None, :]
    longest = np.linalg.norm(edges, axis=-1).max(axis=(1, 2))
    bary = np.column_stack([1 - lam.sum(axis=1), lam])
    on = (off <= ON_FACET_TOL * longest) & (bary >= -ON_FACET_TOL).all(axis=1)
    if on.any():
        k = int(np.flatnonzero(on)[0])
        raise CaseError.invalid(field_name, where, "a conforming mesh: neighbouring cells share whole facets, no node "
                                                   "on another cell's facet or edge",
                                why=f"{int(np.unique(node[on]).size)} hanging node(s), first: the node at "
                                    f"{_at(pts[node[k]])} lies on the boundary facet "
                                    + ", ".join(_at(x) for x in v[f[k]]) + " without being one of its vertices; "
                                    "split that facet's cell at the node or remesh conformingly (e.g. gmsh Coherence)")


def _facet_tags(mm, phys, names: dict, dim: int, remap: np.ndarray, facets: np.ndarray, where: str,
                field_name: str) -> np.ndarray:
    """The tag of every boundary facet: the physical group of the file's facet cell on it, else "boundary"."""
    tags = np.full(len(facets), "boundary", dtype=object)
    keys, tagged = [], []
    for block, t in zip(mm.cells, phys if phys is not None else [None] * len(mm.cells)):
        if block.type not in FACET_TYPES[dim] or t is None or not len(block.data):
            continue
        data = np.asarray(block.data)[:, :dim]
        if data.min() < 0 or data.max() >= len(remap):              # -1: meshio found no such node
            bad = data[(data < 0) | (data >= len(remap))]
            raise CaseError.invalid(field_name, where, f"{block.type} elements whose nodes are in the file",
                                    why=f"a {block.type} element refers to node index {int(bad[0])}, not one of the "
                                        f"{len(remap)} nodes")
        d = remap[data]
        ok = (d >= 0).all(axis=1)
        keys.append(np.sort(d[ok], axis=1))
        tagged.extend(names.get((dim - 1, int(v)), str(int(v))) for v in np.asarray(t).ravel()[ok])
    if not tagged or not len(facets):
        return tags.astype(str)
    file_keys = np.concatenate(keys)
    _, inv = np.unique(np.concatenate([file_keys, np.sort(facets, axis=1)]), axis=0, return_inverse=True)
    inv = inv.ravel()
    slot = np.full(int(inv.max()) + 1, -1, dtype=np.int64)
    slot[inv[:len(file_keys)]] = np.arange(len(file_keys))       # a facet given twice: its last group
    hit = slot[inv[len(file_keys):]]
    tags[hit >= 0] = np.asarray(tagged, dtype=object)[hit[hit >= 0]]
    return tags.astype(str)


# ------------------------------------------------------------------------------------------------
# results: XDMF + HDF5, figures


def write_xdmf(path_stem: str | Path, mesh: SimplexMesh, fields: dict, dofmap: DofMap | None = None,
               cell_fields: dict | None = None) -> Path:
    """Write ``<path_stem>.xdmf`` and ``<path_stem>.h5`` (meshio's XDMF 3 writer, HDF5 data, gzip): one grid that
    ParaView and ``meshio.read`` open; the .xdmf's path is returned.

    Without ``dofmap`` (or with a degree-1 one) the cells are ``triangle`` / ``tetra`` on the mesh vertices; with a
    degree-2 one they are ``triangle6`` / ``tetra10`` on ``dofmap.points`` with ``dofmap.cell_dofs`` (VTK / meshio
    order, as XDMF's Triangle_6 / Tetrahedron_10). ``fields``: point data by name, (N,) scalars or (N, d) vectors, N
    the number of points written; 2-component vectors are padded with a zero z to 3 components, as the project's other
    results are (XDMF's Vector attribute has 3, and ParaView's glyphs and warps take 3). ``cell_fields``: (m,) or
    (m, c) cell data by name. Both files are written in a temporary folder beside them and renamed into place, so a
    failed write leaves no half file.
    """
    import meshio  # late: 0.04 s of import, only for output

    degree = 1 if dofmap is None else int(dofmap.degree)
    points = mesh.points if dofmap is None else np.asarray(dofmap.points, dtype=np.float64)
    cells = mesh.cells if dofmap is None else np.asarray(dofmap.cell_dofs)
    kind = VOLUME_TYPES[mesh.dim][degree - 1]
    point_data = {name: _output_array(f"fields[{name!r}]", a, len(points), "point") for name, a in fields.items()}
    cell_data = {name: [_output_array(f"cell_fields[{name!r}]", a, len(cells), "cell")]
                 for name, a in (cell_fields or {}).items()}
    out = meshio.Mesh(points, [(kind, cells)], point_data=point_data, cell_data=cell_data)
    stem = Path(path_stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{stem.name}.", dir=stem.parent))
    try:
        meshio.xdmf.write(stage / f"{stem.name}.xdmf", out, data_format="HDF")
        os.replace(stage / f"{stem.name}.h5", stem.parent / f"{stem.name}.h5")   # the data first, then what names it
        os.replace(stage / f"{stem.name}.xdmf", stem.parent / f"{stem.name}.xdmf")
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return stem.parent / f"{stem.name}.xdmf"


def _output_array(name: str, values, n: int, where: str) -> np.ndarray:
    """``values`` as an array XDMF stores: n rows, numbers (booleans as int8), 2-component vectors padded to 3."""
    a = np.asarray(values)
    if a.ndim == 2 and a.shape[1] == 1:
        a = a[:, 0]
    if a.dtype.kind not in "biuf" or a.ndim not in (1, 2) or len(a) != n or (a.ndim == 2 and a.shape[1] > 9):
        raise CaseError.invalid(name, f"{a.dtype} array of shape {a.shape}", f"({n},) or ({n}, c) numbers, one row "
                                                                          f"per {where} written (c <= 9)")
    if a.dtype.kind == "b" or (a.dtype.kind == "f" and a.dtype.itemsize < 4):
        a = a.astype(np.int8 if a.dtype.kind == "b" else np.float32)
    if a.ndim == 2 and a.shape[1] == 2:
        a = np.column_stack([a, np.zeros(n, dtype=a.dtype)])
    return np.ascontiguousarray(a)


def plot_field_3d(path_png: str | Path, mesh: SimplexMesh, values, title: str, dofmap: DofMap | None = None, *,
                  label: str = "u", slices: bool = True) -> Path:
    """A PNG of a scalar field on a simplex mesh; ``values``: one per vertex, or per DOF of ``dofmap`` (vertices
    first). 3D: the boundary surface coloured by the mean of each facet's vertex values (its inside is what
    ``slices`` shows: three mid-plane cuts, each cell cut coloured by the mean of the values interpolated to its cut
    points); beyond PLOT_MAX_FACETS facets or cut cells every k-th one is drawn and the panel says so. 2D: Gouraud
    colours on the triangles (a P2 field's triangles split at their mid-edge DOFs). Agg canvas, no pyplot."""
    vals = np.asarray(values, dtype=np.float64).ravel()
    n = mesh.n_points if dofmap is None else dofmap.n_dofs
    if len(vals) != n:
        raise CaseError.invalid("values", f"{len(vals)} values", f"{n} values, one per "
                                                                 f"{'vertex' if dofmap is None else 'DOF'}")
    if mesh.dim == 2:
        return _plot_2d(Path(path_png), mesh, vals, title, dofmap, label)
    return _plot_3d(Path(path_png), mesh, vals[:mesh.n_points], title, label, slices)


def _plot_2d(path: Path, mesh: SimplexMesh, vals: np.ndarray, title: str, dofmap, label: str) -> Path:
    import matplotlib.tri as mtri  # late: matplotlib costs about 0.5 s to import, for plots only

    if dofmap is not None and dofmap.degree == 2:
        pts, tris = np.asarray(dofmap.points), np.asarray(dofmap.cell_dofs)[:, P2_SUBTRIANGLES].reshape(-1, 3)
    else:
        pts, tris, vals = mesh.points, mesh.cells, vals[:mesh.n_points]
    fig = new_figure((6.4, 4.8))
    ax = fig.add_subplot()
    pc = ax.tripcolor(mtri.Triangulation(pts[:, 0], pts[:, 1], tris), vals, shading="gouraud", cmap="viridis")
    if len(tris) <= 5000:
        ax.triplot(mtri.Triangulation(mesh.points[:, 0], mesh.points[:, 1], mesh.cells), lw=0.2, color="k", alpha=0.4)
    ax.set_aspect("equal")
    colorbar(fig, ax, pc, label)
    ax.set_xlabel("x (mesh units)")
    ax.set_ylabel("y (mesh units)")
    ax.set_title(title, pad=12)
    return save_png(fig, path, dpi=120)


def _plot_3d(path: Path, mesh: SimplexMesh, vals: np.ndarray, title: str, label: str, slices: bool) -> Path:
    from matplotlib.collections import PolyCollection  # late: matplotlib, for plots only
    from matplotlib.colors import Normalize  # late: matplotlib, for plots only
    from mpl_toolkits.mplot3d.art3d import Poly3DCollection  # late: matplotlib's 3D axes, for plots only

    finite = vals[np.isfinite(vals)]
    norm = Normalize(*(float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0))
    fig = new_figure((10.0, 8.0) if slices else (6.4, 5.6))
    fig.subplots_adjust(left=0.04, right=0.86, top=0.88, bottom=0.06, wspace=0.25, hspace=0.3)
    ax = fig.add_subplot(2, 2, 1, projection="3d") if slices else fig.add_subplot(projection="3d")
    step = -(-len(mesh.facets) // PLOT_MAX_FACETS)
    shown = mesh.facets[::max(step, 1)]
    few = len(shown) <= 5000                  # edges drawn where they are seen; else no seams between facets
    surface = Poly3DCollection(mesh.points[shown], cmap="viridis", norm=norm, edgecolors="k" if few else "none",
                               linewidths=0.1 if few else 0.0, antialiased=few)
    surface.set_array(vals[shown].mean(axis=1))
    ax.add_collection3d(surface)
    lo, hi = mesh.bounds()
    for setter, a, b in zip((ax.set_xlim, ax.set_ylim, ax.set_zlim), lo, hi):
        setter(a, b)
    ax.set_box_aspect(np.maximum(hi - lo, 1e-3 * float((hi - lo).max())))
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.set_zlabel("z")
    ax.set_title("boundary surface" + (f"\n(1 in {step} of {len(mesh.facets):,} facets drawn)" if step > 1 else ""))
    for axis in range(3) if slices else ():
        level = 0.5 * (lo[axis] + hi[axis])
        polys, colour = _slice(mesh.points, mesh.cells, vals, axis, level)
        cut = -(-len(polys) // PLOT_MAX_FACETS)
        sub = fig.add_subplot(2, 2, axis + 2)
        pc = PolyCollection(polys[::max(cut, 1)], cmap="viridis", norm=norm, edgecolors="face", linewidths=0.2)
        pc.set_array(colour[::max(cut, 1)])
        sub.add_collection(pc)
        u, v = (j for j in range(3) if j != axis)
        sub.set_xlim(lo[u], hi[u])
        sub.set_ylim(lo[v], hi[v])
        sub.set_aspect("equal")
        sub.set_xlabel("xyz"[u])
        sub.set_ylabel("xyz"[v])
        sub.set_title(f"slice {'xyz'[axis]} = {level:.4g}" + (f"\n(1 in {cut} of {len(polys):,} cut cells drawn)"
                                                              if cut > 1 else ""))
    fig.colorbar(surface, cax=fig.add_axes([0.9, 0.15, 0.02, 0.65]), label=label)
    fig.suptitle(title)
    return save_png(fig, path, dpi=100)


def _slice(points: np.ndarray, cells: np.ndarray, vals: np.ndarray, axis: int, level: float):
    """(polygons (k, 4, 2) in the plane's two other coordinates, their colours (k,)) of the tetrahedra cut by the
    plane ``x[axis] = level``: a cut crosses 3 or 4 edges (a triangle repeats its first point), its points in angle
    order around their centre, its colour the mean of the values interpolated linearly to them."""
    side = points[:, axis] - level
    s = side[cells]
    above = s >= 0
    c, s = cells[above.any(axis=1) & ~above.all(axis=1)], s[above.any(axis=1) & ~above.all(axis=1)]
    e = EDGES[3]
    sa, sb = s[:, e[:, 0]], s[:, e[:, 1]]
    crosses = (sa >= 0) != (sb >= 0)
    t = np.where(crosses, sa / np.where(crosses, sa - sb, 1.0), 0.0)
    pa, pb = points[c[:, e[:, 0]]], points[c[:, e[:, 1]]]
    plane = [j for j in range(3) if j != axis]
    q = (pa + t[..., None] * (pb - pa))[..., plane]                     # (k, 6, 2)
    value = vals[c[:, e[:, 0]]] + t * (vals[c[:, e[:, 1]]] - vals[c[:, e[:, 0]]])
    w = crosses.astype(np.float64)
    centre = (q * w[..., None]).sum(axis=1) / w.sum(axis=1)[:, None]
    angle = np.where(crosses, np.arctan2(q[..., 1] - centre[:, None, 1], q[..., 0] - centre[:, None, 0]), np.inf)
    order = np.argsort(angle, axis=1)[:, :4]
    polys = np.take_along_axis(q, order[..., None], axis=1)
    three = crosses.sum(axis=1) == 3
    polys[three, 3] = polys[three, 0]
    return polys, (value * w).sum(axis=1) / w.sum(axis=1)
