"""vecenv.Collector against the loops a user would write: Pong with CleanRL's CNN policy in the loop.

    python benchmarks/collector_bench.py                      # Pong, N=8, 5 interleaved rounds (~3 min, 2 cores)
    python benchmarks/collector_bench.py --rounds 1 --seconds 1   # a quick look

Contenders, each stepping ``vecenv.make(make_pong, 8, ...)`` and choosing every action with CleanRL's
Atari CNN on one torch thread (benchmarks/shared_bench/policy.py):

- ``sync``: ``vecenv.make``'s default (whole batches, ``backend="auto"``): obs -> policy -> step,
  storing each step in (T, N) arrays as a training loop does.
- ``async-loop``: the same with ``batch_size=N/2``, written by hand as EnvPool's examples do:
  ``send`` the batch just computed, ``recv`` the next ready one. It stores nothing, so it is the
  ceiling for a collector over the same vector env.
- ``collector``: ``vecenv.Collector(envs, policy, steps=128)`` over that vector env, ``collect()``
  again and again: (T, N) rollouts, every env exactly 128 steps per rollout.

Each measurement builds its vector env, warms up for one rollout's worth of steps, then counts env
steps for at least ``--seconds`` (whole rollouts of 128 x N steps), and closes it. Rounds are
interleaved (the order rotating); the table shows medians of steps/s and the ratios the collector
issue sets targets for: collector / async-loop (>= 0.95) and collector / sync (>= 1.25).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import write_script_json  # noqa: E402
from shared_bench.policy import make_policy  # noqa: E402
from shared_bench.targets import make_pong  # noqa: E402

import vecenv  # noqa: E402

CONTENDERS = ("sync", "async-loop", "collector")


def run_sync(n: int, steps: int, seconds: float, act) -> float:
    with vecenv.make(make_pong, n) as envs:
        obs_buf = np.zeros((steps, n, *envs.single_observation_space.shape), np.uint8)
        actions_buf, rewards_buf = np.zeros((steps, n), np.int64), np.zeros((steps, n), np.float32)
        dones_buf = np.zeros((steps, n), np.bool_)
        obs, _ = envs.reset(seed=0)

        def rollout(obs):
            for t in range(steps):
                obs_buf[t] = obs
                actions_buf[t] = actions = act(obs)
                obs, rewards_buf[t], term, trunc, _ = envs.step(actions)
                dones_buf[t] = term | trunc
            return obs

        obs = rollout(obs)  # warm-up
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            obs = rollout(obs)
            count += steps * n
        return count / (time.perf_counter() - start)


def run_async_loop(n: int, steps: int, seconds: float, act) -> float:
    with vecenv.make(make_pong, n, batch_size=n // 2) as envs:
        obs, infos = envs.reset(seed=0)
        ids = infos["env_id"]

        def run(count: int):
            nonlocal obs, ids
            for _ in range(count // len(ids)):
                envs.send(act(obs), ids)
                obs, _, _, _, infos = envs.recv()
                ids = infos["env_id"]

        run(steps * n)
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            run(steps * n)
            count += steps * n
        return count / (time.perf_counter() - start)


def run_collector(n: int, steps: int, seconds: float, act) -> float:
    with vecenv.make(make_pong, n, batch_size=n // 2) as envs:
        collector = vecenv.Collector(envs, lambda obs, ids: act(obs), steps=steps, seed=0)
        collector.collect()
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            collector.collect()
            count += steps * n
        return count / (time.perf_counter() - start)


RUNS = {"sync": run_sync, "async-loop": run_async_loop, "collector": run_collector}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--steps", type=int, default=128, help="steps per env per rollout")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=4.0, help="least measured time per contender and round")
    p.add_argument("--json", type=Path, default=Path(__file__).resolve().parent / "results" / "collector.json")
    args = p.parse_args(argv)
    act = make_policy(6, seed=0)
    results: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    for r in range(args.rounds):
        order = CONTENDERS[r % 3:] + CONTENDERS[:r % 3]
        for name in order:
            sps = RUNS[name](args.num_envs, args.steps, args.seconds, act)
            results[name].append(sps)
            print(f"round {r + 1}/{args.rounds}  {name:<11} {sps:8,.0f} steps/s", flush=True)
    med = {name: statistics.median(v) for name, v in results.items()}
    print(f"\nPong, N={args.num_envs}, CleanRL's CNN policy, medians of {args.rounds} rounds:")
    print("| contender | steps/s (median) | rounds |\n|---|---|---|")
    for name in CONTENDERS:
        print(f"| {name} | {med[name]:,.0f} | {', '.join(f'{x:,.0f}' for x in results[name])} |")
    vs_loop, vs_sync = med["collector"] / med["async-loop"], med["collector"] / med["sync"]
    print(f"\ncollector / async-loop = {vs_loop:.2f} (target >= 0.95); "
          f"collector / sync = {vs_sync:.2f} (target >= 1.25); async-loop / sync = {med['async-loop'] / med['sync']:.2f}")
    write_script_json(args.json, "collector_bench.py", vars(args),
                      [{"name": "pong-cnn", "rounds": results, "medians": med,
                        "ratios": {"collector/async-loop": vs_loop, "collector/sync": vs_sync}}])
    return 0


if __name__ == "__main__":
    sys.exit(main())
