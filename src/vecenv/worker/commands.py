"""The commands an env group runs, one small picklable class each, and the reply of a step.

The engine builds a command, a transport carries it (as it is, pickled, or as a shared-memory
flag for a :class:`Step`), and the group runs it with :meth:`EnvGroup.run
<vecenv.worker.EnvGroup.run>`, which dispatches on the command's type. ``ids`` are local indices
within the group (``None``: every env of the group).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from vecenv.policy import FailurePolicy
    from vecenv.worker.group import EnvGroup, InfoEntry

__all__ = [
    "Apply",
    "Call",
    "Close",
    "Command",
    "Configure",
    "NO_REPLY",
    "GetAttr",
    "GivenStep",
    "EnvIds",
    "InfoColumns",
    "Render",
    "Reset",
    "SetAttr",
    "STEP_ALL",
    "Step",
    "StepReply",
    "with_given",
]


#: some envs of a group by local index, as a sequence or an index array
EnvIds = Sequence[int] | np.ndarray


class InfoColumns(Sequence):
    """The info entries of some envs, kept as one record per env: every env in ``envs``
    returned the keys ``keys`` with scalar values of the types ``types``, and ``records[key]``
    holds their values.

    A transport that receives infos in shared memory hands them over like this, so the engine
    can batch them a column at a time; read as a sequence, it is the per-env
    :class:`~vecenv.worker.InfoEntry` list, each value of the type the env returned.

    ``whole``, when given, holds the same kind of record for every env of the vector env (a view
    of shared memory, indexed by env) and ``records`` is its rows ``envs``: chunks that share it
    and together cover every env are batched from it at once, without joining them. Such views
    are read before the worker's next command overwrites them.
    """

    def __init__(self, envs: np.ndarray, keys: tuple[str, ...], types: tuple[type, ...],
                 records: np.ndarray, whole: np.ndarray | None = None) -> None:
        self.envs, self.keys, self.types, self.records, self.whole = envs, keys, types, records, whole
        self._entries: list[InfoEntry] | None = None

    def again(self) -> InfoColumns:
        """The same envs' infos read anew from the same records (a later step's values when the
        records are a view of shared memory), without this one's unpacked entries."""
        return InfoColumns(self.envs, self.keys, self.types, self.records, self.whole)

    def __len__(self) -> int:
        return len(self.envs)

    def __getitem__(self, k: Any) -> Any:
        return self.as_entries()[k]

    def __iter__(self) -> Iterator[InfoEntry]:
        return iter(self.as_entries())  # not Sequence's one __getitem__ call per item

    def as_entries(self) -> list[InfoEntry]:
        """The per-env entries, built once (read before the worker's next command)."""
        if self._entries is None:
            self._entries = self._unpack()
        return self._entries

    def info_dicts(self) -> list[dict]:
        """Each env's info as a new dict, in the order of ``envs``, every value of the type the
        env returned (read before the worker's next command)."""
        records, keys = self.records, self.keys
        rows: Any
        if all(kind in _PYTHON_SCALARS for kind in self.types):
            rows = records.tolist()  # one tuple of Python values per env
        else:
            rows = zip(*[_column_values(records[key], kind) for key, kind in zip(keys, self.types, strict=True)],
                       strict=True)
        return [dict(zip(keys, row, strict=True)) for row in rows]

    def _unpack(self) -> list[InfoEntry]:
        from vecenv.worker.group import InfoEntry

        return [InfoEntry(i, info) for i, info in zip(self.envs.tolist(), self.info_dicts(), strict=True)]


_PYTHON_SCALARS = (bool, int, float)

#: a step's info reports as they came, for a caller that wants them per env (the SB3 API): one
#: env's :class:`~vecenv.worker.InfoEntry`, or several envs' infos as one :class:`InfoColumns`
#: (a sequence of entries, whose :meth:`~InfoColumns.info_dicts` skips building them)
InfoParts = list["InfoEntry | InfoColumns"]


def _column_values(column: np.ndarray, kind: type) -> list:
    """One column's values, each of type ``kind``: Python scalars through ``tolist``, numpy
    scalars by iterating (the column's dtype is ``kind``'s, so that yields ``kind``, bits
    unchanged)."""
    return column.tolist() if kind in _PYTHON_SCALARS else list(column)


class StepReply(NamedTuple):
    """What a reset or step returns beside the rows it wrote: info entries (perhaps as
    :class:`InfoColumns`) and object leaves."""

    entries: Sequence[InfoEntry]
    objects: list | None = None

    @property
    def empty(self) -> bool:
        """Nothing to carry back: the buffers hold the whole result."""
        return not self.entries and self.objects is None


#: the reply of a step that left everything in the buffers (no infos, no object leaves)
NO_REPLY = StepReply(())


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
    """Hand the group the vector env's failure policy."""

    policy: FailurePolicy

    def run(self, group: EnvGroup) -> None:
        group.configure(self.policy.on_error, self.policy.max_restarts, self.policy.restart_window)


class Close(NamedTuple):
    """Close every env of the group (its worker then ends)."""

    def run(self, group: EnvGroup) -> None:
        group.close()


#: every command type a group accepts
Command = Reset | Step | GivenStep | Call | GetAttr | SetAttr | Apply | Render | Configure | Close
COMMANDS = (Reset, Step, GivenStep, Call, GetAttr, SetAttr, Apply, Render, Configure, Close)
