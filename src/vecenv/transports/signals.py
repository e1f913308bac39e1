"""Critical sections that an asynchronous exception cannot cut in two.

A ``KeyboardInterrupt`` (or any exception a signal handler raises) lands between two Python
bytecodes. Where a transport must do two things or neither (post a command and write its
message; read a reply's message and mark it taken), it defers signal handlers for those few
microseconds: blocked signals are delivered, and their handlers run, as soon as the section
ends. Env code never runs inside such a section, so Ctrl-C still stops a hung env.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["blocked_signals", "deferred_signals", "quiet_children"]

_ALL = signal.valid_signals() if hasattr(signal, "pthread_sigmask") else set()


@contextmanager
def deferred_signals() -> Iterator[None]:
    """Hold back signal handlers (in the main thread) until the block ends."""
    if threading.current_thread() is not threading.main_thread():
        yield  # handlers run in the main thread only: elsewhere nothing can cut in
        return
    with blocked_signals(*_ALL):
        yield


@contextmanager
def blocked_signals(*signums: int) -> Iterator[None]:
    """Block ``signums`` in this thread (any thread) until the block ends.

    A process started meanwhile inherits the mask, so it cannot be interrupted before its own
    code decides how to handle those signals.
    """
    if not _ALL:
        yield
        return
    # pthread_sigmask runs pending handlers when it returns, so it can raise after it changed the
    # mask: read the old mask with a call that changes nothing, block inside the try
    old = signal.pthread_sigmask(signal.SIG_BLOCK, ())
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, signums)
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextmanager
def quiet_children(exec_based: bool) -> Iterator[None]:
    """Start processes that cannot get a ``KeyboardInterrupt`` before their own code runs.

    Ctrl-C reaches every process of the terminal's process group, and a worker that is still
    importing would print a traceback of its own. A forked child inherits the blocked mask;
    ``spawn`` and the fork server reset the mask when they exec, but keep an ignored SIGINT, so
    for them SIGINT is also ignored (main thread only) while the start lasts: a Ctrl-C that lands
    in those few milliseconds is lost, one that lands later reaches the caller alone.
    """
    with blocked_signals(signal.SIGINT):
        if not exec_based or threading.current_thread() is not threading.main_thread():
            yield
            return
        old = signal.getsignal(signal.SIGINT)
        if old is None:  # installed from C: cannot be put back
            yield
            return
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, old)
