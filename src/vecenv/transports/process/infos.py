"""Where the info rows (:mod:`vecenv.infos.rows`) live for the process transport: in the shared
block, after the control counters, one area for every env, each worker writing its own envs' part
(:func:`worker_writer`; an inline group's writer is made the same way in the caller) and the
caller reading them all (:func:`caller_reader`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vecenv.infos import InfoReader, InfoRows, InfoWriter

__all__ = ["caller_reader", "infos_nbytes", "worker_writer"]


def infos_nbytes(observation_space: Any, num_envs: int) -> int:
    """Bytes of the block that the info rows of ``num_envs`` envs take."""
    return InfoRows.nbytes(observation_space, num_envs)


def caller_reader(observation_space: Any, num_envs: int, memory: Any, offset: int,
                  partition: Sequence[tuple[int, int]]) -> InfoReader:
    """The caller's reader of every worker's infos, from the rows at ``offset`` of the block."""
    return InfoReader(InfoRows(observation_space, num_envs, memory, offset), partition)


def worker_writer(observation_space: Any, num_envs: int, memory: Any, offset: int, start: int,
                  stop: int) -> InfoWriter:
    """A worker's writer of its envs' (``start:stop``) infos into their rows of the block."""
    return InfoWriter(InfoRows(observation_space, num_envs, memory, offset).part(start, stop), start)
