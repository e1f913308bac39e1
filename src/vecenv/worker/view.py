"""What an env group's step touches for every env, gathered once (:class:`StepView`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from gymnasium.vector import AutoresetMode

if TYPE_CHECKING:
    from vecenv.worker.group import EnvGroup

__all__ = ["StepView"]


class StepView(NamedTuple):
    """What a step touches for every env, gathered once rather than looked up env by env: views
    of the group's buffers and reset flags, its list of envs and the observation shape. Made
    afresh when the buffers or an env change (by the thread that steps the group: on a
    free-threaded Python the objects a thread uses on every env are best its own)."""

    observations: Any  # the observation buffer's rows (a BatchBuffer)
    action: Callable[[int], Any]  # env j's action in the buffer
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    needs_reset: np.ndarray
    envs: list[Any]
    rows: np.ndarray | None  # the observation rows when the space is one fixed leaf
    shape: tuple[int, ...] | None  # the shape an observation written there must have
    next_step: bool  # the autoreset mode is NEXT_STEP
    same_step: bool  # ... SAME_STEP
    cell: np.ndarray  # the shared cell naming the slot the engine chose (:mod:`vecenv.spaces.slots`)

    @classmethod
    def of(cls, group: EnvGroup, slot: int) -> StepView:
        """``group``'s view of observation slot ``slot``, made now."""
        buffers = group._attached
        b = buffers.rows(0, buffers.n)
        observations = b.slots[slot]
        rows, shape = observations.single_leaf()
        actions, _ = b.actions.single_leaf()  # one array: its rows are the actions, as item() gives
        mode = group.autoreset_mode
        return cls(observations, b.actions.item if actions is None else actions.__getitem__, b.rewards,
                   b.terminations, b.truncations, group._needs_reset[:], list(group.envs), rows,
                   None if shape is None else tuple(list(shape)), mode is AutoresetMode.NEXT_STEP,
                   mode is AutoresetMode.SAME_STEP, buffers.slot_cell)
