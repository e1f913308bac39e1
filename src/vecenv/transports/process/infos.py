"""Infos through shared memory: each env's info dict packed into its own row of the block, under
a schema both sides know, so that a step whose envs return the usual infos needs no message.

    worker (InfoWriter)                      shared memory                  caller (InfoReader.take)
    -------------------                      -------------                  ------------------------
    write(): each step's info, as the
    group steps its env; reply(): the
    entries of other commands (resets):
      its schema (keys, exact types) ------> ids[env, page] = schema id
      its values, packed ------------------> rows[env, page] = bytes
      SAME_STEP: the final observation ----> final_obs[env]
    schemas new to the caller, and entries
    that do not fit, go pickled with the
    reply (a BlockReply)                                                    entries rebuilt with
                                                                            the values' own types

Page 0 holds an entry's ``info``; page 1 its ``final_info`` when the entry ended an episode
(SAME_STEP), which also puts the final observation in ``final_obs``.

A schema is the info's keys in order with each value's exact type: Python ``bool``/``int``/
``float``, numpy scalars of a numeric or bool type, numpy arrays (by dtype and shape), and plain
dicts of those. An info with anything else (an object, a string, a list, a dict subclass, an int
out of int64's range, a key that is not a ``str``), or one too large for its row, travels pickled
as before: nothing is lost, reordered or converted. A worker registers at most
:data:`MAX_SCHEMAS` schemas, so infos whose shape keeps changing stop costing new ones.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from vecenv.spaces.buffers import BatchBuffer
from vecenv.transports.process.shm import aligned
from vecenv.worker import InfoEntry, StepReply
from vecenv.worker.commands import InfoColumns

__all__ = ["IN_BLOCK", "BlockReply", "InfoBlock", "InfoReader", "InfoWriter", "LocalInfos", "MAX_SCHEMAS", "ROW_BYTES", "fits_in_block",
           "signature", "why_not_shared"]

#: bytes of one env's packed info (per page); a larger info travels pickled
ROW_BYTES = 1024
#: the most schemas one worker registers; infos of further shapes travel pickled
MAX_SCHEMAS = 64
#: Python scalars and their struct codes (exact types: a bool is not an int here)
_PY = {bool: "?", int: "q", float: "d"}
#: numpy scalar kinds and sizes -> struct codes
_NP = {("b", 1): "?", ("i", 1): "b", ("i", 2): "h", ("i", 4): "i", ("i", 8): "q", ("u", 1): "B",
       ("u", 2): "H", ("u", 4): "I", ("u", 8): "Q", ("f", 2): "e", ("f", 4): "f", ("f", 8): "d"}
_SCALAR, _ARRAY, _DICT = 0, 1, 2


def _numpy_code(kind: type) -> str | None:
    dtype = np.dtype(kind)
    return _NP.get((dtype.kind, dtype.itemsize))


def signature(info: dict, values: list) -> tuple | None:
    """``info``'s schema (appending its values, in order, to ``values``), or None when a value
    cannot go in shared memory."""
    sig: list[tuple[str, int, Any]] = []
    for key, value in info.items():
        if type(key) is not str:
            return None
        kind = type(value)
        if kind in _PY:
            sig.append((key, _SCALAR, kind))
            values.append(value)
        elif kind is np.ndarray:
            if value.dtype.hasobject:
                return None
            sig.append((key, _ARRAY, (value.dtype, value.shape)))
            values.append(value.tobytes())
        elif kind is dict:
            sub = signature(value, values)
            if sub is None:
                return None
            sig.append((key, _DICT, sub))
        elif issubclass(kind, (np.number, np.bool_)) and _numpy_code(kind) is not None:
            sig.append((key, _SCALAR, kind))
            values.append(value)
        else:
            return None
    return tuple(sig)


def _format(sig: tuple) -> str:
    codes = []
    for _, form, detail in sig:
        if form == _SCALAR:
            codes.append(_PY.get(detail) or _numpy_code(detail) or "")  # signature() kept known codes only
        elif form == _ARRAY:
            dtype, shape = detail
            codes.append(f"{dtype.itemsize * int(np.prod(shape, dtype=np.int64))}s")
        else:
            codes.append(_format(detail))
    return "".join(codes)


class Schema:
    """How one shape of info is packed (:attr:`struct`) and rebuilt (:meth:`unpack`)."""

    def __init__(self, sig: tuple) -> None:
        self.sig = sig
        self.struct = struct.Struct("=" + _format(sig))
        self.fits = self.struct.size <= ROW_BYTES
        #: scalars only (no arrays, no nested dicts): packed from and rebuilt as a flat dict
        self.flat = all(form == _SCALAR for _, form, _ in sig)
        self.keys = tuple(key for key, _, _ in sig)
        self.types = tuple(detail for _, _, detail in sig) if self.flat else ()
        self._plain = self.flat and all(kind in _PY for kind in self.types)
        #: the packed layout as a numpy record, to read a worker's rows a column at a time; only
        #: for types gymnasium batches into arrays of their own (a numpy bool is an object to it)
        columnar = self.flat and self.keys and all(self.keys) and all(
            kind in _PY or issubclass(kind, np.number) for kind in self.types)
        self.dtype = np.dtype([(key, _PY.get(kind) or np.dtype(kind)) for key, kind in
                               zip(self.keys, self.types, strict=True)]) if columnar else None

    def unpack(self, row: Any) -> dict:
        """The info packed in ``row``, with each value of the type it had."""
        values = self.struct.unpack_from(row)
        if self._plain:
            return dict(zip(self.keys, values, strict=True))
        if self.flat:
            return {key: value if kind in _PY else kind(value)
                    for key, kind, value in zip(self.keys, self.types, values, strict=True)}
        return _rebuild(self.sig, iter(values))


def _rebuild(sig: tuple, values: Any) -> dict:
    out = {}
    for key, form, detail in sig:
        if form == _SCALAR:
            value = next(values)
            out[key] = value if detail in _PY else detail(value)
        elif form == _ARRAY:
            dtype, shape = detail
            out[key] = np.frombuffer(next(values), dtype).reshape(shape).copy()
        else:
            out[key] = _rebuild(detail, values)
    return out


class InfoBlock:
    """The block's info area for ``n`` envs: schema ids and packed rows (two pages each), and
    one observation per env for SAME_STEP's final observations."""

    def __init__(self, observation_space: Any, n: int, memory: Any, offset: int) -> None:
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

    def part(self, start: int, stop: int) -> InfoBlock:
        """The area of envs ``start:stop``, sharing this one's memory."""
        view = object.__new__(InfoBlock)
        view.ids, view.rows = self.ids[start:stop], self.rows[start:stop]
        view.final_rows = None if self.final_rows is None else self.final_rows[start:stop]
        return view


class BlockReply(NamedTuple):
    """A worker's reply whose info entries are partly in the block: the ones that were not,
    the object leaves, and the schemas the caller has not seen (``(id, signature)`` pairs)."""

    entries: Sequence[InfoEntry]
    objects: list | None
    schemas: list[tuple[int, tuple]]


#: the reply of a worker whose info entries are all in the block, under schemas the caller knows
IN_BLOCK = BlockReply((), None, [])


class InfoWriter:
    """The worker's side: packs its group's info entries into its envs' rows."""

    def __init__(self, area: InfoBlock, start: int) -> None:
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

    def reply(self, entries: Sequence[InfoEntry], objects: list | None) -> BlockReply | None:
        """The message a command's result needs besides the block: the entries that did not
        fit, the object leaves and the schemas new to the caller (None: nothing to send)."""
        rest = [entry for entry in entries if not self._pack(entry, self.new)]
        if not rest and not self.new and objects is None:
            return None
        return BlockReply(rest, objects, self.new)

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
        """``(id, schema, values)`` for ``info``; None when it cannot go in the block."""
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
    """The caller's side: rebuilds the info entries a worker left in the block."""

    def __init__(self, area: InfoBlock, partition: Sequence[tuple[int, int]]) -> None:
        self.area = area
        self.partition = partition
        self.schemas: list[dict[int, Schema]] = [{} for _ in partition]
        #: per worker, its rows' schema ids (as bytes) when every env holds one columnar schema,
        #: and the chunk read then: the usual step is recognised by one comparison and handed over
        #: as that chunk again, without building its parts again
        self._uniform: list[tuple[bytes, InfoColumns] | None] = [None for _ in partition]
        self._wholes: dict[np.dtype, np.ndarray] = {}  # a columnar dtype -> every env's rows as records

    def add(self, start: int, stop: int) -> int:
        """Read envs ``start:stop`` too (a group outside the partition: the inline one); its index."""
        self.partition = [*self.partition, (start, stop)]
        self.schemas.append({})
        self._uniform.append(None)
        return len(self.partition) - 1

    def forget(self, worker: int) -> None:
        """A new process serves ``worker``: its schema ids start over."""
        self.schemas[worker] = {}
        self._uniform[worker] = None

    def take(self, worker: int, reply: BlockReply) -> StepReply:
        """``reply`` as a :class:`StepReply`: the entries it carried, and those in the block
        (as columns when the worker's infos all have one flat schema and none ended an episode)."""
        start, stop = self.partition[worker]
        uniform = self._uniform[worker]
        if reply is IN_BLOCK and uniform is not None and self.area.ids[start:stop].tobytes() == uniform[0]:
            return StepReply(uniform[1].again(), None)
        known = self.schemas[worker]
        for sid, sig in reply.schemas:
            known[sid] = Schema(sig)
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

    def _whole(self, schema: Schema) -> np.ndarray:
        """Every env's first page as records of ``schema`` (a strided view of the block)."""
        dtype = schema.dtype
        assert dtype is not None  # columns are taken for columnar schemas only
        whole = self._wholes.get(dtype)
        if whole is None:
            rows = self.area.rows
            whole = self._wholes[dtype] = np.ndarray((len(rows),), dtype, rows, 0, (rows.strides[0],))
        return whole

    def _columns(self, schema: Schema, start: int, stop: int) -> InfoColumns:
        """Envs ``start:stop``'s infos, read in place (valid until the worker's next command)."""
        whole = self._whole(schema)
        return InfoColumns(np.arange(start, stop), schema.keys, schema.types, whole[start:stop], whole)

    def _some_columns(self, schema: Schema, start: int, present: list[int]) -> InfoColumns:
        """The infos of the envs at ``present`` (local indices), copied out of the block."""
        at = np.array(present) + start
        return InfoColumns(at, schema.keys, schema.types, self._whole(schema)[at])

    def _entries(self, known: dict[int, Schema], reply: BlockReply, start: int,
                 ids: list[list[int]]) -> list[InfoEntry]:
        rows, final_rows = self.area.rows, self.area.final_rows
        entries = list(reply.entries)
        for i, (sid, final) in enumerate(ids, start):
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


class LocalInfos:
    """Infos of a group that steps in the caller's process, through the same rows as the
    workers': its envs' infos then join theirs as one more part of the same records, and a
    full batch is read at once (:attr:`InfoColumns.whole`)."""

    def __init__(self, reader: InfoReader, start: int, stop: int) -> None:
        self.reader = reader
        self.index = reader.add(start, stop)
        self.writer = InfoWriter(reader.area.part(start, stop), start)

    def take(self, reply: Any) -> Any:
        """The group's reply to a command, its infos read as a worker's would be."""
        if type(reply) is not StepReply:
            return reply
        message = self.writer.reply(reply.entries, reply.objects)
        if message is None:
            return self.reader.take(self.index, IN_BLOCK) if self.writer.dirty else reply
        return self.reader.take(self.index, message)


def _index(entry: InfoEntry) -> int:
    return entry.index


def fits_in_block(info: dict) -> bool:
    """Whether ``info`` would travel in shared memory (its schema fits a row)."""
    sig = signature(info, [])
    return sig is not None and Schema(sig).fits


def why_not_shared(info: dict, prefix: str = "") -> dict[str, str]:
    """Each key of ``info`` (as a path into nested dicts) whose value keeps the info out of
    shared memory, with the reason; ``{"": reason}`` when the info is only too large."""
    found: dict[str, str] = {}
    for key, value in info.items():
        path = f"{prefix}[{key!r}]"
        kind = type(value)
        if type(key) is not str:
            found[path] = f"its key is a {type(key).__name__}, not a str"
        elif kind is dict:
            found.update(why_not_shared(value, path))
        elif kind is int and not -(2**63) <= value < 2**63:
            found[path] = "an int beyond int64's range"
        elif kind is np.ndarray and value.dtype.hasobject:
            found[path] = "an object array"
        elif signature({key: value}, []) is None:
            found[path] = (f"a {kind.__qualname__} (bool, int, float, numpy numbers and arrays, and "
                           "plain dicts of them go in shared memory)")
    if not found and not fits_in_block(info):
        found[""] = f"the info packs to more than a row's {ROW_BYTES} bytes"
    return found

