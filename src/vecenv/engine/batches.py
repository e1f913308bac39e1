"""How the results of steps and resets return to the caller: the two :class:`Collect`
strategies, of which an :class:`~vecenv.engine.flight.InFlight` holds the one its
``batch_size`` asks for.

:class:`FullBatch` returns every env's results at once (``batch_size == num_envs``, gymnasium's
way); :class:`FirstReady` returns the first ``batch_size`` envs ready (EnvPool's way) while the
others go on stepping. Both wait through :meth:`InFlight.receive
<vecenv.engine.flight.InFlight.receive>`, which hands each reply's info entries to
:meth:`Collect.hold`.
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
        """The envs ``ids`` were just sent a step (or, ``reset``, a reset)."""

    def hold(self, envs: np.ndarray, entries: Any) -> None:
        """Hold the info ``entries`` of a reply for the envs ``envs`` until their batch is returned."""

    def collect(self, timeout: float | None, method: str, raw: bool = False) -> tuple:
        """Wait for the results and return them: ``(obs, rewards, terminations, truncations,
        infos)`` (``raw``: the info entries as they came instead of batched infos). Cut short,
        the flight says what it left (:meth:`~vecenv.engine.flight.InFlight.interrupted_collect`)."""

    def drop(self) -> None:
        """Drop every result held and not returned."""


class FullBatch:
    """Every env's results at once. Infos that came as column chunks stay chunks (``columns``)
    until the batch is built, so they batch a column at a time; the others wait in ``entries``."""

    step_states = frozenset({CallState.DEFAULT})

    def __init__(self, flight: InFlight) -> None:
        self.flight = flight
        self.entries: dict[int, InfoEntry] = {}
        self.columns: list[InfoColumns] = []

    def sent(self, ids: np.ndarray, reset: bool) -> None:
        pass

    def hold(self, envs: np.ndarray, entries: Any) -> None:
        if type(entries) is InfoColumns:
            self.columns.append(entries)
        else:
            for entry in entries:
                self.entries[entry.index] = entry

    def collect(self, timeout: float | None, method: str, raw: bool = False) -> tuple:
        flight = self.flight
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            while flight.in_flight:
                flight.receive(deadline, timeout, method)
            b, n, held, columns = flight.buffers, flight.num_envs, self.entries, self.columns
            infos: Any
            if raw:  # the parts as they came: each names its envs
                infos = [*columns, *held.values()]
            else:  # by column where the chunks allow, else entry by entry
                infos = columns_infos(columns, held, n) if columns else None
                if infos is None:
                    infos = batch_infos([held[i] for i in sorted(held)], n) if held else {}
            if columns:
                columns.clear()
            if held:
                held.clear()
            flight.lifecycle.fire(Event.RETURNED)
            if flight.autoreset_mode is AutoresetMode.DISABLED:
                flight.needs_reset = np.logical_or(b.terminations, b.truncations)
            return b.observations.read(flight.copy), b.rewards.copy(), b.terminations.copy(), b.truncations.copy(), infos
        except multiprocessing.TimeoutError:
            raise
        except BaseException as exc:
            flight.interrupted_collect(exc)
            raise

    def drop(self) -> None:
        self.columns.clear()
        self.entries.clear()


class FirstReady:
    """The first ``batch_size`` envs ready. An env is ``busy`` (the flight's) from its send until
    a batch returns it; finished envs queue in ``ready``; steps may be sent while others are in
    flight."""

    step_states = frozenset({CallState.DEFAULT, CallState.WAITING_STEP})

    def __init__(self, flight: InFlight) -> None:
        self.flight = flight
        self.entries: dict[int, InfoEntry] = {}
        self.ready: deque[int] = deque()

    def sent(self, ids: np.ndarray, reset: bool) -> None:
        if reset:  # every env starts a new episode
            self.entries.clear()
            self.ready.clear()
            self.flight.restarted.clear()
        self.flight.busy[ids] = True

    def hold(self, envs: np.ndarray, entries: Any) -> None:
        for entry in entries:
            self.entries[entry.index] = entry
        self.ready.extend(envs.tolist())

    def collect(self, timeout: float | None, method: str, raw: bool = False) -> tuple:
        flight, ready, held = self.flight, self.ready, self.entries
        bs = flight.batch_size
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            while len(ready) < bs:
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
