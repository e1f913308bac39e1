"""The thread backend's synchronous step from one queue of envs against its fixed partition
(issue 63, item 1): PROTOTYPE A/B, interleaved rounds, each measurement in a fresh interpreter.

``VECENV_THREAD_ONE_QUEUE`` (the prototype on branch ``thread-queue``): ``0`` (``old``) the
current fixed partition; ``1`` (``queue``) a whole-batch step is one queue of (group, env) items
that every thread, yours included, takes from; ``2`` (``steal``) each owner steps its group's
envs from the front of the group's deque and a thread with nothing left takes envs from the back
of another's. Async batches are the same code either way (one env a group, one queue).

    python benchmarks/probes/thread_one_queue.py --suite gil --rounds 5
    PYTHON_GIL=0 python benchmarks/probes/thread_one_queue.py --suite ft --rounds 5   # 3.13t

Rows (env steps/s):

- ``wait``: benchmarks/stragglers.py's scenario (64 envs, 400 µs ± 25% sleeps, 6 ms resets) on
  16 threads, sync and async b=32/b=16, as a share of the ceiling of 16 free-running processes
  measured in the same round (and of 16 free-running threads);
- ``matmul-uneven``: a step is 1-3 matrix products of 160x160 float64 (200 KB; BLAS releases the
  GIL; OPENBLAS_NUM_THREADS=1), a reset 15, episodes of 40-160 steps; ``matmul-even``: one
  product a step, resets free; ``busy-uneven``: the same cost shape in pure Python (holds the GIL;
  parallel only on a free-threaded Python); ``cheetah``: HalfCheetah-v5; ``cartpole``: CartPole-v1.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402


class UnevenEnv(gym.Env):
    """Steps of 1-3 units (``units`` 0: 1 unit, resets free), resets of 15 units, episodes of
    40-160 steps; a unit is a 160x160 matrix product (``kind="matmul"``) or ~100 µs of Python
    (``kind="busy"``). The costs come from a stream seeded by the env's index."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, index: int, kind: str = "matmul", uneven: bool = True) -> None:
        self.rng = random.Random(index)
        self.kind, self.uneven, self.left = kind, uneven, 0
        self.a = np.random.default_rng(index).standard_normal((160, 160)) / 160
        self.b = np.empty_like(self.a)
        self.obs = np.zeros(4, np.float32)

    def _work(self, units: int) -> None:
        if self.kind == "matmul":
            for _ in range(units):
                np.matmul(self.a, self.a, out=self.b)
        else:
            for _ in range(units):
                x = 0
                for i in range(1500):
                    x += i * i
                self.b[0, 0] = x

    def reset(self, *, seed=None, options=None):
        self.left = self.rng.randint(40, 160)
        if self.uneven:
            self._work(15)
        return self.obs, {}

    def step(self, action):
        self.left -= 1
        self._work(self.rng.randint(1, 3) if self.uneven else 1)
        return self.obs, 1.0, False, self.left <= 0, {}


def env_fns(env: str, n: int) -> list:
    if env == "wait":
        from stragglers import Costs, WaitEnv
        return [functools.partial(WaitEnv, Costs(), 0, i) for i in range(n)]
    if env in ("matmul-uneven", "matmul-even", "busy-uneven"):
        kind, shape = env.split("-")
        return [functools.partial(UnevenEnv, i, kind, shape == "uneven") for i in range(n)]
    name = {"cheetah": "HalfCheetah-v5", "cartpole": "CartPole-v1"}[env]
    return [functools.partial(gym.make, name) for _ in range(n)]


def free_threads(fns: list, threads: int, seconds: float) -> float:
    """Env steps/s of ``threads`` plain threads stepping their share freely."""
    groups = np.array_split(np.arange(len(fns)), threads)
    counts = [0] * threads
    start = threading.Barrier(threads + 1)

    def run(k: int) -> None:
        envs = [fns[i]() for i in groups[k]]
        for e in envs:
            e.reset(seed=0)
        start.wait()
        end, steps = time.perf_counter() + seconds, 0
        while time.perf_counter() < end:
            for e in envs:
                if any(e.step(0)[2:4]):
                    e.reset()
                steps += 1
        counts[k] = steps

    ts = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    start.wait()
    for t in ts:
        t.join()
    return sum(counts) / seconds


def one(spec: dict) -> float:
    """Env steps/s of one measurement ``spec`` (run in this interpreter)."""
    import vecenv

    fns = env_fns(spec["env"], spec["n"])
    if spec["what"] == "ceiling-proc":
        from stragglers import ceiling
        return ceiling(fns, spec["threads"], spec["seconds"])
    if spec["what"] == "ceiling-thread":
        return free_threads(fns, spec["threads"], spec["seconds"])
    batch = spec.get("batch")
    if spec["what"] == "serial":
        envs = vecenv.SerialVectorEnv(fns)
    else:
        envs = vecenv.ThreadVectorEnv(fns, num_workers=spec["threads"], batch_size=batch)
    try:
        _, infos = envs.reset(seed=0)
        n = spec["n"]
        if batch:
            ids = infos["env_id"]

            def once() -> None:
                nonlocal ids
                envs.send(np.zeros(len(ids), np.int64), ids)
                ids = envs.recv()[4]["env_id"]
            rows = batch
        else:
            actions = np.zeros((n, *envs.single_action_space.shape), envs.single_action_space.dtype)

            def once() -> None:
                envs.step(actions)
            rows = n
        for clock in (0.3, spec["seconds"]):
            steps, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < clock:
                once()
                steps += 1
        return steps * rows / (time.perf_counter() - t0)
    finally:
        envs.close()


VARIANTS = [("0", "old"), ("1", "queue"), ("2", "steal")]

SUITES = {
    # (row name, spec); "ab": measured with both variants
    "gil": [
        ("wait: ceiling, 16 processes", dict(what="ceiling-proc", env="wait", n=64, threads=16)),
        ("wait: ceiling, 16 threads", dict(what="ceiling-thread", env="wait", n=64, threads=16)),
        ("wait: sync, 16 threads", dict(what="vec", env="wait", n=64, threads=16, ab=True)),
        ("wait: async b=32, 16 threads", dict(what="vec", env="wait", n=64, threads=16, batch=32, ab=True)),
        ("wait: async b=16, 16 threads", dict(what="vec", env="wait", n=64, threads=16, batch=16, ab=True)),
        ("matmul-uneven: serial", dict(what="serial", env="matmul-uneven", n=8)),
        ("matmul-uneven: thread 2", dict(what="vec", env="matmul-uneven", n=8, threads=2, ab=True)),
        ("matmul-even: serial", dict(what="serial", env="matmul-even", n=8)),
        ("matmul-even: thread 2", dict(what="vec", env="matmul-even", n=8, threads=2, ab=True)),
        ("cheetah: serial", dict(what="serial", env="cheetah", n=8)),
        ("cheetah: thread 2", dict(what="vec", env="cheetah", n=8, threads=2, ab=True)),
        ("cartpole: serial", dict(what="serial", env="cartpole", n=8)),
        ("cartpole: thread 2", dict(what="vec", env="cartpole", n=8, threads=2, ab=True)),
    ],
    "ft": [
        ("wait: ceiling, 16 threads", dict(what="ceiling-thread", env="wait", n=64, threads=16)),
        ("wait: sync, 16 threads", dict(what="vec", env="wait", n=64, threads=16, ab=True)),
        ("matmul-uneven: serial", dict(what="serial", env="matmul-uneven", n=8)),
        ("matmul-uneven: thread 2", dict(what="vec", env="matmul-uneven", n=8, threads=2, ab=True)),
        ("busy-uneven: serial", dict(what="serial", env="busy-uneven", n=8)),
        ("busy-uneven: thread 2", dict(what="vec", env="busy-uneven", n=8, threads=2, ab=True)),
        ("cartpole: serial", dict(what="serial", env="cartpole", n=8)),
        ("cartpole: thread 2", dict(what="vec", env="cartpole", n=8, threads=2, ab=True)),
    ],
}


def _run(spec: dict, mode: str) -> float:
    env = {**os.environ, "VECENV_THREAD_ONE_QUEUE": mode, "OPENBLAS_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, __file__, "--one", json.dumps(spec)], env=env,
                         capture_output=True, text=True, timeout=300)
    if out.returncode:
        raise RuntimeError(out.stderr)
    return float(out.stdout.strip().splitlines()[-1])


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", choices=sorted(SUITES), default="gil")
    p.add_argument("--rows", default="", help="comma-separated prefixes of the rows to run")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--variants", default="old,queue,steal")
    p.add_argument("--json", type=Path)
    p.add_argument("--one", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        print(one(json.loads(a.one)))
        return
    rows = [r for r in SUITES[a.suite] if not a.rows or any(r[0].startswith(x) for x in a.rows.split(","))]
    results: dict[str, list[float]] = {}
    loads = []
    for k in range(a.rounds):
        loads.append(_load())
        print(f"round {k + 1}/{a.rounds}, load {loads[-1]}", file=sys.stderr, flush=True)
        for name, spec in rows:
            spec = {**spec, "seconds": a.seconds}
            variants = [v for v in VARIANTS if v[1] in a.variants.split(",")] if spec.get("ab") else [("0", "")]
            shift = k % len(variants)
            for mode, tag in variants[shift:] + variants[:shift]:  # each variant first in turn
                key = f"{name} [{tag}]" if tag else name
                results.setdefault(key, []).append(_run(spec, mode))
    print(f"\n{sys.version.split()[0]}, GIL {'on' if getattr(sys, '_is_gil_enabled', lambda: True)() else 'off'}; "
          f"medians of {a.rounds} rounds [min-max], env steps/s; loads {loads}")
    for key, vals in results.items():
        print(f"{key:42s} {statistics.median(vals):>10,.0f} [{min(vals):,.0f}-{max(vals):,.0f}]")
    # per-round ratios new/old, and shares of the ceilings
    print()
    for key in [k for k in results if k.endswith("]") and not k.endswith("[old]")]:
        tag = key[key.rindex("[") + 1:-1]
        old = results[key.replace(f"[{tag}]", "[old]")]
        ratios = [n / o for n, o in zip(results[key], old, strict=True)]
        line = f"{key:42s} /old {statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]"
        for ceil in ("wait: ceiling, 16 processes", "wait: ceiling, 16 threads"):
            if key.startswith("wait") and ceil in results:
                for t, vals in (("old", old), (tag, results[key])):
                    shares = [v / c for v, c in zip(vals, results[ceil], strict=True)]
                    line += (f"; {t} / {ceil.split(', ')[1]} {statistics.median(shares):.2f}"
                             f" [{min(shares):.2f}-{max(shares):.2f}]")
        base = key.split(":")[0] + ": serial"
        if base in results:
            for t, vals in (("old", old), (tag, results[key])):
                xs = [v / s for v, s in zip(vals, results[base], strict=True)]
                line += f"; {t} x serial {statistics.median(xs):.2f} [{min(xs):.2f}-{max(xs):.2f}]"
        print(line)
    if a.json:
        a.json.write_text(json.dumps({"python": sys.version, "loads": loads, "results": results}, indent=1))


if __name__ == "__main__":
    main()
