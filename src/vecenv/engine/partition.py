"""``Partition``: worker ``w``'s env group holds the contiguous envs ``partition[w] == (start,
stop)``; a command for some envs goes to each group they fall in, renumbered to the group."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from vecenv.engine.transport import WholeRound
from vecenv.worker.commands import STEP_ALL

__all__ = ["GroupIds", "Partition", "split_envs"]


def split_envs(num_envs: int, num_workers: int) -> list[tuple[int, int]]:
    """Contiguous ``(start, stop)`` env ranges, as even as possible, one per worker."""
    base, extra = divmod(num_envs, num_workers)
    return [(w * base + min(w, extra), (w + 1) * base + min(w + 1, extra)) for w in range(num_workers)]


#: the envs of one group that a command names: (worker, their ids within the group or None for
#: the whole group, their global ids)
GroupIds = tuple[int, "np.ndarray | None", np.ndarray]


class Partition(Sequence[tuple[int, int]]):
    """``num_envs`` envs split into ``num_workers`` contiguous groups, as even as possible.

    >>> p = Partition(5, 2)
    >>> p[0], p[1], p.worker_of[3]
    ((0, 3), (3, 5), 1)
    >>> [(w, local, envs.tolist()) for w, local, envs in p.by_worker(np.array([4, 0, 1, 2]))]
    [(0, None, [0, 1, 2]), (1, array([1]), [4])]
    >>> [(w, local, envs.tolist()) for w, local, envs in Partition(4, 4).by_worker(np.array([3, 1]))]
    [(1, None, [1]), (3, None, [3])]
    """

    def __init__(self, num_envs: int, num_workers: int) -> None:
        self.num_envs = num_envs
        self.bounds = split_envs(num_envs, num_workers)
        #: the worker holding each env
        self.worker_of = [w for w, (a, b) in enumerate(self.bounds) for _ in range(a, b)]
        #: every group whole: (worker, None, its global ids)
        self.whole_groups: list[GroupIds] = [(w, None, np.arange(a, b)) for w, (a, b) in enumerate(self.bounds)]
        #: every env's global id
        self.every_env = np.arange(num_envs)
        #: a step of every env: (worker, STEP_ALL, its global ids)
        self.whole_steps = [(w, STEP_ALL, envs) for w, _, envs in self.whole_groups]
        #: the same as the flight records it (worker -> envs, worker -> command) and as a
        #: transport's round
        self.whole_in_flight = {w: envs for w, _, envs in self.whole_groups}
        self.whole_commands = dict.fromkeys(range(num_workers), STEP_ALL)
        self.whole_round = WholeRound((w, STEP_ALL) for w in range(num_workers))

    def __getitem__(self, worker: int) -> tuple[int, int]:  # type: ignore[override]
        return self.bounds[worker]

    def __len__(self) -> int:
        return len(self.bounds)

    def envs_of(self, worker: int) -> list[int]:
        """The global ids of ``worker``'s envs."""
        return list(range(*self.bounds[worker]))

    def by_worker(self, ids: np.ndarray | None) -> Iterator[GroupIds]:
        """The envs ``ids`` (every env when None) split by group, groups in order, ids sorted."""
        if ids is None or ids.size == self.num_envs:
            yield from self.whole_groups
            return
        if len(self.bounds) == self.num_envs:  # one env a group (async batches): each is whole
            whole = self.whole_groups
            for i in sorted(ids.tolist()):
                yield whole[i]
            return
        # plain Python: batches are small, and numpy's per-call cost dominates at this size
        worker_of = self.worker_of
        groups: dict[int, list[int]] = {}
        for i in sorted(ids.tolist()):
            groups.setdefault(worker_of[i], []).append(i)
        for w in sorted(groups):
            envs = np.array(groups[w], dtype=np.int64)
            start, stop = self.bounds[w]
            local = None if envs.size == stop - start else envs - start
            yield w, local, envs
