"""vecenv.sb3's VecEnvs against Stable-Baselines3's own, in one process, interleaved rounds (env
steps/s, medians; every round goes to ``--json``). Needs SB3.

    python benchmarks/sb3_bench.py              # CartPole-v1 and the busy env, N=8
    python benchmarks/sb3_bench.py --rounds 7 --seconds 1
"""

from __future__ import annotations

import contextlib
import itertools
import sys
from functools import partial
from pathlib import Path

import gymnasium as gym
import numpy as np
from stable_baselines3.common import vec_env as sb3

sys.path.insert(0, str(Path(__file__).resolve().parent))  # beside this script (not automatic everywhere)
from _common import interleave, parser, print_table, rate, table, write_json  # noqa: E402

import vecenv.bench.envs  # noqa: F401  (registers vecenv/Busy-v0)
from vecenv import sb3 as ours

CONTENDERS = {
    "sb3 DummyVecEnv": sb3.DummyVecEnv,
    "sb3 SubprocVecEnv": partial(sb3.SubprocVecEnv, start_method="fork"),
    "vecenv.sb3 DummyVecEnv": ours.DummyVecEnv,
    "vecenv.sb3 SubprocVecEnv": partial(ours.SubprocVecEnv, start_method="fork"),
    "vecenv.sb3 SubprocVecEnv inline": partial(ours.SubprocVecEnv, start_method="fork", inline=True),
}


def measure(make, fns, seconds: float) -> float:
    with contextlib.closing(make(fns)) as venv:
        venv.reset()
        rng = np.random.default_rng(0)
        actions = itertools.cycle([rng.integers(0, venv.action_space.n, venv.num_envs) for _ in range(64)])

        def once() -> int:
            venv.step(next(actions))
            return venv.num_envs

        return rate(once, seconds, warmup=5)


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__, rounds=5, seconds=0.75, json_name="sb3_bench.json")
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--envs", nargs="+", default=["CartPole-v1", "vecenv/Busy-v0"], help="env ids to run")
    args = p.parse_args(argv)
    tables = []
    for env_id in args.envs:
        fns = [partial(gym.make, env_id)] * args.num_envs
        rounds = interleave(list(CONTENDERS), args.rounds,
                            lambda name, fns=fns: measure(CONTENDERS[name], fns, args.seconds))
        tables.append(table(f"{env_id}, N={args.num_envs}", rounds, ("sb3 DummyVecEnv", "sb3 SubprocVecEnv"),
                            env=env_id))
        print_table(tables[-1])
    write_json(args.json, "sb3_bench.py", vars(args), tables)


if __name__ == "__main__":
    main()
