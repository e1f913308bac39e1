"""The transport contract: move commands to env groups and their replies back, nothing more.

A transport runs one :class:`~vecenv.worker.EnvGroup` per worker. The engine
(:class:`vecenv.engine.VectorEnv`) decides what every group must do; the transport delivers
``(command, payload)`` to a group, reports which workers have a reply ready, and hands the reply
over (re-raising a group's :class:`~vecenv.errors.EnvError` in the caller).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Sequence
from typing import Any

from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from vecenv.spaces import StepBuffers
from vecenv.worker import EnvDescription

__all__ = ["Transport", "split_envs", "usable_cores"]


def usable_cores() -> int:
    """CPU cores this process may run on (affinity-aware)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def split_envs(num_envs: int, num_workers: int) -> list[tuple[int, int]]:
    """Contiguous ``(start, stop)`` env ranges, as even as possible, one per worker."""
    base, extra = divmod(num_envs, num_workers)
    bounds, start = [], 0
    for w in range(num_workers):
        stop = start + base + (1 if w < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


class Transport(ABC):
    """Carries commands to ``num_workers`` env groups and replies back.

    Lifecycle: :meth:`start` (build the groups, describe their envs), :meth:`allocate` and
    :meth:`attach` (give each group its rows of the batch buffers), then any number of
    :meth:`submit` / :meth:`ready` / :meth:`fetch` rounds, then :meth:`close`. A worker has at
    most one command in flight.
    """

    #: short name used by ``vecenv.make(backend=...)`` and in reprs
    name: str = "transport"
    #: whether :meth:`terminate` and :meth:`restart` work (needed for ``step_timeout``)
    can_end_workers: bool = False
    num_workers: int
    partition: list[tuple[int, int]]

    @abstractmethod
    def start(
        self,
        env_fns: Sequence[Callable[[], Any]],
        partition: list[tuple[int, int]],
        autoreset_mode: AutoresetMode,
    ) -> list[EnvDescription]:
        """Create one env group per ``(start, stop)`` range and return every env's description."""

    def allocate(
        self, observation_space: spaces.Space, action_space: spaces.Space, num_envs: int
    ) -> StepBuffers:
        """Allocate the batch buffers (in memory the groups can write; local by default)."""
        return StepBuffers(observation_space, action_space, num_envs)

    @abstractmethod
    def attach(self, buffers: StepBuffers) -> None:
        """Give every group its rows of ``buffers``."""

    @abstractmethod
    def submit(self, worker: int, command: str, payload: tuple) -> None:
        """Send ``command(*payload)`` to ``worker``'s group without waiting."""

    @abstractmethod
    def ready(self, workers: Collection[int], timeout: float | None = None) -> list[int]:
        """Block until at least one of ``workers`` has a reply (or ``timeout``); return those."""

    @abstractmethod
    def fetch(self, worker: int) -> Any:
        """Take ``worker``'s reply; raise the group's error if the command failed."""

    @abstractmethod
    def close(self, timeout: float | None = None) -> None:
        """Close every env and end every worker; idempotent, returns in bounded time."""

    def terminate(self, worker: int) -> None:
        """End ``worker`` now (it overran ``step_timeout``); later commands to it fail."""
        raise NotImplementedError(f"the {self.name} backend cannot end a worker")

    def restart(self, worker: int) -> None:
        """Replace ``worker`` with a fresh one: a new group built from the same env_fns, attached
        to the same buffer rows (its envs not yet reset)."""
        raise NotImplementedError(f"the {self.name} backend cannot restart a worker")

    @property
    def envs(self) -> list[Any]:
        """The sub-env objects, where they live in this process."""
        raise AttributeError(
            f"the {self.name} backend keeps its envs in workers; `envs` exists only on the serial backend"
        )
