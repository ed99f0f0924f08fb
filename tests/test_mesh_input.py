"""Mesh input: missing file, unsupported format, degenerate and inverted elements, unknown tags."""

from pathlib import Path

import meshio
import numpy as np
import pytest

from hpcsolve import cli
from hpcsolve.errors import CaseError
from hpcsolve.fem.mesh import read_mesh

CASE = Path(__file__).parent.parent / "cases" / "heat_plate_with_hole.toml"
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
