"""Foundation: precision policies, backend probe, overrides, error messages, result writers."""

import json
import xml.etree.ElementTree as ET

import h5py
import numpy as np
import pytest
from pydantic import ValidationError

from hpcsolve.core import backends
from hpcsolve import cli
from hpcsolve.core.cases import StrictModel, apply_override, parse_override, validation_error_to_case_error
from hpcsolve.core.errors import BackendError, CaseError
from hpcsolve.core.precision import FP16S, FP32, FP64, MIXED, get_precision
from hpcsolve.core.results import Result, Snapshot, StructuredGrid, TriangleMesh, read_h5, write_json


def test_precision_policies_know_their_dtypes_and_families():
    assert FP64.storage == np.float64 and FP64.compute == np.float64
    assert FP32.storage_bytes == 4
    assert FP16S.storage == np.float16 and FP16S.compute == np.float32 and FP16S.scaled
    assert MIXED.refinement and not MIXED.supports("lbm")
    assert get_precision("FP32", family="fem") is FP32
    with pytest.raises(CaseError, match=r"run.precision: .*'mixed'.*fp64, fp32, fp16s"):
        get_precision("mixed", family="lbm")
    with pytest.raises(CaseError, match=r"allowed: fp64, fp32, mixed"):
        get_precision("fp8", family="fem")


def test_fp16s_scale_keeps_shifted_populations_out_of_the_subnormal_range():
    # a typical shifted population at Ma ~ 0.05 is ~ w_i * 3 * u ~ 1e-3; with the scale it must be a
    # normal float16 and keep ~3 significant digits
    g = np.float32(3.1e-4)
    stored = np.float16(g * FP16S.population_scale)
    assert stored >= np.finfo(np.float16).tiny
    rel = abs(np.float32(stored) / FP16S.population_scale - g) / g
    assert 0 < rel < 1e-3


def test_backend_probe_and_resolve_here():
    assert backends.probe("numpy").available
    assert backends.resolve("auto").name in backends.BACKENDS
    assert backends.resolve("numpy") is backends.get("numpy")
    assert not backends.get("numpy").gpu and backends.get("cupy").gpu and backends.get("numba-cuda").gpu
    with pytest.raises(BackendError, match="allowed: auto, numpy, cupy, numba-cuda"):
        backends.resolve("opencl")
    if not backends.probe("cupy").available:
        with pytest.raises(BackendError, match="cannot run here: cupy"):
            backends.resolve("cupy")


@pytest.fixture
def fresh_probes():
    """The per-process probe cache emptied before and after (a fake probe must not outlive its test)."""
    import threading

    def join_probes():                    # (a prewarm an earlier test started must not see this test's fakes)
        for t in threading.enumerate():
            if t.name.startswith("hpcsolve-probe-"):
                t.join(30)

    join_probes()
    backends._probe_once.cache_clear()
    yield
    join_probes()
    backends._probe_once.cache_clear()


def test_a_prewarmed_probe_runs_once_beside_the_caller(monkeypatch, fresh_probes):
    """``backends.prewarm``: CuPy's probe (import, driver, context) in a thread while the run loads its case; a
    ``probe`` asked meanwhile waits for that answer instead of probing again; CPU backends are not prewarmed."""
    import threading
    import time

    calls, started = [], threading.Event()

    def slow_probe(self):
        calls.append(threading.current_thread().name)
        started.set()
        time.sleep(0.2)
        return backends.BackendStatus("cupy", False, "a fake probe")

    monkeypatch.setattr(backends.CupyBackend, "_probe", slow_probe)
    monkeypatch.setattr(backends.importlib.util, "find_spec", lambda name: object())   # "CuPy is installed"
    assert backends.prewarm("numpy") is None and backends.prewarm("numba-cuda") is None
    thread = backends.prewarm("auto")
    assert thread is not None and started.wait(10)
    status = backends.probe("cupy")            # asked while the thread probes: its answer, no second probe
    thread.join(10)
    assert status.reason == "a fake probe" and calls == ["hpcsolve-probe-cupy"]
    assert backends.prewarm(backends.get("cupy")) is not None and calls == ["hpcsolve-probe-cupy"]   # cached
    monkeypatch.setattr(backends.importlib.util, "find_spec", lambda name: None)         # no CuPy: no thread
    assert backends.prewarm("cupy") is None


def test_the_gpu_probe_starts_from_the_case_table_before_its_validation(tmp_path, monkeypatch):
    """``run.prepare``: the backend the case asks for (overrides applied) is prewarmed before the model validates
    the case; an explicit backend argument wins; a case that does not parse prewarms nothing."""
    from hpcsolve import run as runmod
    from hpcsolve.core.errors import CaseError

    asked = []
    monkeypatch.setattr(backends, "prewarm", lambda name: asked.append(name))
    from pathlib import Path

    shipped = Path(__file__).resolve().parents[2] / "cases" / "poisson_manufactured.toml"
    case = tmp_path / "c.toml"
    case.write_text(shipped.read_text().replace('backend = "auto"', 'backend = "numpy"'))
    runmod.prepare(case)
    runmod.prepare(case, overrides=['run.backend="auto"', "mesh.nx=8"])
    runmod.prepare(case, backend="numpy", overrides=['run.backend="auto"'])
    assert asked == ["numpy", "auto", "numpy"]
    assert runmod._backend_asked({"run": {"backend": "cupy"}}) == "cupy"
    assert runmod._backend_asked({}) == "auto" and runmod._backend_asked({"run": {"backend": 3}}) == ""
    case.write_text("not toml [")
    with pytest.raises(CaseError):
        runmod.prepare(case)
    assert len(asked) == 3
    # a case that parses but fails validation: the probe started before the validation said no
    case.write_text(shipped.read_text().replace("[mesh]", "[mesh]\nnot_a_field = 1"))
    with pytest.raises(CaseError, match="not_a_field"):
        runmod.prepare(case)
    assert asked[3:] == ["auto"]


def test_a_prewarm_that_fails_does_not_change_the_case_error(tmp_path, monkeypatch):
    from hpcsolve import run as runmod
    from hpcsolve.core.errors import CaseError

    def broken(name):
        raise ValueError("cupy.__spec__ is None")

    monkeypatch.setattr(backends, "prewarm", broken)
    shipped = __import__("pathlib").Path(__file__).resolve().parents[2] / "cases" / "poisson_manufactured.toml"
    case = tmp_path / "c.toml"
    case.write_text(shipped.read_text().replace("[mesh]", "[mesh]\nnot_a_field = 1"))
    with pytest.raises(CaseError, match="not_a_field"):
        runmod.prepare(case)
    case.write_text(shipped.read_text().replace('backend = "auto"', 'backend = "numpy"'))
    assert runmod.prepare(case)[1].name == "numpy"


def test_override_parsing_types_and_paths():
    assert parse_override("physics.reynolds=400") == (["physics", "reynolds"], 400)
    assert parse_override("run.backend=cupy") == (["run", "backend"], "cupy")
    assert parse_override("a.b=[1, 2.5]") == (["a", "b"], [1, 2.5])
    assert parse_override("a.flag=true") == (["a", "flag"], True)
    data = {"physics": {"reynolds": 100}}
    apply_override(data, "physics.reynolds=1000")
    apply_override(data, "output.interval=50")
    assert data == {"physics": {"reynolds": 1000}, "output": {"interval": 50}}
    with pytest.raises(CaseError, match="physics.reynolds is a value, not a table"):
        apply_override(data, "physics.reynolds.x=1")
    with pytest.raises(CaseError, match=r"--set: no '=' in it \(got 'nonsense'"):
        parse_override("nonsense")


class _Section(StrictModel):
    reynolds: float
    steps: int = 10


class _Toy(StrictModel):
    physics: _Section


def test_validation_errors_name_field_value_and_allowed():
    with pytest.raises(ValidationError) as info:
        _Toy.model_validate({"physics": {"reynolds": "fast", "stpes": 3}})
    err = validation_error_to_case_error(info.value, "toy.toml")
    text = str(err)
    assert "toy.toml (2 problems)" in text
    assert "physics.reynolds: got 'fast'" in text
    assert "physics.stpes: unknown key" in text
    assert err.field == "physics.reynolds"


def _structured_result():
    ny, nx = 4, 5
    rho = np.linspace(0.9, 1.1, nx * ny).reshape(ny, nx)
    vel = np.stack([rho - 1, 2 * (rho - 1)], axis=-1)
    snaps = [Snapshot(time=t, step=int(10 * t), fields={"rho": rho * (1 + t), "velocity": vel}) for t in (0.0, 1.0)]
    return Result("toy", "lbm", "numpy", "fp64", grid=StructuredGrid(nx, ny, spacing=0.25),
                  fields={"rho": rho, "velocity": vel}, snapshots=snaps,
                  series={"time": np.array([0.0, 1.0]), "drag": np.array([1.0, np.nan])},
                  metrics={"err": 1.5e-3, "nested": {"a": 1}}, derived={"tau": 0.6}, case_text="x = 1\n")


def test_result_files_round_trip_and_xdmf_points_at_real_datasets(tmp_path):
    res = _structured_result()
    files = res.write(tmp_path, plots=False)
    back = read_h5(files["h5"])
    np.testing.assert_array_equal(back["fields"]["rho"], res.fields["rho"])
    assert back["fields"]["velocity"].shape == (4, 5, 3)          # padded to 3 components
    np.testing.assert_array_equal(back["fields"]["velocity"][..., :2], res.fields["velocity"])
    assert back["snapshots"][1]["time"] == 1.0
    np.testing.assert_allclose(back["snapshots"][1]["fields"]["rho"], res.fields["rho"] * 2)
    assert back["metrics"]["err"] == 1.5e-3 and back["metrics"]["nested"] == {"a": 1}
    assert back["attrs"]["case_text"] == "x = 1\n"
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["metrics"]["err"] == 1.5e-3 and summary["files"]["h5"] == "result.h5"
    root = ET.parse(files["xdmf"]).getroot()
    refs = [d.text for d in root.iter("DataItem") if d.get("Format") == "HDF"]
    assert len(refs) == 4  # 2 snapshots x (rho, velocity)
    with h5py.File(files["h5"], "r") as f:
        for ref in refs:
            name, path = ref.split(":")
            assert name == "result.h5"
            dims = tuple(int(v) for v in root.find(f".//DataItem[.='{ref}']").get("Dimensions").split())
            assert f[path].shape == dims


def test_triangle_mesh_xdmf_reads_back_with_meshio(tmp_path):
    import meshio

    pts = np.array([[0, 0], [1, 0], [0, 1], [1, 1]], dtype=float)
    tri = np.array([[0, 1, 2], [1, 3, 2]])
    u = pts[:, 0] + 2 * pts[:, 1]
    disp = np.stack([pts[:, 0], -pts[:, 1]], axis=1)
    res = Result("mesh", "fem", "numpy", "fp64", grid=TriangleMesh(pts, tri), fields={"u": u, "displacement": disp})
    files = res.write(tmp_path, plots=False)
    mesh = meshio.read(files["xdmf"])
    np.testing.assert_allclose(mesh.points[:, :2], pts)
    np.testing.assert_array_equal(mesh.cells_dict["triangle"], tri)
    np.testing.assert_allclose(mesh.point_data["u"], u)
    np.testing.assert_allclose(mesh.point_data["displacement"][:, :2], disp)


def test_atomic_write_leaves_the_old_file_when_writing_fails(tmp_path):
    target = tmp_path / "summary.json"
    write_json({"ok": 1}, target)

    class Boom:
        pass

    with pytest.raises(TypeError):
        write_json({"bad": Boom()}, target)
    assert json.loads(target.read_text()) == {"ok": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]  # no temporary left behind


def test_cli_info_and_usage_errors(capsys):
    assert cli.main(["info", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["backends"]["numpy"]["available"] is True
    assert set(data["precisions"]) == {"fp64", "fp32", "fp16s", "fp16c", "mixed"}
    with pytest.raises(SystemExit) as exc:
        cli.main(["run", "--precision", "fp128"])
    assert exc.value.code == 2
    capsys.readouterr()
    assert cli.main(["run"]) == 2
    assert "case: no case given (got None; allowed: a case file, or --resume DIR)" in capsys.readouterr().err
    assert cli.main(["run", "does/not/exist.toml"]) == 2
    assert "case: file not found (got 'does/not/exist.toml'" in capsys.readouterr().err


def test_policies_encode_and_decode_populations():
    from hpcsolve.core.precision import FP32, FP64, MIXED

    h = np.linspace(-0.02, 0.02, 101)
    assert np.array_equal(FP64.decode(FP64.encode(h)), h)            # float64: the identity, bit for bit
    g = FP16S.encode(h.astype(np.float32))
    assert g.dtype == np.float16 and np.allclose(g.astype(np.float64), 256.0 * h, rtol=1e-3, atol=1e-6)
    back = FP16S.decode(g)
    assert back.dtype == np.float32
    assert np.max(np.abs(back - h)) < 2.0 ** -11 * 0.02 + 1e-9     # half an fp16 ulp of the largest value
    assert FP32.fem_method == FP64.fem_method == "cg" and MIXED.fem_method == "cg-reliable"
