"""Calls on the sub-envs: gymnasium's ``call``/``get_attr``/``set_attr``/``render`` and the
per-env forms the SB3 layer uses: one command per worker, sent through the flight like a step;
replies that arrived are kept across a timed-out wait (the call stays pending, as in gymnasium).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from vecenv.engine.flight import InFlight
from vecenv.engine.partition import Partition
from vecenv.engine.state import CallLifecycle, Event
from vecenv.worker.commands import Command

__all__ = ["Calls", "in_order"]


class Calls:
    """Sends calls through ``flight`` to the workers of ``partition`` and collects their replies,
    one list per worker; a call's return moves ``lifecycle``."""

    def __init__(self, flight: InFlight, partition: Partition, lifecycle: CallLifecycle) -> None:
        self.flight, self.partition, self.lifecycle = flight, partition, lifecycle
        self.replies: dict[int, Any] = {}  # the pending call's replies so far, per worker
        self.error: BaseException | None = None

    def send(self, command: Command) -> None:
        """Send ``command`` to every worker: a call on every env."""
        self.flight.send_call((w, command) for w in range(len(self.partition)))

    def send_at(self, ids: np.ndarray, command: Callable[[np.ndarray | None, np.ndarray], Command]) -> np.ndarray:
        """Send ``command(local ids, global ids)`` to the workers of the envs ``ids``; returns
        the order that sorts ``ids`` (replies come in env order)."""
        order = np.argsort(ids, kind="stable")
        self.flight.send_call((w, command(local, envs)) for w, local, envs in self.partition.by_worker(ids[order]))
        return order

    def collect(self, timeout: float | None, method: str) -> dict[int, Any]:
        """Every worker's reply to the pending call; the first error once all have replied."""
        flight = self.flight
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            while flight.in_flight:
                flight.receive(deadline, timeout, method, calls=self)
            replies, self.replies = self.replies, {}
            error, self.error = self.error, None
            self.lifecycle.fire(Event.RETURNED)
            if error is not None:
                raise error
            return replies
        except BaseException as exc:  # a timeout leaves the call pending (interrupted_collect)
            flight.interrupted_collect(exc)
            raise

    def failed(self, error: BaseException) -> None:
        """A worker failed the pending call with ``error``: the call fails with the first error,
        once every worker has replied."""
        self.error = self.error or error


def in_order(results: dict[int, Any], order: np.ndarray) -> list:
    """The per-worker ``results`` of a :meth:`Calls.send_at` as one list in the caller's order."""
    flat = [x for w in sorted(results) for x in (results[w] or [])]
    if not flat:
        return []
    out: list = [None] * len(order)
    for pos, value in zip(order, flat, strict=True):
        out[pos] = value
    return out
