"""Restarts under ``on_error="restart"``: how often one env or worker may be rebuilt, and how a
rebuilt env's interrupted episode is reported (one rule for the env group and the engine); and
recycling under ``max_episodes_per_env``: which envs are due to be rebuilt, and their seeds."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Hashable, Sequence
from typing import Any

from vecenv.errors import VecEnvError, add_detail
from vecenv.infos import InfoEntry
from vecenv.policy import recycle_report, recycled_seed

__all__ = ["Recycling", "RestartBudget", "restart_report", "restarted_entry", "truncate_rows"]


class Recycling:
    """The recycling of a group's ``k`` envs: each env's episodes since it was built, its last
    seed, its rebuilds in this worker and the seed its next reset takes when none is given.
    ``plain``: nothing to do (NEXT_STEP's autoreset calls ``env.reset()`` itself)."""

    def __init__(self, k: int) -> None:
        self.every: int | None = None
        self.episodes, self.rebuilds = [0] * k, [0] * k
        self.seeds: list[int | None] = [None] * k
        self.next_seeds: list[int | None] = [None] * k
        self.replacements = 0
        self.plain = True

    def configure(self, every: int | None, seeds: Sequence[int | None] | None = None,
                  replacements: int = 0) -> None:
        """Rebuild each env after ``every`` episodes (None: never). ``seeds`` (the envs' own
        seeds) and ``replacements`` (how many workers held these envs before this one): for a
        replacement worker, whose envs' first resets are seeded with :func:`recycled_seed`."""
        self.every = every
        if seeds is not None:
            self.seeds = list(seeds)
            self.replacements = replacements
            self.next_seeds = [recycled_seed(seed, replacements, 0) for seed in self.seeds]
        self.plain = every is None and not any(seed is not None for seed in self.next_seeds)

    def state(self) -> tuple[list[int | None], int]:
        """The envs' own seeds and how many workers held them before this one (for the next)."""
        return list(self.seeds), self.replacements

    def due(self, j: int) -> bool:
        """Whether env ``j`` has run its ``every`` episodes and must be rebuilt first."""
        return self.every is not None and self.episodes[j] >= self.every

    def rebuilt(self, j: int) -> dict:
        """Env ``j`` was rebuilt for recycling: its next reset's seed, and the report."""
        self.episodes[j] = 0
        self.rebuilds[j] += 1
        self.next_seeds[j] = recycled_seed(self.seeds[j], self.replacements, self.rebuilds[j])
        return recycle_report(f"max_episodes_per_env={self.every}")

    def begin(self, j: int, seed: int | None) -> int | None:
        """Env ``j`` starts an episode with ``seed`` (None: the one recycling chose, if any);
        the seed its reset takes."""
        if self.every is not None:
            self.episodes[j] += 1
        if seed is None:
            seed = self.next_seeds[j]
        else:
            self.seeds[j] = seed
        self.next_seeds[j] = None
        return seed


class RestartBudget:
    """At most ``max_restarts`` restarts per key within any ``window`` seconds, so that a crash
    loop raises instead of rebuilding the same env forever."""

    def __init__(self, max_restarts: int = 3, window: float = 60.0) -> None:
        self.max_restarts = max_restarts
        self.window = window
        self._times: dict[Hashable, deque[float]] = {}

    def spend(self, key: Hashable, what: str, error: VecEnvError) -> bool:
        """Record a restart of ``key`` and return True, or, when the budget is spent, add a note
        naming ``what`` to ``error``'s message and return False."""
        now = time.monotonic()
        recent = self._times.setdefault(key, deque())
        while recent and now - recent[0] > self.window:
            recent.popleft()
        if len(recent) >= self.max_restarts:
            add_detail(error, f"({what} was already restarted {len(recent)} times in "
                              f"{self.window:g} s, the most on_error='restart' allows)")
            return False
        recent.append(now)
        return True


def restart_report(error: VecEnvError | str) -> dict:
    """The info entries of an env whose episode a restart cut short."""
    reason = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return {"restarted": True, "restart_reason": reason}


def restarted_entry(env: int, report: dict, info: dict | None = None, final_obs: Any = None) -> InfoEntry:
    """The info entry of env ``env`` whose episode a restart ended, ``report`` saying why: the
    report alone, or merged into the new env's reset ``info`` where it was reset; with
    ``final_obs`` (SAME_STEP: the reset came within the step) the entry also ends the episode,
    ``final_obs`` its last observation and the report its final info."""
    if info is None:
        return InfoEntry(env, dict(report))
    if final_obs is None:
        return InfoEntry(env, {**info, **report})
    return InfoEntry(env, {**info, **report}, True, final_obs, dict(report))


def truncate_rows(buffers: Any, rows: Any) -> None:
    """Mark ``rows`` of ``buffers`` as truncated with no reward: the episode ended by a restart,
    not by the env (the observation row keeps the last one the env gave)."""
    buffers.rewards[rows] = 0.0
    buffers.terminations[rows] = False
    buffers.truncations[rows] = True
