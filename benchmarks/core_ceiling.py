"""The machine's ceiling on many cores: ``--processes`` processes that never communicate, each
stepping its own gymnasium SyncVectorEnv, summed, beside one such process alone.

    python benchmarks/core_ceiling.py --processes 16 --envs-per-process 4
    python benchmarks/core_ceiling.py --env HalfCheetah-v5 --env Pong --env vecenv/Busy-v0
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import env_fn, parser  # noqa: E402

ENVS = ("vecenv/Busy-v0", "HalfCheetah-v5", "Pong")


def _run(name: str, k: int, seconds: float, start, out) -> None:
    import gymnasium as gym

    envs = gym.vector.SyncVectorEnv([env_fn(name)] * k)
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
    p = parser(__doc__, seconds=3.0)
    p.add_argument("--env", action="append", help=f"env ids (default: {', '.join(ENVS)})")
    p.add_argument("--processes", type=int, default=16)
    p.add_argument("--envs-per-process", type=int, default=4)
    args = p.parse_args(argv)
    n, k = args.processes, args.envs_per_process
    print(f"{'env':<16} {'one process':>12} {'all together':>13} {'ratio':>7}  (env steps/s, {n} processes x {k} envs)")
    for name in args.env or ENVS:
        one, together = measure(name, 1, k, args.seconds), measure(name, n, k, args.seconds)
        print(f"{name:<16} {one:12,.0f} {together:13,.0f} {together / (n * one):6.2f}x of {n}x one", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
