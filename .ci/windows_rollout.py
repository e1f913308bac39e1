"""Windows check, run by .ci/windows under Wine: ``import vecenv``; CartPole rollouts of
``vecenv.make`` (the default layout, serial, thread, process, inline) and ``vecenv.AsyncVectorEnv``
identical to gymnasium's SyncVectorEnv; a worker that exits reported as ``WorkerDiedError`` within
5 s; a hung env ended by ``step_timeout``; no worker left after ``close()``.

Usage: ``python .ci/windows_rollout.py`` (any platform; on Linux the process backend runs too).
"""

from __future__ import annotations

import multiprocessing
import sys
import time
from functools import partial

import gymnasium as gym
import numpy as np

import vecenv
from vecenv.testing import FaultyEnv
from vecenv.transports.process import unavailable

N, STEPS = 8, 300


def rollout(envs) -> list:
    rng = np.random.default_rng(0)
    out = [envs.reset(seed=0)]
    for _ in range(STEPS):
        out.append(envs.step(rng.integers(0, 2, N)))
    return out


def same(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=False))
    return bool(np.array_equal(np.asarray(a), np.asarray(b)))


def main() -> int:
    ref = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * N)
    want = rollout(ref)
    ref.close()
    layouts = [{}, {"backend": "serial"}, {"backend": "thread", "num_workers": 2},
               {"backend": "process"}, {"backend": "process", "inline": True}]
    failed = 0
    for kwargs in layouts:
        try:
            with vecenv.make("CartPole-v1", N, **kwargs) as envs:
                ok = same(rollout(envs), want)
                what = f"{envs.layout.backend} (auto)" if not kwargs else kwargs["backend"]
        except vecenv.VecEnvError as exc:
            if unavailable() is None or "POSIX primitives" not in str(exc):
                raise
            print(f"{kwargs}: refused, as expected here: {exc}")
            continue
        print(f"{kwargs}: {what}: {'identical to SyncVectorEnv' if ok else 'DIFFERENT from SyncVectorEnv'}")
        failed += not ok
    with vecenv.AsyncVectorEnv([lambda: gym.make("CartPole-v1")] * N) as envs:
        ok = same(rollout(envs), want)
    print(f"AsyncVectorEnv: {'identical to SyncVectorEnv' if ok else 'DIFFERENT from SyncVectorEnv'}")
    failed += not ok
    failed += not faults()
    print(f"{sys.platform}, Python {sys.version.split()[0]}: {'FAILED' if failed else 'ok'}")
    return 1 if failed else 0


def timed(fault: str, error: type[Exception], limit: float, **kwargs) -> bool:
    r"""Step a worker whose env ``fault``\ s at its first step: ``error`` within ``limit`` s?"""
    fns = [partial(FaultyEnv, fault, at=1)] + [partial(FaultyEnv, None)] * 3
    with vecenv.ProcessVectorEnv(fns, num_workers=2, **kwargs) as envs:
        envs.reset(seed=0)
        started = time.monotonic()
        try:
            envs.step(np.zeros(4, np.int64))
            got = "no error"
        except error as exc:
            got = f"{type(exc).__name__}: {str(exc)[:80]}"
        took = time.monotonic() - started
    ok = got != "no error" and took < limit
    print(f"{fault}: {got} after {took:.2f} s (limit {limit:g} s): {'ok' if ok else 'FAILED'}")
    return ok


def faults() -> bool:
    ok = timed("exit", vecenv.WorkerDiedError, 5.0)
    ok &= timed("hang", vecenv.StepTimeoutError, 5.0, step_timeout=2.0)
    deadline = time.monotonic() + 5
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    left = multiprocessing.active_children()
    print(f"workers left after close(): {left or 'none'}")
    return ok and not left


if __name__ == "__main__":
    sys.exit(main())
