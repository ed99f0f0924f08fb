"""Checkpoints: the full solver state in HDF5, written atomically, the last two kept.

A checkpoint records the effective case (text and validated JSON), backend, precision and
hpcsolve version; resuming with different ones is refused unless forced. Files live in
``<out>/checkpoints/checkpoint_<step>.h5``.

Integrity: the attribute ``checksum`` holds a SHA-256 digest of the ``meta`` and ``state`` texts and of each
array (its dtype, shape and bytes), and one digest over all of them, which binds the arrays to the metadata
(an older checkpoint's array swapped in, with or without its digest, does not match). Reading checks them: a
mismatch is damage, as a truncated file is (``resume`` passes over it for the previous checkpoint). A checkpoint
written before checksums (no ``checksum``, no ``meta.checksum``) is read unchecked, with one note.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hpcsolve.core.backends import BACKENDS
from hpcsolve.core.errors import CaseError, OutputError, clip, shown
from hpcsolve.core.interrupts import deferred
from hpcsolve.core.precision import POLICIES
from hpcsolve.core.results import _jsonable
from hpcsolve.core.outdir import SUMMARY_MAX_BYTES
from hpcsolve.core.safe_io import H5_FILE_MAX_BYTES, open_h5, path_problem, read_json, write_h5_atomic
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
    checked: bool = True                       # False: read from a file written before checksums (not checked)

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
    meta = {"hpcsolve_version": __version__, **ckpt.meta, "step": int(ckpt.step), "checksum": HASH}

    def fill(f):
        meta_text, state_text = json.dumps(_jsonable(meta)), json.dumps(_jsonable(ckpt.state))
        arrays = {name: np.asarray(a) for name, a in ckpt.arrays.items()}
        f.attrs["meta"] = meta_text
        f.attrs["state"] = state_text
        g = f.create_group("arrays")
        for name, a in arrays.items():
            g.create_dataset(name, data=a)
        f.attrs[CHECKSUM] = json.dumps(checksum_record(meta_text, state_text, arrays))

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
META_TEXT = ("hpcsolve_version", "backend", "precision", "solver", "case_text", "case_json", "case_file", "case_name",
             "case_hash")


def read_checkpoint(path: str | Path) -> Checkpoint:
    """The checkpoint in ``path``, its layout and generic metadata checked: a damaged or missing field is a
    CheckpointError naming the file and the field (an unreadable file, OSError)."""
    import h5py   # late: start-up cost (h5py, 0.16 s)

    path = Path(path)
    with open_h5(path, "--resume", "a checkpoint that is a regular file", max_bytes=H5_FILE_MAX_BYTES) as f:
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
        checked = _verify(f, path, meta, arrays)
    ckpt = Checkpoint(step=0, arrays=arrays, state=state, meta=meta, path=path, checked=checked)
    ckpt.step = ckpt.whole("meta.step", maximum=MAX_STEP)
    _check_meta(ckpt)
    return ckpt


#: the attribute holding the checksum record, and its hash (hashlib: one pass over each array's bytes)
CHECKSUM = "checksum"
HASH = "sha256"


def _text_digest(text) -> str:
    return hashlib.new(HASH, text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)).hexdigest()


def _array_digest(a: np.ndarray) -> str:
    """The digest of an array's dtype, shape and bytes (C order)."""
    a = np.ascontiguousarray(a)
    h = hashlib.new(HASH, f"{a.dtype.str} {a.shape}".encode())
    h.update(a.reshape(-1).view(np.uint8))
    return h.hexdigest()


def _binding(meta: str, state: str, arrays: dict) -> str:
    """One digest over the digests of the metadata, the state and every array (by name)."""
    return _text_digest(json.dumps({"meta": meta, "state": state, "arrays": arrays}, sort_keys=True))


def checksum_record(meta_text: str, state_text: str, arrays: dict[str, np.ndarray]) -> dict:
    """The checksum record written with a checkpoint: the digests of the ``meta`` and ``state`` texts and of each
    array, and their ``binding`` digest."""
    meta, state = _text_digest(meta_text), _text_digest(state_text)
    digests = {name: _array_digest(a) for name, a in arrays.items()}
    return {"algorithm": HASH, "meta": meta, "state": state, "arrays": digests,
            "binding": _binding(meta, state, digests)}


def seal(f) -> None:
    """Write the checksum record of the open checkpoint file ``f`` (h5py, writable) from what it holds now: for a
    tool that edits checkpoints on purpose (and tests of the field checks behind the checksum)."""
    arrays = {k: f["arrays"][k][()] for k in f["arrays"]}
    f.attrs[CHECKSUM] = json.dumps(checksum_record(f.attrs["meta"], f.attrs["state"], arrays))


def _verify(f, path: Path, meta: dict, arrays: dict) -> bool:
    """Check ``f``'s contents against its checksum record (a mismatch: a CheckpointError naming what differs).
    False for a checkpoint written before checksums (neither the record nor ``meta.checksum``)."""
    if CHECKSUM not in f.attrs and "checksum" not in meta:
        return False
    allowed = f"the {HASH} digests of meta, state and each array written with the checkpoint"
    record = _json_object(f, path, CHECKSUM) if CHECKSUM in f.attrs else None
    if record is None:
        raise CheckpointError(path, CHECKSUM, allowed=allowed + f" (meta.checksum says {shown(meta['checksum'])})")
    digests = record.get("arrays")
    if (record.get("algorithm") != HASH or not isinstance(digests, dict)
            or not all(isinstance(record.get(k), str) for k in ("meta", "state", "binding"))):
        raise CheckpointError(path, CHECKSUM, record, allowed)
    why = "the file is damaged or was changed: its {} does not match the checksum written with it ({} now, {} recorded)"
    for name in ("meta", "state"):
        now = _text_digest(f.attrs[name])
        if now != record[name]:
            raise CheckpointError(path, name, why=why.format("text", now[:16], record[name][:16]))
    if set(digests) != set(arrays):
        raise CheckpointError(path, "arrays", sorted(arrays), f"the arrays written: {', '.join(sorted(digests))}",
                              why="the file is damaged or was changed: other arrays than the checksum lists")
    for name, a in arrays.items():
        now = _array_digest(a)
        if now != digests[name]:
            raise CheckpointError(path, f"arrays/{name}",
                                  why=why.format("data", now[:16], str(digests[name])[:16]))
    if _binding(record["meta"], record["state"], digests) != record["binding"]:
        raise CheckpointError(path, CHECKSUM, why="the file is damaged or was changed: the digests of meta, state "
                                                  "and arrays do not match their binding digest (an array or digest "
                                                  "from another checkpoint?)")
    return True


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
    lineage = meta.get("case_lineage", [])
    if not isinstance(lineage, list) or not all(isinstance(h, str) for h in lineage):
        raise ckpt.error("meta.case_lineage", lineage, "a list of case hashes (texts)")
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
            ckpt = found = read_checkpoint(path)
        except CheckpointError as exc:       # names the file and the field
            passed.append((path, str(exc)))
            continue
        except (OSError, KeyError, ValueError) as exc:   # not an HDF5 file, truncated, unreadable
            passed.append((path, f"checkpoint {path}: {exc}"))
            continue
        if use is None:
            break
        try:
            ckpt = use(found)
            break
        except CheckpointError as exc:
            passed.append((path, str(exc)))
    else:
        errors = [why for _, why in passed]
        raise CaseError(f"no checkpoint in {clip(str(out_dir))} can be resumed from: " + "; ".join(errors),
                        field="--resume", value=str(out_dir), allowed="a folder with a readable checkpoint")
    if skipped is not None:
        skipped.extend(passed)
    if not found.checked:
        warnings.warn(f"checkpoint {clip(str(found.path), 300)}: no checksum (written before checkpoints carried "
                      f"one): its contents cannot be checked for damage", stacklevel=2)
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
            then = _identity(meta.get("case_name", old.get("name") if isinstance(old, dict) else None),
                             case_lineage(meta))
            now = _identity(new.get("name") if isinstance(new, dict) else None, [case_hash(case_json)])
            diffs.append(f"{then} in the checkpoint, {now} now: the case differs in " + ", ".join(changed[:8])
                         + (" ..." if len(changed) > 8 else ""))
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


# ------------------------------------------------------------------------------------------------
# case identity: a checkpoint belongs to the run of one case (its hash), resumed only into that run's folder

def case_hash(case_json: str) -> str:
    """The identity of a case: the first 16 hex digits of the SHA-256 of its effective JSON (every default filled
    in), as ``CaseBase.effective_json`` writes it."""
    return hashlib.sha256(case_json.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def case_lineage(meta: dict) -> list[str]:
    """The case hashes of the run a checkpoint (its ``meta``) or a result (its provenance) belongs to, oldest first:
    ``case_lineage`` (a run resumed with --force into another case keeps the hashes before), else ``case_hash``, else
    the hash of ``case_json`` (checkpoints written before the identity was recorded); [] where none is known."""
    lineage = meta.get("case_lineage")
    if isinstance(lineage, list) and lineage and all(isinstance(h, str) for h in lineage):
        return list(lineage)
    if isinstance(meta.get("case_hash"), str):
        return [meta["case_hash"]]
    return [case_hash(meta["case_json"])] if isinstance(meta.get("case_json"), str) else []


def _identity(name, lineage: list[str]) -> str:
    return f"case {name!r} (case hash {lineage[-1]})" if isinstance(name, str) else f"case hash {lineage[-1]}"


def folder_identities(out_dir: str | Path, but: Path | None = None) -> list[tuple[str, object, list[str]]]:
    """(where, case name, lineage) of each record in a run folder that says which case its run was: the other
    checkpoints (their metadata only; an unreadable one says nothing) and the result (summary.json's provenance,
    else result.h5's ``case_json``)."""
    out, found = Path(out_dir), []
    for path in list_checkpoints(out):
        if but is not None and path == but:
            continue
        try:
            with open_h5(path, "--resume", "a checkpoint") as f:
                meta = json.loads(f.attrs["meta"])
        except (OSError, KeyError, ValueError, TypeError):     # damaged: the choice of a checkpoint says so
            continue
        if isinstance(meta, dict) and case_lineage(meta):
            found.append((f"{SUBDIR}/{path.name}", meta.get("case_name"), case_lineage(meta)))
    try:
        summary = read_json(out / "summary.json", "--resume", "a summary", max_bytes=SUMMARY_MAX_BYTES)
        prov = summary.get("provenance", {}) if isinstance(summary, dict) else {}
        lineage = case_lineage(prov) if isinstance(prov, dict) else []
        if not lineage and (out / "result.h5").is_file():
            with open_h5(out / "result.h5", "--resume", "a result") as f:
                lineage = case_lineage({"case_json": _text(f.attrs.get("case_json"))})
        if lineage:
            found.append(("summary.json", summary.get("case"), lineage))
    except (OSError, KeyError, ValueError, TypeError, AttributeError):   # no readable result: nothing to compare
        pass
    return found


def _text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def check_same_run(out_dir: str | Path, ckpt: Checkpoint, force: bool = False) -> list[str]:
    """A checkpoint must belong to the run whose folder it is in: its case lineage shares a case hash with every other
    record of the folder that names one (:func:`folder_identities`). A checkpoint of another case (copied in under a
    newer name) is refused naming both cases and hashes, unless ``force`` (then the differences are returned)."""
    mine = case_lineage(ckpt.meta)
    if not mine:
        return []
    me = _identity(ckpt.meta.get("case_name"), mine)
    diffs = [f"{ckpt.path.name} is of {me}, {where} in the folder of {_identity(name, lineage)}"
             for where, name, lineage in folder_identities(out_dir, but=ckpt.path) if not set(lineage) & set(mine)]
    if diffs and not force:
        raise CaseError.invalid(
            "--resume", str(ckpt.path), "a checkpoint of the run whose folder it is in (or --force)",
            why="a checkpoint of another case than the folder's run: " + "; ".join(diffs[:3]) + (" ..." if len(diffs) > 3 else "")
                + "; remove it, or add --force to resume it anyway")
    return diffs
