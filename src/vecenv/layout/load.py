"""What the rest of the machine is doing, cheaply: how many cores' worth of work other processes
ask for right now (:func:`others_busy`) and whether that makes this machine contended
(:func:`contended`). Used to keep a calibration measured beside a busy core out of the cache.

The readers (:func:`_read_loadavg`, :func:`_cores`) and the clock (``_clock``, ``_sleep``) are
module attributes so that tests can replace them."""

from __future__ import annotations

import os
import time

__all__ = ["BUSY_CORES", "contended", "most", "others_busy"]

#: other work of at least this many cores' worth makes the machine contended
BUSY_CORES = 0.5
#: seconds between two readings of /proc/loadavg
SAMPLE_S = 0.0015
LOADAVG = "/proc/loadavg"

_clock = time.perf_counter
_sleep = time.sleep


def _read_loadavg() -> str:
    """The text of /proc/loadavg (``OSError`` where there is none)."""
    with open(LOADAVG) as f:
        return f.read()


def _cores() -> tuple[int, int]:
    """The cores this process may run on, and the cores the machine has online."""
    online = os.cpu_count() or 1
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = online
    return usable, max(online, usable)


def _runnable(text: str) -> int:
    """The runnable tasks of a /proc/loadavg text: ``R`` of its 4th field ``R/T``."""
    return int(text.split()[3].split("/")[0])


def others_busy(duration_s: float = 0.02) -> float | None:
    """How many cores' worth of CPU other work asks for now, on average over ``duration_s``.

    Reads the runnable-task count ``R`` of ``/proc/loadavg`` (``R/T``, the 4th field) every
    :data:`SAMPLE_S` (about 13 readings in 20 ms, each a small read, sleeping in between) and averages
    ``R - 1``: ``R`` counts every thread on a CPU or waiting for one, the reading thread included.
    So what counts as *other* work is every other runnable thread: other processes, this
    process's children (worker processes: their CPU is theirs), and this process's other threads
    while they run. A thread that waits for a core counts too: it is demand a run would share its
    cores with.

    Why the run queue and not ``/proc/stat``: busy jiffies tick every 10 ms, so over a 20 ms
    window a core's share reads 0, 50 or 100 % and this process's own sampling has to be
    subtracted (``time.process_time``) at the same coarse grain; the run queue is exact at every
    reading, costs one small read, and needs nothing subtracted but the reader itself.

    ``R`` is machine-wide: where this process may use fewer cores than the machine has online
    (affinity, cpusets), the count is scaled by ``usable / online``, the share of the others'
    demand that falls on this process's cores if it spreads evenly.

    Returns None where there is no /proc/loadavg (not Linux).
    """
    counts: list[int] = []
    end = _clock() + duration_s
    while True:
        try:
            counts.append(max(_runnable(_read_loadavg()) - 1, 0))
        except (OSError, ValueError, IndexError):
            return None
        if _clock() >= end:
            break
        _sleep(SAMPLE_S)
    usable, online = _cores()
    return sum(counts) / len(counts) * usable / online


def contended(cores: int, others: float | None) -> bool:
    """Whether other work (``others``, from :func:`others_busy`, in cores' worth of the
    ``cores`` this process may use) takes :data:`BUSY_CORES` (half a core) or more.

    The threshold does not grow with ``cores``: a layout spreads over every usable core, so one
    core shared with another program already stretches its crossings many times (a worker waits
    for its core; figures in docs/auto.md). An idle machine reads 0.0–0.1 (kernel
    threads, a shell); one CPU hog reads about 1.0. Unknown (None) is not contended.
    """
    return others is not None and cores > 0 and others >= BUSY_CORES


def most(*readings: float | None) -> float | None:
    """The largest of the load readings that were taken (None when none could be)."""
    known = [r for r in readings if r is not None]
    return max(known) if known else None
