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

from hpcsolve.core.backends import BACKENDS
from hpcsolve.core.errors import CaseError, OutputError, clip, shown
from hpcsolve.core.interrupts import deferred
from hpcsolve.core.precision import POLICIES
from hpcsolve.core.results import _jsonable
from hpcsolve.core.safe_io import path_problem, write_h5_atomic
from hpcsolve.core.version import __version__

KEEP = 2
SUBDIR = "checkpoints"


#: a field absent from a checkpoint (``CheckpointError``'s value when there is none to show)
MISSING = object()


class CheckpointError(CaseError):
    """A checkpoint that cannot be resumed from: a field of it missing or malformed. The message names the
    file and the field (``meta.case_text``, ``state.series``, ``arrays/populations``); the file is left as it is."""

    def __init__(self, path, field: str, value=MISSING, allowed: str = "", why: str | None = None):
        got = "missing" if value is MISSING else f"got {shown(value)}"
        detail = f"{why} ({got}; allowed: {allowed})" if why else f"{got}; allowed: {allowed}"
        if why and not allowed:          # ``why`` says it all (e.g. the case error of a recorded case)
            detail = why
        where = f"checkpoint {clip(str(path), 300)}" if path is not None else "checkpoint"
        super().__init__(f"{where}: {field}: {detail}")
        self.path = Path(path) if path is not None else None
        self.field, self.value, self.allowed = field, None if value is MISSING else value, allowed


def as_number(value) -> float | None:
    """``value`` read back from a checkpoint's JSON as a float (non-finite ones are stored as 'inf', 'nan'),
    or None where it is no number."""
    if isinstance(value, bool):
        return None
    try:
        return float(value) if isinstance(value, (int, float, str)) else None
    except (ValueError, OverflowError):
        return None


@dataclass
class Checkpoint:
    step: int
    arrays: dict[str, np.ndarray]             # solver state (e.g. populations), exact dtype
    state: dict = field(default_factory=dict)  # JSON-able loop state (series so far, counters)
    meta: dict = field(default_factory=dict)   # case_text, case_json, backend, precision, version
    path: Path | None = None

    def error(self, field: str, value=MISSING, allowed: str = "", why: str | None = None) -> CheckpointError:
        """The error for a missing (no ``value``) or malformed field of this checkpoint."""
        return CheckpointError(self.path, field, value, allowed, why)

    def _value(self, field: str, default=MISSING):
        """``state.<name>`` or ``meta.<name>`` (``default`` where absent)."""
        section, _, name = field.partition(".")
        return (self.state if section == "state" else self.meta).get(name, default)

    def number(self, field: str, *, default=MISSING, minimum: float | None = None, finite: bool = True) -> float:
        """``state.<name>`` or ``meta.<name>`` as a float, checked: >= ``minimum``, finite unless not ``finite``."""
        value = self._value(field, default)
        if value is MISSING:
            raise self.error(field, allowed=_number_allowed(minimum, finite))
        x = as_number(value)
        if x is None or (finite and not np.isfinite(x)) or (minimum is not None and not x >= minimum):
            raise self.error(field, value, _number_allowed(minimum, finite))
        return x

    def whole(self, field: str, *, minimum: int = 0, maximum: int | None = None) -> int:
        """``state.<name>`` or ``meta.<name>`` as an int in [minimum, maximum], checked."""
        value = self._value(field)
        allowed = f"a whole number >= {minimum}" + (f" and <= {maximum}" if maximum is not None else "")
        if value is MISSING:
            raise self.error(field, allowed=allowed)
        if type(value) is not int or value < minimum or (maximum is not None and value > maximum):
            raise self.error(field, value, allowed)
        return value


def checkpoint_dir(out_dir: str | Path) -> Path:
    return Path(out_dir) / SUBDIR


def write_checkpoint(out_dir: str | Path, ckpt: Checkpoint, keep: int = KEEP) -> Path:
    """Write ``ckpt`` atomically (checked writes, no signal in between), then
    delete all but the newest ``keep`` checkpoints. A failed write (a full disk) raises OutputError
    and leaves the earlier checkpoints as they were."""
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


def _number_allowed(minimum, finite) -> str:
    return ("a finite number" if finite else "a number") + (f" >= {minimum:g}" if minimum is not None else "")


#: the largest step a checkpoint may hold (a step counter is a 64-bit integer in the kernels)
MAX_STEP = 2**62
#: meta fields that are text when present (a checkpoint written by ``hpcsolve run`` has all of them)
META_TEXT = ("hpcsolve_version", "backend", "precision", "solver", "case_text", "case_json", "case_file")


def read_checkpoint(path: str | Path) -> Checkpoint:
    """The checkpoint in ``path``, its layout and generic metadata checked: a damaged or missing field is a
    CheckpointError naming the file and the field (an unreadable file, OSError)."""
    import h5py   # late: start-up cost (h5py, 0.16 s)

    path = Path(path)
    with h5py.File(path, "r") as f:
        meta = _json_object(f, path, "meta")
        state = _json_object(f, path, "state")
        group = f.get("arrays")
        if not isinstance(group, h5py.Group):
            raise CheckpointError(path, "arrays", MISSING if group is None else type(group).__name__,
                                  "an HDF5 group of the solver's arrays")
        arrays = {}
        for k in group:
            item = group.get(k)
            if not isinstance(item, h5py.Dataset):
                raise CheckpointError(path, f"arrays/{k}", type(item).__name__, "an HDF5 dataset")
            arrays[k] = item[()]
    ckpt = Checkpoint(step=0, arrays=arrays, state=state, meta=meta, path=path)
    ckpt.step = ckpt.whole("meta.step", maximum=MAX_STEP)
    _check_meta(ckpt)
    return ckpt


def _json_object(f, path: Path, name: str) -> dict:
    """The attribute ``name`` of ``f``: JSON text of an object."""
    allowed = "JSON text of an object ({...})"
    if name not in f.attrs:
        raise CheckpointError(path, name, allowed=allowed)
    raw = f.attrs[name]
    if not isinstance(raw, (str, bytes)):
        raise CheckpointError(path, name, raw, allowed)
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:   # UnicodeDecodeError is a ValueError
        why = "nested too deeply" if isinstance(exc, RecursionError) else f"not valid JSON: {clip(str(exc))}"
        raise CheckpointError(path, name, raw, allowed, why=why) from None
    if not isinstance(value, dict):
        raise CheckpointError(path, name, value, allowed, why=f"a JSON {type(value).__name__}, not an object")
    return value


def _check_meta(ckpt: Checkpoint) -> None:
    """The types of the metadata ``hpcsolve run`` writes, where present (a resume checks what it needs)."""
    meta = ckpt.meta
    for name in META_TEXT:
        if name in meta and not isinstance(meta[name], str):
            raise ckpt.error(f"meta.{name}", meta[name], "text")
    if "backend" in meta and meta["backend"] not in BACKENDS:
        raise ckpt.error("meta.backend", meta["backend"], ", ".join(BACKENDS))
    if "precision" in meta and meta["precision"] not in POLICIES:
        raise ckpt.error("meta.precision", meta["precision"], ", ".join(POLICIES))
    overrides = meta.get("overrides", [])
    if not isinstance(overrides, list) or not all(isinstance(a, str) for a in overrides):
        raise ckpt.error("meta.overrides", overrides, "a list of key.path=value texts")
    if "case_json" in meta:
        try:
            case_json = json.loads(meta["case_json"])
        except (ValueError, RecursionError):
            case_json = None
        if not isinstance(case_json, dict):
            raise ckpt.error("meta.case_json", meta["case_json"], "JSON text of the validated case (an object)")


def latest_checkpoint(out_dir: str | Path, use=None, skipped: list | None = None):
    """The newest readable checkpoint in ``out_dir`` (an unreadable or damaged newest one falls back to the
    previous). With ``use``, ``use(checkpoint)`` of the first one it accepts: a CheckpointError it raises
    counts as damage too (any other error is raised as it is). None readable: a CaseError naming each file.
    ``skipped``: a list that receives (path, why) for each checkpoint passed over, newest first."""
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
    passed = []                              # (path, why) of each checkpoint passed over
    for path in reversed(files):
        try:
            ckpt = read_checkpoint(path)
        except CheckpointError as exc:       # names the file and the field
            passed.append((path, str(exc)))
            continue
        except (OSError, KeyError, ValueError) as exc:   # not an HDF5 file, truncated, unreadable
            passed.append((path, f"checkpoint {path}: {exc}"))
            continue
        if use is None:
            break
        try:
            ckpt = use(ckpt)
            break
        except CheckpointError as exc:
            passed.append((path, str(exc)))
    else:
        errors = [why for _, why in passed]
        raise CaseError(f"no checkpoint in {clip(str(out_dir))} can be resumed from: " + "; ".join(errors),
                        field="--resume", value=str(out_dir), allowed="a folder with a readable checkpoint")
    if skipped is not None:
        skipped.extend(passed)
    return ckpt


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
