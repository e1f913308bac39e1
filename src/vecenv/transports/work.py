"""The work a pool of threads shares: the envs of one step, dealt in blocks that a thread takes
from its own end first and from the others' when it is done, and the bounded spinning wait of a
thread that expects work in a moment."""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

__all__ = ["Share", "spin_until"]


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
        """The envs thread ``slot`` steps, each taken by one atomic deque operation."""
        queues = self.queues
        take = queues[slot].popleft
        try:
            while True:
                yield take()
        except IndexError:
            pass
        for k in range(1, len(queues)):
            steal = queues[(slot + k) % len(queues)].pop
            try:
                while True:
                    yield steal()
            except IndexError:
                pass


#: give the core to another runnable thread, if one waits
_yield: Callable[[], None] = getattr(os, "sched_yield", lambda: time.sleep(0))


#: the first seconds of a spinning wait look without yielding: the wait for another thread's
#: last env is usually this short, and a yield on a busy core gives away a whole time slice
KEEP_CORE_S = 20e-6


def spin_until(condition: Callable[[], Any], seconds: float) -> bool:
    """Look at ``condition`` for up to ``seconds`` (the first :data:`KEEP_CORE_S` of them on
    the core, then yielding it between looks); whether it came true."""
    clock = time.perf_counter
    start = clock()
    keep, end = start + min(KEEP_CORE_S, seconds), start + seconds
    while not condition():
        now = clock()
        if now >= end:
            return False
        if now >= keep:
            _yield()
    return True
