"""Restarts under ``on_error="restart"``: how often one env or worker may be rebuilt, and how a
rebuilt env's interrupted episode is reported (one rule for the env group and the engine)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Hashable
from typing import Any

from vecenv.errors import VecEnvError, add_detail

__all__ = ["RestartBudget", "restart_report", "truncate_rows"]


class RestartBudget:
    """At most ``max_restarts`` restarts per key within any ``window`` seconds, so that a crash
    loop raises instead of rebuilding the same env forever."""

    def __init__(self, max_restarts: int = 3, window: float = 60.0) -> None:
        self.max_restarts = max_restarts
        self.window = window
        self._times: dict[Hashable, deque[float]] = {}

    def spend(self, key: Hashable, what: str, error: VecEnvError) -> bool:
        """Record a restart of ``key`` and return True, or, when the budget is spent, add a note
        naming ``what`` to ``error``'s message and return False."""
        now = time.monotonic()
        recent = self._times.setdefault(key, deque())
        while recent and now - recent[0] > self.window:
            recent.popleft()
        if len(recent) >= self.max_restarts:
            add_detail(error, f"({what} was already restarted {len(recent)} times in "
                              f"{self.window:g} s, the most on_error='restart' allows)")
            return False
        recent.append(now)
        return True


def restart_report(error: VecEnvError | str) -> dict:
    """The info entries of an env whose episode a restart cut short."""
    reason = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return {"restarted": True, "restart_reason": reason}


def truncate_rows(buffers: Any, rows: Any) -> None:
    """Mark ``rows`` of ``buffers`` as truncated with no reward: the episode ended by a restart,
    not by the env (the observation row keeps the last one the env gave)."""
    buffers.rewards[rows] = 0.0
    buffers.terminations[rows] = False
    buffers.truncations[rows] = True
