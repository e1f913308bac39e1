"""What the thread backend's threads share: the envs of one step, dealt in blocks that a thread
takes from its own end first and from the others' when it is done (:class:`Share`, a thread's
part run by :func:`run_share`), the steps
handed to a helper without a lock (:class:`Mailbox`), the replies
of a shared step joined into one (:func:`joined`), a counter to spin on (:class:`Signal`) and the
bounded spinning wait (:func:`spin_until`), and a lock section that an interrupt in the main
thread cannot leave held (:func:`locked`)."""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any, TypeVar

from vecenv.infos import NO_REPLY, StepReply
from vecenv.worker.commands import GivenStep, Reset

T = TypeVar("T")

__all__ = ["SILENT", "Mailbox", "Share", "Signal", "joined", "locked", "part_of", "run_share", "spin_until"]


class Share:
    """The envs of one group step not yet taken: one queue per thread, dealt in contiguous
    blocks. A thread takes its own block first (the same envs on every step, so each env's
    objects stay with one thread), then takes from the others' tails."""

    __slots__ = ("queues", "size", "_blocks")

    def __init__(self, threads: int, size: int) -> None:
        self.queues: list[deque[int]] = [deque() for _ in range(threads)]
        self.size = size  # envs in the group
        self._blocks = self._split(range(size))  # every env's block, dealt on each whole step

    def _split(self, ids: Sequence[int]) -> list[tuple[deque[int], Sequence[int]]]:
        n, t = len(ids), len(self.queues)
        return [(q, ids[k * n // t:(k + 1) * n // t]) for k, q in enumerate(self.queues)]

    def deal(self, ids: Sequence[int] | None) -> None:
        """Queue the envs ``ids`` (local indices; every env when None) in contiguous blocks."""
        for q, block in self._blocks if ids is None else self._split(ids):
            q.extend(block)

    def __bool__(self) -> bool:
        return any(self.queues)

    def clear(self) -> None:
        for q in self.queues:
            q.clear()

    def taken_by(self, slot: int) -> Iterator[int]:
        """The envs thread ``slot`` steps, each taken by one atomic deque operation (another
        thread may take the last one between looking and taking: then that queue is done)."""
        queues = self.queues
        count = len(queues)
        for k in range(count):
            q = queues[(slot + k) % count]
            take = q.pop if k else q.popleft  # its own block from the front, others' from the back
            while q:
                try:
                    j = take()
                except IndexError:
                    break
                yield j


def run_share(command: Any, group: Any, share: Share, slot: int) -> Any:
    """Thread ``slot``'s part of a step or reset (``command``) of ``group`` shared env by env:
    the envs it takes from ``share``, until none is left. An env's error is raised once the
    envs left are stepped all the same, as in a group of their own (the first error is the one
    reported)."""
    # the group iterates its envs once: a generator that takes them from the share does
    if type(command) is Reset:
        run = partial(group.reset, command.seeds, command.options)
    elif type(command) is GivenStep:
        run = partial(group.step, given=command.given)
    else:  # a Step: which envs is what the share was dealt
        run = group.step
    try:
        return run(share.taken_by(slot))
    except Exception as exc:
        error = exc
    while share:
        try:
            run(share.taken_by(slot))
        except Exception:
            pass
    raise error


#: a thread's part of a shared step that says nothing (everything is in the buffers, or the
#: caller took the job back before a helper started it): made once, since a part made anew on
#: every step would be made by one thread and freed by the other
SILENT: tuple[bool, Any] = (True, NO_REPLY)


def part_of(result: Any) -> tuple[bool, Any]:
    """A thread's part of a shared step that returned ``result``."""
    return SILENT if result is NO_REPLY else (True, result)


class Mailbox:
    """The shared steps handed to one helper thread, by group, taken without a lock.

    Your thread hands a step out (:meth:`hand`); the helper takes the oldest (:meth:`take`),
    marking it :attr:`current` *before* it leaves the mailbox, and posts its part (:meth:`post`)
    before clearing :attr:`current`. Deque operations are atomic, so a job either goes to the
    helper or is taken back by your thread (:meth:`part`), never both.
    """

    __slots__ = ("jobs", "parts", "current")

    def __init__(self) -> None:
        self.jobs: deque[int] = deque()
        self.parts: dict[int, tuple[bool, Any]] = {}  # the helper's part of each step it took
        self.current = -1  # the group whose step the helper runs now (-1: none)

    def hand(self, w: int) -> None:
        self.jobs.append(w)

    def take(self) -> int:
        """The helper's side: the oldest job's group, now current (-1: none, or taken back)."""
        jobs = self.jobs
        try:
            w = jobs[0]
            self.current = w
            jobs.remove(w)
        except (IndexError, ValueError):
            self.current = -1
            return -1
        return w

    def post(self, w: int, reply: tuple[bool, Any]) -> None:
        """The helper's side: its part of group ``w``'s step, which is no longer current."""
        self.parts[w] = reply
        self.current = -1

    def part(self, w: int) -> tuple[bool, Any] | None:
        """Your thread's side, once no env of group ``w``'s step is left to take: the helper's
        part of it, out of the mailbox; :data:`SILENT` when the helper never started it (the job
        is taken back); None while the helper runs it."""
        part = self.parts.pop(w, None)
        if part is not None:
            return part
        if w in self.jobs:  # looked at first: a remove that fails raises, which is slow
            try:
                self.jobs.remove(w)
                return SILENT
            except ValueError:
                pass
        # the helper took it (marked current before), or an interruption left it unhanded; a
        # part posted meanwhile is posted before current is cleared
        if self.current == w:
            return None
        return self.parts.pop(w, SILENT)

    def clear(self) -> None:
        self.jobs.clear()


class Signal:
    """A counter that one thread bumps and others spin on. Its own object, with values among the
    interpreter's shared small ints: on a free-threaded Python a reader that spins on it touches
    no reference count that the writer's other work uses (reading an attribute of an object that
    both threads use would count references to that object on every look)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def bump(self) -> None:
        self.value = (self.value + 1) & 0xFF


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
    true. Stops early (False) when this thread is not getting its core (:data:`MIN_RUNNING`),
    counted from the first check on: a wait that ends sooner reads no thread clock (a system
    call), as most of the waits of a step do."""
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
                if ran < 0:
                    since, ran = now, time.thread_time()
                elif time.thread_time() - ran < (now - since) * MIN_RUNNING:
                    return False
            check = now + CHECK_S
    return True


def locked(lock: Any, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` holding ``lock`` (a ``threading.RLock``), released wherever an exception
    that a signal handler raises lands, as it can in the main thread: a ``with`` block is not
    enough, since the handler can run as ``__enter__`` returns, before the block that releases
    the lock begins (CPython 3.14 checks for signals right after the call). So the acquire is
    inside the ``try``, and two nested ``finally`` clauses release what this thread holds."""
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


def joined(parts: list[tuple[bool, Any]]) -> tuple[bool, Any]:
    """One reply from every thread's part of a shared step: its first error, else the entries of
    the parts that have some (a part with nothing to say is ``(True, NO_REPLY)``)."""
    for part in parts:  # most steps: no thread has anything to say
        if part is not SILENT:
            break
    else:
        return SILENT
    said = [part for part in parts if not part[0] or part[1] is not NO_REPLY]
    if len(said) < 2:
        return said[0] if said else (True, NO_REPLY)
    for ok, value in said:
        if not ok:
            return False, value
    return True, StepReply([entry for _, part in said for entry in part.entries])
