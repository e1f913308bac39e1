"""``vecenv.make``: one call from an env id or factory to a vector env on any backend."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import (
    EnvSpec,
    _find_spec,  # what gym.make uses; parses "module:EnvId"
)
from gymnasium.vector import AutoresetMode

from vecenv import runs
from vecenv.backends import ProcessVectorEnv, RayVectorEnv, SerialVectorEnv, ThreadVectorEnv
from vecenv.engine import VectorEnv, parse_autoreset_mode
from vecenv.engine.checks import check_count
from vecenv.layout import choose
from vecenv.system import usable_cores

__all__ = ["BACKENDS", "available_backends", "make", "usable_cores"]

#: backend name -> its vector env class
BACKENDS: dict[str, type[VectorEnv]] = {
    "serial": SerialVectorEnv,
    "thread": ThreadVectorEnv,
    "process": ProcessVectorEnv,
    "ray": RayVectorEnv,
}


def available_backends() -> list[str]:
    """Every backend's name (an optional extra, such as Ray, may still need installing)."""
    return list(BACKENDS)


def find_spec(env_id: str) -> EnvSpec:
    """gymnasium's spec for ``env_id``, as ``gym.make`` finds it.

    A ``"module:EnvId"`` id imports ``module`` first (so a plugin registers its envs) and an
    unversioned id gets its latest version: gymnasium's own lookup, so that the parent checks the
    id exactly as each worker's ``gym.make`` will. Raises gymnasium's errors for an unknown id,
    and ``ModuleNotFoundError`` for a module that cannot be imported.
    """
    return _find_spec(env_id)


def _make_from_id(env_id: str, env_kwargs: dict, wrappers: Sequence[Callable]) -> gym.Env:
    return _wrap(gym.make(env_id, **env_kwargs), wrappers)


def _make_from_callable(fn: Callable[..., gym.Env], env_kwargs: dict, wrappers: Sequence[Callable]) -> gym.Env:
    env = fn(**env_kwargs)
    if not isinstance(env, gym.Env) and hasattr(env, "possible_agents"):  # a PettingZoo game
        raise TypeError(f"env_fn returned a PettingZoo env ({type(env).__qualname__}): step its agents "
                        "as rows with vecenv.pettingzoo.make(env_fn, num_games) (docs/pettingzoo.md)")
    return _wrap(env, wrappers)


def _wrap(env: gym.Env, wrappers: Sequence[Callable]) -> gym.Env:
    for wrapper in wrappers:
        env = wrapper(env)
    return env


def make(
    env: str | Callable[..., gym.Env] | Sequence[Callable[[], gym.Env]],
    num_envs: int | None = None,
    *,
    backend: str = "auto",
    autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
    env_kwargs: dict[str, Any] | None = None,
    wrappers: Sequence[Callable[[gym.Env], gym.Env]] | None = None,
    **backend_kwargs: Any,
) -> VectorEnv:
    """Build a vector env of ``num_envs`` copies of ``env``.

    Args:
        env: a registered env id (``"CartPole-v1"``, or ``"module:EnvId"`` to import the module
            that registers it first, as ``gym.make`` does: ``"ale_py:ALE/Pong-v5"``), a callable returning an env (called with
            ``**env_kwargs``), or a list of callables (then ``num_envs`` is its length).
        num_envs: how many copies (default 1; for a list, its length).
        backend: ``"serial"``, ``"thread"``, ``"process"``, ``"ray"`` or ``"auto"``: the layout
            that steps this env fastest here (serial, processes, or processes with
            ``inline=True``), chosen by measuring; see :mod:`vecenv.layout`. The env's
            ``layout`` attribute says what was chosen and why; ``VECENV_BACKEND`` forces it.
        autoreset_mode: ``"next_step"`` (default), ``"same_step"``, ``"disabled"`` or the enum.
        env_kwargs: keyword arguments for ``gym.make`` or the factory.
        wrappers: callables applied in order to each env after it is made.
        **backend_kwargs: passed to the backend's class (``copy``, ``num_workers``, ...).

    Examples:
        >>> import vecenv
        >>> envs = vecenv.make("CartPole-v1", num_envs=4, backend="serial")
        >>> envs
        SerialVectorEnv(CartPole-v1, num_envs=4)
        >>> obs, infos = envs.reset(seed=0)          # env i is seeded 0 + i
        >>> obs.shape, obs.dtype
        ((4, 4), dtype('float32'))
        >>> obs, rewards, terminations, truncations, infos = envs.step(envs.action_space.sample())
        >>> rewards
        array([1., 1., 1., 1.])
        >>> envs.close()

        The env's keyword arguments and wrappers, and a context manager that closes it:

        >>> import gymnasium as gym
        >>> with vecenv.make("CartPole-v1", 2, backend="serial", env_kwargs={"max_episode_steps": 5},
        ...                  wrappers=[gym.wrappers.RecordEpisodeStatistics]) as envs:
        ...     _ = envs.reset(seed=0)
        ...     for _ in range(5):
        ...         *_, truncations, infos = envs.step(envs.action_space.sample())
        >>> truncations, infos["episode"]["l"]
        (array([ True,  True]), array([5, 5]))
    """
    mode = parse_autoreset_mode(autoreset_mode)
    if backend != "auto" and backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: expected one of {['auto', *BACKENDS]}")
    env_kwargs = dict(env_kwargs or {})
    wrappers = list(wrappers or [])
    spec = None
    env_fns: list[Callable[[], gym.Env]]
    if isinstance(env, str):
        # gymnasium's clear error for an unknown id; "module:EnvId" imports module here, and the
        # whole id reaches every worker's gym.make, which imports it there (spawn, forkserver)
        spec = find_spec(env)
        n = _num_envs(num_envs)
        env_fns = [partial(_make_from_id, env, env_kwargs, wrappers)] * n
    elif callable(env):
        n = _num_envs(num_envs)
        env_fns = [partial(_make_from_callable, env, env_kwargs, wrappers)] * n
    elif isinstance(env, Sequence) and env and all(callable(f) for f in env):
        if num_envs is not None and _num_envs(num_envs) != len(env):
            raise ValueError(f"num_envs={num_envs} but {len(env)} env callables were given")
        if env_kwargs:
            raise ValueError("env_kwargs is for an env id or a single factory, not a list of callables")
        env_fns = [partial(_make_from_callable, fn, {}, wrappers) for fn in env] if wrappers else list(env)  # type: ignore[arg-type]
    else:
        raise TypeError(
            f"env: expected a registered env id, a callable returning an env, or a non-empty list of "
            f"callables, got {env!r:.100}"
        )
    chosen = None
    with runs.starting():  # a run started beside this one sees it while both choose
        if backend == "auto":
            chosen = choose(env_fns, backend_kwargs)
            backend = chosen.backend
            backend_kwargs = {**chosen.kwargs(), **backend_kwargs}
        envs = BACKENDS[backend](env_fns, autoreset_mode=mode, **backend_kwargs)
    if chosen is not None:
        envs.layout = chosen
    if spec is not None:
        envs.spec = spec
    return envs


def _num_envs(num_envs: Any) -> int:
    """``num_envs`` as an int: any integral number >= 1 (a numpy integer too), never a bool."""
    return 1 if num_envs is None else check_count("num_envs", num_envs, None)
