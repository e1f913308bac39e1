"""What an info value can be, in one table (:data:`TYPES`): how gymnasium batches it, whether it
is packed into a row of shared memory and how, whether it is read back a column at a time, and
why a value that is not shared is not.

A *schema* is an info's keys in order with each value's row of the table and its detail (the
exact type, or an array's dtype and shape); values of one schema pack into one
:class:`struct.Struct` (:class:`Schema`), and a schema whose every value is a column type is also
a numpy record dtype, so the rows of many envs read as columns without unpacking them. An info
with a value no row shares (an object, a string, a list, a dict subclass, an int beyond int64, a
key that is not a ``str``), or one packing to more than :data:`ROW_BYTES`, travels pickled:
nothing is lost, reordered or converted.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import numpy as np

#: bytes of one env's packed info (per page); a larger info travels pickled
ROW_BYTES = 1024
#: the most schemas one worker registers; infos of further shapes travel pickled
MAX_SCHEMAS = 64

#: how gymnasium (``VectorEnv._add_info``) batches a value: an array of the value's own type, an
#: array of its shape and dtype stacked, a dict batched key by key, or an object array
OWN, STACK, NESTED, OBJECT = "own", "stack", "nested", "object"

#: Python scalars and their struct codes (exact types: a bool is not an int here)
_PY = {bool: "?", int: "q", float: "d"}
#: numpy scalar kinds and sizes -> struct codes
_NP = {("b", 1): "?", ("i", 1): "b", ("i", 2): "h", ("i", 4): "i", ("i", 8): "q", ("u", 1): "B",
       ("u", 2): "H", ("u", 4): "I", ("u", 8): "Q", ("f", 2): "e", ("f", 4): "f", ("f", 8): "d"}


class InfoType:
    """One row of the table: a kind of info value. The defaults describe a value that is not
    shared (it travels pickled) and that gymnasium batches as :attr:`batch` says."""

    name = "other"
    batch = OBJECT

    def detail(self, value: Any) -> Any:
        """The schema detail of ``value`` (hashable, picklable), or None when it is not shared."""
        return None

    def reason(self, value: Any) -> str:
        """Why ``value`` is not shared."""
        return (f"a {type(value).__qualname__} (bool, int, float, numpy numbers and arrays, and plain dicts of "
                "them go in shared memory)")

    def code(self, detail: Any) -> str:
        """The struct format of a value of ``detail``."""
        raise NotImplementedError

    def pack(self, value: Any, out: list) -> None:
        """Append what the struct packs for ``value`` to ``out``."""
        out.append(value)

    def unpack(self, detail: Any, values: Iterator[Any]) -> Any:
        """The value of ``detail`` from the struct's next unpacked item(s), of the type it had."""
        return next(values)

    def kind(self, detail: Any) -> type:
        """The exact Python type of a value of ``detail``."""
        return detail

    def field(self, detail: Any) -> Any:
        """The numpy record field that reads values of ``detail`` as a column (packed the same
        way), or None when they are not read as a column."""
        return None

    def values(self, column: np.ndarray) -> list:
        """A column's values, each a value of its own, of the type the env returned."""
        return list(column)

    def batch_dtype(self, kind: type, field: np.dtype) -> np.dtype:
        """The dtype gymnasium batches a column of values of ``kind`` (record field ``field``)
        into."""
        return np.dtype(kind)


class _PythonScalar(InfoType):
    name, batch = "python", OWN

    def detail(self, value: Any) -> Any:
        return type(value)

    def reason(self, value: Any) -> str:
        return "an int beyond int64's range"

    def code(self, detail: Any) -> str:
        return _PY[detail]

    def field(self, detail: Any) -> Any:
        return np.dtype(_PY[detail])

    def values(self, column: np.ndarray) -> list:
        return column.tolist()


def _numpy_code(kind: type) -> str | None:
    dtype = np.dtype(kind)
    return _NP.get((dtype.kind, dtype.itemsize))


class _NumpyNumber(InfoType):
    name, batch = "number", OWN

    def detail(self, value: Any) -> Any:
        kind = type(value)
        return kind if _numpy_code(kind) is not None else None

    def code(self, detail: Any) -> str:
        return _numpy_code(detail) or ""  # detail() kept known codes only

    def unpack(self, detail: Any, values: Iterator[Any]) -> Any:
        return detail(next(values))

    def field(self, detail: Any) -> Any:
        return np.dtype(detail)


class _NumpyBool(_NumpyNumber):
    """A numpy bool scalar: shared, but gymnasium batches it as an object, so it is no column."""

    name, batch = "numpy_bool", OBJECT

    def field(self, detail: Any) -> Any:
        return None


class _Array(InfoType):
    name, batch = "array", STACK

    def detail(self, value: Any) -> Any:
        return None if value.dtype.hasobject else (value.dtype, value.shape)

    def reason(self, value: Any) -> str:
        return "an object array" if isinstance(value, np.ndarray) and value.dtype.hasobject else \
            "an ndarray subclass"

    def code(self, detail: Any) -> str:
        dtype, shape = detail
        return f"{dtype.itemsize * int(np.prod(shape, dtype=np.int64))}s"

    def pack(self, value: Any, out: list) -> None:
        out.append(value.tobytes())

    def unpack(self, detail: Any, values: Iterator[Any]) -> Any:
        dtype, shape = detail
        return np.frombuffer(next(values), dtype).reshape(shape).copy()

    def kind(self, detail: Any) -> type:
        return np.ndarray

    def field(self, detail: Any) -> Any:
        dtype, shape = detail  # bool arrays of a fixed shape (masks) read as columns
        return (dtype, shape) if dtype == np.bool_ and shape else None

    def values(self, column: np.ndarray) -> list:
        return list(column.copy())  # each env's array its own, not a view of the rows

    def batch_dtype(self, kind: type, field: np.dtype) -> np.dtype:
        return field.base


class _Dict(InfoType):
    """A plain dict: shared when every value in it is (:func:`signature` recurses into it)."""

    name, batch = "dict", NESTED

    def kind(self, detail: Any) -> type:
        return dict


class _Unshared(InfoType):
    """A value of a kind vecenv does not share, batched by gymnasium as ``batch``."""

    def __init__(self, name: str, batch: str, why: str | None = None) -> None:
        self.name, self.batch, self.why = name, batch, why

    def reason(self, value: Any) -> str:
        return self.why or super().reason(value)


PYTHON, NUMBER, NUMPY_BOOL, ARRAY, DICT = _PythonScalar(), _NumpyNumber(), _NumpyBool(), _Array(), _Dict()
#: every row of the table, by name (a schema names its rows, since it is pickled to the caller)
TYPES: dict[str, InfoType] = {row.name: row for row in (
    PYTHON, NUMBER, NUMPY_BOOL, ARRAY, DICT,
    _Unshared("array_subclass", STACK, "an ndarray subclass"),
    _Unshared("dict_subclass", NESTED, "a dict subclass (only plain dicts are shared)"),
    _Unshared("other", OBJECT),
)}
_EXACT: dict[type, InfoType] = {bool: PYTHON, int: PYTHON, float: PYTHON, np.ndarray: ARRAY, dict: DICT}


def info_type(kind: type) -> InfoType:
    """The row of the table for values of exact type ``kind``."""
    row = _EXACT.get(kind)
    if row is None:
        if issubclass(kind, np.number):
            row = NUMBER
        elif issubclass(kind, np.bool_):
            row = NUMPY_BOOL
        elif issubclass(kind, np.ndarray):
            row = TYPES["array_subclass"]
        elif issubclass(kind, dict):
            row = TYPES["dict_subclass"]
        else:
            row = TYPES["other"]
        _EXACT[kind] = row
    return row


def plain(types: tuple[type, ...]) -> bool:
    """Whether values of ``types`` are all Python scalars (a record's ``tolist`` gives them)."""
    return all(kind in _PY for kind in types)


def signature(info: dict, values: list) -> tuple | None:
    """``info``'s schema (appending its values, packed, to ``values``), or None when a value
    cannot go in shared memory."""
    sig: list[tuple[str, str, Any]] = []
    for key, value in info.items():
        if type(key) is not str:
            return None
        row = info_type(type(value))
        if row is DICT:
            detail = signature(value, values)
        else:
            detail = row.detail(value)
            if detail is not None:
                row.pack(value, values)
        if detail is None:
            return None
        sig.append((key, row.name, detail))
    return tuple(sig)


def _format(sig: tuple) -> str:
    return "".join(_format(detail) if name == DICT.name else TYPES[name].code(detail) for _, name, detail in sig)


def _rebuild(sig: tuple, values: Iterator[Any]) -> dict:
    return {key: _rebuild(detail, values) if name == DICT.name else TYPES[name].unpack(detail, values)
            for key, name, detail in sig}


class Schema:
    """How one shape of info is packed (:attr:`struct`) and rebuilt (:meth:`unpack`)."""

    def __init__(self, sig: tuple) -> None:
        self.sig = sig
        self.struct = struct.Struct("=" + _format(sig))
        self.fits = self.struct.size <= ROW_BYTES
        rows = [TYPES[name] for _, name, _ in sig]
        self.keys = tuple(key for key, _, _ in sig)
        #: scalars only: packed from the info's values as they are, rebuilt as a flat dict
        self.flat = all(row in (PYTHON, NUMBER, NUMPY_BOOL) for row in rows)
        #: each value's exact type (empty with nested dicts)
        self.types = () if DICT in rows else tuple(row.kind(d) for row, (_, _, d) in zip(rows, sig, strict=True))
        self._plain = self.flat and plain(self.types)
        fields = [row.field(detail) for row, (_, _, detail) in zip(rows, sig, strict=True)]
        #: the packed layout as a numpy record, to read a worker's rows a column at a time; only
        #: when every value is a column type
        self.dtype = np.dtype(list(zip(self.keys, fields, strict=True))) if self.keys and all(self.keys) and \
            all(field is not None for field in fields) else None

    def unpack(self, row: Any) -> dict:
        """The info packed in ``row``, with each value of the type it had."""
        values = self.struct.unpack_from(row)
        if self._plain:
            return dict(zip(self.keys, values, strict=True))
        return _rebuild(self.sig, iter(values))


def fits_row(info: dict) -> bool:
    """Whether ``info`` would travel in shared memory (its schema fits a row)."""
    sig = signature(info, [])
    return sig is not None and Schema(sig).fits


def why_not_shared(info: dict, prefix: str = "") -> dict[str, str]:
    """Each key of ``info`` (as a path into nested dicts) whose value keeps the info out of
    shared memory, with the reason; ``{"": reason}`` when the info is only too large."""
    found: dict[str, str] = {}
    for key, value in info.items():
        path = f"{prefix}[{key!r}]"
        row = info_type(type(value))
        if type(key) is not str:
            found[path] = f"its key is a {type(key).__name__}, not a str"
        elif row is DICT:
            found.update(why_not_shared(value, path))
        elif signature({key: value}, []) is None or (row is PYTHON and not _packs(value)):
            found[path] = row.reason(value)
    if not found and not fits_row(info):
        found[""] = f"the info packs to more than a row's {ROW_BYTES} bytes"
    return found


def _packs(value: Any) -> bool:
    try:
        struct.pack("=" + _PY[type(value)], value)
    except struct.error:
        return False
    return True
