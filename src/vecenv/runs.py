"""The vecenv runs on this machine, for ``backend="auto"``: each process with a live vector env
from ``auto`` keeps a small file in a shared directory, so that two runs started together (two
seeds) see each other even while the other is still importing and its load does not show.

A file is named by its pid and holds that process's start time; a file whose process is gone or
whose pid was reused is stale and removed by the next reader. The directory
(``$VECENV_RUNS_DIR``, else ``$XDG_RUNTIME_DIR/vecenv-runs``, else ``vecenv-runs-UID`` in the
temporary directory) is used only when it is this user's alone (:mod:`vecenv.private_files`).
"""

from __future__ import annotations

import atexit
import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from vecenv.private_files import private_dir, read_private, remove_own, write_private
from vecenv.system import process_start_time

__all__ = ["closed", "opened", "other_runs", "runs_dir", "starting"]

_lock = threading.Lock()
_live = 0  # live vector envs of this process
_owner: int | None = None  # the pid whose file this process wrote (a forked child has none)


#: an entry holds a start time: anything longer is not one of ours
_ENTRY_LIMIT = 64
_PURPOSE = "its registry of live runs (backend='auto')"


def runs_dir() -> str:
    """Where the registry is meant to be (whether it can be used: :func:`_checked_dir`)."""
    chosen = os.environ.get("VECENV_RUNS_DIR")
    if chosen:
        return chosen
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime) and os.path.isdir(runtime):
        return os.path.join(runtime, "vecenv-runs")
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return os.path.join(tempfile.gettempdir(), f"vecenv-runs-{uid}")


def _checked_dir() -> str | None:
    """The registry's directory when it is this user's alone (created if missing), else None."""
    return private_dir(runs_dir(), _PURPOSE)


def opened() -> None:
    """A vector env of this process started: the process counts as a run (its file exists)."""
    global _live, _owner
    with _lock:
        _live += 1
        if _live == 1 or _owner != os.getpid():
            _owner = os.getpid()
            directory = _checked_dir()
            if directory is not None:  # else this run is only hidden from the others
                now = process_start_time(_owner)
                write_private(directory, str(_owner), (now or "").encode())


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
    """How many other processes on this machine have a live vector env (removing stale entries)."""
    directory = _checked_dir()
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
        if recorded is None or not (recorded == "" or recorded.isdigit()):
            remove_own(path)  # a link, a FIFO, a huge or foreign file: never an entry
            continue
        now = process_start_time(int(name))
        if now is None or (recorded and now and now != recorded):
            remove_own(path)
            continue
        count += 1
    return count


atexit.register(_remove)
