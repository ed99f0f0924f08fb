"""Checkpoints: the full solver state in HDF5, written atomically, the last two kept.

A checkpoint records the effective case (text and validated JSON), backend, precision and
hpcsolve version; resuming with different ones is refused unless forced. Files live in
``<out>/checkpoints/checkpoint_<step>.h5``.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hpcsolve import __version__
from hpcsolve.errors import CaseError
from hpcsolve.results import _jsonable

KEEP = 2
SUBDIR = "checkpoints"


@dataclass
class Checkpoint:
    step: int
    arrays: dict[str, np.ndarray]             # solver state (e.g. populations), exact dtype
    state: dict = field(default_factory=dict)  # JSON-able loop state (series so far, counters)
    meta: dict = field(default_factory=dict)   # case_text, case_json, backend, precision, version
    path: Path | None = None


def checkpoint_dir(out_dir: str | Path) -> Path:
    return Path(out_dir) / SUBDIR


def write_checkpoint(out_dir: str | Path, ckpt: Checkpoint, keep: int = KEEP) -> Path:
    """Write ``ckpt`` atomically (checked writes, no signal in between), then
    delete all but the newest ``keep`` checkpoints. A failed write (a full disk) raises OutputError
    and leaves the earlier checkpoints as they were."""
    from hpcsolve.errors import OutputError
    from hpcsolve.interrupts import deferred
    from hpcsolve.safe_io import write_h5_atomic

    d = checkpoint_dir(out_dir)
    path = d / f"checkpoint_{ckpt.step:010d}.h5"
    meta = {"hpcsolve_version": __version__, **ckpt.meta, "step": int(ckpt.step)}

    def fill(f):
        f.attrs["meta"] = json.dumps(_jsonable(meta))
        f.attrs["state"] = json.dumps(_jsonable(ckpt.state))
        g = f.create_group("arrays")
        for name, a in ckpt.arrays.items():
            g.create_dataset(name, data=np.asarray(a))

    with deferred():
        try:
            d.mkdir(parents=True, exist_ok=True)
            write_h5_atomic(path, fill)
        except OSError as exc:
            raise OutputError.invalid("--out", str(out_dir), "a folder with free space that this user can write",
                                      why=f"cannot write checkpoint {path.name} ({exc.strerror or exc}); the "
                                          f"earlier checkpoints are kept") from None
        for old in list_checkpoints(out_dir)[:-keep]:
            with contextlib.suppress(FileNotFoundError):
                old.unlink()
    ckpt.path = path
    return path


def list_checkpoints(out_dir: str | Path) -> list[Path]:
    d = checkpoint_dir(out_dir)
    # a named pipe or folder with a checkpoint's name is not a checkpoint (opening a pipe would block)
    return sorted(p for p in d.glob("checkpoint_*.h5") if p.is_file()) if d.is_dir() else []


def read_checkpoint(path: str | Path) -> Checkpoint:
    import h5py

    with h5py.File(path, "r") as f:
        meta = json.loads(f.attrs["meta"])
        state = json.loads(f.attrs["state"])
        arrays = {k: f["arrays"][k][()] for k in f["arrays"]}
    return Checkpoint(step=int(meta["step"]), arrays=arrays, state=state, meta=meta, path=Path(path))


def latest_checkpoint(out_dir: str | Path) -> Checkpoint:
    """The newest readable checkpoint in ``out_dir`` (an unreadable newest one falls back to the previous)."""
    from hpcsolve.errors import clip
    from hpcsolve.safe_io import path_problem

    problem = path_problem(out_dir)
    if problem:
        raise CaseError.invalid("--resume", clip(str(out_dir)), "a run folder with checkpoints", why=problem)
    try:
        files = list_checkpoints(out_dir)
    except OSError as exc:
        raise CaseError.invalid("--resume", clip(str(out_dir)), "a run folder with checkpoints",
                                why=f"cannot look at it ({exc.strerror})") from None
    if not files:
        raise CaseError.invalid("--resume", str(out_dir), f"a run folder with {SUBDIR}/checkpoint_*.h5",
                                why="no checkpoint found")
    errors = []
    for path in reversed(files):
        try:
            return read_checkpoint(path)
        except (OSError, KeyError, ValueError) as exc:
            errors.append(f"{path.name}: {exc}")
    raise CaseError.invalid("--resume", str(out_dir), "a readable checkpoint", why="; ".join(errors))


#: case keys that change how a run is computed but not its results (checkpoints hold the populations in the
#: even layout whatever the streaming): a run resumes across them. lattice.streaming's default became "auto"
#: after checkpoints were written with "two-buffer".
RESULT_NEUTRAL_KEYS = frozenset({"lattice.streaming"})


def check_compatible(ckpt: Checkpoint, *, case_json: str, backend: str, precision: str, force: bool = False) -> list[str]:
    """Differences between the checkpoint and the run that wants to resume it; raises unless forced."""
    meta = ckpt.meta
    diffs = []
    backend = str(backend)
    if meta.get("backend") != backend:
        diffs.append(f"backend {meta.get('backend')!r} in the checkpoint, {backend!r} now")
    if meta.get("precision") != precision:
        diffs.append(f"precision {meta.get('precision')!r} in the checkpoint, {precision!r} now")
    if meta.get("hpcsolve_version") != __version__:
        diffs.append(f"hpcsolve {meta.get('hpcsolve_version')} wrote the checkpoint, this is {__version__}")
    if meta.get("case_json") is not None:
        old, new = json.loads(meta["case_json"]), json.loads(case_json)
        changed = sorted(k for k in _diff_keys(old, new) if k not in RESULT_NEUTRAL_KEYS)
        if changed:
            diffs.append("case differs in " + ", ".join(changed[:8]) + (" ..." if len(changed) > 8 else ""))
    if diffs and not force:
        raise CaseError.invalid("--resume", str(ckpt.path), "the same case, backend, precision and version "
                                "(or --force)", why="the checkpoint does not match this run: " + "; ".join(diffs))
    return diffs


def _diff_keys(a, b, prefix=""):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in set(a) | set(b):
            yield from _diff_keys(a.get(k), b.get(k), f"{prefix}{k}.")
    elif a != b:
        yield prefix.rstrip(".")
