"""One word in the shared block that every sleeping worker waits on (a Linux futex).

The caller posts a command to each worker by storing counters, then rings the bell once: one
``futex(FUTEX_WAKE)`` system call wakes every worker asleep on the word, however many there are,
where a wake-up byte per worker would cost the caller a system call per worker.

A worker sleeps on the word with the value it read before its last look at its command counter::

    worker                                   caller
    ------                                   ------
    declare SLEEPS, fence()                  store each worker's command counter
    seen = word                              fence()
    command counter moved? -> run it         any worker declared SLEEPS? (or stores not in order)
    futex_wait(word, seen, nap)                word += 1; futex_wake(word, all)

A worker that read the old command counter read the old word too (stores are seen in order, and
the worker reads the word first), so its wait either sees the word already moved and returns at
once, or is asleep when the wake comes. Naps (at most ``MAX_NAP_MS``) remain the backstop, as
with wake-up bytes. Linux only: elsewhere, and with the portable mechanism, each worker has its
wake-up byte (:mod:`.handshake`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
import sys

import numpy as np

__all__ = ["Bell", "available"]

#: the futex system call's number per machine (Linux's unistd tables)
_SYSCALL = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98, "i686": 240, "i386": 240,
            "riscv64": 98, "ppc64le": 221, "s390x": 238}
_EVERYONE = 0x7FFFFFFF
_WAIT, _WAKE, _ALL, _ZERO = ctypes.c_int(0), ctypes.c_int(1), ctypes.c_int(_EVERYONE), ctypes.c_int(0)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux") or platform.machine().lower() not in _SYSCALL:
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    except OSError:
        return None


_LIBC = _libc()
_NUMBER = ctypes.c_long(_SYSCALL.get(platform.machine().lower(), -1))


def available() -> bool:
    """Whether futexes can be used here (Linux, a known machine, a C library)."""
    return _LIBC is not None


class Bell:
    """The shared int32 ``word`` (a 1-element array over the shared block), rung and waited on."""

    def __init__(self, word: np.ndarray) -> None:
        if _LIBC is None:
            raise OSError("futexes are available on Linux only")
        self.word = word
        self._address = ctypes.c_void_p(word.ctypes.data)
        self._syscall = _LIBC.syscall

    def seen(self) -> int:
        """The word's value, read before the waiter's last look at its counter."""
        return int(self.word[0])

    def ring(self) -> None:
        """Move the word and wake every waiter (one system call)."""
        self.word[0] = (int(self.word[0]) + 1) & _EVERYONE
        self._syscall(_NUMBER, self._address, _WAKE, _ALL, None, None, _ZERO)

    def wait(self, seen: int, timeout_ms: int) -> None:
        """Sleep until a ring, ``timeout_ms``, or at once if the word is no longer ``seen``."""
        ts = _Timespec(timeout_ms // 1000, (timeout_ms % 1000) * 1_000_000)
        self._syscall(_NUMBER, self._address, _WAIT, ctypes.c_int(seen), ctypes.byref(ts), None, _ZERO)
