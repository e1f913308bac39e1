"""The records an env's info travels in (one env's :class:`InfoEntry`, several envs' infos as one
:class:`InfoColumns`, a step's :class:`StepReply`), and batching them into the forms the APIs
hand out: gymnasium's dict of arrays with ``_key`` masks (:func:`batch_infos`, and
:func:`batch_columns` straight from column records), following gymnasium 1.x's
``VectorEnv._add_info`` exactly, and SB3's per-env dicts (:func:`per_env_infos`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

from vecenv.infos.codec import OBJECT, OWN, STACK, info_type, plain


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


class _Plan(NamedTuple):
    """How a chunk's columns batch: each one's view of its records, the dtype gymnasium batches
    it into, and its mask's key."""

    views: list[np.ndarray]
    dtypes: list[np.dtype]
    mask_keys: list[str]


class InfoColumns(Sequence):
    """The infos of the envs ``envs``, every one with the keys ``keys`` and values of the types
    ``types`` (each a type the codec reads as a column), as one record per env in ``records``:
    the engine batches them a column at a time; read as a sequence, they are the per-env
    :class:`InfoEntry` list. ``all_records``, when given, holds such records for every env of the
    vector env (a view of shared memory) and ``records`` is its rows ``envs``: chunks that share
    it and together cover every env are batched from it at once. Views of shared memory are
    read before the worker's next command overwrites them.
    """

    def __init__(self, envs: np.ndarray, keys: tuple[str, ...], types: tuple[type, ...],
                 records: np.ndarray, all_records: np.ndarray | None = None) -> None:
        self.envs, self.keys, self.types, self.records, self.all_records = envs, keys, types, records, all_records
        self._entries: list[InfoEntry] | None = None
        self._plan: _Plan | None = None

    def reread(self) -> InfoColumns:
        """This chunk, to be read anew from its records (a later step's values when they are a
        view of shared memory): the entries unpacked from them before are dropped."""
        self._entries = None
        return self

    def plan(self) -> _Plan:
        """How to batch these columns (found once, kept by rereads)."""
        if self._plan is None:
            records, keys = self.records, self.keys
            self._plan = _Plan([records[key] for key in keys],
                               [info_type(kind).batch_dtype(kind, records.dtype[key])
                                for key, kind in zip(keys, self.types, strict=True)],
                               [f"_{key}" for key in keys])
        return self._plan

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
            rows = zip(*[info_type(kind).values(records[key]) for key, kind in zip(keys, self.types, strict=True)],
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



def add_info(infos: dict[str, Any], info: dict[str, Any], row: int, n: int) -> dict[str, Any]:
    """Merge one env's ``info`` into the batched ``infos`` (``n`` rows) at ``row``; returns
    ``infos``. ``final_obs`` is always an object array, so each env's last observation stays
    unbatched."""
    for key, value in info.items():
        if not isinstance(value, dict) or key == "final_obs":
            array = infos.get(key)
            if array is None:
                form = OBJECT if key == "final_obs" else info_type(type(value)).batch
                if form == OWN:
                    array = np.zeros(n, dtype=type(value))
                elif form == STACK:
                    array = np.zeros((n, *value.shape), dtype=value.dtype)
                else:
                    array = np.full(n, None, dtype=object)
            array[row] = value
        else:
            array = add_info(infos.get(key, {}), value, row, n)
        mask = infos.get(f"_{key}")
        if mask is None:
            mask = np.zeros(n, dtype=np.bool_)
        mask[row] = True
        infos[key] = array
        infos[f"_{key}"] = mask
    return infos


def batch_infos(entries: Iterable[InfoEntry], n: int,
                rows: dict[int, int] | None = None) -> dict[str, Any]:
    """Batch env reports into one info dict of ``n`` rows.

    ``rows`` maps an env index to its row (async batches); by default the row is the env index.
    A SAME_STEP entry for a finished episode adds ``final_obs``/``final_info`` before the new
    episode's reset info, as gymnasium does.
    """
    if rows is None and type(entries) is list and len(entries) > 1:
        columns = _alike(entries, n)
        if columns is not None:
            return columns
    infos: dict[str, Any] = {}
    for entry in entries:
        row = entry.index if rows is None else rows[entry.index]
        if entry.ended:
            add_info(infos, {"final_obs": entry.final_obs, "final_info": entry.final_info}, row, n)
        add_info(infos, entry.info, row, n)
    return infos


def _alike(entries: list[InfoEntry], n: int) -> dict[str, Any] | None:
    """The batched infos of entries whose infos hold the same keys with scalars of the same types
    (the usual step), one column per key; None otherwise (then :func:`add_info` does it)."""
    first = entries[0].info
    keys = tuple(first)
    types = tuple(map(type, first.values()))
    for kind in types:
        if info_type(kind).batch != OWN:
            return None
    rows = _value_rows(entries, keys, types)
    if rows is None:
        return None
    count = len(rows)
    full = count == n  # entries come one per env, in order: every row is present
    at = None if full else [entry.index for entry in entries]
    present = np.zeros(n, dtype=np.bool_)
    present[slice(None) if full else at] = True
    infos: dict[str, Any] = {}
    for key, kind, values in zip(keys, types, zip(*rows, strict=True), strict=True):
        column: np.ndarray = np.fromiter(values, kind, count)
        if not full:
            column, given = np.zeros(n, dtype=kind), column
            column[at] = given
        infos[key] = column
        infos[f"_{key}"] = present.copy()
    return infos


def _value_rows(entries: list[InfoEntry], keys: tuple, types: tuple) -> list[tuple] | None:
    """Each entry's info values, when every info holds exactly ``keys`` with values of ``types``
    and no entry ended an episode (SAME_STEP's final entries batch another way); else None."""
    rows = []
    for entry in entries:
        info = entry.info
        if entry.ended or tuple(info) != keys:
            return None
        values = tuple(info.values())
        if tuple(map(type, values)) != types:
            return None
        rows.append(values)
    return rows


def batch_columns(chunks: list[InfoColumns], n: int) -> dict[str, Any] | None:
    """Batched infos of ``n`` rows from column chunks that share their keys and types (in env
    order they give what :func:`batch_infos` gives for the same infos); None when they differ."""
    first = chunks[0]
    keys = first.keys
    if len(chunks) > 1:
        types, dtype = first.types, first.records.dtype
        for chunk in chunks:  # the same record layout: arrays of one shape too
            if chunk.keys != keys or chunk.types != types or chunk.records.dtype != dtype:
                return None
        chunks = sorted(chunks, key=lambda chunk: int(chunk.envs[0]))
    plan = first.plan()
    batched, mask_keys = plan.dtypes, plan.mask_keys
    if _in_env_order(chunks, n):
        masks = np.empty((len(keys), n), dtype=np.bool_)  # one block: a row per key
        masks.fill(True)
        source = _one_source(chunks, n)
        if source is first.records:
            columns = [view.astype(kind) for view, kind in zip(plan.views, batched, strict=True)]
        elif source is not None:
            columns = [source[key].astype(kind) for key, kind in zip(keys, batched, strict=True)]
        else:
            columns = [np.concatenate([c.records[key] for c in chunks], dtype=kind)
                       for key, kind in zip(keys, batched, strict=True)]
        infos: dict[str, Any] = {}
        for i, key in enumerate(keys):
            infos[key] = columns[i]
            infos[mask_keys[i]] = masks[i]
        return infos
    present = np.zeros(n, dtype=np.bool_)
    for chunk in chunks:
        present[chunk.envs] = True
    infos = {}
    for key, kind, mask_key in zip(keys, batched, mask_keys, strict=True):
        column: np.ndarray = np.zeros((n, *first.records[key].shape[1:]), dtype=kind)
        for chunk in chunks:
            column[chunk.envs] = chunk.records[key]
        infos[key] = column
        infos[mask_key] = present.copy()
    return infos


def columns_infos(columns: list[InfoColumns], entries: dict[int, InfoEntry], n: int) -> dict | None:
    """A full batch's infos straight from its column chunks (entries that came another way, as
    from the caller's own group, join them when they hold the same keys and types); otherwise
    None, the chunks turned into per-env entries in ``entries`` (env -> entry). Empties ``columns``."""
    infos = None
    if entries:
        chunk = entries_as_columns([entries[i] for i in sorted(entries)], columns[0])
        if chunk is not None:
            entries.clear()
            columns.append(chunk)
    if not entries:
        infos = batch_columns(columns, n)
    if infos is None:
        for chunk in columns:
            for entry in chunk:
                entries[entry.index] = entry
    columns.clear()
    return infos


def entries_as_columns(entries: list[InfoEntry], like: InfoColumns) -> InfoColumns | None:
    """``entries`` (in env order) as a chunk of the same keys and types as ``like``, to batch
    beside it; None when one of them differs (or ended an episode, or a value does not fit)."""
    keys, types, dtype = like.keys, like.types, like.records.dtype
    rows = _value_rows(entries, keys, types)
    if rows is None:
        return None
    for row in rows:  # an array of another dtype or shape would be cast to the column's
        for key, value in zip(keys, row, strict=True):
            if type(value) is np.ndarray and (value.dtype != dtype[key].base or value.shape != dtype[key].shape):
                return None
    try:
        records = np.array(rows, dtype=dtype)
    except (OverflowError, ValueError, TypeError):  # an int beyond its column's range
        return None
    return InfoColumns(np.array([entry.index for entry in entries], dtype=np.int64), keys, types, records)


def per_env_infos(parts: Sequence[Any], num_envs: int) -> tuple[list[dict], list[InfoEntry]]:
    """Per-env info dicts (SB3's form) from info reports as they came (``step_entries``), and the
    entries whose episode ended (SAME_STEP: their ``info`` is the new episode's reset info).

    Every dict is a new one, since SB3's API adds its keys to them: column chunks (infos that
    came through shared memory) are built as new dicts once, an entry's info is copied.
    """
    infos: list[dict] = [{} for _ in range(num_envs)]
    ended: list[InfoEntry] = []
    for part in parts:
        if type(part) is InfoColumns:
            for i, info in zip(part.envs.tolist(), part.info_dicts(), strict=True):
                infos[i] = info
        elif part.ended:
            ended.append(part)
        elif part.info:
            infos[part.index] = dict(part.info)
    return infos, ended


def _in_env_order(chunks: list[InfoColumns], n: int) -> bool:
    """Whether the chunks (sorted by first env) hold envs ``0 .. n-1``, each one in order."""
    expected = 0
    for chunk in chunks:
        envs = chunk.envs
        if not len(envs) or envs[0] != expected or envs[-1] != expected + len(envs) - 1:
            return False
        expected += len(envs)
    return expected == n


def _one_source(chunks: list[InfoColumns], n: int) -> np.ndarray | None:
    """One record array that holds every env's row of ``chunks`` (in env order), when there is
    one: the only chunk's records, or the ``all_records`` that every chunk is a part of."""
    if len(chunks) == 1:
        return chunks[0].records
    all_records = chunks[0].all_records
    if all_records is not None and len(all_records) == n and all(chunk.all_records is all_records for chunk in chunks):
        return all_records
    return None
