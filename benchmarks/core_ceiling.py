"""The machine's ceiling on many cores: ``--processes`` processes that never communicate, each
stepping its own gymnasium SyncVectorEnv, summed, beside one such process alone.

    python benchmarks/core_ceiling.py --processes 16 --envs-per-process 4
    python benchmarks/core_ceiling.py --env HalfCheetah-v5 --env Pong --env vecenv/Busy-v0
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

ENVS = ("vecenv/Busy-v0", "HalfCheetah-v5", "Pong")


def _make(name: str):
    import gymnasium as gym

    import vecenv.bench.envs  # noqa: F401  registers vecenv/Busy-v0

    if name == "Pong":
        from shared_bench.targets import make_pong

        return make_pong
    return lambda: gym.make(name)


def _run(name: str, k: int, seconds: float, start, out) -> None:
    import gymnasium as gym
    import numpy as np

    envs = gym.vector.SyncVectorEnv([_make(name)] * k)
    envs.reset(seed=0)
    actions = [envs.action_space.sample() for _ in range(16)]
    for i in range(20):
        envs.step(actions[i % 16])
    start.wait()
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        envs.step(actions[steps % 16])
        steps += 1
    out.put(steps * k / (time.perf_counter() - t0))
    envs.close()
    del np


def measure(name: str, processes: int, k: int, seconds: float) -> float:
    """Summed env steps/s of ``processes`` independent processes started together."""
    ctx = mp.get_context("spawn")
    start, out = ctx.Barrier(processes + 1), ctx.Queue()
    procs = [ctx.Process(target=_run, args=(name, k, seconds, start, out)) for _ in range(processes)]
    for p in procs:
        p.start()
    start.wait(timeout=300)
    total = sum(out.get(timeout=seconds + 300) for _ in procs)
    for p in procs:
        p.join(30)
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", action="append", help=f"env ids (default: {', '.join(ENVS)})")
    parser.add_argument("--processes", type=int, default=16)
    parser.add_argument("--envs-per-process", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args(argv)
    print(f"{'env':<16} {'one process':>12} {'all together':>13} {'ratio':>7}  (env steps/s, "
          f"{args.processes} processes x {args.envs_per_process} envs)")
    for name in args.env or ENVS:
        one = measure(name, 1, args.envs_per_process, args.seconds)
        together = measure(name, args.processes, args.envs_per_process, args.seconds)
        ratio = together / (args.processes * one)
        print(f"{name:<16} {one:12,.0f} {together:13,.0f} {ratio:6.2f}x of {args.processes}x one", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
