"""What becomes of a worker that died or overran ``step_timeout``: under ``on_error="restart"``
:class:`Recovery` replaces it (within the restart budget) and ends its envs' episodes, at once
for the envs it was running a command for and at their next send for its others; otherwise the
error stands."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from vecenv.engine.partition import Partition
from vecenv.engine.transport import Transport
from vecenv.errors import StepTimeoutError, VecEnvError, WorkerDiedError
from vecenv.infos import InfoEntry
from vecenv.policy import FailurePolicy
from vecenv.spaces import StepBuffers
from vecenv.worker.commands import Command, Configure, Reset
from vecenv.worker.restarts import RestartBudget, restart_report, restarted_entry, truncate_rows

__all__ = ["Recovery"]


class Recovery:
    """Replaces the failed workers of ``transport`` (each holding its envs of ``partition``,
    whose rows are in ``buffers``) within ``policy``'s restart budget.

    :attr:`later` holds the envs whose worker was restarted while they were not in flight: their
    next send returns a truncation instead of stepping (:meth:`return_later`), with the restart
    report, and for SAME_STEP the new env's reset observation and info.
    """

    def __init__(self, transport: Transport, partition: Partition, policy: FailurePolicy,
                 autoreset_mode: AutoresetMode, buffers: StepBuffers) -> None:
        self.transport, self.partition, self.policy, self.buffers = transport, partition, policy, buffers
        self.same_step = autoreset_mode is AutoresetMode.SAME_STEP
        self.budget = RestartBudget(policy.max_restarts, policy.restart_window)
        self.later: dict[int, tuple[dict, Any, dict]] = {}

    def may_restart(self, w: int, error: VecEnvError) -> bool:
        """Whether worker ``w``, failed with ``error``, is to be replaced (spends the budget)."""
        return self.policy.restarts and self.budget.spend(w, f"worker {w}", error)

    def failed(self, w: int, envs: np.ndarray, error: VecEnvError, command: Command | None) -> list[InfoEntry]:
        """Worker ``w`` died or hung running ``command`` for ``envs``: replace it and return its
        envs' entries (their rows written), or raise ``error`` (a hung worker is ended first)."""
        lender = self.buffers.lender
        if lender is not None and lender.moved:  # its rows: the last ones the caller got
            lender.restore(*self.partition[w])
        if not self.may_restart(w, error):
            if isinstance(error, StepTimeoutError):
                self.transport.terminate(w)
            raise error
        return self.restart(w, envs, error, command)

    def restart(self, w: int, envs: np.ndarray, error: VecEnvError | dict, command: Any = None,
                configure: Configure | None = None) -> list[InfoEntry]:
        """Replace worker ``w``, which failed running ``command`` for ``envs`` (``error``; or the
        info report, for a worker replaced before it failed); the entries of ``envs``, whose
        episodes end now, and its other envs' in :attr:`later`. The new group gets ``configure``
        (default: the policy). A failed reset runs again on the new worker; otherwise the rows
        keep the old worker's last observation, and SAME_STEP resets the new envs at once,
        NEXT_STEP on their next step, DISABLED leaves it to the caller."""
        b, same_step = self.buffers, self.same_step
        start, stop = self.partition[w]
        # Async batches: the worker's other envs (idle, or ready and not yet returned) lose their
        # episodes too. Their next result is a truncation (return_later); an env whose last
        # result already ended its episode needs none, except in SAME_STEP, where the new env's
        # first observation is not the one the caller holds.
        in_flight = set(envs.tolist())
        others = [i for i in range(start, stop) if i not in in_flight]
        cut = [i for i in others if same_step or not (b.terminations[i] or b.truncations[i])]
        self.transport.restart(w)
        self.run_now(w, configure or Configure(self.policy))
        report = error if isinstance(error, dict) else restart_report(error)
        if type(command) is Reset:
            # the new worker runs the failed reset (its seeds and options), so its envs return
            # the observations the reset gives, never the dead worker's last
            reply = self.run_now(w, command)
            self.later.update({i: (report, None, {}) for i in cut})
            infos: dict[int, Any] = {e.index: e.info for e in reply.entries}
            if reply.objects is not None:
                b.observations.set_objects(reply.objects, envs)
            return [restarted_entry(int(i), report, infos.get(int(i), {})) for i in envs]
        if not same_step:  # the others' episodes end with the report at their next send
            truncate_rows(b, envs)
            self.later.update({i: (report, None, {}) for i in cut})
            return [restarted_entry(int(i), report) for i in envs]
        # SAME_STEP: the new worker's envs are reset at once; what the caller holds stays
        kept = {i: (copy.deepcopy(b.observations.item(i)), b.rewards[i], b.terminations[i], b.truncations[i])
                for i in others}
        finals = {int(i): copy.deepcopy(b.observations.item(int(i))) for i in envs}
        reply = self.run_now(w, Reset())
        b.observations.set_objects(reply.objects, np.arange(start, stop))
        infos = {e.index: e.info for e in reply.entries}
        self.later.update({i: (report, copy.deepcopy(b.observations.item(i)), infos.get(i, {})) for i in cut})
        for i, (obs, reward, terminated, truncated) in kept.items():  # what the caller holds or will get
            b.observations.write(i, obs)
            b.rewards[i], b.terminations[i], b.truncations[i] = reward, terminated, truncated
        truncate_rows(b, envs)
        return [restarted_entry(i, report, infos.get(i, {}), finals[i]) for i in finals]

    def fetch_call(self, w: int, command: Command | None) -> Any:
        """Worker ``w``'s reply to a call (``get_attr``, ``env_method``...), ``command``. A worker
        found dead (it died while idle, before this call) is replaced under on_error="restart",
        its envs' episodes ended at their next send (as for a step's restart), and runs
        ``command`` again."""
        try:
            return self.transport.fetch(w)
        except WorkerDiedError as exc:
            if not self.may_restart(w, exc):
                raise
            self.restart(w, np.empty(0, np.int64), exc, command)
            return self.run_now(w, command)

    def return_later(self, ids: list[int]) -> tuple[np.ndarray, list[InfoEntry]]:
        """End the episodes of the envs ``ids`` of :attr:`later` now, as truncations: their rows
        and entries. The observation is the last one the caller got (NEXT_STEP, DISABLED) or the
        new env's first one with that last one as ``final_obs`` (SAME_STEP)."""
        b, entries = self.buffers, []
        for i in ids:
            report, reset_obs, reset_info = self.later.pop(i)
            truncate_rows(b, i)
            if reset_obs is None:
                entries.append(restarted_entry(i, report))
            else:
                final_obs = copy.deepcopy(b.observations.item(i))
                b.observations.write(i, reset_obs)
                entries.append(restarted_entry(i, report, reset_info, final_obs))
        return np.array(ids, dtype=np.int64), entries

    def run_now(self, w: int, command: Any) -> Any:
        """Run ``command`` on ``w`` and wait for its reply (outside the in-flight bookkeeping)."""
        self.transport.send([(w, command)])
        if not self.transport.ready([w], self.policy.step_timeout):
            self.transport.terminate(w)
            raise StepTimeoutError(self.partition.envs_of(w), w, self.policy.step_timeout, "restart")
        return self.transport.fetch(w)
