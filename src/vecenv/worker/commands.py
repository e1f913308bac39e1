"""The commands an env group runs: each one call of the group's method as a small picklable
value, which the engine builds and a transport carries (as it is, pickled, or as a shared-memory
flag for a :class:`Step`). ``ids`` are local indices within the group (``None``: all its envs).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from vecenv.infos import NO_REPLY, StepReply  # what a Reset or Step returns, for the transports

if TYPE_CHECKING:
    from vecenv.policy import FailurePolicy
    from vecenv.worker.group import EnvGroup

__all__ = [
    "Apply",
    "Call",
    "Close",
    "Command",
    "Configure",
    "RecyclingState",
    "GetAttr",
    "GivenStep",
    "NO_REPLY",
    "EnvIds",
    "Render",
    "Reset",
    "SetAttr",
    "STEP_ALL",
    "STEP_QUEUED",
    "Step",
    "StepQueued",
    "StepReply",
    "with_given",
]


#: some envs of a group by local index, as a sequence or an index array
EnvIds = Sequence[int] | np.ndarray


class Reset(NamedTuple):
    """Reset the envs ``ids``, env ``j`` with ``seeds[j]`` (seeds of the whole group)."""

    seeds: Sequence[int | None] | None = None
    options: dict | None = None
    ids: EnvIds | None = None

    def run(self, group: EnvGroup) -> StepReply:
        return group.reset(self.seeds, self.options, self.ids)


class Step(NamedTuple):
    """Step the envs ``ids`` with the actions in the group's buffer rows."""

    ids: EnvIds | None = None

    def run(self, group: EnvGroup) -> StepReply:
        return group.step(self.ids)


#: the step of a whole group, sent as is on every full-batch step
STEP_ALL = Step()


class GivenStep(NamedTuple):
    """A :class:`Step` in which env ``j`` (local index) of ``given`` takes ``given[j]`` as its
    action instead of its buffer row: the action as the caller passed it, for a batch that is
    not numpy arrays of the action space's dtypes (gymnasium hands envs those as they are)."""

    ids: EnvIds | None
    given: dict[int, Any]

    def run(self, group: EnvGroup) -> StepReply:
        return group.step(self.ids, self.given)


def with_given(command: Step, given: Mapping[int, Any], start: int, stop: int) -> Step | GivenStep:
    """``command`` for the group of envs ``start:stop``, as a :class:`GivenStep` when any of its
    envs has an action in ``given`` (global env index -> action)."""
    ids = range(stop - start) if command.ids is None else command.ids
    mine = {int(j): given[start + int(j)] for j in ids if start + int(j) in given}
    return GivenStep(command.ids, mine) if mine else command


class Call(NamedTuple):
    """Call method ``name`` of each env (or read it, if not callable), as gymnasium does."""

    name: str
    args: tuple = ()
    kwargs: dict | None = None
    ids: EnvIds | None = None

    def run(self, group: EnvGroup) -> list:
        return group.call(self.name, self.args, self.kwargs or {}, self.ids)


class GetAttr(NamedTuple):
    """Read attribute ``name`` of each env (never called)."""

    name: str
    ids: EnvIds | None = None

    def run(self, group: EnvGroup) -> list:
        return group.get_attr(self.name, self.ids)


class SetAttr(NamedTuple):
    """Set attribute ``name`` of env ``ids[k]`` to ``values[k]``."""

    name: str
    values: Sequence[Any]
    ids: EnvIds | None = None

    def run(self, group: EnvGroup) -> None:
        group.set_attr(self.name, self.values, self.ids)


class Apply(NamedTuple):
    """Run ``fn(env, *args)`` on each env and return the results."""

    fn: Callable[..., Any]
    args: tuple = ()
    ids: EnvIds | None = None

    def run(self, group: EnvGroup) -> list:
        return group.apply(self.fn, self.args, self.ids)


class Render(NamedTuple):
    """Each env's ``render()`` result."""

    ids: EnvIds | None = None

    def run(self, group: EnvGroup) -> list:
        return group.render(self.ids)


class Configure(NamedTuple):
    """Hand the group the vector env's failure policy; a replacement worker's group also the
    envs' own ``seeds`` and how many workers held them before (``replacements``)."""

    policy: FailurePolicy
    seeds: list | None = None
    replacements: int = 0

    def run(self, group: EnvGroup) -> None:
        group.configure(self.policy.on_error, self.policy.max_restarts, self.policy.restart_window)
        group.recycling.configure(self.policy.max_episodes_per_env, self.seeds, self.replacements)


class RecyclingState(NamedTuple):
    """The envs' own seeds and how many workers held them before this one (for a replacement)."""

    def run(self, group: EnvGroup) -> tuple[list, int]:
        return group.recycling.state()


class Close(NamedTuple):
    """Close every env of the group (its worker then ends)."""

    def run(self, group: EnvGroup) -> list[str]:
        return group.close()


class StepQueued(NamedTuple):
    """Step, one at a time, each env of the group whose per-env step counter the caller moved,
    publishing each as it is done (async batches on the process transport:
    :mod:`vecenv.transports.process.queue`). Only a worker holding those counters runs it."""

    def run(self, group: EnvGroup) -> StepReply:
        raise TypeError(f"worker {group.worker}: StepQueued needs the per-env counters of a process transport")


#: the one queued step: the counters say which envs
STEP_QUEUED = StepQueued()

#: every command type a group accepts (a union ``isinstance`` takes)
Command = (Reset | Step | GivenStep | StepQueued | Call | GetAttr | SetAttr | Apply | Render | Configure | RecyclingState
           | Close)
