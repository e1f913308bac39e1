"""vecenv's process backend against gymnasium's vector envs, in one process, interleaved rounds
(env steps/s, medians; every round goes to ``--json``); or, with ``--before``/``--after``, two
versions of vecenv, each measurement of ``vecenv.make(--env, --envs, backend)`` in a fresh
interpreter with ``PYTHONPATH`` at one version's ``src``: steps/s and the caller's CPU per step.

    python benchmarks/process_bench.py                  # CartPole, the busy env, async batches; N=8
    python benchmarks/process_bench.py --rounds 7 --steps 4000 --only async
    git archive <commit> src | tar -x -C /tmp/before
    python benchmarks/process_bench.py --before /tmp/before/src --after src [--backends serial --rounds 9]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import gymnasium as gym
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # beside this script (not automatic everywhere)
from _common import interleave, parser, print_table, spread, table, write_json  # noqa: E402

import vecenv
from vecenv.bench.contenders import action_pool

#: vecenv.make arguments per backend name (two versions)
BACKENDS: dict[str, dict] = {
    "process": {"backend": "process", "num_workers": 2},
    "process-1": {"backend": "process", "num_workers": 1},  # one worker: it and the caller may spin
    "inline": {"backend": "process", "num_workers": 2, "inline": True},
    "thread": {"backend": "thread", "num_workers": 2},
    "serial": {"backend": "serial"},
}


def run(make, steps: int, batched: bool = False, warmup: int = 50, policy_us: float = 0.0) -> tuple[float, float]:
    """Env steps/s and the caller thread's CPU µs per step of ``steps`` full-batch steps, or of
    the EnvPool-style loop (``batched``: ``send`` actions to the envs the last ``recv``
    returned), after ``warmup`` untimed; ``policy_us``: a policy's CPU between steps."""
    with contextlib.closing(make()) as envs:
        rows = envs.batch_size if batched else envs.num_envs
        actions = action_pool(envs.single_action_space, rows, 0, 16)
        ids = envs.reset(seed=0)[1].get("env_id")
        for k in range(-warmup, steps):
            if k == 0:
                start, cpu = time.perf_counter(), time.thread_time()
            if batched:
                envs.send(actions[k % 16], ids)
                ids = envs.recv()[4]["env_id"]
            else:
                obs, *_ = envs.step(actions[k % 16])  # the batch is held while the next one steps
            end = time.perf_counter() + policy_us * 1e-6
            while policy_us and time.perf_counter() < end:
                pass
        return steps * rows / (time.perf_counter() - start), (time.thread_time() - cpu) / steps * 1e6


def contenders(env_fn, n: int) -> dict:
    fns = [env_fn] * n
    return {"gym Sync": partial(gym.vector.SyncVectorEnv, fns),
            "gym Async": partial(gym.vector.AsyncVectorEnv, fns, context="fork"),
            "vecenv serial": partial(vecenv.SerialVectorEnv, fns),
            "vecenv process": partial(vecenv.ProcessVectorEnv, fns, context="fork"),
            "vecenv process inline": partial(vecenv.ProcessVectorEnv, fns, context="fork", inline=True)}


def against_gym(args) -> None:
    from vecenv.bench.envs import BusyEnv, VariableBusyEnv
    from vecenv.system import usable_cores

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
            cases[name], 3 * steps if "async," in name else steps, batched="async," in name)[0])
        tables.append(table(title, rounds, baselines))
        print_table(tables[-1])
    write_json(args.json, "process_bench.py", vars(args), tables)


def child(spec: str) -> None:
    """One measurement of ``--before``/``--after``, in a fresh interpreter: print steps/s and
    the caller's CPU µs per step."""
    kwargs, n, steps, env_id, policy_us = json.loads(spec)
    if env_id == "Pong":  # run_real.py's Atari Pong (AtariPreprocessing, 4 stacked frames)
        from shared_bench.contenders import make_pong

        make = partial(vecenv.make, [make_pong] * n, **kwargs)
    else:
        if env_id.startswith("vecenv/"):
            importlib.import_module("vecenv.bench.envs")  # registers vecenv/Busy-v0 and VariableBusy-v0
        make = partial(vecenv.make, env_id, n, **kwargs)
    print(*run(make, steps, warmup=min(300, steps), policy_us=policy_us))


def two_versions(args) -> dict:
    """Every backend of ``--backends`` in both versions, ``--rounds`` times: {(version, backend): [(steps/s, µs)]}."""
    srcs, backends = {"before": args.before, "after": args.after}, args.backends.split(",")
    runs: dict[tuple[str, str], list[tuple[float, float]]] = {(v, b): [] for v in srcs for b in backends}
    for r in range(args.rounds):
        for b in backends:
            for v in (list(srcs) if r % 2 == 0 else list(srcs)[::-1]):
                spec = json.dumps([BACKENDS[b], args.envs, args.steps, args.env, args.policy_us])
                out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", spec],
                                     env=dict(os.environ, PYTHONPATH=str(Path(srcs[v]).resolve())),
                                     capture_output=True, text=True, cwd="/", timeout=600)
                if out.returncode:
                    raise RuntimeError(f"{b} on {srcs[v]} failed:\n{out.stderr[-2000:]}")
                runs[v, b].append(tuple(float(x) for x in out.stdout.split()[-2:]))
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    print(f"{'backend':8} {'version':7} {'steps/s median [min-max]':>26} {'caller CPU µs/step':>28}")
    for b in backends:
        for v in srcs:
            print(f"{b:8} {v:7} {spread([x[0] for x in runs[v, b]]):>26} {spread([x[1] for x in runs[v, b]], '.1f'):>28}")
        med = {v: [statistics.median(x[i] for x in runs[v, b]) for i in (0, 1)] for v in srcs}
        cpu = med["after"][1] / med["before"][1] if med["before"][1] else float("nan")  # 0: the clock ticks coarsely
        print(f"{b:8} after/before: steps/s {med['after'][0] / med['before'][0]:.3f}, caller CPU {cpu:.3f}")
    return runs


def main(argv: list[str] | None = None) -> dict | None:
    p = parser(__doc__, json_name="process_bench.json")
    p.add_argument("--rounds", type=int, help="interleaved rounds; medians reported (default 5; two versions: 7)")
    p.add_argument("--envs", type=int, default=8, help="number of envs (default 8)")
    p.add_argument("--steps", type=int, help="batched steps per round (CartPole: default 2000; two versions: 5000)")
    p.add_argument("--busy-steps", type=int, default=400, help="batched steps per round (busy env)")
    p.add_argument("--only", choices=["cartpole", "busy", "async"], action="append")
    p.add_argument("--before", help="two versions: the src folder of the version to compare against")
    p.add_argument("--after", help="two versions: the src folder of the version measured")
    p.add_argument("--backends", default="process,inline,thread,serial", help=f"two versions: any of {', '.join(BACKENDS)}")
    p.add_argument("--env", default="CartPole-v1", help="two versions: a gymnasium id, or Pong (run_real.py's)")
    p.add_argument("--policy-us", type=float, default=0.0, help="two versions: the caller's CPU between steps, µs")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args.child)
    versions = args.before is not None
    if versions != (args.after is not None):
        p.error("--before and --after go together")
    unknown = sorted(set(args.backends.split(",")) - set(BACKENDS))
    if unknown:
        p.error(f"unknown backend(s) {unknown}; expected some of {list(BACKENDS)}")
    args.rounds = args.rounds or (7 if versions else 5)
    args.steps = args.steps or (5000 if versions else 2000)
    return two_versions(args) if versions else against_gym(args)


if __name__ == "__main__":
    main()
