"""Checkpoints and restart of LBM runs: an interrupted-then-resumed run gives bitwise the same
fields, series and snapshots as an uninterrupted one; a killed run leaves readable files."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from hpcsolve import cli
from hpcsolve.core.cases import load_case
from hpcsolve.core import checkpoint
from hpcsolve.core.checkpoint import latest_checkpoint, list_checkpoints
from hpcsolve.core.errors import RunInterrupted
from hpcsolve.lbm import checkpoints as lbm_checkpoints
from hpcsolve.lbm import runner
from hpcsolve.core.precision import get_precision
from hpcsolve.core.results import read_h5
from stopping import StopAfter

ROOT = Path(__file__).parents[2]
CAVITY = ROOT / "cases" / "lid_driven_cavity.toml"
SMALL = ["lattice.resolution=20", "time.steps=700", "time.monitor_interval=50", "time.checkpoint_interval=200",
         "time.output_interval=0.5", "steady.enabled=true", "steady.interval=100", "steady.tolerance=1e-9"]


def _same(a, b):
    assert set(a.fields) == set(b.fields)
    for k in a.fields:
        assert np.array_equal(a.fields[k], b.fields[k]), k
    assert set(a.series) == set(b.series)
    for k in a.series:
        assert np.array_equal(a.series[k], b.series[k], equal_nan=True), k
    assert [(s.step, s.time) for s in a.snapshots] == [(s.step, s.time) for s in b.snapshots]
    for sa, sb in zip(a.snapshots, b.snapshots):
        for k in sa.fields:
            assert np.array_equal(sa.fields[k], sb.fields[k]), (sa.step, k)


@pytest.mark.parametrize("precision", ["fp64", "fp32", "fp16s", "fp16c"])
def test_interrupted_and_resumed_run_is_bitwise_identical(tmp_path, precision):
    case = load_case(CAVITY, SMALL)
    policy = get_precision(precision)
    full = runner.run(case, "numpy", policy, progress=False)
    with pytest.raises(RunInterrupted) as info:
        runner.run(case, "numpy", policy, progress=False, stop=StopAfter(5), checkpoint_dir=tmp_path)
    partial = info.value.result
    assert partial.status == "interrupted" and partial.metrics["steps"] == 250
    ckpts = list_checkpoints(tmp_path)
    assert [p.name for p in ckpts] == ["checkpoint_0000000200.h5", "checkpoint_0000000250.h5"]
    resumed = runner.run(case, "numpy", policy, progress=False, checkpoint_dir=tmp_path,
                         resume=latest_checkpoint(tmp_path))
    assert resumed.metrics["resumed_from_step"] == 250 and resumed.metrics["steps"] == full.metrics["steps"] == 700
    # the timings span both parts of the run: total includes the time before the interruption
    assert resumed.timings["total_s"] >= resumed.timings["step_s"] > 0
    _same(full, resumed)
    # the last checkpoint written during the resumed run holds the state of step 600 (two kept)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["checkpoint_0000000400.h5", "checkpoint_0000000600.h5"]


def test_resume_refuses_another_precision_unless_forced(tmp_path, capsys):
    out = tmp_path / "run"
    with pytest.raises(RunInterrupted):
        runner.run(load_case(CAVITY, SMALL), "numpy", get_precision("fp32"), progress=False, stop=StopAfter(5),
                   checkpoint_dir=out)
    assert cli.main(["run", "--resume", str(out), "--precision", "fp64", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "--resume" in err and "the checkpoint does not match this run" in err and "precision" in err
    assert cli.main(["run", str(CAVITY), "--resume", str(out), "--quiet"]) == 2  # case without the overrides
    assert "case differs in" in capsys.readouterr().err


@pytest.mark.parametrize("saved, now", [("fp32", "fp64"), ("fp64", "fp16c"), ("fp16s", "fp32")])
def test_forced_resume_in_another_precision_continues_from_the_converted_state(tmp_path, capsys, saved, now):
    """--force with another precision: the checkpoint's state decoded with its policy and stored in the run's
    (round to nearest), then stepped on in the new precision. The resumed run equals a run of the new precision
    started from that converted state at the checkpoint's step, bit for bit."""
    from hpcsolve.lbm.setup import build_setup
    from hpcsolve.lbm.steppers.stepper import get_stepper

    out = tmp_path / "run"
    case = load_case(CAVITY, SMALL)
    with pytest.raises(RunInterrupted):
        runner.run(case, "numpy", get_precision(saved), progress=False, stop=StopAfter(5), checkpoint_dir=out)
    ckpt = latest_checkpoint(out)
    old, new = get_precision(saved), get_precision(now)
    # the conversion itself, against what each storage means (not the encode / decode it is written with)
    g = ckpt.arrays["populations"]
    converted = lbm_checkpoints.restored_populations(ckpt, new)
    if (saved, now) == ("fp32", "fp64"):
        assert converted.dtype == np.float64 and np.array_equal(converted, g.astype(np.float64))
    elif (saved, now) == ("fp16s", "fp32"):       # fp16s stores 256 h in float16: exact in float32
        assert converted.dtype == np.float32 and np.array_equal(converted, g.astype(np.float32) / 256)
    else:                                          # fp64 -> FP16C: within half a unit of its 11-bit mantissa
        from hpcsolve.core import fp16c
        back = fp16c.decode(converted).astype(np.float64)
        assert converted.dtype == np.uint16 and np.all(np.abs(back - g) <= np.abs(g) * 2.0 ** -12 + 2.0 ** -26)
    assert cli.main(["run", "--resume", str(out), "--precision", now, "--force", "--quiet", "--no-plots"]) == 0, \
        capsys.readouterr().err
    resumed = read_h5(out / "result.h5")
    assert resumed["attrs"]["precision"] == now and resumed["metrics"]["resumed_from_step"] == ckpt.step == 250
    # the same steps by hand: the converted state in a new-precision stepper, to the resumed run's last checkpoint
    last = latest_checkpoint(out)
    assert last.step > ckpt.step and last.arrays["populations"].dtype == np.dtype(new.storage)
    _, _, setup = build_setup(case, new)
    stepper = get_stepper("numpy", setup)
    stepper.load_populations(new.encode(old.decode(ckpt.arrays["populations"]).astype(new.compute)), ckpt.step)
    stepper.step(last.step - ckpt.step)
    assert np.array_equal(stepper.populations().view(np.uint8), last.arrays["populations"].view(np.uint8))


def test_forced_resume_of_checkpoints_without_their_precision_names_the_field(tmp_path, capsys):
    """--force and a checkpoint whose meta.precision is gone: the storage of its populations is unknown, so the
    checkpoint is damaged (the run's precision used to be assumed, with a message about the wrong one)."""
    import h5py

    out = tmp_path / "run"
    with pytest.raises(RunInterrupted):
        runner.run(load_case(CAVITY, SMALL), "numpy", get_precision("fp32"), progress=False, stop=StopAfter(5),
                   checkpoint_dir=out)
    for p in list_checkpoints(out):
        with h5py.File(p, "r+") as f:
            meta = json.loads(f.attrs["meta"])
            del meta["precision"]
            f.attrs["meta"] = json.dumps(meta)
            checkpoint.seal(f)   # a checkpoint written so (the checksum alone would call it damaged: "meta")
    capsys.readouterr()
    assert cli.main(["run", "--resume", str(out), "--force", "--quiet", "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "meta.precision: " in err and "the precision the checkpoint's populations are stored in" in err, err


def test_resume_past_the_end_is_refused_naming_the_end(tmp_path, capsys):
    """A checkpoint beyond the run's last step (an end shortened with --force) is exit 2 naming time.steps /
    time.end_time, and the folder is as it was: it used to run nothing and report a completed run of more steps
    than planned."""
    out = tmp_path / "run"
    with pytest.raises(RunInterrupted):
        runner.run(load_case(CAVITY, SMALL), "numpy", get_precision("fp64"), progress=False, stop=StopAfter(5),
                   checkpoint_dir=out)
    before = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file() and not p.name.startswith(".hpcsolve")}
    capsys.readouterr()
    code = cli.main(["run", "--resume", str(out), "--force", "--set", "time.steps=200", "--quiet", "--no-plots"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("hpcsolve: error: time.steps: ") and "step 250" in err, err
    assert {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file() and not p.name.startswith(".hpcsolve")} \
        == before
    code = cli.main(["run", "--resume", str(out), "--force", "--set", "time.steps=250", "--quiet", "--no-plots"])
    assert code == 0, capsys.readouterr().err      # at the end exactly: nothing left to run, not past it
    assert read_h5(out / "result.h5")["metrics"]["steps"] == 250


@pytest.mark.slow
def test_killed_run_keeps_readable_files_and_resumes_bitwise(tmp_path):
    out = tmp_path / "run"
    args = ["--set", "lattice.resolution=24", "--set", "time.steps=6000", "--set", "time.monitor_interval=100",
            "--set", "time.checkpoint_interval=500", "--set", "time.output_interval=2", "--set", "steady.enabled=false"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg"}
    proc = subprocess.Popen([sys.executable, "-m", "hpcsolve.cli", "run", str(CAVITY), "--out", str(out), "--quiet",
                             "--no-plots", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not list_checkpoints(out) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be interrupted"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted at step" in err and "--resume" in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    stopped = summary["metrics"]["steps"]
    assert 0 < stopped < 6000
    partial = read_h5(out / "result.h5")
    assert partial["attrs"]["status"] == "interrupted" and np.isfinite(partial["fields"]["velocity"]).all()
    assert latest_checkpoint(out).step == stopped and len(list_checkpoints(out)) <= 2

    code = cli.main(["run", "--resume", str(out), "--quiet", "--no-plots"])
    assert code == 0
    resumed = read_h5(out / "result.h5")
    assert resumed["attrs"]["status"] == "completed" and resumed["metrics"]["resumed_from_step"] == stopped
    full_dir = tmp_path / "full"
    assert cli.main(["run", str(CAVITY), "--out", str(full_dir), "--quiet", "--no-plots", *args]) == 0
    full = read_h5(full_dir / "result.h5")
    for k, v in full["fields"].items():
        assert np.array_equal(v, resumed["fields"][k]), k
    for k, v in full["series"].items():
        assert np.array_equal(v, resumed["series"][k], equal_nan=True), k


def _interrupt_resume_compare(tmp_path, backend, precision, overrides, stop_after):
    case = load_case(CAVITY, overrides)
    policy = get_precision(precision)
    full = runner.run(case, backend, policy, progress=False)
    with pytest.raises(RunInterrupted):
        runner.run(case, backend, policy, progress=False, stop=StopAfter(stop_after), checkpoint_dir=tmp_path)
    resumed = runner.run(case, backend, policy, progress=False, checkpoint_dir=tmp_path,
                         resume=latest_checkpoint(tmp_path))
    assert resumed.metrics["resumed_from_step"] > 0
    _same(full, resumed)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp64", "fp32", "fp16s"])
def test_gpu_restart_is_bitwise_identical(tmp_path, gpu_backend_names, precision):
    big = ["lattice.resolution=96", "time.steps=1400", "time.monitor_interval=100", "time.checkpoint_interval=400",
           "time.output_interval=1", "steady.enabled=false"]
    for backend in gpu_backend_names:
        _interrupt_resume_compare(tmp_path / backend, backend, precision, big, stop_after=6)


@pytest.mark.cudasim
def test_numba_kernels_restart_bitwise_under_the_simulator(tmp_path):
    tiny = ["lattice.resolution=6", "time.steps=12", "time.monitor_interval=3", "time.checkpoint_interval=6",
            "steady.enabled=false"]
    _interrupt_resume_compare(tmp_path, "numba-cuda", "fp32", tiny, stop_after=3)


def test_resume_of_a_finished_run_is_refused_unless_forced(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["--set", "lattice.resolution=16", "--set", "time.steps=400", "--set", "time.checkpoint_interval=200",
            "--set", "steady.enabled=false", "--no-plots", "--quiet"]
    assert cli.main(["run", str(CAVITY), "--out", str(out), *args]) == 0
    before = (out / "result.h5").stat().st_mtime_ns
    assert cli.main(["run", "--resume", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "--resume" in err and "already finished (status 'completed')" in err and "--force" in err
    assert (out / "result.h5").stat().st_mtime_ns == before          # nothing was overwritten
    assert cli.main(["run", "--resume", str(out), "--quiet", "--force", "--no-plots"]) == 0
