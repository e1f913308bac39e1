"""The records an env's info travels in: one env's :class:`InfoEntry`, or several envs' infos
as one :class:`InfoColumns` (a record per env, read a column at a time), and a step's
:class:`StepReply` that carries them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

from vecenv.infos.codec import column_values, info_type, plain


class InfoEntry(NamedTuple):
    """What one env reports besides its arrays: its info, and the episode it just finished.

    ``ended``/``final_obs``/``final_info`` are used in SAME_STEP mode only: the finished episode's
    last observation and step info, while ``info`` is then the reset info of the new episode.
    """

    index: int  # type: ignore[assignment]  # the env index; shadows tuple.index, which no caller uses
    info: dict
    ended: bool = False
    final_obs: Any = None
    final_info: dict | None = None


class InfoColumns(Sequence):
    """The info entries of some envs, kept as one record per env: every env in ``envs``
    returned the keys ``keys`` with values of the types ``types`` (each one a type the codec
    reads as a column, :meth:`~vecenv.infos.codec.InfoType.field`), and ``records[key]`` holds
    their values.

    A transport that receives infos in shared memory hands them over like this, so the engine
    can batch them a column at a time; read as a sequence, it is the per-env :class:`InfoEntry`
    list, each value of the type the env returned.

    ``all_records``, when given, holds the same kind of record for every env of the vector env (a view
    of shared memory, indexed by env) and ``records`` is its rows ``envs``: chunks that share it
    and together cover every env are batched from it at once, without joining them. Such views
    are read before the worker's next command overwrites them.
    """

    def __init__(self, envs: np.ndarray, keys: tuple[str, ...], types: tuple[type, ...],
                 records: np.ndarray, all_records: np.ndarray | None = None) -> None:
        self.envs, self.keys, self.types, self.records, self.all_records = envs, keys, types, records, all_records
        self._entries: list[InfoEntry] | None = None
        self._batch_dtypes: list[np.dtype] | None = None

    def reread(self) -> InfoColumns:
        """The same envs' infos read anew from the same records (a later step's values when the
        records are a view of shared memory), without this one's unpacked entries."""
        again = InfoColumns(self.envs, self.keys, self.types, self.records, self.all_records)
        again._batch_dtypes = self._batch_dtypes
        return again

    def batch_dtypes(self) -> list[np.dtype]:
        """The dtype gymnasium batches each column into, in the order of ``keys`` (found once)."""
        if self._batch_dtypes is None:
            fields = self.records.dtype
            self._batch_dtypes = [info_type(kind).batch_dtype(kind, fields[key])
                                  for key, kind in zip(self.keys, self.types, strict=True)]
        return self._batch_dtypes

    def __len__(self) -> int:
        return len(self.envs)

    def __getitem__(self, k: Any) -> Any:
        return self.as_entries()[k]

    def __iter__(self) -> Iterator[InfoEntry]:
        return iter(self.as_entries())  # not Sequence's one __getitem__ call per item

    def as_entries(self) -> list[InfoEntry]:
        """The per-env entries, built once (read before the worker's next command)."""
        if self._entries is None:
            self._entries = [InfoEntry(i, info) for i, info in zip(self.envs.tolist(), self.info_dicts(), strict=True)]
        return self._entries

    def info_dicts(self) -> list[dict]:
        """Each env's info as a new dict, in the order of ``envs``, every value of the type the
        env returned (read before the worker's next command)."""
        records, keys = self.records, self.keys
        rows: Any
        if plain(self.types):
            rows = records.tolist()  # one tuple of Python values per env
        else:
            rows = zip(*[column_values(records[key], kind) for key, kind in zip(keys, self.types, strict=True)],
                       strict=True)
        return [dict(zip(keys, row, strict=True)) for row in rows]


#: a step's info reports as they came, for a caller that wants them per env (the SB3 API): one
#: env's :class:`InfoEntry`, or several envs' infos as one :class:`InfoColumns` (a sequence of
#: entries, whose :meth:`~InfoColumns.info_dicts` skips building them)
InfoParts = list["InfoEntry | InfoColumns"]


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
