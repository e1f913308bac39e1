"""Which queued envs your thread may step itself while it waits for an async batch.

With async batches (``batch_size < num_envs``) ``recv`` returns as soon as ``batch_size`` envs
are done. Your thread is one of the threads that step: while it waits, it steps queued envs
instead of idling a core, and returns once its env is done. That costs its batch at most the
time of that one step, so it takes only an env whose last step was quick: known, and at most
``slack`` times the usual step (the median of every env's last step, looked at again after as
many steps as there are envs, so one slow env does not move it). An env not timed yet, or slow
(an outlier, a hung one), is left to the helpers, and the fast envs' batches come back without
waiting for it.

>>> pace = Pace(groups=3)
>>> pace.quick(0)  # never timed: left to the helpers
False
>>> pace.took[0] = 0.001; pace.quick(0)  # timed, but the usual step is not known yet
False
>>> pace.took[:] = [0.001, 0.002, 0.5]; pace.usual = 0.002
>>> pace.quick(0), pace.quick(1), pace.quick(2)
(True, True, False)
"""

from __future__ import annotations

import math
import time

__all__ = ["Pace"]


class Pace:
    """How long each group's last step took, and the usual step of all of them."""

    __slots__ = ("began", "slack", "stops", "took", "usual")

    def __init__(self, groups: int, slack: float = 2.0) -> None:
        self.began = [0.0] * groups
        self.took = [math.inf] * groups  # seconds; inf: never timed
        self.usual = math.inf  # inf: not known yet
        self.slack = slack
        self.stops = 0  # steps timed since ``usual`` was last looked at

    def start(self, w: int) -> None:
        """Group ``w``'s step was claimed by a thread now."""
        self.began[w] = time.perf_counter()

    def stop(self, w: int) -> None:
        """Group ``w``'s step is done."""
        took = self.took
        took[w] = time.perf_counter() - self.began[w]
        self.stops += 1
        if self.stops >= len(took):
            self.stops = 0
            known = sorted(t for t in took if t != math.inf)
            self.usual = known[len(known) // 2]

    def quick(self, w: int) -> bool:
        """Whether group ``w``'s step is known to be quick enough for your thread to take."""
        limit = self.slack * self.usual  # inf until the usual step is known
        return limit != math.inf and self.took[w] <= limit
