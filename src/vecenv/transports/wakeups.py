"""How the thread backend's threads wait for each other: spin a little, then sleep until woken.

::

    submit ── queued() ──► work bumped: a spinning helper sees it; a sleeping one is woken
    a group finishes, or a helper posts its part ── progressed() ──► progress bumped; the
                                                     caller, if it sleeps, is to be woken
    a helper with nothing to do ── helper_nap(): spins on work, then sleeps (at most NAP)
    the caller waiting for a group ── spins on progress, then caller_sleep() (at most NAP)

A thread decides to sleep under the transport's lock, after a last look at what would wake it,
and is marked asleep there; whoever wakes it decides so under the same lock. So no wake-up is
lost, and :data:`NAP` bounds every sleep all the same.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

from vecenv.transports.work import Signal, locked, spin_until

__all__ = ["NAP", "Wakeups", "moved_since"]

#: longest a sleeping thread waits before it looks again (a backstop: every wake-up is posted)
NAP = 0.1


class Wakeups:
    """The helpers asleep, whether the caller is, and the counters the spinning waits look at.

    ``lock``: the transport's lock, which also guards the queue the sleepers look at.
    ``spin``: seconds a wait spins before it sleeps (0: it sleeps at once).
    """

    def __init__(self, lock: threading.RLock, spin: float) -> None:
        self.lock = lock
        self.spin = spin
        self.sleepers: list[queue.SimpleQueue] = []  # each sleeping helper's wake queue
        self.caller_asleep = False
        self.caller_wake: queue.SimpleQueue = queue.SimpleQueue()
        #: bumped when work is queued (or the transport closes), and when a group finishes or a
        #: helper posts its part: what the spinning waits look at (a queue's lock would be contended)
        self.work, self.progress = Signal(), Signal()

    def queued(self, every_helper: bool) -> None:
        """Work was queued: a spinning helper sees it, and one sleeping helper (or every one,
        for a step each of them takes part in) is woken."""
        self.work.bump()
        if self.sleepers:  # a helper looks at the queue under the lock before it sleeps
            for wake in locked(self.lock, self._pop_sleepers, every_helper):
                wake.put(None)

    def _pop_sleepers(self, every_helper: bool) -> list[queue.SimpleQueue]:
        if every_helper:
            sleepers, self.sleepers = self.sleepers, []
            return sleepers
        return [self.sleepers.pop()] if self.sleepers else []

    def progressed(self) -> bool:
        """Tell a waiting caller there is something to look at (under the lock); whether it
        sleeps and must be woken (:meth:`wake_caller`, after the lock is let go)."""
        self.progress.bump()
        wake, self.caller_asleep = self.caller_asleep, False
        return wake

    def wake_caller(self) -> None:
        self.caller_wake.put(None)

    def helper_nap(self, wake: queue.SimpleQueue, busy: Callable[[], object]) -> None:
        """A helper with nothing to do waits for work: it spins until work is queued, then
        sleeps in ``wake`` until woken. ``busy()``: whether there is work (or the transport
        closes); looked at again under the lock before sleeping."""
        moved = moved_since(self.work)  # before looking at the queue: no bump goes unseen
        if busy() or (self.spin and spin_until(moved, self.spin)):
            return
        with self.lock:  # a helper: no signal handler runs in its thread
            if busy():
                return
            self.sleepers.append(wake)
        try:
            wake.get(timeout=NAP)
        except queue.Empty:
            with self.lock:
                if wake in self.sleepers:
                    self.sleepers.remove(wake)

    def caller_sleep(self, deadline: float | None) -> None:
        """The caller, marked asleep under the lock, sleeps until woken, ``deadline`` or NAP."""
        left = NAP if deadline is None else min(NAP, max(0.0, deadline - time.monotonic()))
        try:
            self.caller_wake.get(timeout=left)
        except queue.Empty:
            pass


def moved_since(*signals: Signal) -> Callable[[], bool]:
    """Whether any of ``signals`` was bumped since this call."""
    seen = [s.value for s in signals]
    if len(signals) == 1:
        (signal,), (value,) = signals, seen
        return lambda: signal.value != value
    return lambda: any(s.value != v for s, v in zip(signals, seen, strict=True))
