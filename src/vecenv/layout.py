"""``backend="auto"``: the layout that steps a given env fastest on this machine, by measuring.

::

    make(env, n)                          backend="auto"
      │
      ├── probe_env(env_fns[0])           one copy, built, reset, stepped for at most PROBE_S
      │                                   ──► EnvProbe (step µs, CPU share, observation size)
      ├── machine_costs()                 vecenv's own cost per batched step on a no-op env,
      │                                   serial / process / inline, measured once per machine
      │                                   ──► MachineCosts (cached in the user's cache directory)
      └── decide(probe, costs, n, cores)  ──► Layout(backend, num_workers, inline, reason)

:func:`decide` predicts the microseconds of one batched step of ``n`` envs for each candidate and
takes the least (``c`` an env's step, ``e`` vecenv's work per env, ``W`` groups)::

    serial             F + n·(c + e)
    process, W groups  X_process(W) + ⌈n/W⌉·(c + e)      W ≤ usable cores
    inline,  W groups  X_inline(W)  + ⌈n/W⌉·(c + e)      W-1 workers + the caller's process

``F`` and the crossings ``X`` come from :class:`MachineCosts`. An env whose step mostly waits
(sleep, I/O: CPU share below :data:`WAITING_SHARE`) may have more workers than cores. Within
:data:`TIE` of the best, the simpler layout wins: serial, then process (isolated), then inline.

``VECENV_BACKEND`` (``serial``, ``thread``, ``process``, ``inline``, ``ray``) forces auto's choice;
``backend=`` forces it for one call. Probing never changes results: the probe copy is closed and
the run builds its envs as every fixed backend does.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
import platform
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np

from vecenv.engine import usable_cores
from vecenv.spaces.buffers import is_fixed_leaf

__all__ = [
    "FORCE_VAR",
    "EnvProbe",
    "Layout",
    "MachineCosts",
    "choose",
    "decide",
    "machine_costs",
    "probe_env",
]

#: environment variable that forces auto's choice
FORCE_VAR = "VECENV_BACKEND"
#: at most this long stepping the probe copy (plus its build and one reset)
PROBE_S = 0.05
PROBE_STEPS = 200
#: an env whose step spends less than this share of its time on a CPU waits (sleep, I/O)
WAITING_SHARE = 0.5
#: a simpler layout within this fraction of the fastest wins
TIE = 0.05
#: most worker processes auto starts for an env that waits
MAX_WAITING_WORKERS = 64
#: machine costs are measured again after this many days
COSTS_MAX_AGE_S = 30 * 86400
#: backend_kwargs only the process backend takes
_PROCESS_ONLY = {"context", "daemon", "spin_us", "yield_us", "start_timeout", "shared_memory"}


# ==================================================================== what is measured
@dataclass(frozen=True)
class EnvProbe:
    """One env copy, measured: µs per step, the CPU share of that time, observation size."""

    step_us: float
    cpu_share: float = 1.0
    obs_bytes: int = 0
    #: µs to pickle and unpickle one observation, when it must travel as a message
    pickle_us: float = 0.0
    build_s: float = 0.0


@dataclass(frozen=True)
class MachineCosts:
    """vecenv's own costs on this machine, from a no-op env (µs per batched step)."""

    #: serial: fixed cost per batched step, and cost per env
    fixed_us: float
    per_env_us: float
    #: process and inline crossings: ``a + b·(W - 1)`` for ``W`` groups, as ``(a, b)``
    process_us: tuple[float, float]
    inline_us: tuple[float, float]
    cores: int = 1
    measured_at: float = field(default_factory=time.time)

    def crossing(self, layout: str, groups: int) -> float:
        a, b = self.process_us if layout == "process" else self.inline_us
        return a + b * (groups - 1)


@dataclass(frozen=True)
class Layout:
    """What auto chose: a backend, its groups, and why (with each candidate's predicted µs)."""

    backend: str
    num_workers: int = 1
    inline: bool = False
    reason: str = ""
    predicted_us: Mapping[str, float] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """``serial``, ``process`` or ``inline`` (and the others when forced)."""
        return "inline" if self.inline else self.backend

    def kwargs(self) -> dict[str, Any]:
        """The backend keyword arguments that build this layout."""
        if self.backend == "process":
            return {"num_workers": self.num_workers, "inline": self.inline}
        if self.backend in ("thread", "ray"):
            return {"num_workers": self.num_workers}
        return {}

    def __str__(self) -> str:
        groups = f", {self.num_workers} groups" if self.backend != "serial" else ""
        return f"{self.name}{groups}: {self.reason}"


# ==================================================================== the rule
def decide(
    probe: EnvProbe,
    costs: MachineCosts,
    num_envs: int,
    cores: int,
    *,
    allowed: Sequence[str] = ("serial", "process", "inline"),
    num_workers: int | None = None,
) -> Layout:
    """The fastest of the ``allowed`` layouts for ``num_envs`` copies of the probed env.

    ``num_workers`` fixes the number of groups of process and inline layouts.

    Examples:
        With made-up machine costs: a cheap step stays in the calling process, an expensive
        one is spread over the cores.

        >>> from vecenv.layout import EnvProbe, MachineCosts, decide
        >>> costs = MachineCosts(fixed_us=10.0, per_env_us=2.0, process_us=(40.0, 10.0),
        ...                      inline_us=(30.0, 10.0), cores=4)
        >>> cheap = decide(EnvProbe(step_us=5.0), costs, num_envs=8, cores=4)
        >>> cheap.backend, cheap.kwargs(), cheap.predicted_us["serial"]
        ('serial', {}, 66.0)
        >>> costly = decide(EnvProbe(step_us=1000.0), costs, num_envs=8, cores=4)
        >>> costly.name, costly.kwargs()
        ('process', {'num_workers': 4, 'inline': False})
        >>> print(costly)  # doctest: +ELLIPSIS
        process, 4 groups: a step costs 1,000.0 µs, enough for 4 worker processes to pay off ...
    """
    n = num_envs
    work = probe.step_us + costs.per_env_us
    waits = probe.cpu_share < WAITING_SHARE
    if num_workers is not None:
        widths = [min(num_workers, n)]
    elif waits:  # the cores are not the limit: as many workers as the waiting allows
        most = max(cores, int(cores / max(probe.cpu_share, 1e-3)))
        widths = sorted({min(n, cores), min(n, MAX_WAITING_WORKERS, most)})
    else:
        widths = [min(n, cores)]
    predicted: dict[str, float] = {}
    shapes: dict[str, tuple[str, int]] = {}
    if "serial" in allowed and (num_workers in (None, 1)):
        predicted["serial"] = costs.fixed_us + n * work
        shapes["serial"] = ("serial", 1)
    for kind in ("process", "inline"):
        if kind not in allowed:
            continue
        for w in widths:
            if kind == "inline" and w < 2:
                continue
            if kind == "process" and w < 2 and "serial" in predicted:
                continue  # one worker only adds a crossing to serial
            crossing = costs.crossing(kind, w) + n * probe.pickle_us
            predicted[f"{kind}×{w}"] = crossing + math.ceil(n / w) * work
            shapes[f"{kind}×{w}"] = (kind, w)
    if not predicted:
        kind = allowed[0]
        w = 1 if kind == "serial" else max(1, min(n, num_workers or cores))
        return Layout(_backend(kind), w, kind == "inline", "the only layout the arguments allow", {})
    best = min(predicted.values())
    for kind in ("serial", "process", "inline"):  # the simplest within TIE of the fastest
        near = [k for k, t in predicted.items() if shapes[k][0] == kind and t <= best * (1 + TIE)]
        if near:
            key = min(near, key=predicted.__getitem__)
            break
    kind, w = shapes[key]
    return Layout(_backend(kind), w, kind == "inline", _reason(kind, w, probe, predicted, key, cores), predicted)


def _backend(kind: str) -> str:
    return "process" if kind == "inline" else kind


def _reason(kind: str, w: int, probe: EnvProbe, predicted: dict[str, float], key: str, cores: int) -> str:
    step = f"a step costs {probe.step_us:,.1f} µs"
    if probe.cpu_share < WAITING_SHARE:
        step += f" ({probe.cpu_share:.0%} of it on a CPU)"
    others = ", ".join(f"{k} {t:,.0f}" for k, t in sorted(predicted.items(), key=lambda kv: kv[1]))
    why = {
        "serial": "less than a crossing to a worker saves",
        "process": f"enough for {w} worker processes to pay off on {cores} usable cores",
        "inline": f"enough to spread over {w - 1} worker process(es) and this process",
    }[kind]
    return f"{step}, {why} (predicted µs per batched step: {others})"


# ==================================================================== constraints and override
def allowed_layouts(backend_kwargs: Mapping[str, Any], num_envs: int, cores: int) -> tuple[list[str], str]:
    """The layouts the user's backend keyword arguments allow, and why when they narrow it."""
    if cores <= 1:
        if backend_kwargs.keys() & _PROCESS_ONLY or backend_kwargs.get("step_timeout") is not None:
            return ["process"], "the arguments need worker processes"
        return ["serial"], "only one core is usable"
    if backend_kwargs.get("batch_size") not in (None, num_envs):
        return ["process"], "async batches need workers that finish independently"
    if backend_kwargs.get("step_timeout") is not None:
        return ["process"], "step_timeout needs every env in a worker process"
    inline = backend_kwargs.get("inline")
    if inline is True:
        return ["inline"], "inline=True"
    if inline is False or backend_kwargs.keys() & _PROCESS_ONLY:
        return ["process"], "the arguments are the process backend's"
    if backend_kwargs.get("num_workers") not in (None, 1):
        return ["process", "inline"], "num_workers > 1"
    return ["serial", "process", "inline"], ""


def forced(num_envs: int, backend_kwargs: Mapping[str, Any]) -> Layout | None:
    """The layout ``VECENV_BACKEND`` forces, or None."""
    value = os.environ.get(FORCE_VAR, "").strip().lower()
    if not value or value == "auto":
        return None
    choices = ("serial", "thread", "process", "inline", "ray")
    if value not in choices:
        raise ValueError(f"{FORCE_VAR}={value!r}: expected one of {list(choices)} or 'auto'")
    workers = backend_kwargs.get("num_workers") or min(num_envs, usable_cores())
    return Layout(_backend(value), 1 if value == "serial" else workers, value == "inline", f"forced by {FORCE_VAR}")


# ==================================================================== probing an env
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
        obs, _ = env.reset(seed=0)
        walls: list[float] = []
        cpus: list[float] = []
        clock, cpu_clock = time.perf_counter, time.process_time
        end = clock() + budget_s
        while len(walls) < PROBE_STEPS and clock() < end:
            t, p = clock(), cpu_clock()
            obs, _, terminated, truncated, _ = env.step(actions[len(walls) % 16])
            walls.append(clock() - t)
            cpus.append(cpu_clock() - p)
            if terminated or truncated:
                env.reset()
        # medians: a step preempted by another program says nothing about the env
        wall, cpu = float(np.median(walls)), float(np.median(cpus))
        share = min(1.0, cpu / wall) if wall > 0 else 1.0
        return EnvProbe(wall * 1e6, share, _nbytes(obs), _pickle_us(env.observation_space, obs), build_s)
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
    if fixed:
        return 0.0
    start = time.perf_counter()
    for _ in range(10):
        pickle.loads(pickle.dumps(obs))
    return (time.perf_counter() - start) / 10 * 1e6


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
    """:func:`probe_env`, remembered for this process by :func:`env_key`."""
    key = env_key(env_fn)
    if key is not None and key in _PROBES:
        return _PROBES[key]
    probe = probe_env(env_fn)
    if key is not None:
        _PROBES[key] = probe
    return probe


# ==================================================================== the machine's costs
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


# ==================================================================== make's entry point
def choose(env_fns: Sequence[Callable[[], gym.Env]], backend_kwargs: Mapping[str, Any]) -> Layout:
    """The layout ``backend="auto"`` builds for ``env_fns`` with these backend arguments."""
    n = len(env_fns)
    layout = forced(n, backend_kwargs)
    if layout is not None:
        return layout
    cores = usable_cores()
    allowed, narrowed = allowed_layouts(backend_kwargs, n, cores)
    workers = backend_kwargs.get("num_workers")
    if len(allowed) == 1 and allowed[0] != "serial":
        w = max(1, min(n, workers or cores))
        return Layout(_backend(allowed[0]), w, allowed[0] == "inline", narrowed)
    if allowed == ["serial"] or (n == 1 and "serial" in allowed):
        return Layout("serial", 1, False, narrowed or "one env")
    try:
        probe = cached_probe(env_fns[0])
    except Exception as exc:  # the backend builds the envs again and reports the failure as the env's
        kind = "process" if "process" in allowed else allowed[0]
        w = 1 if kind == "serial" else max(1, min(n, workers or cores))
        reason = f"the env could not be probed here ({type(exc).__name__}: {exc})"
        return Layout(_backend(kind), w, kind == "inline", reason)
    return decide(probe, machine_costs(), n, cores, allowed=allowed, num_workers=workers)
