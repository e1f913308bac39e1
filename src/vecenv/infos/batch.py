"""Batching infos into the forms the APIs hand out: gymnasium's dict of arrays with ``_key``
masks (:func:`batch_infos`, and :func:`batch_columns` straight from column records), and SB3's
per-env dicts (:func:`per_env_infos`).

The rules follow gymnasium 1.x exactly (``VectorEnv._add_info``), as the codec's table says
(:func:`~vecenv.infos.codec.batched_as`): Python ``int``/``float``/``bool`` and numpy numbers
get an array of their own type, arrays a stacked array of their shape and dtype, nested dicts are
batched recursively, anything else goes in an object array; ``final_obs`` is always an object
array so each env's last observation stays unbatched.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from vecenv.infos.codec import OWN, STACK, batched_as
from vecenv.infos.records import InfoColumns, InfoEntry


def add_info(infos: dict[str, Any], info: dict[str, Any], row: int, n: int) -> dict[str, Any]:
    """Merge one env's ``info`` into the batched ``infos`` (``n`` rows) at ``row``; returns ``infos``."""
    for key, value in info.items():
        if key == "final_obs":
            array = infos.get(key)
            if array is None:
                array = np.full(n, None, dtype=object)
            array[row] = value
        elif isinstance(value, dict):
            array = add_info(infos.get(key, {}), value, row, n)
        else:
            array = infos.get(key)
            if array is None:
                kind = type(value)
                form = batched_as(kind)
                if form == OWN:
                    array = np.zeros(n, dtype=kind)
                elif form == STACK:
                    array = np.zeros((n, *value.shape), dtype=value.dtype)
                else:
                    array = np.full(n, None, dtype=object)
            array[row] = value
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
        if batched_as(kind) != OWN:
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
    batched = first.batch_dtypes()
    if _in_env_order(chunks, n):
        present = np.empty(n, dtype=np.bool_)
        present.fill(True)
        source = _one_source(chunks, n)
        infos: dict[str, Any] = {}
        for key, kind in zip(keys, batched, strict=True):
            if source is not None:
                infos[key] = source[key].astype(kind)
            else:
                infos[key] = np.concatenate([c.records[key] for c in chunks], dtype=kind)
            infos[f"_{key}"] = present.copy()
        return infos
    present = np.zeros(n, dtype=np.bool_)
    for chunk in chunks:
        present[chunk.envs] = True
    infos = {}
    for key, kind in zip(keys, batched, strict=True):
        column: np.ndarray = np.zeros((n, *first.records[key].shape[1:]), dtype=kind)
        for chunk in chunks:
            column[chunk.envs] = chunk.records[key]
        infos[key] = column
        infos[f"_{key}"] = present.copy()
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
