"""Two versions of vecenv side by side: steps/s and the caller thread's CPU per step.

    git archive <commit> src | tar -x -C /tmp/before
    python benchmarks/before_after.py --before /tmp/before/src --after src [--backends serial --rounds 9]

Each measurement runs in a fresh interpreter with ``PYTHONPATH`` at one version's ``src``; rounds
interleave the versions (alternating which goes first) and the backends; medians and spread.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

#: vecenv.make arguments per backend name
BACKENDS: dict[str, dict] = {
    "process": {"backend": "process", "num_workers": 2},
    "process-1": {"backend": "process", "num_workers": 1},  # one worker: it and the caller may spin
    "inline": {"backend": "process", "num_workers": 2, "inline": True},
    "thread": {"backend": "thread", "num_workers": 2},
    "serial": {"backend": "serial"},
}

_CHILD = r"""
import json, sys, time
import numpy as np
import vecenv
kwargs, num_envs, steps, env_id = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
policy_s = float(sys.argv[6]) * 1e-6


def policy():  # a policy's CPU between steps, in this thread
    end = time.perf_counter() + policy_s
    while time.perf_counter() < end:
        pass

if env_id == "Pong":  # ALE Pong as run_real.py builds it (AtariPreprocessing, 4 stacked frames)
    sys.path.insert(0, sys.argv[5])
    from shared_bench.contenders import make_pong
    envs = vecenv.make([make_pong] * num_envs, **kwargs)
else:
    if env_id.startswith("vecenv/"):
        import vecenv.bench.envs  # registers vecenv/Busy-v0 and vecenv/VariableBusy-v0
    envs = vecenv.make(env_id, num_envs, **kwargs)
envs.reset(seed=0)
envs.action_space.seed(0)
actions = [envs.action_space.sample() for _ in range(16)]
for i in range(min(300, steps)):
    obs, *_ = envs.step(actions[i % 16])
wall, cpu = time.perf_counter(), time.thread_time()
for i in range(steps):
    obs, *_ = envs.step(actions[i % 16])  # the batch is held while the next one steps
    if policy_s:
        policy()
wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
envs.close()
print(steps / wall, cpu / steps * 1e6)
"""


def measure(src: str, backend: str, num_envs: int, steps: int, env_id: str = "CartPole-v1",
            policy_us: float = 0.0) -> tuple[float, float]:
    """Steps/s and the caller's CPU µs per step of one run of ``src``'s vecenv, in a fresh interpreter."""
    env = dict(os.environ, PYTHONPATH=str(Path(src).resolve()))
    args = [sys.executable, "-c", _CHILD, json.dumps(BACKENDS[backend]), str(num_envs), str(steps), env_id,
            str(Path(__file__).resolve().parent), str(policy_us)]
    out = subprocess.run(args, env=env, capture_output=True, text=True, cwd="/", timeout=600)
    if out.returncode:
        raise RuntimeError(f"{backend} on {src} failed:\n{out.stderr[-2000:]}")
    rate, cpu = out.stdout.split()[-2:]
    return float(rate), float(cpu)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the src folder of the version to compare against")
    parser.add_argument("--after", required=True, help="the src folder of the version measured")
    parser.add_argument("--backends", default="process,inline,thread,serial",
                        help=f"comma-separated, any of {', '.join(BACKENDS)}")
    parser.add_argument("--env", default="CartPole-v1",
                        help="a gymnasium env id, or Pong (run_real.py's Atari Pong); default CartPole-v1")
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--policy-us", type=float, default=0.0,
                        help="µs of CPU the caller spends between steps, as a policy would (default 0)")
    parser.add_argument("--steps", type=int, default=5000, help="timed steps per measurement")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    backends = args.backends.split(",")
    unknown = sorted(set(backends) - set(BACKENDS))
    if unknown:
        parser.error(f"unknown backend(s) {unknown}; expected some of {list(BACKENDS)}")
    versions = {"before": args.before, "after": args.after}
    runs: dict[tuple[str, str], list[tuple[float, float]]] = {(v, b): [] for v in versions for b in backends}
    for r in range(args.rounds):
        for b in backends:
            for v in (list(versions) if r % 2 == 0 else list(versions)[::-1]):
                runs[v, b].append(measure(versions[v], b, args.envs, args.steps, args.env, args.policy_us))
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    print(f"{'backend':8} {'version':7} {'steps/s median (min-max)':>26} {'caller CPU us/step (min-max)':>30}")
    for b in backends:
        for v in versions:
            rates, cpus = [x[0] for x in runs[v, b]], [x[1] for x in runs[v, b]]
            print(f"{b:8} {v:7} {statistics.median(rates):10.0f} ({min(rates):6.0f}-{max(rates):6.0f})"
                  f" {statistics.median(cpus):14.1f} ({min(cpus):5.1f}-{max(cpus):5.1f})")
        ratio = statistics.median(x[0] for x in runs["after", b]) / statistics.median(x[0] for x in runs["before", b])
        before_cpu = statistics.median(x[1] for x in runs["before", b])  # 0 where the clock ticks coarsely
        cpu = statistics.median(x[1] for x in runs["after", b]) / before_cpu if before_cpu else float("nan")
        print(f"{b:8} after/before: steps/s {ratio:.3f}, caller CPU {cpu:.3f}")
    return runs


if __name__ == "__main__":
    main()
