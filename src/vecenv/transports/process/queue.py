"""Per-env readiness for async batches: each env's step is posted and published on its own.

Four int64 counters per env live in the shared block, after the step mask::

    POSTED  the caller's count of steps sent to the env (it writes the action row first)
    DONE    the worker's count of steps it finished; DONE == POSTED: the env is ready
    STAMP   when the worker finished the env's last step (time.monotonic_ns), to order envs
    HELD    1: part of that step's result (an info entry, a schema new to the caller) comes
            with the worker's reply to its command, so the env is ready only once that is read

A worker that runs ``Op.QUEUE`` steps every env of its group whose POSTED moved, one at a time,
publishing each as it is done (its rows first, DONE last), and looks again before it finishes
the command: envs the caller posted while it was busy join its queue, so one slow env holds up
only itself. The caller posts a command only to a worker with none outstanding; an env it posts
to a busy worker is either taken by that worker's current command or, if the worker finished
before it saw it, sent again once the reply is read (:meth:`EnvCounters.pending`).

Only the caller writes POSTED, and only the worker of an env writes DONE, STAMP and HELD; an env
is posted again only after the caller returned it, so neither side ever races the other on one
env's rows. Stores are seen in program order (x86 TSO), so an env whose DONE moved has its rows
written; elsewhere async batches keep whole replies (:data:`~.control.TSO`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["EnvCounters"]

POSTED, DONE, STAMP, HELD = range(4)


class EnvCounters:
    """The per-env counters of ``num_envs`` envs over ``buffer`` at ``offset`` (both sides)."""

    def __init__(self, buffer: Any, offset: int, num_envs: int) -> None:
        self.table = np.frombuffer(buffer, np.int64, 4 * num_envs, offset).reshape(4, num_envs)
        self.posted, self.done, self.stamp, self.held = self.table

    @staticmethod
    def nbytes(num_envs: int) -> int:
        return 4 * 8 * num_envs

    # ------------------------------------------------------------ caller side
    def post(self, ids: np.ndarray) -> None:
        """The envs ``ids`` (distinct) have their actions in place: count one more step each."""
        self.posted[ids] += 1

    def published(self, waiting: np.ndarray, held: bool | None = False, start: int = 0,
                  stop: int | None = None) -> np.ndarray:
        """The envs flagged in ``waiting`` (among ``start:stop``) whose step is done, by
        finishing time: those ready now (``held`` False), those whose result is whole only with
        their worker's reply (True), or both (None)."""
        part = slice(start, stop)
        done = waiting[part] & (self.done[part] == self.posted[part])
        if held is not None:
            done &= (self.held[part] != 0) if held else (self.held[part] == 0)
        ids = np.flatnonzero(done) + start if start else np.flatnonzero(done)
        if ids.size > 1:
            ids = ids[np.argsort(self.stamp[ids], kind="stable")]
        return ids

    def count_published(self, waiting: np.ndarray) -> int:
        """How many envs flagged in ``waiting`` are ready now."""
        return int(np.count_nonzero(waiting & (self.done == self.posted) & (self.held == 0)))

    def pending(self, start: int, stop: int) -> np.ndarray:
        """The envs ``start:stop`` posted and not yet stepped (global ids)."""
        return np.flatnonzero(self.posted[start:stop] != self.done[start:stop]) + start

    def forget(self, start: int = 0, stop: int | None = None) -> None:
        """Drop whatever was posted to envs ``start:stop`` and not stepped (their worker is
        idle, ended or replaced), so that no later command steps it."""
        self.posted[start:stop] = self.done[start:stop]

    # ------------------------------------------------------------ worker side
    def publish(self, i: int, seq: int, held: bool, stamp: int) -> None:
        """Env ``i``'s step number ``seq`` is done (its rows written): DONE is stored last."""
        self.stamp[i] = stamp
        self.held[i] = held
        self.done[i] = seq
