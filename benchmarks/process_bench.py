"""vecenv's process backend against gymnasium's vector envs, in one process, interleaved rounds.

    python benchmarks/process_bench.py                  # CartPole, the busy env, async batches; N=8
    python benchmarks/process_bench.py --rounds 7 --steps 4000 --only async

Env steps per second (a batched step of N envs counts N), medians of the rounds; every round goes
to ``--json`` (default results/process_bench.json).
"""

from __future__ import annotations

import contextlib
import platform
import sys
import time
from functools import partial
from pathlib import Path

import gymnasium as gym
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # beside this script (not automatic everywhere)
from _common import interleave, parser, print_table, table, write_json  # noqa: E402

import vecenv
from vecenv.bench.envs import BusyEnv, VariableBusyEnv
from vecenv.system import usable_cores


def run(make, steps: int, batched: bool = False) -> float:
    """Env steps/s of ``steps`` full-batch steps, or of the EnvPool-style loop (``batched``:
    ``send`` actions to the envs the last ``recv`` returned), after 50 untimed."""
    with contextlib.closing(make()) as envs:
        rows = envs.batch_size if batched else envs.num_envs
        rng = np.random.default_rng(0)
        actions = [rng.integers(0, envs.single_action_space.n, rows) for _ in range(16)]
        ids = envs.reset(seed=0)[1].get("env_id")
        for k in range(-50, steps):
            if k == 0:
                start = time.perf_counter()
            if batched:
                envs.send(actions[k % 16], ids)
                ids = envs.recv()[4]["env_id"]
            else:
                envs.step(actions[k % 16])
        return steps * rows / (time.perf_counter() - start)


def contenders(env_fn, n: int) -> dict:
    fns = [env_fn] * n
    return {"gym Sync": partial(gym.vector.SyncVectorEnv, fns),
            "gym Async": partial(gym.vector.AsyncVectorEnv, fns, context="fork"),
            "vecenv serial": partial(vecenv.SerialVectorEnv, fns),
            "vecenv process": partial(vecenv.ProcessVectorEnv, fns, context="fork"),
            "vecenv process inline": partial(vecenv.ProcessVectorEnv, fns, context="fork", inline=True)}


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__, rounds=5, json_name="process_bench.json")
    p.add_argument("--envs", type=int, default=8, help="number of envs (default 8)")
    p.add_argument("--steps", type=int, default=2000, help="batched steps per round (CartPole)")
    p.add_argument("--busy-steps", type=int, default=400, help="batched steps per round (busy env)")
    p.add_argument("--only", choices=["cartpole", "busy", "async"], action="append")
    args = p.parse_args(argv)
    which, n, base = set(args.only or ["cartpole", "busy", "async"]), args.envs, ("gym Sync", "gym Async")
    print(f"# vecenv process backend benchmark\n\nmachine: {platform.machine()}, "
          f"{usable_cores()} usable cores, Python {platform.python_version()}, "
          f"gymnasium {gym.__version__}, numpy {np.__version__}; N={n} envs, "
          f"{args.rounds} interleaved rounds, median")
    runs = []
    if "cartpole" in which:
        runs.append((f"CartPole-v1, N={n}", contenders(partial(gym.make, "CartPole-v1"), n), args.steps, base))
    if "busy" in which:
        busy = partial(BusyEnv, step_cost_us=100.0, episode_length=1000)
        runs.append((f"busy env (100 µs/step, 84x84x4 uint8), N={n}", contenders(busy, n), args.busy_steps, base))
    for title, wait in (("busy", False), ("sleeping (waits instead of burning CPU)", True)):
        if "async" in which:
            m = 3 * n
            fns = [partial(VariableBusyEnv, min_cost_us=50.0, max_cost_us=1000.0, episode_length=1000, wait=wait)] * m
            cases = {f"process {kind}, N={m}{batch}{workers}": partial(
                vecenv.ProcessVectorEnv, fns, context="fork", num_workers=m if workers else None,
                batch_size=n if kind == "async" else None)
                for kind, batch in (("sync", ""), ("async", f", batch={n}")) for workers in ("", f", {m} workers")}
            runs.append((f"variable-cost {title} env (50–1000 µs/step), async batches", cases, args.busy_steps,
                         (next(iter(cases)),)))
    tables = []
    for title, cases, steps, baselines in runs:
        rounds = interleave(list(cases), args.rounds, lambda name, cases=cases, steps=steps: run(
            cases[name], 3 * steps if "async," in name else steps, batched="async," in name))
        tables.append(table(title, rounds, baselines))
        print_table(tables[-1])
    write_json(args.json, "process_bench.py", vars(args), tables)


if __name__ == "__main__":
    main()
