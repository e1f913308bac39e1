"""Where the info rows (:mod:`vecenv.infos.rows`) live for the process transport: in the shared
block, after the control counters, one area for every env, each worker writing its own envs' part
(:func:`worker_writer`) and the caller reading them all (:func:`caller_reader`); and the inline
group's infos, written into the same area as the workers' (:class:`LocalInfos`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vecenv.infos import IN_ROWS, InfoReader, InfoRows, InfoWriter, StepReply

__all__ = ["LocalInfos", "caller_reader", "infos_nbytes", "worker_writer"]


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


class LocalInfos:
    """Infos of a group that steps in the caller's process, through the same rows as the
    workers': its envs' infos then join theirs as one more part of the same records, and a
    full batch is read at once."""

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
            return self.reader.take(self.index, IN_ROWS) if self.writer.dirty else reply
        return self.reader.take(self.index, message)
