"""SIGINT and SIGTERM during a run, and the writes they must not cut in half.

The first signal asks a runner that can stop gracefully (the LBM runner) to stop at its next
monitor point, write a checkpoint and a result marked 'interrupted'. A second signal, or a first
one for a runner that cannot stop gracefully, stops the run at once (KeyboardInterrupt) unless a
write is under way: inside :func:`deferred` (checkpoint and result writes) a signal only turns
into a stop request, so a file is never left half written by a signal.
"""

from __future__ import annotations

import signal
from contextlib import contextmanager


class StopRequest:
    """Set by SIGINT/SIGTERM; a runner polls ``requested`` between chunks of work and stops cleanly."""

    def __init__(self, graceful: bool = True):
        self.graceful = graceful
        self.requested = False
        self.signal = None
        self.count = 0          # signals received during the run


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
    if _write_depth > 0 or (stop.graceful and not stop.requested):
        # a write finishes first; a graceful runner stops at its next monitor point
        stop.requested = True
        stop.signal = stop.signal or signum
        return
    raise KeyboardInterrupt(f"signal {signum}")


@contextmanager
def stop_on_signals(graceful: bool):
    """Install the handlers for the duration of a run (its result writing included)."""
    global _active
    stop = StopRequest(graceful)
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
