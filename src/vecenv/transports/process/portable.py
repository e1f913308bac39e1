"""The portable mechanism: ``multiprocessing.connection`` pipes and memory shared by name.

What Windows (and every other platform multiprocessing supports) offers in place of the POSIX
pieces: a duplex :func:`multiprocessing.Pipe` carries one message per frame or wake-up byte,
:func:`multiprocessing.connection.wait` waits on pipes and process sentinels together with a
bound, and a block of memory is shared by name (a named section on Windows, ``shm_open`` on
POSIX) instead of by passing a descriptor. The protocol on top is the same as with the POSIX
mechanism (:mod:`.mechanism`).
"""

from __future__ import annotations

import errno
import mmap
import os
import secrets
import time
from collections import deque
from multiprocessing.connection import Connection, wait
from typing import Any

from vecenv.transports.process.protocol import Wake
from vecenv.transports.process.wire import frame
from vecenv.transports.signals import deferred

__all__ = ["NamedBlock", "PipePeer", "PipePoller"]

_WAKEUPS = Wake.ALL
_HEAD = 9  # a frame's op byte and length (wire.frame)


class PipePoller:
    """Waits on pipes and process sentinels at once: :meth:`poll` returns ``(ready, 0)`` pairs,
    as ``select.poll`` returns ``(fd, event)`` pairs."""

    def __init__(self) -> None:
        self._keys: list[Any] = []

    def register(self, key: Any, _events: int = 0) -> None:
        self._keys.append(key)

    def poll(self, timeout_ms: float | None = None) -> list[tuple[Any, int]]:
        ready = wait(self._keys, None if timeout_ms is None else timeout_ms / 1000)
        return [(key, 0) for key in ready]


class PipePeer:
    """One end of a worker's pipe, watched together with ``sentinel`` (the worker process's, on
    the caller's side), with the interface of :class:`.wire.Peer`.

    Each frame and each wake-up byte is one message. Wake-ups are dropped wherever they are
    read; a frame read while looking for wake-ups waits in :attr:`pending` for its reader. A
    message is sent and received whole or not at all (:func:`.signals.deferred`): a
    ``KeyboardInterrupt`` between its length and its bytes would leave the pipe out of step.
    """

    def __init__(self, conn: Connection, sentinel: int | None = None) -> None:
        self.conn = conn
        self.waitable: Any = conn
        self.sentinel = sentinel
        self.pending: deque[bytes] = deque()
        _bound_reads(conn)

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
        self.write(frame(op, data))
        self.write(str(token).encode())

    def read_frame_with_fd(self) -> tuple[bytes, bytes, str]:
        """The next frame and the name of the block that came with it."""
        op, data = self.read_frame()
        return op, data, self._message(None).decode()

    def close(self) -> None:
        self.conn.close()


#: longest pause inside one message before the pipe counts as out of step (as FRAME_TIMEOUT)
STALL_S = 30


def _bound_reads(conn: Connection) -> None:
    """On POSIX a pipe is a socket, read a length and then the bytes: a handler of another
    signal that raises in between (one the kernel gave to another thread, which no section holds
    back) leaves the rest unread, and the next read would wait for bytes that never come. A
    receive timeout turns that wait into an error the transport reports. Windows pipes carry
    whole messages, which cannot be cut so."""
    if os.name == "nt":
        return
    import socket
    import struct

    try:
        sock = socket.socket(fileno=os.dup(conn.fileno()))
    except OSError:
        return
    with sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", STALL_S, 0))


def _reserve(fd: int, size: int, name: str) -> None:
    """Give the block all its memory now: ``ftruncate`` only promises it, and a page that a full
    ``/dev/shm`` cannot provide later is a ``SIGBUS`` in whichever process first touches it."""
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
    """``size`` bytes of zeroed memory shared by name (:attr:`token`): a named section on
    Windows (freed with the last handle), ``shm_open`` elsewhere (registered with
    multiprocessing's resource tracker, so that a caller killed before :meth:`release` leaves no
    name behind). The memory stays mapped as long as anything views :attr:`buffer`.
    """

    def __init__(self, size: int, name: str | None = None) -> None:
        self.size = max(int(size), 1)
        self._owner = os.getpid() if name is None else None
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

    @classmethod
    def attach(cls, token: str, size: int) -> NamedBlock:
        """Map a block another process made."""
        return cls(size, token)

    def release(self) -> None:
        """In the process that made it: remove the name (the mappings stay valid); elsewhere
        nothing."""
        if self._owner != os.getpid() or os.name == "nt":
            return
        self._owner = None
        import _posixshmem  # type: ignore[import-not-found]
        from multiprocessing import resource_tracker

        try:
            _posixshmem.shm_unlink(self.token)
        except FileNotFoundError:
            pass
        resource_tracker.unregister(self.token, "shared_memory")
