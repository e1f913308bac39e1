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

__all__ = ["deferred_signals"]

_ALL = signal.valid_signals() if hasattr(signal, "pthread_sigmask") else set()


@contextmanager
def deferred_signals() -> Iterator[None]:
    """Hold back signal handlers (in the main thread) until the block ends."""
    if not _ALL or threading.current_thread() is not threading.main_thread():
        yield  # handlers run in the main thread only: elsewhere nothing can cut in
        return
    # pthread_sigmask runs pending handlers when it returns, so it can raise after it changed the
    # mask: read the old mask with a call that changes nothing, block inside the try
    old = signal.pthread_sigmask(signal.SIG_BLOCK, ())
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, _ALL)
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
