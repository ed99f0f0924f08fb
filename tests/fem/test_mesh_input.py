"""Mesh input: missing file, unsupported format, degenerate and inverted elements, unknown tags."""

from pathlib import Path

import meshio
import numpy as np
import pytest

from hpcsolve import cli
from hpcsolve.core.errors import CaseError
from hpcsolve.fem.discrete.mesh import read_mesh

CASE = Path(__file__).parents[2] / "cases" / "heat_plate_with_hole.toml"
PTS = np.array([[0, 0], [1, 0], [0, 1], [1, 1], [2, 2]], dtype=float)


def _write(path, tris, pts=PTS):
    meshio.write(path, meshio.Mesh(pts, [("triangle", np.asarray(tris))]), file_format="gmsh22")
    return path


def _run_validate(capsys, mesh_path) -> tuple[int, str]:
    code = cli.main(["validate", str(CASE), "--set", f'mesh.path="{mesh_path}"'])
    return code, capsys.readouterr().err


def test_missing_and_unreadable_mesh_files_are_case_errors(tmp_path, capsys):
    code, err = _run_validate(capsys, tmp_path / "nope.msh")
    assert code == 2 and "mesh.path: file not found" in err
    (tmp_path / "m.xyz").write_text("hello")
    code, err = _run_validate(capsys, tmp_path / "m.xyz")
    assert code == 2 and "mesh.path: cannot read it" in err and "a mesh file meshio can read" in err


def test_degenerate_triangles_are_refused(tmp_path):
    path = _write(tmp_path / "deg.msh", [[0, 1, 2], [1, 3, 2], [0, 3, 4]])   # (0,0), (1,1), (2,2): collinear
    with pytest.raises(CaseError, match=r"1 degenerate triangle\(s\).*triangle 2 with nodes \[0, 3, 4\]"):
        read_mesh(path)
    path = _write(tmp_path / "rep.msh", [[0, 1, 2], [1, 1, 3]])
    with pytest.raises(CaseError, match="degenerate"):
        read_mesh(path)


def test_inverted_triangles_are_reoriented_and_counted(tmp_path):
    good = read_mesh(_write(tmp_path / "ok.msh", [[0, 1, 2], [1, 3, 2]]))
    mixed = read_mesh(_write(tmp_path / "inv.msh", [[0, 2, 1], [1, 3, 2]]))   # first one clockwise
    assert mixed.info["reoriented_triangles"] == 1 and "reoriented_triangles" not in good.info
    assert np.all(mixed.areas() > 0)
    np.testing.assert_allclose(np.sort(mixed.areas()), np.sort(good.areas()))


def test_unknown_boundary_tag_is_refused_with_the_known_tags(capsys):
    code = cli.main(["validate", str(CASE), "--set", 'boundary.dirichlet=[{where = {tag = "lid"}, value = 1.0}]'])
    err = capsys.readouterr().err
    assert code == 2 and "lid" in err and "hole" in err


# ------------------------------------------------------------------------------------------------
# meshes that do not tile their domain once: each used to be solved to a wrong answer reported as converged
# (found by a fuzzing pass, session 13; the exact solution 1 - x of u(0) = 1, u(1) = 0 showed errors of 0.06-0.5)

def _grid(n=4):
    """An n x n unit square split into 2 n^2 triangles: (points, triangles)."""
    xs, ys = np.meshgrid(np.linspace(0, 1, n + 1), np.linspace(0, 1, n + 1))
    pts = np.column_stack([xs.ravel(), ys.ravel()])
    tris = []
    for j in range(n):
        for i in range(n):
            a = j * (n + 1) + i
            tris += [[a, a + 1, a + n + 2], [a, a + n + 2, a + n + 1]]
    return pts, np.array(tris)


def test_a_sound_grid_passes_the_conformity_checks(tmp_path):
    pts, tris = _grid()
    mesh = read_mesh(_write(tmp_path / "ok.msh", tris, pts))
    assert mesh.n_triangles == 32 and mesh.n_points == 25


def test_cells_other_than_triangles_are_refused_not_dropped(tmp_path):
    pts, tris = _grid()
    quads = np.array([[0, 1, 6, 5]])                         # a quad over two of the triangles' cells
    path = tmp_path / "mixed.msh"
    meshio.write(path, meshio.Mesh(pts, [("triangle", tris[2:]), ("quad", quads)]), file_format="gmsh22")
    with pytest.raises(CaseError, match="it also has quad cells, which this P1 solver cannot use"):
        read_mesh(path)


def test_coincident_nodes_are_refused(tmp_path):
    pts, tris = _grid()
    pts = np.vstack([pts, pts[12]])                          # the centre node again, used by half its triangles
    tris = tris.copy()
    tris[tris[:, 0] % 2 == 0] = np.where(tris[tris[:, 0] % 2 == 0] == 12, 25, tris[tris[:, 0] % 2 == 0])
    with pytest.raises(CaseError, match=r"1 pair\(s\) of coincident nodes .* first: nodes at \(0.5, 0.5\)"):
        read_mesh(_write(tmp_path / "crack.msh", tris, pts))


def test_repeated_and_overlapping_triangles_are_refused(tmp_path):
    pts, tris = _grid()
    with pytest.raises(CaseError, match=r"1 triangle\(s\) listed more than once"):
        read_mesh(_write(tmp_path / "twice.msh", np.vstack([tris, tris[5]]), pts))
    extra = np.array([[6, 8, 18]])                           # over cells it shares no edge with
    with pytest.raises(CaseError, match="overlapping triangles"):
        read_mesh(_write(tmp_path / "over.msh", np.vstack([tris, extra]), pts))


def test_a_part_of_the_mesh_without_a_dirichlet_condition_is_refused(tmp_path, capsys):
    pts, tris = _grid()
    two = np.vstack([pts, pts + [2.0, 0.0]])                 # a second square at x in [2, 3], not touching
    path = _write(tmp_path / "two.msh", np.vstack([tris, tris + len(pts)]), two)
    base = ["validate", str(CASE), "--set", f'mesh.path="{path}"', "--set", "mesh.refine=0",
            "--set", "boundary.neumann=[]", "--set", "problem.regions=[]"]
    code = cli.main(base + ["--set", "boundary.dirichlet=[{where = {x = 0.0}, value = 1.0}]"])
    err = capsys.readouterr().err
    assert code == 2 and "hpcsolve: error: boundary.dirichlet: the mesh has 2 separate parts and 1 of" in err, err
    assert "25 nodes in [2, 3] x [0, 1]" in err, err
    code = cli.main(base + ["--set", "boundary.dirichlet=[{where = {x = 0.0}, value = 1.0}, "
                                     "{where = {x = 3.0}, value = 0.0}]"])
    assert code == 0, capsys.readouterr().err
    # refined twice: the parts come down from the file's mesh through the refinements (not recomputed)
    code = cli.main([*base[:4], "--set", "mesh.refine=2", *base[6:],
                     "--set", "boundary.dirichlet=[{where = {x = 0.0}, value = 1.0}]"])
    err = capsys.readouterr().err
    assert code == 2 and "the mesh has 2 separate parts and 1 of them" in err and "289 nodes in [2, 3] x [0, 1]" in err, err
