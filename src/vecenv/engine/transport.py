"""The transport contract: move commands to env groups and their replies back, nothing more.

A transport runs one :class:`~vecenv.worker.EnvGroup` per worker. The engine
(:class:`vecenv.engine.VectorEnv`) decides what every group must do; the transport delivers a
command (:mod:`vecenv.worker.commands`) to a group, reports which workers have a reply ready, and
hands the reply over (re-raising a group's :class:`~vecenv.errors.EnvError` in the caller). The
contract lives in the engine layer, which owns it; the transports implement it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Sequence
from typing import Any

from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from vecenv.spaces import StepBuffers
from vecenv.worker import EnvDescription
from vecenv.worker.commands import Command

__all__ = ["DEFAULT_START_TIMEOUT", "Transport", "WholeRound"]

#: seconds a worker may take to build its envs, at start and on every rebuild (``start_timeout``)
DEFAULT_START_TIMEOUT = 120.0


class WholeRound(list):
    """A round of :meth:`Transport.send` in which every worker steps all of its envs, in worker
    order (the usual synchronous step), so a transport can post it at once."""


class Transport(ABC):
    """Carries commands to ``num_workers`` env groups and replies back.

    Lifecycle: :meth:`start` (build the groups, describe their envs), :meth:`allocate` and
    :meth:`attach` (give each group its rows of the batch buffers), then any number of
    :meth:`send` / :meth:`ready` / :meth:`fetch` rounds, then :meth:`close`. A worker has at
    most one command in flight.
    """

    #: observation slots the buffers hold (:mod:`vecenv.spaces.slots`); the engine sets it
    #: before :meth:`allocate` where it lends observations
    observation_slots = 1
    #: whether the groups write observations in the buffers themselves, so slots can be lent
    lends_observations = True
    #: whether async batches can be collected env by env (the process transport's per-env
    #: counters, :mod:`vecenv.transports.process.queue`); else a worker's envs return together
    queues_envs = False

    #: short name used by ``vecenv.make(backend=...)`` and in reprs
    name: str = "transport"
    #: whether :meth:`terminate` and :meth:`restart` work (needed for ``step_timeout``)
    can_end_workers: bool = False
    env_fns: list[Callable[[], Any]]
    partition: list[tuple[int, int]]
    autoreset_mode: AutoresetMode

    def start(
        self,
        env_fns: Sequence[Callable[[], Any]],
        partition: Sequence[tuple[int, int]],
        autoreset_mode: AutoresetMode,
    ) -> list[EnvDescription]:
        """Create one env group per ``(start, stop)`` range and return every env's description.

        If any group cannot be built, everything started so far is closed again.
        """
        self.env_fns = list(env_fns)
        self.partition = list(partition)
        self.autoreset_mode = autoreset_mode
        try:
            return self.launch()
        except BaseException:
            self.close(1.0)
            raise

    @property
    def num_workers(self) -> int:
        return len(self.partition)

    def group_fns(self, worker: int) -> list[Callable[[], Any]]:
        """The env_fns of ``worker``'s group (``worker`` counted within this transport)."""
        start, stop = self.partition[worker]
        return self.env_fns[start:stop]

    @abstractmethod
    def launch(self) -> list[EnvDescription]:
        """Build the groups of :attr:`partition`; return every env's description, in env order."""

    def allocate(
        self, observation_space: spaces.Space, action_space: spaces.Space, num_envs: int
    ) -> StepBuffers:
        """Allocate the batch buffers (in memory the groups can write; local by default), with
        :attr:`observation_slots` observation slots."""
        return StepBuffers(observation_space, action_space, num_envs, slots=self.observation_slots)

    @abstractmethod
    def attach(self, buffers: StepBuffers) -> None:
        """Give every group its rows of ``buffers``."""

    @abstractmethod
    def send(self, commands: Sequence[tuple[int, Command]]) -> None:
        """Give each ``(worker, command)`` of one round to that worker's group, without waiting
        (a transport may wake its workers once for all of them). A worker appears at most once."""

    @abstractmethod
    def ready(self, workers: Collection[int], timeout: float | None = None, every: bool = False,
              wanted: Callable[[], int] | None = None) -> list[int]:
        """Block until at least one of ``workers`` has a reply (or ``timeout``); return those.
        ``every``: the caller wants every reply, so the transport may wait until all are there
        (or one failed) and wake it once. ``wanted`` (transports that :attr:`queues_envs`): how
        many more published envs the caller waits for; the wait also ends, with no reply, when
        that reaches 0."""

    @abstractmethod
    def fetch(self, worker: int) -> Any:
        """Take ``worker``'s reply; raise the group's error if the command failed."""

    #: whether :meth:`fetch_every` can take every worker's reply at once
    fetches_every = False

    def fetch_every(self) -> Any:
        """Every worker's reply at once, as one :class:`~vecenv.infos.StepReply` for every env,
        when the transport can take them together (all finished); None: :meth:`fetch` each."""
        return None

    @abstractmethod
    def close(self, timeout: float | None = None) -> None:
        """Close every env and end every worker; idempotent, returns in bounded time."""

    def disown(self) -> None:  # noqa: B027 - a transport with nothing to let go of does nothing
        """In a process forked from the caller: let go of what it inherited (descriptors), acting
        on nothing of the caller's (:mod:`vecenv.engine.owner`). Nothing by default."""

    def outstanding(self, worker: int) -> bool:
        """Whether ``worker`` has a command whose reply was not fetched yet."""
        raise NotImplementedError

    def drop_outstanding(self, worker: int, timeout: float | None) -> bool:
        """Let ``worker`` finish its outstanding command and drop the reply; False if it is still
        busy after ``timeout`` seconds."""
        if not self.outstanding(worker):
            return True
        if not self.ready([worker], timeout):
            return False
        try:
            self.fetch(worker)
        except Exception:
            pass
        return True

    def terminate(self, worker: int) -> None:
        """End ``worker`` now (it overran ``step_timeout``); later commands to it fail."""
        raise NotImplementedError(f"the {self.name} backend cannot end a worker")

    def worker_pid(self, worker: int) -> int | None:
        """The process id of ``worker`` when it is a process of its own (not the caller's)."""
        return None

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
