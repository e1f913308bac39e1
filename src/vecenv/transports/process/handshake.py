"""The sleep/wake handshake between the caller and a worker, written once for both sides.

Either side waits for the other's counter in the control block to move, and the other side,
after moving it, wakes the waiter only if it declared that it sleeps::

    waiter (caller or worker)                     notifier (the other side)
    -------------------------                     -------------------------
    Waiter.spin(check): busy-check, then          store the counter (the commit)
      check between sched_yield() calls, within   fence()
      the budget its observations allow           if the waiter's SLEEPS flag is set
    sleep(...) or sleep_on_bell(...):               (or stores are not seen in order):
      declare SLEEPS, fence(), re-check,            write one wake-up byte on the socket,
      then nap on the socket (poll) or on the       or ring the bell (control.Bell)
      bell (futex) until check() holds;
      withdraw the declaration

Each side stores before it loads (declare then re-check; commit then look at the flag), with a
fence between, so at least one of them sees the other's store: a wake-up is never lost. The naps
(at most :data:`MAX_NAP_MS`) are a backstop.

Spinning pays only while the waiter and its peer each have a core. A :class:`Waiter` blocks at
once (but for one wait in :data:`PROBE_EVERY`, to notice a change) when its recent spins say it
does not pay: more than :data:`MAX_PREEMPTED` of them lost the CPU (another task wanted this core),
fewer than :data:`MIN_HIT` found the peer done in budget (a policy computes between steps), or,
for a waiter with a busy spin, its thread's run delay (read every :data:`DELAY_CHECK_S`) shows the
machine oversubscribed. Beside a busy process this runs CartPole 1.4x faster than fixed budgets
(docs/measurements/2026-11-27-2core-epyc-waiter-fixed-vs-adaptive.md).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

from vecenv.transports.process.control import TSO, fence

__all__ = ["MAX_NAP_MS", "Waiter", "notify", "sleep", "sleep_on_bell"]

R = TypeVar("R")

#: longest nap (ms) between re-checks of a counter while asleep; a lost wake-up costs at most this
MAX_NAP_MS = 50
#: a gap this long between two looks of a check loop means the waiter lost its CPU
PREEMPT_S = 100e-6
#: above this share of recent spins that lost their CPU, the waiter blocks at once ...
MAX_PREEMPTED = 0.05
#: ... and below this share of spins that found the peer done
MIN_HIT = 0.25
#: ... but for one wait in this many, which spins to measure the shares again
PROBE_EVERY = 16
#: weight of the newest spin in the running shares
WEIGHT = 1 / 16
#: seconds between two looks at the waiting thread's run delay
DELAY_CHECK_S = 0.05
#: share of the time spent waiting for a CPU above which waits block at once, and below which
#: they may spin again
CONTENDED_DELAY, CALM_DELAY = 0.2, 0.05
SCHEDSTAT = "/proc/thread-self/schedstat"
#: give up the CPU to another runnable task (Windows has no sched_yield: a zero sleep)
_yield: Callable[[], Any] = getattr(os, "sched_yield", None) or (lambda: time.sleep(0))


class Waiter:
    """One side's spin-then-yield phase: at most ``spin_s`` seconds of busy checking, then
    ``yield_s`` between ``sched_yield()`` calls, spent only while its waits say it pays."""

    def __init__(self, spin_s: float, yield_s: float, clock: Callable[[], float] = time.perf_counter) -> None:
        self.spin_s, self.yield_s = max(0.0, spin_s), max(0.0, yield_s)
        self.clock = clock
        self.hit_rate = 1.0  # running share of spins that found the peer done
        self.preempted = 0.0  # running share of spins that lost their CPU
        self.waits = 0
        self.contended = False  # this thread waits for a CPU too often for spinning to pay
        self._next_look = 0.0
        self._delay: tuple[float, float] | None = None  # (clock, run delay) at the last look

    def spins_now(self) -> bool:
        """Whether the next wait should spin before it sleeps."""
        if self.spin_s + self.yield_s <= 0:
            return False
        self.waits += 1
        # with a busy spin every process has a core, so a run delay is other programs' work;
        # without one the run's own processes outnumber the cores and yielding is what pays
        if self.spin_s > 0:
            now = self.clock()
            if now >= self._next_look:
                self.look_at_run_delay(now, run_delay())
            if self.contended:
                return False
        pays = self.hit_rate >= MIN_HIT and self.preempted <= MAX_PREEMPTED
        return pays or self.waits % PROBE_EVERY == 0

    def look_at_run_delay(self, now: float, delay: float | None) -> None:
        """Judge contention from the run delay since the last look (``delay``: seconds in all,
        None where the kernel does not tell)."""
        self._next_look = now + DELAY_CHECK_S
        if delay is None:
            return
        if self._delay is not None and now > self._delay[0]:
            share = (delay - self._delay[1]) / (now - self._delay[0])
            self.contended = share > (CALM_DELAY if self.contended else CONTENDED_DELAY)
        self._delay = (now, delay)

    def spin(self, check: Callable[[], Any], limit: float | None = None) -> bool:
        """Whether ``check()`` came true while spinning (at most ``limit`` seconds); when not,
        the caller sleeps (:func:`sleep`), whose first look is a check."""
        if not self.spins_now():
            return False
        spin_s, yield_s = self.spin_s, self.yield_s
        if limit is not None:
            spin_s, yield_s = min(spin_s, limit), min(yield_s, max(0.0, limit - spin_s))
        done, preempted = spin_then_yield(check, spin_s, yield_s, self.clock)
        self.observe(done, preempted)
        return done

    def observe(self, done: bool, preempted: bool) -> None:
        """Account for one spin: did it find the peer done, did it lose its CPU."""
        self.hit_rate += (float(done) - self.hit_rate) * WEIGHT
        self.preempted += (float(preempted) - self.preempted) * WEIGHT


def run_delay() -> float | None:
    """Seconds the calling thread has spent runnable but waiting for a CPU (None where the
    kernel does not say: not Linux, or no scheduler statistics)."""
    try:
        with open(SCHEDSTAT, "rb") as f:
            return int(f.read().split()[1]) * 1e-9
    except (OSError, ValueError, IndexError):
        return None


def spin_then_yield(
    check: Callable[[], Any], spin_s: float, yield_s: float, clock: Callable[[], float] = time.perf_counter
) -> tuple[bool, bool]:
    """Check busily for ``spin_s``, then between ``sched_yield()`` calls for ``yield_s``:
    ``(done, preempted)``. Stops at the first sign that the CPU went to another task."""
    last = clock()
    end_spin, end = last + spin_s, last + spin_s + yield_s
    while True:
        if check():
            return True, False
        now = clock()
        if now - last > PREEMPT_S:
            return bool(check()), True
        if now >= end:
            return False, False
        if now >= end_spin:
            _yield()
        last = now if now < end_spin else clock()


def sleep(
    check: Callable[[], R],
    declare: Callable[[int], None],
    poller: Any,
    on_event: Callable[[int], None],
    deadline: float | None = None,
    go_on: Callable[[], bool] = lambda: True,
) -> R | None:
    """Declare that this side sleeps, then poll until ``check()`` gives something true.

    Returns that value; ``check()``'s last (false) value once ``deadline`` (``time.monotonic``)
    passes; None when ``go_on()`` turns false. ``on_event(fd)`` takes each readable descriptor
    (wake-up bytes, a peer's end).
    """
    declare(1)
    fence()
    try:
        nap = 1
        while go_on():
            result = check()
            left = None if deadline is None else deadline - time.monotonic()
            if result or (left is not None and left <= 0):
                return result
            events = poller.poll(nap if left is None else min(nap, math.ceil(left * 1000)))
            nap = nap if events else min(2 * nap, MAX_NAP_MS)
            for fd, _ in events:
                on_event(fd)
        return None
    finally:
        declare(0)


def sleep_on_bell(
    check: Callable[[], R],
    declare: Callable[[int], None],
    bell: Any,
    between: Callable[[], None],
    deadline: float | None = None,
    go_on: Callable[[], bool] = lambda: True,
) -> R | None:
    """Declare that this side sleeps, then wait on ``bell`` (:class:`.control.Bell`) until
    ``check()`` gives something true; ``between()`` runs after each nap that no ring ended.

    Returns as :func:`sleep` does: that value; ``check()``'s last (false) value once
    ``deadline`` (``time.monotonic``) passes; None when ``go_on()`` turns false.
    """
    declare(1)
    fence()
    try:
        nap = 1
        while go_on():
            seen = bell.seen()
            if not TSO:  # the word is read before the counter, where loads may pass loads
                fence()
            result = check()
            left = None if deadline is None else deadline - time.monotonic()
            if result or (left is not None and left <= 0):
                return result
            bell.wait(seen, nap if left is None else min(nap, math.ceil(left * 1000)))
            if bell.seen() == seen:
                between()
                nap = min(2 * nap, MAX_NAP_MS)
        return None
    finally:
        declare(0)


def notify(row: Any, field: int, peer: Any, byte: bytes) -> None:
    """After a commit: wake the peer if it declared that it sleeps (``row[field]`` set). Where
    stores may be seen out of order, always: the wake-up's system calls order the memory."""
    fence()
    if not TSO or row[field]:
        peer.wake(byte)
