"""Reliability IV (issue 49), items 2, 5 and 6: a failed --overwrite keeps the previous result (a checkpoint of the
new run is no result), a checkpoint of another case is not resumed silently, and no file hpcsolve reads is opened
unless it is a regular file of a sane size. Each test failed on the code before its fix."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hpcsolve import cli
from hpcsolve.core import checkpoint as ckmod
from hpcsolve.core import outdir
from hpcsolve.core.checkpoint import list_checkpoints, read_checkpoint
from hpcsolve.core.errors import CaseError, OutputError
from hpcsolve.core.results import read_h5, read_result_folder
from test_generated_inputs import Hang, outer_limit

ROOT = Path(__file__).parents[2]
CAVITY = ROOT / "cases" / "lid_driven_cavity.toml"
TG = ROOT / "cases" / "taylor_green.toml"
SMALL = ["--set", "lattice.resolution=16", "--set", "time.steps=400", "--set", "time.monitor_interval=50",
         "--set", "time.checkpoint_interval=100", "--set", "steady.enabled=false"]
TG_SMALL = ["--set", "lattice.resolution=16", "--set", "time.steps=400", "--set", "time.monitor_interval=50",
            "--set", "time.checkpoint_interval=100"]


def _run(case: Path, *args) -> int:
    return cli.main(["run", str(case), "--backend", "numpy", "--quiet", "--no-plots", *args])


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and not p.name.startswith(".hpcsolve")}


def _hidden(out: Path) -> list:
    return sorted(str(p) for p in out.rglob("*") if p.name.startswith((outdir.PREVIOUS_PREFIX, ".staging-"))
                  or p.name.endswith(".tmp"))


# ------------------------------------------------------------------------------------------------ item 2

def _fail_checkpoint_write(monkeypatch, at: int) -> None:
    """The ``at``-th checkpoint write of the run fails as on a full disk."""
    real, count = ckmod.write_h5_atomic, {"n": 0}

    def write(path, fill):
        count["n"] += 1
        if count["n"] == at:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, fill)

    monkeypatch.setattr(ckmod, "write_h5_atomic", write)


@pytest.mark.parametrize("at", [1, 2, 3])
def test_an_overwrite_that_fills_the_disk_after_its_checkpoints_keeps_the_previous_result(tmp_path, monkeypatch,
                                                                                           capsys, at):
    """Issue 49 item 2: the new run wrote two checkpoints, then the disk filled; the previous result.h5, summary.json
    and manifest.json used to be deleted (the new checkpoints counted as the new run's state)."""
    out = tmp_path / "run"
    assert _run(CAVITY, "--out", str(out), *SMALL) == 0
    before, run_id = _files(out), read_result_folder(out)["run_id"]
    _fail_checkpoint_write(monkeypatch, at)
    capsys.readouterr()
    assert _run(CAVITY, "--out", str(out), "--overwrite", *SMALL, "--set", "physics.reynolds=50") == 2
    err = capsys.readouterr().err
    assert "(No space left on device)" in err and "previous result in --out was put back" in err, err
    assert err.count("\n") == 1
    assert _files(out) == before and read_result_folder(out)["run_id"] == run_id
    assert _hidden(out) == []


def test_an_overwrite_killed_after_its_checkpoints_gets_the_previous_result_back(tmp_path):
    """A run killed after its checkpoints (no marker of its own): the next claim puts the previous result back and
    removes the new run's checkpoints (before, the previous result was deleted)."""
    out = tmp_path / "run"
    assert _run(CAVITY, "--out", str(out), *SMALL) == 0
    before = _files(out)
    journal = outdir.set_aside(out)
    shutil.copytree(out / "checkpoints", tmp_path / "ck")
    for p in (tmp_path / "ck").iterdir():          # the new run's checkpoints under the previous run's names
        if p.name.startswith("checkpoint_"):
            (out / "checkpoints" / p.name).write_bytes(b"new run's checkpoint")
    (out / "checkpoints" / "checkpoint_0000000100.h5").write_bytes(b"new run's other checkpoint")
    (out / "result.h5").write_bytes(b"new run's partial result")
    assert not outdir.holds_own_state(out)
    assert outdir.remove_stale(out) == [journal.name]
    assert _files(out) == before and _hidden(out) == []


def test_an_interrupted_overwrite_with_a_checkpoint_replaces_the_previous_result(tmp_path):
    """The rule's other side: a result of the new run (an interrupted one naming a checkpoint to resume from)
    replaces the previous result."""
    out = tmp_path / "run"
    assert _run(CAVITY, "--out", str(out), *SMALL) == 0
    journal = outdir.set_aside(out)
    assert _run(CAVITY, "--out", str(tmp_path / "new"), *SMALL) == 0
    for p in (tmp_path / "new").rglob("*"):
        if p.is_file():
            (out / p.relative_to(tmp_path / "new")).parent.mkdir(exist_ok=True)
            shutil.copy(p, out / p.relative_to(tmp_path / "new"))
    assert outdir.holds_own_state(out)
    assert outdir.put_back(out, journal) is False
    assert _files(out) == _files(tmp_path / "new") and _hidden(out) == []


def test_ulimit_f_overwrite_keeps_the_previous_result(tmp_path):
    """The issue's command: an --overwrite under ``ulimit -f`` (each file at most 400 kB: the larger run's
    checkpoints do not fit) ends with one error and the first run's result complete."""
    out = tmp_path / "run"
    assert _run(CAVITY, "--out", str(out), *SMALL) == 0
    before = _files(out)
    cmd = (f"ulimit -f 400; exec {sys.executable} -m hpcsolve.cli run {CAVITY} --backend numpy --quiet --no-plots "
           f"--out {out} --overwrite --set lattice.resolution=160 --set time.steps=40 --set time.monitor_interval=10 "
           f"--set time.checkpoint_interval=10 --set steady.enabled=false")
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "MPLBACKEND": "Agg"})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "previous result in --out was put back" in proc.stderr
    assert _files(out) == before and _hidden(out) == []


# ------------------------------------------------------------------------------------------------ item 5

def _interrupted(out: Path) -> None:
    """As if the run in ``out`` had been interrupted: its summary says so."""
    summary = json.loads((out / "summary.json").read_text())
    (out / "summary.json").write_text(json.dumps({**summary, "status": "interrupted"}))


def test_a_checkpoint_of_another_case_is_refused_naming_both(tmp_path, capsys):
    """Issue 49 item 5: a Taylor-Green checkpoint under the newest name of a cavity's folder resumed silently and the
    folder ended with a taylor_green result."""
    cav, tg = tmp_path / "cavity", tmp_path / "tg"
    assert _run(CAVITY, "--out", str(cav), *SMALL, "--set", "time.steps=200") == 0
    assert _run(TG, "--out", str(tg), *TG_SMALL) == 0
    tg_ck = list_checkpoints(tg)[-1]
    shutil.copy(tg_ck, cav / "checkpoints" / "checkpoint_0000000300.h5")
    _interrupted(cav)
    before = _files(cav)
    capsys.readouterr()
    assert cli.main(["run", "--resume", str(cav), "--quiet", "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hpcsolve: error: --resume: ") and err.count("\n") == 1, err
    assert "'taylor_green'" in err and "'lid_driven_cavity'" in err and "checkpoint_0000000300.h5" in err, err
    tg_hash = read_checkpoint(tg_ck).meta["case_hash"]
    assert tg_hash in err and read_checkpoint(list_checkpoints(cav)[0]).meta["case_hash"] in err
    assert _files(cav) == before
    # --force resumes it, with one warning naming both
    with pytest.warns(UserWarning, match="--resume --force: a checkpoint of another case than the folder's run: "
                                         "checkpoint_0000000300.h5 is of case 'taylor_green'.*'lid_driven_cavity'"):
        assert cli.main(["run", "--resume", str(cav), "--quiet", "--no-plots", "--force"]) == 0


def test_a_checkpoint_of_another_case_named_by_the_result_only_is_refused(tmp_path, capsys):
    """The folder's result alone (no other checkpoint) names its case: the foreign checkpoint is refused too."""
    cav, tg = tmp_path / "cavity", tmp_path / "tg"
    assert _run(CAVITY, "--out", str(cav), *SMALL, "--set", "time.steps=200") == 0
    assert _run(TG, "--out", str(tg), *TG_SMALL) == 0
    for p in list_checkpoints(cav):
        p.unlink()
    shutil.copy(list_checkpoints(tg)[-1], cav / "checkpoints" / "checkpoint_0000000300.h5")
    _interrupted(cav)
    capsys.readouterr()
    assert cli.main(["run", "--resume", str(cav), "--quiet", "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "summary.json in the folder of case 'lid_driven_cavity'" in err, err


def test_a_forced_resume_into_a_changed_case_keeps_its_lineage(tmp_path, capsys):
    """A resume with --force into a changed case (a later end) writes checkpoints whose lineage keeps the first
    case's hash: resuming that folder again is no foreign checkpoint."""
    out = tmp_path / "run"
    assert _run(CAVITY, "--out", str(out), *SMALL, "--set", "time.steps=200") == 0
    first = read_checkpoint(list_checkpoints(out)[-1]).meta["case_hash"]
    assert cli.main(["run", "--resume", str(out), "--quiet", "--no-plots", "--force", "--set", "time.steps=300"]) == 0
    newest = read_checkpoint(list_checkpoints(out)[-1]).meta
    assert newest["case_lineage"][0] == first and newest["case_hash"] != first
    assert json.loads((out / "summary.json").read_text())["provenance"]["case_lineage"] == newest["case_lineage"]
    (out / "checkpoints" / list_checkpoints(out)[-1].name).unlink()        # as if interrupted after step 200
    capsys.readouterr()
    assert cli.main(["run", "--resume", str(out), "--quiet", "--no-plots", "--force"]) == 0, capsys.readouterr().err


def test_a_foreign_checkpoint_resumes_with_force_and_a_warning_when_given_a_case(tmp_path):
    """A case given with --resume that differs from the checkpoint's names both cases and hashes."""
    cav, tg = tmp_path / "cavity", tmp_path / "tg"
    assert _run(TG, "--out", str(tg), *TG_SMALL, "--set", "time.steps=200") == 0
    ck = read_checkpoint(list_checkpoints(tg)[-1])
    with pytest.raises(CaseError) as info:
        ckmod.check_compatible(ck, case_json=json.dumps({"name": "lid_driven_cavity", "x": 1}), backend="numpy",
                               precision=ck.meta["precision"])
    assert "'taylor_green'" in str(info.value) and "'lid_driven_cavity'" in str(info.value)
    assert ck.meta["case_hash"] in str(info.value)


# ------------------------------------------------------------------------------------------------ item 6

def _special(path: Path, kind: str) -> None:
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    elif kind == "loop":
        path.symlink_to(path.name)


def _no_hang(fn, seconds: float = 20.0) -> dict:
    """``fn()`` under an alarm: a blocked open (a FIFO) raises Hang instead of hanging the test. Returns its
    outcome ({"value": ...} or {"error": ...})."""
    try:
        with outer_limit(seconds):
            return {"value": fn()}
    except Hang:
        pytest.fail("hang: the call blocked")
    except Exception as exc:    # noqa: BLE001
        return {"error": exc}


@pytest.mark.parametrize("kind", ["fifo", "zero", "loop"])
def test_summary_json_that_is_no_regular_file_is_refused_by_resume(tmp_path, capsys, kind):
    """Issue 49 item 6: summary.json as a FIFO blocked ``run --resume``; as a link to /dev/zero it read until the
    memory cap."""
    out = tmp_path / "run"
    assert _run(CAVITY, "--out", str(out), *SMALL, "--set", "time.steps=200") == 0
    _special(out / "summary.json", kind)
    capsys.readouterr()
    box = _no_hang(lambda: cli.main(["run", "--resume", str(out), "--quiet", "--no-plots"]))
    assert box.get("value") == 2, box
    err = capsys.readouterr().err
    assert err.startswith("hpcsolve: error: --resume: ") and "summary.json" in err and err.count("\n") == 1, err
    assert "memory" not in err


@pytest.mark.parametrize("kind", ["fifo", "zero", "loop"])
@pytest.mark.parametrize("name", ["summary.json", "manifest.json", "result.h5"])
def test_read_result_folder_refuses_special_files(tmp_path, kind, name):
    out = tmp_path / "run"
    assert _run(CAVITY, "--out", str(out), *SMALL[:6], "--set", "time.steps=100") == 0
    _special(out / name, kind)
    box = _no_hang(lambda: read_result_folder(out))
    assert isinstance(box.get("error"), OutputError), box
    assert name in str(box["error"])


@pytest.mark.parametrize("kind", ["fifo", "zero", "loop"])
def test_read_h5_and_read_checkpoint_refuse_special_files(tmp_path, kind):
    p = tmp_path / "x.h5"
    _special(p, kind)
    for fn in (read_h5, read_checkpoint):
        box = _no_hang(lambda: fn(p))
        assert isinstance(box.get("error"), CaseError), (fn, box)
