"""Reliability III, item 7: a checkpoint's contents carry a checksum. A flipped byte in the populations, an edited
``meta.step`` or an older checkpoint's populations swapped in are damage: a resume passes over the checkpoint for the
previous one with a warning naming the file and what did not match (as for a truncated file). Checkpoints written
before checksums still resume, with a one-line note."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from hpcsolve import cli
from hpcsolve.core import checkpoint
from hpcsolve.core.cases import load_case
from hpcsolve.core.checkpoint import CheckpointError, list_checkpoints, read_checkpoint
from hpcsolve.core.precision import get_precision
from hpcsolve.core.results import read_result_folder
from stopping import CAVITY, NEWEST, OLDER, interrupted_run

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory) -> Path:
    """A run folder of a run interrupted at step 20 of 40: checkpoints at steps 10 and 20."""
    return interrupted_run(tmp_path_factory.mktemp("integrity") / "run")


@pytest.fixture
def folder(interrupted, tmp_path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(interrupted, out)
    return out


def flip_mantissa_byte(f):
    """The lowest mantissa byte of one population flipped in place (the value stays finite and plausible)."""
    a = f["arrays"]["populations"][()]
    a.reshape(-1).view(np.uint8)[8 * 37] ^= 0x01
    f["arrays"]["populations"][...] = a


def edit_step(f):
    meta = json.loads(f.attrs["meta"])
    meta["step"] = 30
    f.attrs["meta"] = json.dumps(meta)


def resume(out: Path, capsys) -> tuple[int, str, list[str]]:
    """Exit code, stderr and the distinct warnings (in order) of ``hpcsolve run --resume out``. The CLI chooses the
    checkpoint twice (``prepare_resume``, then ``run_case``): under pytest.warns each warning shows twice, from a
    shell once (Python's default filter; ``test_checkpoints_written_before_checksums_say_so_in_one_line``)."""
    capsys.readouterr()
    with pytest.warns(UserWarning) as caught:
        code = cli.main(["run", "--resume", str(out), "--quiet", "--no-plots"])
    return code, capsys.readouterr().err, list(dict.fromkeys(str(w.message) for w in caught))


@pytest.mark.parametrize("damage, field", [(flip_mantissa_byte, "arrays/populations"), (edit_step, "meta")])
def test_damaged_contents_fall_back_to_the_previous_checkpoint(folder, capsys, damage, field):
    newest = folder / "checkpoints" / NEWEST
    with h5py.File(newest, "r+") as f:
        damage(f)
    code, err, said = resume(folder, capsys)
    assert code == 0, err
    assert len(said) == 1, said
    assert said[0].startswith(f"checkpoint {newest}: {field}: the file is damaged or was changed: its "), said
    assert "does not match the checksum written with it" in said[0], said
    assert said[0].endswith(f"resuming from the older {OLDER} (step 10) instead"), said
    assert read_result_folder(folder)["metrics"]["resumed_from_step"] == 10


def test_a_flipped_byte_is_a_typed_error_naming_the_array(folder):
    newest = folder / "checkpoints" / NEWEST
    with h5py.File(newest, "r+") as f:
        flip_mantissa_byte(f)
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(newest)
    assert info.value.field == "arrays/populations" and info.value.path == newest
    assert read_checkpoint(folder / "checkpoints" / OLDER).step == 10


def swap_older_populations(folder: Path, with_digest: bool) -> None:
    with h5py.File(folder / "checkpoints" / OLDER, "r") as f:
        older = f["arrays"]["populations"][()]
        older_record = json.loads(f.attrs["checksum"])
    with h5py.File(folder / "checkpoints" / NEWEST, "r+") as f:
        assert not np.array_equal(f["arrays"]["populations"][()], older)
        f["arrays"]["populations"][...] = older
        if with_digest:     # its digest copied along into the newest record
            record = json.loads(f.attrs["checksum"])
            record["arrays"]["populations"] = older_record["arrays"]["populations"]
            f.attrs["checksum"] = json.dumps(record)


@pytest.mark.parametrize("with_digest, field", [(False, "arrays/populations"), (True, "checksum")])
def test_an_older_checkpoints_populations_swapped_in_are_damage(folder, capsys, with_digest, field):
    swap_older_populations(folder, with_digest)
    code, err, said = resume(folder, capsys)
    assert code == 0, err
    assert len(said) == 1 and said[0].startswith(f"checkpoint {folder / 'checkpoints' / NEWEST}: {field}: "), said
    assert read_result_folder(folder)["metrics"]["resumed_from_step"] == 10


def test_a_removed_checksum_is_damage_where_the_metadata_says_there_was_one(folder):
    newest = folder / "checkpoints" / NEWEST
    with h5py.File(newest, "r+") as f:
        del f.attrs["checksum"]
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(newest)
    assert info.value.field == "checksum" and "missing" in str(info.value), str(info.value)


def strip_checksums(folder: Path) -> None:
    """Make the checkpoints in ``folder`` look as an hpcsolve before checksums wrote them."""
    for path in list_checkpoints(folder):
        with h5py.File(path, "r+") as f:
            del f.attrs["checksum"]
            meta = json.loads(f.attrs["meta"])
            del meta["checksum"]
            f.attrs["meta"] = json.dumps(meta)


NOTE = "no checksum (written before checkpoints carried one): its contents cannot be checked for damage"


def test_checkpoints_written_before_checksums_resume_with_a_note(folder, tmp_path, capsys):
    """No checksum and no meta.checksum: an older hpcsolve's checkpoint. It resumes (from the newest), with one
    note, and finishes bit for bit as a resume of the checksummed original does."""
    twin = tmp_path / "twin"
    shutil.copytree(folder, twin)
    strip_checksums(folder)
    assert read_checkpoint(folder / "checkpoints" / NEWEST).checked is False
    code, err, said = resume(folder, capsys)
    assert code == 0, err
    assert said == [f"checkpoint {folder / 'checkpoints' / NEWEST}: {NOTE}"], said
    assert read_result_folder(folder)["metrics"]["resumed_from_step"] == 20
    capsys.readouterr()
    assert cli.main(["run", "--resume", str(twin), "--quiet", "--no-plots"]) == 0
    with h5py.File(folder / "result.h5") as fa, h5py.File(twin / "result.h5") as fb:
        names = list(fa["fields"])
        assert names
        for k in names:
            assert np.array_equal(fa["fields"][k][()], fb["fields"][k][()]), k


def test_checkpoints_written_before_checksums_say_so_in_one_line(folder):
    """From a shell: the note is the one line on stderr."""
    strip_checksums(folder)
    proc = subprocess.run([sys.executable, "-m", "hpcsolve.cli", "run", "--resume", str(folder), "--quiet",
                           "--no-plots"], capture_output=True, text=True, env={**os.environ, "MPLBACKEND": "Agg"},
                          cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"hpcsolve: warning: checkpoint {folder / 'checkpoints' / NEWEST}: {NOTE}"], proc.stderr


def test_the_record_binds_every_array_and_the_metadata(folder):
    """The record written holds one digest per array and for meta and state, and a binding digest over them."""
    with h5py.File(folder / "checkpoints" / NEWEST, "r") as f:
        record = json.loads(f.attrs["checksum"])
        names = sorted(f["arrays"])
        again = checkpoint.checksum_record(f.attrs["meta"], f.attrs["state"],
                                           {k: f["arrays"][k][()] for k in names})
    assert record["algorithm"] == "sha256" and sorted(record["arrays"]) == names and "populations" in names
    assert record == again
    assert len({record["meta"], record["state"], record["binding"], *record["arrays"].values()}) == 3 + len(names)


# ------------------------------------------------------------------------------------------------
# item 17: the memory estimate counts the GPU libraries the ``auto`` probe loads and mg's dense coarsest level

PEAK = """
import json, re, sys
from hpcsolve.run import describe, run_case
backend, case, *over = sys.argv[1:]
info = describe(case, backend, None, over)
result = run_case(case, backend, None, overrides=over, progress=False, plots=False)
hwm = int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) * 1024
print(json.dumps({"estimate": info["host_memory_bytes"], "measured": hwm}))
"""


def test_a_cpu_estimate_counts_the_gpu_libraries_loaded_in_the_process(monkeypatch):
    from hpcsolve.core import memory
    from hpcsolve.lbm.case import derive
    from hpcsolve.lbm import memory as lbm_memory

    assert memory.gpu_import_bytes({"numba", "numba.cuda"}) == 97 * memory.MiB
    assert memory.gpu_import_bytes({"numpy"}) == 0
    case = load_case(CAVITY, ["lattice.resolution=100"])
    fp64 = get_precision("fp64")
    monkeypatch.setitem(sys.modules, "numba.cuda", sys.modules.get("numba.cuda", object()))
    monkeypatch.setitem(sys.modules, "numba", sys.modules.get("numba", object()))
    probed = lbm_memory.estimate(case, derive(case), "numpy", fp64)
    monkeypatch.delitem(sys.modules, "numba.cuda")
    monkeypatch.delitem(sys.modules, "numba")
    plain = lbm_memory.estimate(case, derive(case), "numpy", fp64)
    assert probed.items["imports"] == 97 * memory.MiB and plain.items["imports"] == 0
    assert probed.host_bytes - plain.host_bytes == 97 * memory.MiB
    assert plain.host_bytes == sum(plain.items.values())


def test_an_mg_estimate_counts_the_dense_coarsest_level():
    from hpcsolve.fem import memory as fem_memory

    fp64 = get_precision("fp64", "fem")
    base = ["mesh.nx=100", 'solve.preconditioner="mg"', 'solve.reference="never"']
    big = fem_memory.estimate(load_case(ROOT / "cases" / "poisson_manufactured.toml",
                                        base + ["solve.multigrid.coarse_size=2500"]), "numpy", fp64)
    default = fem_memory.estimate(load_case(ROOT / "cases" / "poisson_manufactured.toml", base), "numpy", fp64)
    jacobi = fem_memory.estimate(load_case(ROOT / "cases" / "poisson_manufactured.toml",
                                           base[:1] + ['solve.preconditioner="jacobi"']), "numpy", fp64)
    assert big.items["coarse dense level"] == int(5.0 * 2500**2 * 8)
    assert default.items["coarse dense level"] == int(5.0 * 400**2 * 8)
    assert jacobi.items["coarse dense level"] == 0
    assert big.host_bytes - default.host_bytes == int(5.0 * 2500**2 * 8) - int(5.0 * 400**2 * 8)


@pytest.mark.parametrize("args", [
    ["auto", str(CAVITY), "lattice.resolution=300", "time.steps=20"],
    ["numpy", str(ROOT / "cases" / "poisson_manufactured.toml"), "mesh.nx=100", 'solve.preconditioner="mg"',
     "solve.multigrid.coarse_size=2500", 'solve.reference="never"'],
], ids=["lbm-auto-probe", "fem-mg-coarse-2500"])
def test_the_estimate_is_within_30_percent_of_the_measured_peak(args):
    """The estimate against the peak resident size (VmHWM) of a process that runs the case (NumPy; ``auto`` falls
    back to it here after probing the GPU libraries). Before: 0.58 (LBM, the probe's 97 MiB left out) and 0.39
    (FEM, the dense coarsest level of 2,401 rows left out). The peak differs between installs (a fresh CI venv
    measured 286 MB where the development venv measured about 230 MB for the LBM case): the bound is 30 %."""
    from hpcsolve.core import backends

    if backends.resolve(args[0]).gpu:
        pytest.skip("auto resolves to a GPU backend here: the case measures the CPU fallback")
    # The kernel may reclaim file-backed pages (the GPU libraries' code the estimate counts) from a process while the
    # machine is short of memory, so a loaded machine can measure a lower peak (seen: 156 MB against 214 MB quiet,
    # ratio 1.45, in a run beside 4 busy processes and other jobs): reclaim only lowers VmHWM, so the peak is the
    # largest of up to 3 processes (one where the first is inside the bound).
    peaks = []
    for _ in range(3):
        proc = subprocess.run([sys.executable, "-c", PEAK, *args], capture_output=True, text=True, cwd=ROOT,
                              env={**os.environ, "MPLBACKEND": "Agg"}, timeout=120)
        assert proc.returncode == 0, proc.stderr
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        peaks.append(got["measured"])
        if 0.7 <= got["estimate"] / max(peaks) <= 1.3:
            break
    ratio = got["estimate"] / max(peaks)
    assert 0.7 <= ratio <= 1.3, {**got, "peaks": peaks}
