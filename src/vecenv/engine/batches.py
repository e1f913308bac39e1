"""How the results of steps and resets return to the caller: the two :class:`Collect`
strategies, of which an :class:`~vecenv.engine.flight.InFlight` holds the one its
``batch_size`` asks for.

:class:`FullBatch` returns every env's results at once (``batch_size == num_envs``, gymnasium's
way); :class:`FirstReady` returns the first ``batch_size`` envs ready (EnvPool's way) while the
others go on stepping. Both wait through :meth:`InFlight.receive
<vecenv.engine.flight.InFlight.receive>`, which keeps the replies in ``InFlight.replies`` as
they came, and make batches of those.
"""

from __future__ import annotations

import multiprocessing
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from gymnasium.vector import AutoresetMode

from vecenv.engine.state import CallState, Event
from vecenv.errors import NoAsyncCallError
from vecenv.infos import InfoColumns, InfoEntry, batch_infos, columns_infos

if TYPE_CHECKING:
    from vecenv.engine.flight import InFlight

__all__ = ["Collect", "FirstReady", "FullBatch"]


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
        except multiprocessing.TimeoutError:
            raise
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
        if reset:  # every env starts a new episode
            self.entries.clear()
            self.ready.clear()
            self.flight.replies.clear()
            self.flight.restarted.clear()
        self.flight.busy[ids] = True

    def collect(self, timeout: float | None, method: str, raw: bool = False) -> tuple:
        flight, ready, held = self.flight, self.ready, self.entries
        bs = flight.batch_size
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                for envs, entries in flight.replies:  # in the order they came
                    for entry in entries:
                        held[entry.index] = entry
                    ready.extend(envs.tolist())
                flight.replies.clear()
                if len(ready) >= bs:
                    break
                if not flight.in_flight:
                    raise NoAsyncCallError(f"Calling `{method}` with no envs in flight.", method)
                flight.receive(deadline, timeout, method)
            b, ids = flight.buffers, [ready.popleft() for _ in range(bs)]
            rows = np.array(ids, dtype=np.int64)
            if held:
                at = {i: r for r, i in enumerate(ids)}
                infos = batch_infos([held.pop(i) for i in ids if i in held], bs, at)
            else:
                infos = {}
            infos["env_id"] = rows
            infos["_env_id"] = np.ones(bs, dtype=np.bool_)
            flight.busy[rows] = False
            if flight.autoreset_mode is AutoresetMode.DISABLED:
                flight.needs_reset[rows] = b.terminations[rows] | b.truncations[rows]
            # the rest of a reset, and of the steps sent, arrives through recv()
            flight.lifecycle.fire(Event.BATCH_RETURNED if flight.in_flight or ready else Event.RETURNED)
            return b.observations.read_rows(rows), b.rewards[rows], b.terminations[rows], b.truncations[rows], infos
        except multiprocessing.TimeoutError:
            raise
        except BaseException as exc:
            flight.interrupted_collect(exc)
            raise

    def drop(self) -> None:
        self.entries.clear()
        self.ready.clear()
        self.flight.busy.fill(False)
