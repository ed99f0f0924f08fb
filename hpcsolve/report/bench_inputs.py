"""What ``hpcsolve bench lbm`` and ``bench fem`` check before anything is created or timed (a CaseError, exit 2,
naming the option), and how they write their files."""

from __future__ import annotations

import os
from pathlib import Path

from hpcsolve.core.backends import BACKENDS
from hpcsolve.core.errors import CaseError
from hpcsolve.core.errors import OutputError
from hpcsolve.core.outdir import probe_writable
from hpcsolve.core.safe_io import path_problem
from hpcsolve.core.safe_io import write_atomic


def out_folder(args) -> Path:
    """The folder bench writes into (``--out``, else ``$OUT``, else results/bench/), created and proven writable
    before anything is timed: a file, an unusable path or a folder this user cannot write is a CaseError naming
    --out (or $OUT) rather than a traceback after the benchmark. Files already there are kept (only the bench's own
    JSON and markdown are replaced, atomically)."""

    given = getattr(args, "out", None)
    field, out = ("--out", given) if given not in (None, "") else (
        ("$OUT", os.environ["OUT"]) if os.environ.get("OUT") else ("--out", Path("results") / "bench"))
    allowed = "a folder this user can write (new or existing)"
    problem = path_problem(out)
    if problem:
        raise OutputError.invalid(field, str(out), allowed, why=problem)
    path = Path(out)
    try:
        if path.exists() and not path.is_dir():
            raise OutputError.invalid(field, str(out), allowed, why="exists and is not a folder")
        path.mkdir(parents=True, exist_ok=True)
        probe_writable(path)
    except OSError as exc:
        why = "a path in it exists and is not a folder" if isinstance(exc, (FileExistsError, NotADirectoryError)) \
            else f"cannot create or write into it ({exc.strerror or exc})"
        raise OutputError.invalid(field, str(out), allowed, why=why) from None
    return path


def write_output(path: Path, text: str, field: str = "--out") -> None:
    """``text`` into ``path`` atomically: a failed write (full disk) leaves an earlier file of that name whole."""

    try:
        write_atomic(path, text.encode())
    except OSError as exc:
        raise OutputError.invalid(field, str(path.parent), "a folder this user can write, with free space",
                                  why=f"cannot write {path.name} ({exc.strerror or exc})") from None


def check_backends(values) -> tuple:
    """--backends: names of hpcsolve.core.backends.BACKENDS (a CaseError naming the first other one)."""

    for b in values:
        if b not in BACKENDS:
            raise CaseError.invalid("--backends", b, ", ".join(BACKENDS))
    return tuple(values)


def check_sizes(values, field: str, low: int, high: int, allowed: str, why_low: str | None = None) -> tuple:
    """Integers in [low, high] (a CaseError naming ``field``, the first one outside and ``allowed``; ``why_low``
    says why one below ``low`` cannot run)."""

    for n in values:
        if isinstance(n, bool) or not isinstance(n, int) or not low <= n <= high:
            raise CaseError.invalid(field, n, allowed, why=why_low if isinstance(n, int) and n < low else None)
    return tuple(values)
