"""Batch buffers: storage for ``n`` items of any Gymnasium space, one array per leaf.

A :class:`BatchBuffer` mirrors the structure of a space. Fixed-shape leaves (Box, Discrete,
MultiDiscrete, MultiBinary) are numpy arrays of shape ``(n, *leaf.shape)`` that can live in any
memory (shared memory for the process transport); every other leaf (Text, Graph, Sequence, a
user's own Space) is an object array that a transport ships by value. Dict and Tuple spaces nest.
What counts as which follows gymnasium's singledispatch vector utilities, not the exact class:
a subclass of Dict or Box batches as its base, and a type a user registered with gymnasium's
``concatenate`` is read back through it.

Workers write one env's item into one row (:meth:`BatchBuffer.write`); the engine reads the whole
batch or some rows in the layout gymnasium's ``batch_space`` gives (dict of arrays, tuple of
arrays, tuple of items for custom spaces).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from vecenv.spaces.checks import collect, misfit, shape_of, split
from vecenv.spaces.slots import LEND_MIN_BYTES, SLOTS, Lender

__all__ = ["BatchBuffer", "Leaf", "StepBuffers", "aligned", "is_fixed_leaf", "leaves_of", "slots_for"]

_FIXED = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
_ALIGN = 64

_NDARRAY = np.ndarray


def batching(space: spaces.Space) -> str:
    """How gymnasium's vector utilities batch ``space``: ``"dict"``, ``"tuple"``, ``"fixed"``
    (an array per leaf), ``"custom"`` (a tuple of items) or ``"own"`` (a ``concatenate`` a user
    registered). Decided by the implementation gymnasium's singledispatch ``batch_space`` picks
    for the space's class, which also serves its subclasses and the types users register."""
    impl = batch_space.dispatch(type(space))
    if impl is batch_space.dispatch(spaces.Dict):
        return "dict"
    if impl is batch_space.dispatch(spaces.Tuple):
        return "tuple"
    if any(impl is batch_space.dispatch(base) for base in _FIXED):
        return "fixed"
    custom = concatenate.dispatch(spaces.Space)
    return "custom" if concatenate.dispatch(type(space)) is custom else "own"


def is_fixed_leaf(space: spaces.Space) -> bool:
    """True for spaces whose items are fixed-shape numeric arrays (shared-memory friendly)."""
    return batching(space) == "fixed"


@dataclass
class Leaf:
    """One leaf of a space: where it sits (``path``), its space, and its storage."""

    path: tuple[str | int, ...]
    space: spaces.Space
    array: np.ndarray
    fixed: bool
    shape: tuple[int, ...] = field(init=False)  # the shape of one item (one row)
    own: bool = field(init=False)  # batched by a gymnasium function a user registered

    def __post_init__(self) -> None:
        self.shape = self.array.shape[1:]
        self.own = not self.fixed and batching(self.space) == "own"

    @property
    def name(self) -> str:
        return "".join(f"[{p!r}]" for p in self.path)


def _tree(space: Any, found: list[tuple[tuple, Any]], path: tuple = ()) -> Any:
    """The shape of ``space``'s tree: a leaf's index, ``("dict", [(key, tree)...])`` or
    ``("tuple", [tree...])``; appends each leaf's ``(path, space)`` to ``found``, in leaf order."""
    kind = batching(space)
    if kind == "dict":
        return ("dict", [(k, _tree(s, found, (*path, k))) for k, s in space.spaces.items()])
    if kind == "tuple":
        return ("tuple", [_tree(s, found, (*path, i)) for i, s in enumerate(space.spaces)])
    found.append((path, space))
    return len(found) - 1


def leaves_of(space: spaces.Space) -> list[tuple[tuple, Any]]:
    """``(path, leaf space)`` of each leaf of ``space``, in leaf order."""
    found: list[tuple[tuple, Any]] = []
    _tree(space, found)
    return found


class BatchBuffer:
    """Storage for ``n`` items of ``space``, one array per leaf.

    Args:
        space: the space of ONE item (e.g. ``single_observation_space``).
        n: number of rows.
        memory: optional writable buffer (``memoryview``, ``mmap``, ``RawArray``...) of at least
            :meth:`nbytes` bytes that the fixed leaves are laid out in; ``None`` allocates with numpy.
        offset: byte offset of this buffer inside ``memory``.
    """

    def __init__(self, space: spaces.Space, n: int, memory: Any = None, offset: int = 0) -> None:
        self.space = space
        self.n = n
        self.leaves: list[Leaf] = []
        pos = offset
        found: list[tuple[tuple, Any]] = []
        self._tree = _tree(space, found)
        for path, leaf_space in found:
            if not is_fixed_leaf(leaf_space):
                self.leaves.append(Leaf(path, leaf_space, np.full(n, None, dtype=object), False))
                continue
            shape = (n, *leaf_space.shape)
            if memory is None:
                array = np.zeros(shape, leaf_space.dtype)
            else:
                pos = aligned(pos)
                array = np.ndarray(shape, leaf_space.dtype, buffer=memory, offset=pos)
                pos += array.nbytes
            self.leaves.append(Leaf(path, leaf_space, array, True))
        self.has_objects = any(not leaf.fixed for leaf in self.leaves)
        self._single_array = (
            self.leaves[0].array
            if len(self.leaves) == 1 and self._tree == 0 and self.leaves[0].fixed
            else None
        )
        self._single_shape = self.leaves[0].shape if self._single_array is not None else None
        #: row -> the item as the caller passed it, for rows assigned a batch that is not numpy
        #: arrays of the leaves' dtypes (see :meth:`assign`); emptied in place, never rebound
        self.unconverted: dict[int, Any] = {}
        self._batched: spaces.Space | None = None

    # ----------------------------------------------------------------- layout
    @staticmethod
    def nbytes(space: spaces.Space, n: int) -> int:
        """Bytes of shared memory the fixed leaves of ``n`` items need (with alignment)."""
        pos = 0
        for _, leaf_space in leaves_of(space):
            if is_fixed_leaf(leaf_space):
                row = math.prod(leaf_space.shape) * np.dtype(leaf_space.dtype).itemsize
                pos = aligned(pos) + n * row
        return aligned(pos)

    def rows(self, start: int, stop: int) -> BatchBuffer:
        """A buffer over rows ``start:stop`` that shares this buffer's memory."""
        view = copy.copy(self)  # the same space and layout, over other arrays
        view.n = stop - start
        view.leaves = [Leaf(lf.path, lf.space, lf.array[start:stop], lf.fixed) for lf in self.leaves]
        view._single_array = view.leaves[0].array if self._single_array is not None else None
        view.unconverted = {}
        view._batched = None
        return view

    # ----------------------------------------------------------------- writing
    def write(self, i: int, item: Any, what: str = "observation") -> None:
        """Store one item (a single env's observation) in row ``i``.

        Each fixed leaf must have exactly its leaf's shape (nothing is broadcast); otherwise a
        ``ValueError`` names the leaf, the space and the shape that came, and the row is left
        as it was.
        """
        single = self._single_array
        if single is not None:
            if type(item) is not _NDARRAY or item.shape != self._single_shape:
                if shape_of(item) != self._single_shape:
                    raise misfit(what, self.leaves[0], item)
            single[i] = item
            return
        values: list = []
        split(self._tree, self.leaves, item, what, values)
        for leaf, value in zip(self.leaves, values, strict=True):
            leaf.array[i] = value

    def single_leaf(self) -> tuple[np.ndarray | None, tuple[int, ...] | None]:
        """``(rows, shape)`` when the space is one fixed leaf: a caller writing many items may
        store an ndarray of exactly ``shape`` at ``rows[i]`` itself, as :meth:`write` would;
        ``(None, None)`` otherwise."""
        return self._single_array, self._single_shape

    def check(self, item: Any, what: str = "observation") -> None:
        """Raise as :meth:`write` would for ``item``, writing nothing."""
        split(self._tree, self.leaves, item, what, [])

    def get_objects(self) -> list[np.ndarray] | None:
        """The object leaves' contents, for a transport to ship (``None`` when all fixed)."""
        if not self.has_objects:
            return None
        return [leaf.array.copy() for leaf in self.leaves if not leaf.fixed]

    def set_objects(self, objects: list[np.ndarray] | None, rows: Any = slice(None)) -> None:
        """Store object-leaf contents shipped by :meth:`get_objects` into ``rows``."""
        if objects is None:
            return
        it = iter(objects)
        for leaf in self.leaves:
            if not leaf.fixed:
                leaf.array[rows] = next(it)

    def assign(self, batch: Any, rows: Any = None, what: str = "actions") -> None:
        """Validate ``batch`` (a batched value for ``len(rows)`` items) and store it.

        Raises ``ValueError``/``TypeError`` naming the leaf, the expected shape and dtype, and
        what was given, before anything is written. When an array leaf of ``batch`` is not a
        numpy array of the leaf's dtype (a float64 batch for a float32 Box, a list of ints),
        the rows also keep, in :attr:`unconverted`, each item as ``gymnasium.vector.utils.iterate``
        yields it: gymnasium's vector envs hand the envs those, so the engine sends them with the step.
        """
        single = self._single_array
        if single is not None and type(batch) is np.ndarray and batch.dtype == single.dtype:
            # the common case (one fixed leaf, a batch of its dtype): only the shape to check
            if rows is None and batch.shape == single.shape:
                single[...] = batch
                if self.unconverted:
                    self.unconverted.clear()
                return
            if rows is not None and batch.shape == (len(rows), *single.shape[1:]):
                single[rows] = batch
                if self.unconverted:
                    self._keep_unconverted(batch, rows, True)
                return
        k = self.n if rows is None else len(rows)
        values: list = []
        handed: list = []
        exact = collect(self._tree, self.leaves, batch, k, what, values, handed)
        where = ... if rows is None else rows
        for leaf, value in zip(self.leaves, values, strict=True):
            leaf.array[where] = value
        if not exact:  # the batch as it came, but with exactly cast leaves as cast
            batch = _assemble(self._tree, handed)
        self._keep_unconverted(batch, rows, exact)

    def _keep_unconverted(self, batch: Any, rows: Any, exact: bool) -> None:
        """Record (or, for a batch the buffer holds exactly, forget) the items as they were passed."""
        unconverted = self.unconverted
        if exact:
            if unconverted and rows is None:
                unconverted.clear()
            elif unconverted:
                for r in rows:
                    unconverted.pop(int(r), None)
            return
        if self._batched is None:
            self._batched = batch_space(self.space, self.n)
        targets = range(self.n) if rows is None else [int(r) for r in rows]
        unconverted.update(zip(targets, iterate(self._batched, batch), strict=True))

    # ----------------------------------------------------------------- reading
    def read(self, copy: bool = True) -> Any:
        """All rows in gymnasium's batched layout."""
        if self._single_array is not None:
            return self._single_array.copy() if copy else self._single_array
        return _read(self._tree, self.leaves, slice(None), copy)

    def copy_from(self, other: BatchBuffer) -> None:
        """Every row of ``other`` (a buffer of the same space and size), copied into this one."""
        for mine, theirs in zip(self.leaves, other.leaves, strict=True):
            np.copyto(mine.array, theirs.array)

    def assemble(self, arrays: list[np.ndarray]) -> Any:
        """One array per (fixed) leaf, in leaf order, in gymnasium's batched layout."""
        return arrays[0] if self._single_array is not None else _assemble(self._tree, arrays)

    def read_rows(self, rows: Sequence[int] | np.ndarray) -> Any:
        """Some rows (always a copy), in gymnasium's batched layout."""
        return _read(self._tree, self.leaves, np.asarray(rows, dtype=np.intp), True)

    def item(self, i: int) -> Any:
        """Row ``i`` as a single item (views into the buffer for array leaves)."""
        if self._single_array is not None:
            return self._single_array[i]
        return _item(self._tree, self.leaves, i)


def aligned(pos: int, to: int = _ALIGN) -> int:
    """``pos`` rounded up to a multiple of ``to`` (a cache line: parts of a block never share one)."""
    return (pos + to - 1) // to * to


def _assemble(tree: Any, values: list) -> Any:
    """One value per leaf (in leaf order) put back in the tree's dicts and tuples."""
    if isinstance(tree, int):
        return values[tree]
    if tree[0] == "dict":
        return {key: _assemble(sub, values) for key, sub in tree[1]}
    return tuple(_assemble(sub, values) for sub in tree[1])


def _read(tree: Any, leaves: list[Leaf], rows: Any, copy: bool) -> Any:
    if isinstance(tree, int):
        leaf = leaves[tree]
        data = leaf.array[rows]
        if not leaf.fixed:
            if leaf.own:  # a concatenate the user registered for this type makes the batch
                out = create_empty_array(leaf.space, len(data))
                return concatenate(leaf.space, list(data), out)  # type: ignore[arg-type]
            return tuple(data)
        return data.copy() if copy and isinstance(rows, slice) else data
    if tree[0] == "dict":
        return {key: _read(sub, leaves, rows, copy) for key, sub in tree[1]}
    return tuple(_read(sub, leaves, rows, copy) for sub in tree[1])


def _item(tree: Any, leaves: list[Leaf], i: int) -> Any:
    if isinstance(tree, int):
        return leaves[tree].array[i]
    if tree[0] == "dict":
        return {key: _item(sub, leaves, i) for key, sub in tree[1]}
    return tuple(_item(sub, leaves, i) for sub in tree[1])


class StepBuffers:
    """Everything one step writes: observations, actions, rewards and the two episode flags.

    Built once per vector env; a worker gets :meth:`rows` for the envs it holds, so it writes its
    results in place. ``memory`` (optional) is one block of :meth:`nbytes` bytes that every fixed
    array is laid out in, for transports that share memory across processes.
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        n: int,
        memory: Any = None,
        slots: int = 1,
    ) -> None:
        self.n = n
        obs_bytes = BatchBuffer.nbytes(observation_space, n)
        act_bytes = BatchBuffer.nbytes(action_space, n)
        if memory is None:  # one block all the same, here a private one (slots are lent from it)
            memory = memoryview(bytearray(StepBuffers.nbytes(observation_space, action_space, n, slots)))
        self.slots = [BatchBuffer(observation_space, n, memory, k * obs_bytes) for k in range(slots)]
        self.actions = BatchBuffer(action_space, n, memory, slots * obs_bytes)
        flags = slots * obs_bytes + act_bytes
        self.rewards = np.frombuffer(memory, np.float64, n, flags)
        self.terminations = np.frombuffer(memory, np.bool_, n, flags + 8 * n)
        self.truncations = np.frombuffer(memory, np.bool_, n, flags + 9 * n)
        self.slot_cell = np.frombuffer(memory, np.int64, 3, aligned(flags + 10 * n))
        self.lender = None
        if slots > 1:
            regions = [memory[k * obs_bytes:(k + 1) * obs_bytes] for k in range(slots)]
            self.lender = Lender(self.slots, regions, self.slot_cell)

    @property
    def observations(self) -> BatchBuffer:
        """The observation slot the envs write next and the engine reads (:mod:`.slots`)."""
        return self.slots[self.slot_cell[0]]

    @staticmethod
    def nbytes(observation_space: spaces.Space, action_space: spaces.Space, n: int, slots: int = 1) -> int:
        """Size of the memory block that holds every fixed array of ``n`` envs."""
        flags = slots * BatchBuffer.nbytes(observation_space, n) + BatchBuffer.nbytes(action_space, n)
        return aligned(flags + 10 * n) + 24

    def rows(self, start: int, stop: int) -> StepBuffers:
        """The buffers of envs ``start:stop``, sharing memory with these."""
        view = object.__new__(StepBuffers)
        view.n = stop - start
        view.slots = [buffer.rows(start, stop) for buffer in self.slots]
        view.slot_cell = self.slot_cell
        view.lender = None
        view.actions = self.actions.rows(start, stop)
        view.rewards = self.rewards[start:stop]
        view.terminations = self.terminations[start:stop]
        view.truncations = self.truncations[start:stop]
        return view


def slots_for(space: spaces.Space, n: int) -> int:
    """How many observation slots (:mod:`.slots`) ``n`` observations of ``space`` get where the
    engine would copy them out: :data:`~.slots.SLOTS` when every leaf is a fixed array and the
    batch is large, else 1."""
    fixed = all(is_fixed_leaf(leaf) for _, leaf in leaves_of(space))
    return SLOTS if fixed and BatchBuffer.nbytes(space, n) >= LEND_MIN_BYTES else 1
