"""vecenv's own costs on this machine (:class:`~vecenv.layout.rule.MachineCosts`), measured on
no-op envs once and cached in the user's cache directory."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import time
from dataclasses import asdict
from typing import Any

import gymnasium as gym
import numpy as np

from vecenv.engine import usable_cores
from vecenv.layout.rule import MachineCosts

#: machine costs are measured again after this many days
COSTS_MAX_AGE_S = 30 * 86400


class NoopEnv(gym.Env):
    """The cheapest env there is: vecenv's own costs show through it."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        return np.zeros(4, np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        return np.zeros(4, np.float32), 0.0, False, False, {}


def _step_us(envs: Any, n: int, steps: int = 300) -> float:
    """The median µs of ``steps`` batched steps (robust to a preempted step)."""
    actions = np.zeros(n, np.int64)
    envs.reset(seed=0)
    for _ in range(50):
        envs.step(actions)
    clock = time.perf_counter
    times = []
    for _ in range(steps):
        start = clock()
        envs.step(actions)
        times.append(clock() - start)
    return float(np.median(times)) * 1e6


def measure_machine(cores: int | None = None) -> MachineCosts:
    """Measure :class:`MachineCosts` (about a second: a few vector envs of no-op envs)."""
    from vecenv.backends import ProcessVectorEnv, SerialVectorEnv

    cores = usable_cores() if cores is None else cores
    with SerialVectorEnv([NoopEnv]) as one, SerialVectorEnv([NoopEnv] * 8) as eight:
        t1, t8 = _step_us(one, 1), _step_us(eight, 8)
    per_env = max((t8 - t1) / 7, 0.1)
    fixed = max(t1 - per_env, 0.0)
    wide = max(2, min(cores, 8))

    def crossing(groups: int, inline: bool) -> float:
        with ProcessVectorEnv([NoopEnv] * groups, num_workers=groups, inline=inline) as envs:
            return max(_step_us(envs, groups, 200) - per_env, 0.0)

    def fit(narrow: int, inline: bool) -> tuple[float, float]:
        a = crossing(narrow, inline)
        if wide == narrow:
            return a, 0.0
        return a, max(crossing(wide, inline) - a, 0.0) / (wide - narrow)

    return MachineCosts(fixed, per_env, fit(1, False), fit(2, True), cores)


def _cache_dir() -> str:
    base = os.environ.get("VECENV_CACHE_DIR")
    if base:
        return base
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "vecenv")


def _machine_file(cores: int) -> str:
    from vecenv import __version__

    ident = f"{platform.node()}|{platform.machine()}|{platform.processor()}|{sys.version}|{cores}|{__version__}"
    digest = hashlib.sha256(ident.encode()).hexdigest()[:16]
    return os.path.join(_cache_dir(), f"machine-{digest}.json")


_COSTS: dict[int, MachineCosts] = {}


def machine_costs(refresh: bool = False) -> MachineCosts:
    """This machine's :class:`MachineCosts`: from memory, the cache file, or measured (and
    saved; a cache that cannot be written only costs a new measurement next time)."""
    cores = usable_cores()
    if not refresh and cores in _COSTS:
        return _COSTS[cores]
    path = _machine_file(cores)
    costs = None if refresh else _load(path)
    if costs is None:
        costs = measure_machine(cores)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump(asdict(costs), f)
            os.replace(tmp, path)
        except OSError:
            pass
    _COSTS[cores] = costs
    return costs


def _load(path: str) -> MachineCosts | None:
    try:
        with open(path) as f:
            data = json.load(f)
        costs = MachineCosts(
            float(data["fixed_us"]), float(data["per_env_us"]), tuple(data["process_us"]),
            tuple(data["inline_us"]), int(data["cores"]), float(data["measured_at"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return costs if time.time() - costs.measured_at < COSTS_MAX_AGE_S else None
