"""Waiting without a lock (:func:`spin_until`), and a lock section that an interrupt cannot
leave held (:func:`locked`)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["locked", "spin_until"]


#: a spinning wait checks this often whether its thread really runs
CHECK_S = 20e-6
#: ... and stops spinning when it ran less than this share of the time since it began: its core
#: is shared with another runnable thread (often the one it waits for), and a thread that blocks
#: is placed afresh when it is woken, where a core is free
MIN_RUNNING = 0.5
#: whether this platform's thread clock can tell. Windows' (GetThreadTimes) cannot: it says
#: 100 ns but moves on the scheduler's ticks (15.6 ms), so a spin would look starved at once
_THREAD_CLOCK = sys.platform != "win32" and time.get_clock_info("thread_time").resolution < 1e-5


def spin_until(condition: Callable[[], Any], seconds: float) -> bool:
    """Look at ``condition`` for up to ``seconds`` without giving up the core; whether it came
    true. Stops early (False) when this thread is not getting its core (:data:`MIN_RUNNING`); a
    wait shorter than :data:`CHECK_S` reads no thread clock (a system call)."""
    if condition():
        return True
    clock = time.perf_counter
    start = clock()
    end, check = start + seconds, start + CHECK_S
    since, ran = 0.0, -1.0  # when this thread's clock was first read, and what it said
    while not condition():
        now = clock()
        if now >= end:
            return False
        if now >= check:
            if _THREAD_CLOCK:
                if ran < 0:  # the thread clock first: a preemption between the reads is not
                    ran, since = time.thread_time(), clock()  # counted as time lost
                elif time.thread_time() - ran < (now - since) * MIN_RUNNING:
                    return False
            check = now + CHECK_S
    return True


def locked(lock: Any, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` holding ``lock`` (a ``threading.RLock``), released wherever a signal
    handler's exception lands: a ``with`` block is not enough, as the handler can run as
    ``__enter__`` returns, so the acquire is inside the ``try`` and two ``finally`` clauses
    release what this thread holds."""
    try:
        try:
            lock.acquire()
            return fn(*args)
        finally:
            if lock._is_owned():
                lock.release()
    finally:
        if lock._is_owned():
            lock.release()
