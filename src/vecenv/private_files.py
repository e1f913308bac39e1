"""Files vecenv keeps for its user on its own (the live-runs registry, the calibration cache),
safe on a machine where other people have accounts.

Another local user could create a directory first, or plant links, FIFOs or files in it. So a
directory is used only when it is this user's alone (:func:`private_dir`, checked with ``lstat``
as ssh does; else an :class:`UnsafePathWarning`, once, and vecenv goes on without it), entries are
written to a temporary file renamed into place (:func:`write_private`), and read only when they
are small regular files of this user's (:func:`read_private`). Windows has no uids or mode bits
to check; the user's own directories there are private already.
"""

from __future__ import annotations

import os
import stat
import tempfile
import threading
import warnings

__all__ = ["UnsafePathWarning", "private_dir", "read_private", "remove_own", "write_private"]

_POSIX = os.name == "posix"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_BINARY = getattr(os, "O_BINARY", 0)
_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


class UnsafePathWarning(RuntimeWarning):
    """A directory vecenv would keep its files in is not this user's alone; it is not used."""


def _uid() -> int | None:
    return os.getuid() if _POSIX else None


def _problem(st: os.stat_result) -> str | None:
    """What makes ``st`` (from ``lstat``) unfit as a private directory, or None."""
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    uid = _uid()
    if uid is not None and st.st_uid != uid:
        return f"it belongs to uid {st.st_uid}, not to this user (uid {uid})"
    if _POSIX and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"other users can write to it (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _warn_once(path: str, problem: str, purpose: str) -> None:
    with _warned_lock:
        if (path, problem) in _warned:
            return
        _warned.add((path, problem))
    warnings.warn(
        f"vecenv does not use {path!r} for {purpose}: {problem}; expected a directory of this "
        "user's that no other user can write to. vecenv goes on without it (remove the directory, "
        "or point the variable that docs/security.md names for it elsewhere).",
        UnsafePathWarning,
        stacklevel=3,
    )


def private_dir(path: str, purpose: str) -> str | None:
    """``path`` when it is (or has just been made, mode 0700) a directory only this user can
    write to; else None, with a warning naming ``purpose`` and the problem (none when the
    directory cannot be created)."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
    except OSError:
        return None
    problem = _problem(st)
    if problem is not None:
        _warn_once(path, problem, purpose)
        return None
    return path


def write_private(directory: str, name: str, data: bytes) -> bool:
    """Put ``data`` in ``directory/name`` through a new temporary file (mode 0600) renamed over
    it, which replaces a link rather than writing through it. False when it failed."""
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, os.path.join(directory, name))
    except OSError:
        try:
            os.remove(tmp)
        except OSError:
            pass
        return False
    return True


def read_private(path: str, limit: int) -> bytes | None:
    """The contents of ``path`` when it is a regular file of this user's of at most ``limit``
    bytes, else None; never follows a link nor blocks on a FIFO."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _BINARY)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        uid = _uid()
        if not stat.S_ISREG(st.st_mode) or (uid is not None and st.st_uid != uid) or st.st_size > limit:
            return None
        data = os.read(fd, limit + 1)
        return data if len(data) <= limit else None
    except OSError:
        return None
    finally:
        os.close(fd)


def remove_own(path: str) -> None:
    """Remove ``path`` (never what a link points to) if it is this user's; anything else stays."""
    try:
        st = os.lstat(path)
        uid = _uid()
        if uid is None or st.st_uid == uid:
            os.remove(path)
    except OSError:
        pass
