"""Damaged checkpoints: every missing or malformed field of a checkpoint's metadata, loop state or arrays gives one
clear error (exit 2) naming the checkpoint file and the field, never a traceback, and leaves the files as they were.
Any such damage makes a resume fall back to the previous checkpoint (as a truncated file does), with a warning
naming the damaged checkpoint and the field: damage that ``read_checkpoint`` or the recorded case shows while the
checkpoint is chosen, and damage in the loop state or arrays that the runner finds as it restores them."""

import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from hpcsolve import cli
from hpcsolve.core import checkpoint
from hpcsolve.core.cases import load_case
from hpcsolve.core.checkpoint import CheckpointError, latest_checkpoint, list_checkpoints, read_checkpoint
from hpcsolve.core.errors import CaseError, RunInterrupted
from hpcsolve.lbm import runner
from hpcsolve.core.precision import get_precision
from hpcsolve.core.results import read_result_folder
from stopping import CAVITY, NEWEST, OLDER, StopAfter, interrupted_run

ROOT = Path(__file__).parents[2]
# an 8x8 cavity, 40 steps, a checkpoint and a snapshot every 10, the steady check on (its state is checkpointed too);
# no Ghia reference (its verdict on 8 cells would add a warning to those counted here)
TINY = ["lattice.resolution=8", "time.steps=40", "time.monitor_interval=10", "time.checkpoint_interval=10",
        "time.output_interval=0.125", "steady.enabled=true", "steady.interval=10", "steady.tolerance=1e-12",
        "validation.reference='none'"]
DELETE = object()


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory) -> Path:
    """A run folder of a run interrupted at step 20 of 40: checkpoints at steps 10 and 20."""
    return interrupted_run(tmp_path_factory.mktemp("damage") / "run", TINY)


@pytest.fixture
def folder(interrupted, tmp_path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(interrupted, out)
    return out


# ------------------------------------------------------------------------------------------------
# damage, one field at a time

def edit(attr, key, value):
    """Set (or with DELETE remove) ``key`` of the JSON attribute ``attr``."""
    def damage(f):
        data = json.loads(f.attrs[attr])
        if value is DELETE:
            del data[key]
        else:
            data[key] = value
        f.attrs[attr] = json.dumps(data)
    return damage


def edit_case_text(transform):
    def damage(f):
        data = json.loads(f.attrs["meta"])
        data["case_text"] = transform(data["case_text"])
        f.attrs["meta"] = json.dumps(data)
    return damage


def raw(attr, value):
    """Replace (or with DELETE remove) the attribute ``attr`` itself."""
    def damage(f):
        if value is DELETE:
            del f.attrs[attr]
        else:
            f.attrs[attr] = value
    return damage


def array(name, make):
    """Replace the dataset arrays/<name> by ``make(old)`` (None: remove it)."""
    def damage(f):
        old = f["arrays"][name][()]
        del f["arrays"][name]
        new = make(old)
        if new is not None:
            f["arrays"].create_dataset(name, data=new)
    return damage


def no_arrays(f):
    del f["arrays"]


def series(key, make):
    def damage(f):
        data = json.loads(f.attrs["state"])
        data["series"][key] = make(data["series"][key])
        f.attrs["state"] = json.dumps(data)
    return damage


DAMAGE = {
    # the metadata: read_checkpoint (and the recorded case) check it
    "meta-missing": (raw("meta", DELETE), "meta"),
    "meta-list": (raw("meta", "[1, 2]"), "meta"),
    "meta-number": (raw("meta", "42"), "meta"),
    "meta-not-json": (raw("meta", "{not json"), "meta"),
    "meta-not-text": (raw("meta", np.int64(5)), "meta"),
    "step-missing": (edit("meta", "step", DELETE), "meta.step"),
    "step-text": (edit("meta", "step", "ten"), "meta.step"),
    "step-negative": (edit("meta", "step", -1), "meta.step"),
    "step-fraction": (edit("meta", "step", 2.5), "meta.step"),
    "step-huge": (edit("meta", "step", 10**30), "meta.step"),
    "case_text-missing": (edit("meta", "case_text", DELETE), "meta.case_text"),
    "case_text-number": (edit("meta", "case_text", 5), "meta.case_text"),
    "case_text-empty": (edit("meta", "case_text", ""), "meta.case_text"),
    "case_text-not-toml": (edit("meta", "case_text", "x = [ unclosed"), "meta.case_text"),
    "case_text-invalid-case": (edit_case_text(lambda t: t.replace('"lbm"', '"lbmx"')), "meta.case_text"),
    "overrides-text": (edit("meta", "overrides", "lattice.resolution=8"), "meta.overrides"),
    "overrides-not-assignments": (edit("meta", "overrides", ["nonsense"]), "meta.overrides"),
    "backend-unknown": (edit("meta", "backend", "bogus"), "meta.backend"),
    "precision-number": (edit("meta", "precision", 3), "meta.precision"),
    "case_json-not-json": (edit("meta", "case_json", "{"), "meta.case_json"),
    "version-number": (edit("meta", "hpcsolve_version", 1), "meta.hpcsolve_version"),
    "state-missing": (raw("state", DELETE), "state"),
    "state-list": (raw("state", "[]"), "state"),
    "arrays-missing": (no_arrays, "arrays"),
    # the loop state and arrays: checked when the LBM runner restores them
    "series-missing": (edit("state", "series", DELETE), "state.series"),
    "series-list": (edit("state", "series", [1, 2]), "state.series"),
    "series-other-keys": (edit("state", "series", {"step": [0, 10]}), "state.series"),
    "series-not-numbers": (series("kinetic_energy", lambda v: ["x"] * len(v)), "state.series.kinetic_energy"),
    "series-shorter": (series("max_speed", lambda v: v[:-1]), "state.series.max_speed"),
    "mass0-missing": (edit("state", "mass0", DELETE), "state.mass0"),
    "mass0-text": (edit("state", "mass0", "abc"), "state.mass0"),
    "mass0-zero": (edit("state", "mass0", 0), "state.mass0"),
    "step_seconds-missing": (edit("state", "step_seconds", DELETE), "state.step_seconds"),
    "step_seconds-negative": (edit("state", "step_seconds", -1.0), "state.step_seconds"),
    "total_seconds-text": (edit("state", "total_seconds", "soon"), "state.total_seconds"),
    "last_steady_step-text": (edit("state", "last_steady_step", "x"), "state.last_steady_step"),
    "last_steady_step-beyond": (edit("state", "last_steady_step", 10**6), "state.last_steady_step"),
    "steady_change-missing": (edit("state", "steady_change", DELETE), "state.steady_change"),
    "snapshots-missing": (edit("state", "snapshots", DELETE), "state.snapshots"),
    "snapshots-number": (edit("state", "snapshots", 5), "state.snapshots"),
    "snapshot-without-time": (edit("state", "snapshots", [{"step": 10, "fields": []}]), "state.snapshots[0].time"),
    "snapshot-step-beyond": (edit("state", "snapshots", [{"time": 0.1, "step": 999, "fields": []}]),
                             "state.snapshots[0].step"),
    "snapshot-array-missing": (array("snapshot_000000_velocity", lambda a: None), "arrays/snapshot_000000_velocity"),
    "populations-missing": (array("populations", lambda a: None), "arrays/populations"),
    "populations-shape": (array("populations", lambda a: a[:, :-1]), "arrays/populations"),
    "populations-dtype": (array("populations", lambda a: a.astype(np.float32)), "arrays/populations"),
    "populations-nan": (array("populations", lambda a: np.where(np.arange(a.size).reshape(a.shape) == 17, np.nan, a)),
                        "arrays/populations"),
    "populations-inf": (array("populations", lambda a: np.where(np.arange(a.size).reshape(a.shape) == 3, -np.inf, a)),
                        "arrays/populations"),
    "steady_last_u-shape": (array("steady_last_u", lambda a: a[:, :-1]), "arrays/steady_last_u"),
}
#: damage the runner finds as it restores the chosen checkpoint (the rest: found while choosing it)
RESTORED = {k for k, (_, field) in DAMAGE.items() if field.startswith(("state.", "arrays/"))}


def damage_files(out: Path, damage, names=(OLDER, NEWEST), sealed: bool = True) -> None:
    """``damage`` each file; ``sealed``: then write its checksum record anew, as if it had been written so (the
    checks of each field behind the checksum; unsealed, the checksum finds the damage first)."""
    for name in names:
        with h5py.File(out / "checkpoints" / name, "r+") as f:
            damage(f)
            if sealed and isinstance(f.attrs.get("meta"), str) and isinstance(f.attrs.get("state"), str) \
                    and isinstance(f.get("arrays"), h5py.Group):
                checkpoint.seal(f)


def files(out: Path) -> dict[str, bytes]:
    """Every file in ``out`` and its bytes (the lock file a run leaves aside)."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and not p.name.startswith(".hpcsolve")}


def resume(out: Path, capsys, *extra) -> tuple[int, str]:
    capsys.readouterr()
    code = cli.main(["run", *extra, "--resume", str(out), "--quiet", "--no-plots"])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_a_damaged_field_is_one_clear_error_naming_the_checkpoint_and_the_field(folder, capsys, kind):
    damage, field = DAMAGE[kind]
    damage_files(folder, damage)
    before = files(folder)
    code, err = resume(folder, capsys)
    assert code == 2, err
    assert err.startswith("hpcsolve: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{field}: " in err, err
    # both were tried (the newest first), the error names both
    assert str(folder / "checkpoints" / OLDER) in err, err
    assert err.index(str(folder / "checkpoints" / NEWEST)) < err.index(str(folder / "checkpoints" / OLDER)), err
    assert files(folder) == before   # nothing written, nothing removed


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_a_damaged_newest_checkpoint_falls_back_to_the_previous(folder, capsys, kind):
    damage, field = DAMAGE[kind]
    damage_files(folder, damage, names=(NEWEST,))
    # a warning names the checkpoint, the field and the older one, whether the damage showed while the checkpoint
    # was chosen or as the run restored it (RESTORED)
    with pytest.warns(UserWarning) as caught:
        code, err = resume(folder, capsys)
    said = " ".join(str(w.message) for w in caught)
    assert f"checkpoint {folder / 'checkpoints' / NEWEST}: {field}" in said, said
    assert f"resuming from the older {OLDER} (step 10) instead" in said, said
    assert code == 0, err
    assert read_result_folder(folder)["metrics"]["resumed_from_step"] == 10
    # the resumed run wrote its own checkpoints at steps 20 and 30, the damaged one replaced by a good one
    assert [p.name for p in list_checkpoints(folder)] == [NEWEST, "checkpoint_0000000030.h5"]
    assert all(read_checkpoint(p).step in (20, 30) for p in list_checkpoints(folder))


def test_damaged_state_falls_back_to_the_same_result_as_an_undamaged_older_checkpoint(folder, tmp_path, capsys):
    """Resuming past a newest checkpoint whose state is damaged gives bit for bit the result of resuming from the
    older one with the newest removed: nothing of the damaged checkpoint is used."""
    twin = tmp_path / "twin"
    shutil.copytree(folder, twin)
    (twin / "checkpoints" / NEWEST).unlink()
    damage_files(folder, DAMAGE["populations-shape"][0], names=(NEWEST,))
    with pytest.warns(UserWarning, match="arrays/populations"):
        assert resume(folder, capsys)[0] == 0
    assert resume(twin, capsys)[0] == 0
    a, b = read_result_folder(folder), read_result_folder(twin)
    assert a["metrics"]["resumed_from_step"] == b["metrics"]["resumed_from_step"] == 10
    with h5py.File(folder / "result.h5") as fa, h5py.File(twin / "result.h5") as fb:
        names = [k for k in fa["fields"]] if "fields" in fa else []
        assert names, list(fa)
        for k in names:
            assert np.array_equal(fa["fields"][k][()], fb["fields"][k][()]), k


def test_a_case_given_with_resume_falls_back_from_a_damaged_recorded_case_too(folder, capsys):
    """The checkpoint chosen is the same with a case file as without (the CLI resolves the case from the
    checkpoint, then the run chooses the checkpoint again with that case)."""
    damage_files(folder, DAMAGE["case_text-not-toml"][0], names=(NEWEST,))
    sets = [a for s in TINY for a in ("--set", s)]
    code, err = resume(folder, capsys, str(CAVITY), *sets)
    assert code == 0, err
    assert read_result_folder(folder)["metrics"]["resumed_from_step"] == 10


def test_the_errors_are_typed(folder):
    damage_files(folder, DAMAGE["meta-list"][0], names=(NEWEST,))
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(folder / "checkpoints" / NEWEST)
    assert info.value.field == "meta" and info.value.path == folder / "checkpoints" / NEWEST
    assert isinstance(info.value, CaseError) and info.value.exit_code == 2
    assert latest_checkpoint(folder).step == 10


def test_the_command_line_shows_the_fallback_as_one_warning_line(folder):
    """From a shell the fallback is one line in the form of the errors (no source line of hpcsolve's)."""
    import os
    import subprocess
    import sys

    damage_files(folder, DAMAGE["series-missing"][0], names=(NEWEST,))
    proc = subprocess.run([sys.executable, "-m", "hpcsolve.cli", "run", "--resume", str(folder), "--quiet",
                           "--no-plots"], capture_output=True, text=True, env={**os.environ, "MPLBACKEND": "Agg"},
                          cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines == [f"hpcsolve: warning: checkpoint {folder / 'checkpoints' / NEWEST}: state.series: missing; "
                     f"allowed: an object with a list of numbers for each of step, time, kinetic_energy, max_speed, "
                     f"steady_change; resuming from the older {OLDER} (step 10) instead"], proc.stderr


def test_a_truncated_newest_checkpoint_is_passed_over_with_a_warning(folder, capsys):
    path = folder / "checkpoints" / NEWEST
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.warns(UserWarning, match=f"checkpoint {path}: .*resuming from the older {OLDER}"):
        code, err = resume(folder, capsys)
    assert code == 0, err
    assert read_result_folder(folder)["metrics"]["resumed_from_step"] == 10


def test_each_checkpoint_passed_over_is_warned_once_whichever_check_found_it(tmp_path, monkeypatch, capsys):
    """Checkpoints 30 (state damaged: found as the run restores it), 20 (truncated: found as the fallback reads it)
    and 10 (good): one warning for each of the two passed over, and the run resumes from 10."""

    monkeypatch.setattr(checkpoint.write_checkpoint, "__defaults__", (10,))   # keep every checkpoint
    out = tmp_path / "run"
    with pytest.raises(RunInterrupted):
        runner.run(load_case(CAVITY, TINY), "numpy", get_precision("fp64"), progress=False, stop=StopAfter(3),
                   checkpoint_dir=out)
    names = [p.name for p in list_checkpoints(out)]
    assert names == [OLDER, NEWEST, "checkpoint_0000000030.h5"]
    damage_files(out, DAMAGE["mass0-zero"][0], names=(names[2],))
    truncated = out / "checkpoints" / NEWEST
    truncated.write_bytes(truncated.read_bytes()[:1000])
    with pytest.warns(UserWarning) as caught:
        code, err = resume(out, capsys)
    assert code == 0, err
    said = [str(w.message) for w in caught]
    assert len(said) == 2, said
    assert said[0].startswith(f"checkpoint {out / 'checkpoints' / names[2]}: state.mass0: "), said
    assert said[1].startswith(f"checkpoint {truncated}: "), said
    assert all(m.endswith(f"resuming from the older {OLDER} (step 10) instead") for m in said), said
    assert read_result_folder(out)["metrics"]["resumed_from_step"] == 10


def test_other_ranks_keep_quiet_and_a_linked_install_keeps_the_one_line_form(folder, capsys, monkeypatch, tmp_path):
    """Under mpiexec every rank meets the same warnings: only rank 0 says them. And hpcsolve reached through a
    symbolic link still prints its warnings as one line."""
    import warnings

    from hpcsolve import cli as cli_mod

    damage_files(folder, DAMAGE["meta-missing"][0], names=(NEWEST,))
    monkeypatch.setattr(cli_mod, "_rank", lambda: 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code, err = resume(folder, capsys)
    assert code == 0 and not [w for w in caught if issubclass(w.category, UserWarning)], [str(w.message) for w in caught]
    link = tmp_path / "linked"
    link.symlink_to(Path(cli_mod.__file__).resolve().parent)
    assert cli_mod._format_warning("a message", UserWarning, str(link / "run.py"), 1) == "hpcsolve: warning: a message\n"
    assert cli_mod._format_warning("x", UserWarning, "/elsewhere/numpy/core.py", 3).startswith("/elsewhere/numpy")
