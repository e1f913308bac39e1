"""Shared memory that cannot leak: a ``memfd_create`` file (elsewhere a temporary file unlinked
at once) whose descriptor workers receive with ``send_fds``, mapped with ``mmap(2)`` through ctypes
(Python's ``mmap`` keeps a duplicate descriptor that a later fork would inherit)."""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import tempfile
import weakref
from typing import Any

from vecenv.spaces.buffers import aligned

__all__ = ["SharedBlock", "aligned", "drop_inherited_mappings", "libc"]

_MAP_FIXED = 0x10  # Linux, on every architecture Python supports
_FAILED = ctypes.c_void_p(-1).value
#: the C library, with mmap/munmap typed (also used for prctl); None where there is none (Windows)
libc: Any = None
if os.name == "posix":
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    _RW = mmap.PROT_READ | mmap.PROT_WRITE
#: address -> size of every block mapped in this process (a forked child inherits them all)
_MAPPED: dict[int, int] = {}


def _map(address: int | None, size: int, flags: int, fd: int) -> int:
    result = libc.mmap(address, size, _RW, flags, fd, 0)
    if result in (None, _FAILED):
        err = ctypes.get_errno()
        raise OSError(err, f"mmap of {size} bytes failed: {os.strerror(err)}")
    return result


def _unmap(address: int, size: int) -> None:
    _MAPPED.pop(address, None)
    libc.munmap(address, size)


def drop_inherited_mappings() -> None:
    """In a forked child: replace every block mapping inherited from the parent (those of
    closed vector envs whose arrays are still alive too) with private zeroed memory, so the
    child keeps none of that shared memory allocated and a stray access reads zeros."""
    for address, size in list(_MAPPED.items()):
        _map(address, size, _MAP_FIXED | mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1)


class SharedBlock:
    """``size`` zeroed bytes shared with the processes that map its :attr:`fd`; ``buffer`` stays
    mapped as long as anything views it."""

    def __init__(self, size: int, fd: int | None = None) -> None:
        self.size = max(int(size), 1)
        created = fd is None
        if fd is None:
            if hasattr(os, "memfd_create"):
                fd = os.memfd_create("vecenv", os.MFD_CLOEXEC)
            else:  # pragma: no cover - non-Linux fallback
                fd, path = tempfile.mkstemp(prefix="vecenv-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
                os.unlink(path)
        self.fd: int | None = fd
        try:
            if created:
                os.ftruncate(fd, self.size)
            self.address = _map(None, self.size, mmap.MAP_SHARED, fd)
        except BaseException:
            self.close_fd()
            raise
        _MAPPED[self.address] = self.size
        memory = (ctypes.c_char * self.size).from_address(self.address)
        unmap = weakref.finalize(memory, _unmap, self.address, self.size)  # once nothing views it
        unmap.atexit = False  # at exit the mapping goes with the process; an exit hook that still
        # closes a vector env (lifetime._close_all) reads it after weakref's own hooks have run
        self.buffer = memoryview(memory).cast("B")

    @classmethod
    def attach(cls, fd: int, size: int) -> SharedBlock:
        """Map a block received from another process (takes ownership of ``fd``)."""
        block = cls(size, fd)
        block.close_fd()
        return block

    @property
    def token(self) -> int | None:
        """What a worker needs to map this block: its descriptor (sent with ``send_fds``)."""
        return self.fd

    def close_fd(self) -> None:
        """Close the descriptor (the mapping stays valid)."""
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)

    release = close_fd
