"""Env groups that cannot write into the caller's memory (Ray actors, remote hosts).

A :class:`DetachedGroup` runs an unchanged :class:`~vecenv.worker.EnvGroup` over buffers of its
own. Every command carries the rows it reads (the actions of a ``step``) as ``inputs``, and every
reply carries the rows it wrote (observation leaves, rewards and flags of a ``reset`` or ``step``)
as ``outputs``; on the caller's side :func:`command_inputs` and :func:`store_outputs` move them
between the messages and the caller's rows of the batch buffers. Only the envs a command names
travel, and the engine's contract does not change: after ``fetch`` the caller's rows hold the
results, as if the group had written them in place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from vecenv.errors import VecEnvError
from vecenv.spaces import StepBuffers
from vecenv.worker.commands import Command, GivenStep, Reset, Step
from vecenv.worker.group import EnvDescription, EnvGroup

__all__ = ["DetachedGroup", "command_inputs", "store_outputs"]


def _rows(command: Reset | Step | GivenStep) -> Any:
    """The local env rows a command touches: an index array, or ``slice(None)`` for all."""
    return slice(None) if command.ids is None else np.asarray(command.ids, dtype=np.intp)


def command_inputs(rows: StepBuffers, command: Command) -> list[np.ndarray] | None:
    """Caller side: the action rows ``command`` reads, one array per action leaf (``Step`` only)."""
    if not isinstance(command, (Step, GivenStep)):
        return None
    sel = _rows(command)
    return [leaf.array[sel] for leaf in rows.actions.leaves]


def store_outputs(rows: StepBuffers, command: Command, outputs: Any) -> None:
    """Caller side: write a reply's ``outputs`` into the caller's rows of the batch buffers."""
    if outputs is None or not isinstance(command, (Reset, Step, GivenStep)):
        return  # only those commands write rows (DetachedGroup.run gives no outputs for others)
    sel = _rows(command)
    leaves, rewards, terms, truncs = outputs
    for leaf, values in zip(rows.observations.leaves, leaves, strict=True):
        leaf.array[sel] = values
    rows.rewards[sel] = rewards
    rows.terminations[sel] = terms
    rows.truncations[sel] = truncs


class DetachedGroup:
    """An :class:`EnvGroup` with private buffers; commands bring their inputs, replies their outputs."""

    def __init__(
        self,
        env_fns: Sequence[Callable[[], Any]],
        start: int,
        worker: int,
        autoreset_mode: AutoresetMode,
    ) -> None:
        self.group = EnvGroup(env_fns, start, worker, autoreset_mode, contain_exits=True)
        self.buffers: StepBuffers | None = None

    def describe(self) -> list[EnvDescription]:
        return self.group.describe()

    def attach(self, observation_space: spaces.Space, action_space: spaces.Space) -> None:
        """Allocate the group's own rows (object leaves travel in ``outputs`` like the rest)."""
        self.buffers = StepBuffers(observation_space, action_space, len(self.group.envs))
        self.group.attach(self.buffers)

    def run(self, command: Command, inputs: list[np.ndarray] | None = None) -> tuple[Any, Any]:
        """Run ``command`` and return ``(reply, outputs)`` (``outputs`` is ``None`` unless it wrote rows)."""
        if not isinstance(command, (Reset, Step, GivenStep)):
            return self.group.run(command), None  # no rows in, none out (only a step has inputs)
        b = self.buffers
        if b is None:
            raise VecEnvError(f"worker {self.group.worker}: the detached group has no buffers (attach() has not run)")
        sel = _rows(command)
        if inputs is not None:
            for leaf, values in zip(b.actions.leaves, inputs, strict=True):
                leaf.array[sel] = values
        reply = self.group.run(command)
        outputs = (
            [leaf.array[sel] if isinstance(sel, np.ndarray) else leaf.array.copy() for leaf in b.observations.leaves],
            b.rewards[sel].copy(),
            b.terminations[sel].copy(),
            b.truncations[sel].copy(),
        )
        return reply, outputs

    def close(self) -> list[str]:
        return self.group.close()
