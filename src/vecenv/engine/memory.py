"""``max_worker_memory``: a worker process whose resident memory passed the limit is replaced
between steps, the way a dead one is (:meth:`.recovery.Recovery.restart`), its envs' episodes
ended as truncations and reported in ``infos["recycled"]``."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from vecenv.system import resident_bytes
from vecenv.worker.commands import Close, Configure, RecyclingState
from vecenv.worker.group import warn_close_failures
from vecenv.worker.restarts import recycle_report

if TYPE_CHECKING:
    from vecenv.engine.flight import InFlight

__all__ = ["PERIOD_S", "MemoryLimit"]

#: the workers' memory is read at most this often (seconds): one clock read per step otherwise
PERIOD_S = 0.1


class MemoryLimit:
    """Replaces, before a step is sent, each idle worker of ``flight`` whose resident memory
    passed ``limit`` bytes (read from ``/proc/<pid>/statm`` every :data:`PERIOD_S` at most)."""

    def __init__(self, flight: InFlight, limit: int) -> None:
        self.flight, self.limit = flight, limit
        self.due = 0.0

    def between_steps(self) -> None:
        now = time.monotonic()
        if now < self.due:
            return
        self.due = now + PERIOD_S
        flight = self.flight
        for w in range(len(flight.partition)):
            start, stop = flight.partition[w]
            if w in flight.in_flight or w in flight.deferred or flight.busy[start:stop].any():
                continue  # async batches: only a worker with nothing to return
            pid = flight.transport.worker_pid(w)
            rss = None if pid is None else resident_bytes(pid)
            if rss is not None and rss > self.limit:
                self.replace(w, rss)

    def replace(self, w: int, rss: int) -> None:
        """Close worker ``w``'s envs, start a new worker for them (its envs seeded by
        :func:`vecenv.policy.recycled_seed`) and end their episodes at their next step."""
        flight = self.flight
        seeds, replacements = flight.run_now(w, RecyclingState())
        warn_close_failures(flight.run_now(w, Close()))
        report = recycle_report(f"worker {w}'s resident memory ({rss / 1e6:.0f} MB) passed "
                                f"max_worker_memory ({self.limit / 1e6:.0f} MB)")
        plan = flight.recovery.restart(w, np.empty(0, np.int64), report,
                                       configure=Configure(flight.policy, seeds, replacements + 1))
        flight.restarted.update(plan.later)
