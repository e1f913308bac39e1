"""The process transport's seam with the operating system: a channel and a shared block.

The protocol (commands and replies counted in shared memory, the sleep/wake handshake, infos in
shared memory, restarts, the error model) is written once, in :mod:`.transport` and
:mod:`.child`. What it needs from the operating system is small, and a :class:`Mechanism`
provides it:

- a **channel** between the caller and a worker (``pair``, then ``peer`` on each end): frames
  and one-byte wake-ups, something to wait on (``peer.waitable``), and a ``poller`` that waits
  on channels and process sentinels together, with a bound;
- a **shared block** (``block``, ``attach_block``): memory both sides map, handed to a worker as
  a ``token`` that travels with the attach frame.

Two mechanisms:

===========  ==========================================  =========================================
             POSIX (:mod:`.wire`, :mod:`.shm`)            portable (:mod:`.portable`)
===========  ==========================================  =========================================
channel      a Unix socketpair, non-blocking              a ``multiprocessing`` duplex pipe, one
                                                          message per frame
waiting      ``select.poll``                              ``multiprocessing.connection.wait``
block        ``memfd_create`` mapped through libc; the    shared by name: ``shm_open``, or a named
             descriptor passed with ``send_fds``          section on Windows
where        Linux (the default; macOS has the pieces)    everywhere; the default on Windows
===========  ==========================================  =========================================

``mechanism=`` on the process backend, or ``VECENV_PROCESS_MECHANISM``, picks one; the suite
runs the process tests on both.
"""

from __future__ import annotations

import abc
import importlib.util
import multiprocessing
import os
import select
import socket
from typing import Any

from vecenv.transports.process import portable, shm, wire

__all__ = ["MECHANISMS", "MECHANISM_VAR", "Mechanism", "PortableMechanism", "PosixMechanism", "choose_mechanism",
           "unavailable"]

#: environment variable that picks the mechanism where the caller does not
MECHANISM_VAR = "VECENV_PROCESS_MECHANISM"


class Mechanism(abc.ABC):
    """How one platform provides the channel and the shared block (see the module docstring)."""

    name: str

    @abc.abstractmethod
    def missing(self) -> list[str]:
        """What this platform lacks for this mechanism (empty: it runs here)."""

    @abc.abstractmethod
    def pair(self) -> tuple[Any, Any]:
        """The two ends of a new channel: the caller's and the worker's."""

    @abc.abstractmethod
    def peer(self, end: Any, sentinel: int | None = None) -> Any:
        """One end of a channel, as a :class:`.wire.Peer` (or its portable twin)."""

    @abc.abstractmethod
    def poller(self) -> Any:
        """Something to ``register`` channels and sentinels with and ``poll(ms)``."""

    @abc.abstractmethod
    def block(self, size: int) -> Any:
        """A new shared block of ``size`` zeroed bytes."""

    @abc.abstractmethod
    def attach_block(self, token: Any, size: int) -> Any:
        """Map the block a worker was handed (``token``: a descriptor, or a name)."""


class PosixMechanism(Mechanism):
    """Unix socketpairs, ``poll``, memfd with its descriptor passed along."""

    name = "posix"

    def missing(self) -> list[str]:
        return [name for name, present in (
            ("socket.AF_UNIX", hasattr(socket, "AF_UNIX")),
            ("socket.send_fds", hasattr(socket, "send_fds")),
            ("select.poll", hasattr(select, "poll")),
            ("the C library's mmap", shm.libc is not None),
        ) if not present]

    def pair(self) -> tuple[Any, Any]:
        return socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)

    def peer(self, end: Any, sentinel: int | None = None) -> Any:
        return wire.Peer(end, sentinel)

    def poller(self) -> Any:
        return _PosixPoller()

    def block(self, size: int) -> Any:
        return shm.SharedBlock(size)

    def attach_block(self, token: Any, size: int) -> Any:
        return shm.SharedBlock.attach(token, size)


class PortableMechanism(Mechanism):
    """``multiprocessing`` pipes and ``connection.wait``, memory shared by name."""

    name = "portable"

    def missing(self) -> list[str]:
        # shm_open comes with CPython's _posixshmem on POSIX
        need_shm = os.name != "nt" and importlib.util.find_spec("_posixshmem") is None
        return ["_posixshmem (shm_open)"] if need_shm else []

    def pair(self) -> tuple[Any, Any]:
        return multiprocessing.Pipe(duplex=True)

    def peer(self, end: Any, sentinel: int | None = None) -> Any:
        return portable.PipePeer(end, sentinel)

    def poller(self) -> Any:
        return portable.PipePoller()

    def block(self, size: int) -> Any:
        return portable.NamedBlock(size)

    def attach_block(self, token: Any, size: int) -> Any:
        return portable.NamedBlock.attach(token, size)


class _PosixPoller:
    def __init__(self) -> None:
        self._poll = select.poll()

    def register(self, fd: int, _events: int = 0) -> None:
        self._poll.register(fd, select.POLLIN)

    def poll(self, timeout_ms: float | None = None) -> list[tuple[int, int]]:
        return self._poll.poll(timeout_ms)


MECHANISMS: dict[str, Mechanism] = {m.name: m for m in (PosixMechanism(), PortableMechanism())}


def choose_mechanism(name: str | None = None) -> Mechanism:
    """The mechanism ``name`` (else ``$VECENV_PROCESS_MECHANISM``, else POSIX where it runs and
    portable elsewhere); a clear error for an unknown name or one this platform cannot run."""
    chosen = name or os.environ.get(MECHANISM_VAR, "").strip().lower() or None
    if chosen is None:
        return MECHANISMS["posix"] if not MECHANISMS["posix"].missing() else MECHANISMS["portable"]
    if chosen not in MECHANISMS:
        where = "mechanism=" if name else f"{MECHANISM_VAR}="
        raise ValueError(f"{where}{chosen!r}: expected one of {sorted(MECHANISMS)}")
    missing = MECHANISMS[chosen].missing()
    if missing:
        raise ValueError(
            f"mechanism {chosen!r} needs what this platform lacks ({', '.join(missing)}); "
            "use mechanism='portable'"
        )
    return MECHANISMS[chosen]


def unavailable() -> str | None:
    """Why worker processes cannot run on this platform, or None when they can (the portable
    mechanism runs wherever multiprocessing and shared memory by name do)."""
    missing = MECHANISMS["portable"].missing()
    return f"vecenv's worker processes need {', '.join(missing)}" if missing else None
