"""The wire between the main process and one worker: a Unix socket pair plus a control block.

Hot path (a whole-group step with no infos): the main process writes the actions into shared
memory, bumps the worker's command counter and writes one byte (``S``); the worker steps, writes
results in place, bumps its done counter and writes one byte back (``K``). Nothing is pickled.
Everything else travels as ``op + 8-byte length + pickle``.

The counters let either side spin briefly without a system call before blocking in the kernel on
the socket (which, unlike a semaphore, can be waited on together with other workers' sockets and
their process sentinels).
"""

from __future__ import annotations

import socket

__all__ = [
    "OP_ATTACH",
    "OP_MASKED_STEP",
    "OP_MESSAGE",
    "OP_OK",
    "OP_STEP",
    "OP_WAKE",
    "recv_exact",
    "send_message",
]

OP_STEP = b"S"  # main -> worker: step the whole group with the actions in shared memory
OP_MASKED_STEP = b"M"  # main -> worker: step the envs flagged in the shared step mask
OP_MESSAGE = b"P"  # either way: a pickled message follows (8-byte length + bytes)
OP_ATTACH = b"A"  # main -> worker: shared memory descriptor + layout follow
OP_OK = b"K"  # worker -> main: done, no infos and no objects to report (also its wake-up byte)
OP_WAKE = b"W"  # main -> worker: wake up, the command is in shared memory (x86 fast path)


def frame(op: bytes, data: bytes) -> bytes:
    """``op`` followed by the length of ``data`` and ``data``."""
    return op + len(data).to_bytes(8, "little") + data


def send_message(sock: socket.socket, op: bytes, data: bytes) -> None:
    """Write a framed message on a blocking socket."""
    sock.sendall(frame(op, data))


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Read exactly ``n`` bytes from a blocking socket; ``EOFError`` if the peer is gone."""
    buf = bytearray(n)
    view = memoryview(buf)
    pos = 0
    while pos < n:
        got = sock.recv_into(view[pos:], n - pos)
        if not got:
            raise EOFError("peer closed the connection")
        pos += got
    return bytes(buf)
