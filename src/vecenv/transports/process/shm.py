"""Shared memory that cannot leak: an anonymous memory file mapped into every worker.

A :class:`SharedBlock` is backed by ``memfd_create`` (Linux) or, elsewhere, by a temporary file
that is unlinked at once. Nothing is ever named in ``/dev/shm``, so a crash, a ``SIGKILL`` or a
forgotten ``close()`` cannot leave a segment behind: the kernel frees the memory when the last
mapping and the last file descriptor are gone. Workers receive the descriptor over their socket
(``socket.send_fds``) and map it themselves.
"""

from __future__ import annotations

import mmap
import os
import tempfile

__all__ = ["SharedBlock"]


def _anonymous_fd(size: int) -> int:
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("vecenv", os.MFD_CLOEXEC)
    else:  # pragma: no cover - non-Linux fallback
        directory = "/dev/shm" if os.path.isdir("/dev/shm") else None
        fd, path = tempfile.mkstemp(prefix="vecenv-", dir=directory)
        os.unlink(path)
    try:
        os.ftruncate(fd, max(size, 1))
    except BaseException:
        os.close(fd)
        raise
    return fd


class SharedBlock:
    """``size`` bytes of zeroed memory shared with the processes that map its :attr:`fd`.

    ``buffer`` is a writable ``mmap`` usable with ``numpy.frombuffer``. :meth:`close_fd` drops the
    descriptor once every worker has its own copy; the mapping lives as long as the arrays that
    view it.
    """

    def __init__(self, size: int, fd: int | None = None) -> None:
        self.size = size
        self.fd: int | None = _anonymous_fd(size) if fd is None else fd
        try:
            self.buffer = mmap.mmap(self.fd, max(size, 1), mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            self.close_fd()
            raise

    @classmethod
    def attach(cls, fd: int, size: int) -> SharedBlock:
        """Map a block received from another process (takes ownership of ``fd``)."""
        block = cls(size, fd)
        block.close_fd()
        return block

    def close_fd(self) -> None:
        """Close the descriptor (the mapping stays valid)."""
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)
