"""vecenv's own costs on this machine (:class:`~vecenv.layout.rule.MachineCosts`), measured on
no-op envs, cached in the user's cache directory, and checked cheaply before a cached figure is
trusted. A measurement that saw other work (read before and after) or :data:`TRIALS` that
disagree is *contended*: used by this process only, never cached, since a worker sharing its core
crosses many times slower and would make ``auto`` pick serial from then on.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import time
from dataclasses import asdict, replace
from typing import Any

import gymnasium as gym
import numpy as np

from vecenv.layout import load
from vecenv.layout.rule import MachineCosts
from vecenv.private_files import private_dir, read_private, write_private
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


class NoopEnv(gym.Env):
    """The cheapest env there is: vecenv's own costs show through it."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        return np.zeros(4, np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        return np.zeros(4, np.float32), 0.0, False, False, {}


def _trials(envs: Any, n: int, steps: int, warmup: int) -> list[float]:
    """µs per batched step in :data:`TRIALS` trials, each the median of its ``steps`` steps."""
    actions = np.zeros(n, np.int64)
    envs.reset(seed=0)
    for _ in range(warmup):
        envs.step(actions)
    clock = time.perf_counter
    out = []
    for _ in range(TRIALS):
        times = []
        for _ in range(steps):
            start = clock()
            envs.step(actions)
            times.append(clock() - start)
        out.append(float(np.median(times)) * 1e6)
    return out


def _measure_trials(kind: str, n: int, steps: int = TRIAL_STEPS, warmup: int = 50) -> list[float]:
    """The trials (µs per batched step) of ``n`` no-op envs: ``serial`` in this process,
    ``thread`` on ``n`` threads, ``process`` or ``inline`` with one env per group."""
    from vecenv.backends import ProcessVectorEnv, SerialVectorEnv, ThreadVectorEnv

    fns = [NoopEnv] * n
    if kind == "serial":
        with SerialVectorEnv(fns) as envs:
            return _trials(envs, n, steps, warmup)
    if kind == "thread":
        with ThreadVectorEnv(fns, num_workers=n) as envs:
            return _trials(envs, n, steps, warmup)
    with ProcessVectorEnv(fns, num_workers=n, inline=kind == "inline") as envs:
        return _trials(envs, n, steps, warmup)


def _steady(trials: list[float]) -> bool:
    return max(trials) <= TRIAL_SPREAD * min(trials) + TRIAL_SLACK_US


def _disturbance(cores: int, others: float | None, unsteady: list[str]) -> str:
    """Why a measurement is contended, in words ("" when it is not)."""
    why = []
    if load.contended(cores, others):
        why.append(f"{others:.1f} cores' worth of other work")
    if unsteady:
        why.append("trials disagreed: " + ", ".join(unsteady))
    return "; ".join(why)


def measure_machine(cores: int | None = None) -> MachineCosts:
    """Measure :class:`MachineCosts` (0.15 s on 2 cores); trials that disagree, or other work
    before or after, mark it ``contended``."""
    cores = usable_cores() if cores is None else cores
    before = load.others_busy()
    unsteady: list[str] = []

    def figure(kind: str, n: int) -> float:
        trials = _measure_trials(kind, n)
        if not _steady(trials):
            unsteady.append(f"{kind}×{n} {min(trials):.1f}–{max(trials):.1f} µs")
        return float(np.median(trials))

    t1, t8 = figure("serial", 1), figure("serial", 8)
    per_env = max((t8 - t1) / 7, 0.1)
    fixed = max(t1 - per_env, 0.0)
    wide = max(2, min(cores, 8))

    def fit(kind: str, narrow: int) -> tuple[float, float]:
        a = max(figure(kind, narrow) - per_env, 0.0)
        if wide == narrow:
            return a, 0.0
        return a, max(max(figure(kind, wide) - per_env, 0.0) - a, 0.0) / (wide - narrow)

    process, inline = fit("process", 1), fit("inline", 2)
    thread = None if gil_enabled() else fit("thread", 1)  # under the GIL threads never pay off
    others = load.most(before, load.others_busy())
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


def _machine_file(cores: int) -> str:
    from vecenv import __version__

    gil = "gil" if gil_enabled() else "nogil"  # a free-threaded build runs either way
    ident = f"{platform.node()}|{platform.machine()}|{platform.processor()}|{sys.version}|{gil}|{cores}|{__version__}"
    digest = hashlib.sha256(ident.encode()).hexdigest()[:16]
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    directory = os.environ.get("VECENV_CACHE_DIR") or os.path.join(root, "vecenv")
    return os.path.join(directory, f"machine-{digest}.json")


#: cores -> (the calibration this process uses, time.monotonic() when it was settled)
_COSTS: dict[int, tuple[MachineCosts, float]] = {}
_monotonic = time.monotonic


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
        if not (costs.contended and load.contended(cores, costs.others_busy)) \
                or load.contended(cores, load.others_busy(CHECK_LOAD_S)):
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
    before = load.others_busy(CHECK_LOAD_S)
    trials = _measure_trials("process", 1, CHECK_STEPS, warmup=20)
    others = load.most(before, load.others_busy(CHECK_LOAD_S))
    unsteady = [] if _steady(trials) else [f"{min(trials):.1f}–{max(trials):.1f} µs"]
    busy = _disturbance(cores, others, unsteady)
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
    directory = private_dir(os.path.dirname(path), "its calibration cache")
    if directory is not None:
        write_private(directory, os.path.basename(path), json.dumps(data).encode())


def _load(path: str) -> MachineCosts | None:
    """The cached calibration, or None when there is none, it is unreadable, too old or not
    private (:mod:`vecenv.private_files`)."""
    if private_dir(os.path.dirname(path), "its calibration cache") is None:
        return None
    raw = read_private(path, _CACHE_LIMIT)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        others, thread = data.get("others_busy"), data.get("thread_us")
        (pa, pb), (ia, ib) = data["process_us"], data["inline_us"]  # ValueError unless pairs
        if thread is not None:
            ta, tb = thread
            thread = (float(ta), float(tb))
        costs = MachineCosts(
            float(data["fixed_us"]), float(data["per_env_us"]), (float(pa), float(pb)),
            (float(ia), float(ib)), int(data["cores"]), float(data["measured_at"]), thread_us=thread,
            source="cache", others_busy=None if others is None else float(others),
        )
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None
    return costs if time.time() - costs.measured_at < COSTS_MAX_AGE_S else None
