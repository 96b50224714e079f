"""Signals as exceptions, so that every `finally` and cleanup runs: SIGINT → KeyboardInterrupt (Python's
default), SIGTERM → Terminated (a KeyboardInterrupt). `deferred()` holds both off for a few statements
that must not be cut in half (creating, renaming or removing a temporary file)."""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived. A KeyboardInterrupt, so code that cleans up after Ctrl-C cleans up after it too."""


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


def install() -> None:
    """SIGTERM raises Terminated; SIGINT raises KeyboardInterrupt (restored if something had ignored it)."""
    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGTERM, _raise_terminated)
    if signal.getsignal(signal.SIGINT) is signal.SIG_DFL:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def exit_code(interrupt: BaseException) -> int:
    """The shell's convention: 128 + the signal's number."""
    return 128 + (signal.SIGTERM if isinstance(interrupt, Terminated) else signal.SIGINT)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Block SIGINT and SIGTERM for the block; one that arrives meanwhile is delivered right after it."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
