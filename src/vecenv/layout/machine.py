"""What ``backend="auto"`` measures: one copy of the env (:func:`probe_env`, remembered per env
factory), the load of other programs (:func:`others_busy`), and vecenv's own costs on this
machine (:class:`~vecenv.layout.rule.MachineCosts`), measured on no-op envs, cached in the user's
cache directory and checked cheaply before a cached figure is trusted. A calibration that saw
other work or :data:`TRIALS` that disagree is *contended*: used by this process only, never
cached, since a worker sharing its core crosses many times slower and would make ``auto`` pick
serial from then on. The load readers and the clocks are module attributes for tests to replace.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np

from vecenv import infos
from vecenv._version import __version__
from vecenv.layout.rule import CALIBRATED_GROUPS, EnvProbe, MachineCosts, contended
from vecenv.runs import private_dir, read_private, write_private
from vecenv.spaces.buffers import is_fixed_leaf
from vecenv.system import gil_enabled, usable_cores

#: machine costs are measured again after this many days
COSTS_MAX_AGE_S = 30 * 86400
#: a process checks its calibration again after this many seconds
RECHECK_S = 600.0
#: trials per figure, and steps per trial (each trial is the median of its steps)
TRIALS = 3
TRIAL_STEPS = 100
#: trials of one figure whose slowest exceeds TRIAL_SPREAD × the fastest + TRIAL_SLACK_US
#: disagree: the machine was not steady (quiet trials agree far more closely)
TRIAL_SPREAD = 1.5
TRIAL_SLACK_US = 2.0
#: the cheap check: steps per trial, and seconds of load sampling before and after
CHECK_STEPS = 40
CHECK_LOAD_S = 0.01
#: the check agrees with the cache within this factor (either way) + CHECK_SLACK_US: wider than
#: quiet runs of the crossing vary, narrower than a crossing measured beside a busy core is off
CHECK_TOLERANCE = 3.0
CHECK_SLACK_US = 3.0
#: the fields of MachineCosts a cache file holds
_SAVED = ("fixed_us", "per_env_us", "process_us", "inline_us", "thread_us", "cores", "measured_at", "others_busy")
#: seconds between two readings of /proc/loadavg
SAMPLE_S = 0.0015
LOADAVG = "/proc/loadavg"

_clock = time.perf_counter
_sleep = time.sleep
_monotonic = time.monotonic


def _read_loadavg() -> str:
    with open(LOADAVG) as f:
        return f.read()


def _cores() -> tuple[int, int]:
    """The cores this process may run on, and the cores the machine has online."""
    usable = usable_cores()
    return usable, max(os.cpu_count() or 1, usable)


def others_busy(duration_s: float = 0.02) -> float | None:
    """How many cores' worth of CPU other work asks for now, on average over ``duration_s``; None
    where there is no /proc/loadavg (not Linux).

    Averages ``R - 1`` of /proc/loadavg's runnable tasks ``R`` (every runnable thread but the
    reader's, children and waiting threads included) every :data:`SAMPLE_S`: exact at each
    reading, unlike /proc/stat's 10 ms jiffies. Scaled by ``usable / online`` cores where this
    process may use fewer cores than the machine has.
    """
    counts: list[int] = []
    end = _clock() + duration_s
    while True:
        try:
            runnable = int(_read_loadavg().split()[3].split("/")[0])  # R of the 4th field, R/T
            counts.append(max(runnable - 1, 0))
        except (OSError, ValueError, IndexError):
            return None
        if _clock() >= end:
            break
        _sleep(SAMPLE_S)
    usable, online = _cores()
    return sum(counts) / len(counts) * usable / online


def most(*readings: float | None) -> float | None:
    """The largest of the load readings that were taken (None when none could be)."""
    known = [r for r in readings if r is not None]
    return max(known) if known else None


class NoopEnv(gym.Env):
    """The cheapest env there is: vecenv's own costs show through it."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        return np.zeros(4, np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        return np.zeros(4, np.float32), 0.0, False, False, {}


def _measure_trials(kind: str, n: int, steps: int = TRIAL_STEPS, warmup: int = 50) -> list[float]:
    """µs per batched step of ``n`` no-op envs in :data:`TRIALS` trials, each the median of its
    ``steps`` steps: ``serial`` in this process, ``thread`` on ``n`` threads, ``process`` or
    ``inline`` with one env per group."""
    from vecenv.backends import ProcessVectorEnv, SerialVectorEnv, ThreadVectorEnv

    fns, actions = [NoopEnv] * n, np.zeros(n, np.int64)
    if kind == "serial":
        envs: Any = SerialVectorEnv(fns)
    elif kind == "thread":
        envs = ThreadVectorEnv(fns, num_workers=n)
    else:
        envs = ProcessVectorEnv(fns, num_workers=n, inline=kind == "inline")
    clock = time.perf_counter
    with envs:
        envs.reset(seed=0)
        for _ in range(warmup):
            envs.step(actions)
        out = []
        for _ in range(TRIALS):
            times = []
            for _ in range(steps):
                start = clock()
                envs.step(actions)
                times.append(clock() - start)
            out.append(float(np.median(times)) * 1e6)
    return out


def _spread(trials: list[float], label: str = "") -> list[str]:
    """The trials' range in words when they disagree (the machine was not steady), else nothing."""
    low, high = min(trials), max(trials)
    return [f"{label}{low:.1f}–{high:.1f} µs"] if high > TRIAL_SPREAD * low + TRIAL_SLACK_US else []


def _disturbance(cores: int, others: float | None, unsteady: list[str]) -> str:
    """Why a measurement is contended, in words ("" when it is not)."""
    why = [f"{others:.1f} cores' worth of other work"] if contended(cores, others) else []
    if unsteady:
        why.append("trials disagreed: " + ", ".join(unsteady))
    return "; ".join(why)


def measure_machine(cores: int | None = None) -> MachineCosts:
    """Measure :class:`MachineCosts` (0.15 s on 2 cores); trials that disagree, or other work
    before or after, mark it ``contended``."""
    cores = usable_cores() if cores is None else cores
    before = others_busy()
    unsteady: list[str] = []

    def figure(kind: str, n: int) -> float:
        trials = _measure_trials(kind, n)
        unsteady.extend(_spread(trials, f"{kind}×{n} "))
        return float(np.median(trials))

    t1, t8 = figure("serial", 1), figure("serial", 8)
    per_env = max((t8 - t1) / 7, 0.1)
    fixed = max(t1 - per_env, 0.0)
    wide = max(2, min(cores, CALIBRATED_GROUPS))

    def fit(kind: str, narrow: int) -> tuple[float, float]:
        a = max(figure(kind, narrow) - per_env, 0.0)
        if wide == narrow:
            return a, 0.0
        return a, max(max(figure(kind, wide) - per_env, 0.0) - a, 0.0) / (wide - narrow)

    process, inline = fit("process", 1), fit("inline", 2)
    thread = None if gil_enabled() else fit("thread", 1)  # under the GIL threads never pay off
    others = most(before, others_busy())
    why = _disturbance(cores, others, unsteady)
    return MachineCosts(fixed, per_env, process, inline, cores, thread_us=thread, contended=bool(why),
                        others_busy=others, note=why)


def describe_costs(costs: MachineCosts, now: float | None = None) -> str:
    """Which calibration ``costs`` is, in words (e.g. "machine costs measured 3 days ago, verified now")."""
    now = time.time() if now is None else now
    text = f"machine costs measured {_ago(now - costs.measured_at)}"
    if costs.contended:
        busy = f" ({costs.note})" if costs.note else ""
        return f"{text} while the machine was busy{busy}, used by this process only, not saved"
    if costs.source == "verified" and costs.checked_at is not None:
        text += f", verified {_ago(now - costs.checked_at)}"
        if costs.check_us is not None:
            text += f" (a check crossed in {costs.check_us:.1f} µs)"
    elif costs.source == "cache":
        text += ", from the cache"
    return f"{text}; {costs.note}" if costs.note else text


def _ago(seconds: float) -> str:
    if seconds < 60:
        return "now"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min ago"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.0f} h ago"
    return f"{seconds / 86400:.0f} days ago"


#: a cache file holds a few numbers: anything larger is not one
_CACHE_LIMIT = 64 * 1024
_PURPOSE = "its calibration cache"


def _machine_file(cores: int) -> str:
    gil = "gil" if gil_enabled() else "nogil"  # a free-threaded build runs either way
    ident = f"{platform.node()}|{platform.machine()}|{platform.processor()}|{sys.version}|{gil}|{cores}|{__version__}"
    digest = hashlib.sha256(ident.encode()).hexdigest()[:16]
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    directory = os.environ.get("VECENV_CACHE_DIR") or os.path.join(root, "vecenv")
    return os.path.join(directory, f"machine-{digest}.json")


#: cores -> (the calibration this process uses, time.monotonic() when it was settled)
_COSTS: dict[int, tuple[MachineCosts, float]] = {}


def machine_costs(refresh: bool = False) -> MachineCosts:
    """This machine's :class:`MachineCosts`, and where they come from (``source``).

    Every :data:`RECHECK_S` the cache is read and cheaply checked (:func:`_verify`), or all is
    measured again (no cache, older than :data:`COSTS_MAX_AGE_S`, or ``refresh``). In between the
    calibration in memory serves, but one measured beside other work serves only while the
    machine stays busy. Nothing contended is cached; a quiet cached calibration beats a contended
    new one.
    """
    cores = usable_cores()
    held = _COSTS.get(cores)
    if not refresh and held is not None and _monotonic() - held[1] < RECHECK_S:
        costs = held[0]
        if not (costs.contended and contended(cores, costs.others_busy)) \
                or contended(cores, others_busy(CHECK_LOAD_S)):
            return costs
    path = _machine_file(cores)
    cached = _load(path)
    if refresh or cached is None:
        costs = _remeasure(path, cores, cached)
    else:
        costs = _verify(path, cores, cached)
    _COSTS[cores] = (costs, _monotonic())
    return costs


def _remeasure(path: str, cores: int, cached: MachineCosts | None, why: str = "") -> MachineCosts:
    """Measure everything; save it when it is not contended; when it is and ``cached`` holds a
    quiet calibration, keep using that."""
    fresh = measure_machine(cores)
    if not fresh.contended:
        _save(path, fresh)
        return replace(fresh, note=why) if why else fresh
    if cached is None:
        return fresh
    return replace(cached, note=f"kept: measuring again now was disturbed ({fresh.note})")


def _verify(path: str, cores: int, cached: MachineCosts) -> MachineCosts:
    """The cheap check of a cached calibration: one worker's crossing, :data:`TRIALS` trials of
    :data:`CHECK_STEPS` steps. Within :data:`CHECK_TOLERANCE` the cache stands (``verified``); on
    a busy machine it stands unchecked (``cache``); a quiet check that disagrees measures again."""
    before = others_busy(CHECK_LOAD_S)
    trials = _measure_trials("process", 1, CHECK_STEPS, warmup=20)
    others = most(before, others_busy(CHECK_LOAD_S))
    busy = _disturbance(cores, others, _spread(trials))
    if busy:
        return replace(cached, source="cache", note=f"not checked: the machine is busy now ({busy})")
    now_us = max(float(np.median(trials)) - cached.per_env_us, 0.0)
    was = cached.process_us[0]
    if now_us <= was * CHECK_TOLERANCE + CHECK_SLACK_US and was <= now_us * CHECK_TOLERANCE + CHECK_SLACK_US:
        return replace(cached, source="verified", checked_at=time.time(), check_us=now_us)
    why = f"replaces a cache that said a crossing costs {was:.1f} µs; a check measured {now_us:.1f} µs"
    return _remeasure(path, cores, cached, why)


def _save(path: str, costs: MachineCosts) -> None:
    """Write ``costs`` to the cache file (one that cannot be written costs a measurement next time)."""
    data = {k: v for k, v in asdict(costs).items() if k in _SAVED}
    directory = private_dir(os.path.dirname(path), _PURPOSE)
    if directory is not None:
        write_private(directory, os.path.basename(path), json.dumps(data).encode())


def _load(path: str) -> MachineCosts | None:
    """The cached calibration, or None when there is none, it is unreadable, too old or not
    private (:mod:`vecenv.runs`)."""
    raw = read_private(path, _CACHE_LIMIT) if private_dir(os.path.dirname(path), _PURPOSE) else None
    if raw is None:
        return None

    def pair(value: Any) -> tuple[float, float]:
        a, b = value  # ValueError unless a pair
        return float(a), float(b)

    try:
        data = json.loads(raw)
        others, thread = data.get("others_busy"), data.get("thread_us")
        costs = MachineCosts(
            float(data["fixed_us"]), float(data["per_env_us"]), pair(data["process_us"]), pair(data["inline_us"]),
            int(data["cores"]), float(data["measured_at"]), thread_us=None if thread is None else pair(thread),
            source="cache", others_busy=None if others is None else float(others),
        )
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None
    return costs if time.time() - costs.measured_at < COSTS_MAX_AGE_S else None


# ========================================================================= one env
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
        pickle_us = 0.0 if _fixed(env.observation_space) else _round_trip_us(obs)
        shared = bool(info) and infos.fits_row(info)
        info_us = _round_trip_us(info) if info and not shared else 0.0
        if shared:  # info rows, written and read back as a worker's step and the caller do
            info_us = _us_per_call(infos.rows_round_trip(info, gym.spaces.Box(0, 1, (1,), np.uint8)))
        return EnvProbe(wall * 1e6, share, _nbytes(obs), pickle_us, build_s, info_us, shared)
    finally:
        env.close()


def _nbytes(obs: Any) -> int:
    if isinstance(obs, dict):
        return sum(map(_nbytes, obs.values()))
    if isinstance(obs, tuple):
        return sum(map(_nbytes, obs))
    return obs.nbytes if isinstance(obs, np.ndarray) else np.asarray(obs).nbytes if np.isscalar(obs) else 0


def _fixed(space: gym.Space) -> bool:
    """Whether every leaf of ``space`` travels in shared memory (else observations are pickled)."""
    if isinstance(space, gym.spaces.Dict):
        return all(map(_fixed, space.spaces.values()))
    if isinstance(space, gym.spaces.Tuple):
        return all(map(_fixed, space.spaces))
    return is_fixed_leaf(space)


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
    if not name or not module or "<" in name or any(" at 0x" in p and "<" in p for p in parts):
        return None  # a lambda or a local function, or one among the arguments
    return f"{module}.{name}{''.join(parts)}"


def cached_probe(env_fn: Callable[[], gym.Env]) -> EnvProbe:
    """The probe :func:`keep_probe` remembered for what ``env_fn`` builds, else a new one."""
    key = env_key(env_fn)
    return _PROBES[key] if key in _PROBES else probe_env(env_fn)


def keep_probe(env_fn: Callable[[], gym.Env], probe: EnvProbe) -> None:
    """Remember ``probe`` (taken on a quiet machine) for this process's later layouts of what
    ``env_fn`` builds."""
    key = env_key(env_fn)
    if key is not None:
        _PROBES[key] = probe
