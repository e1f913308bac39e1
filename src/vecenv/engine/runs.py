"""The vecenv runs on this machine: each process with a live vector env keeps a small file in a
shared directory while it has one, so that ``backend="auto"`` in another process can count it.

Two training runs started together (two seeds) each build their vector env while the other is
still importing or already waiting, so a look at the machine's load at that moment can miss the
other run; its file cannot. A file names its process and that process's start time: a file whose
process is gone, or whose pid now belongs to another process, is stale and is removed by the
next reader. The directory is ``$VECENV_RUNS_DIR``, else ``vecenv-runs-UID`` in the temporary
directory.
"""

from __future__ import annotations

import atexit
import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["closed", "opened", "other_runs", "runs_dir", "starting"]

_lock = threading.Lock()
_live = 0  # live vector envs of this process
_owner: int | None = None  # the pid whose file this process wrote (a forked child has none)
_HAS_PROC = os.path.isdir("/proc/self")


def runs_dir() -> str:
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return os.environ.get("VECENV_RUNS_DIR") or os.path.join(tempfile.gettempdir(), f"vecenv-runs-{uid}")


def _start_time(pid: int) -> str | None:
    """A process's start time (clock ticks since boot, from /proc), or None when it is gone or
    there is no /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
        return text[text.rindex(b")") + 2 :].split()[19].decode()
    except (OSError, ValueError, IndexError):
        return None


def _signalable(pid: int) -> str | None:
    """Without /proc: "" when ``pid`` is a live process (its start time unknown), else None."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except OSError:  # alive, owned by someone else
        pass
    return ""


def opened() -> None:
    """A vector env of this process started: the process counts as a run (its file exists)."""
    global _live, _owner
    with _lock:
        _live += 1
        if _live == 1 or _owner != os.getpid():
            _owner = os.getpid()
            try:
                os.makedirs(runs_dir(), exist_ok=True)
                with open(os.path.join(runs_dir(), str(_owner)), "w") as f:
                    f.write(_start_time(_owner) or "")
            except OSError:
                pass  # an unwritable directory only hides this run from the others


def closed() -> None:
    """A vector env of this process closed: with the last one, the file goes."""
    global _live
    with _lock:
        _live = max(0, _live - 1)
        if _live == 0:
            _remove()


@contextmanager
def starting() -> Iterator[None]:
    """This process counts as a run while it chooses a layout and builds its vector env, so that
    two runs started together each see the other when they choose (the env itself then holds the
    count while it lives; a failed build leaves none)."""
    opened()
    try:
        yield
    finally:
        closed()


def _remove() -> None:
    if _owner == os.getpid():
        try:
            os.remove(os.path.join(runs_dir(), str(_owner)))
        except OSError:
            pass


def other_runs() -> int:
    """How many other processes on this machine have a live vector env (stale files removed)."""
    try:
        names = os.listdir(runs_dir())
    except OSError:
        return 0
    count = 0
    for name in names:
        if not name.isdigit() or int(name) == os.getpid():
            continue
        path = os.path.join(runs_dir(), name)
        try:
            with open(path) as f:
                recorded = f.read().strip()
        except OSError:
            continue
        now = _start_time(int(name)) if _HAS_PROC else _signalable(int(name))
        if now is None or (recorded and now and now != recorded):
            try:
                os.remove(path)
            except OSError:
                pass
            continue
        count += 1
    return count


atexit.register(_remove)
