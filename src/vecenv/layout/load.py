"""How many cores' worth of work other processes ask for now (:func:`others_busy`), and whether
that makes this machine contended (:func:`contended`). The readers and the clock are module
attributes so that tests can replace them."""

from __future__ import annotations

import os
import time

from vecenv.system import usable_cores

__all__ = ["BUSY_CORES", "contended", "most", "others_busy"]

#: other work of at least this many cores' worth makes the machine contended
BUSY_CORES = 0.5
#: seconds between two readings of /proc/loadavg
SAMPLE_S = 0.0015
LOADAVG = "/proc/loadavg"

_clock = time.perf_counter
_sleep = time.sleep


def _read_loadavg() -> str:
    with open(LOADAVG) as f:
        return f.read()


def _cores() -> tuple[int, int]:
    """The cores this process may run on, and the cores the machine has online."""
    usable = usable_cores()
    return usable, max(os.cpu_count() or 1, usable)


def others_busy(duration_s: float = 0.02) -> float | None:
    """How many cores' worth of CPU other work asks for now, on average over ``duration_s``; None
    where there is no /proc/loadavg (not Linux).

    Averages ``R - 1`` of /proc/loadavg's runnable tasks ``R`` (every runnable thread but the
    reader's, children and waiting threads included) every :data:`SAMPLE_S`: exact at each
    reading, unlike /proc/stat's 10 ms jiffies. Scaled by ``usable / online`` cores where this
    process may use fewer cores than the machine has.
    """
    counts: list[int] = []
    end = _clock() + duration_s
    while True:
        try:
            runnable = int(_read_loadavg().split()[3].split("/")[0])  # R of the 4th field, R/T
            counts.append(max(runnable - 1, 0))
        except (OSError, ValueError, IndexError):
            return None
        if _clock() >= end:
            break
        _sleep(SAMPLE_S)
    usable, online = _cores()
    return sum(counts) / len(counts) * usable / online


def contended(cores: int, others: float | None) -> bool:
    """Whether other work (``others`` cores' worth, from :func:`others_busy`) takes
    :data:`BUSY_CORES` or more, however many ``cores``: a layout spreads over every usable core,
    so one shared core already stretches its crossings many times (docs/auto.md). An idle machine
    reads 0.0–0.1, one CPU hog about 1.0; unknown (None) is not contended."""
    return others is not None and cores > 0 and others >= BUSY_CORES


def most(*readings: float | None) -> float | None:
    """The largest of the load readings that were taken (None when none could be)."""
    known = [r for r in readings if r is not None]
    return max(known) if known else None
