"""Simplex mesh files and results (hpcsolve.fem.discrete.simplex_io): tetrahedral and second-order files read back with
their volumes, facet tags and regions; each malformed mesh refused naming the field; XDMF fields read back by meshio;
a figure that shows something."""

from __future__ import annotations

import itertools

import matplotlib.image
import meshio
import numpy as np
import pytest

from hpcsolve.core.errors import CaseError
from hpcsolve.fem.discrete.simplex import EDGES, DofMap
from hpcsolve.fem.discrete.simplex_io import plot_field_3d, read_simplex_mesh, write_xdmf

FIELD = "mesh.file"
#: physical groups of the cube files: two faces and the volume ({name: [tag, dim]}, as meshio keeps gmsh's)
GROUPS = {"left": np.array([1, 2]), "right": np.array([2, 2]), "solid": np.array([10, 3])}


def _signed(points, cells):
    p = points[cells]
    return np.linalg.det((p[:, 1:] - p[:, :1]).transpose(0, 2, 1)) / (2.0 if cells.shape[1] == 3 else 6.0)


def _oriented(points, cells):
    cells = cells.copy()
    neg = _signed(points, cells) < 0
    cells[neg, 1], cells[neg, 2] = cells[neg, 2].copy(), cells[neg, 1].copy()
    return cells


def cube(n: int):
    """The unit cube, n cells per axis, each cube in the 6 tetrahedra of its 000-111 diagonal, positively oriented."""
    g = np.linspace(0.0, 1.0, n + 1)
    points = np.array([[x, y, z] for z in g for y in g for x in g])
    node = lambda i, j, k: (k * (n + 1) + j) * (n + 1) + i       # noqa: E731
    cells = []
    for i, j, k in itertools.product(range(n), repeat=3):
        for order in itertools.permutations(range(3)):
            c, path = [i, j, k], [node(i, j, k)]
            for axis in order:
                c[axis] += 1
                path.append(node(*c))
            cells.append(path)
    return points, _oriented(points, np.array(cells))


def x_faces(points, cells, dim=3):
    """The boundary facets on x = 0 and x = 1 (facets of the cells whose nodes all lie there)."""
    local = {3: [[1, 2, 3], [0, 3, 2], [0, 1, 3], [0, 2, 1]], 2: [[1, 2], [2, 0], [0, 1]]}[dim]
    facets = np.unique(np.sort(cells[:, local].reshape(-1, dim), axis=1), axis=0)
    x = points[facets][:, :, 0]
    return facets[(x == 0).all(axis=1)], facets[(x == 1).all(axis=1)]


def second_order(points, cells, facet_blocks):
    """(points, cells, facet blocks) with a node at every edge's midpoint, in meshio's order (simplex.EDGES)."""
    dim = cells.shape[1] - 1
    e = np.sort(cells[:, EDGES[dim]].reshape(-1, 2), axis=1)
    uniq, inv = np.unique(e, axis=0, return_inverse=True)
    mid = len(points) + inv.reshape(len(cells), -1)
    points = np.vstack([points, points[uniq].mean(axis=1)])
    lookup = {tuple(k): len(points) - len(uniq) + i for i, k in enumerate(uniq.tolist())}
    face_edges = [[0, 1], [1, 2], [2, 0]] if dim == 3 else [[0, 1]]
    blocks = [np.column_stack([f] + [[lookup[tuple(sorted(r[a] for a in ab))] for r in f.tolist()]
                                     for ab in face_edges]) for f in facet_blocks]
    return points, np.hstack([cells, mid]), blocks


def write_cube(path, n=2, degree=1, fmt="gmsh22", flip=(), move_mid=None):
    points, cells = cube(n)
    left, right = x_faces(points, cells)
    blocks = [left, right]
    if degree == 2:
        points, cells, blocks = second_order(points, cells, blocks)
    for k in flip:      # swap vertices 1 and 2: edges 01 <-> 02 and 13 <-> 23 swap, 12 and 03 stay
        cells[k] = cells[k][[0, 2, 1, 3, 6, 5, 4, 7, 9, 8][:cells.shape[1]]]
    if move_mid is not None:
        points = points.copy()
        points[cells[0, 4]] += move_mid
    face, volume = ("triangle", "tetra") if degree == 1 else ("triangle6", "tetra10")
    phys = [np.full(len(blocks[0]), 1), np.full(len(blocks[1]), 2), np.full(len(cells), 10)]
    mesh = meshio.Mesh(points, [(face, blocks[0]), (face, blocks[1]), (volume, cells)],
                       cell_data={"gmsh:physical": phys, "gmsh:geometrical": phys}, field_data=GROUPS)
    meshio.write(path, mesh, file_format=fmt, **({"binary": False} if fmt.startswith("gmsh") else {}))
    return path


def facet_areas(mesh):
    p = mesh.points[mesh.facets]
    return 0.5 * np.linalg.norm(np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0]), axis=1)


@pytest.mark.parametrize("degree", [1, 2])
@pytest.mark.parametrize("fmt, suffix", [("gmsh22", "msh"), ("vtu", "vtu"), ("xdmf", "xdmf")])
def test_a_cube_file_reads_back_with_volumes_tags_and_regions(tmp_path, degree, fmt, suffix):
    path = write_cube(tmp_path / f"cube.{suffix}", degree=degree, fmt=fmt)
    if fmt == "xdmf" and degree == 2:
        # meshio 5.3 reads no second-order cells in a Mixed XDMF topology (its node counts there lack Triangle_6, type
        # 0x24, and Tetrahedron_10): the reader says it cannot read the file (write_xdmf writes one cell block)
        with pytest.raises(CaseError, match="cannot read it"):
            read_simplex_mesh(path, FIELD)
        return
    mesh, in_file = read_simplex_mesh(path, FIELD)
    assert in_file == degree == mesh.info["degree_in_file"]
    assert (mesh.dim, mesh.n_points, mesh.n_cells, len(mesh.facets)) == (3, 27, 48, 6 * 2 * 4)
    assert mesh.cells.dtype == np.int32 and mesh.facets.shape == (48, 3)
    vol = mesh.volumes()
    assert (vol > 0).all() and vol.sum() == pytest.approx(1.0, rel=1e-14)
    assert "reoriented_cells" not in mesh.info
    # gmsh keeps the group names; a .vtu or .xdmf keeps the tag numbers only
    left, right, solid = ("left", "right", "solid") if fmt == "gmsh22" else ("1", "2", "10")
    assert mesh.tag_names == sorted(["boundary", left, right])
    area = facet_areas(mesh)
    for tag, want in ((left, 1.0), (right, 1.0), ("boundary", 4.0)):
        assert area[mesh.facet_tags == tag].sum() == pytest.approx(want, rel=1e-14)
    assert mesh.cell_regions.tolist() == [solid] * 48
    # boundary facets are ordered with outward normals: on x = 0 they point to -x
    p = mesh.points[mesh.facets[mesh.facet_tags == left]]
    assert (np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0])[:, 0] < 0).all()


def test_a_gmsh_tetra10_in_gmsh_node_order_is_read_straight(tmp_path):
    """gmsh numbers a tetra10's last two mid nodes (3-2), (3-1); meshio swaps them to VTK's (1-3), (2-3). A file in
    gmsh's own order must read as straight-sided (a missed swap would put those nodes off their edges)."""
    v = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype=float)
    gmsh_edges = [(0, 1), (1, 2), (2, 0), (3, 0), (3, 2), (3, 1)]
    pts = np.vstack([v, [v[[a, b]].mean(axis=0) for a, b in gmsh_edges]])
    nodes = "".join(f"{i + 1} {x:g} {y:g} {z:g}\n" for i, (x, y, z) in enumerate(pts))
    text = ("$MeshFormat\n2.2 0 8\n$EndMeshFormat\n$Nodes\n10\n" + nodes + "$EndNodes\n$Elements\n1\n"
            "1 11 2 5 1 1 2 3 4 5 6 7 8 9 10\n$EndElements\n")
    path = tmp_path / "one.msh"
    path.write_text(text)
    mesh, degree = read_simplex_mesh(path, FIELD)
    assert degree == 2 and mesh.n_points == 4 and mesh.volumes()[0] == pytest.approx(1 / 6)
    assert mesh.info["mid_edge_nodes"] == 6 and mesh.cell_regions.tolist() == ["5"]


#: one tetrahedron as gmsh 4.1 writes it (ASCII): a physical surface on its face z = 0, a physical volume
GMSH41 = """$MeshFormat
4.1 0 8
$EndMeshFormat
$PhysicalNames
2
2 1 "bottom"
3 10 "solid"
$EndPhysicalNames
$Entities
0 0 1 1
1 0 0 0 1 1 0 1 1 0
1 0 0 0 1 1 1 1 10 1 1
$EndEntities
$Nodes
1 4 1 4
3 1 0 4
1
2
3
4
0 0 0
1 0 0
0 1 0
0 0 1
$EndNodes
$Elements
2 2 1 2
2 1 2 1
1 1 3 2
3 1 4 1
2 1 2 3 4
$EndElements
"""


def test_a_gmsh41_file_reads_with_its_physical_names(tmp_path):
    path = tmp_path / "one.msh"
    path.write_text(GMSH41)
    mesh, degree = read_simplex_mesh(path, FIELD)
    assert degree == 1 and (mesh.n_points, mesh.n_cells, len(mesh.facets)) == (4, 1, 4)
    assert sorted(mesh.facet_tags.tolist()) == ["bottom", "boundary", "boundary", "boundary"]
    assert (mesh.points[mesh.facets[mesh.facet_tags == "bottom"]][..., 2] == 0).all()
    assert mesh.cell_regions.tolist() == ["solid"] and mesh.volumes()[0] == pytest.approx(1 / 6)


def test_a_triangle6_square_reads_as_2d_p2_with_its_edge_tags(tmp_path):
    g = np.linspace(0.0, 1.0, 3)
    pts = np.array([[x, y] for y in g for x in g])
    tris = _oriented(pts, np.array([[0, 1, 4], [0, 4, 3], [1, 2, 5], [1, 5, 4], [3, 4, 7], [3, 7, 6],
                                    [4, 5, 8], [4, 8, 7]]))
    left, right = x_faces(pts, tris, dim=2)
    pts, tri6, (left, right) = second_order(pts, tris, [left, right])
    pts3 = np.column_stack([pts, np.full(len(pts), 0.25)])            # a constant z: a 2D mesh
    mm = meshio.Mesh(pts3, [("line3", left), ("line3", right), ("triangle6", tri6)],
                     cell_data={"gmsh:physical": [np.full(2, 1), np.full(2, 2), np.full(8, 7)],
                                "gmsh:geometrical": [np.full(2, 1), np.full(2, 2), np.full(8, 7)]},
                     field_data={"inlet": np.array([1, 1]), "outlet": np.array([2, 1]), "plate": np.array([7, 2])})
    meshio.write(tmp_path / "sq.msh", mm, file_format="gmsh22", binary=False)
    mesh, degree = read_simplex_mesh(tmp_path / "sq.msh", FIELD)
    assert degree == 2 and (mesh.dim, mesh.n_points, mesh.n_cells, len(mesh.facets)) == (2, 9, 8, 8)
    assert mesh.volumes().sum() == pytest.approx(1.0) and (mesh.volumes() > 0).all()
    p = mesh.points[mesh.facets]
    length = np.linalg.norm(p[:, 1] - p[:, 0], axis=1)
    assert [length[mesh.facet_tags == t].sum() for t in ("inlet", "outlet", "boundary")] == pytest.approx([1, 1, 2])
    assert set(mesh.cell_regions) == {"plate"}


@pytest.mark.parametrize("degree", [1, 2])
def test_negatively_oriented_cells_are_turned(tmp_path, degree):
    mesh, _ = read_simplex_mesh(write_cube(tmp_path / "f.msh", degree=degree, flip=(0, 5, 17)), FIELD)
    assert mesh.info["reoriented_cells"] == 3 and (mesh.volumes() > 0).all()
    assert mesh.volumes().sum() == pytest.approx(1.0)


def test_unused_nodes_are_dropped_and_the_rest_renumbered(tmp_path):
    points, cells = cube(1)
    points = np.vstack([[[5.0, 5.0, 5.0]], points])                   # node 0 used by no cell
    meshio.write(tmp_path / "u.vtu", meshio.Mesh(points, [("tetra", cells + 1)]))
    mesh, _ = read_simplex_mesh(tmp_path / "u.vtu", FIELD)
    assert mesh.n_points == 8 and mesh.info["unused_nodes"] == 1 and np.array_equal(mesh.points, points[1:])
    assert np.array_equal(mesh.cells, cells) and mesh.tag_names == ["boundary"] and mesh.cell_regions is None


# ------------------------------------------------------------------------------------------------
# refusals: each names the field and says what is wrong


def refused(tmp_path, points, cells, kind="tetra", match=""):
    path = tmp_path / "bad.vtu"
    meshio.write(path, meshio.Mesh(np.asarray(points, dtype=float), [(kind, np.asarray(cells))]))
    with pytest.raises(CaseError, match=match) as info:
        read_simplex_mesh(path, FIELD)
    assert info.value.field == FIELD and str(info.value).startswith(FIELD + ": "), str(info.value)
    return str(info.value)


def test_a_curved_tetra10_is_refused(tmp_path):
    path = write_cube(tmp_path / "c.msh", degree=2, move_mid=[0.0, 0.0, 0.01])
    with pytest.raises(CaseError, match="curved cells are not supported") as info:
        read_simplex_mesh(path, FIELD)
    assert info.value.field == FIELD and "SecondOrderLinear" in str(info.value)


def test_a_degenerate_cell_is_refused(tmp_path):
    pts = [[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 1e-14]]
    refused(tmp_path, pts, [[0, 1, 2, 3]], match=r"1 degenerate cell\(s\)")
    refused(tmp_path, pts, [[0, 1, 2, 2]], match=r"1 degenerate cell\(s\) \(repeated nodes")


def test_duplicate_nodes_are_refused(tmp_path):
    """Two tetrahedra on one face, the second one on copies of the face's nodes: a crack."""
    pts = [[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0, -1], [0, 0, 0], [1, 0, 0], [0, 1, 0]]
    msg = refused(tmp_path, pts, [[0, 1, 2, 3], [5, 7, 6, 4]], match="coincident nodes")
    assert "3 pair(s)" in msg


def test_a_facet_of_three_tetrahedra_is_refused(tmp_path):
    pts = [[0, 0, 0], [1, 0, 0], [0, 1, 0], [0.2, 0.2, 1], [0.2, 0.2, -1], [0.3, 0.3, 2]]
    refused(tmp_path, pts, [[0, 1, 2, 3], [0, 2, 1, 4], [0, 1, 2, 5]], match="shared by three or more cells")


def test_two_tetrahedra_on_the_same_side_of_their_face_are_refused(tmp_path):
    pts = [[0, 0, 0], [1, 0, 0], [0, 1, 0], [0.2, 0.2, 1], [0.3, 0.3, 2]]
    refused(tmp_path, pts, [[0, 1, 2, 3], [0, 1, 2, 4]], match="overlapping cells")


@pytest.mark.parametrize("split", ["edges", "centre"])
def test_a_hanging_node_is_refused(tmp_path, split):
    """Below the face T = (0,0,0) (2,0,0) (0,2,0) one tetrahedron; above it the face split at its edge midpoints
    (nodes on T's edges) or at its centre (a node inside T), each piece under one apex: T is a boundary facet."""
    pts = [[0, 0, 0], [2, 0, 0], [0, 2, 0], [0.5, 0.5, -2], [0.5, 0.5, 2]]
    if split == "edges":
        pts += [[1, 0, 0], [1, 1, 0], [0, 1, 0]]
        pieces = [[0, 5, 7], [5, 1, 6], [7, 6, 2], [5, 6, 7]]
    else:
        pts += [[2 / 3, 2 / 3, 0]]
        pieces = [[0, 1, 5], [1, 2, 5], [2, 0, 5]]
    cells = [[0, 1, 2, 3]] + [p + [4] for p in pieces]
    msg = refused(tmp_path, pts, cells, match=r"hanging node\(s\)")
    node = "(1, 0, 0)" if split == "edges" else "(0.666667, 0.666667, 0)"
    assert f"the node at {node} lies on the boundary facet (0, 0, 0), (2, 0, 0), (0, 2, 0)" in msg, msg


def test_other_cells_and_non_flat_triangles_are_refused(tmp_path):
    hexa = [[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 1], [1, 0, 1], [1, 1, 1], [0, 1, 1]]
    refused(tmp_path, hexa, [list(range(8))], kind="hexahedron", match="hexahedron cells; only tetra and tetra10")
    refused(tmp_path, [[0, 0, 0], [1, 0, 0], [0, 1, 1]], [[0, 1, 2]], kind="triangle", match="not in one plane")
    points, cells, _ = second_order(*cube(1), [])
    path = tmp_path / "mixed.vtu"
    meshio.write(path, meshio.Mesh(points, [("tetra", cells[:1, :4]), ("tetra10", cells[1:])]))
    with pytest.raises(CaseError, match="it mixes tetra and tetra10 cells"):
        read_simplex_mesh(path, FIELD)


def test_a_missing_file_and_a_folder_are_refused(tmp_path):
    for path, why in ((tmp_path / "none.msh", "file not found"), (tmp_path, "a folder")):
        with pytest.raises(CaseError, match=why) as info:
            read_simplex_mesh(path, FIELD)
        assert info.value.field == FIELD


# ------------------------------------------------------------------------------------------------
# results


def p2_dofmap(points, cells):
    """A P2 DOF map by hand: vertices, then one DOF per edge at its midpoint, local order simplex.EDGES."""
    dim = cells.shape[1] - 1
    e = np.sort(cells[:, EDGES[dim]].reshape(-1, 2), axis=1)
    uniq, inv = np.unique(e, axis=0, return_inverse=True)
    dofs = np.hstack([cells, len(points) + inv.reshape(len(cells), -1)])
    return DofMap(2, np.vstack([points, points[uniq].mean(axis=1)]), dofs.astype(np.int32), np.zeros((0, 6), int))


def read_back(path):
    mm = meshio.read(path)
    assert len(mm.cells) == 1
    return mm, mm.cells[0]


def test_xdmf_of_p1_and_p2_tetrahedra_reads_back_in_meshio(tmp_path):
    mesh, _ = read_simplex_mesh(write_cube(tmp_path / "cube.msh"), FIELD)
    u = np.sin(mesh.points).sum(axis=1)
    path = write_xdmf(tmp_path / "out" / "p1", mesh, {"u": u, "grad": mesh.points * 2},
                      cell_fields={"volume": mesh.volumes()})
    assert path == tmp_path / "out" / "p1.xdmf" and (tmp_path / "out" / "p1.h5").is_file()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["p1.h5", "p1.xdmf"]     # no staging folder left
    mm, block = read_back(path)
    assert block.type == "tetra" and np.array_equal(block.data, mesh.cells)
    assert np.array_equal(mm.points, mesh.points) and np.array_equal(mm.point_data["u"], u)
    assert np.array_equal(mm.point_data["grad"], mesh.points * 2)
    assert np.array_equal(mm.cell_data["volume"][0], mesh.volumes())

    dm = p2_dofmap(mesh.points, mesh.cells)
    w = dm.points[:, 0] ** 2 - dm.points[:, 2]
    mm, block = read_back(write_xdmf(tmp_path / "p2", mesh, {"w": w}, dofmap=dm))
    assert block.type == "tetra10" and np.array_equal(block.data, dm.cell_dofs)
    assert np.array_equal(mm.points, dm.points) and np.array_equal(mm.point_data["w"], w)


def test_xdmf_of_a_2d_p2_field_pads_vectors_to_three_components(tmp_path):
    g = np.linspace(0.0, 1.0, 3)
    pts = np.array([[x, y] for y in g for x in g])
    tris = np.array([[0, 1, 4], [0, 4, 3], [1, 2, 5], [1, 5, 4], [3, 4, 7], [3, 7, 6], [4, 5, 8], [4, 8, 7]])
    meshio.write(tmp_path / "sq.vtu", meshio.Mesh(pts, [("triangle", tris)]))
    mesh, _ = read_simplex_mesh(tmp_path / "sq.vtu", FIELD)
    dm = p2_dofmap(mesh.points, mesh.cells)
    mm, block = read_back(write_xdmf(tmp_path / "v", mesh, {"velocity": dm.points[:, ::-1]}, dofmap=dm))
    assert block.type == "triangle6" and mm.points.shape == (len(dm.points), 2)
    assert np.array_equal(mm.point_data["velocity"], np.column_stack([dm.points[:, ::-1], np.zeros(len(dm.points))]))
    with pytest.raises(CaseError, match=r"fields\['bad'\]") as info:
        write_xdmf(tmp_path / "x", mesh, {"bad": np.zeros(3)}, dofmap=dm)
    assert "(25,) or (25, c) numbers" in str(info.value)


def image_variance(path) -> float:
    assert path.is_file() and path.stat().st_size > 1000
    return float(matplotlib.image.imread(path)[..., :3].var())


def test_the_figures_of_a_3d_and_a_2d_p2_field_show_something(tmp_path):
    mesh, _ = read_simplex_mesh(write_cube(tmp_path / "cube.msh", n=3), FIELD)
    u = np.sin(3 * mesh.points[:, 0]) * mesh.points[:, 1] + mesh.points[:, 2]
    path = plot_field_3d(tmp_path / "u3.png", mesh, u, "u on the cube")
    assert image_variance(path) > 0
    sq, _ = read_simplex_mesh(write_cube(tmp_path / "c2.msh", n=1), FIELD)       # the same without slices, P2
    dm = p2_dofmap(sq.points, sq.cells)
    assert image_variance(plot_field_3d(tmp_path / "p2.png", sq, dm.points[:, 0], "x", dofmap=dm, slices=False)) > 0

    g = np.linspace(0.0, 1.0, 3)
    pts = np.array([[x, y] for y in g for x in g])
    meshio.write(tmp_path / "sq.vtu", meshio.Mesh(pts, [("triangle", np.array([[0, 1, 4], [0, 4, 3], [1, 2, 5],
                                                                               [1, 5, 4], [3, 4, 7], [3, 7, 6],
                                                                               [4, 5, 8], [4, 8, 7]]))]))
    flat, _ = read_simplex_mesh(tmp_path / "sq.vtu", FIELD)
    dm = p2_dofmap(flat.points, flat.cells)
    path = plot_field_3d(tmp_path / "u2.png", flat, dm.points[:, 0] * dm.points[:, 1], "u on the square", dofmap=dm)
    assert image_variance(path) > 0
    with pytest.raises(CaseError, match="25 values, one per DOF"):
        plot_field_3d(tmp_path / "no.png", flat, np.zeros(9), "x", dofmap=dm)
