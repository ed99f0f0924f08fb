"""Typed user-facing errors. The CLI maps each to one message and an exit code."""

from __future__ import annotations

#: longest text of a value echoed in an error message (a 10 MB name must not make a 10 MB message)
SHOWN_CHARS = 120


def shown(value, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` for an error message, cut to ``limit`` characters with the full length said."""
    try:
        text = repr(value)
    except RecursionError:  # a value nested too deeply to print
        return f"<{type(value).__name__} nested too deeply to show>"
    except ValueError:  # an integer with more digits than Python prints, or a container holding one
        if isinstance(value, int):
            return f"<integer of {value.bit_length():,} bits>"
        return f"<{type(value).__name__} holding an integer too long to print>"
    return clip(text, limit)


def clip(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text):,} characters)"


class HpcsolveError(Exception):
    """Base class of every error hpcsolve reports to a user."""

    exit_code = 1


class CaseError(HpcsolveError, ValueError):
    """Bad input: a case file, an override, a mesh, or an argument. Names field, value, allowed."""

    exit_code = 2

    def __init__(self, message: str, *, field: str | None = None, value=None, allowed: str | None = None):
        self.field = field
        self.value = value
        self.allowed = allowed
        if field is not None and not message.startswith(field):
            message = f"{clip(field)}: {message}"
        super().__init__(message)

    @classmethod
    def invalid(cls, field: str, value, allowed: str, why: str | None = None) -> "CaseError":
        text = f"got {shown(value)}; allowed: {allowed}"
        if why:
            text = f"{why} (got {shown(value)}; allowed: {allowed})"
        return cls(text, field=field, value=value, allowed=allowed)


class OutputError(CaseError):
    """The output folder cannot take the run: not writable, full, or in use by another run.
    Earlier results and checkpoints in it are kept."""


class BackendError(HpcsolveError):
    """A backend was asked for that cannot run here; the message says why."""

    exit_code = 2


class BlowUpError(HpcsolveError):
    """The run diverged (NaN/Inf or out-of-bounds values); carries the step and a suggestion."""

    exit_code = 3

    def __init__(self, message: str, *, step: int | None = None, cause: str = "", suggestion: str = ""):
        self.step = step
        self.cause = cause
        self.suggestion = suggestion
        super().__init__(message)


class RunInterrupted(HpcsolveError):
    """SIGINT/SIGTERM during a run; ``.result`` (if set) is the partial result, marked 'interrupted'."""

    exit_code = 130
