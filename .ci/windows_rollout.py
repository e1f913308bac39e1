"""Windows check, run by .ci/windows under Wine: ``import vecenv``, and CartPole rollouts of
``vecenv.make`` (the default layout, serial and thread) identical to gymnasium's SyncVectorEnv;
the process backend refused with the reason, before it starts anything.

Usage: ``python .ci/windows_rollout.py`` (any platform; on Linux the process backend runs too).
"""

from __future__ import annotations

import sys

import gymnasium as gym
import numpy as np

import vecenv
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
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
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
    print(f"{sys.platform}, Python {sys.version.split()[0]}: {'FAILED' if failed else 'ok'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
