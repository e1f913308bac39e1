"""The process backend's two mechanisms side by side, against gymnasium's vector envs.

Interleaved rounds (A B C D A B C D ...) in this one process, medians reported, on CartPole and
(with ``vecenv[sims]``) Atari Pong with gymnasium's preprocessing:

    python benchmarks/mechanism_bench.py                          # N=8, fork and spawn
    python benchmarks/mechanism_bench.py --context spawn --rounds 7

Contenders: gymnasium's SyncVectorEnv and AsyncVectorEnv (the same start method), vecenv's process
backend with ``mechanism="posix"`` (where it runs) and ``mechanism="portable"``. Env steps per
second and each one's ratio to gym Sync; every round goes to ``--json``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np

import vecenv
from vecenv.transports.process.mechanism import MECHANISMS

RESULTS = Path(__file__).resolve().parent / "results" / "mechanisms"


def cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


def pong() -> gym.Env:
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make("ALE/Pong-v5", frameskip=1)
    return gym.wrappers.AtariPreprocessing(env, frame_skip=4)


def contenders(fn: Callable[[], gym.Env], n: int, context: str) -> dict[str, Callable[[], object]]:
    out: dict[str, Callable[[], object]] = {
        "gym-sync": lambda: gym.vector.SyncVectorEnv([fn] * n),
        "gym-async": lambda: gym.vector.AsyncVectorEnv([fn] * n, context=context),
    }
    for name, mechanism in MECHANISMS.items():
        if not mechanism.missing():
            out[f"vecenv-{name}"] = lambda m=name: vecenv.ProcessVectorEnv([fn] * n, context=context, mechanism=m)
    return out


def one_round(build: Callable[[], object], n: int, steps: int, seed: int) -> float:
    envs = build()
    try:
        envs.reset(seed=seed)  # type: ignore[attr-defined]
        rng = np.random.default_rng(seed)
        space = envs.single_action_space  # type: ignore[attr-defined]
        actions = [np.array([space.sample() for _ in range(n)]) for _ in range(16)]
        for i in range(10):
            envs.step(actions[i % 16])  # type: ignore[attr-defined]
        started = time.perf_counter()
        for _ in range(steps):
            envs.step(actions[int(rng.integers(16))])  # type: ignore[attr-defined]
        return n * steps / (time.perf_counter() - started)
    finally:
        envs.close()  # type: ignore[attr-defined]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--context", action="append", help="start method(s); default fork (where it exists) and spawn")
    parser.add_argument("--json", type=Path, default=RESULTS / "mechanism_bench.json")
    args = parser.parse_args(argv)
    contexts = args.context or [m for m in ("fork", "spawn") if m in multiprocessing.get_all_start_methods()]
    targets = [("CartPole-v1", cartpole, 2000)]
    try:
        pong()
        targets.append(("Pong", pong, 150))
    except Exception as exc:  # noqa: BLE001 - the sims extra is optional
        print(f"Pong left out: {type(exc).__name__}: {exc}")
    record = {"machine": platform.platform(), "python": sys.version.split()[0], "envs": args.envs, "tables": []}
    for context in contexts:
        for label, fn, steps in targets:
            runs = contenders(fn, args.envs, context)
            rounds: dict[str, list[float]] = {name: [] for name in runs}
            for r in range(args.rounds):
                for name, build in runs.items():
                    rounds[name].append(one_round(build, args.envs, steps, seed=r))
            med = {name: statistics.median(v) for name, v in rounds.items()}
            print(f"\n{label}, N={args.envs}, start method {context}, medians of {args.rounds} interleaved rounds")
            for name, value in med.items():
                print(f"  {name:16s} {value:10,.0f} env-steps/s  {value / med['gym-sync']:5.2f}x gym-sync  "
                      f"{value / med['gym-async']:5.2f}x gym-async")
            record["tables"].append({"env": label, "context": context, "rounds": rounds, "median": med})
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(record, indent=2) + "\n")
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
