"""Bytes on a worker's socket: framing, pickling, and reads and writes that notice a dead peer.
Besides one-byte wake-ups (skipped wherever a frame is read), everything on the socket is a frame:
an op byte, an 8-byte length and the payload (the attach frame comes with the block's descriptor).
"""

from __future__ import annotations

import os
import pickle
import select
import socket
from typing import Any

import cloudpickle

from vecenv.transports.process.protocol import Wake

__all__ = ["Peer", "dumps", "frame", "loads"]

_WAKEUPS = Wake.ALL
_HEAD = 9  # a frame's op byte and length
PROTOCOL = pickle.HIGHEST_PROTOCOL


def frame(op: bytes, data: bytes) -> bytes:
    """``op`` followed by the length of ``data`` and ``data``."""
    return op + len(data).to_bytes(8, "little") + data


def dumps(obj: Any) -> bytes:
    """Pickle ``obj`` (cloudpickle when plain pickle fails)."""
    try:
        return pickle.dumps(obj, PROTOCOL)
    except Exception:
        return cloudpickle.dumps(obj, PROTOCOL)


loads = pickle.loads


class Peer:
    """One end of a worker's socket, non-blocking. ``sentinel`` (the worker process's, on the
    caller's side) turns a wait on a dead peer into ``EOFError``; a worker relies on EOF."""

    def __init__(self, sock: socket.socket, sentinel: int | None = None) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.waitable = self.fd  # what a poller waits on
        self.sentinel = sentinel
        sock.setblocking(False)

    def wake(self, byte: bytes) -> None:
        """Write a wake-up byte (skipped when the buffer is full of them already)."""
        try:
            os.write(self.fd, byte)
        except BlockingIOError:
            pass

    def peek(self) -> bytes | None:
        """The next byte without taking it: ``b""`` at EOF, ``None`` if nothing is there."""
        try:
            return self.sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return None
        except OSError:
            return b""

    def skip_wakeups(self) -> bytes | None:
        """Take the wake-up bytes at the front; the next byte (left in place), as :meth:`peek`."""
        while True:
            byte = self.peek()
            if byte not in _WAKEUPS:
                return byte
            os.read(self.fd, 1)

    def read_frame(self, timeout: float | None = None) -> tuple[bytes, bytes]:
        """The next frame's ``(op, payload)``, skipping wake-up bytes."""
        while True:
            op = self.read(1, timeout)
            if op not in _WAKEUPS:
                break
        size = int.from_bytes(self.read(8, timeout), "little")
        return op, self.read(size, timeout)

    def read(self, n: int, timeout: float | None = None) -> bytes:
        buf = bytearray(n)
        view = memoryview(buf)
        pos = 0
        while pos < n:
            try:
                got = self.sock.recv_into(view[pos:], n - pos)
            except BlockingIOError:
                self.wait(select.POLLIN, timeout)
                continue
            except ConnectionResetError:
                raise EOFError("the peer closed the connection") from None
            if not got:
                raise EOFError("the peer closed the connection")
            pos += got
        return bytes(buf)

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.fd, view):]
            except BlockingIOError:
                self.wait(select.POLLOUT, None)
            except (BrokenPipeError, ConnectionResetError):
                raise EOFError("the peer closed the connection") from None

    def write_frame_with_fd(self, op: bytes, data: bytes, fd: int) -> None:
        """Send one frame with a file descriptor attached (the shared-memory block)."""
        whole = frame(op, data)
        self.sock.setblocking(True)
        try:
            sent = socket.send_fds(self.sock, [whole], [fd])
            if sent < len(whole):
                self.sock.sendall(whole[sent:])
        finally:
            self.sock.setblocking(False)

    def read_frame_with_fd(self) -> tuple[bytes, bytes, int]:
        """The next frame and the descriptor that came with it: ``(op, payload, fd)``."""
        while self.skip_wakeups() is None:  # the descriptor comes with the frame's first byte
            self.wait(select.POLLIN, None)
        head, fds, _, _ = socket.recv_fds(self.sock, _HEAD, 1)
        if not fds:
            raise EOFError("the peer closed the connection, or sent a frame without a descriptor")
        if len(head) < _HEAD:
            head += self.read(_HEAD - len(head))
        return head[:1], self.read(int.from_bytes(head[1:], "little")), fds[0]

    def wait(self, event: int, timeout: float | None) -> None:
        """Block until the socket is ready for ``event``; ``EOFError`` if the peer died,
        ``TimeoutError`` after ``timeout`` seconds."""
        poller = select.poll()
        poller.register(self.fd, event)
        if self.sentinel is not None:
            poller.register(self.sentinel, select.POLLIN)
        events = dict(poller.poll(None if timeout is None else int(timeout * 1000 + 0.999)))
        if self.fd in events:
            return
        if self.sentinel in events:
            raise EOFError("the worker process ended")
        raise TimeoutError(f"no data from the peer within {timeout:g} s")

    def close(self) -> None:
        self.sock.close()
