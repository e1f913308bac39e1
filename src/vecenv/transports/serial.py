"""Serial transport: env groups stepped in the caller's process, one command at a time."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

from vecenv.engine.transport import Transport
from vecenv.spaces import StepBuffers
from vecenv.worker import EnvDescription, EnvGroup
from vecenv.worker.commands import Command
from vecenv.worker.group import warn_close_failures

__all__ = ["SerialTransport"]


class SerialTransport(Transport):
    """Runs each command at once, in the caller's thread; the reply waits for :meth:`fetch`."""

    name = "serial"

    def __init__(self) -> None:
        self.groups: list[EnvGroup] = []
        self._replies: dict[int, tuple[bool, Any]] = {}

    def launch(self) -> list[EnvDescription]:
        for w, (start, _) in enumerate(self.partition):
            group = EnvGroup(self.group_fns(w), start, w, self.autoreset_mode)
            self.groups.append(group)
        return [d for g in self.groups for d in g.describe()]

    def attach(self, buffers: StepBuffers) -> None:
        for group, (start, stop) in zip(self.groups, self.partition, strict=True):
            group.attach(buffers.rows(start, stop))

    def send(self, commands: Sequence[tuple[int, Command]]) -> None:
        for worker, command in commands:
            self._replies.pop(worker, None)
            try:
                self._replies[worker] = (True, command.run(self.groups[worker]))  # the engine's own
            except Exception as exc:  # delivered by fetch, like a remote error
                self._replies[worker] = (False, exc)

    def ready(self, workers: Collection[int], timeout: float | None = None, every: bool = False,
              wanted: Callable[[], int] | None = None) -> list[int]:
        return [w for w in workers if w in self._replies]

    def outstanding(self, worker: int) -> bool:
        return worker in self._replies

    def fetch(self, worker: int) -> Any:
        ok, value = self._replies.pop(worker)
        if not ok:
            raise value
        return value

    def restart(self, worker: int) -> None:
        """Rebuild ``worker``'s group from its env_fns, on the same buffer rows."""
        old = self.groups[worker]
        start, _ = self.partition[worker]
        new = EnvGroup(self.group_fns(worker), start, worker, self.autoreset_mode)
        new.attach(old.buffers)  # type: ignore[arg-type]
        new.info_sink = old.info_sink  # its infos go where the old group's went
        self.groups[worker] = new
        self._replies.pop(worker, None)
        old.close()

    def close(self, timeout: float | None = None) -> None:
        groups, self.groups = self.groups, []
        self._replies.clear()
        for group in groups:
            warn_close_failures(group.close())

    @property
    def envs(self) -> list[Any]:
        return [env for g in self.groups for env in g.envs]
