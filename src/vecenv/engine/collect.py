"""How a step's or a reset's results return: the three :class:`Collect` strategies.

An :class:`~vecenv.engine.flight.InFlight` holds the strategy its ``batch_size`` and transport
ask for:

- :class:`FullBatch`: every env's results at once (``batch_size == num_envs``, gymnasium's way).
- :class:`FirstReady`: the first ``batch_size`` envs ready (EnvPool's way) while the others go on
  stepping; an env is ready when its worker's reply is (per-worker readiness).
- :class:`EachReady`: the same, where the transport publishes each env as soon as its own step is
  done and takes envs sent while their worker is busy
  (:mod:`vecenv.transports.process.queue`): a slow env holds up only itself.

Each waits through :meth:`InFlight.receive <vecenv.engine.flight.InFlight.receive>`, which keeps
the replies in ``InFlight.replies`` as they came, and makes batches of those.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from gymnasium.vector import AutoresetMode

from vecenv.engine.state import CallState, Event
from vecenv.errors import NoAsyncCallError
from vecenv.infos import InfoColumns, InfoEntry, batch_columns, batch_infos, columns_infos
from vecenv.worker.commands import STEP_QUEUED, Command, StepQueued

if TYPE_CHECKING:
    from vecenv.engine.flight import InFlight

__all__ = ["Collect", "EachReady", "FirstReady", "FullBatch"]


class Collect(Protocol):
    """A way to return the results of the pending step or reset."""

    #: the call states in which a step may be sent
    step_states: frozenset[CallState]

    def sent(self, ids: np.ndarray, reset: bool) -> None:
        """The envs ``ids`` are being sent a step (or, ``reset``, a reset): async batches mark them busy."""

    def collect(self, timeout: float | None, method: str, raw: bool = False) -> tuple:
        """Wait for the results and return them: ``(obs, rewards, terminations, truncations,
        infos)`` (``raw``: the info entries as they came instead of batched infos). Cut short,
        the flight says what it left (:meth:`~vecenv.engine.flight.InFlight.interrupted_collect`)."""

    def drop(self) -> None:
        """Drop every result held and not returned."""


class FullBatch:
    """Every env's results at once. Infos that came as column chunks stay chunks until the
    batch is built, so they batch a column at a time."""

    step_states = frozenset({CallState.DEFAULT})

    def __init__(self, flight: InFlight) -> None:
        self.flight = flight

    def sent(self, ids: np.ndarray, reset: bool) -> None:
        pass

    def collect(self, timeout: float | None, method: str, raw: bool = False) -> tuple:
        flight = self.flight
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            while flight.in_flight:
                flight.receive(deadline, timeout, method, True)
            b, n = flight.buffers, flight.num_envs
            held: dict[int, InfoEntry] = {}
            columns: list[InfoColumns] = []
            for _, entries in flight.replies:
                if type(entries) is InfoColumns:
                    columns.append(entries)
                else:
                    for entry in entries:
                        held[entry.index] = entry
            flight.replies.clear()
            infos: Any
            if raw:  # the parts as they came: each names its envs
                infos = [*columns, *held.values()]
            else:  # by column where the chunks allow, else entry by entry
                infos = columns_infos(columns, held, n) if columns else None
                if infos is None:
                    infos = batch_infos([held[i] for i in sorted(held)], n) if held else {}
            flight.lifecycle.fire(Event.RETURNED)
            if flight.autoreset_mode is AutoresetMode.DISABLED:
                flight.needs_reset = np.logical_or(b.terminations, b.truncations)
            observations = b.slots[0].read(flight.copy) if b.lender is None else b.lender.lend()
            return observations, b.rewards.copy(), b.terminations.copy(), b.truncations.copy(), infos
        except BaseException as exc:
            flight.interrupted_collect(exc)
            raise

    def drop(self) -> None:
        pass


class FirstReady:
    """The first ``batch_size`` envs ready. An env is ``busy`` (the flight's) from its send until
    a batch returns it; finished envs queue in ``ready``, their info entries wait in ``entries``;
    steps may be sent while others are in flight."""

    step_states = frozenset({CallState.DEFAULT, CallState.WAITING_STEP})

    def __init__(self, flight: InFlight) -> None:
        self.flight = flight
        self.entries: dict[int, InfoEntry] = {}
        self.ready: deque[int] = deque()

    def sent(self, ids: np.ndarray, reset: bool) -> None:
        if reset:  # sent with nothing in flight: ``ids`` (all, or a reset_mask's) start new episodes
            self.drop()
            self.flight.replies.clear()
            for i in ids.tolist():
                self.flight.restarted.pop(i, None)
        self.flight.busy[ids] = True

    def collect(self, timeout: float | None, method: str, raw: bool = False) -> tuple:
        flight, ready, held = self.flight, self.ready, self.entries
        bs = flight.batch_size
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                self.absorb()
                for envs, entries in flight.replies:  # in the order they came
                    for entry in entries:
                        held[entry.index] = entry
                    ready.extend(envs.tolist())
                flight.replies.clear()
                if len(ready) >= bs:
                    break
                if not flight.in_flight:  # fewer than bs sent and not returned: return them all
                    if not ready:
                        raise NoAsyncCallError(f"Calling `{method}` with no envs in flight.", method)
                    bs = len(ready)
                    break
                flight.receive(deadline, timeout, method, wanted=self.wanted(bs - len(ready)))
            b, ids = flight.buffers, [ready.popleft() for _ in range(bs)]
            rows = np.array(ids, dtype=np.int64)
            infos = self.batch(ids, rows)
            infos["env_id"] = rows
            infos["_env_id"] = np.ones(bs, dtype=np.bool_)
            flight.busy[rows] = False
            if flight.autoreset_mode is AutoresetMode.DISABLED:
                flight.needs_reset[rows] = b.terminations[rows] | b.truncations[rows]
            self.settle(deadline, timeout, method)
            # the rest of a reset, and of the steps sent, arrives through recv()
            flight.lifecycle.fire(Event.BATCH_RETURNED if flight.in_flight or ready else Event.RETURNED)
            return b.observations.read_rows(rows), b.rewards[rows], b.terminations[rows], b.truncations[rows], infos
        except BaseException as exc:
            flight.interrupted_collect(exc)
            raise

    def batch(self, ids: list[int], rows: np.ndarray) -> dict[str, Any]:
        """The infos of the envs ``ids`` (``rows``), in that order, from their held entries."""
        held = self.entries
        if not held:
            return {}
        at = {i: r for r, i in enumerate(ids)}
        return batch_infos([held.pop(i) for i in ids if i in held], len(ids), at)

    def settle(self, deadline: float | None, timeout: float | None, method: str) -> None:
        """After a batch: what is left of the call (nothing here: every command in flight holds
        an env not yet returned)."""

    def absorb(self) -> None:
        """Move what is ready but not in a reply yet into ``flight.replies`` (nothing here:
        an env is ready with its worker's reply)."""

    def wanted(self, count: int) -> Callable[[], int] | None:
        """What ends a wait besides a reply: how many of ``count`` envs are still to be
        published (nothing here)."""
        return None

    def drop(self) -> None:
        self.entries.clear()
        self.ready.clear()
        self.flight.busy.fill(False)


class EachReady(FirstReady):
    """:class:`FirstReady` at the grain of one env, over a transport that publishes each env as
    its step is done (:mod:`vecenv.transports.process.queue`). An env is ``waiting`` from its
    send until it is taken out of the counters (into ``InFlight.replies``); a worker gets a
    command only when it has none outstanding, and the envs posted to it meanwhile join its queue.
    """

    def __init__(self, flight: InFlight) -> None:
        super().__init__(flight)
        transport: Any = flight.transport
        self.counters = transport.counters
        self.infos_at: Callable[[np.ndarray, list[int]], tuple[Any, list[InfoEntry]]] = transport.infos_at
        self.waiting = np.zeros(flight.num_envs, dtype=np.bool_)
        #: taken out of the counters: the env's info is in its rows, read when a batch returns it
        self.in_rows = np.zeros(flight.num_envs, dtype=np.bool_)

    def post(self, ids: np.ndarray) -> list[tuple[int, Command, np.ndarray]]:
        """Count a step for each env of ``ids`` (actions in place); the commands to send: one to
        each of their workers that has none outstanding."""
        in_flight, worker_of = self.flight.in_flight, self.flight.partition.worker_of
        self.counters.post(ids)
        self.waiting[ids] = True
        idle: dict[int, list[int]] = {}
        for i in ids.tolist():
            w = worker_of[i]
            if w not in in_flight:
                idle.setdefault(w, []).append(i)
        return [(w, STEP_QUEUED, np.array(envs, dtype=np.int64)) for w, envs in idle.items()]

    def absorb(self) -> None:
        ids = self.counters.published(self.waiting)
        if ids.size:
            self.take(ids, [])

    def take(self, ids: np.ndarray, late: Any) -> None:
        """Take the envs ``ids`` (done, in finishing order) out of the counters into the
        replies, with ``late`` (their worker's reply's entries); their rows are read when a
        batch returns them (:meth:`batch`)."""
        flight = self.flight
        self.waiting[ids] = False
        self.in_rows[ids] = True
        if flight.policy.step_timeout is not None:
            now, worker_of = time.monotonic(), flight.partition.worker_of
            for w in {worker_of[i] for i in ids.tolist()}:
                if w in flight.sent_at:
                    flight.sent_at[w] = now  # the worker is making progress
        flight.replies.append((ids, late))

    def batch(self, ids: list[int], rows: np.ndarray) -> dict[str, Any]:
        """The infos of the envs ``ids``: those in their rows read at once (as one column chunk
        when they share one flat schema, the usual case), with the entries held for the others."""
        in_rows = self.in_rows[rows]
        if not in_rows.any():
            return super().batch(ids, rows)
        self.in_rows[rows] = False
        chunk, entries = self.infos_at(rows, np.flatnonzero(in_rows).tolist())
        held = self.entries
        if chunk is not None and not held:
            infos = batch_columns([chunk], len(ids)) if chunk.keys else {}
            if infos is not None:
                return infos
        if chunk is not None:  # positions back to envs: with the held entries, entry by entry
            entries = [InfoEntry(ids[p], info) for p, info in zip(chunk.envs.tolist(), chunk.info_dicts(), strict=True)]
        for entry in entries:
            held[entry.index] = entry
        return super().batch(ids, rows)

    def fetched(self, w: int, reply: Any) -> None:
        """Worker ``w`` finished its command (``reply``): every env it stepped is taken, and
        those posted after its last look go to it again."""
        start, stop = self.flight.partition[w]
        done = self.counters.published(self.waiting, None, start, stop)
        if done.size or reply.entries:
            self.take(done, reply.entries)
        pending = self.counters.pending(start, stop)
        if pending.size:
            self.flight.send([(w, STEP_QUEUED, pending)])

    def lost(self, w: int) -> np.ndarray:
        """Worker ``w`` died or hung: its envs not taken yet, which its restart truncates."""
        start, stop = self.flight.partition[w]
        ids = np.flatnonzero(self.waiting[start:stop]) + start
        self.waiting[ids] = False
        self.counters.forget(start, stop)
        return ids

    def settle(self, deadline: float | None, timeout: float | None, method: str) -> None:
        """Every env returned: read the replies of the commands still in flight (each worker is
        finishing one whose envs were all taken as they were published), so the call ends."""
        flight = self.flight
        while (flight.in_flight and not self.ready and not self.waiting.any() and not flight.replies
               and all(type(flight.commands.get(w)) is StepQueued for w in flight.in_flight)):
            flight.receive(deadline, timeout, method, True)

    def wanted(self, count: int) -> Callable[[], int] | None:
        counters, waiting = self.counters, self.waiting
        return lambda: count - counters.count_published(waiting)

    def drop(self) -> None:
        super().drop()
        self.waiting.fill(False)
        self.in_rows.fill(False)
        self.counters.forget()
