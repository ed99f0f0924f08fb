"""Simplex meshes of any dimension (triangles in 2D, tetrahedra in 3D) and their finite-element DOF maps.

A :class:`SimplexMesh` is what the element-generic path (P1/P2 triangles, P1/P2 tetrahedra) works on:

- ``points`` (n, d) float64, d = 2 or 3: the mesh vertices;
- ``cells`` (m, d + 1) int32, positively oriented (the Jacobian of the map from the reference simplex has a
  positive determinant);
- ``facets`` (k, d) int32: the boundary facets (edges in 2D, triangles in 3D), each with a tag in ``facet_tags``;
- ``cell_regions`` (m,) str or None: a region name per cell (a file's physical groups);
- ``grid``: for a structured generator, the cell counts per axis (what geometric multigrid needs), else None.

A :class:`DofMap` numbers the DOFs of one scalar field of an element kind on a mesh: for P1 the vertices, for P2
the vertices then one DOF per edge (at its midpoint). Local DOF order follows VTK / meshio (``triangle6``: vertices
0, 1, 2, then edges 01, 12, 20; ``tetra10``: vertices 0-3, then edges 01, 12, 02, 03, 13, 23), so a P2 field is
written to XDMF as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


#: local vertex pairs of the edges of a cell, in VTK / meshio order of the P2 edge DOFs
EDGES = {2: np.array([[0, 1], [1, 2], [2, 0]]),
         3: np.array([[0, 1], [1, 2], [0, 2], [0, 3], [1, 3], [2, 3]])}
#: local vertices of each facet (the facet opposite local vertex i is row i)
FACETS = {2: np.array([[1, 2], [2, 0], [0, 1]]),
          3: np.array([[1, 2, 3], [0, 3, 2], [0, 1, 3], [0, 2, 1]])}
#: the cells of a P2 field drawn in 2D: a triangle6 split at its mid-edge DOFs (local 3: edge 01, 4: 12, 5: 20)
P2_SUBTRIANGLES = np.array([[0, 3, 5], [3, 1, 4], [5, 4, 2], [3, 4, 5]])


@dataclass
class SimplexMesh:
    points: np.ndarray                       # (n, d) float64
    cells: np.ndarray                        # (m, d + 1) int32, positively oriented
    facets: np.ndarray                       # (k, d) int32, boundary facets
    facet_tags: np.ndarray                   # (k,) str
    cell_regions: np.ndarray | None = None   # (m,) str
    grid: tuple | None = None                # structured generator: cells per axis
    source: str = ""
    info: dict = field(default_factory=dict)

    @property
    def dim(self) -> int:
        return int(self.points.shape[1])

    @property
    def n_points(self) -> int:
        return int(self.points.shape[0])

    @property
    def n_cells(self) -> int:
        return int(self.cells.shape[0])

    @property
    def tag_names(self) -> list[str]:
        return sorted(set(np.asarray(self.facet_tags).tolist()))

    def jacobians(self) -> np.ndarray:
        """(m, d, d): column j is vertex j+1 minus vertex 0 of every cell."""
        p = self.points[self.cells]
        return (p[:, 1:, :] - p[:, :1, :]).transpose(0, 2, 1)

    def volumes(self) -> np.ndarray:
        """(m,) signed measure of every cell (area in 2D, volume in 3D); positive for an oriented mesh."""
        fact = 2.0 if self.dim == 2 else 6.0
        return np.linalg.det(self.jacobians()) / fact

    def h_max(self) -> float:
        """Longest cell edge."""
        e = EDGES[self.dim]
        p = self.points
        longest = 0.0
        for a, b in e:
            d = p[self.cells[:, b]] - p[self.cells[:, a]]
            longest = max(longest, float((d * d).sum(axis=1).max(initial=0.0)))
        return float(np.sqrt(longest))

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        return self.points.min(axis=0), self.points.max(axis=0)

    def size(self) -> float:
        lo, hi = self.bounds()
        return float(np.linalg.norm(hi - lo))

    def boundary_nodes(self) -> np.ndarray:
        return np.unique(self.facets)


@dataclass
class DofMap:
    """DOFs of one scalar field: ``points`` (N, d) their coordinates (the mesh's vertices first), ``cell_dofs``
    (m, k) the local-to-global map in the element's local order, ``facet_dofs`` (f, kf) the DOFs on each boundary
    facet (vertices first, then the facet's edge DOFs), ``degree`` 1 or 2."""

    degree: int
    points: np.ndarray
    cell_dofs: np.ndarray
    facet_dofs: np.ndarray

    @property
    def n_dofs(self) -> int:
        return int(self.points.shape[0])


def boundary_facets(cells: np.ndarray, dim: int) -> np.ndarray:
    """The facets (k, dim) that belong to one cell only, vertices in :data:`FACETS` order (outward normals for
    positively oriented cells)."""
    local = cells[:, FACETS[dim]].reshape(-1, dim)
    _, first, count = np.unique(np.sort(local, axis=1), axis=0, return_index=True, return_counts=True)
    return local[first[count == 1]]

