"""The caller thread's CPU per vector step (``time.thread_time``), with envs that cost nothing:
the serial part of every step on many cores. Rows: per env-step (2 workers, ``--envs-low`` to
``--envs-high``; peers 8 to 32), per worker (2 to 16 workers, 64 envs), per step (64 envs in 16
workers). vecenv blocks while waiting (``spin_us=0, yield_us=0``), as once a share outlasts the spin.

Two rows say what the machine allows (Linux): the *floor*, the same handshake with nothing else
(16 processes asleep on one futex word; a step bumps their counters, wakes them with one ring
and sleeps until the last one rings back: no envs, no results), and each per-step figure again
with the caller on a core of its own and its workers on the others, as on a machine with more
cores than workers, where the workers no longer preempt the caller and evict its caches.

    python benchmarks/caller_cost.py                    # 5 rounds, every row
    python benchmarks/caller_cost.py --rounds 1 --quick # a smoke run
"""

from __future__ import annotations

import mmap
import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np

import vecenv
from vecenv.transports.process.control import Bell, bell_available, fence

#: observation kinds: (space, info keys the env returns every step)
KINDS: dict[str, tuple[gym.spaces.Space, tuple[str, ...]]] = {
    "4 floats": (gym.spaces.Box(-1.0, 1.0, (4,), np.float32), ()),
    "17 floats + 4 infos": (gym.spaces.Box(-np.inf, np.inf, (17,), np.float64),
                            ("x_position", "x_velocity", "reward_forward", "reward_ctrl")),
    "84x84x4 frames": (gym.spaces.Box(0, 255, (84, 84, 4), np.uint8), ()),
}


class NullEnv(gym.Env):
    """An env whose step costs nothing: a fixed observation, float infos, 1000-step episodes."""

    def __init__(self, kind: str = "4 floats") -> None:
        self.observation_space, self._keys = KINDS[kind]
        self.action_space = gym.spaces.Discrete(4)
        self._obs = self.observation_space.sample()
        self._t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._obs, {}

    def step(self, action):
        self._t += 1
        infos = {key: 0.5 for key in self._keys}
        return self._obs, 1.0, False, self._t >= 1000, infos

    @property
    def pid(self) -> int:
        return os.getpid()


def _vecenv(n: int, kind: str, workers: int) -> gym.vector.VectorEnv:
    return vecenv.make(lambda: NullEnv(kind), n, backend="process", num_workers=workers,
                       spin_us=0, yield_us=0)


def _peer(cls: Callable) -> Callable:
    """A builder of ``cls`` (a process or none per env: the workers argument is not used)."""
    return lambda n, kind, _workers: cls([lambda: NullEnv(kind)] * n)


_gym_async, _gym_sync = _peer(gym.vector.AsyncVectorEnv), _peer(gym.vector.SyncVectorEnv)


class Floor:
    """The process transport's handshake alone: ``workers`` processes asleep on one futex word
    (:class:`vecenv.transports.process.control.Bell`); a step bumps every command counter, rings
    once and sleeps on a word of its own until the last worker to finish rings it."""

    def __init__(self, workers: int) -> None:
        self._memory = mmap.mmap(-1, 4 * 4096)  # shared with the forked workers
        self.cmd = np.frombuffer(self._memory, np.int64, workers, 0)
        self.done = np.frombuffer(self._memory, np.int64, workers, 4096)
        self.sleeps = np.frombuffer(self._memory, np.int64, 1, 8192)
        self.bell = Bell(np.frombuffer(self._memory, np.int32, 1, 2 * 4096 + 64))
        self.caller_bell = Bell(np.frombuffer(self._memory, np.int32, 1, 3 * 4096))
        context = multiprocessing.get_context("fork")
        self.processes = [context.Process(target=self._work, args=(w,), daemon=True) for w in range(workers)]
        for process in self.processes:
            process.start()

    def _work(self, w: int) -> None:
        cmd, done, bell, last, caller = self.cmd, self.done, self.bell, 0, os.getppid()
        while True:
            seen = bell.seen()
            command = int(cmd[w])
            if command < 0:
                return
            if command == last:
                bell.wait(seen, 50)
                if bell.seen() == seen and os.getppid() != caller:  # a nap ran out: the caller is gone
                    return
                continue
            last = done[w] = command
            fence()
            if self.sleeps[0] and (cmd == done).all():
                self.caller_bell.ring_one()

    def reset(self) -> None:
        pass

    def step(self, _actions: object) -> None:
        self.cmd += 1
        self.bell.ring()
        self.sleeps[0] = 1
        fence()
        while True:
            seen = self.caller_bell.seen()
            if (self.cmd == self.done).all():
                break
            self.caller_bell.wait(seen, 50)
            if self.caller_bell.seen() == seen and not all(process.is_alive() for process in self.processes):
                raise RuntimeError("Floor.step: a worker process ended; every worker must answer each step")
        self.sleeps[0] = 0

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes]

    def close(self) -> None:
        self.cmd[:] = -1
        self.bell.ring()
        for process in self.processes:
            process.join(5)
            if process.is_alive():
                process.kill()


def _floor(_n: int, _kind: str, workers: int) -> Floor:
    return Floor(workers)


def _own_core(build: Callable) -> Callable:
    """``build`` with the caller on the first usable core and its workers on the others (their
    pids: :attr:`Floor.pids`, or each env's ``pid``); the caller gets every core back on close."""

    def built(n: int, kind: str, workers: int) -> object:
        envs = build(n, kind, workers)
        cores = sorted(os.sched_getaffinity(0))
        try:
            pids = envs.pids if isinstance(envs, Floor) else set(envs.get_attr("pid"))
            for pid in pids:
                os.sched_setaffinity(pid, cores[1:])
            os.sched_setaffinity(0, cores[:1])
        except BaseException:
            envs.close()
            os.sched_setaffinity(0, cores)
            raise
        close = envs.close

        def close_and_restore() -> None:
            try:
                close()
            finally:
                os.sched_setaffinity(0, cores)

        envs.close = close_and_restore
        return envs

    return built


def own_core_possible() -> bool:
    """Whether the rows with the caller on a core of its own can run: Linux, 2 usable cores or more."""
    return hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) >= 2


def floor_possible() -> bool:
    return bell_available() and "fork" in multiprocessing.get_all_start_methods()


def cpu_per_step(build: Callable, n: int, kind: str, workers: int, seconds: float) -> float:
    """The caller thread's CPU seconds per vector step over ``seconds`` of stepping, after a
    warm-up of a fifth of that (a count of steps would make a fast point's run short)."""
    envs = build(n, kind, workers)
    try:
        envs.reset()
        step = envs.step  # gymnasium's and SB3's step both take one action per env
        actions = np.zeros(n, dtype=np.int64)
        for phase in (seconds / 5, seconds):
            end, steps, start = time.perf_counter() + phase, 0, time.thread_time()
            while steps < 20 or time.perf_counter() < end:
                for _ in range(10):
                    step(actions)
                steps += 10
        return (time.thread_time() - start) / steps
    finally:
        envs.close()


def rows(quick: bool, envs_low: int, envs_high: int,
         peers_too: bool = True) -> list[tuple[str, Callable, list[tuple[int, int]], str]]:
    """(name, builder, the two (envs, workers) points, observation kind) for each row."""
    table = []
    for kind in KINDS:
        table.append((f"vecenv process, per env-step, {kind}", _vecenv,
                      [(envs_low, 2), (envs_high, 2)], kind))
    for kind in ("4 floats", "17 floats + 4 infos"):  # issue 63's layout: per worker, and the whole step
        table.append((f"vecenv process, per worker, {kind}, 64 envs", _vecenv, [(64, 2), (64, 16)], kind))
        table.append((f"vecenv process, per step, {kind}, 64 envs in 16 workers", _vecenv, [(64, 16)], kind))
        if own_core_possible():
            table.append((f"vecenv process, per step, {kind}, 64 envs in 16 workers, caller's own core",
                          _own_core(_vecenv), [(64, 16)], kind))
    if floor_possible():  # what the machine allows the same handshake
        table.append(("floor: the handshake alone, per step, 16 workers", _floor, [(64, 16)], "4 floats"))
        if own_core_possible():
            table.append(("floor: the handshake alone, per step, 16 workers, caller's own core", _own_core(_floor),
                          [(64, 16)], "4 floats"))
    if not peers_too:
        return table
    peers = [("gym AsyncVectorEnv", _gym_async), ("gym SyncVectorEnv", _gym_sync)]
    try:
        from stable_baselines3.common.vec_env import SubprocVecEnv

        peers.append(("SB3 SubprocVecEnv", _peer(SubprocVecEnv)))
    except ImportError:
        pass
    for name, build in peers:
        for kind in (("4 floats",) if quick else KINDS):
            table.append((f"{name}, per env-step, {kind}", build, [(8, 8), (32, 32)], kind))
    return table


def main(argv: list[str] | None = None) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _common import interleave, parser, spread

    p = parser(__doc__, rounds=5)
    p.add_argument("--envs-low", type=int, default=8)
    p.add_argument("--envs-high", type=int, default=512)
    p.add_argument("--quick", action="store_true", help="fewer steps and peers (a smoke run)")
    p.add_argument("--no-peers", action="store_true", help="vecenv's rows only")
    args = p.parse_args(argv)
    table = {name: row for name, *row in rows(args.quick, args.envs_low, args.envs_high, not args.no_peers)}
    budget = 0.2 if args.quick else 1.0  # seconds of stepping at each point

    def sample(name: str) -> float:
        """µs: per vector step at one point, or the difference per env (or worker) between two."""
        build, points, kind = table[name]
        cpu = [cpu_per_step(build, n, kind, w, budget) for n, w in points]
        (n0, w0), (n1, w1) = points[0], points[-1]
        return (cpu[-1] - cpu[0]) / ((n1 - n0) or (w1 - w0)) * 1e6 if len(cpu) > 1 else cpu[0] * 1e6

    samples = interleave(list(table), args.rounds, sample,
                         lambda r, name, us: print(f"round {r + 1}: {name} {us:.2f} µs", flush=True))
    width = max(map(len, samples))
    print(f"{'caller CPU (µs)':<{width}} median [min-max]")
    for name, values in samples.items():
        print(f"{name:<{width}} {spread(values, '.2f')}")


if __name__ == "__main__":
    main()
