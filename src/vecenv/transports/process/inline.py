"""Inline mode: the last env group steps in the caller's process while workers step theirs.

:class:`InlineTransport` composes a :class:`ProcessTransport` for the first groups with a
:class:`~vecenv.transports.serial.SerialTransport` for the last one, and routes each worker
index to its part. A command to the inline group runs during :meth:`submit`, after the engine
has posted the workers' commands, so both sides step at once. The inline group writes its infos
into the workers' info rows (:class:`~.infos.LocalInfos`), so a full batch's infos are read as one.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from gymnasium import spaces

from vecenv.engine.transport import Transport
from vecenv.spaces import StepBuffers
from vecenv.transports.process.infos import LocalInfos
from vecenv.transports.process.transport import ProcessTransport
from vecenv.transports.serial import SerialTransport
from vecenv.worker import EnvDescription
from vecenv.worker.commands import Command

__all__ = ["InlineTransport"]


class InlineTransport(Transport):
    """Workers for groups ``0 .. k-1``, the caller's process for group ``k`` (the last).

    The inline group has no crash isolation, and ``terminate`` cannot end it: its reply is
    always ready, so it is never found overdue.
    """

    name = "process"
    can_end_workers = True

    def __init__(self, remote: ProcessTransport) -> None:
        self.remote = remote
        self.local = SerialTransport()
        self._infos: LocalInfos | None = None  # with workers: the inline group's infos in their rows

    @property
    def processes(self) -> list[Any]:
        return self.remote.processes

    def launch(self) -> list[EnvDescription]:
        self._k = k = len(self.partition) - 1  # the inline group's worker index
        self.local.first_worker = k
        described = self.remote.start(self.env_fns, self.partition[:k], self.autoreset_mode) if k else []
        return described + self.local.start(self.env_fns, self.partition[k:], self.autoreset_mode)

    def _part(self, worker: int) -> tuple[Transport, int]:
        k = self._k
        return (self.remote, worker) if worker < k else (self.local, worker - k)

    def allocate(self, observation_space: spaces.Space, action_space: spaces.Space, num_envs: int) -> StepBuffers:
        if self.num_workers > 1:
            self.remote.observation_slots = self.observation_slots
            return self.remote.allocate(observation_space, action_space, num_envs)
        return super().allocate(observation_space, action_space, num_envs)

    def attach(self, buffers: StepBuffers) -> None:
        self.local.attach(buffers)
        if self.num_workers > 1:
            self.remote.attach(buffers)
            start, stop = self.partition[self._k]
            self._infos = LocalInfos(self.remote.info_reader, start, stop)
            self.local.groups[0].info_sink = self._infos.writer.write

    def send(self, commands: Sequence[tuple[int, Command]]) -> None:
        k = self._k
        if k:
            self.remote.send([(w, c) for w, c in commands if w < k])  # the workers start first
        for w, command in commands:
            if w >= k:
                if self._infos is not None:
                    self._infos.writer.begin()
                self.local.send([(w - k, command)])

    def ready(self, workers: Collection[int], timeout: float | None = None, every: bool = False) -> list[int]:
        k = self._k
        local = [k] if k in workers and self.local.ready([0]) else []
        remote = [w for w in workers if w < k]
        if not remote:
            return local
        return local + self.remote.ready(remote, 0 if local else timeout, every)

    def fetch(self, worker: int) -> Any:
        if worker < self._k:
            return self.remote.fetch(worker)
        reply = self.local.fetch(worker - self._k)
        return reply if self._infos is None else self._infos.take(reply)

    def outstanding(self, worker: int) -> bool:
        part, w = self._part(worker)
        return part.outstanding(w)

    def terminate(self, worker: int) -> None:
        part, w = self._part(worker)
        if part is self.remote:
            self.remote.terminate(w)

    def restart(self, worker: int) -> None:
        part, w = self._part(worker)
        part.restart(w)

    def disown(self) -> None:
        self.remote.disown()

    def close(self, timeout: float | None = None) -> None:
        try:
            self.local.close(timeout)
        finally:
            self.remote.close(timeout)
