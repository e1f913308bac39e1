"""The vector envs compared, each built from a name (``--contenders``, listed in docs/bench.md);
a ``-bK`` suffix runs the EnvPool-style async loop on batches of K. Each is wrapped in a
:class:`Runner`: ``start()`` resets (seed 0), ``step(actions)`` returns the next observations,
``rows`` env steps at a time."""

from __future__ import annotations

import re
import sys
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space

from shared_bench.targets import Target, installed

#: PufferLib contender -> (peer of vecenv.bench.puffer, workers; None: what PufferLib accepts here)
PUFFERLIB = {"pufferlib-serial": ("pufferlib-serial", None), "pufferlib-mp": ("pufferlib-mp", None),
             "pufferlib-mp-w1": ("pufferlib-mp", 1), "pufferlib-async": ("pufferlib-async", None)}
BASES = ("gym-sync", "gym-async", "vecenv-default", "vecenv-serial", "vecenv-thread", "vecenv-process",
         "vecenv-inline", "envpool", "ale-vector", "sb3-dummy", "sb3-subproc", "vecenv-sb3-dummy",
         "vecenv-sb3-subproc", *PUFFERLIB)
#: contenders of the random-action scenarios (idle, busy, two-runs) when none are named
DEFAULT = ("gym-sync", "vecenv-default", "vecenv-serial", "vecenv-process", "vecenv-inline",
           "envpool", *(() if getattr(sys, "_is_gil_enabled", lambda: True)() else ("vecenv-thread",)))
#: contenders of the policy scenario when none are named
DEFAULT_POLICY = (*DEFAULT, "vecenv-default-b4", "envpool-b4", "ale-vector-b4")

#: vecenv contender -> (backend, keyword arguments)
VECENV = {
    "vecenv-default": ("auto", {}),
    "vecenv-serial": ("serial", {}),
    "vecenv-thread": ("thread", {}),
    "vecenv-process": ("process", {}),
    "vecenv-inline": ("process", {"inline": True, "num_workers": 2}),
}
_NAME = re.compile(r"^(?P<base>[a-z0-9-]+?)(?:-b(?P<batch>\d+))?$")


class Skip(Exception):
    """A contender that cannot run here; the message says why."""


def parse(name: str) -> tuple[str, int | None]:
    """``"envpool-b4"`` -> ``("envpool", 4)``; raises ValueError for an unknown name."""
    m = _NAME.match(name)
    if not m or m["base"] not in BASES:
        raise ValueError(f"unknown contender {name!r}: expected one of {list(BASES)}, "
                         f"optionally with -bK (async batches of K), e.g. envpool-b4")
    return m["base"], int(m["batch"]) if m["batch"] else None


class Runner:
    """A built vector env stepped with a full batch of actions (``rows`` = N)."""

    def __init__(self, envs: Any, rows: int, action_space: gym.Space,
                 reset: Callable[[], tuple[Any, dict]], info: dict[str, Any] | None = None):
        self.envs = envs
        self.rows = rows
        #: the batched action space (``rows`` actions)
        self.action_space = batch_space(action_space, rows)
        self._reset = reset
        #: what the JSON records about the built env (``layout`` for vecenv-default)
        self.info = dict(info or {})

    def start(self) -> Any:
        obs, _ = self._reset()
        return obs

    def step(self, actions: Any) -> Any:
        return self.envs.step(actions)[0]

    def close(self) -> None:
        self.envs.close()


class BatchRunner(Runner):
    """The EnvPool-style async loop: ``send`` to the envs the last ``recv`` returned, ``recv`` the
    next ready batch (``rows`` = K). ``with_ids=False`` for ale_py, whose ``send`` takes none."""

    with_ids = True

    def start(self) -> Any:
        obs, info = self._reset()
        self._ids = info["env_id"]
        return obs

    def step(self, actions: Any) -> Any:
        if self.with_ids:
            self.envs.send(actions, self._ids)
        else:
            self.envs.send(actions)
        obs, _, _, _, info = self.envs.recv()
        self._ids = info["env_id"]
        return obs


class AleBatchRunner(BatchRunner):
    with_ids = False


def unavailable(name: str, t: Target, num_envs: int) -> str | None:
    """Why contender ``name`` cannot run target ``t`` here (None when it can)."""
    base, batch = parse(name)
    if base in PUFFERLIB:
        return _puffer_unavailable(base, batch, num_envs)
    if batch is not None and not 1 <= batch < num_envs:
        return f"batch size {batch} must be between 1 and num_envs - 1 ({num_envs - 1})"
    if base.startswith(("gym-", "sb3-", "vecenv-sb3-")) and batch:
        return f"{base} has no async batches"
    if "sb3" in base and not installed("stable_baselines3"):
        return "stable-baselines3 is not installed (pip install 'vecenv[sb3]')"
    if base == "envpool":
        if not installed("envpool"):
            return "envpool is not installed (pip install envpool)"
        import envpool

        if t.envpool_task not in envpool.list_all_envs():
            return f"envpool has no {t.name}"
    if base == "ale-vector":
        if t.ale_game is None:
            return "ale_py's vector env runs Atari games only"
        try:
            from ale_py.vector_env import AtariVectorEnv  # noqa: F401
        except ImportError as exc:
            return f"ale_py has no C++ vector env here ({exc}; ale_py >= 0.11 has one)"
    return None


def build(name: str, t: Target, num_envs: int, seed: int = 0) -> Runner:
    """Build contender ``name`` on target ``t`` (the caller closes it)."""
    base, batch = parse(name)
    reason = unavailable(name, t, num_envs)
    if reason:
        raise Skip(reason)
    if base in ("gym-sync", "gym-async"):
        cls = gym.vector.SyncVectorEnv if base == "gym-sync" else gym.vector.AsyncVectorEnv
        envs = cls([t.env_fn] * num_envs)
        return Runner(envs, num_envs, envs.single_action_space, lambda: envs.reset(seed=seed))
    if "sb3" in base:
        return _build_sb3(base, t, num_envs, seed)
    if base in VECENV:
        return _build_vecenv(base, t, num_envs, batch, seed)
    if base == "envpool":
        return _build_envpool(t, num_envs, batch, seed)
    if base in PUFFERLIB:
        return PufferRunner(base, t, num_envs, batch, seed)
    return _build_ale(t, num_envs, batch, seed)


def _build_vecenv(base: str, t: Target, n: int, batch: int | None, seed: int) -> Runner:
    import vecenv

    backend, kwargs = VECENV[base]
    if batch:
        kwargs = {**kwargs, "batch_size": batch}
    envs = vecenv.make(t.vecenv_env, n, backend=backend, **kwargs)
    layout = getattr(envs, "layout", None)
    info = {"built": repr(envs)}
    if layout is not None:  # what backend="auto" chose, and why
        info["layout"] = str(layout)
    cls = BatchRunner if batch else Runner
    return cls(envs, batch or n, envs.single_action_space, lambda: envs.reset(seed=seed), info)


def _build_sb3(base: str, t: Target, n: int, seed: int) -> Runner:
    """SB3's API (``reset()`` returns observations; same-step autoreset), SB3's or vecenv's."""
    if base.startswith("vecenv"):
        from vecenv import sb3 as vec_envs
    else:
        from stable_baselines3.common import vec_env as vec_envs
    cls = vec_envs.DummyVecEnv if base.endswith("dummy") else vec_envs.SubprocVecEnv
    envs = cls([t.env_fn] * n)
    envs.seed(seed)
    return Runner(envs, n, envs.action_space, lambda: (envs.reset(), {}), {"built": f"{cls.__module__}.{cls.__name__}"})


def _build_envpool(t: Target, n: int, batch: int | None, seed: int) -> Runner:
    import envpool

    with warnings.catch_warnings():  # its float64 Box bounds make gymnasium warn
        warnings.simplefilter("ignore", UserWarning)
        envs = envpool.make(t.envpool_task, env_type="gymnasium", num_envs=n,
                            batch_size=batch or n, seed=seed, **t.envpool_kwargs)
    info = {"built": f"envpool.make({t.envpool_task!r}, num_envs={n}, batch_size={batch or n})"}
    if not batch:
        return Runner(envs, n, envs.action_space, envs.reset, info)

    def reset() -> tuple[Any, dict]:
        envs.async_reset()
        obs, _, _, _, infos = envs.recv()
        return obs, infos

    return BatchRunner(envs, batch, envs.action_space, reset, info)


def _build_ale(t: Target, n: int, batch: int | None, seed: int) -> Runner:
    from ale_py.vector_env import AtariVectorEnv

    envs = AtariVectorEnv(t.ale_game, n, batch_size=batch or 0, **t.ale_kwargs)
    info = {"built": f"ale_py AtariVectorEnv({t.ale_game!r}, {n}, batch_size={batch or n})"}
    cls = AleBatchRunner if batch else Runner
    return cls(envs, batch or n, envs.single_action_space, lambda: envs.reset(seed=seed), info)


def _puffer_unavailable(base: str, batch: int | None, num_envs: int) -> str | None:
    from vecenv.bench.puffer import import_pufferlib, puffer_layout

    if batch is not None and base != "pufferlib-mp":
        return f"{base} takes no -bK (pufferlib-mp-bK is the async pool with batches of K)"
    try:
        import_pufferlib()
        puffer_layout("pufferlib-async" if batch else PUFFERLIB[base][0], num_envs, batch, PUFFERLIB[base][1])
    except (ImportError, ValueError) as exc:
        return str(exc)
    return None


class PufferRunner(Runner):
    """A PufferLib vector env (:mod:`vecenv.bench.puffer`, whose watchdog turns a dead or stalled
    worker into an error): ``send`` / ``recv``, ``rows`` env steps a step."""

    def __init__(self, base: str, t: Target, num_envs: int, batch: int | None, seed: int) -> None:
        from vecenv.bench.puffer import build_puffer

        peer, workers = PUFFERLIB[base]
        peer = "pufferlib-async" if batch is not None else peer
        envs, rows, used, self.watch = build_puffer(peer, t, num_envs, seed, batch, workers)  # type: ignore[arg-type]
        info = {"built": f"pufferlib.vector.{type(envs).__name__}(num_envs={num_envs}, "
                         f"num_workers={used}, batch_size={rows})"}
        super().__init__(envs, rows, envs.single_action_space, lambda: (envs.async_reset(seed), {}), info)

    def start(self) -> Any:
        self._reset()
        return self.step(None, send=False)

    def step(self, actions: Any, send: bool = True) -> Any:
        from vecenv.bench.puffer import PufferLibFailure

        if send:
            self.envs.send(actions)
        obs = self.envs.recv()[0]
        if self.watch is not None:
            if self.watch.failed is not None:
                raise PufferLibFailure(self.watch.failed)
            self.watch.beat += 1
        return obs

    def close(self) -> None:
        from vecenv.bench.puffer import puffer_close

        puffer_close(self.envs, self.watch)


def random_actions(runner: Runner, seed: int, size: int = 64) -> list[Any]:
    """``size`` batches of random actions, the same for every contender of a target."""
    space = runner.action_space
    space.seed(seed)
    return [np.asarray(space.sample()) for _ in range(size)]
