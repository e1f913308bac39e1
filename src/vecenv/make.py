"""``vecenv.make``: one call from an env id or factory to a vector env on any backend, taking
``gym.make_vec``'s arguments; a keyword fitting neither the vector env nor the env is refused.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Mapping, Sequence
from functools import cache, partial
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec, VectorizeMode, _find_spec, load_env_creator
from gymnasium.vector import AutoresetMode

from vecenv import runs
from vecenv.backends import ProcessVectorEnv, RayVectorEnv, SerialVectorEnv, ThreadVectorEnv
from vecenv.engine import VectorEnv, parse_autoreset_mode
from vecenv.engine.checks import check_count
from vecenv.layout import choose
from vecenv.policy import FailureOptions
from vecenv.system import usable_cores

__all__ = ["BACKENDS", "available_backends", "make", "register_vector_env", "usable_cores"]

#: backend name -> its vector env class
BACKENDS: dict[str, type[VectorEnv]] = {
    "serial": SerialVectorEnv,
    "thread": ThreadVectorEnv,
    "process": ProcessVectorEnv,
    "ray": RayVectorEnv,
}


def _keywords(fn: Any) -> tuple[list[str], bool]:
    """The parameters ``fn`` takes by keyword, in order, and whether it takes any (``**kwargs``)."""
    params = inspect.signature(fn).parameters.values()
    names = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    return names, any(p.kind is p.VAR_KEYWORD for p in params)


#: what ``gym.make`` itself takes beside the env's constructor arguments (``max_episode_steps``,
#: ``disable_env_checker``), read from the installed gymnasium
GYM_MAKE_KEYWORDS = tuple(k for k in _keywords(gym.make)[0] if k != "id")
#: gymnasium's spec for an id, found as each worker's ``gym.make`` will find it (``"module:EnvId"``
#: imports ``module`` first; an unversioned id gets its latest version)
find_spec: Callable[[str], EnvSpec] = _find_spec


#: the failure policy's keywords that need worker processes (``backend="auto"`` then means "process")
RECYCLING = ("max_episodes_per_env", "max_worker_memory")


@cache
def _backend_params() -> dict[str, frozenset[str]]:
    """Each backend's constructor keywords (the failure policy's included)."""
    failure = set(FailureOptions.__annotations__)
    return {name: frozenset(set(_keywords(cls.__init__)[0]) - {"self", "env_fns"} | failure)
            for name, cls in BACKENDS.items()}


def vector_keywords() -> frozenset[str]:
    """Every keyword that configures one of vecenv's vector envs (any backend)."""
    return frozenset().union(*_backend_params().values())


def _backend_for_mode(mode: Any, backend: str) -> str:
    """The backend that gymnasium's ``vectorization_mode`` means: ``"sync"`` is ``"serial"``,
    ``"async"`` is ``"process"``; ``None`` keeps ``backend``."""
    if mode is None:
        return backend
    try:
        mode = VectorizeMode(mode)
    except ValueError:
        raise ValueError(f"vectorization_mode: expected one of {[m.value for m in VectorizeMode]} "
                         f"(gymnasium's modes) or None, got {mode!r}") from None
    if mode is VectorizeMode.VECTOR_ENTRY_POINT:
        raise ValueError(
            "vectorization_mode='vector_entry_point' asks gym.make_vec to build the vector env that "
            "the id registers as its vector_entry_point; vecenv.make builds its own. Call "
            "gym.make_vec(id, num_envs, vectorization_mode='vector_entry_point') for the registered "
            "one, or vecenv.make(id, num_envs, backend=...) for vecenv's (see "
            "vecenv.register_vector_env to register vecenv as an id's vector_entry_point)")
    wanted = "serial" if mode is VectorizeMode.SYNC else "process"
    if backend not in ("auto", wanted):
        raise ValueError(f"vectorization_mode={mode.value!r} means backend={wanted!r}, but "
                         f"backend={backend!r} was given; pass one of them")
    return wanted


def _sort_keywords(backend: str, kwargs: Mapping[str, Any], env_kwargs: Any, vector_kwargs: Any,
                   autoreset_mode: str | AutoresetMode) -> tuple[dict, dict, AutoresetMode]:
    """``(env keywords, vector env keywords, autoreset mode)`` from ``make``'s arguments; a
    keyword given twice, or one ``backend`` does not take, is refused, naming where it belongs."""
    known, params = vector_keywords(), _backend_params()
    given = {"vector_kwargs": vector_kwargs, "env_kwargs": env_kwargs}
    for name, value in given.items():
        if value is not None and (not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value)):
            raise TypeError(f"{name}: expected a dict of keyword arguments, got {value!r:.100}")
    vector, envs = dict(vector_kwargs or {}), dict(env_kwargs or {})
    unknown = sorted(key for key in vector if key not in known)
    if unknown:
        raise TypeError(
            f"vector_kwargs: {unknown[0]!r} is not a keyword of any vecenv vector env; vector_kwargs "
            f"takes {sorted(known)}. An env's own keyword goes to make(...) directly or in env_kwargs=")
    for key, value in kwargs.items():
        into, name = (vector, "vector_kwargs") if key in known else (envs, "env_kwargs")
        if key in into:
            raise TypeError(f"{key!r} was given both as make(..., {key}=...) and in {name}; pass it once")
        into[key] = value
    if "autoreset_mode" in vector:  # as gymnasium's vector envs take it; both only if they agree
        mode = vector.pop("autoreset_mode")
        if parse_autoreset_mode(autoreset_mode) not in (AutoresetMode.NEXT_STEP, parse_autoreset_mode(mode)):
            raise TypeError(f"autoreset_mode given twice: make(..., autoreset_mode={autoreset_mode!r}) and "
                            f"vector_kwargs={{'autoreset_mode': {mode!r}}}; pass it once")
        autoreset_mode = mode
    parsed = parse_autoreset_mode(autoreset_mode)
    for key in vector if backend != "auto" else ():
        if key not in params[backend]:
            takers = sorted(name for name, keys in params.items() if key in keys)
            raise TypeError(f"{key!r} is a keyword of the {', '.join(takers)} backend(s), not of "
                            f"backend={backend!r}, which takes {sorted(params[backend])}")
    return envs, vector, parsed


def _check_env_keywords(env: Any, spec: EnvSpec | None, keywords: Mapping[str, Any]) -> None:
    """Refuse, before any env is made, a keyword that neither the env's constructor (read from
    the id's entry point, or ``env`` itself) nor ``gym.make`` takes."""
    if not keywords or (spec is not None and spec.entry_point is None):
        return
    creator: Any = env
    allowed, where = set(), f"the env factory {getattr(env, '__name__', env)!r}"
    if spec is not None:
        entry = spec.entry_point
        try:
            creator = load_env_creator(entry) if isinstance(entry, str) else entry
        except Exception:  # noqa: BLE001 - gym.make reports an unloadable entry point itself
            return
        allowed = set(GYM_MAKE_KEYWORDS)
        where = f"{spec.id} (made by gym.make, which also takes {list(GYM_MAKE_KEYWORDS)})"
    try:
        names, any_keyword = _keywords(creator)
    except (TypeError, ValueError):  # a signature that cannot be read accepts anything
        return
    if any_keyword:
        return
    takes = set(names) | allowed
    for key in keywords:
        if key not in takes:
            raise TypeError(
                f"{key!r}: not a keyword of {where}, which takes {sorted(takes)}, nor of "
                f"vecenv's vector envs, which take {sorted(vector_keywords())}. As in gym.make_vec, "
                "an env keyword goes to make(...) directly or in env_kwargs={...} and reaches every "
                "env; a vector env keyword goes to make(...) directly or in vector_kwargs={...}")


def available_backends() -> list[str]:
    """Every backend's name (an optional extra, such as Ray, may still need installing)."""
    return list(BACKENDS)


def _build(env: Any, env_kwargs: dict, wrappers: Sequence[Callable]) -> gym.Env:
    """One env: ``gym.make`` of an id, or a factory called with the env keywords; then wrapped."""
    made = gym.make(env, **env_kwargs) if isinstance(env, (str, EnvSpec)) else env(**env_kwargs)
    if not isinstance(made, gym.Env) and hasattr(made, "possible_agents"):  # a PettingZoo game
        raise TypeError(f"env_fn returned a PettingZoo env ({type(made).__qualname__}): step its agents "
                        "as rows with vecenv.pettingzoo.make(env_fn, num_games) (docs/pettingzoo.md)")
    for wrapper in wrappers:
        made = wrapper(made)
    return made


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
            that registers it first: ``"ale_py:ALE/Pong-v5"``) or its ``EnvSpec``, a callable
            returning an env (called with the env keywords), or a list of callables.
        num_envs: how many copies (default 1; for a list, its length).
        backend: ``"serial"``, ``"thread"``, ``"process"``, ``"ray"`` or ``"auto"``: the layout
            measured to step this env fastest here (:mod:`vecenv.layout`); the env's ``layout``
            attribute says what was chosen and why; ``VECENV_BACKEND`` forces it. With
            ``max_episodes_per_env`` or ``max_worker_memory``, ``"auto"`` is ``"process"``.
        autoreset_mode: ``"next_step"`` (default), ``"same_step"``, ``"disabled"`` or the enum.
        env_kwargs: keyword arguments for ``gym.make`` or the factory.
        wrappers: callables applied in order to each env after it is made.
        vectorization_mode: gymnasium's: ``"sync"`` is ``backend="serial"``, ``"async"`` is
            ``backend="process"``; ``"vector_entry_point"`` is refused.
        vector_kwargs: keywords for the vector env's class, as ``gym.make_vec`` takes them.
        **kwargs: a vector env option (``copy``, ``num_workers``, ``on_error``, ...) goes to the
            vector env; any other keyword to each env, as in ``gym.make_vec``.

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
    backend = _backend_for_mode(vectorization_mode, backend)
    if backend != "auto" and backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: expected one of {['auto', *BACKENDS]}")
    env_kwargs, backend_kwargs, mode = _sort_keywords(backend, kwargs, env_kwargs, vector_kwargs, autoreset_mode)
    spec, env_fns = _env_fns(env, num_envs, env_kwargs, list(wrappers or []))
    if backend == "auto" and any(backend_kwargs.get(k) is not None for k in RECYCLING):
        backend = "process"  # recycling replaces envs in worker processes, which only it has
    if backend != "auto":  # an explicit backend touches no file of vecenv's
        envs = BACKENDS[backend](env_fns, autoreset_mode=mode, **backend_kwargs)
    else:
        with runs.starting():  # a run started beside this one sees it while both choose
            chosen = choose(env_fns, backend_kwargs)
            envs = BACKENDS[chosen.backend](env_fns, autoreset_mode=mode, **{**chosen.kwargs(), **backend_kwargs})
            runs.opened()  # the vector env counts as a run until it closes (VectorEnv.close)
            envs.layout = chosen
    if spec is not None:
        # the keywords the envs were made with, as gym.make_vec records them
        envs.spec = copy.deepcopy(spec)
        envs.spec.kwargs = {**spec.kwargs, **env_kwargs, **({"num_envs": len(env_fns)} if len(env_fns) != 1 else {})}
    return envs


def _env_fns(env: Any, num_envs: Any, env_kwargs: dict[str, Any],
             wrappers: list[Callable]) -> tuple[EnvSpec | None, list[Callable[[], gym.Env]]]:
    """The id's spec (``None`` for callables) and one callable per env."""
    count = 1 if num_envs is None else check_count("num_envs", num_envs, None)
    if isinstance(env, (str, EnvSpec)):
        # gymnasium's clear error for an unknown id; "module:EnvId" imports module here, and the
        # whole id reaches every worker's gym.make, which imports it there (spawn, forkserver)
        spec = env if isinstance(env, EnvSpec) else find_spec(env)
        _check_env_keywords(env, spec, env_kwargs)
        return spec, [partial(_build, env, env_kwargs, wrappers)] * count
    if callable(env):
        _check_env_keywords(env, None, env_kwargs)
        return None, [partial(_build, env, env_kwargs, wrappers)] * count
    if isinstance(env, Sequence) and env and all(callable(f) for f in env):
        if num_envs is not None and count != len(env):
            raise ValueError(f"num_envs={num_envs} but {len(env)} env callables were given")
        if env_kwargs:
            raise ValueError(f"env keywords {sorted(env_kwargs)} are for an env id or a single factory, "
                             "not a list of callables (each callable makes its env itself)")
        return None, [partial(_build, fn, {}, wrappers) for fn in env] if wrappers else list(env)
    raise TypeError(
        f"env: expected a registered env id, a callable returning an env, or a non-empty list of "
        f"callables, got {env!r:.100}"
    )


def register_vector_env(id: str, env: str | Callable[..., gym.Env], **options: Any) -> None:
    """Register gymnasium id ``id`` whose vector entry point is vecenv: ``gym.make_vec(id, n)``
    returns ``vecenv.make(env, num_envs=n, **options)``.

    ``gym.make(id)`` still makes one env as ``env`` does (its registration is copied). This is
    how a library that calls ``gym.make_vec(id, n, vectorization_mode="vector_entry_point")``
    (RLlib: docs/clients.md) steps with vecenv. Register in every process that builds the vector
    env (a ``"module:Id"`` id makes gymnasium import the module that registers it).

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
