"""Triangle meshes: structured rectangles, Cook's membrane, any file meshio reads; boundary edges and tags.

A :class:`Mesh` holds points (n, 2) float64, triangles (m, 3) int32 (counter-clockwise), the
boundary edges (k, 2) int32 with a tag name per edge, and an optional region name per triangle.
Boundary tags come from the generator (rectangle: left / right / bottom / top) or from the
file's physical groups (gmsh ``$PhysicalNames``); untagged boundary edges are tagged "boundary".
"""

from __future__ import annotations

import contextlib
import io
import mmap
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from hpcsolve.core.errors import CaseError, clip
from hpcsolve.core.safe_io import MESH_FILE_MAX_BYTES, gmsh_counts, regular_file


#: a mesh figure draws a coarser level of a refined mesh (Mesh.display_level), at most this many triangles (a 256 x
#: 256-cell grid's, as plots.PLOT_MAX_CELLS): more are not seen and cost seconds of output; the measurements:
#: docs/measured/notes_fem_gpu.md, "Triangles drawn in a mesh figure"
DISPLAY_MAX_TRIANGLES = 2 * 256 * 256


@dataclass
class Mesh:
    points: np.ndarray                       # (n, 2) float64
    triangles: np.ndarray                    # (m, 3) int32, counter-clockwise
    boundary_edges: np.ndarray               # (k, 2) int32
    edge_tags: np.ndarray                    # (k,) str: tag name of each boundary edge
    cell_regions: np.ndarray | None = None   # (m,) str: region name per triangle, if the mesh has them
    source: str = ""
    info: dict = field(default_factory=dict)
    _h_max: float | None = field(default=None, repr=False, compare=False)   # h_max(), once computed
    _bounds: tuple | None = field(default=None, repr=False, compare=False)  # bounds(), once computed
    _parts: np.ndarray | None = field(default=None, repr=False, compare=False)  # node_parts(), once computed
    # (points, triangles) of the finest coarser mesh this one was refined from with at most DISPLAY_MAX_TRIANGLES
    # triangles: its points are the first ones of this mesh (a refinement appends its midpoints)
    _display: tuple | None = field(default=None, repr=False, compare=False)

    @property
    def n_points(self) -> int:
        return len(self.points)

    @property
    def n_triangles(self) -> int:
        return len(self.triangles)

    @property
    def tag_names(self) -> list[str]:
        return sorted(set(self.edge_tags.tolist()))

    def areas(self) -> np.ndarray:
        p = self.points[self.triangles]
        return 0.5 * ((p[:, 1, 0] - p[:, 0, 0]) * (p[:, 2, 1] - p[:, 0, 1])
                      - (p[:, 2, 0] - p[:, 0, 0]) * (p[:, 1, 1] - p[:, 0, 1]))

    def h_max(self) -> float:
        """Longest edge length (the mesh size h); computed once (the points are not moved after that: a
        generator that moves them, cook_membrane, does so before anyone asks)."""
        if self._h_max is None:
            x, y = self.points[:, 0], self.points[:, 1]
            t = self.triangles
            longest = 0.0
            for a, b in ((0, 1), (1, 2), (2, 0)):     # per coordinate: no (m, 3, 2) gather (1.75 s at 5.3 M triangles)
                dx, dy = x[t[:, b]] - x[t[:, a]], y[t[:, b]] - y[t[:, a]]
                longest = max(longest, float((dx * dx + dy * dy).max(initial=0.0)))
            self._h_max = float(np.sqrt(longest))
        return self._h_max

    def display_level(self) -> tuple[int, np.ndarray] | None:
        """(n, triangles) of a coarser mesh whose nodes are this mesh's first n, for figures: the finest one this mesh
        was refined from with at most ``DISPLAY_MAX_TRIANGLES`` triangles; None where this mesh has no more than
        that (draw it whole) or was not refined from such a mesh."""
        return None if self.n_triangles <= DISPLAY_MAX_TRIANGLES else self._display

    def centroids(self) -> np.ndarray:
        """(m, 2) centroid of every triangle."""
        t = self.triangles
        return np.column_stack([(c[t[:, 0]] + c[t[:, 1]] + c[t[:, 2]]) / 3.0
                                for c in (self.points[:, 0], self.points[:, 1])])

    def node_parts(self) -> tuple[int, np.ndarray]:
        """(number of connected parts, the part of every node): triangles sharing a node are connected. Computed once
        (a uniform refinement carries its parent's labels: its parts are the parent's)."""
        if self._parts is None:
            from scipy.sparse.csgraph import connected_components  # late: 0.1 s of import, only for node_parts

            t = self.triangles
            rows = np.concatenate([t[:, 0], t[:, 1], t[:, 2]])
            cols = np.concatenate([t[:, 1], t[:, 2], t[:, 0]])
            graph = sp.coo_matrix((np.ones(rows.size, dtype=np.int8), (rows, cols)), shape=(self.n_points,) * 2)
            self._parts = connected_components(graph, directed=False)[1].astype(np.int32)
        return int(self._parts.max(initial=-1)) + 1, self._parts

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(lowest, highest) coordinates (2,) of the points; computed once, per column (a reduction over axis 0 of
        the (n, 2) array took 35 ms per 1 M points)."""
        if self._bounds is None:
            x, y = self.points[:, 0], self.points[:, 1]
            self._bounds = (np.array([x.min(), y.min()]), np.array([x.max(), y.max()]))
        return self._bounds

    def size(self) -> float:
        """Diameter of the bounding box (length scale for geometric tolerances)."""
        lo, hi = self.bounds()
        return float(np.linalg.norm(hi - lo))

    def boundary_nodes(self) -> np.ndarray:
        return np.unique(self.boundary_edges)


def _orient(points: np.ndarray, tris: np.ndarray) -> np.ndarray:
    p = points[tris]
    a2 = ((p[:, 1, 0] - p[:, 0, 0]) * (p[:, 2, 1] - p[:, 0, 1]) - (p[:, 2, 0] - p[:, 0, 0]) * (p[:, 1, 1] - p[:, 0, 1]))
    tris = tris.copy()
    neg = a2 < 0
    tris[neg, 1], tris[neg, 2] = tris[neg, 2].copy(), tris[neg, 1].copy()
    return tris


def triangle_edges(triangles: np.ndarray) -> np.ndarray:
    """The three edges of every triangle as sorted node pairs (3 m, 2), int64; shared edges appear once per triangle."""
    e = np.concatenate([triangles[:, [0, 1]], triangles[:, [1, 2]], triangles[:, [2, 0]]])
    return np.sort(e, axis=1).astype(np.int64)


def boundary_edges_of(triangles: np.ndarray) -> np.ndarray:
    """Edges that belong to exactly one triangle (sorted node pairs), vectorized."""
    key = triangle_edges(triangles)
    n = int(triangles.max()) + 1 if len(triangles) else 0
    code = key[:, 0] * n + key[:, 1]
    uniq, counts = np.unique(code, return_counts=True)
    once = uniq[counts == 1]
    return np.stack([once // n, once % n], axis=1).astype(np.int32)


def _tag_edges_by_side(points, edges, sides: dict) -> np.ndarray:
    """Name each boundary edge by the first side predicate (callable on edge midpoints) it meets."""
    mid = points[edges].mean(axis=1)
    tags = np.full(len(edges), "boundary", dtype=object)
    for name, pred in sides.items():
        sel = (tags == "boundary") & pred(mid[:, 0], mid[:, 1])
        tags[sel] = name
    return tags.astype(str)


def rectangle(nx: int, ny: int, x: tuple[float, float] = (0.0, 1.0), y: tuple[float, float] = (0.0, 1.0)) -> Mesh:
    """Structured triangulation of a rectangle: nx * ny cells, each split by its (/) diagonal."""
    if nx < 1 or ny < 1:
        raise CaseError.invalid("mesh.nx/ny", (nx, ny), "integers >= 1")
    xs = np.linspace(x[0], x[1], nx + 1)
    ys = np.linspace(y[0], y[1], ny + 1)
    X, Y = np.meshgrid(xs, ys)
    points = np.column_stack([X.ravel(), Y.ravel()])
    i, j = np.meshgrid(np.arange(nx), np.arange(ny))
    n0 = (j * (nx + 1) + i).ravel()
    n1, n2, n3 = n0 + 1, n0 + nx + 2, n0 + nx + 1
    tris = np.concatenate([np.column_stack([n0, n1, n2]), np.column_stack([n0, n2, n3])]).astype(np.int32)
    edges, tags = _rectangle_boundary(nx, ny)
    # the node grid (row-major, x fastest) that geometric multigrid coarsens; the longest edge: a cell's diagonal
    return Mesh(points, tris, edges, tags, source=f"rectangle {nx}x{ny}", info={"grid": (nx, ny)},
                _h_max=float(np.hypot((x[1] - x[0]) / nx, (y[1] - y[0]) / ny)))


def _rectangle_boundary(nx: int, ny: int) -> tuple[np.ndarray, np.ndarray]:
    """The boundary edges of ``rectangle(nx, ny)`` (sorted node pairs, in the order ``boundary_edges_of`` gives:
    by node pair) and their tags, from the node numbering alone (no pass over the triangles). A corner edge's
    tag: the first side it lies on in left, right, bottom, top (as ``_tag_edges_by_side`` names them)."""
    w = nx + 1
    i, j = np.arange(nx, dtype=np.int64), np.arange(ny, dtype=np.int64)
    sides = [("left", j * w, (j + 1) * w), ("right", j * w + nx, (j + 1) * w + nx),
             ("bottom", i, i + 1), ("top", ny * w + i, ny * w + i + 1)]
    a = np.concatenate([s[1] for s in sides])
    b = np.concatenate([s[2] for s in sides])
    tags = np.concatenate([np.full(s[1].size, s[0]) for s in sides])
    order = np.argsort(a * (w * (ny + 1)) + b, kind="stable")
    return np.stack([a[order], b[order]], axis=1).astype(np.int32), tags[order].astype(str)


COOK_CORNERS = ((0.0, 0.0), (48.0, 44.0), (48.0, 60.0), (0.0, 44.0))


def cook_membrane(n: int) -> Mesh:
    """Cook's tapered panel, corners (0,0), (48,44), (48,60), (0,44): an n x n grid mapped bilinearly.

    Tags: left (x = 0, clamped), right (x = 48, loaded), bottom, top.
    """
    m = rectangle(n, n)
    s, t = m.points[:, 0], m.points[:, 1]
    x = 48.0 * s
    y_bottom, y_top = 44.0 * s, 44.0 + 16.0 * s
    m.points = np.column_stack([x, y_bottom + t * (y_top - y_bottom)])
    m._h_max = m._bounds = m._parts = m._display = None          # the rectangle's no longer hold
    m.source = f"cook_membrane {n}x{n}"
    return m


def refine_uniform(mesh: Mesh) -> Mesh:
    """Split every triangle into four at its edge midpoints; tags and regions carry over."""
    tris = mesh.triangles
    n = mesh.n_points
    e = np.concatenate([tris[:, [0, 1]], tris[:, [1, 2]], tris[:, [2, 0]]])
    key = np.sort(e, axis=1).astype(np.int64)
    code = key[:, 0] * n + key[:, 1]
    uniq, inv = np.unique(code, return_inverse=True)
    a, b = uniq // n, uniq % n
    mids = 0.5 * (mesh.points[a] + mesh.points[b])
    points = np.vstack([mesh.points, mids])
    m = len(tris)
    m01, m12, m20 = (inv[:m] + n), (inv[m:2 * m] + n), (inv[2 * m:] + n)
    v0, v1, v2 = tris[:, 0], tris[:, 1], tris[:, 2]
    new = np.concatenate([np.column_stack([v0, m01, m20]), np.column_stack([m01, v1, m12]),
                          np.column_stack([m20, m12, v2]), np.column_stack([m01, m12, m20])]).astype(np.int32)
    be = np.sort(mesh.boundary_edges, axis=1).astype(np.int64)
    mid_of = n + np.searchsorted(uniq, be[:, 0] * n + be[:, 1])
    edges = np.concatenate([np.column_stack([be[:, 0], mid_of]), np.column_stack([mid_of, be[:, 1]])]).astype(np.int32)
    tags = np.concatenate([mesh.edge_tags, mesh.edge_tags])
    regions = None if mesh.cell_regions is None else np.tile(mesh.cell_regions, 4)
    info = {k: v for k, v in mesh.info.items() if k != "grid"}     # new nodes are not numbered on a grid
    fine = Mesh(points, new, edges, tags, regions, source=mesh.source + " +refined", info=info)
    # every edge of the four children is half an edge of the parent (a midline is half the side it parallels), so
    # h_max halves; a midpoint lies in its edge's part. Both from the parent, 4x smaller than the refined mesh.
    fine._h_max = 0.5 * mesh.h_max()
    if mesh._parts is not None:
        fine._parts = np.concatenate([mesh._parts, mesh._parts[a]])
    fine._display = (mesh.n_points, mesh.triangles) if mesh.n_triangles <= DISPLAY_MAX_TRIANGLES else mesh._display
    return fine


#: meshio's names of higher-order cells a 2D gmsh file may hold, with what they are (gmsh element type)
SECOND_ORDER = {"line3": "3-node lines, gmsh type 8", "triangle6": "6-node triangles, gmsh type 9",
                "quad9": "9-node quadrangles, gmsh type 10", "quad8": "8-node quadrangles, gmsh type 16",
                "triangle10": "10-node triangles, gmsh type 21", "line4": "4-node lines, gmsh type 26",
                "triangle15": "15-node triangles, gmsh type 23", "line5": "5-node lines, gmsh type 27"}
#: cells the element-generic path (hpcsolve.fem.discrete.simplex_io) reads: a file with them is not a P1 triangle mesh
GENERIC_CELLS = ("tetra", "tetra10", "triangle6")


class GenericCells(CaseError):
    """A mesh file of tetrahedra or quadratic triangles: the case builder reads it on the element-generic path
    (``problem.build_mesh``); anywhere else it is the CaseError it derives from."""


#: meshio reads gmsh node and element ids into 32-bit integers
_INT32_OVERFLOW = re.compile(r"integer (-?\d+) out of bounds for int32")


#: largest node id of an ASCII gmsh file: meshio indexes nodes through an array of (largest id + 1) entries (int32 in
#: gmsh 2, int64 in gmsh 4: a gmsh 4 file with node id 3e9 ended the process for memory)
NODE_ID_FLOOR = 2**24
NODE_IDS_PER_NODE = 16
_NODE_ID_LINE = {2: re.compile(rb"(?m)^[ \t]*(\d{8,})[ \t]"), 4: re.compile(rb"(?m)^[ \t]*(\d{8,})[ \t]*\r?$")}


def _refuse_sparse_node_ids(path: Path, nodes: int, field_name: str) -> None:
    """Refuse an ASCII gmsh file whose largest node id is beyond 2^31 - 1, or beyond max(NODE_ID_FLOOR,
    NODE_IDS_PER_NODE x its node count) (the index meshio builds would take more memory than the mesh), naming the
    id. Binary files are left to meshio."""
    limit = min(2**31 - 1, max(NODE_ID_FLOOR, NODE_IDS_PER_NODE * nodes))
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            fmt = re.search(rb"\$MeshFormat\r?\n\s*(\d)[^\s]*\s+(\d)", m)
            start, end = m.find(b"$Nodes"), m.find(b"$EndNodes")
            if fmt is None or fmt.group(2) != b"0" or start < 0 or end < start:
                return
            pattern = _NODE_ID_LINE[4 if fmt.group(1) == b"4" else 2]
            start = m.find(b"\n", start + 1)              # past the count line's start: its own number is no id
            largest = max((int(g) for g in pattern.findall(m, start, end)), default=0)
            if largest > limit:
                why = f"it has node id {largest:,}, beyond 2^31 - 1" if largest > 2**31 - 1 else (
                    f"it has node id {largest:,} for {nodes:,} nodes: meshio would index them through an array of "
                    f"{largest + 1:,} entries")
                raise CaseError.invalid(field_name, clip(str(path)), f"node ids from 1 to {limit:,} (at most "
                                        f"max({NODE_ID_FLOOR:,}, {NODE_IDS_PER_NODE} x the node count) and 2^31 - 1)",
                                        why=why + "; renumber its nodes consecutively from 1")


def read_meshio(path: Path, field_name: str, allowed: str):
    """The meshio mesh of a checked regular file (size, gmsh header and node ids first): meshio prints its readers'
    complaints and calls sys.exit when none accepts the file; its output is kept out of the terminal and its exit
    becomes one CaseError naming ``field_name`` (``allowed``: what the caller reads). Also the element-generic
    reader's (``simplex_io``)."""
    import meshio  # late: 0.04 s of import, only for a mesh file

    regular_file(path, field_name, allowed, max_bytes=MESH_FILE_MAX_BYTES)   # no pipe or device is opened
    if path.suffix.lower() == ".msh":
        counts = gmsh_counts(path, field_name, allowed)                       # header and counts first
        _refuse_sparse_node_ids(path, counts.get("nodes", 0), field_name)
    said = io.StringIO()
    try:
        with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
            return meshio.read(path)
    except (Exception, SystemExit) as exc:
        big = _INT32_OVERFLOW.search(str(exc)) if isinstance(exc, OverflowError) else None
        if big:
            raise CaseError.invalid(field_name, clip(str(path)), "node and element ids from 1 to 2^31 - 1 = "
                                    f"{2**31 - 1} (meshio reads gmsh ids as 32-bit integers)",
                                    why=f"it has the id {clip(big.group(1), 40)}, beyond 2^31 - 1; renumber its nodes "
                                        "and elements consecutively from 1") from None
        complaint = " ".join(said.getvalue().split()) or "no meshio reader accepts it"
        what = f"{type(exc).__name__}: {exc}" if not isinstance(exc, SystemExit) else complaint
        raise CaseError.invalid(field_name, clip(str(path)), allowed, why=f"cannot read it ({clip(what)})") from None


def read_mesh(path: str | Path, field_name: str = "mesh.path") -> Mesh:
    """Any 2D triangle mesh meshio reads (gmsh .msh at least). Line cells with physical groups tag the
    boundary; triangle physical groups name regions."""
    path = Path(path)
    allowed = "a mesh file meshio can read (2D triangles, e.g. gmsh .msh); relative paths: to the case file"
    mm = read_meshio(path, field_name, allowed)
    return converted(lambda: _mesh_from_meshio(mm, path, field_name), path, field_name, allowed, "a 2D triangle mesh")


def converted(convert, path: Path, field_name: str, allowed: str, kind: str):
    """``convert()`` (a meshio mesh to the solver's), its CaseErrors as they are and the errors of cell data of
    another shape as one CaseError naming ``field_name``: the file's cells or tags are not ``kind``."""
    try:
        return convert()
    except CaseError:
        raise
    except (ValueError, TypeError, IndexError, KeyError, OverflowError) as exc:  # cell data of another shape
        raise CaseError.invalid(field_name, clip(str(path)), allowed,
                                why=f"its cells or tags are not {kind} ({type(exc).__name__}: "
                                    f"{clip(str(exc), 80)})") from None


def _mesh_from_meshio(mm, path: Path, field_name: str) -> Mesh:
    pts = np.asarray(mm.points, dtype=np.float64)
    if pts.ndim != 2 or pts.shape[1] < 2:
        raise CaseError.invalid(field_name, str(path), "a 2D mesh", why="points are not 2D")
    if pts.shape[1] > 2:
        if np.any(np.abs(pts[:, 2:]) > 1e-12 * max(1.0, np.abs(pts).max())):
            raise CaseError.invalid(field_name, str(path), "a planar mesh (z = 0)", why="the mesh is not flat")
        pts = pts[:, :2].copy()
    names = {}
    for name, (tag, dim) in (mm.field_data or {}).items():
        names[(int(dim), int(tag))] = name
    tri_blocks, line_blocks, other = [], [], []
    phys = mm.cell_data.get("gmsh:physical")
    for i, block in enumerate(mm.cells):
        tags = np.asarray(phys[i]) if phys is not None else None
        if block.type == "triangle":
            tri_blocks.append((block.data, tags))
        elif block.type == "line":
            line_blocks.append((block.data, tags))
        elif block.type != "vertex" and len(block.data):
            other.append(block.type)
    generic = [t for t in dict.fromkeys(other) if t in GENERIC_CELLS]
    if generic:
        raise GenericCells.invalid(field_name, str(path), "a mesh of 3-node triangles for the P1 triangle path",
                                   why=f"the file has {', '.join(generic)} cells: read by the element-generic path")
    _refuse_second_order(other, path, field_name)
    if not tri_blocks:
        raise CaseError.invalid(field_name, str(path), "a mesh with triangle cells", why="no triangles in the file")
    if other:     # solving on the triangles alone would leave out part of the domain, silently
        kinds = ", ".join(dict.fromkeys(other))
        raise CaseError.invalid(field_name, str(path), "a mesh of 3-node triangles (and boundary lines) only",
                                why=f"it also has {kinds} cells, which this P1 solver cannot use (convert them to "
                                    "triangles, e.g. gmsh -2 with Mesh.RecombineAll = 0)")
    tris = np.concatenate([b for b, _ in tri_blocks])
    if not np.issubdtype(tris.dtype, np.integer) or tris.size == 0 or tris.min() < 0 or tris.max() >= len(pts):
        bad = tris[(tris < 0) | (tris >= len(pts))] if np.issubdtype(tris.dtype, np.integer) else tris.ravel()
        raise CaseError.invalid(field_name, clip(str(path)), "triangles whose nodes are in the file",
                                why=f"a triangle refers to node index {clip(str(bad[:1].tolist()), 40)}, "
                                    f"not one of the {len(pts)} nodes")
    tris = tris.astype(np.int32)
    regions = None
    if all(t is not None for _, t in tri_blocks):
        regions = np.concatenate([[names.get((2, int(v)), str(int(v))) for v in t] for _, t in tri_blocks]).astype(str)
    # keep only the points the triangles use
    used = np.unique(tris)
    remap = np.full(len(pts), -1, dtype=np.int64)
    remap[used] = np.arange(len(used))
    pts = pts[used]
    tris = remap[tris].astype(np.int32)
    check_extent(pts, field_name, str(path))
    check_triangles(pts, tris, field_name, str(path))
    check_conforming(pts, tris, field_name, str(path))
    p = pts[tris]
    inverted = int(np.count_nonzero((p[:, 1, 0] - p[:, 0, 0]) * (p[:, 2, 1] - p[:, 0, 1])
                                    - (p[:, 2, 0] - p[:, 0, 0]) * (p[:, 1, 1] - p[:, 0, 1]) < 0))
    tris = _orient(pts, tris)
    edges = boundary_edges_of(tris)
    tags = np.full(len(edges), "boundary", dtype=object)
    if line_blocks:
        ekey = {}
        n = len(pts)
        for data, t in line_blocks:
            if t is None:
                continue
            data = np.asarray(data)
            if data.size and (data.min() < 0 or data.max() >= len(remap)):   # -1: meshio found no such node
                bad = data[(data < 0) | (data >= len(remap))]
                raise CaseError.invalid(field_name, clip(str(path)), "line elements whose nodes are in the file",
                                        why=f"a line element refers to node index {int(bad[0])}, not one of the "
                                            f"{len(remap)} nodes")
            d = remap[data]
            ok = (d >= 0).all(axis=1)
            for (a, b), v in zip(np.sort(d[ok], axis=1), np.asarray(t)[ok]):
                ekey[int(a) * n + int(b)] = names.get((1, int(v)), str(int(v)))
        codes = np.sort(edges, axis=1).astype(np.int64)
        codes = codes[:, 0] * n + codes[:, 1]
        for k, c in enumerate(codes):
            tags[k] = ekey.get(int(c), "boundary")
    return Mesh(pts, tris, edges, tags.astype(str), regions, source=str(path),
                info={"reoriented_triangles": inverted} if inverted else {})


def _refuse_second_order(cell_types: list, path: Path, field_name: str) -> None:
    """A quadratic (or higher) mesh has no 3-node triangles: "no triangles in the file" said nothing of why."""
    higher = [t for t in dict.fromkeys(cell_types) if t in SECOND_ORDER]
    if higher:
        kinds = ", ".join(f"{t} ({SECOND_ORDER[t]})" for t in higher)
        raise CaseError.invalid(field_name, clip(str(path)), "a first-order mesh: 3-node triangles and 2-node lines",
                                why=f"second-order (and higher) elements are not supported yet: the file has {kinds} "
                                    "cells; mesh with Mesh.ElementOrder = 1 (gmsh -2 -order 1)")


def check_conforming(points: np.ndarray, tris: np.ndarray, field_name: str, where: str) -> None:
    """Refuse a mesh file that does not tile its domain once: coincident nodes (a crack: the two sides are not
    connected), a triangle listed twice, or an edge shared by more than two triangles (overlapping triangles).
    Each would be assembled as given and solved to a wrong answer without a sign of it."""
    from scipy.spatial import cKDTree  # late: 0.1 s of import, only for a mesh file's check

    span = float(np.ptp(points, axis=0).max()) if len(points) else 0.0
    tree = cKDTree(points) if span > 0 else None
    pairs = tree.query_pairs(r=1e-12 * span, output_type="ndarray") if tree is not None else np.zeros((0, 2))
    if len(pairs):
        a, b = (int(v) for v in pairs[0])
        raise CaseError.invalid(field_name, where, "a conforming mesh: one node per position",
                                why=f"{len(pairs)} pair(s) of coincident nodes (unmerged duplicates leave a crack in "
                                    f"the mesh), first: nodes at ({points[a, 0]:g}, {points[a, 1]:g}); merge them "
                                    "(e.g. gmsh Coherence)")
    same = np.unique(np.sort(tris, axis=1), axis=0, return_counts=True)[1]
    if (same > 1).any():
        raise CaseError.invalid(field_name, where, "a conforming mesh: each triangle once",
                                why=f"{int((same > 1).sum())} triangle(s) listed more than once")
    shared = np.unique(triangle_edges(tris), axis=0, return_counts=True)[1]
    if (shared > 2).any():
        raise CaseError.invalid(field_name, where, "a conforming mesh: every edge in one or two triangles",
                                why=f"{int((shared > 2).sum())} edge(s) shared by three or more triangles "
                                    "(overlapping triangles)")
    # the triangles around a node fill at most a full turn: more means some of them overlap
    p = points[tris]
    turn = np.zeros(len(points))
    for k in range(3):
        u, v = p[:, (k + 1) % 3] - p[:, k], p[:, (k + 2) % 3] - p[:, k]
        cross = np.abs(u[:, 0] * v[:, 1] - u[:, 1] * v[:, 0])
        np.add.at(turn, tris[:, k], np.arctan2(cross, (u * v).sum(axis=1)))
    over = np.flatnonzero(turn > 2 * np.pi * (1 + 1e-9))
    if over.size:
        a = int(over[0])
        raise CaseError.invalid(field_name, where, "a conforming mesh: triangles that do not overlap",
                                why=f"at {over.size} node(s) the triangles around it cover more than a full turn "
                                    f"(overlapping triangles), first: the node at ({points[a, 0]:g}, {points[a, 1]:g})")
    _refuse_hanging_nodes(points, tris, tree, field_name, where)   # after the overlaps, which also put nodes on edges


#: node coordinates of a mesh file: within +-MAX_EXTENT, spanning at least MIN_EXTENT and at least
#: MIN_EXTENT_RATIO of their magnitude (squared lengths and areas stay finite, normal and resolved in float64)
MAX_EXTENT = 1e100
MIN_EXTENT = 1e-100
MIN_EXTENT_RATIO = 1e-9


def check_extent(points: np.ndarray, field_name: str, where: str) -> None:
    """Refuse node coordinates beyond the documented extent: beyond +-1e100 or spanning more than 1e100 (squared
    lengths overflow), spanning less than 1e-100 (areas underflow), or less than 1e-9 of their magnitude (an
    offset that leaves the triangles unresolved in float64). Non-finite coordinates are left to check_triangles."""
    if not len(points) or not np.all(np.isfinite(points)):
        return
    with np.errstate(over="ignore"):                       # a span beyond the float range is inf: refused
        extent = float(np.hypot(*np.ptp(points, axis=0)[:2]))
    magnitude = float(np.abs(points).max())
    if not (magnitude <= MAX_EXTENT and MIN_EXTENT <= extent <= MAX_EXTENT and extent >= MIN_EXTENT_RATIO * magnitude):
        raise CaseError.invalid(field_name, where, f"node coordinates within +-{MAX_EXTENT:g}, an extent from "
                                                   f"{MIN_EXTENT:g} to {MAX_EXTENT:g} and at least {MIN_EXTENT_RATIO:g} "
                                                   "of the coordinates' magnitude (rescale or shift the mesh)",
                                why=f"the mesh has extent {extent:g} at coordinates up to {magnitude:g}")


def _refuse_hanging_nodes(points: np.ndarray, tris: np.ndarray, tree, field_name: str, where: str) -> None:
    """Refuse a node inside an edge used by one triangle (a hanging node, T-junction): the long edge on one side
    and its two halves on the other are all "boundary" edges, so the two sides are not coupled there. A node
    inside a true boundary edge is as wrong (an overlap). Only the nodes within half an edge length of each
    boundary edge's midpoint are looked at: O(n log n)."""
    edges = boundary_edges_of(tris)
    if tree is None or not len(edges):
        return
    a, b = points[edges[:, 0]], points[edges[:, 1]]
    d = b - a
    length = np.hypot(d[:, 0], d[:, 1])
    near = tree.query_ball_point(0.5 * (a + b), r=0.5 * length * (1 + 1e-9), return_sorted=False)
    counts = np.fromiter((len(v) for v in near), dtype=np.int64, count=len(near))
    if not counts.sum():
        return
    e = np.repeat(np.arange(len(edges)), counts)
    node = np.concatenate([np.asarray(v, dtype=np.int64) for v in near])
    rel = points[node] - a[e]
    along = (rel * d[e]).sum(axis=1) / length[e] ** 2
    off = np.abs(d[e, 0] * rel[:, 1] - d[e, 1] * rel[:, 0]) / length[e]
    inside = ((node != edges[e, 0]) & (node != edges[e, 1]) & (along > 0) & (along < 1)
              & (off <= 1e-9 * length[e]))
    if inside.any():
        k = int(np.flatnonzero(inside)[0])
        (px, py), (ax, ay), (bx, by) = points[node[k]], a[e[k]], b[e[k]]
        raise CaseError.invalid(field_name, where, "a conforming triangulation: neighbouring triangles share whole "
                                                   "edges, no node inside another triangle's edge",
                                why=f"{int(np.unique(node[inside]).size)} hanging node(s) (T-junctions), first: the "
                                    f"node at ({px:g}, {py:g}) lies inside the edge from ({ax:g}, {ay:g}) to ({bx:g}, "
                                    f"{by:g}) without being one of its ends; split that edge's triangle at the node "
                                    "or remesh conformingly (e.g. gmsh Coherence)")


def check_triangles(points: np.ndarray, tris: np.ndarray, field_name: str, where: str) -> None:
    """Refuse triangles that are not triangles: repeated nodes, or (near) zero area."""
    if not np.all(np.isfinite(points)):
        raise CaseError.invalid(field_name, where, "finite node coordinates", why="the mesh has NaN/Inf coordinates")
    repeated = (tris[:, 0] == tris[:, 1]) | (tris[:, 1] == tris[:, 2]) | (tris[:, 0] == tris[:, 2])
    p = points[tris]
    a2 = np.abs((p[:, 1, 0] - p[:, 0, 0]) * (p[:, 2, 1] - p[:, 0, 1]) - (p[:, 2, 0] - p[:, 0, 0]) * (p[:, 1, 1] - p[:, 0, 1]))
    e = np.stack([p[:, 1] - p[:, 0], p[:, 2] - p[:, 1], p[:, 0] - p[:, 2]], axis=1)
    longest2 = (e ** 2).sum(-1).max(axis=1)
    degenerate = repeated | (a2 <= 1e-12 * longest2)   # area relative to the squared longest edge
    if degenerate.any():
        k = np.flatnonzero(degenerate)
        raise CaseError.invalid(field_name, where, "a mesh of non-degenerate triangles",
                                why=f"{k.size} degenerate triangle(s) (repeated nodes or zero area), first: "
                                    f"triangle {int(k[0])} with nodes {tris[k[0]].tolist()}")
