"""Side-by-side throughput of vecenv's process backend against gymnasium's vector envs.

Every contender runs in this one process, in interleaved rounds (A B C A B C ...), and the
median of the rounds is reported, so background load hits all contenders alike.

    python benchmarks/process_bench.py                  # CartPole + busy env, N=8
    python benchmarks/process_bench.py --rounds 7 --steps 4000
    python benchmarks/process_bench.py --only async     # the async-batch comparison only
    python benchmarks/process_bench.py --spin 0 50 200  # compare spin settings (tuning)

Counts env steps per second (one batched step of N envs counts N). Every round of every table,
with the machine and versions, goes to ``--json PATH`` (default
``benchmarks/results/process_bench.json``).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import gymnasium as gym
import numpy as np

import vecenv

try:
    from vecenv.bench.envs import BusyEnv, VariableBusyEnv
except ImportError:  # pragma: no cover - the shared bench envs are optional here
    BusyEnv = VariableBusyEnv = None  # type: ignore[assignment]

RESULTS = Path(__file__).resolve().parent / "results"


def cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


def busy() -> gym.Env:
    return BusyEnv(step_cost_us=100.0, episode_length=1000)


def variable_busy() -> gym.Env:
    return VariableBusyEnv(min_cost_us=50.0, max_cost_us=1000.0, episode_length=1000)


def variable_wait() -> gym.Env:
    return VariableBusyEnv(min_cost_us=50.0, max_cost_us=1000.0, episode_length=1000, wait=True)


def run_sync(make: Callable[[], gym.vector.VectorEnv], steps: int, warmup: int = 50) -> float:
    """Env steps/s of ``steps`` full-batch steps."""
    envs = make()
    try:
        envs.reset(seed=0)
        n = envs.num_envs
        rng = np.random.default_rng(0)
        actions = [rng.integers(0, envs.single_action_space.n, n) for _ in range(16)]
        for k in range(warmup):
            envs.step(actions[k % 16])
        t = time.perf_counter()
        for k in range(steps):
            envs.step(actions[k % 16])
        return steps * n / (time.perf_counter() - t)
    finally:
        envs.close()


def run_async_batches(make: Callable[[], vecenv.VectorEnv], steps: int, warmup: int = 50) -> float:
    """Env steps/s of the EnvPool-style loop: recv a batch, send actions back to those envs."""
    envs = make()
    try:
        bs = envs.batch_size
        rng = np.random.default_rng(0)
        obs, info = envs.reset(seed=0)
        ids = info["env_id"]
        for _ in range(warmup):
            envs.send(rng.integers(0, 4, bs), ids)
            obs, rew, term, trunc, info = envs.recv()
            ids = info["env_id"]
        t = time.perf_counter()
        for _ in range(steps):
            envs.send(rng.integers(0, 4, bs), ids)
            obs, rew, term, trunc, info = envs.recv()
            ids = info["env_id"]
        return steps * bs / (time.perf_counter() - t)
    finally:
        envs.close()


def contenders(env_fn: Callable[[], gym.Env], n: int, spins: list[float | None]) -> dict:
    fns = [env_fn] * n
    out = {
        "gym Sync": partial(gym.vector.SyncVectorEnv, fns),
        "gym Async": partial(gym.vector.AsyncVectorEnv, fns, context="fork"),
        "vecenv serial": partial(vecenv.SerialVectorEnv, fns),
    }
    for spin in spins:
        label = "vecenv process" if spin is None else f"vecenv process spin={spin:g}us"
        out[label] = partial(vecenv.ProcessVectorEnv, fns, context="fork", spin_us=spin)
        out[label + " inline"] = partial(vecenv.ProcessVectorEnv, fns, context="fork", spin_us=spin, inline=True)
    return out


def measure(cases: dict, runner: Callable, steps: int, rounds: int) -> dict[str, list[float]]:
    """Every round's env steps/s of each case, the cases taking turns."""
    rates: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, make in cases.items():
            rates[name].append(runner(make, steps))
    return rates


def report(title: str, rates: dict[str, list[float]], baselines: tuple[str, ...], tables: list) -> None:
    """Print one table of medians (and ratios to ``baselines``) and keep it for the JSON."""
    medians = {name: statistics.median(r) for name, r in rates.items()}
    tables.append({
        "title": title,
        "unit": "env steps/s",
        "baselines": list(baselines),
        "rows": [
            {"contender": name, "steps_per_s": rates[name], "median_steps_per_s": medians[name],
             "vs": {b: medians[name] / medians[b] for b in baselines if b in medians}}
            for name in rates
        ],
    })
    print(f"\n## {title}")
    header = f"| {'contender':34} | {'steps/s':>9} |" + "".join(f" vs {b:>10} |" for b in baselines)
    print(header)
    print("|" + "-" * 36 + "|" + "-" * 11 + "|" + "".join("-" * 16 + "|" for _ in baselines))
    for name, rate in medians.items():
        row = f"| {name:34} | {rate:9.0f} |"
        for b in baselines:
            row += f" {rate / medians[b]:13.2f}x |" if b in medians else " " * 16 + "|"
        print(row)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=8, help="number of envs (default 8)")
    parser.add_argument("--steps", type=int, default=2000, help="batched steps per round (CartPole)")
    parser.add_argument("--busy-steps", type=int, default=400, help="batched steps per round (busy env)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds; the median is reported")
    parser.add_argument("--only", choices=["cartpole", "busy", "async"], action="append")
    parser.add_argument("--spin", type=float, nargs="*", default=None,
                        help="spin settings (µs) to compare; default: the automatic choice only")
    parser.add_argument("--json", type=Path, default=RESULTS / "process_bench.json",
                        help="where to write every round (default: benchmarks/results/process_bench.json)")
    args = parser.parse_args(argv)
    which = set(args.only or ["cartpole", "busy", "async"])
    spins: list[float | None] = [None] if not args.spin else list(args.spin)
    n = args.envs
    print(f"# vecenv process backend benchmark\n\nmachine: {platform.machine()}, "
          f"{len(os.sched_getaffinity(0))} usable cores, Python {platform.python_version()}, "
          f"gymnasium {gym.__version__}, numpy {np.__version__}; N={n} envs, "
          f"{args.rounds} interleaved rounds, median")
    base = ("gym Sync", "gym Async")
    tables: list[dict] = []
    if "cartpole" in which:
        cases = contenders(cartpole, n, spins)
        report(f"CartPole-v1, N={n}", measure(cases, run_sync, args.steps, args.rounds), base, tables)
    if "busy" in which and BusyEnv is not None:
        cases = contenders(busy, n, spins)
        report(f"busy env (100 µs/step, 84x84x4 uint8), N={n}",
               measure(cases, run_sync, args.busy_steps, args.rounds), base, tables)
    for title, env_fn in (("busy", variable_busy), ("sleeping (waits instead of burning CPU)", variable_wait)):
        if "async" not in which or VariableBusyEnv is None:
            break
        total = 3 * n
        fns = [env_fn] * total
        cases = {
            f"process sync, N={total}": partial(vecenv.ProcessVectorEnv, fns, context="fork"),
            f"process sync, N={total}, {total} workers": partial(
                vecenv.ProcessVectorEnv, fns, context="fork", num_workers=total),
            f"process async, N={total}, batch={n}": partial(
                vecenv.ProcessVectorEnv, fns, context="fork", batch_size=n),
            f"process async, N={total}, batch={n}, {total} workers": partial(
                vecenv.ProcessVectorEnv, fns, context="fork", batch_size=n, num_workers=total),
        }
        sync_name = next(iter(cases))
        rates: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.rounds):
            for name, make in cases.items():
                batched = "async" in name
                runner = run_async_batches if batched else run_sync
                steps = args.busy_steps * 3 if batched else args.busy_steps
                rates[name].append(runner(make, steps))
        report(f"variable-cost {title} env (50–1000 µs/step), async batches", rates, (sync_name,), tables)
    write_json(args.json, vars(args), tables)


def write_json(path: Path, settings: dict, tables: list[dict]) -> None:
    """Every round of every table, with the settings, the machine and the versions."""
    from _results import write_script_json

    write_script_json(path, Path(__file__).name, settings, tables)


if __name__ == "__main__":
    main()
