"""SIGINT and SIGTERM during a run, and the writes they must not cut in half.

The first signal asks a runner that can stop gracefully (the LBM runner) to stop at its next
monitor point, write a checkpoint and a result marked 'interrupted'. A second signal, or a first
one for a runner that cannot stop gracefully, stops the run at once (KeyboardInterrupt) unless a
write is under way: inside :func:`deferred` (checkpoint and result writes) a signal only turns
into a stop request, so a file is never left half written by a signal.

The first signal is answered at once with one line on stderr saying what the run now does (a run can take
tens of seconds to reach its monitor point and write its result and plots): ``StopRequest.notice``, set by the
runner (the LBM runner: "stopping at the next monitor point (step N); writing checkpoint and result") or given
to :func:`stop_on_signals`; None (``--quiet``) prints nothing.
"""

from __future__ import annotations

import signal
import sys
from contextlib import contextmanager

#: what a runner that cannot stop gracefully (FEM) does on a first signal, for ``stop_on_signals(notice=...)``
ABANDON_NOTICE = ("stopping now: the solve is abandoned when its current operation returns; writing a result "
                  "marked interrupted (no fields)")


class StopRequest:
    """Set by SIGINT/SIGTERM; a runner polls ``requested`` between chunks of work and stops cleanly."""

    def __init__(self, graceful: bool = True, notice=None):
        self.graceful = graceful
        self.requested = False
        self.signal = None
        self.count = 0          # signals received during the run
        self.notice = notice    # a str or a callable giving one: printed to stderr on the first signal; None: quiet

    def announce(self) -> None:
        """Print ``notice`` (one line on stderr), from the signal handler on the first signal."""
        try:
            text = self.notice() if callable(self.notice) else self.notice
            if text:
                lead = "\n" if sys.stderr.isatty() else ""      # off a progress bar's line
                sys.stderr.write(f"{lead}hpcsolve: {text}\n")
                sys.stderr.flush()
        except (RuntimeError, OSError, ValueError):       # stderr busy (re-entered) or closed: the stop goes on
            pass


_active: StopRequest | None = None   # the run whose handlers are installed
_write_depth = 0                     # > 0 while a checkpoint or result is being written


@contextmanager
def deferred():
    """A write that a signal must not interrupt: inside it, SIGINT/SIGTERM only request a stop."""
    global _write_depth
    _write_depth += 1
    try:
        yield
    finally:
        _write_depth -= 1


class exit_deferred:
    """``cm`` entered as usual, its exit run as a write (inside :func:`deferred`): a run's teardown (releasing its
    folder, restoring thread pools) happens after its outcome is decided, and a late signal must not replace that
    outcome (an interrupted result and its resume hint) with a bare interruption."""

    def __init__(self, cm):
        self.cm = cm

    def __enter__(self):
        return self.cm.__enter__()

    def __exit__(self, *exc_info):
        with deferred():
            return self.cm.__exit__(*exc_info)


def _handler(signum, frame):
    stop = _active
    if stop is None:
        raise KeyboardInterrupt(f"signal {signum}")
    stop.count += 1
    if stop.count == 1:
        stop.announce()
    if _write_depth > 0 or (stop.graceful and not stop.requested):
        # a write finishes first; a graceful runner stops at its next monitor point
        stop.requested = True
        stop.signal = stop.signal or signum
        return
    raise KeyboardInterrupt(f"signal {signum}")


@contextmanager
def stop_on_signals(graceful: bool, notice=None):
    """Install the handlers for the duration of a run (its result writing included); ``notice``: the first
    signal's line (``StopRequest.notice``; a graceful runner may set its own)."""
    global _active
    stop = StopRequest(graceful, notice)
    previous = {}
    outer = _active
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, _handler)
    except ValueError:  # not the main thread: leave signals alone
        previous = {}
    _active = stop
    try:
        yield stop
    finally:
        for sig, h in previous.items():     # the handlers first: no signal may find them with _active reset
            signal.signal(sig, h)
        _active = outer
