"""The output folder of a run: checked before the run, locked during it, cleaned of what dead runs left.

- ``check``: what can be said without touching anything (not a folder; holds a result or the
  checkpoints of another run and neither --overwrite nor --resume was given).
- ``claim``: creates the folder, proves it writable, takes its lock (one run per folder; a second
  one is refused naming the holder), removes temporary files and staging folders that a killed run
  left, and with --overwrite sets the previous run's files aside (renamed into a hidden folder, marker
  first, so the folder never looks complete meanwhile): they are deleted once the new run has left a
  result or checkpoints of its own, and put back when it stops without either (bad input found during
  the run, a full disk, an interrupt before the first checkpoint), so a failed --overwrite loses
  nothing. Only files hpcsolve wrote move: those the previous marker names, the result files and
  ``checkpoints/checkpoint_*.h5``; anything else in the folder, ``plots/`` included, stays. The lock is
  held until the result is written.

A result folder is complete when its marker ``manifest.json`` exists: it is written last and names
the files of the result and the run id that ``result.h5`` and ``summary.json`` carry too.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

from hpcsolve.errors import OutputError, clip

LOCK_NAME = ".hpcsolve.lock"
OWNER_NAME = ".hpcsolve-owner.json"
MARKER = "manifest.json"
RESULT_FILES = ("result.h5", "result.xdmf", "summary.json")
CHECKPOINT_DIR = "checkpoints"
PLOT_DIR = "plots"
STAGING_PREFIX = ".staging-"
PREVIOUS_PREFIX = ".previous-"


def _refuse(out: Path, why: str, allowed: str) -> OutputError:
    return OutputError.invalid("--out", str(out), allowed, why=why)


def has_result(out: Path) -> bool:
    return any((out / n).exists() for n in (MARKER, *RESULT_FILES))


def has_checkpoints(out: Path) -> bool:
    d = out / CHECKPOINT_DIR
    return d.is_dir() and any(d.glob("checkpoint_*.h5"))


def check(out: Path, *, overwrite: bool = False, resume: bool = False) -> None:
    """Refuse a target that is not a folder, or that holds another run's files without --overwrite."""
    from hpcsolve.safe_io import path_problem

    problem = path_problem(out)
    if problem:
        raise _refuse(out, problem, "a folder this user can write")
    out = Path(out)
    try:
        if out.is_symlink() and not out.exists():
            raise _refuse(out, f"is a symbolic link to a missing target ({clip(os.readlink(out))})",
                          "a folder, or a link to one")
        exists, is_dir = out.exists(), out.is_dir()
        holds_result = is_dir and has_result(out)
        holds_checkpoints = is_dir and has_checkpoints(out)
    except OSError as exc:
        raise _refuse(out, f"cannot look at it ({exc.strerror})", "a folder this user can write") from None
    if exists and not is_dir:
        raise _refuse(out, "exists and is not a folder", "a folder (new, or holding a result with --overwrite)")
    if not is_dir or overwrite or resume:
        return
    if holds_result:
        raise _refuse(out, "already holds a result", "a new folder, or --overwrite to replace the result there")
    if holds_checkpoints:
        raise _refuse(out, "holds the checkpoints of an unfinished run",
                      f"--resume {clip(str(out))} to continue it, --overwrite to replace it, or a new folder")


def _owner_text() -> str:
    return json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                       "started": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
                       "command": clip(" ".join(sys.argv), 300)})


def holder(out: Path) -> str:
    """Who holds the lock of ``out``, in words (from the owner file the holder wrote)."""
    from hpcsolve.safe_io import read_text

    try:
        info = json.loads(read_text(out / OWNER_NAME, "--out", "an owner file", max_bytes=4096))
        return (f"pid {info['pid']} on {info['host']}, started {info['started']}: "
                f"{clip(str(info.get('command', '')), 200)}")
    except (ValueError, KeyError, TypeError):   # CaseError is a ValueError: no readable owner file
        return "holder unknown"


def remove_stale(out: Path) -> list[str]:
    """Temporary files and staging folders in ``out`` (and its checkpoints/ and plots/) that a killed
    run left, and a previous result a killed --overwrite run set aside (put back when that run left
    nothing of its own, else deleted); only called with the folder's lock held, so none of them belongs
    to a live run."""
    removed = []
    for folder in (out, out / CHECKPOINT_DIR, out / PLOT_DIR):
        if not folder.is_dir():
            continue
        for p in folder.iterdir():
            name = p.name
            if name.startswith(".") and name.endswith(".tmp") and not p.is_dir():
                p.unlink(missing_ok=True)
                removed.append(str(p.relative_to(out)))
            elif folder == out and name.startswith(STAGING_PREFIX) and p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
                removed.append(name)
            elif folder == out and name.startswith(PREVIOUS_PREFIX) and p.is_dir():
                put_back(out, p)
                removed.append(name)
    return removed


def manifest_files(out: Path) -> list[str]:
    """The files the marker of ``out`` names (relative paths; [] without a readable marker)."""
    from hpcsolve.safe_io import read_text

    try:
        files = json.loads(read_text(out / MARKER, "--out", "a result marker", max_bytes=1 << 20)).get("files", {})
    except (ValueError, AttributeError, OSError):   # CaseError is a ValueError: no readable marker
        return []
    names = [n for n in files if isinstance(n, str)] if isinstance(files, dict) else []
    # only plain relative names inside the folder (a marker is data: never follow it outside)
    return [n for n in names if n and not Path(n).is_absolute() and ".." not in Path(n).parts]


def previous_files(out: Path) -> list[str]:
    """What hpcsolve wrote for the run whose files are in ``out``: the files its marker names, the result
    files and the checkpoints (relative paths of existing files; the marker itself not included)."""
    names = dict.fromkeys(manifest_files(out) + list(RESULT_FILES))
    d = out / CHECKPOINT_DIR
    if d.is_dir():
        names.update(dict.fromkeys(f"{CHECKPOINT_DIR}/{p.name}" for p in sorted(d.glob("checkpoint_*.h5"))))
    return [n for n in names if (out / n).is_file() and not (out / n).is_symlink()]


def holds_own_state(out: Path) -> bool:
    """``out`` holds a result or checkpoints (of the run now writing into it)."""
    return has_result(out) or has_checkpoints(out)


def set_aside(out: Path) -> Path | None:
    """--overwrite: rename the previous run's files (:func:`previous_files`, marker first) into a hidden
    folder of ``out``; returns it (None when there was nothing). Folders left empty are removed."""
    names = previous_files(out)
    if not names and not (out / MARKER).exists():
        return None
    import uuid

    aside = out / f"{PREVIOUS_PREFIX}{uuid.uuid4().hex}"
    aside.mkdir()
    if (out / MARKER).exists():
        os.replace(out / MARKER, aside / MARKER)      # first: the folder no longer reads as complete
    for n in names:
        (aside / n).parent.mkdir(parents=True, exist_ok=True)
        os.replace(out / n, aside / n)
    for d in (CHECKPOINT_DIR, PLOT_DIR):
        with contextlib.suppress(OSError):
            (out / d).rmdir()                         # only when empty: other files there stay
    return aside


def put_back(out: Path, aside: Path) -> bool:
    """After a run with --overwrite stopped: the set-aside files go back when the run left neither a result
    nor checkpoints (marker last, so the folder reads as complete only when all of it is back); else they
    are deleted. Returns whether they went back."""
    restore = not holds_own_state(out)
    if restore:
        files = sorted(p for p in aside.rglob("*") if p.is_file() and p.name != MARKER)
        for p in files:
            dest = out / p.relative_to(aside)
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(p, dest)
        if (aside / MARKER).exists():
            os.replace(aside / MARKER, out / MARKER)
    shutil.rmtree(aside, ignore_errors=True)
    return restore


def clear_previous(out: Path) -> None:
    """Remove what hpcsolve wrote for the previous run in ``out`` (marker first; :func:`previous_files`);
    other files stay."""
    aside = set_aside(out)
    if aside is not None:
        shutil.rmtree(aside)


def _probe_writable(out: Path) -> None:
    fd, probe = tempfile.mkstemp(prefix=".hpcsolve-probe-", suffix=".tmp", dir=out)
    try:
        os.write(fd, b"w")
    finally:
        os.close(fd)
        os.unlink(probe)


@contextlib.contextmanager
def claim(out: str | Path, *, overwrite: bool = False, resume: bool = False):
    """Create, check and lock ``out`` for one run; yields the folder. See the module docstring."""
    from filelock import FileLock, Timeout

    out = Path(out)
    check(out, overwrite=overwrite, resume=resume)
    allowed = "a folder this user can write, on a file system with free space"
    try:
        out.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(out / LOCK_NAME), timeout=0)
        lock.acquire()
    except Timeout:
        raise _refuse(out, f"another hpcsolve run is writing into it ({holder(out)})",
                      "a folder no other run is using: wait for that run, or choose another --out") from None
    except OSError as exc:
        raise _refuse(out, f"cannot create or lock it ({exc.strerror})", allowed) from None
    aside = None
    try:
        try:
            from hpcsolve.safe_io import write_atomic

            _probe_writable(out)
            write_atomic(out / OWNER_NAME, _owner_text().encode())
            remove_stale(out)
            check(out, overwrite=overwrite, resume=resume)   # again, now that no other run can write
            if overwrite and not resume:
                aside = set_aside(out)
        except OSError as exc:
            raise _refuse(out, f"cannot write into it ({exc.strerror})", allowed) from None
        try:
            yield out
        finally:
            if aside is not None:
                with contextlib.suppress(OSError):    # what cannot move back stays aside for the next run
                    put_back(out, aside)
    finally:
        with contextlib.suppress(OSError):
            (out / OWNER_NAME).unlink(missing_ok=True)
        lock.release()
