"""The restart budget of ``on_error="restart"``: how often one env or worker may be rebuilt."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Hashable

from vecenv.errors import VecEnvError

__all__ = ["RestartBudget"]


class RestartBudget:
    """At most ``max_restarts`` restarts per key within any ``window`` seconds.

    A crash loop would otherwise rebuild the same env forever; past the budget the error is
    raised instead, with a note saying why.
    """

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
            error.args = (
                f"{error.args[0]}\n({what} was already restarted {len(recent)} times in "
                f"{self.window:g} s, the most on_error='restart' allows)",
            )
            return False
        recent.append(now)
        return True
