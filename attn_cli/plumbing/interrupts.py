"""Signals as exceptions, so that every `finally` and cleanup runs: SIGINT → KeyboardInterrupt,
SIGTERM and SIGHUP (the terminal closed) → Terminated (a KeyboardInterrupt). `deferred()` holds both off for the few statements that
must not be cut in half (creating, renaming or removing a temporary file): a signal that arrives
meanwhile is raised when the block ends.

Deferral is done by the handlers themselves rather than by blocking the signals (pthread_sigmask only
blocks them for one thread, and torch's worker threads would still receive them).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

_pending: list[int] = []
_depth = 0
_raised: list[KeyboardInterrupt] = []  # what the handlers raised, for an edge that only sees Typer's Exit(130)


class Terminated(KeyboardInterrupt):
    """SIGTERM (or SIGHUP) arrived. A KeyboardInterrupt, so code that cleans up after Ctrl-C cleans up
    after it too."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__()
        self.signum = signum


def _interrupt(signum: int) -> KeyboardInterrupt:
    interrupt = KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)
    _raised.append(interrupt)
    return interrupt


def last_raised() -> KeyboardInterrupt | None:
    """The interrupt a handler raised most recently in this process and nobody has reported yet."""
    return _raised[-1] if _raised else None


def reported() -> None:
    """Someone has said so (the edge, or a command that reported what it did before the interrupt):
    last_raised() is None again, and the edge adds no "error: interrupted"."""
    _raised.clear()


def _handler(signum, frame) -> None:
    if _depth:
        _pending.append(signum)
        return
    raise _interrupt(signum)


def _unraisable(unraisable) -> None:
    """sys.unraisablehook: a handler's interrupt raised where Python cannot raise it (inside a weakref callback or a
    __del__, such as importlib's module-lock cleanup) is not printed as "Exception ignored … Traceback" and lost,
    the run going on as if no signal came: the signal is sent again, from a timer thread so that it arrives once
    this hook has returned (sent from here, the handler would raise inside the hook, ignored again), and the
    handler raises it in ordinary code."""
    error = unraisable.exc_value
    if isinstance(error, KeyboardInterrupt) and any(error is raised for raised in _raised):
        _raised[:] = [raised for raised in _raised if raised is not error]
        signum = error.signum if isinstance(error, Terminated) else signal.SIGINT
        resend = threading.Timer(RESEND_AFTER, os.kill, (os.getpid(), signum))
        resend.daemon = True
        resend.start()
        return
    _previous_unraisable(unraisable)


_previous_unraisable = sys.unraisablehook
RESEND_AFTER = 0.01  # seconds: long past the hook's return


def install() -> None:
    """SIGINT and SIGTERM raise (unless SIGINT was ignored by whoever started us). Main thread only."""
    if threading.current_thread() is not threading.main_thread():
        return
    sys.unraisablehook = _unraisable
    signal.signal(signal.SIGTERM, _handler)
    if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) is signal.SIG_DFL:  # nohup leaves it ignored
        signal.signal(signal.SIGHUP, _handler)
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _handler)


def exit_code(interrupt: BaseException) -> int:
    """The shell's convention: 128 + the signal's number."""
    return 128 + (interrupt.signum if isinstance(interrupt, Terminated) else signal.SIGINT)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP off for the block; the first that arrived meanwhile is raised after it."""
    global _depth
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if not _depth and _pending:
            signum = _pending[0]
            _pending.clear()
            raise _interrupt(signum)
