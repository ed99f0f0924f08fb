"""Generated input for the file classes of Reliability IV (issue 49, items 2, 5 and 6), in seeded chunks (each a test
of its own, a few seconds long), three families:

- overwrite under a full disk, for every output kind: ``run`` (LBM with checkpoints, FEM), ``compare`` (FEM, two
  configurations) and ``bench fem``, each first written once, then written again (``--overwrite`` where the kind
  has it) on a disk that holds only a random number of further bytes (every checked write counted,
  ``safe_io.write_chunk``). Exit 0 with a complete new output, or exit 2 with one error naming ``--out`` and the
  earlier output complete and byte for byte as it was (a run folder's result and checkpoints; a comparison's run
  folders; the bench's JSON and markdown each old or new whole); never temporary files, staging folders or
  set-aside files left behind.
- resume with a checkpoint of another case: a cavity folder of an interrupted run, and a checkpoint of Taylor-Green,
  of the cavity at another Reynolds number or resolution, or of the same case (the control), copied in under the
  newest name or replacing every checkpoint, then ``run --resume`` with or without ``--force``: a foreign checkpoint
  without --force is exit 2 naming both case hashes, nothing written; with --force exit 0 and one warning naming
  both; the same case's checkpoint resumes with no such warning.
- special files in every path the code opens: a named pipe, a link to /dev/zero or /dev/null, a socket, a loop of
  symbolic links, as the case file, ``mesh.path``, an obstacle mask, summary.json (resume), manifest.json and
  result.h5 (``read_result_folder``, ``read_h5``), a checkpoint (``read_checkpoint``), a journal of set-aside files
  (the next claim): one error (exit 2, or the typed error of the API) naming the path or field, never a hang (the
  chunk's outer limit), never reading without end (the process runs under an address-space limit here: 4 GiB).

The default suite runs the first DEFAULT_* chunks of each family, the soak (``-m slow``) the rest. Seeded
(HPCSOLVE_FUZZ_SEED, default 13; one stream per chunk); counts and outcomes printed (pytest -s).
"""

from __future__ import annotations

import json
import os
import random
import re
import resource
import shutil
import socket
import tempfile
from collections import Counter
from pathlib import Path

import pytest

from hpcsolve.core import outdir, safe_io
from hpcsolve.core.checkpoint import list_checkpoints, read_checkpoint
from hpcsolve.core.errors import HpcsolveError
from hpcsolve.core.results import read_h5, read_result_folder
from test_generated_inputs import SEED, Hang, _chunks, _cli, _report, outer_limit

ROOT = Path(__file__).parent.parent
CASES = ROOT / "cases"
CAVITY, TG, POISSON = CASES / "lid_driven_cavity.toml", CASES / "taylor_green.toml", CASES / "poisson_manufactured.toml"
DISK_CHUNK, DISK_CHUNKS, DEFAULT_DISK_CHUNKS = 4, 30, 2
FOREIGN_CHUNK, FOREIGN_CHUNKS, DEFAULT_FOREIGN_CHUNKS = 6, 20, 2
SPECIAL_CHUNK, SPECIAL_CHUNKS, DEFAULT_SPECIAL_CHUNKS = 24, 10, 2
CHUNK_LIMIT_S = 600
LBM = ["--backend", "numpy", "--quiet", "--no-plots", "--set", "lattice.resolution=16", "--set", "time.steps=200",
       "--set", "time.monitor_interval=50", "--set", "time.checkpoint_interval=100", "--set", "steady.enabled=false"]
FEM = ["--backend", "numpy", "--quiet", "--no-plots", "--set", "mesh.nx=6"]


@pytest.fixture(autouse=True)
def _address_space_limit():
    """Reading without end (a link to /dev/zero) ends in MemoryError here, not in the machine's OOM killer."""
    old = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, old)


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and not p.name.startswith(".hpcsolve")}


def _leftovers(out: Path) -> list[str]:
    return sorted(str(p.relative_to(out)) for p in out.rglob("*")
                  if p.name.endswith(".tmp") or p.name.startswith((outdir.STAGING_PREFIX, outdir.PREVIOUS_PREFIX)))


#: a heartbeat line (hpcsolve/core/heartbeat.py): printed when a phase takes EVERY_S, i.e. only on a slow machine
HEARTBEAT = re.compile(r"^hpcsolve: .*\(\d+ s so far\)$")


def _one_error(err: str, field: str) -> bool:
    lines = [line for line in err.strip().splitlines()
             if not line.startswith("hpcsolve: warning:") and not HEARTBEAT.match(line)]
    return len(lines) == 1 and lines[0].startswith(f"hpcsolve: error: {field}") and "Traceback" not in err


# ================================================================================================ 1. full disk

class _Disk:
    """A disk with room for ``room`` more bytes (None: unlimited), on every checked write."""

    def __init__(self, monkeypatch):
        self.room, real = None, safe_io.write_chunk

        def write_chunk(fd, piece, offset):
            n = memoryview(piece).nbytes
            if self.room is not None:
                if n > self.room:
                    raise OSError(28, "No space left on device")
                self.room -= n
            return real(fd, piece, offset)

        monkeypatch.setattr(safe_io, "write_chunk", write_chunk)


def _kind_args(kind: str, out: Path, again: bool) -> list[str]:
    if kind == "run-lbm":
        return ["run", str(CAVITY), "--out", str(out), *LBM, *(["--overwrite", "--set", "physics.reynolds=50"]
                                                              if again else [])]
    if kind == "run-fem":
        return ["run", str(POISSON), "--out", str(out), *FEM, *(["--overwrite", "--set", "mesh.nx=8"] if again else [])]
    if kind == "compare":
        return ["compare", str(POISSON), "--backends", "numpy", "--precisions", "fp64", "fp32", "--no-warmup",
                "--quiet", "--set", "mesh.nx=6", "--out", str(out), *(["--overwrite"] if again else [])]
    return ["bench", "fem", "--sizes", "64", "--backends", "numpy", "--out", str(out), "--quick"]


def _runs_of(out: Path, kind: str) -> list[Path]:
    if kind.startswith("run"):
        return [out]
    if kind == "compare":
        return [p for p in out.iterdir() if p.is_dir() and (p / outdir.MARKER).exists()]
    return []


def _check_disk(kind: str, out: Path, before: dict, code: int, err: str) -> str:
    if _leftovers(out):
        return f"left behind: {_leftovers(out)}"
    if code == 0:
        return ""
    if code != 2 or not _one_error(err, "--out" if kind != "bench" else "--out"):
        return f"exit {code}: {err[-400:]}"
    after = _files(out)
    if kind.startswith("run"):
        return "" if after == before else "the earlier result changed"
    if kind == "compare":      # each run folder: its earlier result complete and unchanged, or a new complete one
        for run in {k.split("/")[0] for k in before if k.endswith("/" + outdir.MARKER)}:   # (its plots/ go: by design)
            old = {k: v for k, v in before.items() if k.startswith(run + "/")}
            new = {k: v for k, v in after.items() if k.startswith(run + "/")}
            if new != old:
                try:
                    read_result_folder(out / run)
                except HpcsolveError as exc:
                    return f"{run}: neither the earlier result nor a complete new one ({exc})"
        return ""
    for name, data in after.items():         # bench: each file old or new, whole
        if name.endswith(".json") and data != before.get(name):
            json.loads(data)
    return ""


@pytest.mark.parametrize("chunk", _chunks(DISK_CHUNKS, DEFAULT_DISK_CHUNKS))
def test_generated_overwrites_on_a_full_disk_keep_the_earlier_output(chunk, tmp_path, monkeypatch):
    rng = random.Random(f"{SEED}:disk:{chunk}")
    disk, counts, outcomes, failures = _Disk(monkeypatch), Counter(), Counter(), []
    kinds = ["run-lbm", "run-fem", "compare", "bench"]
    bases = {}
    try:
        with outer_limit(CHUNK_LIMIT_S):
            for i in range(DISK_CHUNK):
                kind = kinds[i % 4] if i < 4 else rng.choice(kinds)
                if kind not in bases:
                    base = tmp_path / f"base-{kind}"
                    disk.room = None
                    code, _, err = _cli(_kind_args(kind, base, again=False))
                    assert code == 0, (kind, err[-2000:])
                    bases[kind] = base
                out = tmp_path / f"{kind}-{i}"
                shutil.copytree(bases[kind], out)
                before = _files(out)
                disk.room = rng.choice([0, rng.randrange(1, 4096), rng.randrange(4096, 200_000),
                                        rng.randrange(200_000, 2_000_000)])
                code, _, err = _cli(_kind_args(kind, out, again=True))
                disk.room = None
                counts[kind] += 1
                outcomes[f"{kind}:exit{code}"] += 1
                why = _check_disk(kind, out, before, code, err)
                if why:
                    failures.append((kind, i, why))
    except Hang:
        failures.append(("hang", -1, f"the chunk's outer limit of {CHUNK_LIMIT_S} s passed"))
    _report("full disk", chunk, counts, outcomes)
    assert not failures, failures
    assert sum(n for k, n in outcomes.items() if not k.endswith("exit0")) >= 1, outcomes


# ================================================================================================ 2. foreign checkpoints

def _interrupted_cavity(folder: Path) -> None:
    code, _, err = _cli(["run", str(CAVITY), "--out", str(folder), *LBM])
    assert code == 0, err
    summary = json.loads((folder / "summary.json").read_text())
    (folder / "summary.json").write_text(json.dumps({**summary, "status": "interrupted"}))


FOREIGN = {"taylor_green": (TG, []), "cavity-re50": (CAVITY, ["--set", "physics.reynolds=50"]),
           "cavity-res20": (CAVITY, ["--set", "lattice.resolution=20"]), "same": (CAVITY, [])}


@pytest.mark.parametrize("chunk", _chunks(FOREIGN_CHUNKS, DEFAULT_FOREIGN_CHUNKS))
def test_generated_foreign_checkpoints_are_refused_naming_both_cases(chunk, tmp_path):
    rng = random.Random(f"{SEED}:foreign:{chunk}")
    counts, outcomes, failures = Counter(), Counter(), []
    base = tmp_path / "base"
    _interrupted_cavity(base)
    donors = {}
    for name, (case, sets) in FOREIGN.items():
        donors[name] = tmp_path / f"donor-{name}"
        code, _, err = _cli(["run", str(case), "--out", str(donors[name]), *LBM, *sets])
        assert code == 0, err
    import warnings
    for i in range(FOREIGN_CHUNK):
        name = list(FOREIGN)[i % 4] if i < 4 else rng.choice(list(FOREIGN))
        how, force = rng.choice(["newest", "all"]), rng.random() < 0.4
        out = tmp_path / f"f{i}"
        shutil.copytree(base, out)
        donor = read_checkpoint(rng.choice(list_checkpoints(donors[name])))
        if how == "all" and name != "same":
            for p in list_checkpoints(out):
                p.unlink()
        shutil.copy(donor.path, out / "checkpoints" / "checkpoint_0000000300.h5")
        before = _files(out)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            code, _, err = _cli(["run", "--resume", str(out), "--quiet", "--no-plots", *(["--force"] * force)])
        said = " ".join(str(w.message) for w in caught if "of another case" in str(w.message))
        counts[f"{name}:{how}"] += 1
        outcomes[f"exit{code}"] += 1
        mine = read_checkpoint(list_checkpoints(base)[0]).meta["case_hash"]
        if name == "same":
            wrong = "" if code == 0 and not said else f"same case: exit {code}, {said or err[-300:]}"
        elif force:
            wrong = "" if code == 0 and donor.meta["case_hash"] in said and mine in said else \
                f"--force: exit {code}, warning {said!r}"
        else:
            wrong = "" if (code == 2 and _one_error(err, "--resume") and donor.meta["case_hash"] in err
                           and mine in err and _files(out) == before) else f"exit {code}: {err[-400:]}"
        if wrong:
            failures.append((name, how, force, wrong))
    _report("foreign checkpoints", chunk, counts, outcomes)
    assert not failures, failures


# ================================================================================================ 3. special files

KINDS = ["fifo", "zero", "null", "socket", "loop"]


def _make_special(path: Path, kind: str, keep: list) -> None:
    if path.is_symlink() or path.exists():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind in ("zero", "null"):
        path.symlink_to(f"/dev/{kind}")
    elif kind == "socket":
        # bound at a short name, then moved into place: an AF_UNIX address holds at most 107 bytes, and pytest's
        # temporary paths in a deep checkout are longer (CI's are)
        short = Path(tempfile.mkdtemp(prefix="s", dir="/tmp")) / "s"
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(short))
        os.replace(short, path)
        short.parent.rmdir()
        keep.append(s)
    else:
        path.symlink_to(path.name)


def _where_cases(tmp: Path, name: str, kind: str, keep: list):
    """(what is called, expected field text) for one special file at ``name``."""
    if name == "case file":
        p = tmp / "case.toml"
        _make_special(p, kind, keep)
        return lambda: _cli(["validate", str(p)]), "case"
    if name == "mesh.path":
        p = tmp / "mesh.msh"
        _make_special(p, kind, keep)
        return lambda: _cli(["validate", str(CASES / "heat_plate_with_hole.toml"), "--set", f"mesh.path='{p}'"]), \
            "mesh.path"
    if name == "mask":
        p = tmp / "mask.npy"
        _make_special(p, kind, keep)
        return lambda: _cli(["validate", str(CAVITY), "--set", "validation.reference='none'", "--set",
                             f"obstacles=[{{shape='mask', file='{p}'}}]"]), "obstacles"
    return None, None


def _folder_case(tmp: Path, base: Path, name: str, kind: str, keep: list):
    out = tmp / "run"
    shutil.copytree(base, out, symlinks=True)
    if name == "summary.json (resume)":
        _make_special(out / "summary.json", kind, keep)
        return lambda: _cli(["run", "--resume", str(out), "--quiet", "--no-plots"]), "--resume"
    if name in ("manifest.json", "result.h5"):
        _make_special(out / name, kind, keep)
        return lambda: read_result_folder(out), name
    if name == "read_h5":
        _make_special(out / "result.h5", kind, keep)
        return lambda: read_h5(out / "result.h5"), "result.h5"
    if name == "checkpoint":
        p = list_checkpoints(out)[-1]
        _make_special(p, kind, keep)
        return lambda: read_checkpoint(p), "--resume"
    journal = out / f"{outdir.PREVIOUS_PREFIX}0123456789ab{outdir.JOURNAL_SUFFIX}"
    _make_special(journal, kind, keep)
    return lambda: _cli(["run", str(CAVITY), "--out", str(out), *LBM, "--overwrite", "--set", "time.steps=100"]), ""


PLACES = ["case file", "mesh.path", "mask", "summary.json (resume)", "manifest.json", "result.h5", "read_h5",
          "checkpoint", "journal"]


def _judge_special(place: str, field: str, outcome: dict) -> str:
    if "error" in outcome:
        exc = outcome["error"]
        if isinstance(exc, HpcsolveError) and (field in str(exc)):
            return ""
        return f"{type(exc).__name__}: {str(exc)[:300]}"
    code, _, err = outcome["value"] if isinstance(outcome["value"], tuple) else (None, "", "")
    if place == "journal":        # an unreadable journal is left alone; the run goes on
        return "" if code == 0 else f"exit {code}: {err[-300:]}"
    if code == 2 and _one_error(err, field) and "memory" not in err:
        return ""
    return f"exit {code}: {err[-300:]}"


@pytest.mark.parametrize("chunk", _chunks(SPECIAL_CHUNKS, DEFAULT_SPECIAL_CHUNKS))
def test_generated_special_files_are_refused_unopened(chunk, tmp_path):
    rng = random.Random(f"{SEED}:special:{chunk}")
    counts, outcomes, failures = Counter(), Counter(), []
    base = tmp_path / "base"
    code, _, err = _cli(["run", str(CAVITY), "--out", str(base), *LBM])
    assert code == 0, err
    pairs = [(p, k) for p in PLACES for k in KINDS]
    rng.shuffle(pairs)
    for i, (place, kind) in enumerate(pairs[:SPECIAL_CHUNK]):
        tmp, keep = tmp_path / f"s{i}", []
        tmp.mkdir()
        call, field = _where_cases(tmp, place, kind, keep)
        if call is None:
            call, field = _folder_case(tmp, base, place, kind, keep)
        try:
            with outer_limit(60):
                outcome = {"value": call()}
        except Hang:
            outcome = {"error": Hang()}
            failures.append((place, kind, "hang"))
            continue
        except Exception as exc:     # noqa: BLE001
            outcome = {"error": exc}
        finally:
            for s in keep:
                s.close()
        counts[place] += 1
        wrong = _judge_special(place, field, outcome)
        outcomes["ok" if not wrong else "wrong"] += 1
        if wrong:
            failures.append((place, kind, wrong))
    _report("special files", chunk, counts, outcomes)
    assert not failures, failures
