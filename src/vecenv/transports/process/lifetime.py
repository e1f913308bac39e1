"""How long processes and descriptors live: workers end with their caller and hold nothing else.

Caller's side:

- every live :class:`~.transport.ProcessTransport` is in :data:`LIVE`, so that interpreter exit
  closes the ones the program forgot;
- :class:`Watch`: a worker's death is seen through the process itself (a pidfd on Linux, the
  process handle on Windows), never through descriptors that another process may hold too: an
  env that forks a helper without exec hands it the worker's socket and the write end of
  multiprocessing's sentinel pipe, and neither reaches end-of-file while the helper lives.
  Elsewhere the waits look at the exit code in their bounded naps;
- :func:`start_lasting`: workers are started from a thread that lives as long as the process
  (the main thread, or a launcher thread), so that the kernel's parent-death signal, which
  follows the parent *thread*, fires only when the caller's process ends.

Worker's side:

- :func:`drop_inherited` (``fork`` only): a forked worker starts with a copy of every mapping of
  its caller, including those of other vector envs (their descriptors the engine's fork hook
  let go of already). The worker replaces the mappings with private memory (so a stray access
  reads zeros instead of faulting) and closes the caller's end of its own socket.
- :func:`watch_caller`: ``PR_SET_PDEATHSIG`` on Linux (the kernel ends the worker with its
  caller even while an env holds the GIL in native code), and a thread that ends the worker when
  the caller's process ends (it waits on a pidfd, or on Windows on the caller's process handle;
  where there is neither, it polls).
- :func:`mark_copies`: a process that an env forks from a worker is a copy of the worker, not
  the worker: it must never answer for it (:meth:`.child.Child.reply` ends such a copy).
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable
from multiprocessing.connection import wait
from typing import Any, TypeVar, cast

from vecenv.system import process_alive
from vecenv.transports.process.shm import drop_inherited_mappings, libc

__all__ = ["LIVE", "Watch", "drop_inherited", "mark_copies", "start_lasting", "watch_caller"]

#: the caller's transports that are not closed yet
LIVE: weakref.WeakSet[Any] = weakref.WeakSet()

_PR_SET_PDEATHSIG = 1
_POLL_S = 0.5


@atexit.register
def _close_all() -> None:  # before multiprocessing joins non-daemon workers that wait for us
    for transport in list(LIVE):
        try:
            transport.close(1.0)
        except Exception:
            pass


def drop_inherited(keep: Any) -> None:
    """In a forked worker: let go of every vector env's mappings (their descriptors went with
    the engine's fork hook) and of the caller's end of this worker's socket."""
    drop_inherited_mappings()
    if keep is not None:
        keep.close()  # the caller's end of this worker's own socket: EOF must mean the caller left


def _exit_with_caller(pid: int) -> None:
    """Wait until process ``pid`` (the caller) ends, then end this process."""
    waitable = _caller_waitable(pid)
    if waitable is not None:
        wait([waitable])
    else:
        while process_alive(pid):
            time.sleep(_POLL_S)
    os._exit(0)


def _caller_waitable(pid: int) -> Any:
    """Something ready once the caller has ended: its pidfd (Linux), or on Windows the parent's
    process handle when the parent is the caller (never a signal); None where there is neither
    (then :func:`_exit_with_caller` polls)."""
    if os.name == "nt":
        parent = multiprocessing.parent_process()
        return parent.sentinel if parent is not None and parent.pid == pid else None
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfds, or the caller is already gone
        return None


def watch_caller(pid: int) -> None:
    """End this worker when process ``pid`` (the caller) ends.

    On Linux the kernel is also asked to kill this process when its parent exits
    (``PR_SET_PDEATHSIG``): the parent is a thread of the caller that lasts as long as its
    process (:func:`start_lasting`; the signal fires when the parent *thread* ends), or the fork
    server, which ends once every process holding its "alive" pipe has: the worker lets go of
    its own copy, so the server ends with the caller.
    """
    _release_fork_server()
    if sys.platform.startswith("linux"):
        parent = os.getppid()
        try:
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass
        if os.getppid() != parent:  # the parent ended before the request took effect
            os._exit(0)
    threading.Thread(target=_exit_with_caller, args=(pid,), name="vecenv-caller-watch", daemon=True).start()


def _release_fork_server() -> None:
    """Close this process's write end of the fork server's "alive" pipe (inherited by every
    process the server starts, and through ``fork``): the server runs as long as one is open."""
    forkserver = sys.modules.get("multiprocessing.forkserver")
    server: Any = getattr(forkserver, "_forkserver", None)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None:
        server._forkserver_alive_fd = None  # a forkserver used from here is a new one
        try:
            os.close(fd)
        except OSError:
            pass


class Watch:
    """How the caller sees that a worker ``process`` ended: through the process itself.

    :attr:`waitable` is for pollers: a pidfd on Linux, the process handle on Windows (both ready
    once the process has ended, whoever else holds its descriptors); elsewhere multiprocessing's
    sentinel, which :attr:`exact` says cannot be trusted alone (the waits then look at
    :meth:`ended` in their bounded naps).
    """

    def __init__(self, process: Any) -> None:
        self.process = process
        self.code: int | None = None
        self.released = False
        self.fd: int | None = None
        if sys.platform.startswith("linux"):
            try:
                self.fd = os.pidfd_open(process.pid)
            except (AttributeError, OSError):  # no pidfds (before Linux 5.3)
                pass
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
        while (code := self.process.exitcode) is None and time.monotonic() < deadline:
            time.sleep(0.005)  # the fork server reports a child's end after it reaped it
        self.code = code
        return code

    def close_fd(self) -> None:
        """Close the pidfd (a fork's child lets go of it so)."""
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)

    def release(self) -> None:
        """Once the process has ended: close the pidfd and the process object."""
        if self.released:
            return
        self.close_fd()
        self.released = True
        try:
            self.process.close()
        except ValueError:  # still running after SIGKILL: nothing more to do
            pass


_T = TypeVar("_T")


class _Launcher:
    """A daemon thread that runs the process starts handed to it; it lasts until its process
    ends (a fork's child starts its own)."""

    def __init__(self) -> None:
        self.forget()

    def forget(self) -> None:
        """Start afresh (in a fork's child, which has no launcher thread)."""
        self.jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()

    def run(self, fn: Callable[..., _T], *args: Any) -> _T:
        with self.lock:
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._serve, name="vecenv-launcher", daemon=True)
                self.thread.start()
        done, box = threading.Event(), cast(list[tuple[bool, Any]], [])
        self.jobs.put((fn, args, done, box))
        done.wait()
        ok, value = box[0]
        if not ok:
            raise value
        return value

    def _serve(self) -> None:
        while True:
            fn, args, done, box = self.jobs.get()
            try:
                box.append((True, fn(*args)))
            except BaseException as exc:  # noqa: BLE001 - handed to the thread that asked
                box.append((False, exc))
            done.set()


_LAUNCHER = _Launcher()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_LAUNCHER.forget)


def start_lasting(fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)``, which starts worker processes, on a thread that lasts as long as this
    process: the calling thread when it is the main thread, else the launcher thread. A worker's
    parent-death signal then never fires while its caller runs, whatever thread built the vector
    env and whenever that thread ends. Only Linux has the signal; elsewhere ``fn`` runs here."""
    if not sys.platform.startswith("linux") or threading.current_thread() is threading.main_thread():
        return fn(*args)
    return _LAUNCHER.run(fn, *args)


def mark_copies(on_fork: Callable[[], None]) -> None:
    """In a worker: run ``on_fork`` in every process forked from it from now on (a copy of the
    worker that an env made)."""
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=on_fork)
