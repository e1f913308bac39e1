"""Observation slots: batches lent to the user as views, never overwritten while held.

With ``copy=True`` a vector env promises that the observations it returned stay as they were,
whatever later steps do. Copying every batch keeps that promise at the cost of one copy of every
observation on the caller's thread, each step. Slots keep it without the copy: the envs write a
step's observations into one of a few observation buffers (*slots*), the engine hands out views
of it, and before the next step the engine picks a slot that no array the user holds refers to.
Every lent array is a view of one byte array per slot, which owns nothing; numpy points any view
made from a view at that first array, so its reference count says whether the user still holds
any array of the slot (a ``torch.from_numpy`` tensor or a ``memoryview`` holds one too).

The last slot is never lent: steps go there, and are copied out as before, while the user holds
every other one. A shared cell of three int64 says which slot the envs write next, which one
they wrote before, and how many times the choice moved, so every env group, in any thread or
process, follows the engine::

    step t:    envs write slot 0 -> user gets views of slot 0 (holds them while deciding)
    step t+1:  slot 0 held -> cell = (1, 0, g+1) -> envs write slot 1 -> views of slot 1
    step t+2:  slot 0 free again -> cell = (0, 1, g+2) -> ...; both held -> slot 2 (copied out)

After every call the current slot holds every env's latest observation. When the choice moves,
each group that runs the next command first copies its rows from the previous slot (in its own
thread or process), and the engine copies the rows of the groups that get no command; a row a
step leaves as it was (an env restarted in the step) thus keeps its last observation.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["LEND_MIN_BYTES", "SLOTS", "Lender"]

#: slots where observations are lent: two lent in turn, and the one never lent
SLOTS = 3
#: smallest batch of observations worth lending: below it a copy costs less than lending does
LEND_MIN_BYTES = 64 * 1024


class Lender:
    """Lends the slots ``slots[:-1]`` (fixed leaves only) of one observation batch.

    ``slots``: the :class:`~vecenv.spaces.buffers.BatchBuffer` of each slot, the last one never
    lent; ``regions``: each slot's bytes as a ``memoryview`` of its own; ``cell``: the shared
    index of the slot the envs write next.
    """

    def __init__(self, slots: list[Any], regions: list[memoryview], cell: np.ndarray) -> None:
        self.slots, self.cell = slots, cell
        self.private = len(slots) - 1
        self.moved = False  # the last choice moved to another slot
        self._lent = [np.frombuffer(region, np.uint8) for region in regions[:-1]]  # lent views' base
        self._free = [sys.getrefcount(self._lent[k]) for k in range(self.private)]  # as held() counts
        start = np.frombuffer(regions[0], np.uint8, 1).ctypes.data
        self._leaves = [(leaf.array.dtype, leaf.array.shape, leaf.array.ctypes.data - start, leaf.array.nbytes)
                        for leaf in slots[0].leaves]

    def held(self, k: int) -> bool:
        """Whether any array made from a lent view of slot ``k`` is still alive."""
        return sys.getrefcount(self._lent[k]) > self._free[k]

    def choose(self, idle_rows: Sequence[tuple[int, int]] = ()) -> None:
        """Before a command that writes observations: point the cell at a slot the user does not
        hold (the current one when it is free, else another, else the never-lent one). When it
        moves, the rows ``(start, stop)`` of groups that get no command are copied over."""
        current = int(self.cell[0])
        self.moved = False
        if current != self.private and not self.held(current):
            return
        chosen = next((k for k in range(self.private) if k != current and not self.held(k)), self.private)
        if chosen == current:
            return
        self.cell[1], self.cell[0] = current, chosen
        self.cell[2] += 1
        self.moved = True
        for start, stop in idle_rows:
            self.restore(start, stop)

    def restore(self, start: int, stop: int) -> None:
        """Rows ``start:stop`` of the slot before the last move, copied into the current one
        (their group got no command, or failed before it wrote them)."""
        now, before = self.slots[int(self.cell[0])], self.slots[int(self.cell[1])]
        now.rows(start, stop).copy_from(before.rows(start, stop))

    def lend(self) -> Any:
        """The current slot's batch: views where it may be lent, else a copy."""
        k = int(self.cell[0])
        buffer = self.slots[k]
        if k == self.private:
            return buffer.read(True)
        root = self._lent[k]
        arrays = [root[offset:offset + nbytes].view(dtype).reshape(shape)
                  for dtype, shape, offset, nbytes in self._leaves]
        return buffer.assemble(arrays)
