"""The output folder under concurrent runs, a read-only or full file system, kills between files,
stale temporary files and --overwrite: it is consistent at every instant (a result is complete only
with its marker, and then result.h5, summary.json and the marker agree), errors are one message with
exit 2, and what was written before is kept."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from hpcsolve import cli
from hpcsolve.core import outdir, safe_io
from hpcsolve.core.checkpoint import latest_checkpoint, list_checkpoints, read_checkpoint
from hpcsolve.core.errors import OutputError
from hpcsolve.core.results import load_result, read_h5, read_result_folder

ROOT = Path(__file__).parents[2]
CAVITY = ROOT / "cases" / "lid_driven_cavity.toml"
SMALL = ["--set", "lattice.resolution=16", "--set", "time.steps=400", "--set", "time.monitor_interval=50",
         "--set", "time.checkpoint_interval=100", "--set", "steady.enabled=false"]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg"}


def _leftovers(out: Path) -> list[str]:
    """Temporary files and staging folders anywhere in ``out``."""
    return sorted(str(p.relative_to(out)) for p in out.rglob("*")
                  if p.name.endswith(".tmp") or p.name.startswith(outdir.STAGING_PREFIX))


def _run(*args) -> int:
    return cli.main(["run", str(CAVITY), "--backend", "numpy", "--quiet", *args])


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and not p.name.startswith(".hpcsolve")}


# ------------------------------------------------------------------------------------------------
# marker and consistency

def test_a_result_folder_is_complete_with_its_marker_and_its_files_agree(tmp_path):
    out = tmp_path / "run"
    assert _run("--out", str(out), *SMALL) == 0
    summary = read_result_folder(out)
    manifest = json.loads((out / outdir.MARKER).read_text())
    h5 = read_h5(out / "result.h5")
    assert summary["run_id"] == manifest["run_id"] == h5["attrs"]["run_id"] and len(manifest["run_id"]) == 32
    assert summary["status"] == manifest["status"] == h5["attrs"]["status"] == "completed"
    assert set(manifest["files"]) >= {"result.h5", "result.xdmf", "summary.json", "plots/velocity.png"}
    assert all((out / n).stat().st_size == size for n, size in manifest["files"].items())
    assert _leftovers(out) == [] and not (out / outdir.OWNER_NAME).exists()
    (out / outdir.MARKER).unlink()
    with pytest.raises(OutputError, match="no manifest.json: the run that wrote it did not finish writing"):
        read_result_folder(out)


def test_a_result_set_aside_by_a_stopped_overwrite_is_named_and_comes_back(tmp_path, capsys):
    """Reading a folder whose --overwrite run was killed after setting the earlier result aside says so (not "did
    not finish writing"), and the next run into the folder puts the earlier result back before it checks the folder."""
    out = tmp_path / "run"
    assert _run("--out", str(out), "--no-plots", *SMALL[:6]) == 0
    first = read_result_folder(out)["run_id"]
    assert outdir.set_aside(out) is not None            # what a killed --overwrite run leaves
    with pytest.raises(OutputError, match=r"no manifest.json: an --overwrite run into it stopped before it finished, "
                                          r"and the earlier result is set aside there \(.previous-\*\)"):
        read_result_folder(out)
    assert _run("--out", str(out), *SMALL[:6]) == 2      # the next run: the result is back, and it is not replaced
    assert read_result_folder(out)["run_id"] == first


def test_the_results_line_names_plots_only_when_they_were_written(tmp_path, capsys):
    assert cli.main(["run", str(CAVITY), "--backend", "numpy", "--no-plots", "--out", str(tmp_path / "a"),
                     *SMALL[:6]]) == 0
    assert capsys.readouterr().out.rstrip().endswith("(result.h5, result.xdmf, summary.json)")
    assert cli.main(["run", str(CAVITY), "--backend", "numpy", "--quiet", "--out", str(tmp_path / "b"), *SMALL[:6]]) == 0
    assert capsys.readouterr().out.rstrip().endswith("(result.h5, result.xdmf, summary.json, plots/)")


KILLER = textwrap.dedent("""
    import os, signal, sys
    kill_at = int(sys.argv[1])
    calls = [0]
    real_replace = os.replace
    def replace(src, dst):
        calls[0] += 1
        if calls[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return real_replace(src, dst)
    os.replace = replace
    from hpcsolve import cli
    sys.exit(cli.main(sys.argv[2:]))
""")


@pytest.mark.slow
def test_a_kill_between_files_leaves_the_folder_marked_incomplete_and_resume_repairs_it(tmp_path):
    """SIGKILL at every rename of a resumed run's result (the moments between result.h5, summary.json
    and the marker): the folder is never complete-but-inconsistent, and a later --resume finishes it."""
    base = tmp_path / "base"
    proc = subprocess.run([sys.executable, "-c", KILLER, "0", "run", str(CAVITY), "--out", str(base), "--quiet",
                           "--no-plots", *SMALL, "--set", "time.steps=400"], env=ENV, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    # a folder with an interrupted result and checkpoints: the state a resume starts from
    for k, ck in enumerate(list_checkpoints(base)[1:]):
        ck.unlink()
    renames = None
    for kill_at in range(1, 12):
        out = tmp_path / f"k{kill_at}"
        shutil.copytree(base, out)
        manifest_before = json.loads((out / outdir.MARKER).read_text())
        proc = subprocess.run([sys.executable, "-c", KILLER, str(kill_at), "run", "--resume", str(out), "--quiet",
                               "--no-plots", "--force"], env=ENV, capture_output=True, text=True)
        if proc.returncode == 0:     # fewer renames than kill_at: the resume finished
            renames = kill_at - 1
            assert read_result_folder(out)["status"] == "completed"
            break
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        if (out / outdir.MARKER).exists():
            summary = read_result_folder(out)       # complete: and then consistent
            assert summary["run_id"] in (manifest_before["run_id"], json.loads((out / outdir.MARKER).read_text())["run_id"])
        else:
            with pytest.raises(OutputError, match="did not finish writing"):
                read_result_folder(out)
        for ck in list_checkpoints(out):
            read_checkpoint(ck)                      # every checkpoint present is readable
        # the next resume removes what the killed one left and finishes the folder
        assert cli.main(["run", "--resume", str(out), "--quiet", "--no-plots", "--force"]) == 0
        assert read_result_folder(out)["status"] == "completed" and _leftovers(out) == []
    assert renames is not None and renames >= 4   # checkpoints (3) + result.h5, xdmf, summary, marker


# ------------------------------------------------------------------------------------------------
# concurrent runs

@pytest.mark.slow
def test_two_concurrent_runs_into_one_folder_the_second_is_refused_naming_the_first(tmp_path):
    out = tmp_path / "shared"
    first = subprocess.Popen([sys.executable, "-m", "hpcsolve.cli", "run", str(CAVITY), "--backend", "numpy",
                              "--out", str(out), "--quiet", "--no-plots", *SMALL, "--set", "time.steps=3000",
                              "--set", "lattice.resolution=48"], env=ENV, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not (out / outdir.OWNER_NAME).exists() and time.time() < deadline and first.poll() is None:
        time.sleep(0.02)
    assert first.poll() is None, "the first run ended before the second could start"
    second = subprocess.run([sys.executable, "-m", "hpcsolve.cli", "run", str(CAVITY), "--backend", "numpy",
                             "--out", str(out), "--quiet", "--no-plots", "--overwrite", *SMALL],
                            env=ENV, capture_output=True, text=True)
    assert second.returncode == 2
    assert f"--out: another hpcsolve run is writing into it (pid {first.pid} on " in second.stderr
    assert second.stderr.count("\n") == 1 and "Traceback" not in second.stderr
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    summary = read_result_folder(out)          # the first run's result, whole and consistent
    assert summary["metrics"]["steps"] == 3000 and summary["derived"]["nx"] == 48 + 2   # 48 fluid cells and two wall layers


def test_the_lock_is_per_folder_and_released_after_the_run(tmp_path):
    out = tmp_path / "f"
    with outdir.claim(out):
        with pytest.raises(OutputError, match=rf"another hpcsolve run is writing into it \(pid {os.getpid()} on"):
            with outdir.claim(out, overwrite=True):
                pass
        with outdir.claim(tmp_path / "other"):    # another folder: no conflict
            pass
    with outdir.claim(out, overwrite=True):       # released
        pass


# ------------------------------------------------------------------------------------------------
# --overwrite, checkpoints of another run, stale files

def test_overwrite_leaves_nothing_of_the_previous_run(tmp_path):
    out = tmp_path / "run"
    assert _run("--out", str(out), *SMALL, "--set", "time.steps=350") == 0
    assert list_checkpoints(out) and (out / "plots" / "velocity.png").exists()
    (out / "notes.txt").write_text("mine")
    assert _run("--out", str(out), "--overwrite", "--no-plots", "--set", "lattice.resolution=16",
                "--set", "time.steps=60", "--set", "steady.enabled=false") == 0
    assert not (out / "checkpoints").exists() and not (out / "plots").exists()
    assert read_result_folder(out)["metrics"]["steps"] == 60
    assert (out / "notes.txt").read_text() == "mine"          # not hpcsolve's: kept
    # nothing stale to resume: the old run's checkpoints are gone
    assert cli.main(["run", "--resume", str(out), "--quiet"]) == 2


def test_a_folder_with_another_runs_checkpoints_is_refused_without_resume_or_overwrite(tmp_path, capsys):
    out = tmp_path / "run"
    assert _run("--out", str(out), *SMALL) == 0
    (out / outdir.MARKER).unlink()
    for name in outdir.RESULT_FILES:
        (out / name).unlink()
    assert _run("--out", str(out), *SMALL) == 2
    assert "--out: holds the checkpoints of an unfinished run" in capsys.readouterr().err


def test_stale_temporary_files_and_staging_folders_are_removed_by_the_next_run(tmp_path):
    out = tmp_path / "run"
    assert _run("--out", str(out), *SMALL, "--set", "time.steps=250") == 0
    stale = [out / ".result.h5.x1y2.tmp", out / "checkpoints" / ".checkpoint_0000000300.h5.abc.tmp",
             out / "plots" / ".velocity.png.q.tmp"]
    for p in stale:
        p.write_bytes(b"\0" * 1000)
    (out / ".staging-deadbeef").mkdir()
    (out / ".staging-deadbeef" / "result.h5").write_bytes(b"half")
    assert len(_leftovers(out)) == 4
    assert cli.main(["run", "--resume", str(out), "--quiet", "--force"]) == 0   # finished: re-run from step 200 of 250
    assert _leftovers(out) == [] and read_result_folder(out)["metrics"]["resumed_from_step"] == 200
    assert _run("--out", str(out), "--overwrite", *SMALL) == 0 and _leftovers(out) == []


# ------------------------------------------------------------------------------------------------
# read-only output

@pytest.fixture
def read_only_folder(tmp_path, monkeypatch):
    """A folder nothing can be written under, with one file in it: by its mode for an ordinary user;
    for root (whom modes do not stop) by a read-only bind mount, or, where mounting is not allowed,
    by EROFS from every call that would create something under it."""
    folder = tmp_path / "ro"
    folder.mkdir()
    (folder / "kept.txt").write_text("x")
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    bind = ["mount", "--bind", str(folder), str(folder)]
    if subprocess.run(bind, capture_output=True).returncode == 0:
        if subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], capture_output=True).returncode == 0:
            yield folder
            monkeypatch.chdir(tmp_path)             # the test may have gone into it: umount needs it idle
            if subprocess.run(["umount", str(folder)], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", str(folder)], capture_output=True)
            return
        subprocess.run(["umount", str(folder)], capture_output=True)
    real_mkdir, real_open = os.mkdir, os.open

    def under(path):
        return str(os.path.abspath(path)).startswith(str(folder) + os.sep)

    def mkdir(path, *args, **kwargs):
        if under(path):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_mkdir(path, *args, **kwargs)

    def open_(path, flags, *args, **kwargs):
        if under(path) and flags & (os.O_CREAT | os.O_WRONLY | os.O_RDWR):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)
    monkeypatch.setattr(os, "open", open_)
    yield folder


def test_read_only_output_is_refused_before_the_run_naming_out(read_only_folder, monkeypatch, capsys):
    from hpcsolve.lbm import runner as lbm_runner

    started = []        # the solver's run, counted: a refusal comes before the first of 100,000 steps
    real_run = lbm_runner.run
    monkeypatch.setattr(lbm_runner, "run", lambda *a, **k: started.append(1) or real_run(*a, **k))
    code = _run("--out", str(read_only_folder / "out"), "--set", "time.steps=100000")
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("hpcsolve: error: --out: cannot create or lock it (") and err.count("\n") == 1
    assert ("Read-only file system" in err or "Permission denied" in err) and "ro/out" in err
    assert started == []
    # the default folder results/<case>-<backend>-<precision>-<time> under a read-only working directory
    monkeypatch.chdir(read_only_folder)
    assert _run("--set", "time.steps=100000") == 2
    err = capsys.readouterr().err
    assert "--out: cannot create or lock it (" in err and "'results/lid_driven_cavity-numpy-fp64-" in err
    assert sorted(p.name for p in read_only_folder.iterdir()) == ["kept.txt"]


# ------------------------------------------------------------------------------------------------
# a full file system: ENOSPC injected at every write, and a real small file system where one can be mounted

def _resume_state(tmp_path: Path) -> Path:
    """A folder holding an interrupted run: a complete result marked 'interrupted' and checkpoints."""
    out = tmp_path / "state"
    assert _run("--out", str(out), *SMALL) == 0
    for ck in list_checkpoints(out)[1:]:
        ck.unlink()      # as if interrupted at step 200
    return out


def _full_disk_at(monkeypatch) -> dict:
    """Counts the checked writes (``safe_io.write_chunk``; ``offsets`` keeps each one's file offset: 0 starts a
    file); the one numbered ``fail_at`` fails with ENOSPC."""
    writes = {"n": 0, "fail_at": None, "offsets": []}
    real = safe_io.write_chunk

    def write_chunk(fd, piece, offset):
        writes["n"] += 1
        writes["offsets"].append(offset)
        if writes["n"] == writes["fail_at"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, piece, offset)

    monkeypatch.setattr(safe_io, "write_chunk", write_chunk)
    return writes


def _each_failing_write(tmp_path: Path, base: Path, writes: dict, run, at_least: int, every: bool):
    """``run(folder)`` on a copy of ``base`` counts the checked writes (at least ``at_least``); then per write
    number a fresh copy whose run will fail there: yields (number, copy, its files before). ``every``: each of
    the writes (a run writes over a hundred chunks: the slow suite); else the first and the last write of each
    file and every fifth write between (the default suite)."""
    clean = tmp_path / "clean"
    shutil.copytree(base, clean)
    assert run(clean) == 0
    total, offsets = writes["n"], writes["offsets"]
    assert total >= at_least
    starts = [k + 1 for k, off in enumerate(offsets) if off == 0]
    chosen = set(range(1, total + 1)) if every else \
        set(starts) | {k - 1 for k in starts[1:]} | {total} | set(range(1, total + 1, 5))
    assert len(starts) >= at_least // 2            # whole files written, not one stream of chunks
    for fail_at in sorted(chosen):
        out = tmp_path / f"full{fail_at}"
        shutil.copytree(base, out)
        before = _files(out)
        writes.update(n=0, fail_at=fail_at)
        yield fail_at, out, before


EVERY_WRITE = [False, pytest.param(True, marks=pytest.mark.slow)]


@pytest.mark.parametrize("every", EVERY_WRITE, ids=["sampled", "every-write"])
def test_a_full_disk_at_every_write_gives_one_error_and_keeps_what_was_there(tmp_path, monkeypatch, capsys, every):
    base = _resume_state(tmp_path)
    writes = _full_disk_at(monkeypatch)
    # (without plots: they are no checked writes, a full disk while plotting has its own test below, and drawing
    # them at every write number cost most of this test's time)
    resume = lambda out: cli.main(["run", "--resume", str(out), "--quiet", "--force", "--no-plots"])   # noqa: E731
    # at least 8 writes: owner file, checkpoints, result.h5, xdmf, summary, marker
    for fail_at, out, before in _each_failing_write(tmp_path, base, writes, resume, 8, every):
        capsys.readouterr()
        code = resume(out)
        err = capsys.readouterr().err
        assert code == 2, (fail_at, err)
        assert err.startswith("hpcsolve: error: --out: ") and "(No space left on device)" in err, err
        assert err.count("\n") == 1
        assert _leftovers(out) == [], fail_at
        # the earlier result is intact (complete, same files); every checkpoint there is readable
        after = _files(out)
        assert {k: v for k, v in after.items() if not k.startswith("checkpoints/")} == \
               {k: v for k, v in before.items() if not k.startswith("checkpoints/")}
        assert read_result_folder(out)["status"] == "completed"
        assert latest_checkpoint(out).step >= 200
        assert all(read_checkpoint(ck).step > 0 for ck in list_checkpoints(out))


def test_a_full_disk_while_plotting_gives_one_error(tmp_path, monkeypatch, capsys):
    import matplotlib.figure

    def savefig(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    out = tmp_path / "run"
    assert _run("--out", str(out), *SMALL, "--set", "time.checkpoint_interval=0") == 2
    err = capsys.readouterr().err
    assert "--out: cannot write the result (No space left on device)" in err
    assert _leftovers(out) == [] and not (out / outdir.MARKER).exists() and not (out / "result.h5").exists()


def _mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir()
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


@pytest.mark.slow
def test_a_real_full_file_system_gives_one_error_no_crash(tmp_path):
    """A 1 MiB tmpfs (where this machine lets the tests mount one): the HDF5 library never sees the
    failed write (it used to crash the process with a segfault)."""
    mnt = tmp_path / "small"
    if os.geteuid() != 0 or not _mount_tmpfs(mnt, "1m"):
        pytest.skip("cannot mount a small tmpfs here; the injected ENOSPC test covers every write")
    try:
        proc = subprocess.run([sys.executable, "-m", "hpcsolve.cli", "run", str(CAVITY), "--backend", "numpy",
                               "--out", str(mnt / "out"), "--quiet", "--set", "lattice.resolution=200",
                               "--set", "time.steps=30", "--set", "time.output_interval=0.0001",
                               "--set", "steady.enabled=false"], env=ENV, capture_output=True, text=True)
        assert proc.returncode == 2, proc.stderr[-2000:]
        # one error line (a short cavity run is also outside Ghia's range: its verdict warning may come first)
        errors = [line for line in proc.stderr.splitlines() if not line.startswith("hpcsolve: warning: ")]
        assert len(errors) == 1 and "(No space left on device)" in errors[0], proc.stderr
        assert _leftovers(mnt / "out") == []
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


# ------------------------------------------------------------------------------------------------
# --overwrite that fails keeps the previous result; files hpcsolve did not write stay

POISSON = ROOT / "cases" / "poisson_manufactured.toml"


def _poisson(out: Path, *args) -> int:
    return cli.main(["run", str(POISSON), "--backend", "numpy", "--quiet", "--no-plots", "--out", str(out),
                     "--set", "mesh.nx=4", *args])


def _set_aside_folders(out: Path) -> list[Path]:
    """Journals and hidden files of outdir.set_aside left in ``out``."""
    return list(out.rglob(outdir.PREVIOUS_PREFIX + "*"))


def test_an_overwrite_refused_during_the_run_keeps_the_previous_result(tmp_path, capsys):
    """Input found bad only while the run assembles (the stiffness matrix overflows) comes after the folder was
    claimed: the previous result is put back, complete and unchanged."""
    out = tmp_path / "run"
    assert _poisson(out) == 0
    before, run_id = _files(out), read_result_folder(out)["run_id"]
    capsys.readouterr()
    assert _poisson(out, "--overwrite", "--set", "problem.conductivity=1e308") == 2
    assert "problem.conductivity" in capsys.readouterr().err
    assert _files(out) == before and read_result_folder(out)["run_id"] == run_id
    assert _set_aside_folders(out) == []
    # a successful overwrite replaces it and leaves nothing set aside
    assert _poisson(out, "--overwrite", "--set", "mesh.nx=6") == 0
    assert read_result_folder(out)["run_id"] != run_id and _set_aside_folders(out) == []


@pytest.mark.parametrize("every", EVERY_WRITE, ids=["sampled", "every-write"])
def test_an_overwrite_on_a_full_disk_keeps_the_previous_result_at_every_write(tmp_path, monkeypatch, capsys, every):
    """ENOSPC at each write of an --overwrite run without checkpoints: one error, and the previous result is
    complete and unchanged afterwards (the message's "the earlier result ... kept" is true)."""
    base = tmp_path / "base"
    assert _run("--out", str(base), *SMALL, "--set", "time.checkpoint_interval=0") == 0
    writes = _full_disk_at(monkeypatch)
    args = ("--overwrite", "--no-plots", *SMALL, "--set", "time.checkpoint_interval=0", "--set", "time.steps=200")
    overwrite = lambda out: _run("--out", str(out), *args)   # noqa: E731
    for fail_at, out, before in _each_failing_write(tmp_path, base, writes, overwrite, 5, every):
        capsys.readouterr()
        assert overwrite(out) == 2, fail_at
        assert "(No space left on device)" in capsys.readouterr().err
        assert _files(out) == before, fail_at
        assert read_result_folder(out)["status"] == "completed"
        assert _set_aside_folders(out) == [] and _leftovers(out) == []


def test_a_set_aside_result_of_a_killed_overwrite_run_is_put_back_or_dropped_by_the_next_run(tmp_path):
    """A run killed between setting the previous result aside and writing anything of its own: the next claim
    puts it back; killed after its first checkpoint: put back too (the new run's checkpoint is no result); killed
    in the middle of the renames (journal "moving"): put back whatever the new run did."""
    out = tmp_path / "run"
    assert _run("--out", str(out), *SMALL) == 0
    before, ckpts = _files(out), [p.name for p in list_checkpoints(out)]
    journal = outdir.set_aside(out)
    assert journal is not None and not outdir.holds_own_state(out) and not list_checkpoints(out)
    assert not (out / "plots" / "velocity.png").exists()
    assert outdir.remove_stale(out) == [journal.name]
    assert _files(out) == before and read_result_folder(out)["status"] == "completed"
    assert _set_aside_folders(out) == []
    # killed after its first checkpoint: a checkpoint is no result (issue 49): the previous run's files come back
    # and the new run's checkpoint goes
    journal = outdir.set_aside(out)
    (out / "checkpoints" / "checkpoint_0000000050.h5").write_bytes(b"the new run's checkpoint")
    outdir.remove_stale(out)
    assert _files(out) == before and read_result_folder(out)["status"] == "completed"
    assert [p.name for p in list_checkpoints(out)] == ckpts and _set_aside_folders(out) == []
    # killed midway through the renames: the journal says "moving", so everything goes back, even beside the
    # new run's checkpoint
    assert _run("--out", str(out), "--overwrite", *SMALL) == 0
    before = _files(out)
    journal = outdir.set_aside(out)
    info = json.loads(journal.read_text())
    journal.write_text(json.dumps({**info, "state": "moving"}))
    os.replace(out / info["files"][-1][1], out / info["files"][-1][0])      # the last rename had not happened
    outdir.remove_stale(out)
    assert _files(out) == before and _set_aside_folders(out) == []


def test_resume_into_a_folder_of_a_killed_overwrite_run_sees_its_checkpoints(tmp_path, capsys):
    """An --overwrite run killed after hiding the previous files (journal complete, nothing of its own): a --resume
    used to find no checkpoint (they were hidden until the next claim); it settles the journal first, so the
    previous run's files are back and it resumes from their newest checkpoint. A folder in use is left alone."""
    from filelock import FileLock

    out = tmp_path / "run"
    assert _run("--out", str(out), *SMALL) == 0
    before, newest = _files(out), list_checkpoints(out)[-1]
    outdir.set_aside(out)
    assert not list_checkpoints(out) and _set_aside_folders(out)
    held = FileLock(str(out / outdir.LOCK_NAME), timeout=0)
    held.acquire()
    try:   # another run holds the folder (its --overwrite hid the checkpoints): the resume names that run
        with pytest.raises(OutputError, match="--resume: another hpcsolve run is writing into it"):
            outdir.settle_idle(out)
        assert _set_aside_folders(out)
        capsys.readouterr()
        assert cli.main(["run", "--resume", str(out), "--quiet", "--no-plots", "--force"]) == 2
        assert "another hpcsolve run is writing into it" in capsys.readouterr().err
    finally:
        held.release()
    capsys.readouterr()
    # the previous run had finished: its summary is back, so the resume wants --force (nothing is written)
    assert cli.main(["run", "--resume", str(out), "--quiet", "--no-plots"]) == 2
    assert "already finished" in capsys.readouterr().err
    assert _files(out) == before and _set_aside_folders(out) == []
    outdir.set_aside(out)
    assert cli.main(["run", "--resume", str(out), "--quiet", "--no-plots", "--force"]) == 0
    assert read_result_folder(out)["metrics"]["resumed_from_step"] == read_checkpoint(newest).step == 300
    assert _set_aside_folders(out) == []


def test_an_error_or_interrupt_during_the_renames_puts_everything_back_at_once(tmp_path, monkeypatch):
    out = tmp_path / "run"
    assert _run("--out", str(out), *SMALL) == 0
    before = _files(out)
    real, calls = os.replace, {"n": 0}

    def replace(a, b):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt("signal 2")
        return real(a, b)

    monkeypatch.setattr(outdir.os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        outdir.set_aside(out)
    monkeypatch.setattr(outdir.os, "replace", real)
    assert _files(out) == before and _set_aside_folders(out) == []


def test_an_interrupted_overwrite_that_left_nothing_to_resume_gets_the_previous_result_back(tmp_path):
    """The placeholder result an interrupted run writes when it has no checkpoint (FEM) is not worth the
    previous complete result: it is removed and the previous result put back."""
    out = tmp_path / "run"
    assert _poisson(out) == 0
    before = _files(out)
    journal = outdir.set_aside(out)
    (out / "summary.json").write_text(json.dumps({"status": "interrupted"}))
    (out / "result.h5").write_bytes(b"placeholder")
    (out / outdir.MARKER).write_text(json.dumps({"files": {"result.h5": 11, "summary.json": 25}}))
    assert outdir.put_back(out, journal) is True
    assert _files(out) == before and _set_aside_folders(out) == []


def test_a_marker_entry_outside_what_hpcsolve_writes_is_never_touched(tmp_path):
    out = tmp_path / "run"
    assert _poisson(out) == 0
    (tmp_path / "ext").mkdir()
    (tmp_path / "ext" / "data.csv").write_text("mine")
    (out / "data").symlink_to(tmp_path / "ext")
    manifest = json.loads((out / outdir.MARKER).read_text())
    manifest["files"]["data/data.csv"] = 4
    manifest["files"]["../ext/data.csv"] = 4
    (out / outdir.MARKER).write_text(json.dumps(manifest))
    assert "data/data.csv" not in outdir.manifest_files(out)
    assert _poisson(out, "--overwrite") == 0
    assert (tmp_path / "ext" / "data.csv").read_text() == "mine"


def test_files_hpcsolve_did_not_write_stay_through_runs_and_overwrites(tmp_path):
    out = tmp_path / "run"
    (out / "plots").mkdir(parents=True)
    (out / "plots" / "my_figure.png").write_bytes(b"mine")
    (out / "checkpoints").mkdir()
    (out / "checkpoints" / "notes.txt").write_text("mine")
    assert _run("--out", str(out), *SMALL) == 0
    assert (out / "plots" / "velocity.png").exists() and list_checkpoints(out)
    assert _run("--out", str(out), "--overwrite", *SMALL, "--set", "time.steps=60", "--no-plots",
                "--set", "time.checkpoint_interval=0") == 0
    assert not (out / "plots" / "velocity.png").exists() and not list_checkpoints(out)
    assert (out / "plots" / "my_figure.png").read_bytes() == b"mine"
    assert (out / "checkpoints" / "notes.txt").read_text() == "mine"
    assert _run("--out", str(out), "--overwrite", *SMALL) == 0          # plots again: the user's figure stays
    assert (out / "plots" / "my_figure.png").read_bytes() == b"mine"


# ------------------------------------------------------------------------------------------------
# run options that cannot go together: exit 2 before anything is read or written

@pytest.mark.parametrize("extra, field", [
    (["--dry-run"], "--dry-run"), (["--overwrite"], "--overwrite"), (["--out", "OTHER"], "--out")])
def test_resume_refuses_options_it_would_ignore(tmp_path, capsys, extra, field):
    out = _resume_state(tmp_path)
    before = _files(out)
    extra = [str(tmp_path / "other") if a == "OTHER" else a for a in extra]
    capsys.readouterr()
    assert cli.main(["run", "--resume", str(out), "--quiet", "--force", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"hpcsolve: error: {field}: ") and err.count("\n") == 1, err
    assert _files(out) == before and not (tmp_path / "other").exists()
    # --out naming the resumed folder itself is the same folder: allowed
    assert cli.main(["run", "--resume", str(out), "--quiet", "--force", "--no-plots", "--out", str(out)]) == 0


def test_force_without_resume_changes_nothing_on_a_stable_lattice(tmp_path):
    """--force without --resume forces a lattice past the stability rule (tests/lbm/test_lattice_stability.py; it
    used to be refused): on a lattice the rule accepts, the forced run is the plain run, field for field."""
    assert _run("--out", str(tmp_path / "plain"), *SMALL) == 0
    assert _run("--out", str(tmp_path / "forced"), "--force", *SMALL) == 0
    plain, forced = (load_result(tmp_path / n) for n in ("plain", "forced"))
    assert np.array_equal(plain.fields["velocity"], forced.fields["velocity"])
    assert forced.status == plain.status


def test_resume_with_an_out_that_is_a_symlink_loop_is_one_error(tmp_path, capsys):
    out = _resume_state(tmp_path)
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    capsys.readouterr()
    assert cli.main(["run", "--resume", str(out), "--quiet", "--out", str(loop)]) == 2
    assert capsys.readouterr().err.startswith("hpcsolve: error: --out: ")


def test_two_runs_of_one_setup_within_a_second_get_two_default_folders(tmp_path, monkeypatch):
    """Without --out a run writes to results/<case>-<backend>-<precision>-<time to the second>; a second run in
    the same second (a script's loop) used to find the first's result there and was refused."""
    import datetime as dt

    from hpcsolve import run as runmod
    from hpcsolve.core.precision import get_precision

    monkeypatch.chdir(tmp_path)

    class Frozen(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return dt.datetime(2026, 12, 3, 8, 0, 0)

    monkeypatch.setattr(runmod._dt, "datetime", Frozen)
    case = runmod.load_case(str(CAVITY))
    first = runmod.default_out_dir(case, "numpy", get_precision("fp64", "lbm"))
    assert first == Path("results/lid_driven_cavity-numpy-fp64-20261203-080000") and first.is_dir()
    second = runmod.default_out_dir(case, "numpy", get_precision("fp64", "lbm"))
    assert second == first.with_name(first.name + "-2") and second.is_dir()


def test_a_default_folder_under_a_results_file_is_one_error_not_a_loop(tmp_path, monkeypatch, capsys):
    """``results`` a file (or a broken link): the default folder cannot be made; one error naming --out, at once
    (new_folder took that for a taken name and tried -2, -3, ... forever)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").write_text("not a folder")
    assert outdir.new_folder(tmp_path / "results" / "x") == tmp_path / "results" / "x"
    tries = []          # folder creations counted, not seconds: the old loop tried -2, -3, ... without end
    real_mkdir = Path.mkdir
    monkeypatch.setattr(Path, "mkdir", lambda self, *a, **k: tries.append(self) or real_mkdir(self, *a, **k))
    assert _run(*SMALL) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "results" in err, err
    assert len(tries) <= 2, tries
    monkeypatch.setattr(Path, "mkdir", real_mkdir)
    (tmp_path / "results").unlink()
    (tmp_path / "results").symlink_to(tmp_path / "missing")
    assert _run(*SMALL) == 2 and "--out" in capsys.readouterr().err


def test_a_run_refused_after_its_default_folder_was_made_leaves_no_folder(tmp_path, monkeypatch, capsys):
    """Refused while it is set up (relaxation time, memory) or after the claim (FEM overflow at assembly): the
    default folder it reserved is removed again, as before it was reserved early."""
    monkeypatch.chdir(tmp_path)
    assert _run("--set", "lattice.resolution=8", "--set", "physics.reynolds=100000", "--set", "time.steps=40") == 2
    assert cli.main(["run", str(POISSON), "--backend", "numpy", "--quiet", "--set", "mesh.nx=4", "--set",
                     "problem.conductivity=1e308"]) == 2
    assert "problem.conductivity" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()          # nor the results/ folder made for them
    # an --out folder the run made (or found empty) goes too once the claimed run is refused; one with files stays
    fresh, kept = tmp_path / "fresh", tmp_path / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine")
    for out in (fresh, kept):
        assert cli.main(["run", str(POISSON), "--backend", "numpy", "--quiet", "--set", "mesh.nx=4", "--set",
                         "problem.conductivity=1e308", "--out", str(out)]) == 2
    assert not fresh.exists() and sorted(p.name for p in kept.iterdir()) == ["notes.txt"]
    assert _run(*SMALL, "--no-plots") == 0                      # a run that writes keeps its folder
    assert len(list((tmp_path / "results").iterdir())) == 1


def test_runs_started_in_the_same_second_reserve_different_default_folders(tmp_path, monkeypatch):
    """Two runs started at once both used to pick the free name and then race for its lock (the second was
    refused). The default folder is now created when it is chosen, so each caller gets its own."""
    import threading

    from hpcsolve.core import outdir

    base = tmp_path / "results" / "case-numpy-fp64-20261203-080000"
    gate, got = threading.Barrier(8), []

    def pick():
        gate.wait()
        got.append(outdir.new_folder(base))

    threads = [threading.Thread(target=pick) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(p.name for p in got) == sorted([base.name] + [f"{base.name}-{k}" for k in range(2, 9)])
    assert all(p.is_dir() for p in got)
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o500)
    try:   # a folder that cannot be created comes back uncreated (check / claim then name --out and why)
        if not os.access(tmp_path / "ro", os.W_OK):
            assert outdir.new_folder(tmp_path / "ro" / "x") == tmp_path / "ro" / "x"
            assert not (tmp_path / "ro" / "x").exists()
    finally:
        (tmp_path / "ro").chmod(0o700)
