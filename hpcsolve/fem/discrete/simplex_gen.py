"""Simplex meshes from generators (a structured box of tetrahedra, a structured rectangle of triangles, any 2D
:class:`~hpcsolve.fem.discrete.mesh.Mesh`) and the DOF maps of the P1 and P2 elements on them.

``box`` splits every hexahedral cell into the 6 tetrahedra of the Kuhn (Freudenthal) triangulation: one per order in
which a path from the cell's lowest corner to its highest corner takes the three axis steps. The split is the same in
every cell, so every face of a cell is split along the diagonal through its lowest and highest corners, the same seen
from both neighbours: the mesh is conforming. Everything is built from index arithmetic on the node grid, with no
loop over cells.
"""

from __future__ import annotations

import itertools

import numpy as np

from hpcsolve.core.errors import CaseError
from hpcsolve.fem.discrete import mesh as mesh2d
from hpcsolve.fem.discrete.simplex import EDGES, DofMap, SimplexMesh

#: the edges of a boundary facet in the local order of its P2 facet DOFs (line3: the segment; triangle6: 01, 12, 20)
FACET_EDGES = {2: np.array([[0, 1]]), 3: np.array([[0, 1], [1, 2], [2, 0]])}
#: outward unit normal of each side a structured generator tags
SIDES = {"left": (0, -1.0), "right": (0, 1.0), "bottom": (1, -1.0), "top": (1, 1.0), "front": (2, -1.0),
         "back": (2, 1.0)}


def _check_counts(**counts) -> None:
    bad = {k: v for k, v in counts.items() if int(v) != v or v < 1}
    if bad:
        raise CaseError.invalid("mesh." + "/".join(bad), tuple(bad.values()), "integers >= 1")


def _orient_outward(points: np.ndarray, facets: np.ndarray, tags: np.ndarray) -> np.ndarray:
    """Reorder the vertices of facets on the sides named in SIDES so that their normal (2D: the tangent turned
    clockwise; 3D: (p1 - p0) x (p2 - p0)) points out of the domain."""
    p = points[facets]
    if points.shape[1] == 2:
        t = p[:, 1] - p[:, 0]
        normal = np.stack([t[:, 1], -t[:, 0]], axis=1)
    else:
        normal = np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0])
    outward = np.zeros_like(normal)
    for name, (axis, sign) in SIDES.items():
        if axis < points.shape[1]:
            outward[tags == name, axis] = sign
    flip = (normal * outward).sum(axis=1) < 0
    out = facets.copy()
    out[flip, 0], out[flip, 1] = facets[flip, 1], facets[flip, 0]
    return out


def _kuhn_offsets(stride: tuple[int, int, int]) -> np.ndarray:
    """(6, 4) node offsets from a cell's lowest corner of its 6 tetrahedra, each positively oriented: the path's
    Jacobian has the sign of its axis permutation, so an odd one swaps its last two vertices."""
    out = []
    for perm in itertools.permutations(range(3)):
        corner = np.zeros(3, dtype=np.int64)
        path = [0]
        for axis in perm:
            corner[axis] = 1
            path.append(int(corner @ np.asarray(stride)))
        odd = sum(perm[i] > perm[j] for i in range(3) for j in range(i + 1, 3)) % 2
        if odd:
            path[2], path[3] = path[3], path[2]
        out.append(path)
    return np.array(out, dtype=np.int64)


def _box_facets(nx: int, ny: int, nz: int) -> tuple[np.ndarray, np.ndarray]:
    """The boundary triangles of ``box``: every boundary quad split along its lowest-to-highest diagonal (as the
    Kuhn split of the cell behind it), with the tag of its side."""
    shape = (nx + 1, ny + 1, nz + 1)
    stride = (1, nx + 1, (nx + 1) * (ny + 1))
    tris, tags = [], []
    for name, (axis, sign) in SIDES.items():
        u, v = [a for a in range(3) if a != axis]
        ranges = [np.arange(shape[a] - 1) for a in range(3)]
        ranges[axis] = np.array([0 if sign < 0 else shape[axis] - 1])
        idx = np.stack(np.meshgrid(*ranges, indexing="ij"), axis=-1).reshape(-1, 3)
        a = idx @ np.asarray(stride)
        b, c, d = a + stride[u], a + stride[u] + stride[v], a + stride[v]
        tris += [np.stack([a, b, c], axis=1), np.stack([a, c, d], axis=1)]
        tags += [np.full(2 * len(a), name)]
    return np.concatenate(tris), np.concatenate(tags)


def box(nx: int, ny: int, nz: int, x: tuple[float, float] = (0.0, 1.0), y: tuple[float, float] = (0.0, 1.0),
        z: tuple[float, float] = (0.0, 1.0)) -> SimplexMesh:
    """Structured tetrahedral mesh of a box: nx * ny * nz hexahedral cells, each split into 6 tetrahedra (Kuhn);
    nodes numbered x fastest, then y, then z; boundary triangles tagged left / right (x min / max), bottom / top
    (y), front / back (z), oriented with their normal outward."""
    _check_counts(nx=nx, ny=ny, nz=nz)
    nx, ny, nz = int(nx), int(ny), int(nz)
    n_nodes = (nx + 1) * (ny + 1) * (nz + 1)
    if 6 * nx * ny * nz >= 2**31 or n_nodes >= 2**31:
        raise CaseError.invalid("mesh.nx/ny/nz", (nx, ny, nz), "fewer than 2^31 cells and nodes (int32 indices)")
    xs, ys, zs = np.linspace(*x, nx + 1), np.linspace(*y, ny + 1), np.linspace(*z, nz + 1)
    Z, Y, X = np.meshgrid(zs, ys, xs, indexing="ij")
    points = np.column_stack([X.ravel(), Y.ravel(), Z.ravel()])
    stride = (1, nx + 1, (nx + 1) * (ny + 1))
    k, j, i = np.meshgrid(np.arange(nz, dtype=np.int32), np.arange(ny, dtype=np.int32),
                          np.arange(nx, dtype=np.int32), indexing="ij")
    lowest = (i + stride[1] * j + stride[2] * k).ravel()
    cells = (lowest[:, None, None] + _kuhn_offsets(stride).astype(np.int32)[None]).reshape(-1, 4)
    facets, tags = _box_facets(nx, ny, nz)
    facets = _orient_outward(points, facets, tags).astype(np.int32)
    return SimplexMesh(points, cells, facets, tags.astype(str), grid=(nx, ny, nz),
                       source=f"box {nx}x{ny}x{nz}", info={"grid": (nx, ny, nz)})


def from_mesh(mesh: mesh2d.Mesh) -> SimplexMesh:
    """A 2D :class:`Mesh` as a SimplexMesh (its arrays shared, not copied): triangles are the cells, boundary edges
    the facets (in the vertex order the Mesh gives them), edge tags the facet tags, a structured mesh's grid kept."""
    grid = mesh.info.get("grid")
    return SimplexMesh(mesh.points, mesh.triangles.astype(np.int32, copy=False),
                       mesh.boundary_edges.astype(np.int32, copy=False), np.asarray(mesh.edge_tags),
                       cell_regions=mesh.cell_regions, grid=tuple(grid) if grid is not None else None,
                       source=mesh.source, info=dict(mesh.info))


def rectangle(nx: int, ny: int, x: tuple[float, float] = (0.0, 1.0),
              y: tuple[float, float] = (0.0, 1.0)) -> SimplexMesh:
    """Structured triangulation of a rectangle (that of :func:`hpcsolve.fem.discrete.mesh.rectangle`), boundary
    edges tagged left / right / bottom / top and oriented with their normal outward (counter-clockwise)."""
    sm = from_mesh(mesh2d.rectangle(nx, ny, x, y))
    sm.facets = _orient_outward(sm.points, sm.facets, sm.facet_tags).astype(np.int32)
    return sm


def _edge_codes(pairs: np.ndarray, n: int) -> np.ndarray:
    """One int64 per undirected edge: lower vertex * n + higher vertex."""
    pairs = pairs.astype(np.int64)
    return np.minimum(pairs[..., 0], pairs[..., 1]) * n + np.maximum(pairs[..., 0], pairs[..., 1])


def dofmap(mesh: SimplexMesh, degree: int) -> DofMap:
    """DOFs of a scalar P1 (the vertices) or P2 field (the vertices, then one per unique edge at its midpoint,
    numbered in the order of the sorted edge codes), with cell DOFs in the element's local order and facet DOFs
    (the facet's vertices, then its edges in ``FACET_EDGES`` order)."""
    if degree == 1:
        return DofMap(1, mesh.points, mesh.cells, mesh.facets)
    if degree != 2:
        raise CaseError.invalid("degree", degree, "1 or 2")
    d, n, m = mesh.dim, mesh.n_points, mesh.n_cells
    codes = _edge_codes(mesh.cells[:, EDGES[d]], n)                    # (m, edges per cell)
    unique, inverse = np.unique(codes.ravel(), return_inverse=True)
    a, b = unique // n, unique % n
    points = np.vstack([mesh.points, 0.5 * (mesh.points[a] + mesh.points[b])])
    index = np.int32 if n + len(unique) < 2**31 else np.int64
    cell_dofs = np.hstack([mesh.cells, n + inverse.reshape(m, -1)]).astype(index)
    fcodes = _edge_codes(mesh.facets[:, FACET_EDGES[d]], n)
    where = np.minimum(np.searchsorted(unique, fcodes), len(unique) - 1)
    if fcodes.size and not np.array_equal(unique[where], fcodes):
        raise CaseError.invalid("mesh.facets", mesh.source or "mesh", "boundary facets whose edges are cell edges",
                                why="a boundary facet has an edge that no cell has")
    facet_dofs = np.hstack([mesh.facets, n + where]).astype(index)
    return DofMap(2, points, cell_dofs, facet_dofs)
