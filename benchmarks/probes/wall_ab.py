"""One-off A/B behind docs/measurements/2026-11-28-2core-epyc-caller-bell.md (kept in git history only)."""
import os
import statistics
import subprocess
import sys

rounds = int(sys.argv[1])
variants = sys.argv[2].split(",")
CASES = {
 "cartpole 8 envs default": 'vecenv.make("CartPole-v1", 8, backend="process")',
 "cartpole 8 envs 2w spin0": 'vecenv.make("CartPole-v1", 8, backend="process", num_workers=2, spin_us=0, yield_us=0)',
 "null+infos 64/16 spin0": 'vecenv.make(lambda: NullEnv("17 floats + 4 infos"), 64, backend="process", num_workers=16, spin_us=0, yield_us=0)',
}
CODE = r'''
import sys, time; sys.path.insert(0, "/work/main/benchmarks")
import numpy as np, vecenv, gymnasium as gym
from caller_cost import NullEnv
envs = %s
envs.reset(seed=0); a = np.zeros(envs.num_envs, np.int64)
for _ in range(300): envs.step(a)
t, w = time.thread_time(), time.perf_counter()
for _ in range(4000): envs.step(a)
print((time.thread_time() - t) / 4000 * 1e6, 4000 / (time.perf_counter() - w)); envs.close()
'''
res = {(c, v): [] for c in CASES for v in variants}
for r in range(rounds):
    for c, make in CASES.items():
        order = variants if r % 2 == 0 else variants[::-1]
        for v in order:
            env = dict(os.environ, PYTHONPATH=v)
            out = subprocess.run([sys.executable, "-c", CODE % make], env=env, capture_output=True, text=True)
            try:
                res[(c, v)].append(tuple(map(float, out.stdout.split())))
            except ValueError:
                print(out.stderr[-500:])
for c in CASES:
    base = None
    for v in variants:
        xs = res[(c, v)]
        sps = statistics.median(x[1] for x in xs)
        cpu = statistics.median(x[0] for x in xs)
        base = base or sps
        print(f"{c:28} {v:22} steps/s {sps:8.0f} [{min(x[1] for x in xs):.0f}-{max(x[1] for x in xs):.0f}] ({sps/base:.2f})  caller µs/step {cpu:6.1f}")
