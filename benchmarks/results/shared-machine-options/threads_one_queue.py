"""Would threads that take envs from one queue (EnvPool's design) help gymnasium's own envs?

    python benchmarks/results/shared-machine-options/threads_one_queue.py [--envs HalfCheetah-v5,Pong] [--rounds 5]

For each env and each condition (``idle``; ``busy``: ``python -c "while True: pass"`` beside),
8 envs in this process are stepped for ``--seconds`` by:

- ``serial``: one thread, env after env;
- ``split-2``: two threads, four envs each (the thread backend's layout);
- ``queue-2`` / ``queue-3``: the caller and one or two helper threads take the next env from one
  shared iterator until the step's envs run out, then meet at a barrier.

Rounds are interleaved; medians, × serial of the same condition. Threads pay only when a step
releases the GIL for most of its time. Results go to ``--json`` (default: beside this script).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym

N = 8


def make(name: str) -> gym.Env:
    if name != "Pong":
        return gym.make(name)
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make("ALE/Pong-v5", frameskip=1)
    return gym.wrappers.FrameStackObservation(gym.wrappers.AtariPreprocessing(env, frame_skip=4), 4)


class Envs:
    """``N`` envs and a fixed action each; ``step(i)`` steps env ``i`` (resetting a finished one)."""

    def __init__(self, name: str) -> None:
        self.envs = [make(name) for _ in range(N)]
        for i, env in enumerate(self.envs):
            env.reset(seed=i)
            env.action_space.seed(i)
        self.actions = [env.action_space.sample() for env in self.envs]

    def step(self, i: int) -> None:
        _, _, terminated, truncated, _ = self.envs[i].step(self.actions[i])
        if terminated or truncated:
            self.envs[i].reset()


def serial(envs: Envs, seconds: float) -> float:
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for i in range(N):
            envs.step(i)
        steps += N
    return steps / (time.perf_counter() - start)


def split(envs: Envs, seconds: float, threads: int = 2) -> float:
    """Each thread steps its own envs, a barrier closes every vector step."""
    stop = threading.Event()
    barrier = threading.Barrier(threads)
    counts = [0] * threads

    def run(k: int) -> None:
        mine = range(k, N, threads)
        while True:
            barrier.wait()
            if stop.is_set():
                return
            for i in mine:
                envs.step(i)
            counts[k] += len(mine)

    helpers = [threading.Thread(target=run, args=(k,)) for k in range(1, threads)]
    for h in helpers:
        h.start()
    start = time.perf_counter()
    mine = range(0, N, threads)
    while time.perf_counter() - start < seconds:
        barrier.wait()
        for i in mine:
            envs.step(i)
        counts[0] += len(mine)
    elapsed = time.perf_counter() - start
    stop.set()
    barrier.wait()
    for h in helpers:
        h.join()
    return sum(counts) / elapsed


def one_queue(envs: Envs, seconds: float, threads: int) -> float:
    """The caller and ``threads - 1`` helpers take envs from one iterator each vector step."""
    begin, end = threading.Barrier(threads), threading.Barrier(threads)
    state: dict[str, Any] = {"ids": iter(()), "stop": False}

    def take() -> None:
        ids = state["ids"]
        for i in ids:  # next() on a shared iterator hands each env to one thread
            envs.step(i)

    def helper() -> None:
        while True:
            begin.wait()
            if state["stop"]:
                return
            take()
            end.wait()

    helpers = [threading.Thread(target=helper) for _ in range(threads - 1)]
    for h in helpers:
        h.start()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        state["ids"] = iter(range(N))
        begin.wait()
        take()
        end.wait()
        steps += N
    elapsed = time.perf_counter() - start
    state["stop"] = True
    begin.wait()
    for h in helpers:
        h.join()
    return steps / elapsed


CONTENDERS: dict[str, Callable[[Envs, float], float]] = {
    "serial": serial,
    "split-2": split,
    "queue-2": lambda envs, s: one_queue(envs, s, 2),
    "queue-3": lambda envs, s: one_queue(envs, s, 3),
}


def measure(name: str, condition: str, rounds: int, seconds: float) -> dict[str, list[float]]:
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if condition == "busy" else None
    try:
        envs = Envs(name)
        rates: dict[str, list[float]] = {c: [] for c in CONTENDERS}
        names = list(CONTENDERS)
        for r in range(rounds):
            for c in names[r % len(names):] + names[:r % len(names)]:  # rotate the order
                rates[c].append(CONTENDERS[c](envs, seconds))
        return rates
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--envs", default="HalfCheetah-v5,Pong")
    p.add_argument("--conditions", default="idle,busy")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--json", type=Path, default=Path(__file__).with_suffix(".json"))
    args = p.parse_args()
    out: dict[str, Any] = {"machine": platform.processor() or platform.machine(),
                           "python": platform.python_version(), "gymnasium": gym.__version__,
                           "date": time.strftime("%Y-%m-%d"), "runs": []}
    print("env             condition  " + "  ".join(f"{c:>8}" for c in CONTENDERS) + "   serial steps/s")
    for name in args.envs.split(","):
        for condition in args.conditions.split(","):
            rates = measure(name, condition, args.rounds, args.seconds)
            base = statistics.median(rates["serial"])
            ratios = {c: statistics.median(v) / base for c, v in rates.items()}
            print(f"{name:15s} {condition:9s}  " + "  ".join(f"{ratios[c]:7.2f}x" for c in CONTENDERS)
                  + f"   {base:,.0f}", flush=True)
            out["runs"].append({"env": name, "condition": condition, "rounds": rates,
                                "x_serial": ratios})
    args.json.write_text(json.dumps(out, indent=1))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
