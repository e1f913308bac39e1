"""``vecenv.make``: one call from an env id or factory to a vector env on any backend."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import (
    EnvSpec,
    VectorizeMode,
    _find_spec,  # what gym.make uses; parses "module:EnvId"
)
from gymnasium.vector import AutoresetMode

from vecenv import runs
from vecenv.backends import ProcessVectorEnv, RayVectorEnv, SerialVectorEnv, ThreadVectorEnv
from vecenv.engine import VectorEnv, parse_autoreset_mode
from vecenv.engine.checks import check_count
from vecenv.layout import choose
from vecenv.make_args import (
    autoreset_from,
    backend_for_mode,
    check_backend_keywords,
    check_env_keywords,
    sort_keywords,
)
from vecenv.system import usable_cores

__all__ = ["BACKENDS", "available_backends", "make", "register_vector_env", "usable_cores"]

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


def _make_from_id(env_id: str | EnvSpec, env_kwargs: dict, wrappers: Sequence[Callable]) -> gym.Env:
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
    env: str | EnvSpec | Callable[..., gym.Env] | Sequence[Callable[[], gym.Env]],
    num_envs: int | None = None,
    *,
    backend: str = "auto",
    autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
    env_kwargs: dict[str, Any] | None = None,
    wrappers: Sequence[Callable[[gym.Env], gym.Env]] | None = None,
    vectorization_mode: str | VectorizeMode | None = None,
    vector_kwargs: dict[str, Any] | None = None,
    **kwargs: Any,
) -> VectorEnv:
    """Build a vector env of ``num_envs`` copies of ``env``.

    Takes every argument of ``gym.make_vec`` with the same meaning, so ``gym.make_vec(`` ->
    ``vecenv.make(`` is the whole change.

    Args:
        env: a registered env id (``"CartPole-v1"``, or ``"module:EnvId"`` to import the module
            that registers it first, as ``gym.make`` does: ``"ale_py:ALE/Pong-v5"``) or its
            ``EnvSpec`` (as ``gym.make_vec`` takes), a callable returning an env (called with
            the env keywords), or a list of callables (then ``num_envs`` is its length).
        num_envs: how many copies (default 1; for a list, its length).
        backend: ``"serial"``, ``"thread"``, ``"process"``, ``"ray"`` or ``"auto"``: the layout
            that steps this env fastest here (serial, processes, or processes with
            ``inline=True``), chosen by measuring; see :mod:`vecenv.layout`. The env's
            ``layout`` attribute says what was chosen and why; ``VECENV_BACKEND`` forces it.
        autoreset_mode: ``"next_step"`` (default), ``"same_step"``, ``"disabled"`` or the enum.
        env_kwargs: keyword arguments for ``gym.make`` or the factory (the same as passing them
            to ``make`` directly).
        wrappers: callables applied in order to each env after it is made.
        vectorization_mode: gymnasium's: ``"sync"`` is ``backend="serial"``, ``"async"`` is
            ``backend="process"``; ``"vector_entry_point"`` is refused (that is
            ``gym.make_vec``'s job; see :func:`vecenv.register_vector_env`).
        vector_kwargs: keywords for the vector env's class (``copy``, ``observation_mode``,
            ``context``, ``num_workers``, ...), as ``gym.make_vec`` takes them.
        **kwargs: a keyword naming an option of vecenv's vector envs (``copy``,
            ``num_workers``, ``on_error``, ...) goes to the vector env; any other keyword goes
            to each env, as in ``gym.make_vec`` (``max_episode_steps``, ``render_mode``,
            ``disable_env_checker``, the env's own arguments). A keyword that neither takes is
            refused before anything starts.

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

        ``gym.make_vec``'s arguments, env keywords and wrappers, and a context manager that
        closes it:

        >>> import gymnasium as gym
        >>> with vecenv.make("CartPole-v1", 2, vectorization_mode="sync", max_episode_steps=5,
        ...                  wrappers=[gym.wrappers.RecordEpisodeStatistics]) as envs:
        ...     _ = envs.reset(seed=0)
        ...     for _ in range(5):
        ...         *_, truncations, infos = envs.step(envs.action_space.sample())
        >>> truncations, infos["episode"]["l"]
        (array([ True,  True]), array([5, 5]))
    """
    backend = backend_for_mode(vectorization_mode, backend)
    if backend != "auto" and backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: expected one of {['auto', *BACKENDS]}")
    env_kwargs, backend_kwargs = sort_keywords(kwargs, env_kwargs, vector_kwargs)
    mode = parse_autoreset_mode(autoreset_from(backend_kwargs, autoreset_mode))
    check_backend_keywords(backend, backend_kwargs)
    spec, env_fns = _env_fns(env, num_envs, env_kwargs, list(wrappers or []))
    if backend == "auto":
        envs = _make_auto(env_fns, mode, backend_kwargs)
    else:  # an explicit backend touches no file of vecenv's
        envs = BACKENDS[backend](env_fns, autoreset_mode=mode, **backend_kwargs)
    if spec is not None:
        envs.spec = _made_spec(spec, env_kwargs, len(env_fns))
    return envs


def _make_auto(env_fns: list[Callable[[], gym.Env]], mode: AutoresetMode,
               backend_kwargs: dict[str, Any]) -> VectorEnv:
    """The layout ``backend="auto"`` measures and chooses; the vector env counts as a run on this
    machine while it lives (:mod:`vecenv.runs`), so that other processes' ``auto`` sees it."""
    with runs.starting():  # a run started beside this one sees it while both choose
        chosen = choose(env_fns, backend_kwargs)
        envs = BACKENDS[chosen.backend](env_fns, autoreset_mode=mode, **{**chosen.kwargs(), **backend_kwargs})
        runs.opened()  # until it closes (VectorEnv.close)
        envs.layout = chosen
    return envs


def _env_fns(env: Any, num_envs: Any, env_kwargs: dict[str, Any],
             wrappers: list[Callable]) -> tuple[EnvSpec | None, list[Callable[[], gym.Env]]]:
    """The id's spec (``None`` for callables) and one callable per env."""
    if isinstance(env, (str, EnvSpec)):
        # gymnasium's clear error for an unknown id; "module:EnvId" imports module here, and the
        # whole id reaches every worker's gym.make, which imports it there (spawn, forkserver)
        spec = env if isinstance(env, EnvSpec) else find_spec(env)
        check_env_keywords(env, spec, env_kwargs)
        return spec, [partial(_make_from_id, env, env_kwargs, wrappers)] * _num_envs(num_envs)
    if callable(env):
        check_env_keywords(env, None, env_kwargs)
        return None, [partial(_make_from_callable, env, env_kwargs, wrappers)] * _num_envs(num_envs)
    if isinstance(env, Sequence) and env and all(callable(f) for f in env):
        if num_envs is not None and _num_envs(num_envs) != len(env):
            raise ValueError(f"num_envs={num_envs} but {len(env)} env callables were given")
        if env_kwargs:
            raise ValueError(f"env keywords {sorted(env_kwargs)} are for an env id or a single factory, "
                             "not a list of callables (each callable makes its env itself)")
        return None, [partial(_make_from_callable, fn, {}, wrappers) for fn in env] if wrappers else list(env)
    raise TypeError(
        f"env: expected a registered env id, a callable returning an env, or a non-empty list of "
        f"callables, got {env!r:.100}"
    )


def _made_spec(spec: EnvSpec, env_kwargs: dict[str, Any], num_envs: int) -> EnvSpec:
    """The id's spec with the keywords the envs were made with, as ``gym.make_vec`` records it."""
    made = copy.deepcopy(spec)
    made.kwargs = {**spec.kwargs, **env_kwargs}
    if num_envs != 1:
        made.kwargs["num_envs"] = num_envs
    return made


def _num_envs(num_envs: Any) -> int:
    """``num_envs`` as an int: any integral number >= 1 (a numpy integer too), never a bool."""
    return 1 if num_envs is None else check_count("num_envs", num_envs, None)


def register_vector_env(id: str, env: str | Callable[..., gym.Env], **options: Any) -> None:
    """Register gymnasium id ``id`` whose vector entry point is vecenv: ``gym.make_vec(id, n)``
    returns ``vecenv.make(env, num_envs=n, **options)``.

    ``gym.make(id)`` still makes one env as ``env`` does (its entry point, keywords and time
    limit are copied from ``env``'s registration). ``gym.make_vec`` calls the vector entry point
    with ``num_envs=`` and the spec's keywords (``max_episode_steps`` among them), which
    :func:`make` passes to each env. This is the route by which a library that builds its vector
    env with ``gym.make_vec(id, n, vectorization_mode="vector_entry_point")`` steps with vecenv:
    RLlib's ``gym_env_vectorize_mode="vector_entry_point"`` (see docs/clients.md). Register in
    every process that builds the vector env: a ``"module:Id"`` id makes gymnasium import the
    module that registers it.

    Examples:
        >>> import gymnasium as gym
        >>> import vecenv
        >>> vecenv.register_vector_env("VecenvCartPole-v1", "CartPole-v1", backend="serial")
        >>> envs = gym.make_vec("VecenvCartPole-v1", 3)
        >>> envs, envs.spec.max_episode_steps
        (SerialVectorEnv(VecenvCartPole-v1, num_envs=3), 500)
        >>> envs.close()
    """
    if not isinstance(id, str):
        raise TypeError(f"id: expected the gymnasium id to register, a str, got {id!r:.80}")
    entry = partial(make, env, **options)
    if isinstance(env, str):
        base = find_spec(env)
        gym.register(id, entry_point=base.entry_point, vector_entry_point=entry,
                     reward_threshold=base.reward_threshold, nondeterministic=base.nondeterministic,
                     max_episode_steps=base.max_episode_steps, order_enforce=base.order_enforce,
                     disable_env_checker=base.disable_env_checker, kwargs=dict(base.kwargs))
    elif callable(env):
        gym.register(id, entry_point=env, vector_entry_point=entry)
    else:
        raise TypeError(f"env: expected a registered env id or a callable returning an env, got {env!r:.80}")
