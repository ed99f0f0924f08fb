"""Simplex mesh generators and DOF maps (hpcsolve.fem.discrete.simplex_gen): the box's counts, orientation,
conformity and tagged boundary; the rectangle and a converted Mesh; P1 / P2 DOF counts and midpoints."""

from __future__ import annotations

import numpy as np
import pytest

from hpcsolve.core.errors import CaseError
from hpcsolve.fem.discrete import mesh as mesh2d
from hpcsolve.fem.discrete.fe_assembly import facet_measures
from hpcsolve.fem.discrete.simplex import EDGES, FACETS
from hpcsolve.fem.discrete.simplex_gen import box, dofmap, from_mesh, rectangle

SIDE_AREA = {"left": 2.0 * 3.0, "right": 2.0 * 3.0, "bottom": 1.5 * 3.0, "top": 1.5 * 3.0, "front": 1.5 * 2.0,
             "back": 1.5 * 2.0}


@pytest.fixture(scope="module")
def brick():
    """3 x 4 x 5 cells on [0, 1.5] x [-1, 1] x [0, 3]."""
    return box(3, 4, 5, x=(0.0, 1.5), y=(-1.0, 1.0), z=(0.0, 3.0))


def sorted_rows(a: np.ndarray) -> np.ndarray:
    return np.sort(a, axis=1)


def test_box_counts_volumes_and_grid(brick):
    assert brick.n_cells == 6 * 3 * 4 * 5 and brick.n_points == 4 * 5 * 6
    assert brick.cells.dtype == np.int32 and brick.facets.dtype == np.int32
    assert brick.grid == (3, 4, 5) and brick.dim == 3
    vol = brick.volumes()
    assert vol.min() > 0
    assert vol.sum() == pytest.approx(1.5 * 2.0 * 3.0, rel=1e-13)
    assert np.allclose(vol, vol[0])                            # Kuhn tetrahedra of one cell are equal in volume
    lo, hi = brick.bounds()
    assert lo.tolist() == [0.0, -1.0, 0.0] and hi.tolist() == [1.5, 1.0, 3.0]


def test_box_is_conforming_and_its_boundary_is_the_unshared_faces(brick):
    faces = sorted_rows(brick.cells[:, FACETS[3]].reshape(-1, 3))
    unique, counts = np.unique(faces, axis=0, return_counts=True)
    assert set(counts.tolist()) == {1, 2}                       # an interior face is shared by exactly 2 cells
    n_boundary = 2 * 2 * (4 * 5 + 3 * 5 + 3 * 4)
    assert counts.tolist().count(1) == n_boundary == len(brick.facets)
    boundary = unique[counts == 1]
    assert np.array_equal(boundary, np.unique(sorted_rows(brick.facets), axis=0))


def test_box_facets_are_tagged_by_side_with_outward_normals(brick):
    area = facet_measures(brick)
    centre = brick.points.mean(axis=0)
    p = brick.points[brick.facets]
    normal = np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0])
    assert np.all((normal * (p.mean(axis=1) - centre)).sum(axis=1) > 0)
    for tag, expected in SIDE_AREA.items():
        assert area[brick.facet_tags == tag].sum() == pytest.approx(expected, rel=1e-13), tag
    assert area.sum() == pytest.approx(sum(SIDE_AREA.values()), rel=1e-13)
    assert brick.tag_names == sorted(SIDE_AREA)
    xs = brick.points[brick.facets[brick.facet_tags == "right"]][..., 0]
    assert np.all(xs == 1.5)


def test_box_refuses_non_positive_counts():
    with pytest.raises(CaseError, match="integers >= 1"):
        box(0, 2, 2)


def test_p2_dofmap_of_the_box_counts_edges_and_places_midpoints(brick):
    nx, ny, nz = 3, 4, 5
    dm = dofmap(brick, 2)
    # Kuhn edges: the grid's axis edges, one diagonal per face of the grid, one main diagonal per cell
    axis = nx * (ny + 1) * (nz + 1) + (nx + 1) * ny * (nz + 1) + (nx + 1) * (ny + 1) * nz
    faces = nx * ny * (nz + 1) + nx * (ny + 1) * nz + (nx + 1) * ny * nz
    assert dm.n_dofs == brick.n_points + axis + faces + nx * ny * nz
    assert dm.cell_dofs.shape == (brick.n_cells, 10)
    p = dm.points[dm.cell_dofs]
    for j, (a, b) in enumerate(EDGES[3]):
        assert np.allclose(p[:, 4 + j], 0.5 * (p[:, a] + p[:, b]), atol=1e-15)
    assert dm.facet_dofs.shape == (len(brick.facets), 6)
    q = dm.points[dm.facet_dofs]
    for j, (a, b) in enumerate([(0, 1), (1, 2), (2, 0)]):
        assert np.allclose(q[:, 3 + j], 0.5 * (q[:, a] + q[:, b]), atol=1e-15)
    assert np.array_equal(dm.facet_dofs[:, :3], brick.facets)
    p1 = dofmap(brick, 1)
    assert p1.n_dofs == brick.n_points and np.array_equal(p1.cell_dofs, brick.cells)


def test_rectangle_and_p2_dofmap_in_2d():
    sm = rectangle(4, 3, x=(0.0, 2.0))
    assert sm.n_cells == 24 and sm.n_points == 20 and sm.grid == (4, 3)
    assert sm.volumes().min() > 0 and sm.volumes().sum() == pytest.approx(2.0)
    length = facet_measures(sm)
    assert {t: length[sm.facet_tags == t].sum() for t in sm.tag_names} == pytest.approx(
        {"bottom": 2.0, "left": 1.0, "right": 1.0, "top": 2.0})
    t = sm.points[sm.facets[:, 1]] - sm.points[sm.facets[:, 0]]
    outward = np.stack([t[:, 1], -t[:, 0]], axis=1)
    assert np.all((outward * (sm.points[sm.facets].mean(axis=1) - [1.0, 0.5])).sum(axis=1) > 0)
    dm = dofmap(sm, 2)
    assert dm.n_dofs == 20 + (4 * 4 + 5 * 3 + 4 * 3)            # vertices + horizontal, vertical, diagonal edges
    assert dm.facet_dofs.shape == (len(sm.facets), 3)
    q = dm.points[dm.facet_dofs]
    assert np.allclose(q[:, 2], 0.5 * (q[:, 0] + q[:, 1]))


def test_from_mesh_keeps_a_mesh_s_arrays_and_tags():
    m = mesh2d.cook_membrane(3)
    sm = from_mesh(m)
    assert np.shares_memory(sm.points, m.points) and sm.n_cells == m.n_triangles
    assert sorted(sm.tag_names) == sorted(set(m.edge_tags.tolist()))
    assert sm.volumes().min() > 0 and sm.volumes().sum() == pytest.approx(m.areas().sum())
    assert dofmap(sm, 2).n_dofs == m.n_points + (len(m.boundary_edges) + 3 * m.n_triangles) // 2


def test_dofmap_refuses_degree_3():
    with pytest.raises(CaseError, match="1 or 2"):
        dofmap(rectangle(1, 1), 3)
