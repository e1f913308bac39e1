"""Small space and observation helpers shared by the SB3 wrappers (SB3's image heuristics)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from vecenv.sb3._errors import IndexValueError, TypeValueError


def is_image_space_channels_first(space: spaces.Box) -> bool:
    """SB3's heuristic: the channel axis is the smallest of the three (first => CxHxW)."""
    smallest = int(np.argmin(space.shape))
    if smallest == 1:
        warnings.warn(
            "Treating image space as channels-last, while second dimension was smallest of the "
            "three.",
            stacklevel=2,
        )
    return smallest == 0


def is_image_space(space: spaces.Space, check_channels: bool = False,
                   normalized_image: bool = False) -> bool:
    """True for a 3-d Box that looks like an image: uint8 in [0, 255] (unless ``normalized_image``)
    and, with ``check_channels``, 1, 3 or 4 channels."""
    if not isinstance(space, spaces.Box) or len(space.shape) != 3:
        return False
    if not normalized_image:
        if space.dtype != np.uint8:
            return False
        if np.any(space.low != 0) or np.any(space.high != 255):
            return False
    if not check_channels:
        return True
    channels = space.shape[0] if is_image_space_channels_first(space) else space.shape[-1]
    return channels in (1, 3, 4)


def copy_obs(obs: Any) -> Any:
    """Copy an observation (array, dict or tuple of arrays) so later writes cannot alias it."""
    if isinstance(obs, dict):
        return {key: copy_obs(value) for key, value in obs.items()}
    if isinstance(obs, tuple):
        return tuple(copy_obs(value) for value in obs)
    if isinstance(obs, np.ndarray):
        return obs.copy()
    return obs


def assign_rows(dst: Any, src: Any, mask: np.ndarray) -> None:
    """``dst[mask] = src[mask]`` leaf by leaf for batched array / dict / tuple observations."""
    if isinstance(dst, dict):
        for key in dst:
            assign_rows(dst[key], src[key], mask)
    elif isinstance(dst, tuple):
        for d, s in zip(dst, src, strict=True):
            assign_rows(d, s, mask)
    else:
        dst[mask] = src[mask]


def check_for_nested_spaces(space: spaces.Space) -> None:
    """SB3's rule for observation spaces: no Dict or Tuple inside a Dict or Tuple."""
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        subspaces = space.spaces.values() if isinstance(space, spaces.Dict) else space.spaces
        for sub in subspaces:
            if isinstance(sub, (spaces.Dict, spaces.Tuple)):
                raise NotImplementedError(
                    "Nested observation spaces are not supported (Tuple/Dict space inside "
                    f"Tuple/Dict space): {space}"
                )


class GymnasiumEnvFn:
    """An env_fn that refuses, in SB3's words, to build anything but a gymnasium Env.

    Module-level (and holding only ``fn``) so that it pickles for spawn/forkserver workers.
    """

    def __init__(self, fn: Callable[[], gym.Env]) -> None:
        self.fn = fn

    def __call__(self) -> gym.Env:
        env = self.fn()
        if not isinstance(env, gym.Env):
            raise ValueError(
                f"The environment is of type {type(env)}, not a Gymnasium environment. In this "
                "case, we expect OpenAI Gym to be installed and the environment to be an OpenAI "
                "Gym environment. (vecenv runs gymnasium envs only: wrap old gym envs with shimmy.)"
            )
        return env


# ------------------------------------------------------------------------ SB3 actions
_SEQUENCES = (list, tuple, np.ndarray)


def batch_actions(actions: Any, space: spaces.Space, n: int) -> Any:
    """SB3's actions (one per env: a batch array, a list of ints, arrays, dicts or tuples, nested
    lists) in gymnasium's batched layout, which vecenv's engine checks and stores.

    gymnasium's own layout (a dict of batches for a Dict space, a tuple of batches for a Tuple
    space) is taken as it is. Counts that are not ``n`` raise :class:`IndexValueError` (SB3's
    DummyVecEnv fails with an IndexError, its SubprocVecEnv with a ValueError).
    """
    if (
        type(actions) is np.ndarray
        and actions.ndim
        and len(actions) == n
        and space.shape is not None
    ):
        return actions  # the common case: a batch for a Box, Discrete, Multi* space
    if isinstance(actions, Mapping):
        return actions  # gymnasium's batched layout of a Dict space
    if (
        isinstance(space, spaces.Tuple)
        and isinstance(actions, tuple)
        and actions
        and all(isinstance(part, np.ndarray) for part in actions)
    ):
        return actions  # gymnasium's batched layout of a Tuple space
    scalar = (
        actions.ndim == 0 if isinstance(actions, np.ndarray) else not hasattr(actions, "__len__")
    )
    if scalar:
        raise TypeValueError(
            f"'{type(actions).__name__}' object is not subscriptable: step() takes one action per "
            f"env, a batch of {n}"
        )
    try:
        count = len(actions)
    except TypeError:
        return actions  # let the engine say what it expected
    if count != n:
        raise IndexValueError(
            f"index out of range: step() got {count} actions for {n} envs (one action per env)"
        )
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        return _stack(list(actions), space, "actions")
    return actions


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
