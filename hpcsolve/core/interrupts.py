"""SIGINT, SIGTERM and SIGHUP during a run, and the writes they must not cut in half.

The first signal asks a runner that can stop gracefully (the LBM runner) to stop at its next
monitor point, write a checkpoint and a result marked 'interrupted'. A second signal, or a first
one for a runner that cannot stop gracefully, stops the run at once (KeyboardInterrupt) unless a
write is under way: inside :func:`deferred` (checkpoint and result writes) a signal only turns
into a stop request, so a file is never left half written by a signal.

The first signal is answered at once with one line on stderr saying what the run now does (a run can take
tens of seconds to reach its monitor point and write its result and plots): ``StopRequest.notice``, set by the
runner (the LBM runner: "stopping at the next monitor point (step N); writing checkpoint and result") or given
to :func:`stop_on_signals`; None (``--quiet``) prints nothing.

SIGHUP (the terminal or the ssh session went away) stops as SIGINT/SIGTERM do, unless the process inherited it
ignored (``nohup``: the command is meant to outlive its terminal). SIGQUIT keeps its default (the core-dumping
"stop now" of Ctrl-\\; periodic checkpoints survive, the folder is settled by the next claim); SIGUSR1 prints a
status line (:func:`status_line`, set by ``hpcsolve.cli``) and the command goes on.

Nested handlers (a run inside ``compare``): a signal the inner run did not act on is handed to the outer stop
when the inner handlers come off (:func:`stop_on_signals`); a command that polls its own request between steps uses
:func:`stop_if_requested`.
"""

from __future__ import annotations

import signal
import sys
from contextlib import contextmanager

from hpcsolve.core import heartbeat
from hpcsolve.core.errors import RunInterrupted

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


#: the signals that stop a command cleanly: SIGINT (Ctrl-C), SIGTERM, and SIGHUP (the terminal or the session went
#: away), unless inherited ignored (nohup). SIGQUIT keeps its default (core dump: the "stop now, show me" key) and
#: SIGUSR1 prints a status line (``hpcsolve.cli``); docs/design/reliability.md "Signals".
_SIGHUP = getattr(signal, "SIGHUP", None)
STOP_SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, _SIGHUP) if s is not None)

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
    _deliver(stop, signum)


def _deliver(stop: StopRequest, signum) -> None:
    """What a signal does to the run of ``stop``: a stop request (inside a write; the first for a graceful runner)
    or KeyboardInterrupt (at once)."""
    stop.count += 1
    if stop.count == 1:
        stop.announce()
    if _write_depth > 0 or (stop.graceful and not stop.requested):
        # a write finishes first; a graceful runner stops at its next monitor point
        stop.requested = True
        stop.signal = stop.signal or signum
        return
    raise KeyboardInterrupt(f"signal {signum}")


def stop_if_requested(stop: StopRequest) -> None:
    """KeyboardInterrupt when a signal asked ``stop`` to stop (it came inside a write, or from a nested run that did
    not act on it): for a command that looks at its request between its steps (``compare``)."""
    if stop.requested:
        raise KeyboardInterrupt(f"signal {stop.signal}")


def status_line(signum=None, frame=None) -> None:
    """SIGUSR1 (set by ``hpcsolve.cli``): one line on stderr saying what the command is doing; the command goes on
    (SIGUSR1's default would end it without a result, a checkpoint write or a lock release)."""
    try:
        sys.stderr.write(f"hpcsolve: status: {heartbeat.status()}\n")
        sys.stderr.flush()
    except (RuntimeError, OSError, ValueError):       # stderr busy (re-entered) or closed: the command goes on
        pass


def set_handlers(handler) -> dict:
    """Set the STOP_SIGNALS to ``handler`` (a callable, SIG_IGN / SIG_DFL, or a dict by signal as returned here);
    returns the previous ones. A SIGHUP that the process inherited ignored (``nohup``) stays ignored: the command
    is meant to outlive its terminal. Not the main thread: nothing is changed ({})."""
    previous = {}
    try:
        for sig in (handler if isinstance(handler, dict) else STOP_SIGNALS):
            new = handler[sig] if isinstance(handler, dict) else handler
            if sig == _SIGHUP and callable(new) and signal.getsignal(sig) == signal.SIG_IGN:
                continue
            previous[sig] = signal.signal(sig, new)
    except ValueError:  # not the main thread: signals stay as they are
        pass
    return previous


@contextmanager
def stop_on_signals(graceful: bool, notice=None):
    """Install the handlers for the duration of a run (its result writing included); ``notice``: the first
    signal's line (``StopRequest.notice``; a graceful runner may set its own).

    Nested (a run inside ``compare``): a signal the inner run did not act on (it came as the run was finishing, in
    its result write or its teardown, or the run ended before looking at its request) is handed to the outer
    stop when the inner handlers come off, as if it arrived then; a run that stopped on it (RunInterrupted,
    KeyboardInterrupt) has acted on it. Before, the inner request was dropped with the inner run, and the
    comparison went on to its next configuration (issue 49, item 3)."""
    global _active
    stop = StopRequest(graceful, notice)
    outer = _active
    previous = set_handlers(_handler)
    _active = stop
    acted = False
    try:
        yield stop
    except (KeyboardInterrupt, RunInterrupted):
        acted = True
        raise
    finally:
        with deferred():            # a signal while the handlers come off only requests a stop (of either run)
            try:
                set_handlers(previous)  # the handlers first: no signal may find them with _active reset
            finally:
                _active = outer
        if outer is not None and not acted:
            if stop.count:
                _deliver(outer, stop.signal or signal.SIGINT)
            elif not outer.graceful and _write_depth == 0:
                stop_if_requested(outer)    # it came as the handlers came off, after _active was reset
