"""How long processes and descriptors live: workers end with their caller and hold nothing else.

Caller's side: every live :class:`~.transport.ProcessTransport` is in :data:`LIVE`, so that
interpreter exit closes the ones the program forgot, and so that a worker started with ``fork``
knows what it inherited from the other vector envs of its caller.

Worker's side:

- :func:`drop_inherited` (``fork`` only): a forked worker starts with a copy of every descriptor
  and mapping of its caller, including those of other vector envs. Holding them would keep
  their shared memory allocated and their sockets open after they close. The worker closes
  their sockets and memory files and replaces their mappings with private memory (so a stray
  access reads zeros instead of faulting).
- :func:`watch_caller`: a thread that ends the worker when the caller's process ends, whatever
  the env is doing (it waits on a pidfd, or on Windows on the caller's process handle; where there
  is neither, it polls). Where the worker's parent is the caller's main thread or the fork
  server, ``PR_SET_PDEATHSIG`` adds a kernel-side guarantee for an env that holds the GIL in
  native code.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import signal
import sys
import threading
import time
import weakref
from multiprocessing.connection import wait
from typing import Any

from vecenv.system import process_alive
from vecenv.transports.process.shm import drop_inherited_mappings, libc

__all__ = ["LIVE", "drop_inherited", "watch_caller"]

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
    """In a forked worker: let go of every transport's descriptors and mappings."""
    for transport in list(LIVE):
        transport.disown()
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


def watch_caller(pid: int, tie_to_parent: bool) -> None:
    """End this worker when process ``pid`` (the caller) ends.

    ``tie_to_parent``: also ask the kernel to kill this process when its parent exits; only
    right when the parent is the caller's main thread or the fork server (``PR_SET_PDEATHSIG``
    fires when the parent *thread* ends).
    """
    if tie_to_parent and sys.platform.startswith("linux"):
        parent = os.getppid()
        try:
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass
        if os.getppid() != parent:  # the parent ended before the request took effect
            os._exit(0)
    threading.Thread(target=_exit_with_caller, args=(pid,), name="vecenv-caller-watch", daemon=True).start()
