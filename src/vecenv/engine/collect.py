"""How a step's or a reset's results return: the three :class:`Collect` strategies.

An :class:`~vecenv.engine.flight.InFlight` holds the strategy its ``batch_size`` and transport
ask for, made once the buffers are allocated and handed what it needs:

- :class:`FullBatch`: every env's results at once (``batch_size == num_envs``, gymnasium's way).
- :class:`FirstReady`: the first ``batch_size`` envs ready (EnvPool's way) while the others go on
  stepping; an env is ready when its worker's reply is (per-worker readiness).
- :class:`EachReady`: the same, where the transport publishes each env as soon as its own step is
  done and takes envs sent while their worker is busy
  (:mod:`vecenv.transports.process.queue`): a slow env holds up only itself.

Each waits through :meth:`InFlight.receive <vecenv.engine.flight.InFlight.receive>`, which keeps
the replies in ``InFlight.replies`` as they came, and makes batches of those. A strategy owns
what is known of each env between its send and its return: which envs ended under DISABLED
autoreset (``needs_reset``), and for async batches which are ``busy`` and which have
``arrived`` (results in, not returned yet).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from vecenv.engine.checks import refuse_ended
from vecenv.engine.partition import Partition
from vecenv.engine.state import CallLifecycle, CallState, Event
from vecenv.errors import NoAsyncCallError
from vecenv.infos import InfoColumns, InfoEntry, batch_columns, batch_infos, columns_infos
from vecenv.spaces import StepBuffers
from vecenv.worker.commands import STEP_QUEUED, Command

if TYPE_CHECKING:
    from vecenv.engine.flight import InFlight

__all__ = ["Collect", "EachReady", "FirstReady", "FullBatch"]


class Collect:
    """A way to return the results of the pending step or reset of ``flight``'s envs, whose
    rows are in ``buffers``; ``lifecycle`` is the call state its returns move. Under DISABLED
    autoreset (``disabled``) an env whose episode ended is refused a step until it is reset."""

    #: the call states in which a step may be sent
    step_states: frozenset[CallState]

    def __init__(self, flight: InFlight, lifecycle: CallLifecycle, buffers: StepBuffers, disabled: bool) -> None:
        self.flight, self.lifecycle, self.buffers, self.disabled = flight, lifecycle, buffers, disabled
        self.num_envs = buffers.n
        #: DISABLED autoreset: the envs whose last result ended their episode, not reset since
        self.needs_reset = np.zeros(self.num_envs, dtype=np.bool_)

    def refuse(self, ids: np.ndarray | None) -> None:
        """Refuse a step for the envs ``ids`` (None: all) that cannot take one now."""
        if self.disabled:
            ended = self.needs_reset if ids is None else self.needs_reset[ids]
            if ended.any():
                refuse_ended(np.flatnonzero(ended) if ids is None else ids[ended])

    def sent(self, ids: np.ndarray, reset: bool) -> None:
        """The envs ``ids`` are being sent a step (or, ``reset``, a reset)."""
        if reset:
            self.needs_reset[ids] = False

    def holds(self, start: int, stop: int) -> bool:
        """Whether an env of ``start .. stop`` was sent and not returned yet, between calls."""
        return False

    def collect(self, timeout: float | None, method: str, raw: bool = False) -> tuple:
        """Wait for the results and return them: ``(obs, rewards, terminations, truncations,
        infos)`` (``raw``: the info entries as they came instead of batched infos). Cut short,
        the flight says what it left (:meth:`~vecenv.engine.flight.InFlight.interrupted_collect`)."""
        raise NotImplementedError

    def drop(self) -> None:
        """Drop every result held and not returned."""


class FullBatch(Collect):
    """Every env's results at once (``copy``: observations copied out, or lent where the buffers
    lend them). Infos that came as column chunks stay chunks until the batch is built, so they
    batch a column at a time."""

    step_states = frozenset({CallState.DEFAULT})

    def __init__(self, flight: InFlight, lifecycle: CallLifecycle, buffers: StepBuffers, disabled: bool,
                 copy: bool) -> None:
        super().__init__(flight, lifecycle, buffers, disabled)
        self.copy = copy

    def collect(self, timeout: float | None, method: str, raw: bool = False) -> tuple:
        flight = self.flight
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            while flight.in_flight:
                flight.receive(deadline, timeout, method, True)
            b, n = self.buffers, self.num_envs
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
            self.lifecycle.fire(Event.RETURNED)
            if self.disabled:
                self.needs_reset = np.logical_or(b.terminations, b.truncations)
            observations = b.slots[0].read(self.copy) if b.lender is None else b.lender.lend()
            return observations, b.rewards.copy(), b.terminations.copy(), b.truncations.copy(), infos
        except BaseException as exc:
            flight.interrupted_collect(exc)
            raise



class FirstReady(Collect):
    """The first ``batch_size`` envs ready. An env is ``busy`` from its send until a batch
    returns it; envs whose results arrived queue in ``arrived`` until a batch returns them, their
    info entries wait in ``entries``; steps may be sent while others are in flight."""

    step_states = frozenset({CallState.DEFAULT, CallState.WAITING_STEP})

    def __init__(self, flight: InFlight, lifecycle: CallLifecycle, buffers: StepBuffers, disabled: bool,
                 batch_size: int) -> None:
        super().__init__(flight, lifecycle, buffers, disabled)
        self.batch_size = batch_size
        self.busy = np.zeros(self.num_envs, dtype=np.bool_)
        self.entries: dict[int, InfoEntry] = {}
        self.arrived: deque[int] = deque()

    def refuse(self, ids: np.ndarray | None) -> None:
        if ids is not None and self.busy[ids].any():
            raise ValueError(
                f"send(actions, env_ids): envs {ids[self.busy[ids]].tolist()} are still stepping or waiting to be "
                "received; send actions only to envs returned by recv()"
            )
        super().refuse(ids)

    def sent(self, ids: np.ndarray, reset: bool) -> None:
        if reset:  # sent with nothing in flight: ``ids`` (all, or a reset_mask's) start new episodes
            self.drop()
        super().sent(ids, reset)
        self.busy[ids] = True

    def holds(self, start: int, stop: int) -> bool:
        return bool(self.busy[start:stop].any())

    def collect(self, timeout: float | None, method: str, raw: bool = False) -> tuple:
        flight, arrived, held = self.flight, self.arrived, self.entries
        bs = self.batch_size
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                self.absorb()
                for envs, entries in flight.replies:  # in the order they came
                    for entry in entries:
                        held[entry.index] = entry
                    arrived.extend(envs.tolist())
                flight.replies.clear()
                if len(arrived) >= bs:
                    break
                if not flight.in_flight:  # fewer than bs sent and not returned: return them all
                    if not arrived:
                        raise NoAsyncCallError(f"Calling `{method}` with no envs in flight.", method)
                    bs = len(arrived)
                    break
                flight.receive(deadline, timeout, method, wanted=self.wanted(bs - len(arrived)))
            b, ids = self.buffers, [arrived.popleft() for _ in range(bs)]
            rows = np.array(ids, dtype=np.int64)
            infos = self.batch(ids, rows)
            infos["env_id"] = rows
            infos["_env_id"] = np.ones(bs, dtype=np.bool_)
            self.busy[rows] = False
            if self.disabled:
                self.needs_reset[rows] = b.terminations[rows] | b.truncations[rows]
            self.settle(deadline, timeout, method)
            # the rest of a reset, and of the steps sent, arrives through recv()
            self.lifecycle.fire(Event.BATCH_RETURNED if flight.in_flight or arrived else Event.RETURNED)
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
        """Move the envs whose results are in but not in a reply yet into ``flight.replies``
        (nothing here: an env's results come with its worker's reply)."""

    def wanted(self, count: int) -> Callable[[], int] | None:
        """What ends a wait besides a reply: how many of ``count`` envs are still to be
        published (nothing here)."""
        return None

    def drop(self) -> None:
        self.entries.clear()
        self.arrived.clear()
        self.busy.fill(False)


class EachReady(FirstReady):
    """:class:`FirstReady` at the grain of one env, over a transport that publishes each env as
    its step is done (``transport``'s counters, :mod:`vecenv.transports.process.queue`). An env
    is ``waiting`` from its send until it is taken out of the counters (into ``InFlight.replies``);
    a worker (of ``partition``) gets a command only when it has none outstanding, and the envs
    posted to it meanwhile join its queue. Under ``step_timeout`` an env taken says its worker
    is making progress.
    """

    def __init__(self, flight: InFlight, lifecycle: CallLifecycle, buffers: StepBuffers, disabled: bool,
                 batch_size: int, transport: Any, partition: Partition, step_timeout: float | None) -> None:
        super().__init__(flight, lifecycle, buffers, disabled, batch_size)
        self.partition, self.timed = partition, step_timeout is not None
        self.counters = transport.counters
        self.infos_at: Callable[[np.ndarray, list[int]], tuple[Any, list[InfoEntry]]] = transport.infos_at
        self.waiting = np.zeros(self.num_envs, dtype=np.bool_)
        #: taken out of the counters: the env's info is in its rows, read when a batch returns it
        self.in_rows = np.zeros(self.num_envs, dtype=np.bool_)

    def post(self, ids: np.ndarray, in_flight: dict[int, np.ndarray]) -> list[tuple[int, Command, np.ndarray]]:
        """Count a step for each env of ``ids`` (actions in place); the commands to send: one to
        each of their workers that has none outstanding (none ``in_flight``)."""
        worker_of = self.partition.worker_of
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
        if self.timed:
            now, worker_of, sent_at = time.monotonic(), self.partition.worker_of, flight.sent_at
            for w in {worker_of[i] for i in ids.tolist()}:
                if w in sent_at:
                    sent_at[w] = now  # the worker is making progress
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

    def fetched(self, w: int, reply: Any) -> list[tuple[int, Command, np.ndarray]]:
        """Worker ``w`` finished its command (``reply``): every env it stepped is taken; the
        command to send: the envs posted after its last look go to it again."""
        start, stop = self.partition[w]
        done = self.counters.published(self.waiting, None, start, stop)
        if done.size or reply.entries:
            self.take(done, reply.entries)
        pending = self.counters.pending(start, stop)
        return [(w, STEP_QUEUED, pending)] if pending.size else []

    def lost(self, w: int) -> np.ndarray:
        """Worker ``w`` died or hung: its envs not taken yet, which its restart truncates."""
        start, stop = self.partition[w]
        ids = np.flatnonzero(self.waiting[start:stop]) + start
        self.waiting[ids] = False
        self.counters.forget(start, stop)
        return ids

    def settle(self, deadline: float | None, timeout: float | None, method: str) -> None:
        """Every env returned (none busy): read the replies of the commands still in flight (each
        worker is finishing a step whose envs were all taken as they were published), so the call
        ends."""
        flight = self.flight
        while flight.in_flight and not flight.replies and not self.busy.any():
            flight.receive(deadline, timeout, method, True)

    def wanted(self, count: int) -> Callable[[], int] | None:
        counters, waiting = self.counters, self.waiting
        return lambda: count - counters.count_published(waiting)

    def drop(self) -> None:
        super().drop()
        self.waiting.fill(False)
        self.in_rows.fill(False)
        self.counters.forget()
