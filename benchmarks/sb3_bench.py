"""vecenv.sb3's VecEnvs side by side with Stable-Baselines3's own, in one process run.

    python benchmarks/sb3_bench.py              # CartPole-v1 and the busy env, N=8
    python benchmarks/sb3_bench.py --rounds 7 --seconds 1

Contenders take turns (interleaved rounds) and the median is reported, so background load hits
them alike. Counts env steps per second (one vector step of N envs counts N). Needs SB3. Every
round, with the machine and versions, goes to ``--json PATH`` (default
``benchmarks/results/sb3_bench.json``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import partial
from pathlib import Path

import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env import DummyVecEnv as SB3Dummy
from stable_baselines3.common.vec_env import SubprocVecEnv as SB3Subproc

import vecenv.bench.envs  # noqa: F401  (registers vecenv/Busy-v0)
from vecenv.make import usable_cores
from vecenv.sb3 import DummyVecEnv, SubprocVecEnv

RESULTS = Path(__file__).resolve().parent / "results"

CONTENDERS = {
    "sb3 DummyVecEnv": lambda fns: SB3Dummy(fns),
    "sb3 SubprocVecEnv": lambda fns: SB3Subproc(fns, start_method="fork"),
    "vecenv.sb3 DummyVecEnv": lambda fns: DummyVecEnv(fns),
    "vecenv.sb3 SubprocVecEnv": lambda fns: SubprocVecEnv(fns, start_method="fork"),
    "vecenv.sb3 SubprocVecEnv inline": lambda fns: SubprocVecEnv(fns, start_method="fork", inline=True),
}


def measure(make, fns, seconds: float) -> float:
    venv = make(fns)
    try:
        venv.reset()
        rng = np.random.default_rng(0)
        n = venv.num_envs
        actions = [rng.integers(0, venv.action_space.n, n) for _ in range(64)]
        for a in actions[:5]:
            venv.step(a)
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            venv.step(actions[steps % 64])
            steps += 1
        return steps * n / (time.perf_counter() - start)
    finally:
        venv.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.75)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--envs", nargs="+", default=["CartPole-v1", "vecenv/Busy-v0"],
                        help="env ids to run (default: CartPole-v1 and the busy env)")
    parser.add_argument("--json", type=Path, default=RESULTS / "sb3_bench.json",
                        help="where to write every round (default: benchmarks/results/sb3_bench.json)")
    args = parser.parse_args(argv)
    print(f"# vecenv.sb3 vs SB3: N={args.num_envs}, {usable_cores()} usable cores, "
          f"median of {args.rounds} interleaved rounds of {args.seconds} s\n")
    tables = []
    for env_id in args.envs:
        fns = [partial(gym.make, env_id)] * args.num_envs
        rounds: dict[str, list[float]] = {name: [] for name in CONTENDERS}
        for _ in range(args.rounds):
            for name, make in CONTENDERS.items():
                rounds[name].append(measure(make, fns, args.seconds))
        med = {name: statistics.median(r) for name, r in rounds.items()}
        print(f"## {env_id}\n| contender | steps/s | × sb3 Dummy | × sb3 Subproc |\n|---|---:|---:|---:|")
        for name, value in med.items():
            print(f"| {name} | {value:,.0f} | {value / med['sb3 DummyVecEnv']:.2f}× "
                  f"| {value / med['sb3 SubprocVecEnv']:.2f}× |")
        print()
        baselines = ("sb3 DummyVecEnv", "sb3 SubprocVecEnv")
        tables.append({
            "title": f"{env_id}, N={args.num_envs}",
            "env": env_id,
            "unit": "env steps/s",
            "baselines": list(baselines),
            "rows": [{"contender": name, "steps_per_s": rounds[name], "median_steps_per_s": med[name],
                      "vs": {b: med[name] / med[b] for b in baselines}} for name in CONTENDERS],
        })
    write_json(args.json, vars(args), tables)


def write_json(path: Path, settings: dict, tables: list[dict]) -> None:
    """Every round of every table, with the settings, the machine and the versions."""
    from _results import write_script_json

    write_script_json(path, Path(__file__).name, settings, tables)


if __name__ == "__main__":
    main()
