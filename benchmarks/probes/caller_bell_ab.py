"""A/B: the caller's bell + fan-out ring (fan 16 = wake all, 4, 2) against the tree before it."""
import json
import os
import statistics
import subprocess
import sys

rounds = int(sys.argv[1])
variants = sys.argv[2].split(",")
NULL = r'''
import sys, time; sys.path.insert(0, "/work/main/benchmarks")
import numpy as np, vecenv
from caller_cost import NullEnv
envs = vecenv.make(lambda: NullEnv("17 floats + 4 infos"), 64, backend="process", num_workers=16, spin_us=0, yield_us=0)
envs.reset(); a = np.zeros(64, np.int64)
for _ in range(300): envs.step(a)
t, w = time.thread_time(), time.perf_counter()
for _ in range(3000): envs.step(a)
print("NULL", (time.thread_time() - t) / 3000 * 1e6, 3000 / (time.perf_counter() - w)); envs.close()
'''
STRAG = r'''
import runpy, sys
sys.argv = ["stragglers.py", "--rounds", "1", "--seconds", "3", "--no-gym", "--batch-sizes", "32", "--sim-seconds", "1", "--json", "/tmp/cc/strag.json"]
runpy.run_path("/work/main/benchmarks/stragglers.py", run_name="__main__")
'''
def prefix(v):
    return "" if v == "old" else f"import ctypes, vecenv.transports.process.control as c; c._FAN_OUT = ctypes.c_int({v}); c.FAN_OUT = {v}\n"
res = {v: {"cpu": [], "sps": [], "sync": [], "b32": []} for v in variants}
for r in range(rounds):
    order = variants[r % len(variants):] + variants[:r % len(variants)]
    for v in order:
        env = dict(os.environ, PYTHONPATH="/tmp/old-main/src" if v == "old" else "/work/main/src")
        out = subprocess.run([sys.executable, "-c", prefix(v) + NULL], env=env, capture_output=True, text=True).stdout
        _, cpu, sps = out.split()
        res[v]["cpu"].append(float(cpu))
        res[v]["sps"].append(float(sps))
        out = subprocess.run([sys.executable, "-c", prefix(v) + STRAG], env=env, capture_output=True, text=True)
        txt = out.stdout
        for line in txt.splitlines():
            cells = [c.strip() for c in line.split("|")]
            if line.startswith("| vecenv synchronous"):
                res[v]["sync"].append(float(cells[-2]))  # measured / ideal of its rule
            elif line.startswith("| vecenv async b=32"):
                res[v]["b32"].append(float(cells[3].split()[0]))  # share of the ceiling
        res[v].setdefault("raw", []).append(txt[-1500:])
    print(f"round {r+1} done", flush=True)
for v, d in res.items():
    def f(xs):
        return f"{statistics.median(xs):8.1f} [{min(xs):.1f}-{max(xs):.1f}]" if xs else "-"
    def g(xs):
        return f"{statistics.median(xs):5.2f} [{min(xs):.2f}-{max(xs):.2f}]" if xs else "-"
    print(f"{v:>4}: caller µs/step {f(d['cpu'])}  steps/s {f(d['sps'])}  stragglers sync/ideal {g(d['sync'])}  b32 share {g(d['b32'])}")
json.dump(res, open("/tmp/cc/fanab.json", "w"))
