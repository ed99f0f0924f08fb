"""The run's device path (hpcsolve/fem/discrete/device.py): assembly, COO -> CSR with duplicates summed, Dirichlet
condensation, error norms and probe, array-module generic. On the CPU the same code runs with xp = numpy and is
compared with the SciPy path of ``assembly`` (each number the code produced against the other path's); on a GPU
(marker ``gpu``) with CuPy, for the CuPy and Numba-CUDA backends, against the NumPy path and whole runs."""

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from hpcsolve.core import backends
from hpcsolve.core.cases import load_case
from hpcsolve.core.precision import get_precision
from hpcsolve.fem.discrete import assembly, device, mesh as meshmod, problem
from hpcsolve.fem import plots, runner
from hpcsolve.fem.reference import BESIDE, host_cores

CASES = Path(__file__).resolve().parents[2] / "cases"
SYSTEMS = [("poisson_manufactured.toml", ["mesh.nx=24"]), ("cook_membrane.toml", ["mesh.nx=10"]),
           ("heat_plate_with_hole.toml", [])]


def _disc_pair(name, over, **kw):
    case = load_case(CASES / name, over)
    return case, problem.build(case), problem.build(case, **kw)


def _matrix(A):
    return A.to_scipy() if hasattr(A, "to_scipy") else A


@pytest.mark.parametrize("name,over", SYSTEMS)
def test_generic_path_matches_scipy(name, over):
    """xp = numpy through the device code: the same condensed matrix (structure and values), right side, free DOFs and
    scales as the SciPy path."""
    _, host, dev = _disc_pair(name, over, xp=np)
    A, B = _matrix(host.A), _matrix(dev.A)
    assert A.shape == B.shape and A.nnz == B.nnz
    assert np.array_equal(A.indptr, B.indptr) and np.array_equal(A.indices, B.indices)
    assert np.abs(A.data - B.data).max() <= 1e-13 * np.abs(A.data).max()
    assert np.abs(host.b - dev.b).max() <= 1e-13 * max(np.abs(host.b).max(), 1e-300)
    assert np.array_equal(host.free, dev.free)
    for key, (norm, _) in host.scales.items():
        assert dev.scales[key][0] == pytest.approx(norm, rel=1e-12)


def test_coo_sum_on_random_elements():
    """Random element matrices on random DOF lists (many duplicates): coo_sum equals SciPy's sum_duplicates."""
    rng = np.random.default_rng(3)
    n, m, k = 50, 400, 3
    dofs = rng.integers(0, n, size=(m, k))
    local = rng.standard_normal((m, k, k))
    rows, cols, vals = device.coo_sum(dofs, local, n)
    ref = assembly._to_csr(dofs, local, n).tocoo()
    assert np.array_equal(rows, ref.row) and np.array_equal(cols, ref.col)
    assert np.allclose(vals, ref.data, rtol=1e-13, atol=1e-13)
    indptr, indices, data = device.csr(rows, cols, vals, n)
    got = sp.csr_matrix((data, indices, indptr), shape=(n, n))
    assert abs(got - ref.tocsr()).max() <= 1e-13


def test_condense_matches_host():
    rng = np.random.default_rng(5)
    mesh = meshmod.rectangle(7, 5)
    K = assembly.stiffness(mesh, rng.uniform(0.5, 2.0, mesh.n_triangles))
    b = rng.standard_normal(mesh.n_points)
    fixed = np.unique(mesh.boundary_edges)
    values = rng.standard_normal(fixed.size)
    Aff, rhs, free = assembly.condense(K, b, fixed, values)
    coo = K.tocoo()
    indptr, indices, data, rhs2, free2 = device.condense(coo.row.astype(np.int64), coo.col.astype(np.int64),
                                                         coo.data, b, mesh.n_points, fixed, values)
    got = sp.csr_matrix((data, indices, indptr), shape=Aff.shape)
    assert np.array_equal(free, free2)
    assert abs(got - Aff).max() <= 1e-14 * abs(Aff).max()
    assert np.allclose(rhs, rhs2, rtol=1e-13, atol=1e-13)


def test_error_norms_converge_at_p1_rates():
    """The generic quadrature on the interpolant of sin_sin: L2 O(h^2), H1 O(h) (rates measured, not given)."""
    u_ex, grad_ex, _ = problem.MANUFACTURED["sin_sin"]
    errs = []
    for n in (16, 32):
        mesh = meshmod.rectangle(n, n)
        dm = device.upload(mesh, np)
        u = u_ex(mesh.points[:, 0], mesh.points[:, 1])
        errs.append(problem.error_norms(dm, u, u_ex, grad_ex))
    l2_rate = np.log2(errs[0][0] / errs[1][0])
    h1_rate = np.log2(errs[0][1] / errs[1][1])
    assert 1.8 < l2_rate < 2.2 and 0.9 < h1_rate < 1.1


def test_rectangle_boundary_is_the_generic_one():
    """The analytic boundary edges and tags of rectangle() equal what the triangles give (boundary_edges_of)."""
    mesh = meshmod.rectangle(6, 4, (0.0, 3.0), (-1.0, 1.0))
    edges = meshmod.boundary_edges_of(mesh.triangles)
    assert np.array_equal(edges, mesh.boundary_edges)
    mid = mesh.points[edges].mean(axis=1)
    left = mesh.edge_tags == "left"
    assert np.allclose(mid[left, 0], 0.0) and np.allclose(mid[mesh.edge_tags == "top", 1], 1.0)
    p = mesh.points[mesh.triangles]
    e = np.stack([p[:, 1] - p[:, 0], p[:, 2] - p[:, 1], p[:, 0] - p[:, 2]], axis=1)
    assert mesh.h_max() == pytest.approx(float(np.sqrt((e ** 2).sum(-1)).max()), rel=1e-14)


# ---------------------------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("name,over", SYSTEMS)
def test_device_build_matches_host(gpu_backend_names, name, over):
    """On each GPU backend: the device-assembled DeviceCSR, right side and free DOFs equal the SciPy path's."""
    for bname in gpu_backend_names:
        be = backends.get(bname)
        assert device.array_module(be) is not None, f"{bname}: no device assembly (CuPy missing?)"
        _, host, dev = _disc_pair(name, over, backend=be)
        assert dev.device_mesh is not None
        A, B = host.A, dev.A.to_scipy()
        assert np.array_equal(A.indptr, B.indptr) and np.array_equal(A.indices, B.indices), bname
        assert np.abs(A.data - B.data).max() <= 1e-13 * np.abs(A.data).max(), bname
        assert np.abs(host.b - dev.b).max() <= 1e-13 * max(np.abs(host.b).max(), 1e-300), bname
        assert np.array_equal(host.free, dev.free), bname


@pytest.mark.gpu
@pytest.mark.parametrize("name,over", [("poisson_manufactured.toml", ["mesh.nx=64", "solve.preconditioner=mg",
                                                                      "output.plots=false"]),
                                       ("cook_membrane.toml", ["mesh.nx=16", "output.plots=false"])])
def test_device_run_matches_numpy_run(gpu_backend_names, name, over):
    """A whole run on each GPU backend (device assembly, device norms and probe) against the NumPy run."""
    case = load_case(CASES / name, over)
    policy = get_precision("fp64", family="fem")
    ref = runner.run(case, "numpy", policy)
    for bname in gpu_backend_names:
        res = runner.run(case, bname, policy)
        assert res.status == "converged", (bname, res.message)
        for key in ("error_l2", "error_h1_seminorm", "probe_value", "u_min", "u_max", "displacement_max"):
            if key in ref.metrics:
                assert res.metrics[key] == pytest.approx(ref.metrics[key], rel=1e-7, abs=1e-12), (bname, key)
        want = ref.metrics["reference"]          # on a GPU the reference factorizes in a thread after the solve
        if want.startswith("made") and host_cores() >= 2:
            want += f" ({BESIDE})"
            assert res.metrics["error_vs_fp64_reference"] < 1e-8 and res.timings["reference_s"] > 0.0
        assert res.metrics["reference"] == want, bname
        assert res.timings["reference_wait_s"] <= res.timings["total_s"]      # (nested timers)


def test_plots_of_a_large_grid_draw_a_subsample(tmp_path, monkeypatch):
    """Above PLOT_MAX_CELLS cells a side the figures draw every k-th node of the grid, corners included, and the
    subsampled triangles cover the same area as the mesh."""
    monkeypatch.setattr(plots, "PLOT_MAX_CELLS", 8)
    case = load_case(CASES / "poisson_manufactured.toml", ["mesh.nx=20", "mesh.ny=10"])
    res = runner.run(case, "numpy", get_precision("fp64", family="fem"))
    keep, tris = plots.display_triangles(res, np.asarray(res.grid.triangles))
    pts = np.asarray(res.grid.points)[keep]
    assert len(pts) == 8 * 5            # k = 3; x: 0, 3, ..., 18, 20; y: 0, 3, 6, 9, 10
    assert {(0.0, 0.0), (1.0, 1.0)} <= {tuple(p) for p in pts.round(12).tolist()}
    p = pts[tris]
    area = 0.5 * ((p[:, 1, 0] - p[:, 0, 0]) * (p[:, 2, 1] - p[:, 0, 1]) - (p[:, 2, 0] - p[:, 0, 0]) * (p[:, 1, 1] - p[:, 0, 1]))
    assert (area > 0).all() and area.sum() == pytest.approx(1.0, rel=1e-12)
    files = runner.plot_result(res, tmp_path)
    assert {f.name for f in files} == {"solution.png", "error.png", "residuals.png"}


def test_plots_of_a_large_refined_mesh_draw_the_mesh_it_was_refined_from(tmp_path, monkeypatch):
    """Above DISPLAY_MAX_TRIANGLES a refined mesh's figures draw the finest coarser mesh it was refined from
    (its nodes are the refined mesh's first ones: the same values there), which covers the same domain."""
    from hpcsolve.fem.discrete import mesh as meshmod

    monkeypatch.setattr(meshmod, "DISPLAY_MAX_TRIANGLES", 6000)      # the plate: 1,291 -> 5,164 -> 20,656 triangles
    case = load_case(CASES / "heat_plate_with_hole.toml", ["mesh.refine=2", "solve.reference=never"])
    res = runner.run(case, "numpy", get_precision("fp64", family="fem"))
    once = meshmod.refine_uniform(meshmod.read_mesh(CASES / "meshes" / "plate_with_hole.msh"))
    assert res.derived["triangles"] == 4 * once.n_triangles > 6000 >= once.n_triangles
    display = res.plotter.keywords["display"]
    keep, tris = plots.display_triangles(res, np.asarray(res.grid.triangles), display)
    assert keep == slice(0, once.n_points) and np.array_equal(tris, once.triangles)
    assert np.array_equal(np.asarray(res.grid.points)[keep], once.points)
    def area(p, t):
        u, v = p[t[:, 1]] - p[t[:, 0]], p[t[:, 2]] - p[t[:, 0]]
        return 0.5 * np.abs(u[:, 0] * v[:, 1] - u[:, 1] * v[:, 0]).sum()

    assert area(once.points, tris) == pytest.approx(area(np.asarray(res.grid.points), np.asarray(res.grid.triangles)),
                                                   rel=1e-12)
    files = res.plotter(res, tmp_path)
    assert {f.name for f in files} >= {"solution.png", "residuals.png"}
    monkeypatch.setattr(meshmod, "DISPLAY_MAX_TRIANGLES", 10 ** 6)   # within the limit: drawn whole
    whole = runner.run(case, "numpy", get_precision("fp64", family="fem"))
    assert whole.plotter.keywords["display"] is None
