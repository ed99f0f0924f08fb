"""Python habits (issue 50, item 8): the public names where a user looks for them (``hpcsolve``, ``hpcsolve.fem``),
``python -m hpcsolve``, SciPy's ``tol``/``atol``/``M`` in ``solve``, a LinearOperator as a preconditioner, a short
SolveReport repr, a loader that gives a written result's fields back, and result.xdmf that meshio reads for both
solver families."""

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import h5py
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import hpcsolve
import hpcsolve.fem
from hpcsolve.core import results, xdmf
from hpcsolve.core.errors import BackendError, CaseError, OutputError
from hpcsolve.core.results import Result, Snapshot, StructuredGrid
from hpcsolve.fem.linalg.precond import HostOperator

CASES = Path(__file__).parent.parent / "cases"
ROOT = Path(__file__).parent.parent
NAMES = ("solve", "Multigrid", "StructuredGrid", "run_case", "compare", "load_case", "load_result")


def _poisson(n: int = 24, shift: float = 0.0) -> sp.csr_matrix:
    """5-point Laplacian on an n x n interior grid plus a varying diagonal (so Jacobi differs from no
    preconditioner)."""
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))
    eye = sp.identity(n)
    return (sp.kron(eye, t) + sp.kron(t, eye) + sp.diags(np.linspace(0.0, shift, n * n))).tocsr()


# ------------------------------------------------------------------------------------------ names
def test_public_names_are_in_dir_and_all_and_are_the_real_objects():
    for name in NAMES:
        assert name in hpcsolve.__all__ and name in dir(hpcsolve), name
        assert name in hpcsolve.fem.__all__ and name in dir(hpcsolve.fem), name
        assert getattr(hpcsolve, name) is getattr(hpcsolve.fem, name), name
    from hpcsolve.core.cases import load_case
    from hpcsolve.fem.linalg.precond.geometric import StructuredGrid as MGGrid
    from hpcsolve.fem.linalg.precond.multigrid import Multigrid
    from hpcsolve.run import run_case

    assert (hpcsolve.run_case, hpcsolve.load_case, hpcsolve.Multigrid, hpcsolve.StructuredGrid) == (
        run_case, load_case, Multigrid, MGGrid)
    assert hpcsolve.solve is hpcsolve.fem.api.solve and hpcsolve.load_result is results.load_result
    assert sorted(set(hpcsolve.__all__) - set(dir(hpcsolve))) == []


def test_import_hpcsolve_loads_no_solver_or_gpu_library():
    """``import hpcsolve`` stays light: the entry points load on first use."""
    code = ("import sys, hpcsolve; heavy = ('scipy', 'h5py', 'cupy', 'numba', 'matplotlib', 'hpcsolve.fem', "
            "'hpcsolve.lbm', 'hpcsolve.run'); print(sorted(m for m in heavy if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_python_m_hpcsolve_is_the_command_line(tmp_path):
    version = subprocess.run([sys.executable, "-m", "hpcsolve", "--version"], capture_output=True, text=True,
                             cwd=ROOT)
    assert version.returncode == 0 and hpcsolve.__version__ in version.stdout
    bad = subprocess.run([sys.executable, "-m", "hpcsolve", "validate", str(tmp_path / "none.toml")],
                         capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and "none.toml" in bad.stderr


def test_resolve_backend_names_the_argument():
    assert hpcsolve.resolve_backend("numpy").name == "numpy" and not hpcsolve.resolve_backend("numpy").gpu
    with pytest.raises((BackendError, CaseError)) as info:
        hpcsolve.resolve_backend("cuda")
    assert "backend" in str(info.value) and "cuda" in str(info.value)


def test_assemble_gives_the_system_the_run_solves():
    case = ["mesh.nx=8"]
    disc = hpcsolve.fem.assemble(CASES / "poisson_manufactured.toml", case)
    x, report = hpcsolve.solve(disc.A, disc.b, rtol=1e-12)
    res = hpcsolve.run_case(CASES / "poisson_manufactured.toml", "numpy", "fp64", overrides=case, progress=False,
                            plots=False)
    assert report.converged and disc.A.shape == (49, 49)
    assert np.max(np.abs(disc.full_solution(x) - res.fields["u"])) < 1e-10
    with pytest.raises(CaseError, match="^case: "):
        hpcsolve.fem.assemble(CASES / "lid_driven_cavity.toml")


# ------------------------------------------------------------------------------------------ solve, SciPy habits
@pytest.mark.parametrize("kwargs, says", [({"tol": 1e-8}, "rtol="), ({"atol": 1e-6}, "rtol = atol / ||b||"),
                                          ({"callback": print}, "report.history_recursive")])
def test_scipy_keywords_solve_does_not_take_say_what_to_pass(kwargs, says):
    A = _poisson(6)
    with pytest.raises(TypeError) as info:
        hpcsolve.solve(A, np.ones(36), **kwargs)
    assert f"'{next(iter(kwargs))}'" in str(info.value) and says in str(info.value)


def test_atol_zero_is_accepted_and_m_with_preconditioner_is_refused():
    A, b = _poisson(6), np.ones(36)
    assert hpcsolve.solve(A, b, atol=0.0)[1].iterations == hpcsolve.solve(A, b)[1].iterations
    with pytest.raises(TypeError, match="M= and preconditioner="):
        hpcsolve.solve(A, b, M=sp.identity(36), preconditioner="jacobi")


@pytest.mark.parametrize("precision, rtol", [("fp64", 1e-10), ("mixed", 1e-10), ("fp32", 1e-4)])
def test_a_linear_operator_m_takes_the_iterations_of_the_builtin_jacobi(precision, rtol):
    A = _poisson(24, shift=40.0)
    b = np.sin(np.arange(A.shape[0]))
    dinv = 1.0 / A.diagonal()
    kw = dict(precision=precision, rtol=rtol, check_every=1)      # decisions every iteration: exact counts
    x_j, jac = hpcsolve.solve(A, b, preconditioner="jacobi", **kw)
    x_n, none = hpcsolve.solve(A, b, preconditioner="none", **kw)        # plain CG (the default is "auto")
    op = spla.LinearOperator(A.shape, matvec=lambda v: dinv * v, dtype=np.float64)
    for how in ({"M": op}, {"preconditioner": op}, {"M": sp.diags(dinv)}, {"M": np.diag(dinv)}):
        x, rep = hpcsolve.solve(A, b, **kw, **how)
        assert rep.converged and jac.converged, (how, rep)
        assert rep.iterations == jac.iterations < none.iterations, (how, rep.iterations, jac.iterations)
        assert np.linalg.norm(x - x_j) <= 10 * rtol * np.linalg.norm(x_j)
        assert rep.preconditioner["kind"] == "operator" and rep.method.endswith("+operator")


def test_a_linear_operator_m_is_scaled_with_a_matrix_scaled_for_float32():
    """A with entries near 2^-100 is scaled by a power of two for float32 work; M ~ A^-1 is scaled back with it
    (unscaled, z = M r is ~2^100 and p.Ap overflows float32: the CG broke down after 1 iteration)."""
    A = _poisson(16, shift=20.0) * 2.0 ** -100
    b = np.cos(np.arange(A.shape[0]))
    jac = hpcsolve.solve(A, b, precision="fp32", preconditioner="jacobi", rtol=1e-4, check_every=1)[1]
    rep = hpcsolve.solve(A, b, precision="fp32", M=sp.diags(1.0 / A.diagonal()), rtol=1e-4, check_every=1)[1]
    assert jac.converged and rep.converged and rep.iterations == jac.iterations > 1


def test_a_host_operator_is_refused_on_a_gpu_backend_and_for_the_wrong_size():
    pc = HostOperator(sp.identity(4), field="M")
    gpu = SimpleNamespace(backend=SimpleNamespace(gpu=True, name="cupy"), global_n=4)
    with pytest.raises(CaseError) as info:
        pc.setup(gpu)
    assert str(info.value).startswith("M: ") and "backend='numpy'" in info.value.allowed
    with pytest.raises(CaseError, match=r"^M: .*shape \(4, 4\).*\(9, 9\)"):
        hpcsolve.solve(_poisson(3), np.ones(9), M=sp.identity(4))
    with pytest.raises(CaseError, match="^preconditioner: .*LinearOperator"):
        hpcsolve.solve(_poisson(3), np.ones(9), preconditioner=42)


def test_solve_report_repr_is_one_short_line_without_the_history():
    A = _poisson(60)
    _, short = hpcsolve.solve(A, np.ones(3600), rtol=1e-10, maxiter=4, check_every=1)
    _, long = hpcsolve.solve(A, np.ones(3600), rtol=1e-10)
    assert len(long.history_recursive) > 20 * len(short.history_recursive) and not short.converged
    text = repr(long)
    assert "\n" not in text and len(text) < 300 and len(repr(short)) < 300
    assert f"iterations={long.iterations}" in text and f"true_residual={long.true_residual:.3g}" in text
    assert "history" not in text and "array(" not in text


# ------------------------------------------------------------------------------------------ result files
def _h5_field(folder: Path, group: str, name: str) -> np.ndarray:
    with h5py.File(folder / "result.h5", "r") as f:
        return f[group][name][()]


def test_lbm_result_xdmf_reads_with_meshio_and_load_result_gives_the_fields(tmp_path):
    import meshio

    out = tmp_path / "cavity"
    res = hpcsolve.run_case(CASES / "lid_driven_cavity.toml", "numpy", "fp32", out=out, progress=False, plots=False,
                            overrides=["lattice.resolution=16", "time.end_time=0.7", "time.output_interval=0.25",
                                       "steady.enabled=false"])
    mesh = meshio.read(out / "result.xdmf")
    x, y = res.grid.coordinates()
    assert mesh.points.shape == (18 * 18, 2) and mesh.cells_dict["quad"].shape == (17 * 17, 4)
    np.testing.assert_array_equal(mesh.points[:, 0].reshape(18, 18), np.broadcast_to(x, (18, 18)))
    np.testing.assert_array_equal(mesh.points[:, 1].reshape(18, 18), np.broadcast_to(y[:, None], (18, 18)))
    assert set(mesh.point_data) == set(res.fields)
    for name, a in res.fields.items():
        np.testing.assert_array_equal(mesh.point_data[name], _h5_field(out, "fields", name))
        got = mesh.point_data[name].reshape(a.shape[:2] + (-1,))[..., :a.shape[-1] if a.ndim == 3 else 1]
        np.testing.assert_array_equal(got.reshape(a.shape), a)
    loaded = hpcsolve.load_result(out)
    assert (loaded.solver, loaded.precision, loaded.status) == ("lbm", "fp32", res.status)
    for name, a in res.fields.items():
        assert loaded.fields[name].shape == a.shape and np.array_equal(loaded.fields[name], a), name
    np.testing.assert_array_equal(loaded.grid.coordinates()[0], x)
    assert loaded.metrics["steps"] == res.metrics["steps"] and loaded.summary()["case"] == res.case_name
    assert [s.step for s in loaded.snapshots] == [s.step for s in res.snapshots] and len(res.snapshots) == 2
    np.testing.assert_array_equal(loaded.snapshots[-1].fields["velocity"], res.snapshots[-1].fields["velocity"])
    with meshio.xdmf.TimeSeriesReader(out / xdmf.SERIES_XDMF) as series:     # ParaView's time series, meshio too
        series.read_points_cells()
        steps = [series.read_data(k) for k in range(series.num_steps)]
    assert [t for t, _, _ in steps] == pytest.approx([0.25, 0.5, res.metrics["simulated_time_s"]])
    np.testing.assert_array_equal(steps[0][1]["vorticity"].reshape(18, 18), res.snapshots[0].fields["vorticity"])


def test_fem_result_xdmf_reads_with_meshio_and_load_result_gives_the_fields(tmp_path):
    import meshio

    out = tmp_path / "cook"
    res = hpcsolve.run_case(CASES / "cook_membrane.toml", "numpy", "fp64", out=out, progress=False, plots=False,
                            overrides=["mesh.nx=4"])
    mesh = meshio.read(out / "result.xdmf")
    np.testing.assert_array_equal(mesh.points, res.grid.points)
    np.testing.assert_array_equal(mesh.cells_dict["triangle"], res.grid.triangles)
    disp = res.fields["displacement"]
    assert disp.shape == (25, 2) and np.abs(disp).max() > 0
    for name in res.fields:
        np.testing.assert_array_equal(mesh.point_data[name], _h5_field(out, "fields", name))
    np.testing.assert_array_equal(mesh.point_data["displacement"][:, :2], disp)
    assert not mesh.point_data["displacement"][:, 2].any()
    loaded = hpcsolve.load_result(out)
    for name, a in res.fields.items():
        assert loaded.fields[name].shape == a.shape and np.array_equal(loaded.fields[name], a), name
    np.testing.assert_array_equal(np.stack(loaded.grid.coordinates(), axis=1), res.grid.points)
    assert loaded.metrics["iterations"] == res.metrics["iterations"] and loaded.status == res.status
    assert loaded.metrics["true_residual"] == res.metrics["true_residual"] > 0       # JSON round trip: exact


def test_a_large_structured_grid_keeps_the_compact_xdmf_and_still_loads(tmp_path, monkeypatch):
    """Above XDMF_POINTS_MAX points the sidecar is the 2DCoRectMesh ParaView reads (no points or cells written);
    the loader gives the same fields either way."""
    monkeypatch.setattr(xdmf, "XDMF_POINTS_MAX", 10)
    monkeypatch.setattr(results, "XDMF_POINTS_MAX", 10)
    rho = np.arange(20.0).reshape(4, 5)
    vel = np.stack([rho, -rho], axis=-1)
    res = Result("grid", "lbm", "numpy", "fp64", grid=StructuredGrid(5, 4, 0.5, (1.0, 2.0), "m"),
                 fields={"rho": rho, "velocity": vel}, snapshots=[Snapshot(0.0, 0, {"rho": rho * 2})])
    res.write(tmp_path, plots=False)
    root = ET.parse(tmp_path / "result.xdmf").getroot()
    assert root.find(".//Topology").get("TopologyType") == "2DCoRectMesh"
    with h5py.File(tmp_path / "result.h5", "r") as f:
        assert "points" not in f["grid"] and f["fields/velocity"].shape == (4, 5, 3)
    loaded = hpcsolve.load_result(tmp_path)
    assert np.array_equal(loaded.fields["velocity"], vel) and np.array_equal(loaded.snapshots[0].fields["rho"], 2 * rho)
    np.testing.assert_array_equal(loaded.grid.coordinates()[1], [2.0, 2.5, 3.0, 3.5])


def test_load_result_refuses_an_incomplete_folder(tmp_path):
    (tmp_path / "result.h5").write_bytes(b"")
    with pytest.raises(OutputError, match="^folder: no manifest.json"):
        hpcsolve.load_result(tmp_path)
