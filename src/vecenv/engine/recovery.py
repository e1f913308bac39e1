"""What becomes of a worker that died or overran ``step_timeout`` under ``on_error="restart"``:
:class:`Recovery` replaces it (within the restart budget) and returns a :class:`Restart`, the
plan for its envs' episodes that the flight applies."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from gymnasium.vector import AutoresetMode

from vecenv.errors import VecEnvError
from vecenv.infos import InfoEntry
from vecenv.worker.commands import Configure, Reset
from vecenv.worker.restarts import RestartBudget, restart_report, restarted_entry

if TYPE_CHECKING:
    from vecenv.engine.flight import InFlight

__all__ = ["Recovery", "Restart"]


class Restart(NamedTuple):
    """What a restart leaves the flight to do: return ``entries`` for the envs in flight (rows
    truncated, unless ``fresh``: they hold the new envs' reset and its custom-space ``objects``),
    and end the episodes of ``later`` (env -> report, SAME_STEP's reset observation and info) at
    their next send."""

    entries: list[InfoEntry]
    later: dict[int, tuple[dict, Any, dict]]
    fresh: bool = False
    objects: Any = None


class Recovery:
    """Replaces the failed workers of ``flight`` within the policy's restart budget."""

    def __init__(self, flight: InFlight) -> None:
        self.flight = flight
        self.budget = RestartBudget(flight.policy.max_restarts, flight.policy.restart_window)

    def may_restart(self, w: int, error: VecEnvError) -> bool:
        """Whether worker ``w``, failed with ``error``, is to be replaced (spends the budget)."""
        return self.flight.policy.restarts and self.budget.spend(w, f"worker {w}", error)

    def restart(self, w: int, envs: np.ndarray, error: VecEnvError | dict, command: Any = None,
                configure: Configure | None = None) -> Restart:
        """Replace worker ``w``, which failed running ``command`` for ``envs`` (``error``; or the
        info report, for a worker replaced before it failed); the plan for its envs' episodes.
        The new group gets ``configure`` (default: the policy). A failed reset runs again on the
        new worker; otherwise the rows keep the old worker's last observation, and SAME_STEP
        resets the new envs at once, NEXT_STEP on their next step, DISABLED leaves it to the
        caller."""
        flight = self.flight
        b = flight.buffers
        same_step = flight.autoreset_mode is AutoresetMode.SAME_STEP
        start, stop = flight.partition[w]
        # Async batches: the worker's other envs (idle, or ready and not yet returned) lose their
        # episodes too. Their next result is a truncation (InFlight.return_restarted); an env whose
        # last result already ended its episode needs none, except in SAME_STEP, where the new
        # env's first observation is not the one the caller holds.
        in_flight = set(envs.tolist())
        others = [i for i in range(start, stop) if i not in in_flight]
        cut = [i for i in others if same_step or not (b.terminations[i] or b.truncations[i])]
        flight.transport.restart(w)
        flight.run_now(w, configure or Configure(flight.policy))
        report = error if isinstance(error, dict) else restart_report(error)
        # the others' episodes end with the report (NEXT_STEP, DISABLED, a rerun reset)
        ended: dict[int, tuple[dict, Any, dict]] = {i: (report, None, {}) for i in cut}
        if type(command) is Reset:
            # the new worker runs the failed reset (its seeds and options), so its envs return
            # the observations the reset gives, never the dead worker's last
            reply = flight.run_now(w, command)
            infos: dict[int, Any] = {e.index: e.info for e in reply.entries}
            made = [restarted_entry(int(i), report, infos.get(int(i), {})) for i in envs]
            return Restart(made, ended, True, reply.objects)
        if not same_step:
            return Restart([restarted_entry(int(i), report) for i in envs], ended)
        # SAME_STEP: the new worker's envs are reset at once; what the caller holds stays
        kept = {i: (copy.deepcopy(b.observations.item(i)), b.rewards[i], b.terminations[i], b.truncations[i])
                for i in others}
        finals = {int(i): copy.deepcopy(b.observations.item(int(i))) for i in envs}
        reply = flight.run_now(w, Reset())
        b.observations.set_objects(reply.objects, np.arange(start, stop))
        infos = {e.index: e.info for e in reply.entries}
        made = [restarted_entry(i, report, infos.get(i, {}), finals[i]) for i in finals]
        later = {i: (report, copy.deepcopy(b.observations.item(i)), infos.get(i, {})) for i in cut}
        for i, (obs, reward, terminated, truncated) in kept.items():  # what the caller holds or will get
            b.observations.write(i, obs)
            b.rewards[i], b.terminations[i], b.truncations[i] = reward, terminated, truncated
        return Restart(made, later)

    def rerun(self, w: int, error: VecEnvError, command: Any) -> Any:
        """A call (``get_attr``, ``env_method``...) found worker ``w`` dead: replace it, end its
        envs' episodes at their next step (as for a step's restart), and run ``command`` on the
        new worker; its reply."""
        flight = self.flight
        flight.restarted.update(self.restart(w, np.empty(0, np.int64), error, command).later)
        return flight.run_now(w, command)
