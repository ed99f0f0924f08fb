"""run.py: memory refusal before allocation, dry-run estimates, GPU errors as one message."""

import types
from pathlib import Path

import pytest

from hpcsolve import cli
from hpcsolve import run as runmod
from hpcsolve.core.errors import BackendError, CaseError

CASES = Path(__file__).parent.parent / "cases"


def test_a_huge_case_is_described_without_building_its_geometry(capsys):
    # 120000^2 cells: the populations alone would need ~2 TB; describing it must not try to build it
    info = runmod.describe(CASES / "lid_driven_cavity.toml", "numpy", overrides=["lattice.resolution=120000"],
                           estimate=True)
    assert "geometry not built" in info["note"] and info["host_memory_bytes"] > 120000**2 * 2 * 9 * 8
    assert info["memory_reduce_field"] == "lattice.resolution"
    assert cli.main(["run", str(CASES / "lid_driven_cavity.toml"), "--set", "lattice.resolution=120000",
                     "--quiet"]) == 2
    assert "lattice.resolution: the run would not fit: it needs about" in capsys.readouterr().err


@pytest.mark.parametrize("overrides, field", [(["mesh.nx=20000"], "mesh.nx"),
                                              (["mesh.nx=2000", "mesh.refine=8"], "mesh.refine")])
def test_a_huge_mesh_is_refused_before_it_is_built_naming_the_field(overrides, field, capsys):
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    info = runmod.describe(CASES / "poisson_manufactured.toml", "numpy", overrides=overrides)
    assert "mesh not built" in info["note"] and info["memory_reduce_field"] == field
    assert info["triangles"] >= 2 * 2000**2 and info["host_memory_bytes"] > info["triangles"] * 100
    args = [a for o in overrides for a in ("--set", o)]
    assert cli.main(["run", str(CASES / "poisson_manufactured.toml"), *args, "--quiet"]) == 2
    assert f"{field}: the run would not fit" in capsys.readouterr().err
    # nothing of the mesh's size was allocated (ru_maxrss is in KiB)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 * 1024


def test_a_run_that_does_not_fit_is_refused_before_allocation(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(runmod, "available_memory", lambda backend: 1000)
    monkeypatch.setattr(runmod.backends, "host_memory_available", lambda: 1000)
    with pytest.raises(CaseError, match=r"lattice.resolution: the run would not fit: it needs about 0\.\d\d GiB of "
                                        r"host memory but only 0\.00 GiB are free"):
        runmod.run_case(CASES / "lid_driven_cavity.toml", "numpy", out=tmp_path / "out")
    assert not (tmp_path / "out").exists()
    code = cli.main(["run", str(CASES / "poisson_manufactured.toml"), "--out", str(tmp_path / "o2"), "--quiet"])
    assert code == 2 and "mesh.nx: the run would not fit" in capsys.readouterr().err
    code = cli.main(["run", str(CASES / "lid_driven_cavity.toml"), "--dry-run"])
    assert code == 2 and "would not fit" in capsys.readouterr().err


@pytest.mark.parametrize("case", ["lid_driven_cavity.toml", "poisson_manufactured.toml"])
def test_dry_run_reports_memory_and_a_positive_time_estimate(case):
    info = runmod.describe(CASES / case, "numpy", estimate=True)
    assert runmod.memory_needed(info) > 0
    assert info["estimated_seconds"] > 0 and "device_memory_free_bytes" not in info     # a CPU run: no device


def test_gpu_library_errors_become_one_backend_error():
    OutOfMemoryError = type("OutOfMemoryError", (Exception,), {"__module__": "cupy.cuda.memory"})
    err = runmod._gpu_error(OutOfMemoryError("Out of memory allocating 4,294,967,296 bytes"), "cupy")
    assert isinstance(err, BackendError) and err.exit_code == 2
    assert "cupy: GPU error (OutOfMemoryError): Out of memory allocating" in str(err)
    assert "reduce the problem size" in str(err)
    assert runmod._gpu_error(ValueError("x"), "cupy") is None           # not a GPU library error
    assert runmod._gpu_error(OutOfMemoryError("x"), "numpy") is None    # not a GPU backend


@pytest.mark.gpu
def test_gpu_out_of_memory_is_refused_or_reported_clearly(gpu_backend_names, capsys):
    huge = ["--set", "lattice.resolution=120000", "--set", "time.steps=1", "--dry-run"]   # ~2 TB of populations
    for backend in gpu_backend_names:
        # refused before allocation, with the device's free memory in the message
        assert cli.main(["run", str(CASES / "lid_driven_cavity.toml"), "--backend", backend, *huge]) == 2
        assert "would not fit" in capsys.readouterr().err
    # the GPU libraries' own out-of-memory errors (a plain device allocation of 256 GiB, more than any
    # card has) become one BackendError
    for backend in gpu_backend_names:
        try:
            if backend == "cupy":
                import cupy

                cupy.empty(2**38, dtype=cupy.uint8)
            else:
                import numpy as np
                from numba import cuda

                cuda.device_array(2**38, dtype=np.uint8)
        except Exception as exc:  # noqa: BLE001 - the point is what the library raises
            err = runmod._gpu_error(exc, backend)
            assert isinstance(err, BackendError), (backend, type(exc))
            assert f"{backend}: GPU error (" in str(err)
        else:
            pytest.fail(f"{backend}: allocating 256 GiB did not fail")


def test_an_interrupted_fem_run_leaves_a_summary_marked_interrupted(tmp_path, monkeypatch):
    import json

    from hpcsolve.core.errors import RunInterrupted
    from hpcsolve.fem import runner as fem_runner

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(fem_runner, "run", interrupted)
    with pytest.raises(RunInterrupted, match="interrupted before it finished"):
        runmod.run_case(CASES / "poisson_manufactured.toml", "numpy", out=tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["case"] == "poisson_manufactured"


@pytest.mark.parametrize("overrides", [[], ["physics.reynolds=20", "steady.tolerance=1e-6"]])
def test_dry_run_predicts_the_steady_stop_of_the_run(overrides):
    """The coarser copy of the case stops at the same physical time: the predicted step is the step at which
    the run itself stops (Poiseuille, 16 cells across; the prediction runs it at 8)."""
    info = runmod.describe(CASES / "poiseuille.toml", "numpy", overrides=overrides, estimate=True)
    pred = info["steady_prediction"]
    res = runmod.run_case(CASES / "poiseuille.toml", "numpy", overrides=overrides, progress=False, plots=False)
    assert res.status == "converged"
    steps = res.metrics["steps"]
    interval = 1000
    assert abs(pred["predicted_steps"] - steps) <= interval
    assert info["estimated_steps"] == pred["predicted_steps"] < info["steps"]
    assert pred["surrogate_resolution"] == 8


def test_dry_run_counts_snapshots_per_output_not_per_monitor_point(monkeypatch):
    """Snapshot fields cost per output (every output_interval), monitor points per monitor_interval: a snapshot
    made to cost 0.2 s adds about 2 x 0.2 s to the estimate of a run with 2 outputs and 129 monitor points (not
    129 x 0.2 s, which the cylinder 2D-2 estimate on the GPU did, 5x too high)."""
    from hpcsolve.lbm import estimate as lbm_estimate

    over = ["time.monitor_interval=10", "time.output_interval=0.5", "lattice.resolution=16"]
    # the probe's clock advanced by the fake work alone (a snapshot costs 0.2 time units, everything else 0), so
    # the estimate's terms are exact whatever the machine's load
    # (the runner's own clock only: the backend's step timer keeps the real one, so the step probe ends)
    clock = _FakeClock()
    monkeypatch.setattr(lbm_estimate, "_time", types.SimpleNamespace(perf_counter=clock))
    real = lbm_estimate.snapshot_fields

    def slow(*args):
        clock.now += 0.2
        return real(*args)

    monkeypatch.setattr(lbm_estimate, "snapshot_fields", slow)
    info = runmod.describe(CASES / "taylor_green.toml", "numpy", overrides=over, estimate=True)
    assert "2 snapshots at 200 ms" in info["estimate_basis"], info["estimate_basis"]
    assert "monitor points at 0 ms" in info["estimate_basis"]      # a monitor point is no snapshot
    assert info["estimated_seconds"] >= 2 * 0.2


def test_dry_run_counts_the_monitor_points_outputs_force():
    """The run stops for a monitor point at every multiple of monitor_interval and of the output interval; the
    estimate counts the union (Taylor-Green, 16 cells: 320 steps, monitor every 100, output every 16 steps:
    3 + 20 stops, recorded with the initial state as 24 points; the estimate adds the end once more)."""
    from hpcsolve.lbm.estimate import _stops

    assert _stops(320, (100, 16, 0)) == 23 and _stops(320, (100, 20, 0)) == 3 + 16 - 3
    over = ["time.monitor_interval=100", "time.output_interval=0.05", "lattice.resolution=16"]
    info = runmod.describe(CASES / "taylor_green.toml", "numpy", estimate=True, overrides=over)
    res = runmod.run_case(CASES / "taylor_green.toml", "numpy", progress=False, plots=False, overrides=over)
    assert res.metrics["steps"] == 320 and len(res.series["step"]) == 24
    assert "25 monitor points" in info["estimate_basis"] and "20 snapshots" in info["estimate_basis"]


class _FakeClock:
    """perf_counter for the probe tests: advanced by the fake work, not by the machine."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_ramp_probe_stays_inside_the_smooth_start(monkeypatch):
    """The smooth-start probe times only smooth-start steps: stepping past its end (steps one launch each at
    0.04 ms, then graph steps at 0.005 ms) timed 2D-1's smooth start at 0.02 ms on the H200, 40 % short. A
    fake stepper whose steps cost 4 (ramp) or 1 (after it) time units: the probe returns 4 per step and never
    steps past the ramp."""
    from contextlib import contextmanager

    from hpcsolve.lbm import estimate as lbm_estimate

    clock = _FakeClock()
    monkeypatch.setattr(lbm_estimate._time, "perf_counter", clock)
    ramp = 6400

    class Stepper:
        time_step = 0

        def step(self, n):
            for _ in range(n):
                clock.now += 4e-5 if self.time_step < ramp else 1e-5
                self.time_step += 1

    class Backend:
        def synchronize(self):
            pass

        @contextmanager
        def timer(self):
            class T:
                seconds = 0.0
            t, t0 = T(), clock.now
            yield t
            t.seconds = clock.now - t0

    st = Stepper()
    per = lbm_estimate._probe_steps(st, Backend(), batch=False, limit=ramp)
    assert per == pytest.approx(4e-5) and st.time_step <= ramp
    st = Stepper()       # without the limit, the same probe runs past the ramp and times the cheaper steps
    assert lbm_estimate._probe_steps(st, Backend(), batch=False) < 3e-5 and st.time_step > ramp


def test_monitor_probe_lengthens_for_monitor_bound_runs(monkeypatch):
    """A monitor point's cost is the median of the later half of warm points, timed for 5 % of the run's
    predicted monitor time (at most 1.5 s): points that cost 7 time units for their first 0.5 s and 4.8 after
    it (the H200 host's pattern on Cylinder 2D-2) give 4.8 for a run of 4,802 points, and a short run keeps
    the 0.2 s probe."""
    from hpcsolve.lbm import estimate as lbm_estimate

    clock = _FakeClock()
    monkeypatch.setattr(lbm_estimate._time, "perf_counter", clock)
    calls = []

    def point():
        calls.append(1)
        clock.now += 7e-3 if clock.now < 0.5 else 4.8e-3

    assert lbm_estimate._median_time(point, points=4802) == pytest.approx(4.8e-3)
    assert 1.0 < clock.now < 1.6
    calls.clear()
    clock.now = 0.0
    assert lbm_estimate._median_time(point, points=20) == pytest.approx(7e-3)      # no more points than the run
    assert len(calls) == 20


def test_monitor_points_go_to_the_device_only_where_it_has_room():
    """The device path of monitor points needs DEVICE_MONITOR_BYTES_PER_CELL per cell beyond the run's estimate:
    taken where the device has 1.25x that free, else the host path (and never on the CPU)."""
    from hpcsolve.lbm import monitor as lbm_monitor

    class Gpu:
        gpu = True

        def __init__(self, free):
            self.free = free

        def available_memory(self):
            return self.free

    per = lbm_monitor.DEVICE_MONITOR_BYTES_PER_CELL
    cells = 1000 * 1000
    assert lbm_monitor.device_monitor(Gpu(2 * per * cells), cells)
    assert not lbm_monitor.device_monitor(Gpu(per * cells), cells)
    assert not lbm_monitor.device_monitor(Gpu(None), cells)

    class Cpu:
        gpu = False

    assert not lbm_monitor.device_monitor(Cpu(), cells)


def test_dry_run_counts_the_steady_checks():
    """With steady.enabled the run copies the fluid velocity to the host every steady.interval steps after the
    smooth start: the estimate counts those checks ((predicted steps - ramp) // interval of them)."""
    info = runmod.describe(CASES / "poiseuille.toml", "numpy", estimate=True,
                           overrides=["lattice.resolution=8", "time.monitor_interval=100", "steady.interval=500"])
    steps = info["estimated_steps"]
    assert f"{steps // 500} steady checks at" in info["estimate_basis"]


def test_a_loaded_case_edited_in_python_is_validated_again_as_a_whole(tmp_path):
    """Field edits are checked one by one (pydantic), but the rules across fields only ran when the case was
    loaded: a manufactured Poisson case turned into elasticity ran and reported a zero displacement as converged."""
    import hpcsolve
    from hpcsolve.core.errors import CaseError, OutputError

    case = hpcsolve.load_case(CASES / "poisson_manufactured.toml", ["mesh.nx=4"])
    case.problem.kind = "elasticity"
    with pytest.raises(CaseError, match=r"boundary.dirichlet\[0\]: an elasticity problem takes displacement"):
        hpcsolve.run_case(case, "numpy", progress=False)
    ok = hpcsolve.load_case(CASES / "poisson_manufactured.toml", ["mesh.nx=4"])
    with pytest.raises(OutputError, match="out: it is empty"):
        hpcsolve.run_case(ok, "numpy", progress=False, out="")
    with pytest.raises(OutputError, match="out: it is empty"):
        hpcsolve.compare(ok, backends=["numpy"], precisions=["fp32"], out="", warmup=False, repeats=1)
    assert hpcsolve.run_case(ok, "numpy", progress=False).status == "converged"


def test_python_api_list_arguments_and_empty_names():
    """One string where a list is expected is a list of one (it was split into characters: "--set: no '=' in it
    (got 'l')"); "" as a backend or precision, an empty list of them, or True as a tolerance are errors naming
    the argument (they silently meant the case's own, the reference alone, or 1)."""
    import hpcsolve
    from hpcsolve.core.errors import CaseError

    res = hpcsolve.run_case(CASES / "poisson_manufactured.toml", "numpy", progress=False, overrides="mesh.nx=4")
    assert res.status == "converged" and res.derived["points"] == 25
    for kwargs, name in (({"backend": ""}, "backend"), ({"precision": " "}, "precision"),
                         ({"overrides": 5}, "overrides")):
        with pytest.raises(CaseError, match=f"^{name}: "):
            hpcsolve.run_case(CASES / "poisson_manufactured.toml", progress=False, **{"backend": "numpy", **kwargs})
    comp = hpcsolve.compare(CASES / "poisson_manufactured.toml", backends="numpy", precisions="fp32",
                            overrides="mesh.nx=4", warmup=False, repeats=1)
    assert {(r.backend, r.precision) for r in comp.runs} == {("numpy", "fp64"), ("numpy", "fp32")}
    for kwargs, name in (({"precisions": []}, "precisions"), ({"backends": []}, "backends"),
                         ({"tolerance": True}, "--tolerance")):
        with pytest.raises(CaseError, match=f"^{name}: "):
            hpcsolve.compare(CASES / "poisson_manufactured.toml", overrides=["mesh.nx=4"], warmup=False, repeats=1,
                             **{"backends": ["numpy"], "precisions": ["fp32"], **kwargs})
