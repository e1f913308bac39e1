"""Critical sections that an asynchronous exception cannot cut in two.

A ``KeyboardInterrupt`` (or any exception a signal handler raises) lands between two Python
bytecodes. Where a transport must do two things or neither (post a command and write its
message; read a reply's message and mark it taken; start a worker and record it), it holds
signal handlers back for those few microseconds, and they run as soon as the section ends. Env
code never runs inside such a section, so Ctrl-C still stops a hung env.

Holding back takes two means, because a mask alone does not hold:

- a ``pthread_sigmask`` block in the calling thread: a signal sent to that thread waits;
- for SIGINT, a handler that only notes the signal, raised again when the section ends. A signal
  sent to the process goes to any thread that does not block it (numpy's BLAS threads are such
  threads), and CPython then runs the Python handler in the main thread at its next bytecode,
  mask or not.

Only the main thread runs signal handlers, so in any other thread nothing can cut in.

A section is a function call (:func:`deferred`), not a ``with`` block: putting things back must
hold wherever a handler raises, its very first bytecode included (see :func:`_held`).
"""

from __future__ import annotations

import importlib
import signal
import threading
from collections.abc import Callable
from typing import Any, TypeVar

# the C functions: signal's wrappers turn every returned mask into enum members, far slower
# (docs/measurements/2026-11-23-2core-epyc-signal-sections.md)
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
    """Signal handlers held back (see the module docstring) between :meth:`begin` and
    :meth:`end`; only :func:`_held` uses it.

    ``signums`` are blocked in the calling thread (any thread: a process started meanwhile
    inherits the mask); in the main thread SIGINT is also held, unless it is ignored or its
    handler was installed from C. ``main_only``: do nothing outside the main thread. Every change
    is recorded before it is made and forgotten only once it is undone, so ending twice is
    harmless and ending after a half-done begin undoes just what was done.
    """

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
    """``fn(*args)`` inside ``section``.

    Ended twice, in two ``finally`` clauses of this frame: CPython runs due handlers as any
    Python function starts (since 3.12 also after most calls), so one can raise as the first
    :meth:`_Section.end` begins, before any line of it runs; the second then undoes it all. A
    context manager could not do this: its ``__exit__`` is such a function, and nothing of the
    caller's runs after it.
    """
    try:
        try:
            section.begin()
            return fn(*args)
        finally:
            section.end()
    finally:
        section.end()


def _put_back(signum: int, handler: Any) -> BaseException | None:
    """Install ``handler`` whatever happens, and return what a due handler raised meanwhile.

    ``signal.signal`` runs the handlers that are due before it changes anything: one that
    raises would leave the change undone (here: SIGINT only noted, for good).
    """
    error = None
    while True:
        try:
            _native.signal(signum, handler)
        except BaseException as exc:  # noqa: PERF203 - a handler ran and raised: try again
            error = error or exc
        else:
            return error


def deferred(fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` with signal handlers held back (in the main thread) until it returns.

    Elsewhere it only calls ``fn``: handlers run in the main thread only, so nothing can cut in.
    """
    return _held(_Section(_ALL, main_only=True), fn, args)


def _start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker now, if it is not running.

    ``spawn`` and the fork server start it on their first process, and starting it unblocks
    SIGINT in the starting thread: a worker started right after would not inherit the block.
    """
    try:
        from multiprocessing import resource_tracker
    except ImportError:  # pragma: no cover - platforms without it have no masks either
        return
    resource_tracker.ensure_running()


def quietly_started(exec_based: bool, fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)``, which starts processes: they cannot get a ``KeyboardInterrupt`` before
    their own code runs, and cannot take one from the caller.

    Ctrl-C reaches every process of the terminal's process group, and a worker that is still
    importing would print a traceback of its own. A child inherits the starting thread's signal
    mask, through ``fork`` and through the ``exec`` of ``spawn`` and of the fork server, so SIGINT
    is blocked while the start lasts: the worker keeps a Ctrl-C pending until its own code ignores
    SIGINT and unblocks it. The caller's Ctrl-C is held and raised once the start is over, so it
    cannot cut a start in two. ``exec_based``: the start method is ``spawn`` or ``forkserver``.

    A fork server started elsewhere, before any vecenv worker, passes its own mask on instead.
    """
    if exec_based and _MASKS:
        _start_resource_tracker()
    return _held(_Section(frozenset({signal.SIGINT}), main_only=False), fn, args)
