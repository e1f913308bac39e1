"""Argument checks for :mod:`vecenv.envpool`: each names the argument, what was expected and
what came, before anything reaches the vector env."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from gymnasium import spaces

from vecenv.engine.checks import check_env_ids, check_reset_mask
from vecenv.engine.checks import check_seeds as engine_check_seeds
from vecenv.engine.checks import check_timeout as engine_check_timeout

#: spaces whose actions EnvPool casts to the space's dtype (its single-array action form)
_CAST = (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary, spaces.Box)


def is_int(value: Any) -> bool:
    """An integral number (a numpy integer too), never a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def check_flag(name: str, value: Any) -> bool:
    """A bool: ``recv(0.5)`` must not pass for ``recv(reset=0.5)``."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(
        f"recv({name}=...): expected a bool, got {value!r} ({type(value).__name__}); "
        "a timeout goes by keyword: recv(timeout=seconds)"
    )


def check_timeout(timeout: Any, method: str = "recv") -> float | None:
    """``None`` or a number of seconds >= 0; a bool is refused (``recv(False)`` is no timeout)."""
    engine_check_timeout(timeout, method)  # a number or None, never a bool
    if timeout is None:
        return None
    if timeout != timeout or timeout < 0:
        raise ValueError(f"timeout: expected a number of seconds >= 0, got {timeout!r}")
    return float(timeout)


def check_seeds(seed: Any, n: int) -> list[int | None]:
    """One seed per env, as EnvPool seeds at make: the engine's rule (``seed + i`` for an int, or
    a list of ``n``), with every seed an int >= 0 and the words naming make's ``seed``."""
    listed = isinstance(seed, (list, tuple, np.ndarray))
    given = seed if seed is None or listed else _one_seed(seed, "seed")
    try:
        seeds = engine_check_seeds(given, n)
    except ValueError:  # a list of another length, in the words of reset(seed=...)
        raise ValueError(f"seed: a sequence of seeds needs one per env (num_envs={n}), got {len(seed)}") from None
    return [_one_seed(s, f"seed[{i}]") for i, s in enumerate(seeds)] if listed else seeds


def _one_seed(seed: Any, name: str) -> int:
    if not is_int(seed):
        raise TypeError(f"{name}: expected an int (or a sequence of one int per env), got {seed!r}")
    if seed < 0:
        raise ValueError(f"{name}: expected an int >= 0 (gymnasium seeds must be non-negative), got {seed}")
    return int(seed)


def mask_ids(mask: Any, n: int) -> np.ndarray:
    """The envs ``options["reset_mask"]`` (a bool array-like of ``n``) selects, checked by the
    engine's :func:`~vecenv.engine.checks.check_reset_mask`; any fault is a ValueError of reset."""
    mask = np.asarray(mask)
    try:
        check_reset_mask(mask, n)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"reset: {exc}") from None
    return np.flatnonzero(mask)


def env_ids_of(env_id: Any, n: int) -> np.ndarray:
    """``env_id`` (an int, or a 1-D sequence of distinct ints below ``n``) as an int64 array."""
    ids = np.asarray(env_id)
    return check_env_ids(ids.reshape(1) if ids.ndim == 0 else ids, n, name="env_id")


def cast_actions(actions: Any, space: spaces.Space) -> Any:
    """Float or bool actions for an integer space, cast to its dtype as EnvPool does.

    Values are truncated toward zero, as numpy's ``astype`` (and so EnvPool) does; NaN, infinity
    and values the dtype cannot hold are refused rather than wrapped.
    """
    if not isinstance(space, _CAST) or isinstance(actions, dict):
        return actions
    dtype = np.dtype(space.dtype)
    if dtype.kind not in "iu":
        return actions
    array = actions if isinstance(actions, np.ndarray) else np.asarray(actions)
    kind = array.dtype.kind
    if kind == "b":
        return array.astype(dtype)
    if kind != "f":
        return actions
    if array.size:
        if not np.isfinite(array).all():
            raise ValueError(f"actions: {space} needs finite values, got {array!r:.80}")
        limits = np.iinfo(dtype)
        low, high = array.min(), array.max()
        if low <= limits.min - 1 or high >= limits.max + 1:
            raise ValueError(f"actions: values {low}..{high} do not fit {space}'s dtype {dtype}")
    return array.astype(dtype)
