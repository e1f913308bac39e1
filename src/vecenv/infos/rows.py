"""Infos in rows of memory that both sides of a transport see: each env's info dict packed into
its own row under a :class:`~vecenv.infos.codec.Schema` both sides know, so that a step whose
envs return the usual infos needs no message (docs/process.md). Schemas new to the caller, and
entries that do not fit, go pickled with the reply (a :class:`RowsReply`).

Page 0 of an env's rows holds an entry's ``info``; page 1 its ``final_info`` when the entry ended
an episode (SAME_STEP), which also puts the final observation in ``final_obs``. A worker
registers at most :data:`~vecenv.infos.codec.MAX_SCHEMAS` schemas.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from vecenv.infos.batch import InfoColumns, InfoEntry, StepReply
from vecenv.infos.codec import MAX_SCHEMAS, ROW_BYTES, Schema, signature
from vecenv.spaces.buffers import BatchBuffer, aligned

__all__ = ["IN_ROWS", "InfoReader", "InfoRows", "InfoWriter", "RowsReply", "rows_round_trip"]

class InfoRows:
    """The info area of ``n`` envs: schema ids and packed rows (two pages each), and one
    observation per env for SAME_STEP's final observations; laid out in ``memory`` from
    ``offset`` (:meth:`nbytes` bytes), or in this process's memory when ``memory`` is None."""

    def __init__(self, observation_space: Any, n: int, memory: Any = None, offset: int = 0) -> None:
        if memory is None:
            memory, offset = bytearray(self.nbytes(observation_space, n)), 0
        self.ids = np.frombuffer(memory, np.int32, 2 * n, offset).reshape(n, 2)
        rows_at = aligned(offset + 8 * n)
        self.rows = np.frombuffer(memory, np.uint8, 2 * n * ROW_BYTES, rows_at).reshape(n, 2, ROW_BYTES)
        self.final_obs = BatchBuffer(observation_space, n, memory, aligned(rows_at + 2 * n * ROW_BYTES))
        single, _ = self.final_obs.single_leaf()
        #: where final observations go (None: the space has more than one leaf; they go pickled)
        self.final_rows = single

    @staticmethod
    def nbytes(observation_space: Any, n: int) -> int:
        return aligned(8 * n) + aligned(2 * n * ROW_BYTES) + BatchBuffer.nbytes(observation_space, n)

    def part(self, start: int, stop: int) -> InfoRows:
        """The area of envs ``start:stop``, sharing this one's memory."""
        view = object.__new__(InfoRows)
        view.ids, view.rows = self.ids[start:stop], self.rows[start:stop]
        view.final_rows = None if self.final_rows is None else self.final_rows[start:stop]
        return view


class RowsReply(NamedTuple):
    """A worker's reply whose info entries are partly in the rows: the ones that were not,
    the object leaves, and the schemas the caller has not seen (``(id, signature)`` pairs)."""

    entries: Sequence[InfoEntry]
    objects: list | None
    schemas: list[tuple[int, tuple]]


#: the reply of a worker whose info entries are all in the rows, under schemas the caller knows
IN_ROWS = RowsReply((), None, [])
#: every env's infos when none returned any
NO_INFOS = StepReply(())


class InfoWriter:
    """The worker's side: packs its group's info entries into its envs' rows."""

    def __init__(self, area: InfoRows, start: int) -> None:
        self.area = area
        self.start = start
        self._rows = area.rows.data.cast("B")  # packed at a row's offset: no view per write
        self.schemas: dict[tuple, tuple[int, Schema | None]] = {}  # signature -> (id, schema)
        self.flat: dict[tuple, tuple[int, Schema]] = {}  # keys -> a flat schema of those keys
        #: schemas registered during this command (the caller learns them with its reply)
        self.new: list[tuple[int, tuple]] = []
        #: some row holds an info of this command (the ids are cleared before the next)
        self.dirty = True

    def begin(self) -> None:
        """Start a command: its envs' rows hold nothing yet."""
        if self.dirty:
            self.area.ids[:] = 0
            self.dirty = False
        self.new = []

    def write(self, j: int, info: dict) -> bool:
        """Pack env ``j``'s (local index) ``info`` into its row as the group steps it; False
        when it does not fit (then it travels as an entry of the reply)."""
        known = self.flat.get(tuple(info))
        if known is not None and tuple(map(type, info.values())) == known[1].types:
            try:  # the common case, inline: the keys and types of before
                known[1].struct.pack_into(self._rows, 2 * j * ROW_BYTES, *info.values())
            except struct.error:  # an int beyond int64's range: this info goes pickled
                return False
            self.area.ids[j, 0] = known[0]
            self.dirty = True
            return True
        return self._pack(InfoEntry(self.start + j, info), self.new)

    def reply(self, entries: Sequence[InfoEntry], objects: list | None) -> RowsReply | None:
        """The message a command's result needs besides the rows: the entries that did not
        fit, the object leaves and the schemas new to the caller (None: nothing to send)."""
        rest = self.pack(entries)
        if not rest and not self.new and objects is None:
            return None
        new, self.new = self.new, []  # the caller learns them with this reply
        return RowsReply(rest, objects, new)

    def pack(self, entries: Sequence[InfoEntry]) -> list[InfoEntry]:
        """Put ``entries`` in their envs' rows; those that do not fit."""
        return [entry for entry in entries if not self._pack(entry, self.new)]

    def clear(self, j: int) -> None:
        """Env ``j``'s (local index) rows hold nothing: before a step of that env alone."""
        self.area.ids[j] = 0

    def _pack(self, entry: InfoEntry, new: list) -> bool:
        """Put one entry in its env's rows; False (rows left empty) when it does not fit."""
        j = entry.index - self.start
        final = self.area.final_rows
        packed = self._schema_of(entry.info, new)
        if packed is None:
            return False
        if entry.ended:
            obs = entry.final_obs
            if final is None or type(obs) is not np.ndarray or obs.shape != final.shape[1:] \
                    or obs.dtype != final.dtype or type(entry.final_info) is not dict:
                return False
            last = self._schema_of(entry.final_info, new)
            if last is None or not self._write(j, 1, *last):
                return False
            final[j] = obs
        if not self._write(j, 0, *packed):
            self.area.ids[j, 1] = 0
            return False
        self.dirty = True
        return True

    def _schema_of(self, info: dict, new: list) -> tuple[int, Schema, Any] | None:
        """``(id, schema, values)`` for ``info``; None when it cannot go in the rows."""
        flat = self.flat.get(tuple(info))
        if flat is not None and tuple(map(type, info.values())) == flat[1].types:
            return flat[0], flat[1], info.values()  # the common case: the keys and types of before
        values: list = []
        sig = signature(info, values)
        if sig is None:
            return None
        known = self.schemas.get(sig)
        if known is None:
            if len(self.schemas) >= MAX_SCHEMAS:
                return None
            fresh = Schema(sig)
            known = self.schemas[sig] = (len(self.schemas) + 1, fresh if fresh.fits else None)
            if fresh.fits:
                new.append((known[0], sig))
        sid, schema = known
        if schema is None:
            return None
        if schema.flat:
            self.flat[schema.keys] = (sid, schema)
        return sid, schema, values

    def _write(self, j: int, page: int, sid: int, schema: Schema, values: Any) -> bool:
        try:
            schema.struct.pack_into(self._rows, (2 * j + page) * ROW_BYTES, *values)
        except struct.error:  # an int beyond int64's range: this info goes pickled
            return False
        self.area.ids[j, page] = sid
        return True


class InfoReader:
    """The caller's side: rebuilds the info entries a worker left in the rows."""

    def __init__(self, area: InfoRows, partition: Sequence[tuple[int, int]]) -> None:
        self.area = area
        self.partition = partition
        self.schemas: list[dict[int, Schema]] = [{} for _ in partition]
        #: per worker, its rows' schema ids (as bytes) when every env holds one columnar schema,
        #: and the chunk read then: the usual step is recognised by one comparison and handed over
        #: as that chunk again, without building its parts again
        self._uniform: list[tuple[bytes, InfoColumns] | None] = [None for _ in partition]
        #: the same for every env at once (and the reply that hands it over), when every worker's rows
        #: hold one columnar schema
        self._uniform_all: tuple[bytes, InfoColumns, StepReply] | None = None
        self._no_ids = bytes(area.ids.nbytes)
        #: (worker, schema id) -> one id per distinct schema across workers (-1: none), and
        #: those schemas: rows of several workers read as one chunk when they share one
        self._shared = np.full((len(partition), MAX_SCHEMAS + 1), -1, dtype=np.int64)
        self._shared_schemas: dict[tuple, int] = {}
        self._by_shared: list[Schema] = []
        self._all_records: dict[np.dtype, np.ndarray] = {}  # a columnar dtype -> every env's rows as records

    def add(self, start: int, stop: int) -> int:
        """Read envs ``start:stop`` too (a group outside the partition: the inline one); its index."""
        self.partition = [*self.partition, (start, stop)]
        self.schemas.append({})
        self._uniform.append(None)
        return len(self.partition) - 1

    def restart(self, worker: int) -> None:
        """A new process serves ``worker``: its schema ids start over."""
        self.schemas[worker] = {}
        self._uniform[worker] = None
        self._uniform_all = None
        self._shared[worker] = -1

    def _learn(self, worker: int, schemas: list[tuple[int, tuple]]) -> dict[int, Schema]:
        """Worker ``worker``'s schemas, with the new ``(id, signature)`` pairs of a reply."""
        known = self.schemas[worker]
        for sid, sig in schemas:
            schema = known[sid] = Schema(sig)
            shared = self._shared_schemas.setdefault(sig, len(self._by_shared))
            if shared == len(self._by_shared):
                self._by_shared.append(schema)
            self._shared[worker, sid] = shared
        return known

    def columns_at(self, envs: np.ndarray, positions: list[int], worker_of: np.ndarray) -> InfoColumns | None:
        """The infos in the rows of ``envs[positions]`` as one chunk whose ``envs`` are those
        positions (those without an info left out), read now; None unless every info there has
        the same flat columnar schema and none ended an episode."""
        at = np.asarray(positions, dtype=np.int64)
        ids = envs[at]
        sids = self.area.ids[ids]
        if sids[:, 1].any():
            return None
        present = sids[:, 0] != 0
        if not present.all():
            at, ids, sids = at[present], ids[present], sids[present]
        if not len(ids):
            return InfoColumns(at, (), (), np.empty(0, np.dtype([])))
        shared = self._shared[worker_of[ids], sids[:, 0]]
        first = int(shared[0])
        if first < 0 or (len(shared) > 1 and (shared != first).any()):
            return None
        schema = self._by_shared[first]
        if schema.dtype is None:
            return None
        return InfoColumns(at, schema.keys, schema.types, self._every_env(schema)[ids])

    def take_every(self) -> StepReply | None:
        """Every env's infos at once, as one chunk read in place, when every worker's rows hold
        the one columnar schema of their last such step (the usual synchronous step: one look at
        every env's schema ids); None otherwise (then each worker's reply is taken alone)."""
        ids = self.area.ids.tobytes()
        every = self._uniform_all
        if every is not None and ids == every[0]:
            every[1].reread()
            return every[2]
        if ids == self._no_ids:  # no env returned an info in the rows
            return NO_INFOS
        uniform = [u for u in self._uniform if u is not None]
        if len(uniform) < len(self._uniform) or ids != b"".join(u[0] for u in uniform):
            return None
        chunks = [u[1] for u in uniform]
        first = chunks[0]
        if any(c.keys != first.keys or c.types != first.types or c.records.dtype != first.records.dtype
               for c in chunks):
            return None
        n = len(self.area.ids)
        every_env = first.all_records
        assert every_env is not None  # a worker's uniform chunk is read in place
        chunk = InfoColumns(np.arange(n), first.keys, first.types, every_env[:n], every_env)
        chunk.envs.flags.writeable = False
        reply = StepReply(chunk, None)
        self._uniform_all = (ids, chunk, reply)
        return reply

    def take(self, worker: int, reply: RowsReply) -> StepReply:
        """``reply`` as a :class:`StepReply`: the entries it carried, and those in the rows
        (as columns when the worker's infos all have one flat schema and none ended an episode)."""
        start, stop = self.partition[worker]
        uniform = self._uniform[worker]
        if reply is IN_ROWS and uniform is not None and self.area.ids[start:stop].tobytes() == uniform[0]:
            return StepReply(uniform[1].reread(), None)
        known = self._learn(worker, reply.schemas)
        ids = self.area.ids[start:stop].tolist()
        if not reply.entries:
            sids = {sid for sid, final in ids if not final}
            sids.discard(0)
            if len(sids) == 1 and all(final == 0 for _, final in ids):
                sid = sids.pop()
                schema = known[sid]
                if schema.dtype is not None:
                    present = [i for i, (row_sid, _) in enumerate(ids) if row_sid]
                    if len(present) == stop - start:
                        chunk = self._columns(schema, start, stop)
                        chunk.envs.flags.writeable = False  # handed over again at each such step
                        self._uniform[worker] = (np.array([[sid, 0]] * len(ids), np.int32).tobytes(), chunk)
                        return StepReply(chunk, reply.objects)
                    return StepReply(self._some_columns(schema, start, present), reply.objects)
        return StepReply(self._entries(known, reply, start, ids), reply.objects)

    def learn(self, worker: int, reply: RowsReply) -> StepReply:
        """The schemas ``reply`` brings, learned; its entries alone (the rows of a worker that
        publishes env by env are read env by env: :meth:`entries_of`)."""
        self._learn(worker, reply.schemas)
        return StepReply(list(reply.entries), reply.objects)

    def entries_of(self, worker: int, ids: Sequence[int]) -> list[InfoEntry]:
        """The entries in the rows of ``worker``'s envs ``ids`` (global), read now."""
        area = self.area
        return self._entries(self.schemas[worker], IN_ROWS, 0, [area.ids[i].tolist() for i in ids], ids)

    def _every_env(self, schema: Schema) -> np.ndarray:
        """Every env's first page as records of ``schema`` (a strided view of the rows)."""
        dtype = schema.dtype
        assert dtype is not None  # columns are taken for columnar schemas only
        all_records = self._all_records.get(dtype)
        if all_records is None:
            rows = self.area.rows
            all_records = self._all_records[dtype] = np.ndarray((len(rows),), dtype, rows, 0, (rows.strides[0],))
        return all_records

    def _columns(self, schema: Schema, start: int, stop: int) -> InfoColumns:
        """Envs ``start:stop``'s infos, read in place (valid until the worker's next command)."""
        all_records = self._every_env(schema)
        return InfoColumns(np.arange(start, stop), schema.keys, schema.types, all_records[start:stop], all_records)

    def _some_columns(self, schema: Schema, start: int, present: list[int]) -> InfoColumns:
        """The infos of the envs at ``present`` (local indices), copied out of the rows."""
        at = np.array(present) + start
        return InfoColumns(at, schema.keys, schema.types, self._every_env(schema)[at])

    def _entries(self, known: dict[int, Schema], reply: RowsReply, start: int,
                 ids: list[list[int]], envs: Sequence[int] | None = None) -> list[InfoEntry]:
        """The entries ``reply`` carried and those in the rows whose schema ids are ``ids``: of
        envs ``start, start+1, ...``, or of ``envs`` when given."""
        rows, final_rows = self.area.rows, self.area.final_rows
        entries = list(reply.entries)
        for i, (sid, final) in zip(range(start, start + len(ids)) if envs is None else envs, ids, strict=True):
            if not sid:
                continue
            info = known[sid].unpack(rows[i, 0])
            if final:
                assert final_rows is not None  # a final info comes in same-step mode only
                entries.append(InfoEntry(i, info, True, final_rows[i].copy(),
                                         known[final].unpack(rows[i, 1])))
            else:
                entries.append(InfoEntry(i, info))
        if reply.entries:
            entries.sort(key=_index)
        return entries


def _index(entry: InfoEntry) -> int:
    return entry.index


def rows_round_trip(info: dict, observation_space: Any) -> Callable[[], None]:
    """One env's ``info`` written into rows and read back, as a worker's step and the caller's
    fetch do it (to time it); the first call learns the schema."""
    area = InfoRows(observation_space, 1)
    writer, reader = InfoWriter(area, 0), InfoReader(area, [(0, 1)])
    unpacked = [InfoEntry(0, info)]

    def step() -> None:
        writer.begin()
        reply = writer.reply([] if writer.write(0, info) else unpacked, None)
        reader.take(0, reply or IN_ROWS)

    return step
