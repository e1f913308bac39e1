"""Busy env (100 µs/step) on the process backend: steps/s by num_workers, spin and copy."""

import json
import os
import time

import numpy as np

import vecenv
import vecenv.bench  # noqa: F401 - registers vecenv/Busy-v0


def rate(n, secs=1.5, **kw):
    e = vecenv.make("vecenv/Busy-v0", n, backend="process", **kw)
    e.reset(seed=0)
    a = e.action_space.sample()
    for _ in range(20):
        e.step(a)
    k = 0
    t0 = time.perf_counter()
    c0 = os.times()
    while time.perf_counter() - t0 < secs:
        e.step(a)
        k += 1
    dt = time.perf_counter() - t0
    c1 = os.times()
    e.close()
    return k * n / dt, (c1.user - c0.user + c1.system - c0.system) / dt


configs = []
for n in (16, 64):
    for w in (4, 8, 12, 15, 16):
        configs.append((n, dict(num_workers=w)))
    configs.append((n, dict(num_workers=16, copy=False)))
    configs.append((n, dict(num_workers=15, copy=False)))
    configs.append((n, dict(num_workers=16, spin_us=0, yield_us=0)))
    configs.append((n, dict(num_workers=8, inline=True)))
out = {}
for r in range(2):
    for n, kw in configs:
        key = f"N={n} " + ",".join(f"{k}={v}" for k, v in kw.items())
        out.setdefault(key, []).append(rate(n, **kw))
        print(r, key, [round(x) for x in out[key][-1]], flush=True)
print("\nmedian steps/s, caller CPU (cores)")
for key, v in out.items():
    v = np.array(v)
    print(f"{key:45s} {np.median(v[:, 0]):>10,.0f} {np.median(v[:, 1]):.2f}")
with open(os.path.join(os.environ.get("OUT", "."), "scale_workers.json"), "w") as f:
    json.dump(out, f, indent=1)
