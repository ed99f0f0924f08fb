"""Reliability III, mesh files: hanging nodes (T-junctions), node id 0 in gmsh elements, and coordinates
outside the documented extent. Each used to be solved to a wrong answer reported as converged, or refused
with the wrong reason."""

from pathlib import Path

import meshio
import numpy as np
import pytest

from hpcsolve import cli
from hpcsolve.core.errors import CaseError
from hpcsolve.fem.discrete.mesh import check_conforming, cook_membrane, read_mesh, rectangle, refine_uniform

ROOT = Path(__file__).parents[2]
CASE = ROOT / "cases" / "heat_plate_with_hole.toml"
PLATE = ROOT / "cases" / "meshes" / "plate_with_hole.msh"


def _write(path, pts, tris):
    meshio.write(path, meshio.Mesh(np.asarray(pts, dtype=float), [("triangle", np.asarray(tris))]),
                 file_format="gmsh22", binary=False)
    return path


# ------------------------------------------------------------------------------------------------
# item 4: a hanging node (T-junction)

#: [0, 2] x [0, 1]: the left square in two triangles, the right one in three around (1, 0.5), a node in the
#: middle of the left square's right edge
T_PTS = [[0, 0], [1, 0], [1, 1], [0, 1], [2, 0], [2, 1], [1, 0.5]]
T_TRIS = [[0, 1, 2], [0, 2, 3], [1, 4, 6], [4, 5, 6], [6, 5, 2]]


def test_a_hanging_node_is_refused_naming_it_and_the_edge(tmp_path):
    path = _write(tmp_path / "t.msh", T_PTS, T_TRIS)
    with pytest.raises(CaseError) as info:
        read_mesh(path)
    msg = str(info.value)
    assert info.value.field == "mesh.path" and msg.startswith("mesh.path: 1 hanging node(s)"), msg
    assert "the node at (1, 0.5) lies inside the edge from (1, 0) to (1, 1)" in msg, msg
    assert "a conforming triangulation" in msg and "Coherence" in msg, msg


def test_a_hanging_node_is_one_line_and_exit_2_from_the_cli(tmp_path, capsys):
    path = _write(tmp_path / "t.msh", T_PTS, T_TRIS)
    capsys.readouterr()                                       # meshio's warnings while writing it
    code = cli.main(["validate", str(CASE), "--set", f'mesh.path="{path}"'])
    err = capsys.readouterr().err
    assert code == 2 and "hanging node" in err and err.count("\n") == 1, err


def test_a_node_on_a_boundary_edge_from_the_other_side_is_refused(tmp_path):
    """The same T-junction with the split on the left: the long edge is the right square's."""
    pts = np.array(T_PTS, dtype=float)
    pts[:, 0] = 2.0 - pts[:, 0]                               # mirror: the three triangles are now on the left
    with pytest.raises(CaseError, match=r"the node at \(1, 0.5\) lies inside the edge"):
        read_mesh(_write(tmp_path / "m.msh", pts, T_TRIS))


def test_the_same_square_made_conforming_passes(tmp_path):
    tris = [[0, 1, 6], [0, 6, 3], [6, 2, 3], [1, 4, 6], [4, 5, 6], [6, 5, 2]]   # the left square uses (1, 0.5) too
    mesh = read_mesh(_write(tmp_path / "ok.msh", T_PTS, tris))
    assert mesh.n_triangles == 6 and np.isclose(mesh.areas().sum(), 2.0)


def test_shipped_and_generated_meshes_have_no_hanging_nodes():
    plate = read_mesh(PLATE)
    for mesh in (plate, refine_uniform(plate), rectangle(7, 3), cook_membrane(6), refine_uniform(rectangle(3, 5))):
        check_conforming(mesh.points, mesh.triangles, "mesh.path", mesh.source)   # raises on a false positive
    assert plate.n_triangles > 100


# ------------------------------------------------------------------------------------------------
# item 5: node id 0 in an element (gmsh numbers nodes from 1; meshio's lookup turns 0 into the last node)

HEAD22 = "$MeshFormat\n2.2 0 8\n$EndMeshFormat\n$Nodes\n4\n1 0 0 0\n2 1 0 0\n3 0 1 0\n4 1 1 0\n$EndNodes\n"


def test_node_id_0_in_a_gmsh22_line_element_is_refused(tmp_path):
    path = tmp_path / "zero.msh"
    path.write_text(HEAD22 + "$Elements\n3\n1 2 2 0 0 1 2 3\n2 2 2 0 0 2 4 3\n3 1 2 7 7 0 3\n$EndElements\n")
    with pytest.raises(CaseError, match=r"mesh.path: node id 0 in \$Elements \(3 1 2 7 7 0 3\); gmsh numbers "
                                        r"nodes from 1"):
        read_mesh(path)


def test_node_id_0_in_a_gmsh22_triangle_is_refused_and_zero_tags_are_not(tmp_path):
    path = tmp_path / "zero.msh"
    path.write_text(HEAD22 + "$Elements\n2\n1 2 2 0 0 1 2 3\n2 2 2 0 0 2 4 0\n$EndElements\n")
    with pytest.raises(CaseError, match=r"node id 0 in \$Elements \(2 2 2 0 0 2 4 0\)"):
        read_mesh(path)
    path.write_text(HEAD22 + "$Elements\n3\n1 2 2 0 0 1 2 3\n2 2 2 0 0 2 4 3\n3 1 2 0 0 1 3\n$EndElements\n")
    assert read_mesh(path).n_triangles == 2                   # zero tags everywhere, no zero node


HEAD41 = ("$MeshFormat\n4.1 0 8\n$EndMeshFormat\n$Nodes\n1 4 1 4\n2 1 0 4\n1\n2\n3\n4\n"
          "0 0 0\n1 0 0\n0 1 0\n1 1 0\n$EndNodes\n")


def test_node_id_0_in_a_gmsh41_element_is_refused_and_header_zeros_are_not(tmp_path):
    path = tmp_path / "zero41.msh"
    body = "$Elements\n3 4 1 4\n2 0 2 2\n1 1 2 3\n2 2 4 3\n0 1 15 1\n5 1\n1 1 1 1\n3 {a} 3\n$EndElements\n"
    path.write_text(HEAD41 + body.format(a=1))                # entity tag 0, entity dimension 0: not node ids
    mesh = read_mesh(path)
    assert mesh.n_triangles == 2 and mesh.n_points == 4
    path.write_text(HEAD41 + body.format(a=0))
    with pytest.raises(CaseError, match=r"node id 0 in \$Elements \(3 0 3\)"):
        read_mesh(path)


def test_a_line_element_on_a_node_that_is_not_in_the_file_is_refused(tmp_path):
    """Node tags 1, 2, 3, 5: a line on node 4 became index -1 in meshio, then our last node."""
    path = tmp_path / "sparse.msh"
    path.write_text("$MeshFormat\n2.2 0 8\n$EndMeshFormat\n$Nodes\n4\n1 0 0 0\n2 1 0 0\n3 0 1 0\n5 1 1 0\n"
                    "$EndNodes\n$Elements\n3\n1 2 2 0 0 1 2 3\n2 2 2 0 0 2 5 3\n3 1 2 7 7 4 3\n$EndElements\n")
    with pytest.raises(CaseError, match=r"mesh.path: a line element refers to node index -1, not one of the 4 nodes"):
        read_mesh(path)


# ------------------------------------------------------------------------------------------------
# item 18b: coordinates beyond the documented extent are refused as such, not as degenerate triangles

SQUARE = [[0, 0], [1, 0], [0, 1], [1, 1]]


@pytest.mark.parametrize("scale, offset, found", [
    (1e300, 0.0, "extent 1.41421e+300"), (1e200, 0.0, "extent 1.41421e+200"),
    (1e-200, 0.0, "extent 1.41421e-200"), (1.0, 1e300, "coordinates up to 1e+300"),
    (1.0, 1e12, "extent 1.41421 at coordinates up to 1e+12")])
def test_coordinates_outside_the_extent_limits_are_refused(tmp_path, scale, offset, found):
    path = _write(tmp_path / "big.msh", np.array(SQUARE, dtype=float) * scale + offset, [[0, 1, 2], [1, 3, 2]])
    with pytest.raises(CaseError) as info:
        read_mesh(path)
    msg = str(info.value)
    assert msg.startswith("mesh.path: the mesh has ") and found in msg and "degenerate" not in msg, msg
    assert "allowed: node coordinates within +-1e+100, an extent from 1e-100 to 1e+100" in msg, msg


def test_large_offsets_and_small_meshes_within_the_limits_pass(tmp_path):
    utm = np.array(SQUARE, dtype=float) * 100.0 + [5e5, 5e6]   # metres in UTM coordinates
    assert np.isclose(read_mesh(_write(tmp_path / "utm.msh", utm, [[0, 1, 2], [1, 3, 2]])).areas().sum(), 1e4)
    tiny = np.array(SQUARE, dtype=float) * 1e-90
    assert np.isclose(read_mesh(_write(tmp_path / "tiny.msh", tiny, [[0, 1, 2], [1, 3, 2]])).areas().sum(), 1e-180)


def test_the_zero_id_scan_reads_the_section_in_pieces_alike(tmp_path, monkeypatch):
    """The $Elements scan goes in pieces of whole lines (bounded memory); pieces of a few bytes give the same."""
    from hpcsolve.core import safe_io

    monkeypatch.setattr(safe_io, "_SCAN_CHUNK_BYTES", 5)
    bad = tmp_path / "bad.msh"
    bad.write_text(HEAD41 + "$Elements\n2 3 1 3\n2 0 2 2\n1 1 2 3\n2 2 4 3\n1 1 1 1\n3 4 0\n$EndElements\n")
    with pytest.raises(CaseError, match=r"node id 0 in \$Elements \(3 4 0\)"):
        read_mesh(bad)
    assert read_mesh(PLATE).n_triangles > 100                 # gmsh 2.2 with tags: no false positive
