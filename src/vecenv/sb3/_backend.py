"""What the SB3 layer runs on sub-environments, and how it converts SB3's per-env actions and
gymnasium's batched infos into each other's layout."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from vecenv.sb3.base import IndexValueError, TypeValueError

# ---------------------------------------------------------------- functions run per env
# Module-level so they pickle by reference when sent to worker processes.


def get_wrapper_attr(env: gym.Env, name: str) -> Any:
    return env.get_wrapper_attr(name)


def has_wrapper_attr(env: gym.Env, name: str) -> bool:
    try:
        env.get_wrapper_attr(name)
    except AttributeError:
        return False
    return True


def call_wrapper_method(env: gym.Env, name: str, args: tuple, kwargs: dict) -> Any:
    method = env.get_wrapper_attr(name)
    if not callable(method):
        raise TypeError(
            f"'{type(method).__name__}' object is not callable: env_method({name!r}) found a "
            f"{type(method).__name__} attribute, not a method"
        )
    return method(*args, **kwargs)


def set_wrapper_attr(env: gym.Env, name: str, value: Any) -> None:
    """Set ``name`` where the wrapper chain defines it (on the outermost wrapper if nowhere)."""
    setter = getattr(env, "set_wrapper_attr", None)
    if setter is None:
        setattr(env, name, value)
        return
    try:
        setter(name, value, force=True)
    except TypeError:  # gymnasium < 1.1 has no ``force``
        setter(name, value)


ClassRef = Any  # a class, or (module, qualname) resolved in the worker


def class_ref(cls: type) -> ClassRef:
    """Refer to a class by name when possible, so workers need not import its module (SB3/torch)."""
    return cls if "<locals>" in cls.__qualname__ else (cls.__module__, cls.__qualname__)


def _resolve(ref: ClassRef) -> type | None:
    if isinstance(ref, type):
        return ref
    obj: Any = sys.modules.get(ref[0])  # not loaded here => no instance can exist here
    for part in ref[1].split("."):
        obj = getattr(obj, part, None)
    return obj if isinstance(obj, type) else None


# SB3's gymnasium Monitor and vecenv's are interchangeable for is_wrapped / env_is_wrapped.
_MONITORS = (("stable_baselines3.common.monitor", "Monitor"), ("vecenv.sb3.monitor", "Monitor"))

W = TypeVar("W")


def unwrap_wrapper(env: gym.Env, wrapper_class: type[W] | tuple[type, ...]) -> W | None:
    """The first gymnasium wrapper of type ``wrapper_class`` in ``env``'s chain, or None."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, wrapper_class):
            return env  # type: ignore[return-value]
        env = env.env
    return None


def is_wrapped(env: gym.Env, wrapper_class: ClassRef) -> bool:
    """Whether ``env``'s gymnasium wrapper chain contains ``wrapper_class`` (a class, or a
    :func:`class_ref` to one, as workers get it); SB3's ``Monitor`` and vecenv's count as one."""
    wanted = _resolve(wrapper_class)
    if wanted is None:
        return False
    classes = [wanted]
    if (wanted.__module__, wanted.__qualname__) in _MONITORS:
        classes += [c for c in map(_resolve, _MONITORS) if c is not None]
    return unwrap_wrapper(env, tuple(classes)) is not None


def apply_in_order(apply: Callable[..., Any], fn: Callable[..., Any], indices: list[int],
                   args: tuple) -> list[Any]:
    """``apply`` over ``indices`` in order; an index given twice runs twice (SB3 allows that,
    vecenv's engine takes each env once per call), so then each index runs on its own."""
    if len(set(indices)) == len(indices):
        return list(apply(fn, *args, indices=indices))
    return [apply(fn, *args, indices=[i])[0] for i in indices]


# ---------------------------------------------------------------- infos and actions
FINAL_KEYS = frozenset(("final_obs", "_final_obs", "final_info", "_final_info"))


def unbatch_info(infos: dict[str, Any], index: int, skip: frozenset[str] = frozenset()) -> dict:
    """Env ``index``'s info dict from gymnasium's batched infos (``_key`` masks, nested dicts)."""
    out: dict[str, Any] = {}
    for key, value in infos.items():
        mask = infos.get("_" + key)
        if key in skip or (mask is None and key.startswith("_") and key[1:] in infos):
            continue  # skipped, or a mask, not data
        if mask is not None and not mask[index]:
            continue  # masked out (unmasked data is kept: some wrappers write plain lists)
        if isinstance(value, dict):
            out[key] = unbatch_info(value, index)
        else:
            item = value[index]
            out[key] = item.item() if isinstance(item, np.generic) else item
    return out


def batch_actions(actions: Any, space: spaces.Space, n: int) -> Any:
    """SB3's actions (one per env: a batch array, a list of ints, arrays, dicts or tuples, nested
    lists) in gymnasium's batched layout, which vecenv's engine checks and stores; gymnasium's
    own layout (a dict or tuple of batches for Dict and Tuple spaces) is taken as it is."""
    batch = type(actions) is np.ndarray and actions.ndim and len(actions) == n
    if batch and space.shape is not None:
        return actions  # the common case: a batch for a Box, Discrete, Multi* space
    if isinstance(actions, Mapping) or (
        isinstance(space, spaces.Tuple)
        and isinstance(actions, tuple)
        and actions
        and all(isinstance(part, np.ndarray) for part in actions)
    ):
        return actions  # gymnasium's batched layout of a Dict or Tuple space
    if not (actions.ndim if isinstance(actions, np.ndarray) else hasattr(actions, "__len__")):
        raise TypeValueError(
            f"'{type(actions).__name__}' object is not subscriptable: step() takes one action per "
            f"env, a batch of {n}"
        )
    try:
        count = len(actions)
    except TypeError:
        return actions  # let the engine say what it expected
    if count != n:  # SB3's DummyVecEnv fails with an IndexError, its SubprocVecEnv a ValueError
        raise IndexValueError(
            f"index out of range: step() got {count} actions for {n} envs (one action per env)"
        )
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        return _stack(list(actions), space, "actions")
    return actions


_SEQUENCES = (list, tuple, np.ndarray)


def _stack(items: list[Any], space: spaces.Space, where: str) -> Any:
    """One value per env -> gymnasium's batched layout (leaves stay lists: the engine checks)."""
    if isinstance(space, spaces.Dict):
        keys = list(space.spaces)
        for i, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise TypeValueError(
                    f"{where}[{i}]: expected a dict with keys {keys} for {space}, got "
                    f"{type(item).__name__}"
                )
            if set(item) != set(keys):
                raise ValueError(
                    f"{where}[{i}]: expected a dict with keys {keys}, got keys {list(item)}"
                )
        return {
            key: _stack([item[key] for item in items], sub, f"{where}[{key!r}]")
            for key, sub in space.spaces.items()
        }
    if isinstance(space, spaces.Tuple):
        size = len(space.spaces)
        for i, item in enumerate(items):
            if not isinstance(item, _SEQUENCES) or len(item) != size:
                got = f"length {len(item)}" if isinstance(item, _SEQUENCES) else type(item).__name__
                raise TypeValueError(
                    f"{where}[{i}]: expected a tuple of {size} parts for {space}, got {got}"
                )
        return tuple(
            _stack([item[j] for item in items], sub, f"{where}[{j}]")
            for j, sub in enumerate(space.spaces)
        )
    return items
