"""What vecenv asks the operating system about cores and other processes, one function per
question: Linux answers from ``/proc``, Windows through a process handle (``os.kill(pid, 0)``
there would end the process), other POSIX systems through ``os.kill(pid, 0)``."""

from __future__ import annotations

import os
import sys

__all__ = ["HAS_PROC", "gil_enabled", "pin_cores", "process_alive", "process_start_time", "resident_bytes",
           "usable_cores"]

HAS_PROC = os.path.isdir("/proc/self")


def usable_cores() -> int:
    """CPU cores this process may run on (affinity-aware)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def pin_cores(affinity: object) -> tuple[int, ...] | None:
    """The cores to pin worker processes to, in order, from an ``affinity=`` argument: ``False``
    or ``None``, none (no pinning); ``True``, every core this process may use; a sequence of core
    ids, those. Refuses, saying why, ids this process may not use and platforms without
    ``os.sched_setaffinity`` (all but Linux)."""
    if affinity is None or affinity is False:
        return None
    if affinity is not True and (isinstance(affinity, (str, bytes)) or not hasattr(affinity, "__iter__")):
        raise ValueError(f"affinity: expected True, False or a sequence of core ids, got {affinity!r}")
    if not hasattr(os, "sched_setaffinity"):
        raise ValueError("affinity: pinning workers to cores needs os.sched_setaffinity, which only "
                         "Linux has; leave affinity=False on this platform")
    usable = sorted(os.sched_getaffinity(0))
    if affinity is True:
        return tuple(usable)
    cores = tuple(affinity)  # type: ignore[call-overload]
    if not cores or any(isinstance(c, bool) or not isinstance(c, int) for c in cores):
        raise ValueError(f"affinity: expected a non-empty sequence of core ids (int), got {affinity!r}")
    foreign = sorted(set(cores) - set(usable))
    if foreign:
        raise ValueError(f"affinity: core(s) {foreign} are not among the cores this process may "
                         f"run on ({usable})")
    return cores


def _windows_start_time(pid: int) -> str | None:
    import ctypes
    from ctypes import wintypes

    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
    kernel32.OpenProcess.restype = wintypes.HANDLE
    handle = kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
    if not handle:  # error 5, access denied: it exists, and is another user's
        return "" if ctypes.get_last_error() == 5 else None  # type: ignore[attr-defined]
    try:
        code = wintypes.DWORD()
        times = [wintypes.FILETIME() for _ in range(4)]
        if not kernel32.GetExitCodeProcess(handle, ctypes.byref(code)) or code.value != 259:
            return None  # 259: STILL_ACTIVE
        if not kernel32.GetProcessTimes(handle, *(ctypes.byref(t) for t in times)):
            return ""
        return str(times[0].dwHighDateTime << 32 | times[0].dwLowDateTime)
    finally:
        kernel32.CloseHandle(handle)


def process_start_time(pid: int) -> str | None:
    """When process ``pid`` started, as text that changes when the pid is reused (clock ticks
    since boot on Linux, the creation time on Windows); ``""`` when it is alive but its start
    time cannot be read; None when there is no such process."""
    if HAS_PROC:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                text = f.read()
            return text[text.rindex(b")") + 2 :].split()[19].decode()
        except (OSError, ValueError, IndexError):
            return None
    if os.name == "nt":
        return _windows_start_time(pid)
    try:
        os.kill(pid, 0)  # sends nothing
    except ProcessLookupError:
        return None
    except OSError:  # alive, another user's
        pass
    return ""


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists."""
    return process_start_time(pid) is not None


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_bytes(pid: int) -> int | None:
    """Process ``pid``'s resident memory in bytes (``/proc/<pid>/statm``: one read, no
    subprocess); None where there is no ``/proc`` or no such process."""
    if not HAS_PROC:
        return None
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def gil_enabled() -> bool:
    """Whether this interpreter runs with the GIL (always, before free-threaded builds; on one,
    unless started with ``PYTHON_GIL=0`` or ``-X gil=0``)."""
    check = getattr(sys, "_is_gil_enabled", None)
    return True if check is None else bool(check())
