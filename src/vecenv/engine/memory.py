"""``max_worker_memory``: a worker process whose resident memory passed the limit is replaced
between steps, the way a dead one is (:meth:`.recovery.Recovery.restart`), its envs' episodes
ended as truncations and reported in ``infos["recycled"]``."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from vecenv.policy import recycle_report
from vecenv.system import resident_bytes
from vecenv.worker.commands import Close, Configure, RecyclingState
from vecenv.worker.group import warn_close_failures

if TYPE_CHECKING:
    from vecenv.engine.flight import InFlight
    from vecenv.engine.partition import Partition
    from vecenv.engine.recovery import Recovery
    from vecenv.engine.transport import Transport
    from vecenv.policy import FailurePolicy

__all__ = ["NO_GROWTH_STEPS", "PERIOD_S", "MemoryLimit"]

#: the workers' memory is read at most this often (seconds): one clock read per step otherwise
PERIOD_S = 0.1
#: the longest gap, in steps, between two readings of a worker not seen to grow
NO_GROWTH_STEPS = 8


class MemoryLimit:
    """Replaces, before a step is sent, each idle worker of ``flight`` (through ``recovery``)
    whose resident memory passed ``policy.max_worker_memory`` bytes, read from ``/proc/<pid>/statm``: every :data:`PERIOD_S`, and sooner
    by steps. A new worker is read again after one step, then after gaps that double until it is
    seen to grow; one that grows is read again before it could, at the mean growth per step it
    showed since its first reading, use half of its room left. So a worker passes the limit by
    about what it grows at once (an episode's leak), however fast it leaks and however busy the
    machine; between readings a step costs a counter and a clock read."""

    def __init__(self, flight: InFlight, recovery: Recovery, transport: Transport, partition: Partition,
                 policy: FailurePolicy) -> None:
        self.flight, self.recovery, self.transport, self.partition = flight, recovery, transport, partition
        self.policy, self.limit = policy, int(policy.max_worker_memory or 0)  # parsed to bytes by the policy
        self.steps = 0  # steps sent
        self.next_step = 0  # the step at which the next reading is due, unless ...
        self.due = 0.0  # ... this time comes first
        self.first: dict[int, tuple[int, int]] = {}  # worker -> (resident bytes, step) at its first reading

    def between_steps(self) -> None:
        self.steps += 1
        if self.steps < self.next_step and time.monotonic() < self.due:
            return
        steps, wait = self.steps, 1 << 30
        flight, partition = self.flight, self.partition
        for w in range(len(partition)):
            start, stop = partition[w]
            if w in flight.in_flight or w in flight.deferred or flight.batches.holds(start, stop):
                wait = 1  # async batches: only a worker with nothing to return; this one next time
                continue
            pid = self.transport.worker_pid(w)
            rss = None if pid is None else resident_bytes(pid)
            if rss is None:
                continue
            if rss > self.limit:
                self.replace(w, rss)
                self.first.pop(w, None)
                wait = 1  # the new worker is read at the next step
                continue
            first, since = self.first.setdefault(w, (rss, steps))
            if rss <= first:  # no growth seen yet: read again after as many steps again (at most
                # NO_GROWTH_STEPS), counting growth from the least seen (a forked worker may first
                # give back memory it inherited)
                self.first[w] = (rss, since if rss == first else steps)
                wait = min(wait, max(1, min(steps - since, NO_GROWTH_STEPS)))
            else:
                wait = min(wait, int((self.limit - rss) / 2 / ((rss - first) / (steps - since))))
        self.next_step = steps + max(1, wait)
        self.due = time.monotonic() + PERIOD_S

    def replace(self, w: int, rss: int) -> None:
        """Close worker ``w``'s envs, start a new worker for them (its envs seeded by
        :func:`vecenv.policy.recycled_seed`) and end their episodes at their next step."""
        recovery = self.recovery
        seeds, replacements = recovery.run_now(w, RecyclingState())
        warn_close_failures(recovery.run_now(w, Close()))
        report = recycle_report(f"worker {w}'s resident memory ({rss / 1e6:.0f} MB) passed "
                                f"max_worker_memory ({self.limit / 1e6:.0f} MB)")
        recovery.restart(w, np.empty(0, np.int64), report, configure=Configure(self.policy, seeds, replacements + 1))
