"""An uneven inline split beside a busy process: the caller steps ``k`` of 8 envs, one worker the
rest, so that the group sharing a core with the busy process has less to do.

    python benchmarks/results/shared-machine-options/uneven_inline.py [--env HalfCheetah-v5] [--busy] [--pin]

vecenv splits envs evenly; this script replaces the split while it builds the uneven contenders
(``vecenv.engine.partition.split_envs``), so it measures a layout vecenv does not offer.
``--pin`` pins the caller to CPU 0 and the worker to CPU 1 while an inline contender runs.
Contenders: gym Sync (1.00x), vecenv serial, inline with k = 4, 5, 6, process (2 workers); rounds
interleaved, medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import gymnasium as gym

import vecenv
import vecenv.engine.partition as partition

N = 8


def children(skip: int | None) -> list[int]:
    me = os.getpid()
    pids = []
    for task in os.listdir(f"/proc/{me}/task"):
        with open(f"/proc/{me}/task/{task}/children") as f:
            pids += [int(x) for x in f.read().split()]
    return [pid for pid in pids if pid != skip]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="HalfCheetah-v5")
    p.add_argument("--busy", action="store_true")
    p.add_argument("--pin", action="store_true")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=1.0)
    args = p.parse_args()
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.busy else None
    fns = [lambda: gym.make(args.env)] * N
    contenders, workers = {"gym-sync": gym.vector.SyncVectorEnv(fns), "serial": vecenv.SerialVectorEnv(fns)}, {}
    even = partition.split_envs
    try:
        for k in (4, 5, 6):
            partition.split_envs = lambda n, w, k=k: [(0, n - k), (n - k, n)]
            before = set(children(busy and busy.pid))
            contenders[f"inline-{k}"] = vecenv.ProcessVectorEnv(fns, inline=True, num_workers=2)
            workers[f"inline-{k}"] = [pid for pid in children(busy and busy.pid) if pid not in before]
    finally:
        partition.split_envs = even
    contenders["process"] = vecenv.ProcessVectorEnv(fns, num_workers=2)
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    try:
        for envs in contenders.values():
            envs.reset(seed=0)
        for _ in range(args.rounds):
            for name, envs in contenders.items():
                if args.pin and name in workers:
                    os.sched_setaffinity(0, {0})
                    for pid in workers[name]:
                        os.sched_setaffinity(pid, {1})
                action = envs.action_space.sample()
                steps, start = 0, time.perf_counter()
                while time.perf_counter() - start < args.seconds:
                    envs.step(action)
                    steps += N
                rates[name].append(steps / (time.perf_counter() - start))
                os.sched_setaffinity(0, {0, 1})
    finally:
        for envs in contenders.values():
            envs.close()
        if busy is not None:
            busy.kill()
            busy.wait()
    base = statistics.median(rates["gym-sync"])
    print(" ".join(f"{name} {statistics.median(r) / base:.2f}x" for name, r in rates.items()))


if __name__ == "__main__":
    main()
