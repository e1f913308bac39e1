"""``vecenv.make``'s keywords sorted the way ``gym.make_vec`` sorts its own.

``gym.make_vec(id, num_envs, vectorization_mode, vector_kwargs, wrappers, **kwargs)`` sends every
keyword it does not name itself to each env (``max_episode_steps``, ``render_mode``,
``disable_env_checker`` and the env's constructor arguments) and ``vector_kwargs`` to the vector
env. ``vecenv.make`` takes the same call: a keyword that names an option of one of vecenv's
backends (``copy``, ``num_workers``, ``on_error``, ...) configures the vector env, any other
keyword goes to each env. A keyword that fits neither the env nor any backend is refused before
anything starts, with an error that says where each kind of keyword belongs.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from functools import cache
from typing import Any

import gymnasium
from gymnasium.envs.registration import EnvSpec, VectorizeMode, load_env_creator
from gymnasium.vector import AutoresetMode

from vecenv.engine import parse_autoreset_mode
from vecenv.policy import FailureOptions

__all__ = [
    "autoreset_from",
    "backend_for_mode",
    "check_backend_keywords",
    "check_env_keywords",
    "sort_keywords",
    "vector_keywords",
]

#: what ``gym.make`` itself takes beside the env's constructor arguments (``max_episode_steps``,
#: ``disable_env_checker``), read from the installed gymnasium
GYM_MAKE_KEYWORDS = tuple(
    p.name for p in inspect.signature(gymnasium.make).parameters.values()
    if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "id")
#: gymnasium's vectorization modes and the backend each one means here
_MODE_BACKENDS = {VectorizeMode.SYNC: "serial", VectorizeMode.ASYNC: "process"}


@cache
def _backend_params() -> dict[str, frozenset[str]]:
    """Each backend's constructor keywords (the failure policy's included)."""
    from vecenv.make import BACKENDS  # circular: make imports this module

    failure = set(FailureOptions.__annotations__)
    params = {}
    for name, cls in BACKENDS.items():
        init = inspect.signature(cls.__init__)
        own = {p.name for p in init.parameters.values()
               if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in ("self", "env_fns")}
        params[name] = frozenset(own | failure)
    return params


def vector_keywords() -> frozenset[str]:
    """Every keyword that configures one of vecenv's vector envs (any backend)."""
    return frozenset().union(*_backend_params().values())


def backend_for_mode(mode: Any, backend: str) -> str:
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
    wanted = _MODE_BACKENDS[mode]
    if backend not in ("auto", wanted):
        raise ValueError(f"vectorization_mode={mode.value!r} means backend={wanted!r}, but "
                         f"backend={backend!r} was given; pass one of them")
    return wanted


def sort_keywords(kwargs: Mapping[str, Any], env_kwargs: Mapping[str, Any] | None,
                  vector_kwargs: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(env keywords, vector env keywords)`` from ``make``'s ``**kwargs``, ``env_kwargs`` and
    ``vector_kwargs``; a keyword given twice is refused, naming both places."""
    known = vector_keywords()
    vector = _checked_dict("vector_kwargs", vector_kwargs)
    envs = _checked_dict("env_kwargs", env_kwargs)
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
    return envs, vector


def _checked_dict(name: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
        raise TypeError(f"{name}: expected a dict of keyword arguments, got {value!r:.100}")
    return dict(value)


def check_backend_keywords(backend: str, vector: Mapping[str, Any]) -> None:
    """Refuse a vector env keyword that ``backend`` does not take, naming the backends that do."""
    if backend == "auto":
        return
    params = _backend_params()
    for key in vector:
        if key not in params[backend]:
            takers = sorted(name for name, keys in params.items() if key in keys)
            raise TypeError(f"{key!r} is a keyword of the {', '.join(takers)} backend(s), not of "
                            f"backend={backend!r}, which takes {sorted(params[backend])}")


def check_env_keywords(env: Any, spec: EnvSpec | None, keywords: Mapping[str, Any]) -> None:
    """Refuse, before any env is made, a keyword that neither the env nor ``gym.make`` takes.

    The env's constructor is read from the id's entry point (or is ``env`` itself for a
    factory); one that takes ``**kwargs``, or whose signature cannot be read, accepts anything.
    """
    if not keywords:
        return
    if spec is not None:
        if spec.entry_point is None:
            return
        creator: Any
        try:
            creator = load_env_creator(spec.entry_point) if isinstance(spec.entry_point, str) else spec.entry_point
        except Exception:  # noqa: BLE001 - gym.make reports an unloadable entry point itself
            return
        allowed = set(GYM_MAKE_KEYWORDS)
        where = f"{spec.id} (made by gym.make, which also takes {list(GYM_MAKE_KEYWORDS)})"
    else:
        creator, allowed, where = env, set(), f"the env factory {getattr(env, '__name__', env)!r}"
    takes = _parameters(creator)
    if takes is None:
        return
    for key in keywords:
        if key not in takes and key not in allowed:
            raise TypeError(
                f"{key!r}: not a keyword of {where}, which takes {sorted(takes | allowed)}, nor of "
                f"vecenv's vector envs, which take {sorted(vector_keywords())}. As in gym.make_vec, "
                "an env keyword goes to make(...) directly or in env_kwargs={...} and reaches every "
                "env; a vector env keyword goes to make(...) directly or in vector_kwargs={...}")


def _parameters(creator: Any) -> set[str] | None:
    """The keywords ``creator`` takes; ``None`` when it takes any (or cannot be inspected)."""
    try:
        params = inspect.signature(creator).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def autoreset_from(vector: dict[str, Any], autoreset_mode: str | AutoresetMode) -> str | AutoresetMode:
    """``autoreset_mode`` given in ``vector_kwargs`` (as gymnasium's vector envs take it) or as
    make's own argument; both at once is refused unless they agree."""
    if "autoreset_mode" not in vector:
        return autoreset_mode
    given = vector.pop("autoreset_mode")
    if parse_autoreset_mode(autoreset_mode) not in (AutoresetMode.NEXT_STEP, parse_autoreset_mode(given)):
        raise TypeError(f"autoreset_mode given twice: make(..., autoreset_mode={autoreset_mode!r}) and "
                        f"vector_kwargs={{'autoreset_mode': {given!r}}}; pass it once")
    return given
