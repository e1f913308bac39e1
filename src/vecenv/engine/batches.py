"""The two collectors of a :class:`~vecenv.engine.flight.InFlight`: :class:`FullBatches` returns
every env's results at once (``batch_size == num_envs``), :class:`AsyncBatches` the first
``batch_size`` envs ready, EnvPool's way, while the others go on stepping."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from vecenv.engine.flight import InFlight
from vecenv.engine.partition import Partition
from vecenv.engine.state import CallState, Event
from vecenv.engine.transport import Transport
from vecenv.infos import InfoColumns, batch_infos, columns_infos
from vecenv.policy import FailurePolicy

__all__ = ["AsyncBatches", "FullBatches", "flight_for"]


class FullBatches(InFlight):
    """Every env's results at once. Infos that came as column chunks stay chunks
    (``columns``) until the batch is built, so they batch a column at a time."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.columns: list[InfoColumns] = []

    def keep(self, envs: np.ndarray, entries: Any) -> None:
        if type(entries) is InfoColumns:
            self.columns.append(entries)
        else:
            super().keep(envs, entries)

    def collect(self, timeout: float | None, method: str, raw: bool) -> tuple:
        self.gather(None, timeout, method)
        b, n = self.buffers, self.num_envs
        infos: Any
        if raw:  # the parts as they came: each names its envs
            infos = [*self.columns, *self.pending_infos.values()]
        else:
            columns = columns_infos(self.columns, self.pending_infos, n) if self.columns else None
            entries = [self.pending_infos[i] for i in sorted(self.pending_infos)] if self.pending_infos else []
            infos = columns if columns is not None else batch_infos(entries, n) if entries else {}
        self.forget(Event.RETURNED)
        if self.autoreset_mode is AutoresetMode.DISABLED:
            self.needs_reset = np.logical_or(b.terminations, b.truncations)
        observations = b.observations.read(self.copy) if b.lender is None else b.lender.lend()
        return observations, b.rewards.copy(), b.terminations.copy(), b.truncations.copy(), infos

    def forget(self, event: Event) -> None:
        if self.columns:
            self.columns.clear()
        super().forget(event)


class AsyncBatches(InFlight):
    """The first ``batch_size`` envs ready. An env is ``busy`` from its send until a batch
    returns it; finished envs queue in ``ready``; steps may be sent while others are in flight."""

    def may_send_steps(self) -> bool:
        return self.state is CallState.DEFAULT or self.state is CallState.WAITING_STEP

    def check_all_envs(self) -> None:
        raise ValueError(
            f"send(actions, env_ids): env_ids is required when batch_size ({self.batch_size}) "
            f"< num_envs ({self.num_envs}); pass the infos['env_id'] of the last recv()"
        )

    def resetting(self, ids: np.ndarray) -> None:
        self.ready.clear()
        self.pending_infos.clear()
        self.restarted.clear()  # every env starts a new episode
        self.busy[ids] = True

    def stepping(self, ids: np.ndarray) -> None:
        self.busy[ids] = True

    def keep(self, envs: np.ndarray, entries: Any) -> None:
        super().keep(envs, entries)
        self.ready.extend(envs.tolist())

    def collect(self, timeout: float | None, method: str, raw: bool) -> tuple:
        self.gather(self.batch_size, timeout, method)
        b, bs, ready, pending = self.buffers, self.batch_size, self.ready, self.pending_infos
        ids = [ready.popleft() for _ in range(bs)]
        take = np.array(ids, dtype=np.int64)
        if pending:
            rows = {i: r for r, i in enumerate(ids)}
            infos = batch_infos([pending.pop(i) for i in ids if i in pending], bs, rows)
        else:
            infos = {}
        infos["env_id"] = take
        infos["_env_id"] = np.ones(bs, dtype=np.bool_)
        self.busy[take] = False
        if self.autoreset_mode is AutoresetMode.DISABLED:
            self.needs_reset[take] = b.terminations[take] | b.truncations[take]
        # the rest of a reset, and of the steps sent, arrives through recv()
        self.lifecycle.fire(Event.BATCH_RETURNED if self.in_flight or self.ready else Event.RETURNED)
        return b.observations.read_rows(take), b.rewards[take], b.terminations[take], b.truncations[take], infos

    def forget(self, event: Event) -> None:
        self.busy.fill(False)
        super().forget(event)


def flight_for(transport: Transport, partition: Partition, policy: FailurePolicy, batch_size: int,
               autoreset_mode: AutoresetMode, copy: bool) -> InFlight:
    """The collector that ``batch_size`` asks for, over a new :class:`InFlight`."""
    kind = AsyncBatches if batch_size < partition.num_envs else FullBatches
    return kind(transport, partition, policy, batch_size, autoreset_mode, copy)
