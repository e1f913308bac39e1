"""The floor of any process-based vector env on this machine: a minimal protocol, no engine.

    python benchmarks/probes/protocol_floor.py                 # CartPole, 2 workers x 4 envs
    python benchmarks/probes/protocol_floor.py --env Pong      # or HalfCheetah-v5

Forked workers step their envs with fixed actions, driven by a byte on a pipe each way
(``block``), or a shared counter each way with ``sched_yield()`` (``yield``; ``inline``: the
caller steps one share itself). No checks, infos or copies. vecenv's process and inline layouts
run beside, and serial stepping for scale: µs per batched step. Linux only (``os.fork``).
"""

from __future__ import annotations

import mmap
import os
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: shared_bench, _common
from _common import interleave, parser, print_table, table, write_json  # noqa: E402
from shared_bench.contenders import target  # noqa: E402

#: each env with its fixed action (the one it is stepped with every step)
Envs = list[tuple[gym.Env, Any]]


def _step_all(envs: Envs) -> None:
    for env, action in envs:
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()


def _make(env_id: str, k: int, first: int = 0) -> Envs:
    """Envs ``first .. first+k-1`` of the batch, reset with their index as seed, with their actions."""
    env_fn = target(env_id).env_fn
    envs = []
    for i in range(first, first + k):
        env = env_fn()
        env.reset(seed=i)
        envs.append((env, _action(env.action_space, i)))
    return envs


def _action(space: gym.Space, i: int) -> Any:
    """Env ``i``'s fixed action."""
    space.seed(i)
    return space.sample()


def _batch_actions(space: gym.Space, n: int) -> np.ndarray:
    """The actions :func:`_make` gives envs ``0 .. n-1``, as one batch for a vector env."""
    return np.stack([np.asarray(_action(space, i)) for i in range(n)])


def floor(mode: str, env_id: str, workers: int, per_worker: int, steps: int) -> float:
    """µs per batched step with ``mode`` "block" (pipes), "yield" (shared counters) or "inline"
    (shared counters; the caller steps the last share, ``workers - 1`` processes the others)."""
    inline = mode == "inline"
    workers -= inline
    commands = [os.pipe() for _ in range(workers)]
    replies = os.pipe()
    block = mmap.mmap(-1, 64 * 8 * max(1, workers))
    ctrl = np.frombuffer(block, np.int64)[: 64 * workers].reshape(workers, 64)  # a cache line apart: [w, 0] / [w, 8]
    pids = []
    for w in range(workers):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            envs = _make(env_id, per_worker, w * per_worker)
            seq = 0
            while True:
                if mode == "block":
                    if os.read(commands[w][0], 1) == b"q":
                        os._exit(0)
                else:
                    while ctrl[w, 0] == seq:
                        os.sched_yield()
                    if ctrl[w, 0] < 0:
                        os._exit(0)
                seq += 1
                _step_all(envs)
                if mode == "block":
                    os.write(replies[1], b"k")
                else:
                    ctrl[w, 8] = seq
        pids.append(pid)
    own = _make(env_id, per_worker, workers * per_worker) if inline else []

    def step(seq: int) -> None:
        if mode == "block":
            for w in range(workers):
                os.write(commands[w][1], b"s")
            got = 0
            while got < workers:
                got += len(os.read(replies[0], workers - got))
        else:
            ctrl[:, 0] = seq
            _step_all(own)
            while not (ctrl[:, 8] == seq).all():
                os.sched_yield()

    try:
        for seq in range(1, 201):
            step(seq)
        t = time.perf_counter()
        for seq in range(201, 201 + steps):
            step(seq)
        return (time.perf_counter() - t) / steps * 1e6
    finally:
        for w in range(workers):
            if mode == "block":
                os.write(commands[w][1], b"q")
            else:
                ctrl[w, 0] = -1
        for pid in pids:
            os.waitpid(pid, 0)
        for fds in (*commands, replies):
            for fd in fds:
                os.close(fd)


def serial(env_id: str, n: int, steps: int) -> float:
    envs = _make(env_id, n)
    for _ in range(200):
        _step_all(envs)
    t = time.perf_counter()
    for _ in range(steps):
        _step_all(envs)
    return (time.perf_counter() - t) / steps * 1e6


def vecenv_process(env_id: str, workers: int, n: int, steps: int, inline: bool = False) -> float:
    """The same envs and actions through ``vecenv.ProcessVectorEnv`` (its defaults otherwise;
    ``inline``: the caller steps the last share)."""
    import vecenv

    env_fn = target(env_id).env_fn
    with vecenv.ProcessVectorEnv([env_fn] * n, num_workers=workers, context="fork", inline=inline) as envs:
        envs.reset(seed=0)
        actions = _batch_actions(envs.single_action_space, n)
        for _ in range(200):
            envs.step(actions)
        t = time.perf_counter()
        for _ in range(steps):
            envs.step(actions)
        return (time.perf_counter() - t) / steps * 1e6


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__, rounds=3, json_name="protocol_floor.json")
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--envs-per-worker", type=int, default=4)
    p.add_argument("--steps", type=int, default=3000)
    args = p.parse_args(argv)
    env, w, k, steps = args.env, args.workers, args.envs_per_worker, args.steps
    runs = {
        "serial (this process)": lambda: serial(env, w * k, steps),
        **{f"floor: {mode} ({how})": partial(floor, mode, env, w, k, steps)
           for mode, how in (("block", "pipes"), ("yield", "counters"), ("inline", "counters"))},
        "vecenv process": lambda: vecenv_process(env, w, w * k, steps),
        "vecenv inline": lambda: vecenv_process(env, w, w * k, steps, inline=True),
    }
    rounds = interleave(list(runs), args.rounds, lambda name: runs[name]())
    tab = table(f"{env}, {w} workers x {k} envs, {len(os.sched_getaffinity(0))} usable cores", rounds,
                unit="us_per_step")
    print_table(tab)
    write_json(args.json, "protocol_floor.py", vars(args), [tab])


if __name__ == "__main__":
    main()
