"""Serial transport: one env group stepped in the caller's process."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

from gymnasium.vector import AutoresetMode

from vecenv.spaces import StepBuffers
from vecenv.transports.base import Transport
from vecenv.worker import EnvDescription, EnvGroup

__all__ = ["SerialTransport"]


class SerialTransport(Transport):
    """Runs each command at once, in the caller's thread; the reply waits for :meth:`fetch`."""

    name = "serial"

    def __init__(self) -> None:
        self.groups: list[EnvGroup] = []
        self._replies: dict[int, tuple[bool, Any]] = {}

    def start(
        self,
        env_fns: Sequence[Callable[[], Any]],
        partition: list[tuple[int, int]],
        autoreset_mode: AutoresetMode,
    ) -> list[EnvDescription]:
        self.partition = partition
        self.num_workers = len(partition)
        try:
            for w, (start, stop) in enumerate(partition):
                self.groups.append(EnvGroup(env_fns[start:stop], start, w, autoreset_mode))
        except BaseException:
            self.close()
            raise
        return [d for g in self.groups for d in g.describe()]

    def attach(self, buffers: StepBuffers) -> None:
        for group, (start, stop) in zip(self.groups, self.partition, strict=True):
            group.attach(buffers.rows(start, stop))

    def submit(self, worker: int, command: str, payload: tuple) -> None:
        try:
            self._replies[worker] = (True, self.groups[worker].handle(command, payload))
        except Exception as exc:  # delivered by fetch, like a remote error
            self._replies[worker] = (False, exc)

    def ready(self, workers: Collection[int], timeout: float | None = None) -> list[int]:
        return [w for w in workers if w in self._replies]

    def fetch(self, worker: int) -> Any:
        ok, value = self._replies.pop(worker)
        if not ok:
            raise value
        return value

    def close(self, timeout: float | None = None) -> None:
        for group in self.groups:
            group.close()
        self._replies.clear()

    @property
    def envs(self) -> list[Any]:
        return [env for g in self.groups for env in g.envs]
