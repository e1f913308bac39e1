"""Recovery: what the engine does when a worker dies or overruns ``step_timeout``.

Under ``on_error="restart"`` (and within the restart budget) :class:`Recovery` replaces the
worker and ends its envs' episodes as truncations, by the same rule an env group uses for one
env (:func:`vecenv.worker.restarts.truncate_rows`); otherwise every other reply is drained and
the error raised.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from vecenv.errors import StepTimeoutError, VecEnvError
from vecenv.worker import InfoEntry
from vecenv.worker.commands import Configure, Reset
from vecenv.worker.restarts import RestartBudget, restart_report, truncate_rows

__all__ = ["Recovery"]


class Recovery:
    """Replaces failed workers (a mixin of VectorEnv, beside the Dispatcher)."""

    _worker_budget: RestartBudget
    autoreset_mode: AutoresetMode

    def _init_recovery(self) -> None:
        # async batches: envs whose worker was restarted while they were not in flight. Their next
        # send returns a truncation instead of stepping (value: the restart report, and for
        # SAME_STEP the new env's reset observation and info)
        self._cut: dict[int, tuple[dict, Any, dict]] = {}

    def _worker_failed(self, w: int, gids: np.ndarray, error: VecEnvError) -> None:
        """A worker died or hung while running a step or reset for ``gids``."""
        if self.policy.restarts and self._worker_budget.spend(w, f"worker {w}", error):
            try:
                self._restart_worker(w, gids, error)
                return
            except BaseException:
                self._drain()  # the worker stays dead: the next command to it reports so
                raise
        if isinstance(error, StepTimeoutError):
            self._transport.terminate(w)
        self._drain()
        raise error

    def _restart_worker(self, w: int, gids: np.ndarray, error: VecEnvError) -> None:
        """Replace worker ``w`` with a fresh one and end the episodes of ``gids`` as truncations.

        The rows keep the last observation the old worker wrote. SAME_STEP resets the new envs
        at once (that observation becomes ``final_obs``); NEXT_STEP resets them on their next
        step; DISABLED leaves the reset to the caller, as after any episode end.
        """
        b = self._buffers
        same_step = self.autoreset_mode is AutoresetMode.SAME_STEP
        start, stop = self._partition[w]
        # Async batches: the worker's other envs (idle, or ready and not yet returned) lose their
        # episodes too. Their next result is a truncation (see _truncate_cut); an env whose last
        # result already ended its episode needs none, except in SAME_STEP, where the new env's
        # first observation is not the one the caller holds.
        in_flight = set(gids.tolist())
        others = [i for i in range(start, stop) if i not in in_flight]
        cut = [i for i in others if same_step or not (b.terminations[i] or b.truncations[i])]
        self._transport.restart(w)
        self._fetch_now(w, Configure(self.policy))
        report = restart_report(error)
        if same_step:
            made = self._reset_restarted(w, gids, others, cut, report)
        else:
            made = [InfoEntry(int(i), dict(report)) for i in gids]
            self._cut.update((i, (report, None, {})) for i in cut)
        truncate_rows(b, gids)  # after the reset above, which clears the flags of its rows
        deferred = self._deferred.pop(w, [])  # sent while the old worker was busy
        now = [i for i in deferred if i in self._cut]
        if len(now) < len(deferred):
            self._deferred[w] = [i for i in deferred if i not in self._cut]
        self._accept(w, gids, made, None)
        if now:
            self._truncate_cut(now)

    def _reset_restarted(
        self, w: int, gids: np.ndarray, others: list[int], cut: list[int], report: dict
    ) -> list[InfoEntry]:
        """SAME_STEP: reset the new worker's envs at once; what the caller holds stays."""
        b = self._buffers
        start, stop = self._partition[w]
        kept = {i: (copy.deepcopy(b.observations.item(i)), b.rewards[i], b.terminations[i], b.truncations[i])
                for i in others}
        finals = {int(i): copy.deepcopy(b.observations.item(int(i))) for i in gids}
        reply = self._fetch_now(w, Reset())
        b.observations.set_objects(reply.objects, np.arange(start, stop))
        infos = {e.index: e.info for e in reply.entries}
        made = [InfoEntry(i, {**infos.get(i, {}), **report}, True, finals[i], dict(report)) for i in finals]
        for i in cut:
            self._cut[i] = (report, copy.deepcopy(b.observations.item(i)), infos.get(i, {}))
        for i, (obs, reward, terminated, truncated) in kept.items():  # what the caller holds or will get
            b.observations.write(i, obs)
            b.rewards[i], b.terminations[i], b.truncations[i] = reward, terminated, truncated
        return made

    def _truncate_cut(self, ids: list[int]) -> None:
        """Return the envs ``ids``, whose worker was restarted while they waited, as truncated.

        The observation is the last one the caller got (NEXT_STEP, DISABLED) or the new env's
        first one with that last one as ``final_obs`` (SAME_STEP); the infos say restarted.
        """
        b = self._buffers
        for i in ids:
            report, reset_obs, reset_info = self._cut.pop(i)
            truncate_rows(b, i)
            if reset_obs is None:
                entry = InfoEntry(i, dict(report))
            else:
                final_obs = copy.deepcopy(b.observations.item(i))
                b.observations.write(i, reset_obs)
                entry = InfoEntry(i, {**reset_info, **report}, True, final_obs, dict(report))
            self._held[i] = entry
            self._ready.append(i)
