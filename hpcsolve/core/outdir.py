"""The output folder of a run: checked before the run, locked during it, cleaned of what dead runs left.

- ``check``: what can be said without touching anything (not a folder; holds a result or the
  checkpoints of another run and neither --overwrite nor --resume was given).
- ``claim``: creates the folder, proves it writable, takes its lock (one run per folder; a second
  one is refused naming the holder), removes temporary files and staging folders that a killed run
  left, and with --overwrite sets the previous run's files aside (each renamed to a hidden name in its
  own folder, marker first, so the folder never looks complete meanwhile; a journal records the renames):
  they are deleted once the new run has written a complete result of its own (its marker; an interrupted
  run's result counts when it names a checkpoint to resume from), and put back whenever it stops without one (bad
  input found during the run, a full disk, an interrupt that left nothing to resume, a kill: the next claim settles
  the journal). Checkpoints of the new run are no result: when the previous files come back they are removed, so a
  failed --overwrite loses nothing and mixes nothing. Only files hpcsolve writes move: the result files, the plots the
  previous marker names and
  ``checkpoints/checkpoint_*.h5``; anything else in the folder stays. The lock is held until the result
  is written; its file is removed on release (:func:`release_lock`), so a finished folder holds no ``.hpcsolve.lock``. A --resume settles such a journal before it chooses a checkpoint (:func:`settle_idle`).

A result folder is complete when its marker ``manifest.json`` exists: it is written last and names
the files of the result and the run id that ``result.h5`` and ``summary.json`` carry too.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import uuid
from pathlib import Path

from filelock import FileLock, Timeout

from hpcsolve.core.errors import OutputError, clip
from hpcsolve.core.safe_io import path_problem, read_text, write_atomic

LOCK_NAME = ".hpcsolve.lock"
OWNER_NAME = ".hpcsolve-owner.json"
MARKER = "manifest.json"
RESULT_FILES = ("result.h5", "result.xdmf", "summary.json")
CHECKPOINT_DIR = "checkpoints"
PLOT_DIR = "plots"
STAGING_PREFIX = ".staging-"
PREVIOUS_PREFIX = ".previous-"
JOURNAL_SUFFIX = ".journal"       # a hidden file is PREVIOUS_PREFIX<id>-<name>, never ending so
COMPARISON_FILES = ("comparison.json", "comparison.md")   # a comparison's own files (hpcsolve.report.compare)
SUMMARY_MAX_BYTES = 64 * 2**20    # largest summary.json read (a few kB; residual histories make it longer)
JOURNAL_MAX_BYTES = 16 * 2**20    # largest journal of set-aside files read


def _refuse(out: Path, why: str, allowed: str) -> OutputError:
    return OutputError.invalid("--out", str(out), allowed, why=why)


def has_result(out: Path) -> bool:
    return any((out / n).exists() for n in (MARKER, *RESULT_FILES))


def has_checkpoints(out: Path) -> bool:
    d = out / CHECKPOINT_DIR
    return d.is_dir() and any(d.glob("checkpoint_*.h5"))


def _not_a_file(out: Path) -> str | None:
    """The first name hpcsolve writes as a file in ``out`` (marker, result files, owner file) that is there as
    something else (a folder, a pipe): such a folder is refused before anything moves. A folder named
    ``manifest.json`` used to be set aside by --overwrite and then never deleted (a journal left behind, and every
    later run into the folder failed with "Is a directory")."""
    for name in (MARKER, *RESULT_FILES, OWNER_NAME):
        p = out / name
        if p.exists() and not p.is_file():
            return name
    return None


def check(out: Path, *, overwrite: bool = False, resume: bool = False, comparison: bool = False) -> None:
    """Refuse a target that is not a folder, that holds another run's files without --overwrite, or where a file
    hpcsolve writes is something else (a folder named ``manifest.json``). A run is refused a folder holding a
    comparison (``comparison.json``); a comparison (``comparison``) is refused one holding a run's result or
    checkpoints, --overwrite or not (a comparison's runs are its subfolders: the two never share a folder)."""
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
        odd = _not_a_file(out) if is_dir else None
        holds_comparison = is_dir and any((out / n).exists() for n in COMPARISON_FILES)
    except OSError as exc:
        raise _refuse(out, f"cannot look at it ({exc.strerror})", "a folder this user can write") from None
    if exists and not is_dir:
        raise _refuse(out, "exists and is not a folder", "a folder (new, or holding a result with --overwrite / overwrite=True)")
    if odd is not None:
        raise OutputError.invalid("--out", str(out / odd), f"a folder where {odd} is a file or absent",
                                  why=f"{clip(str(out / odd))} is not a file (hpcsolve writes a file of that name "
                                      "there); move it away")
    if comparison:
        if holds_result or holds_checkpoints:
            raise _refuse(out, "holds the result or checkpoints of a run",
                          "a folder of its own for the comparison (its runs are written into subfolders)")
        return
    if holds_comparison and not resume:
        raise _refuse(out, "holds a comparison (comparison.json)",
                      "a folder of its own for the run (a comparison's runs are its subfolders)")
    if not is_dir or overwrite or resume:
        return
    if holds_result:
        raise _refuse(out, "already holds a result", "a new folder, or --overwrite (overwrite=True) to replace the result there")
    if holds_checkpoints:
        raise _refuse(out, "holds the checkpoints of an unfinished run",
                      f"--resume {clip(str(out))} (resume=...) to continue it, --overwrite (overwrite=True) to replace it, or a new folder")


def _owner_text() -> str:
    return json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                       "started": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
                       "command": clip(" ".join(sys.argv), 300)})


def holder(out: Path) -> str:
    """Who holds the lock of ``out``, in words (from the owner file the holder wrote)."""
    try:
        info = json.loads(read_text(out / OWNER_NAME, "--out", "an owner file", max_bytes=4096))
        return (f"pid {info['pid']} on {info['host']}, started {info['started']}: "
                f"{clip(str(info.get('command', '')), 200)}")
    except (ValueError, KeyError, TypeError):   # CaseError is a ValueError: no readable owner file
        return "holder unknown"


def take_lock(out: Path) -> FileLock:
    """The lock of ``out`` (``LOCK_NAME``, a flock), taken without waiting (``Timeout`` when a run holds it).

    A holder removes the lock file while it still holds it (:func:`release_lock`). A process that opened the file
    just before that and locks it just after holds a lock on a file no longer in the folder, which a third run would
    not see: so a lock whose file is gone is let go and taken once more, on a new file. (Recent filelock releases
    refuse an unlinked file themselves; that refusal, a ``Timeout`` with the file gone, is retried once too.)"""
    path = out / LOCK_NAME
    for _ in range(2):
        lock = FileLock(str(path), timeout=0)
        try:
            lock.acquire()
        except Timeout:
            if path.exists():          # held by a live run
                raise
            continue                   # its holder has just released and removed it
        if path.exists():
            return lock
        lock.release()
    raise Timeout(str(path))


def release_lock(out: Path, lock: FileLock) -> None:
    """Let go of the lock of ``out`` and leave no ``.hpcsolve.lock`` behind. The file is removed while the lock is
    still held, so it never goes from under another holder: a run waiting for it (none does: hpcsolve never waits)
    or one that opened it meanwhile takes a fresh file (:func:`take_lock`)."""
    try:
        with contextlib.suppress(OSError):     # a read-only folder keeps the file: harmless, the next run takes it
            (out / LOCK_NAME).unlink(missing_ok=True)
    finally:
        lock.release()


def remove_stale(out: Path) -> list[str]:
    """Temporary files and staging folders in ``out`` (and its checkpoints/ and plots/) that a killed
    run left, and settles what a killed --overwrite run set aside (:func:`settle_previous`); only called
    with the folder's lock held, so none of them belongs to a live run."""
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
    return removed + settle_previous(out)


def _own_name(n: str) -> bool:
    """A name hpcsolve writes in a result folder: the result files, ``plots/<name>.png``,
    ``checkpoints/checkpoint_*.h5`` (one level, no way out of the folder)."""
    parts = n.split("/")
    if len(parts) == 1:
        return n in RESULT_FILES
    return (len(parts) == 2 and not parts[1].startswith(".") and
            ((parts[0] == PLOT_DIR and parts[1].endswith(".png")) or
             (parts[0] == CHECKPOINT_DIR and parts[1].startswith("checkpoint_") and parts[1].endswith(".h5"))))


def manifest_files(out: Path) -> list[str]:
    """The files the marker of ``out`` names that hpcsolve writes (:func:`_own_name`; [] without a readable
    marker). A marker is data: an entry naming anything else is ignored."""
    try:
        files = json.loads(read_text(out / MARKER, "--out", "a result marker", max_bytes=1 << 20)).get("files", {})
    except (ValueError, AttributeError, OSError):   # CaseError is a ValueError: no readable marker
        return []
    return [n for n in files if isinstance(n, str) and _own_name(n)] if isinstance(files, dict) else []


def previous_files(out: Path) -> list[str]:
    """What hpcsolve wrote for the run whose files are in ``out``: the files its marker names, the result
    files and the checkpoints (relative paths of existing regular files; the marker itself not included)."""
    names = dict.fromkeys(manifest_files(out) + list(RESULT_FILES))
    d = out / CHECKPOINT_DIR
    if d.is_dir():
        names.update(dict.fromkeys(f"{CHECKPOINT_DIR}/{p.name}" for p in sorted(d.glob("checkpoint_*.h5"))))
    return [n for n in names if (out / n).is_file() and not (out / n).is_symlink()]


@contextlib.contextmanager
def _signals_held():
    """SIGINT / SIGTERM wait (are blocked, then delivered) while files are renamed as one group."""
    sigs = {signal.SIGINT, signal.SIGTERM}
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    except (AttributeError, OSError, ValueError):   # no pthread_sigmask here: renames run unguarded
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _journal_write(journal: Path, state: str, pairs: list) -> None:
    write_atomic(journal, json.dumps({"state": state, "files": pairs}).encode())


def _interrupted_placeholder(out: Path) -> bool:
    """``out`` holds only the result an interrupted run writes when it left nothing to resume (status
    'interrupted', no checkpoint): not worth a previous complete result."""
    if has_checkpoints(out):
        return False
    try:
        text = read_text(out / "summary.json", "--out", "a result summary", max_bytes=SUMMARY_MAX_BYTES)
        return json.loads(text).get("status") == "interrupted"
    except (ValueError, AttributeError, OSError):   # CaseError is a ValueError: not a readable regular file
        return False


def holds_own_state(out: Path) -> bool:
    """``out`` holds a complete result (its marker ``manifest.json``) of the run now writing into it, once its previous
    files are set aside. Checkpoints alone are no result (a run that wrote some and then stopped on a full disk or a
    kill has replaced nothing), and neither is an interrupted run's placeholder result without checkpoints."""
    return (out / MARKER).is_file() and not (out / MARKER).is_symlink() and not _interrupted_placeholder(out)


def set_aside(out: Path) -> Path | None:
    """--overwrite: hide the previous run's files (the marker first, then :func:`previous_files`) by renaming
    each within its own folder to ``.previous-<id>-<name>`` (no rename crosses a file system, even where
    ``checkpoints/`` is a link elsewhere). A journal ``.previous-<id>.journal`` lists them and says how far the
    renames got ("moving", then "complete"), so that a run killed midway is undone by the next claim
    (:func:`settle_previous`); an error midway is undone at once. Returns the journal (None: nothing there)."""
    names = previous_files(out)
    if not names and not (out / MARKER).exists():
        return None

    tag = f"{PREVIOUS_PREFIX}{uuid.uuid4().hex[:12]}"
    pairs = []
    for n in ([MARKER] if (out / MARKER).exists() else []) + names:
        head, _, base = n.rpartition("/")
        pairs.append([n, f"{head}/{tag}-{base}" if head else f"{tag}-{base}"])
    journal = out / f"{tag}{JOURNAL_SUFFIX}"
    with _signals_held():
        _journal_write(journal, "moving", pairs)
        try:
            for n, hidden in pairs:
                os.replace(out / n, out / hidden)
            _journal_write(journal, "complete", pairs)
        except BaseException:
            put_back(out, journal, restore=True)
            raise
    return journal


def put_back(out: Path, journal: Path, restore: bool | None = None) -> bool:
    """Settle the files a journal of :func:`set_aside` lists: put back when ``restore`` is True, or when None and
    either the renames never completed or the run that set them aside left no complete result of its own
    (:func:`holds_own_state`); else delete them. Returns whether they went back.

    Putting back (:func:`_restore`) replaces what the new run left under the same names (its checkpoints, a partial
    result), removes its other result files and checkpoints, and brings the marker back last. An unreadable journal
    leaves everything where it is."""
    try:
        info = json.loads(read_text(journal, "--out", "a journal of set-aside files", max_bytes=JOURNAL_MAX_BYTES))
        pairs, state = [tuple(p) for p in info["files"]], info["state"]
    except (OSError, ValueError, KeyError, TypeError):   # CaseError is a ValueError: not a readable regular file
        return False
    with _signals_held():
        if restore is None:
            restore = state != "complete" or not holds_own_state(out)
        if restore:
            _restore(out, journal, pairs, state)
        else:
            for _, hidden in pairs:
                if (out / hidden).is_dir() and not (out / hidden).is_symlink():
                    with contextlib.suppress(OSError):   # set aside by a version that moved a folder: empty only
                        (out / hidden).rmdir()
                    continue
                (out / hidden).unlink(missing_ok=True)
            for d in (CHECKPOINT_DIR, PLOT_DIR):
                with contextlib.suppress(OSError):
                    (out / d).rmdir()                   # only when empty: other files there stay
        journal.unlink(missing_ok=True)
    return restore


def _restore(out: Path, journal: Path, pairs: list, state: str) -> None:
    """Put the files of ``pairs`` back: the new run's marker goes first (a placeholder's, or one whose old
    counterpart is still hidden), then each hidden file is renamed over whatever the new run wrote under its name,
    the new run's other result files and checkpoints (names the previous run did not have) are removed, and the
    previous marker comes back last. Each step can be repeated after a kill (the next claim does so)."""
    names = {n for n, _ in pairs}
    hidden_marker = next((h for n, h in pairs if n == MARKER), None)
    if hidden_marker is None or (out / hidden_marker).exists():
        (out / MARKER).unlink(missing_ok=True)          # not the previous marker: that one is still hidden
    if state != "restoring":
        with contextlib.suppress(OSError):      # best effort (a full disk): the renames need no space
            _journal_write(journal, "restoring", [list(p) for p in pairs])
    for n, hidden in reversed(pairs):           # the marker was hidden first: it comes back last
        if n == MARKER:
            continue
        if (out / hidden).exists():
            (out / n).parent.mkdir(parents=True, exist_ok=True)
            os.replace(out / hidden, out / n)
    d = out / CHECKPOINT_DIR
    new = [n for n in RESULT_FILES if n not in names]
    new += [f"{CHECKPOINT_DIR}/{p.name}" for p in d.glob("checkpoint_*.h5")] if d.is_dir() else []
    for n in new:
        p = out / n
        if n not in names and not p.is_symlink() and p.is_file():
            p.unlink(missing_ok=True)           # the stopped run's own: no result of it stays beside the previous one
    if hidden_marker is not None and (out / hidden_marker).exists():
        os.replace(out / hidden_marker, out / MARKER)


def _settle(out: Path, journal: Path) -> bool:
    """:func:`put_back` at the end of a claim, once (a journal already settled is gone); what cannot be settled now
    (an error on the way), the next claim settles. Returns whether the previous files went back."""
    if not journal.exists():
        return False
    try:
        return put_back(out, journal)
    except OSError:
        return False


def settle_previous(out: Path) -> list[str]:
    """Journals of :func:`set_aside` that a killed run left in ``out``, settled by :func:`put_back`."""
    done = []
    for journal in sorted(out.glob(f"{PREVIOUS_PREFIX}*{JOURNAL_SUFFIX}")):
        put_back(out, journal)
        done.append(journal.name)
    return done


def settle_idle(out: str | Path) -> list[str]:
    """Settle now (:func:`settle_previous`) the journals that a killed --overwrite run left in ``out``, when no run
    holds the folder: a --resume must see the checkpoints they hid before it chooses one (the claim that would
    settle them comes after). A folder in use, or one without journals, is left as it is."""
    out = Path(out)
    try:
        if not out.is_dir() or not any(out.glob(f"{PREVIOUS_PREFIX}*{JOURNAL_SUFFIX}")):
            return []
        lock = take_lock(out)
    except Timeout:                # in use: the checkpoints may be hidden by that run's --overwrite
        raise OutputError.invalid("--resume", str(out), "a folder no other run is using: wait for that run",
                                  why=f"another hpcsolve run is writing into it ({holder(out)})") from None
    except OSError:                # not writable: the claim says so
        return []
    try:
        return settle_previous(out)
    except OSError:
        return []
    finally:
        release_lock(out, lock)


def clear_result(out: Path) -> None:
    """Remove the result in ``out`` (marker first, then the files it names and the result files)."""
    names = manifest_files(out)
    (out / MARKER).unlink(missing_ok=True)
    for n in dict.fromkeys(names + list(RESULT_FILES)):
        if _own_name(n) and not (out / n).is_symlink():
            (out / n).unlink(missing_ok=True)


def probe_writable(out: Path) -> None:
    """Create and remove a file in ``out`` (OSError where this user cannot write there)."""
    fd, probe = tempfile.mkstemp(prefix=".hpcsolve-probe-", suffix=".tmp", dir=out)
    try:
        os.write(fd, b"w")
    finally:
        os.close(fd)
        os.unlink(probe)


#: parent folders (``results/``) that :func:`new_folder` created in this process: :func:`remove_unused` takes them
#: back too while they are empty
_made_parents: set = set()


def new_folder(base: str | Path, attempts: int = 1000) -> Path:
    """``base``, or ``base-2``, ``base-3``, ...: the first of them that does not exist yet, created now. The
    creation is the reservation (``mkdir`` fails for all but one process), so two runs started in the same
    second get different default folders instead of one refusing the other at the lock. A folder that cannot
    be created (its parent is a file, a broken link, not writable) is returned uncreated: :func:`check` /
    :func:`claim` then say why, naming ``--out``."""
    base = Path(base)
    try:
        if not base.parent.is_dir():
            try:
                base.parent.mkdir(parents=True)
                _made_parents.add(base.parent)
            except FileExistsError:          # made meanwhile by another run (fine), or a file there (not)
                if not base.parent.is_dir():
                    return base
    except OSError:
        return base
    out = base
    for k in range(2, attempts + 2):
        try:
            out.mkdir()
            return out
        except FileExistsError:
            out = base.with_name(f"{base.name}-{k}")
        except OSError:
            return out
    return out


def remove_unused(out: str | Path) -> bool:
    """Remove ``out`` if it holds nothing (or only a lock file, as an older version's claim left it) (a folder that was new or empty when
    :func:`claim` took it, or that :func:`new_folder` reserved, for a run that was then refused), and the parent
    new_folder made for it while that is empty. Returns whether ``out`` was removed."""
    out = Path(out)
    try:
        if {p.name for p in out.iterdir()} - {LOCK_NAME}:
            return False
        (out / LOCK_NAME).unlink(missing_ok=True)
        out.rmdir()
    except OSError:
        return False
    if out.parent in _made_parents:      # the results/ folder it made for it, while nothing else is in it
        with contextlib.suppress(OSError):
            out.parent.rmdir()
            _made_parents.discard(out.parent)
    return True


@contextlib.contextmanager
def claim(out: str | Path, *, overwrite: bool = False, resume: bool = False, comparison: bool = False):
    """Create, check and lock ``out`` for one run (or, with ``comparison``, for a comparison: same lock, no files set
    aside, :func:`check`); yields the folder. See the module docstring."""
    out = Path(out)
    check(out, overwrite=overwrite, resume=resume, comparison=comparison)
    allowed = "a folder this user can write, on a file system with free space"
    try:
        fresh = not out.exists() or not any(out.iterdir())   # made for this run: removed again if it stays unused
        out.mkdir(parents=True, exist_ok=True)
        lock = take_lock(out)
    except Timeout:
        if resume:
            raise OutputError.invalid("--resume", str(out), "a folder no other run is using: wait for that run",
                                      why=f"another hpcsolve run is writing into it ({holder(out)})") from None
        raise _refuse(out, f"another hpcsolve run is writing into it ({holder(out)})",
                      "a folder no other run is using: wait for that run, or choose another --out") from None
    except OSError as exc:
        raise _refuse(out, f"cannot create or lock it ({exc.strerror})", allowed) from None
    journal = None
    try:
        try:
            probe_writable(out)
            write_atomic(out / OWNER_NAME, _owner_text().encode())
            remove_stale(out)
            check(out, overwrite=overwrite, resume=resume, comparison=comparison)   # again, now no other can write
            if overwrite and not resume and not comparison:
                journal = set_aside(out)
        except OSError as exc:
            raise _refuse(out, f"cannot write into it ({exc.strerror})", allowed) from None
        try:
            yield out
        except OutputError as exc:        # a full disk: the message says that the previous result came back
            if journal is not None and _settle(out, journal):
                raise OutputError(f"{exc}; the previous result in --out was put back unchanged (the checkpoints of "
                                  "this run, if any, were removed)", field=exc.field, value=exc.value,
                                  allowed=exc.allowed) from None
            raise
        finally:
            if journal is not None:
                _settle(out, journal)
    finally:
        with contextlib.suppress(OSError):
            (out / OWNER_NAME).unlink(missing_ok=True)
        release_lock(out, lock)
        if fresh:                     # a run refused before it wrote anything leaves no folder behind
            remove_unused(out)
