"""The files ``backend="auto"`` keeps for its user: the registry of live runs (each process with
a live vector env from ``auto`` keeps a file named by its pid, holding its start time, so that two
runs started together see each other) and, through :func:`private_dir`, :func:`write_private` and
:func:`read_private`, the calibration cache.

Another local user could create a directory first, or plant links, FIFOs or files in it, so a
directory is used only when it is this user's alone (checked with ``lstat`` as ssh does; else an
:class:`UnsafePathWarning`, once, and vecenv goes on without it), entries are renamed into place
from a temporary file, and read only when they are small regular files of this user's. Windows
has no uids or mode bits to check; the user's own directories there are private already.
"""

from __future__ import annotations

import atexit
import os
import stat
import tempfile
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from vecenv.system import process_start_time

__all__ = ["UnsafePathWarning", "closed", "opened", "other_runs", "private_dir", "runs_dir", "starting"]

_POSIX = os.name == "posix"
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
_warned: set[tuple[str, str]] = set()
_lock = threading.RLock()  # guards _warned, _live and _owner
_live = 0  # live vector envs of this process
_owner: int | None = None  # the pid whose file this process wrote (a forked child has none)
#: an entry holds a start time: anything longer is not one of ours
_ENTRY_LIMIT = 64


class UnsafePathWarning(RuntimeWarning):
    """A directory vecenv would keep its files in is not this user's alone; it is not used."""


def _uid() -> int | None:
    return os.getuid() if _POSIX else None


def private_dir(path: str, purpose: str) -> str | None:
    """``path`` when it is (or has just been made, mode 0700) a directory only this user can
    write to; else None, with a warning naming ``purpose`` and the problem (none when the
    directory cannot be created)."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
    except OSError:
        return None
    uid = _uid()
    if stat.S_ISLNK(st.st_mode):
        problem = "it is a symbolic link"
    elif not stat.S_ISDIR(st.st_mode):
        problem = "it is not a directory"
    elif uid is not None and st.st_uid != uid:
        problem = f"it belongs to uid {st.st_uid}, not to this user (uid {uid})"
    elif _POSIX and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        problem = f"other users can write to it (mode {stat.S_IMODE(st.st_mode):o})"
    else:
        return path
    with _lock:
        first = (path, problem) not in _warned
        _warned.add((path, problem))
    if first:
        warnings.warn(
            f"vecenv does not use {path!r} for {purpose}: {problem}; expected a directory of this "
            "user's that no other user can write to. vecenv goes on without it (remove the directory, "
            "or point the variable that docs/security.md names for it elsewhere).",
            UnsafePathWarning,
            stacklevel=3,
        )
    return None


def write_private(directory: str, name: str, data: bytes) -> None:
    """Put ``data`` in ``directory/name`` through a new temporary file (mode 0600) renamed over
    it, which replaces a link rather than writing through it; a failure leaves nothing."""
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, os.path.join(directory, name))
    except OSError:
        remove_own(tmp)


def read_private(path: str, limit: int) -> bytes | None:
    """The contents of ``path`` when it is a regular file of this user's of at most ``limit``
    bytes, else None; never follows a link nor blocks on a FIFO."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError:
        return None
    try:
        st, uid = os.fstat(fd), _uid()
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
        uid = _uid()
        if uid is None or os.lstat(path).st_uid == uid:
            os.remove(path)
    except OSError:
        pass


def runs_dir() -> str:
    """Where the registry is meant to be: ``$VECENV_RUNS_DIR``, else
    ``$XDG_RUNTIME_DIR/vecenv-runs``, else ``vecenv-runs-UID`` in the temporary directory."""
    chosen = os.environ.get("VECENV_RUNS_DIR")
    if chosen:
        return chosen
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime) and os.path.isdir(runtime):
        return os.path.join(runtime, "vecenv-runs")
    return os.path.join(tempfile.gettempdir(), f"vecenv-runs-{_uid() or 0}")


def _registry() -> str | None:
    return private_dir(runs_dir(), "its registry of live runs (backend='auto')")


def opened() -> None:
    """A vector env of this process started: the process counts as a run (its file exists)."""
    global _live, _owner
    with _lock:
        _live += 1
        if _live == 1 or _owner != os.getpid():
            _owner = os.getpid()
            directory = _registry()
            if directory is not None:  # else this run is only hidden from the others
                write_private(directory, str(_owner), (process_start_time(_owner) or "").encode())


def closed() -> None:
    """A vector env of this process closed: with the last one, the file goes."""
    global _live
    with _lock:
        _live = max(0, _live - 1)
        if _live == 0:
            _remove()


@contextmanager
def starting() -> Iterator[None]:
    """This process counts as a run while it chooses a layout and builds its vector env (then
    the env holds the count while it lives; a failed build leaves none)."""
    opened()
    try:
        yield
    finally:
        closed()


def _remove() -> None:
    if _owner == os.getpid():
        remove_own(os.path.join(runs_dir(), str(_owner)))


def other_runs() -> int:
    """How many other processes on this machine have a live vector env (removing stale entries:
    a file whose process is gone or whose pid was reused)."""
    directory = _registry()
    if directory is None:
        return 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    count = 0
    for name in names:
        if not name.isdigit() or int(name) == os.getpid():
            continue
        path = os.path.join(directory, name)
        data = read_private(path, _ENTRY_LIMIT)
        recorded = data.decode("ascii", "replace").strip() if data is not None else None
        now = process_start_time(int(name))
        # a link, a FIFO, a huge or foreign file is never an entry; a gone or reused pid is stale
        if recorded is None or not (recorded == "" or recorded.isdigit()) or now is None \
                or (recorded and now and now != recorded):
            remove_own(path)
        else:
            count += 1
    return count


atexit.register(_remove)
