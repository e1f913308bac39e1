"""Measuring one env copy for ``backend="auto"``: its step time, CPU share and what its
observations cost to send (:class:`~vecenv.layout.rule.EnvProbe`), remembered per env factory."""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np

from vecenv import infos
from vecenv.layout.rule import EnvProbe
from vecenv.spaces.buffers import is_fixed_leaf

#: at most this long stepping the probe copy (plus its build and one reset)
PROBE_S = 0.05
PROBE_STEPS = 200

_PROBES: dict[str, EnvProbe] = {}


def probe_env(env_fn: Callable[[], gym.Env], budget_s: float = PROBE_S) -> EnvProbe:
    """Build one copy of the env, reset it and step it for at most ``budget_s`` (and
    :data:`PROBE_STEPS` steps), then close it."""
    start = time.perf_counter()
    env = env_fn()
    build_s = time.perf_counter() - start
    try:
        env.action_space.seed(0)
        actions = [env.action_space.sample() for _ in range(16)]
        obs, info = env.reset(seed=0)
        walls: list[float] = []
        cpus: list[float] = []
        clock, cpu_clock = time.perf_counter, time.process_time
        end = clock() + budget_s
        while len(walls) < PROBE_STEPS and clock() < end:
            t, p = clock(), cpu_clock()
            obs, _, terminated, truncated, info = env.step(actions[len(walls) % 16])
            walls.append(clock() - t)
            cpus.append(cpu_clock() - p)
            if terminated or truncated:
                env.reset()
        # medians: a step preempted by another program says nothing about the env
        wall, cpu = float(np.median(walls)), float(np.median(cpus))
        share = min(1.0, cpu / wall) if wall > 0 else 1.0
        pickle_us = _pickle_us(env.observation_space, obs)
        shared = bool(info) and infos.fits_row(info)
        info_us = (_shared_us(info) if shared else _round_trip_us(info)) if info else 0.0
        return EnvProbe(wall * 1e6, share, _nbytes(obs), pickle_us, build_s, info_us, shared)
    finally:
        env.close()


def _nbytes(obs: Any) -> int:
    if isinstance(obs, np.ndarray):
        return obs.nbytes
    if isinstance(obs, dict):
        return sum(_nbytes(v) for v in obs.values())
    if isinstance(obs, tuple):
        return sum(_nbytes(v) for v in obs)
    return np.asarray(obs).nbytes if np.isscalar(obs) else 0


def _pickle_us(space: gym.Space, obs: Any) -> float:
    """µs to send one observation as a message: 0 when every leaf fits shared memory."""
    leaves = [space]
    fixed = True
    while leaves:
        s = leaves.pop()
        if isinstance(s, gym.spaces.Dict):
            leaves.extend(s.spaces.values())
        elif isinstance(s, gym.spaces.Tuple):
            leaves.extend(s.spaces)
        elif not is_fixed_leaf(s):
            fixed = False
    return 0.0 if fixed else _round_trip_us(obs)


def _us_per_call(fn: Callable[[], Any]) -> float:
    """µs per call of ``fn``, after a first call that pays for imports, caches and schemas."""
    fn()
    start = time.perf_counter()
    for _ in range(10):
        fn()
    return (time.perf_counter() - start) / 10 * 1e6


def _round_trip_us(value: Any) -> float:
    """µs to pickle and unpickle ``value`` (0 when it cannot be pickled: it never travels so)."""
    try:
        return _us_per_call(lambda: pickle.loads(pickle.dumps(value)))
    except Exception:
        return 0.0


def _shared_us(info: dict) -> float:
    """µs to write one env's ``info`` into shared memory and read it back."""
    return _us_per_call(infos.rows_round_trip(info, gym.spaces.Box(0, 1, (1,), np.uint8)))


def env_key(env_fn: Callable[[], Any]) -> str | None:
    """A stable name for what ``env_fn`` builds (for the probe cache), or None when it has none
    (a lambda, a function defined inside another)."""
    parts: list[str] = []
    fn: Any = env_fn
    while isinstance(fn, partial):
        parts.append(repr((fn.args, sorted(fn.keywords.items()))))
        fn = fn.func
    name = getattr(fn, "__qualname__", None)
    module = getattr(fn, "__module__", None)
    if not name or not module or "<" in name:
        return None
    for part in parts:
        if " at 0x" in part and "<" in part:  # a lambda or local object among the arguments
            return None
    return f"{module}.{name}{''.join(parts)}"


def cached_probe(env_fn: Callable[[], gym.Env]) -> EnvProbe:
    """The probe :func:`keep_probe` remembered for what ``env_fn`` builds, else a new one."""
    key = env_key(env_fn)
    if key is not None and key in _PROBES:
        return _PROBES[key]
    return probe_env(env_fn)


def keep_probe(env_fn: Callable[[], gym.Env], probe: EnvProbe) -> None:
    """Remember ``probe`` (taken on a quiet machine) for this process's later layouts of what
    ``env_fn`` builds."""
    key = env_key(env_fn)
    if key is not None:
        _PROBES[key] = probe
