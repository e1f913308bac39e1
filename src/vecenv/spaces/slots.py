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
every other one. A shared int64 *cell* says which slot the envs write next, so every env group,
in any thread or process, follows the engine's choice::

    step t:    envs write slot 0 -> user gets views of slot 0 (holds them while deciding)
    step t+1:  slot 0 held -> cell = 1 -> envs write slot 1 -> views of slot 1
    step t+2:  slot 0 free again -> cell = 0 -> ...; both held -> cell = 2 (the copied slot)
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

__all__ = ["Lender"]


class Lender:
    """Lends the slots ``slots[:-1]`` (fixed leaves only) of one observation batch.

    ``slots``: the :class:`~vecenv.spaces.buffers.BatchBuffer` of each slot, the last one never
    lent; ``regions``: each slot's bytes as a ``memoryview`` of its own; ``cell``: the shared
    index of the slot the envs write next.
    """

    def __init__(self, slots: list[Any], regions: list[memoryview], cell: np.ndarray) -> None:
        self.slots, self.cell = slots, cell
        self.private = len(slots) - 1
        self._lent = [np.frombuffer(region, np.uint8) for region in regions[:-1]]  # lent views' base
        self._free = [sys.getrefcount(self._lent[k]) for k in range(self.private)]  # as held() counts
        start = np.frombuffer(regions[0], np.uint8, 1).ctypes.data
        self._leaves = [(leaf.array.dtype, leaf.array.shape, leaf.array.ctypes.data - start, leaf.array.nbytes)
                        for leaf in slots[0].leaves]

    def held(self, k: int) -> bool:
        """Whether any array made from a lent view of slot ``k`` is still alive."""
        return sys.getrefcount(self._lent[k]) > self._free[k]

    def choose(self) -> int | None:
        """Point the cell at a slot the user does not hold (the current one when it is free,
        else another, else the never-lent one); the slot it pointed at before, if it moved."""
        current = int(self.cell[0])
        if current != self.private and not self.held(current):
            return None
        for k in range(self.private):
            if k != current and not self.held(k):
                self.cell[0] = k
                return current
        if current == self.private:
            return None
        self.cell[0] = self.private
        return current

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
