"""How processes and descriptors live: workers end with their caller and hold nothing else.
On the caller's side :data:`LIVE` transports are closed at exit and a :class:`Watch` sees a
worker's death through the process itself; on the worker's side :func:`watch_caller` ends it with
its caller, and :func:`mark_forks` lets a process an env forks from it never answer for it."""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import wait
from typing import Any, TypeVar

from vecenv.system import process_alive
from vecenv.transports.process.shm import drop_inherited_mappings, libc
from vecenv.transports.signals import deferred

__all__ = ["LIVE", "Watch", "drop_inherited", "mark_forks", "start_lasting", "watch_caller"]

#: the caller's transports that are not closed yet
LIVE: weakref.WeakSet[Any] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:  # before multiprocessing joins non-daemon workers that wait for us
    for transport in list(LIVE):
        with contextlib.suppress(Exception):
            transport.close(1.0)


def drop_inherited(caller_end: Any) -> None:
    """In a forked worker: let go of every vector env's mappings and of the caller's end of this
    worker's socket (EOF must mean the caller left)."""
    drop_inherited_mappings()
    caller_end.close()


def _exit_with_caller(pid: int) -> None:
    """Wait until process ``pid`` (the caller) ends, then end this process: on its pidfd, or on
    Windows the parent's process handle when the parent is the caller; else polling."""
    waitable: Any = None
    if os.name == "nt":
        parent = multiprocessing.parent_process()
        waitable = parent.sentinel if parent is not None and parent.pid == pid else None
    else:
        with contextlib.suppress(AttributeError, OSError):  # no pidfds, or the caller is gone
            waitable = os.pidfd_open(pid)
    if waitable is not None:
        wait([waitable])
    else:
        while process_alive(pid):
            time.sleep(0.5)
    os._exit(0)


def watch_caller(pid: int) -> None:
    """End this worker when process ``pid`` (the caller) ends. On Linux the kernel also kills
    it when its parent ends: a lasting thread of the caller (:func:`start_lasting`), or the fork
    server, which ends with the caller once this worker lets go of its "alive" pipe."""
    # the fork server runs as long as a write end of that pipe is open, and every process it
    # starts inherits one (so does a fork); a forkserver used from here is a new one
    server: Any = getattr(sys.modules.get("multiprocessing.forkserver"), "_forkserver", None)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None:
        server._forkserver_alive_fd = None
        with contextlib.suppress(OSError):
            os.close(fd)
    if sys.platform.startswith("linux"):
        parent = os.getppid()
        with contextlib.suppress(OSError, AttributeError):
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent ended before the request took effect
            os._exit(0)
    threading.Thread(target=_exit_with_caller, args=(pid,), name="vecenv-caller-watch", daemon=True).start()


class Watch:
    """How the caller sees that a worker ``process`` ended: :attr:`waitable` (for pollers) is a
    pidfd on Linux, the process handle on Windows; elsewhere multiprocessing's sentinel, which
    :attr:`exact` says cannot be trusted alone (waits then check :meth:`ended` in their naps)."""

    def __init__(self, process: Any) -> None:
        self.process = process
        self.code: int | None = None
        self.released = False
        self.fd: int | None = None
        if sys.platform.startswith("linux"):
            with contextlib.suppress(AttributeError, OSError):  # no pidfds (before Linux 5.3)
                self.fd = os.pidfd_open(process.pid)
        self.waitable: Any = process.sentinel if self.fd is None else self.fd
        self.exact = self.fd is not None or os.name == "nt"

    def ended(self) -> bool:
        return self.join(0) is not None

    def join(self, timeout: float) -> int | None:
        """The exit code, waiting up to ``timeout`` seconds for the process to end (None if it
        did not). Not ``Process.join``: that waits on the sentinel pipe."""
        if self.code is not None or self.released:
            return self.code
        deadline = time.monotonic() + max(0.0, timeout)
        if timeout > 0:
            wait([self.waitable], timeout)
        while (code := deferred(self._reap)) is None and time.monotonic() < deadline:
            time.sleep(0.005)  # the fork server reports a child's end after it reaped it
        return code

    def _reap(self) -> int | None:
        """Collect the exit code and keep it, as one section: a Ctrl-C between the kernel's
        reaping and the record would lose the code for good (``poll`` then answers None forever,
        and the process object, with its two pipes, could never be closed)."""
        self.code = self.process.exitcode
        return self.code

    def close_fd(self) -> None:
        """Close the pidfd (a fork's child lets go of it so)."""
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)

    def release(self) -> None:
        """Once the process has ended: close the pidfd and the process object."""
        if not self.released:
            deferred(self._release)

    def _release(self) -> None:
        # one section: marked released only once the process object let go of its pipes
        self.close_fd()
        with contextlib.suppress(ValueError):  # still running after SIGKILL: nothing more to do
            self.process.close()
        self.released = True


_T = TypeVar("_T")
_launcher: list[ThreadPoolExecutor] = []  # the launcher thread, made at the first need
_launcher_lock = threading.Lock()


def _forget_launcher() -> None:
    """In a fork's child: no launcher thread, and no lock held by a thread that is not there."""
    global _launcher_lock
    _launcher.clear()
    _launcher_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_launcher)


def start_lasting(fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)``, which starts workers, on a thread that lasts as long as this process (the
    main thread, else the launcher thread), so their parent-death signal (Linux) never fires
    while the caller runs; elsewhere ``fn`` runs here."""
    if not sys.platform.startswith("linux") or threading.current_thread() is threading.main_thread():
        return fn(*args)
    with _launcher_lock:
        if not _launcher:
            _launcher.append(ThreadPoolExecutor(1, thread_name_prefix="vecenv-launcher"))
    return _launcher[0].submit(fn, *args).result()


def mark_forks(on_fork: Callable[[], None]) -> None:
    """In a worker: run ``on_fork`` in every process forked from it from now on (a fork of the
    worker that an env made)."""
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=on_fork)
