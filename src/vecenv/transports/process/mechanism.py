"""The process transport's seam with the operating system (see docs/process.md): a
:class:`Mechanism` gives the protocol of :mod:`.transport` and :mod:`.child` a channel between the
caller and a worker and a shared block. ``posix`` (:mod:`.wire`, :mod:`.shm`; Linux's default) and
``portable`` (below; Windows' default: ``multiprocessing`` pipes, memory shared by name)."""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import mmap
import multiprocessing
import os
import secrets
import select
import socket
import struct
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from vecenv.transports.process import shm, wire
from vecenv.transports.signals import deferred

__all__ = ["MECHANISMS", "MECHANISM_VAR", "Mechanism", "NamedBlock", "PipePeer", "PipePoller", "choose_mechanism",
           "unavailable"]

#: environment variable that picks the mechanism where the caller does not
MECHANISM_VAR = "VECENV_PROCESS_MECHANISM"


@dataclass(frozen=True)
class Mechanism:
    """How one platform provides the channel and the shared block: ``missing()`` what this
    platform lacks for it (empty: it runs here); ``pair()`` the caller's and the worker's ends of
    a new channel; ``peer(end, sentinel=None)`` one end as a :class:`.wire.Peer` or
    :class:`PipePeer`; ``poller()`` something to ``register`` channels and sentinels with and
    ``poll(ms)``; ``block(size)`` a new zeroed shared block; ``attach_block(token, size)`` the
    block a worker was handed (a descriptor, or a name)."""

    name: str
    missing: Callable[[], list[str]]
    pair: Callable[[], tuple[Any, Any]]
    peer: Callable[..., Any]
    poller: Callable[[], Any]
    block: Callable[[int], Any]
    attach_block: Callable[[Any, int], Any]


def _posix_missing() -> list[str]:
    return [name for name, present in (
        ("socket.AF_UNIX", hasattr(socket, "AF_UNIX")),
        ("socket.send_fds", hasattr(socket, "send_fds")),
        ("select.poll", hasattr(select, "poll")),
        ("the C library's mmap", shm.libc is not None),
    ) if not present]


def _portable_missing() -> list[str]:
    # shm_open comes with CPython's _posixshmem on POSIX
    need_shm = os.name != "nt" and importlib.util.find_spec("_posixshmem") is None
    return ["_posixshmem (shm_open)"] if need_shm else []


class _PosixPoller:
    def __init__(self) -> None:
        self._poll = select.poll()

    def register(self, fd: int) -> None:
        self._poll.register(fd, select.POLLIN)

    def poll(self, timeout_ms: float) -> list[tuple[int, int]]:
        return self._poll.poll(timeout_ms)


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


# ------------------------------------------------------------------ the portable mechanism
_WAKEUPS, _HEAD = wire._WAKEUPS, wire._HEAD  # wake-up bytes; a frame's op byte and length


class PipePoller:
    """Waits on pipes and process sentinels at once: :meth:`poll` returns ``(ready, 0)`` pairs,
    as ``select.poll`` returns ``(fd, event)`` pairs."""

    def __init__(self) -> None:
        self._keys: list[Any] = []

    def register(self, key: Any) -> None:
        self._keys.append(key)

    def poll(self, timeout_ms: float) -> list[tuple[Any, int]]:
        return [(key, 0) for key in wait(self._keys, timeout_ms / 1000)]


class PipePeer:
    """One end of a worker's pipe, watched with ``sentinel`` (the worker process's, on the
    caller's side); the interface of :class:`.wire.Peer`. Each frame and wake-up byte is one
    message, sent and received whole (:func:`.signals.deferred`); a frame read while skipping
    wake-ups waits in :attr:`pending` for its reader."""

    def __init__(self, conn: Connection, sentinel: int | None = None) -> None:
        self.conn = conn
        self.waitable: Any = conn
        self.sentinel = sentinel
        self.pending: deque[bytes] = deque()
        if os.name == "nt":
            return
        # POSIX: a receive timeout, since a signal handler raising between a message's length and
        # its bytes would leave a read waiting for bytes that never come
        try:
            sock = socket.socket(fileno=os.dup(conn.fileno()))
        except OSError:
            return
        with sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", STALL_S, 0))

    def wake(self, byte: bytes) -> None:
        try:
            deferred(self.conn.send_bytes, byte)
        except OSError:  # the peer is gone: its end is noticed where it is read
            pass

    def skip_wakeups(self) -> bytes | None:
        """Take the wake-ups that arrived; the first byte of the next frame (kept for its
        reader), ``b""`` at EOF, ``None`` if nothing is there."""
        while not self.pending:
            try:
                if not self.conn.poll(0):
                    return None
                message = deferred(self.conn.recv_bytes)
            except (EOFError, OSError):
                return b""
            if message not in _WAKEUPS:
                self.pending.append(message)
        return self.pending[0][:1]

    def _message(self, timeout: float | None) -> bytes:
        deadline = None if timeout is None else time.monotonic() + timeout
        watched: list[Any] = [self.conn] if self.sentinel is None else [self.conn, self.sentinel]
        while not self.pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = wait(watched, left)
            if self.conn in ready:
                try:
                    message = deferred(self.conn.recv_bytes)
                except (EOFError, OSError):
                    raise EOFError("the peer closed the connection") from None
                if message not in _WAKEUPS:
                    return message
            elif ready:
                raise EOFError("the worker process ended")
            elif left == 0:
                raise TimeoutError(f"no data from the peer within {timeout:g} s")
        return self.pending.popleft()

    def read_frame(self, timeout: float | None = None) -> tuple[bytes, bytes]:
        """The next frame's ``(op, payload)``, skipping wake-ups."""
        message = self._message(timeout)
        return message[:1], message[_HEAD:]

    def write(self, data: bytes) -> None:
        """Send one whole frame (``wire.frame``)."""
        try:
            deferred(self.conn.send_bytes, data)
        except OSError:
            raise EOFError("the peer closed the connection") from None

    def write_frame_with_fd(self, op: bytes, data: bytes, token: Any) -> None:
        """Send a frame and then the name of the shared block that goes with it."""
        self.write(wire.frame(op, data))
        self.write(str(token).encode())

    def read_frame_with_fd(self) -> tuple[bytes, bytes, str]:
        """The next frame and the name of the block that came with it."""
        op, data = self.read_frame()
        return op, data, self._message(None).decode()

    def close(self) -> None:
        self.conn.close()


#: longest pause inside one message before the pipe counts as out of step (as FRAME_TIMEOUT)
STALL_S = 30


def _reserve(fd: int, size: int, name: str) -> None:
    """Give the block all its memory now: a page that a full ``/dev/shm`` cannot provide later
    is a ``SIGBUS`` in whichever process first touches it."""
    if not hasattr(os, "posix_fallocate"):  # macOS: shared memory is not a size-limited file system
        return
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.ENOMEM):
            return  # a file system that cannot reserve ahead (EOPNOTSUPP): as before
        where = "/dev/shm" if os.path.isdir("/dev/shm") else "POSIX shared memory"
        try:
            stat = os.statvfs(where)
            left = f", and {stat.f_bavail * stat.f_frsize} bytes are free there"
        except OSError:
            left = ""
        raise OSError(
            exc.errno,
            f"mechanism='portable' needs {size} bytes of shared memory in {where} for {name}{left}: "
            "make it larger (docker: --shm-size), or use mechanism='posix' (anonymous memory, not "
            f"limited by {where})",
        ) from None


class NamedBlock:
    """``size`` zeroed bytes shared by name (:attr:`token`): a named section on Windows,
    ``shm_open`` elsewhere (registered with multiprocessing's resource tracker, so a killed
    caller leaves no name behind)."""

    def __init__(self, size: int, name: str | None = None) -> None:
        self.size = max(int(size), 1)
        self._creator = os.getpid() if name is None else None
        # short: macOS allows 31 characters in a shm name
        self.token = name or f"{'' if os.name == 'nt' else '/'}ve{os.getpid():x}{secrets.token_hex(6)}"
        if os.name == "nt":
            self._map = mmap.mmap(-1, self.size, tagname=self.token)  # type: ignore[call-arg]
        else:
            self._map = self._posix_map(name is None)
        self.buffer = memoryview(self._map)

    def _posix_map(self, create: bool) -> mmap.mmap:
        import _posixshmem  # type: ignore[import-not-found]

        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = _posixshmem.shm_open(self.token, flags, mode=0o600)
        try:
            if create:
                os.ftruncate(fd, self.size)
                _reserve(fd, self.size, self.token)
            memory = mmap.mmap(fd, self.size)
        except BaseException:
            if create:
                _posixshmem.shm_unlink(self.token)
            raise
        finally:
            os.close(fd)
        if create:
            from multiprocessing import resource_tracker

            resource_tracker.register(self.token, "shared_memory")
        return memory

    def release(self) -> None:
        """In the process that made it: remove the name (the mappings stay valid); elsewhere
        nothing."""
        if self._creator == os.getpid() and os.name != "nt":
            deferred(self._unlink)  # a Ctrl-C leaves the name either there and owned, or gone

    def _unlink(self) -> None:
        import _posixshmem  # type: ignore[import-not-found]
        from multiprocessing import resource_tracker

        with contextlib.suppress(FileNotFoundError):
            _posixshmem.shm_unlink(self.token)
        resource_tracker.unregister(self.token, "shared_memory")
        self._creator = None


MECHANISMS: dict[str, Mechanism] = {m.name: m for m in (
    Mechanism("posix", _posix_missing, lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM),
              wire.Peer, _PosixPoller, shm.SharedBlock, shm.SharedBlock.attach),
    Mechanism("portable", _portable_missing, lambda: multiprocessing.Pipe(duplex=True),
              PipePeer, PipePoller, NamedBlock, lambda token, size: NamedBlock(size, token)),
)}
