"""Threads against serial, processes (and optionally Ray), on a GIL-releasing env and on CartPole.

    python benchmarks/thread_bench.py [--envs 8] [--workers 2] [--steps 300] [--repeats 5] [--ray]

Two regimes:
- ``matmul``: each step multiplies two 256x256 float64 matrices (numpy/BLAS releases the GIL),
  so threads can step envs in parallel; BLAS is pinned to one thread per call so that the
  backends, not BLAS, provide the parallelism.
- ``cartpole``: CartPole-v1, a pure-Python step of a few microseconds (overhead-bound).

Each configuration is timed ``--repeats`` times, the backends taking turns; the median
env-steps/s is reported (other programs may share the cores, so single runs are noisy).
``cpu/wall`` is this process's CPU time over wall time (serial and thread only): above 1.0 the
threads really ran in parallel, whatever else the machine was doing. Every run, with the machine
and versions, goes to ``--json PATH`` (default ``benchmarks/results/thread_bench.json``).
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before numpy is imported, here and in every worker

import argparse  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sysconfig  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
from gymnasium import spaces  # noqa: E402

import vecenv  # noqa: E402
from vecenv.system import gil_enabled, usable_cores  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


class MatmulEnv(gym.Env):
    """Each step: one ``size x size`` matrix product (GIL released inside BLAS)."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self.observation_space = spaces.Box(-np.inf, np.inf, (16,), np.float32)
        self.action_space = spaces.Discrete(4)
        rng = np.random.default_rng(0)
        self.a = rng.standard_normal((size, size))
        self.b = rng.standard_normal((size, size)) / size
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(16, np.float32), {}

    def step(self, action):
        self.a = self.a @ self.b  # ~1-2 ms of BLAS, GIL released
        self.a /= np.abs(self.a).max() + 1e-9
        self.t += 1
        obs = self.a[0, :16].astype(np.float32)
        return obs, float(obs[0]), False, self.t >= 1000, {}


def cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


ENVS = {"matmul": MatmulEnv, "cartpole": cartpole}


def time_backends(backends: list[str], env_fn, num_envs: int, workers: int, steps: int,
                  repeats: int) -> dict[str, tuple[list[float], list[float]]]:
    """Env-steps/s and this process's CPU-time/wall-time ratio of each run, per backend.

    The backends take turns within each repeat, so a burst of load from other programs hits
    them alike.
    """
    envs = {}
    try:
        for backend in backends:
            kwargs = {} if backend == "serial" else {"num_workers": workers}
            if backend == "process":
                kwargs["context"] = "fork"
            envs[backend] = vecenv.make([env_fn] * num_envs, backend=backend, **kwargs)
        actions = np.zeros(num_envs, dtype=np.int64)
        for e in envs.values():
            e.reset(seed=0)
            for _ in range(min(20, steps)):  # warm-up
                e.step(actions)
        out: dict[str, tuple[list[float], list[float]]] = {b: ([], []) for b in backends}
        for _ in range(repeats):
            for backend, e in envs.items():
                c0, t0 = time.process_time(), time.perf_counter()
                for _ in range(steps):
                    e.step(actions)
                wall = time.perf_counter() - t0
                out[backend][0].append(num_envs * steps / wall)
                out[backend][1].append((time.process_time() - c0) / wall)
        return out
    finally:
        for e in envs.values():
            e.close()


def single_step_cost(env_fn, n: int = 200) -> float:
    env = env_fn()
    env.reset(seed=0)
    t0 = time.perf_counter()
    for _ in range(n):
        _, _, term, trunc, _ = env.step(0)
        if term or trunc:
            env.reset()
    env.close()
    return (time.perf_counter() - t0) / n


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--envs", type=int, default=8)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--steps", type=int, default=300, help="vector steps per timed run (matmul: /10)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--ray", action="store_true", help="also time the Ray backend")
    p.add_argument("--only", choices=sorted(ENVS), default=None)
    p.add_argument("--json", type=Path, default=RESULTS / "thread_bench.json",
                   help="where to write every run (default: benchmarks/results/thread_bench.json)")
    args = p.parse_args(argv)
    tables = []

    print(f"Python {platform.python_version()} ({'GIL' if gil_enabled() else 'free-threaded'}, "
          f"Py_GIL_DISABLED={sysconfig.get_config_var('Py_GIL_DISABLED')}), "
          f"{usable_cores()} usable cores, numpy {np.__version__}")
    backends = [b for b in ("serial", "thread", "process") if b in vecenv.available_backends()]
    if args.ray:
        import ray

        ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
        backends.append("ray")
    for name in [args.only] if args.only else list(ENVS):
        fn = ENVS[name]
        steps = max(10, args.steps // 10) if name == "matmul" else args.steps
        one_step_us = single_step_cost(fn) * 1e6
        print(f"\n{name}: {args.envs} envs, {args.workers} workers, one env step alone "
              f"{one_step_us:.1f} us; median of {args.repeats} x {steps} vector steps")
        print(f"  {'backend':8} {'env-steps/s':>12} {'us/vector step':>15} {'vs serial':>9} "
              f"{'cpu/wall':>8}   (min..max steps/s)")
        results = time_backends(backends, fn, args.envs, args.workers, steps, args.repeats)
        base = statistics.median(results["serial"][0])
        tables.append({
            "title": f"{name}, {args.envs} envs, {args.workers} workers",
            "env": name,
            "unit": "env steps/s",
            "one_env_step_us": one_step_us,
            "vector_steps_per_run": steps,
            "rows": [{"contender": b, "steps_per_s": rates, "cpu_per_wall": cpu,
                      "median_steps_per_s": statistics.median(rates),
                      "vs": {"serial": statistics.median(rates) / base}}
                     for b, (rates, cpu) in results.items()],
        })
        for backend, (rates, cpu) in results.items():
            med = statistics.median(rates)
            load = f"{statistics.median(cpu):8.2f}" if backend in ("serial", "thread") else f"{'-':>8}"
            print(f"  {backend:8} {med:12.0f} {args.envs / med * 1e6:15.1f} {med / base:8.2f}x "
                  f"{load}   ({min(rates):.0f}..{max(rates):.0f})")
    if args.ray:
        ray.shutdown()
    write_json(args.json, vars(args), tables)


def write_json(path: Path, settings: dict, tables: list[dict]) -> None:
    """Every round of every table, with the settings, the machine and the versions."""
    from _results import write_script_json

    write_script_json(path, Path(__file__).name, settings, tables, machine={"gil": gil_enabled()})


if __name__ == "__main__":
    main()
