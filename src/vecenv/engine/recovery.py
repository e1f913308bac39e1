"""Recovery: what the engine does when a worker dies or overruns ``step_timeout``.

Under ``on_error="restart"`` (and within the restart budget) :class:`Recovery` replaces the
worker and ends its envs' episodes as truncations, by the same rule an env group uses for one
env (:func:`vecenv.worker.restarts.truncate_rows`); otherwise the flight drains every other reply
and raises the error (:meth:`~vecenv.engine.flight.Flight.fail`).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from vecenv.engine.flight import Flight
from vecenv.errors import VecEnvError
from vecenv.infos import InfoEntry
from vecenv.worker.commands import Configure, Reset
from vecenv.worker.restarts import RestartBudget, restart_report, truncate_rows

__all__ = ["Recovery"]


class Recovery:
    """Replaces the failed workers of ``flight``: it becomes the flight's ``on_failure``."""

    def __init__(self, flight: Flight) -> None:
        self.flight = flight
        self.budget = RestartBudget(flight.policy.max_restarts, flight.policy.restart_window)
        flight.on_failure = self.worker_failed

    def worker_failed(self, w: int, gids: np.ndarray, error: VecEnvError) -> None:
        """A worker died or hung while running a step or reset for ``gids``."""
        flight = self.flight
        if flight.policy.restarts and self.budget.spend(w, f"worker {w}", error):
            try:
                self.restart(w, gids, error)
                return
            except BaseException:
                flight.drain()  # the worker stays dead: the next command to it reports so
                raise
        flight.fail(w, gids, error)

    def restart(self, w: int, gids: np.ndarray, error: VecEnvError) -> None:
        """Replace worker ``w`` with a fresh one and end the episodes of ``gids`` as truncations.

        The rows keep the last observation the old worker wrote. SAME_STEP resets the new envs
        at once (that observation becomes ``final_obs``); NEXT_STEP resets them on their next
        step; DISABLED leaves the reset to the caller, as after any episode end.
        """
        flight = self.flight
        b = flight.buffers
        same_step = flight.autoreset_mode is AutoresetMode.SAME_STEP
        start, stop = flight.partition[w]
        # Async batches: the worker's other envs (idle, or ready and not yet returned) lose their
        # episodes too. Their next result is a truncation (Flight.return_restarted); an env whose
        # last result already ended its episode needs none, except in SAME_STEP, where the new
        # env's first observation is not the one the caller holds.
        in_flight = set(gids.tolist())
        others = [i for i in range(start, stop) if i not in in_flight]
        cut = [i for i in others if same_step or not (b.terminations[i] or b.truncations[i])]
        flight.transport.restart(w)
        flight.fetch_now(w, Configure(flight.policy))
        report = restart_report(error)
        if same_step:
            made = self.reset_new_envs(w, gids, others, cut, report)
        else:
            made = [InfoEntry(int(i), dict(report)) for i in gids]
            flight.restarted.update((i, (report, None, {})) for i in cut)
        truncate_rows(b, gids)  # after the reset above, which clears the flags of its rows
        deferred = flight.deferred.pop(w, [])  # sent while the old worker was busy
        now = [i for i in deferred if i in flight.restarted]
        if len(now) < len(deferred):
            flight.deferred[w] = [i for i in deferred if i not in flight.restarted]
        flight.accept(w, gids, made, None)
        if now:
            flight.return_restarted(now)

    def reset_new_envs(
        self, w: int, gids: np.ndarray, others: list[int], cut: list[int], report: dict
    ) -> list[InfoEntry]:
        """SAME_STEP: reset the new worker's envs at once; what the caller holds stays."""
        flight = self.flight
        b = flight.buffers
        start, stop = flight.partition[w]
        kept = {i: (copy.deepcopy(b.observations.item(i)), b.rewards[i], b.terminations[i], b.truncations[i])
                for i in others}
        finals = {int(i): copy.deepcopy(b.observations.item(int(i))) for i in gids}
        reply = flight.fetch_now(w, Reset())
        b.observations.set_objects(reply.objects, np.arange(start, stop))
        infos: dict[int, Any] = {e.index: e.info for e in reply.entries}
        made = [InfoEntry(i, {**infos.get(i, {}), **report}, True, finals[i], dict(report)) for i in finals]
        for i in cut:
            flight.restarted[i] = (report, copy.deepcopy(b.observations.item(i)), infos.get(i, {}))
        for i, (obs, reward, terminated, truncated) in kept.items():  # what the caller holds or will get
            b.observations.write(i, obs)
            b.rewards[i], b.terminations[i], b.truncations[i] = reward, terminated, truncated
        return made
