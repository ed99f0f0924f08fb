"""A progress line at least every ``EVERY_S`` seconds while a command works (issue 35: "a progress line at least
every 10 s in every command").

A command opens one :class:`Heartbeat` around its work (``hpcsolve run``, ``validate``, ``--dry-run``, ``bench``;
``compare`` has its own per-configuration lines in ``hpcsolve.report.compare``). The code that does the work names
what it is doing with :func:`phase` ("assembling the system", "the float64 reference solve", "writing the
result", ...) and, where it shows progress itself (a progress bar), says so with :func:`touch`. A daemon thread
prints ``hpcsolve: <label>: <phase> (<n> s so far)`` on stderr whenever ``EVERY_S`` passed without a line (its own
or a touch). Both functions do nothing when no heartbeat is open (the API without the CLI, tests), so library code
calls them unconditionally. One heartbeat at a time (the innermost open one receives the calls).
"""

from __future__ import annotations

import sys
import threading
import time

__all__ = ["EVERY_S", "Heartbeat", "phase", "status", "touch"]

EVERY_S = 10.0

_open: list["Heartbeat"] = []


class Heartbeat:
    """The progress lines of one command (nothing when not ``enabled``, e.g. ``--quiet`` or a rank other than 0).
    ``write`` and ``clock`` are for tests."""

    def __init__(self, label: str, enabled: bool = True, every: float | None = None, write=None,
                 clock=time.monotonic):
        self.label, self.enabled, self.clock = label, enabled, clock
        self.every = EVERY_S if every is None else every
        self.write = write or _stderr_line
        self.what = "starting"
        self.t0 = self.last = clock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "Heartbeat":
        _open.append(self)
        if self.enabled:
            self._thread = threading.Thread(target=self._beat, name="hpcsolve-heartbeat", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> bool:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        if self in _open:
            _open.remove(self)
        return False

    def phase(self, what: str) -> None:
        self.what = what

    def touch(self) -> None:
        self.last = self.clock()

    def tick(self) -> bool:
        """One check: a line when ``every`` seconds passed since the last one (or the last touch); True if printed."""
        now = self.clock()
        if not self.enabled or now - self.last < self.every:
            return False
        self.last = now
        self.write(f"hpcsolve: {self.label}: {self.what} ({now - self.t0:.0f} s so far)")
        return True

    def _beat(self) -> None:
        while not self._stop.wait(min(1.0, self.every / 4)):
            try:
                self.tick()
            except (OSError, ValueError):       # stderr closed (a pipe reader gone): the work goes on, silent
                return


def phase(what: str) -> None:
    """Name what the command is doing now (shown by the next heartbeat line); nothing without an open heartbeat."""
    if _open:
        _open[-1].phase(what)


def touch() -> None:
    """Progress was shown some other way (a progress bar moved): the next heartbeat line waits ``every`` again."""
    if _open:
        _open[-1].touch()


def status() -> str:
    """What the command is doing now, as a heartbeat line says it (``<label>: <phase> (<n> s so far)``), for the
    status line of SIGUSR1 (``hpcsolve.core.interrupts.status_line``); "working" without an open heartbeat."""
    if not _open:
        return "working"
    beat = _open[-1]
    return f"{beat.label}: {beat.what} ({beat.clock() - beat.t0:.0f} s so far)"


def _stderr_line(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()
