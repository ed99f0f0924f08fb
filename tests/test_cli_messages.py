"""What a new user trips over at the command line: compare's help, options that say what they do, one error line
(once, under mpiexec, each ending in a newline), no lock file left in a result folder."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock

from hpcsolve import cli
from hpcsolve.core import outdir

ROOT = Path(__file__).parent.parent
POISSON = ROOT / "cases" / "poisson_manufactured.toml"


def _help(capsys, *command) -> str:
    with pytest.raises(SystemExit) as info:
        cli.main([*command, "--help"])
    assert info.value.code == 0
    return capsys.readouterr().out


def test_compare_help_offers_only_the_plural_backend_and_precision_options(capsys):
    text = _help(capsys, "compare")
    words = text.replace("[", " ").replace("]", " ").split()
    assert "--backends" in words and "--precisions" in words
    assert "--backend" not in words and "--precision" not in words, text
    assert "--backend" in _help(capsys, "run").split()          # run keeps them


def test_compare_given_the_singular_options_says_they_are_ignored(tmp_path, capsys):
    assert cli.main(["compare", str(tmp_path / "missing.toml"), "--backend", "numpy", "--precision", "fp32"]) == 2
    err = capsys.readouterr().err
    lines = err.split("\n")
    assert lines[0] == "hpcsolve: note: compare uses --backends/--precisions; --backend/--precision are ignored"
    assert lines[1].startswith("hpcsolve: error: ") and "missing.toml" in lines[1]
    assert err.endswith("\n") and err.count("\n") == 2


def test_the_options_a_new_user_asked_about_say_what_they_do(capsys):
    compare = " ".join(_help(capsys, "compare").split())
    assert "skip the untimed warm-up run of each configuration, so its first run is timed" in compare
    assert "no progress bars or progress lines (the table, the results folder and errors are still printed)" in compare
    bench = " ".join(_help(capsys, "bench").split())
    assert "replaces the removed --in-place" in bench
    with pytest.raises(SystemExit) as info:
        cli.main(["bench", "lbm", "--in-place"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.endswith("(--in-place was removed: use --streaming in-place)\n"), err


def test_a_claimed_folder_keeps_no_lock_file_once_released(tmp_path):
    out = tmp_path / "run"
    with outdir.claim(out):
        (out / "notes.txt").write_text("mine")
        assert (out / outdir.LOCK_NAME).exists()
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    with outdir.claim(out):                      # and the folder can be claimed again
        assert (out / outdir.LOCK_NAME).exists()
    assert not (out / outdir.LOCK_NAME).exists()


def test_a_run_leaves_no_lock_file_in_its_result_folder(tmp_path, capsys):
    out = tmp_path / "r"
    assert cli.main(["run", str(POISSON), "--backend", "numpy", "--quiet", "--no-plots", "--set", "mesh.nx=4",
                     "--out", str(out)]) == 0
    names = {p.name for p in out.iterdir()}
    assert "summary.json" in names and outdir.LOCK_NAME not in names, names


def test_a_lock_on_a_file_its_holder_removed_is_taken_again(tmp_path, monkeypatch):
    """The race release_lock opens: a run opens the lock file just before the holder removes it and locks it just
    after, so it holds a file no longer in the folder. take_lock lets that one go and locks a new file."""
    acquired = []

    class Racing(FileLock):
        def acquire(self, *a, **k):
            got = super().acquire(*a, **k)
            acquired.append(os.stat(self.lock_file).st_ino)
            if len(acquired) == 1:             # the holder removes the file after this process opened it
                os.unlink(self.lock_file)
            return got

    monkeypatch.setattr(outdir, "FileLock", Racing)
    out = tmp_path / "f"
    out.mkdir()
    lock = outdir.take_lock(out)
    try:
        assert len(acquired) == 2 and lock.is_locked and (out / outdir.LOCK_NAME).exists()
    finally:
        outdir.release_lock(out, lock)
    assert not (out / outdir.LOCK_NAME).exists()


def _mpiexec() -> str:
    launcher = shutil.which("mpiexec", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                             os.environ.get("PATH", "")]))
    if launcher is None:
        pytest.skip("no mpiexec on PATH (pip install 'hpcsolve[mpi]' brings MPICH's)")
    pytest.importorskip("mpi4py")
    return launcher


def test_under_mpiexec_an_error_every_rank_meets_is_one_line():
    """It was printed by each rank, and the lines ran together ("...compare)hpcsolve: error: ...")."""
    p = subprocess.run([_mpiexec(), "-n", "2", sys.executable, "-m", "hpcsolve.cli", "compare", str(POISSON)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert p.stderr == ("hpcsolve: error: ranks: hpcsolve compare runs as one process; under mpiexec use hpcsolve "
                        "run (got 2; allowed: 1 (one process) for hpcsolve compare)\n"), p.stderr


def test_under_mpiexec_rank_0_also_says_what_other_ranks_met_alone():
    script = ("from hpcsolve import cli\nfrom hpcsolve.core import parallel\n"
              "r = parallel.world().Get_rank()\n"
              "cli._end_ranks(2, 'hpcsolve: error: shared')\n"
              "cli._end_ranks(2, f'hpcsolve: error: on rank {r}')\n")
    p = subprocess.run([_mpiexec(), "-n", "2", sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stderr == ("hpcsolve: error: shared\nhpcsolve: error: on rank 0\n"
                        "[rank 1] hpcsolve: error: on rank 1\n"), p.stderr
