"""The machine's own ceiling: two processes stepping 4 envs each with no communication at all,
against one process stepping 8.

    python benchmarks/results/shared-machine-options/two_core_ceiling.py [--env HalfCheetah-v5] [--rounds 5]
    python benchmarks/results/shared-machine-options/two_core_ceiling.py --env Pong   # run_real.py's Pong

What a 2-core vector env could reach if its traffic cost nothing. Each round starts the
processes, lets them build their envs, then starts every clock at one event; the sum of their
steps/s is compared. Prints the median ratio and each round's.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/: the bench targets

from shared_bench.targets import target  # noqa: E402


def run(name: str, k: int, seconds: float, go: mp.Event, out: mp.Queue) -> None:
    envs = [target(name).env_fn() for _ in range(k)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
    actions = [env.action_space.sample() for env in envs]
    go.wait()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for env, action in zip(envs, actions, strict=True):
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()
        steps += k
    out.put(steps / (time.perf_counter() - start))


def total(name: str, processes: int, per_process: int, seconds: float) -> float:
    go, out = mp.Event(), mp.Queue()
    procs = [mp.Process(target=run, args=(name, per_process, seconds, go, out)) for _ in range(processes)]
    for p in procs:
        p.start()
    time.sleep(2.0)  # every process has built its envs
    go.set()
    rate = sum(out.get() for _ in procs)
    for p in procs:
        p.join()
    return rate


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="HalfCheetah-v5")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=2.0)
    args = p.parse_args()
    ratios, ones = [], []
    for _ in range(args.rounds):
        one = total(args.env, 1, 8, args.seconds)
        two = total(args.env, 2, 4, args.seconds)
        ones.append(one)
        ratios.append(two / one)
    print(f"{args.env}: one process {statistics.median(ones):,.0f} steps/s; two processes "
          f"{statistics.median(ratios):.2f}x (rounds: {', '.join(f'{r:.2f}' for r in ratios)})")


if __name__ == "__main__":
    main()
