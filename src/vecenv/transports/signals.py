"""Critical sections that a ``KeyboardInterrupt`` cannot cut in two (post a command and write
its message; start a worker and record it); env code never runs inside. A mask alone does not
hold (CPython runs the handler in the main thread whichever thread got the signal), so in the
main thread SIGINT's handler is also replaced by one that only notes it, raised again when the
section ends. A section is a function call (:func:`deferred`), not a ``with`` block (see :func:`_held`).
"""

from __future__ import annotations

import importlib
import signal
import threading
from collections.abc import Callable
from typing import Any, TypeVar

# the C functions: signal's wrappers turn masks into enum members, far slower
# (docs/measurements/history-step-path.md)
_native: Any
try:
    _native = importlib.import_module("_signal")
except ImportError:  # pragma: no cover - interpreters without the C module
    _native = signal

__all__ = ["deferred", "quietly_started"]

_MASKS = hasattr(signal, "pthread_sigmask")
_ALL = frozenset(signal.valid_signals()) if _MASKS else frozenset()
_sigmask: Any = _native.pthread_sigmask if _MASKS else None


class _Section:
    """Signal handlers held back between :meth:`begin` and :meth:`end` (``main_only``: only in
    the main thread). Each change is recorded before it is made and forgotten once undone, so
    ending twice, or after a half-done begin, undoes just what was done."""

    __slots__ = ("signums", "main_only", "old_mask", "old_handler", "noted")

    def __init__(self, signums: frozenset[int], main_only: bool) -> None:
        self.signums = signums
        self.main_only = main_only
        self.old_mask: Any = None
        self.old_handler: Any = None
        self.noted = False

    def _note(self, signum: int, frame: Any) -> None:
        self.noted = True

    def begin(self) -> None:
        main = threading.current_thread() is threading.main_thread()
        if main:
            handler = _native.getsignal(signal.SIGINT)
            if handler is not None and handler != signal.SIG_IGN:
                self.old_handler = handler
                _native.signal(signal.SIGINT, self._note)
        if _MASKS and (main or not self.main_only):
            self.old_mask = _sigmask(signal.SIG_BLOCK, ())  # changes nothing: cannot raise after a change
            _sigmask(signal.SIG_BLOCK, self.signums)

    def end(self) -> None:
        """Put back the handler and then the mask, whichever are still changed; then raise what
        a due handler raised meanwhile, or a Ctrl-C that was noted."""
        error = None
        try:
            if self.old_handler is not None:
                error = _put_back(signal.SIGINT, self.old_handler)
                self.old_handler = None
        finally:
            if self.old_mask is not None:
                _sigmask(signal.SIG_SETMASK, self.old_mask)
                self.old_mask = None
        if self.noted:  # its handler and the mask are back: the Ctrl-C comes now
            self.noted = False
            signal.raise_signal(signal.SIGINT)
        if error is not None:
            raise error


_T = TypeVar("_T")


def _held(section: _Section, fn: Callable[..., _T], args: tuple[Any, ...]) -> _T:
    """``fn(*args)`` inside ``section``, ended in two ``finally`` clauses: a due handler can
    raise as the first :meth:`_Section.end` starts, before any line of it runs (a context
    manager's ``__exit__`` could not be protected so)."""
    try:
        try:
            section.begin()
            return fn(*args)
        finally:
            section.end()
    finally:
        section.end()


def _put_back(signum: int, handler: Any) -> BaseException | None:
    """Install ``handler`` whatever happens (``signal.signal`` runs due handlers first, and one
    that raises would leave SIGINT only noted for good); return what such a handler raised."""
    error = None
    while True:
        try:
            _native.signal(signum, handler)
        except BaseException as exc:  # noqa: PERF203 - a handler ran and raised: try again
            error = error or exc
        else:
            return error


def deferred(fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` with signal handlers held back until it returns (in the main thread: only
    there can a handler cut in)."""
    return _held(_Section(_ALL, main_only=True), fn, args)


def quietly_started(exec_based: bool, fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)``, which starts processes, with SIGINT blocked: a child inherits the mask
    (through fork and exec), so a Ctrl-C to the terminal's process group stays pending in a
    worker until its own code ignores SIGINT, instead of a traceback from a half-imported worker.
    The caller's Ctrl-C is raised once the start is over. ``exec_based``: spawn or forkserver (a
    fork server started before any vecenv worker passes its own mask on instead)."""
    if exec_based and _MASKS:
        # started on a first spawn, the resource tracker unblocks SIGINT in the starting thread:
        # start it now, so that the worker started right after inherits the block
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
    return _held(_Section(frozenset({signal.SIGINT}), main_only=False), fn, args)
