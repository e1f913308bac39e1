"""Argument checks: every input is checked here, before anything is sent to a worker.

Each check names the argument, what was expected and what came, in the words gymnasium uses
for the same mistake where it has them.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.spaces.utils import is_space_dtype_shape_equiv

from vecenv.policy import FailureOptions, FailurePolicy

__all__ = [
    "SpaceMismatchError",
    "check_spaces",
    "check_values",
    "check_count",
    "check_env_fns",
    "check_env_ids",
    "check_name",
    "check_observation_mode",
    "check_options",
    "check_policy",
    "check_reset_mask",
    "check_seeds",
]


def check_env_fns(env_fns: Any) -> list[Callable[[], gym.Env]]:
    if callable(env_fns) or isinstance(env_fns, (str, bytes)):
        raise TypeError("env_fns: expected a list of callables that each return an env, got a single "
                        f"{type(env_fns).__name__}; use vecenv.make(env, num_envs) for one env id or factory")
    try:
        fns = list(env_fns)
    except TypeError:
        raise TypeError(f"env_fns: expected a list of callables, got {type(env_fns).__name__}") from None
    if not fns:
        raise ValueError("env_fns: need at least one env (num_envs must be >= 1), got an empty list")
    for i, fn in enumerate(fns):
        if not callable(fn):
            raise TypeError(f"env_fns[{i}]: expected a callable that returns an env, got {fn!r}")
    return fns


def check_count(name: str, value: Any, upper: int | None) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
    if upper is not None and value > upper:
        raise ValueError(f"{name}: expected at most num_envs={upper}, got {value}")
    return int(value)


def check_observation_mode(mode: Any) -> None:
    if isinstance(mode, tuple):
        if len(mode) != 2 or not all(isinstance(s, spaces.Space) for s in mode):
            raise TypeError(
                "observation_mode: a tuple must be (batched observation space, single observation space)"
            )
    elif mode not in ("same", "different"):
        raise ValueError(
            f"observation_mode: expected 'same', 'different' or a (batched, single) tuple of spaces, got {mode!r}"
        )


def check_seeds(seed: Any, n: int) -> list[int | None]:
    """One seed per env: ``seed + i`` for an int, the list itself for a list of ``n``."""
    if seed is None:
        return [None] * n
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        return [int(seed) + i for i in range(n)]
    if isinstance(seed, (list, tuple, np.ndarray)):
        seeds = list(seed)
        if len(seeds) != n:
            raise ValueError(
                f"reset(seed=...): a list of seeds must have one per env (num_envs={n}), got {len(seeds)}"
            )
        return seeds
    raise TypeError(f"reset(seed=...): expected None, an int or a list of {n} ints, got {seed!r}")


def check_options(options: Any) -> None:
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"reset(options=...): options must be a dict or None, got {type(options).__name__} ({options!r:.60})")


def check_reset_mask(mask: Any, n: int) -> None:
    if not isinstance(mask, np.ndarray):
        raise TypeError(f"`options['reset_mask']` must be a numpy array, got {type(mask)}")
    if mask.shape != (n,):
        raise ValueError(f"`options['reset_mask']` must have shape `({n},)`, got {mask.shape}")
    if mask.dtype != np.bool_:
        raise TypeError(f"`options['reset_mask']` must have `dtype=np.bool_`, got {mask.dtype}")
    if not mask.any():
        raise ValueError(
            f"`options['reset_mask']` must contain a boolean array with at least one True value, got reset_mask={mask}"
        )


def check_env_ids(env_ids: Any, n: int, unique: bool = True) -> np.ndarray:
    """``env_ids`` as an int64 array of distinct indices below ``n``."""
    ids = np.asarray(env_ids)
    if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
        raise TypeError(f"env_ids: expected a 1-D sequence of env indices, got {env_ids!r}")
    ids = ids.astype(np.int64, copy=False)
    bad = ids[(ids < 0) | (ids >= n)]
    if bad.size:
        raise ValueError(f"env_ids: {bad.tolist()} out of range for num_envs={n}")
    if unique and len(set(ids.tolist())) != ids.size:
        raise ValueError(f"env_ids: each env may appear once, got {ids.tolist()}")
    return ids


def check_name(name: Any) -> None:
    if not isinstance(name, str):
        raise TypeError(f"expected an attribute or method name (str), got {name!r}")


def check_values(values: Sequence[Any], count: int) -> list[Any]:
    values = list(values)
    if len(values) != count:
        raise ValueError(f"set_attr_at: got {len(values)} values for {count} envs")
    return values


class SpaceMismatchError(ValueError, RuntimeError):
    """The env_fns built envs whose spaces cannot be batched together.

    A ``RuntimeError`` too, as gymnasium raises one for the same mistake.
    """


def check_spaces(descriptions: Sequence[Any], observation_mode: Any, single_obs: spaces.Space,
                 single_act: spaces.Space) -> None:
    """Every env's spaces must batch with env 0's (equal, or for ``"different"`` of one shape)."""
    for i, d in enumerate(descriptions):
        if observation_mode == "same":
            if d.observation_space != single_obs:
                raise SpaceMismatchError(
                    f"env {i}'s observation space {d.observation_space} differs from env 0's "
                    f"{single_obs}; with observation_mode='same' every env "
                    "must have the same observation space (use observation_mode='different' "
                    "when only the bounds differ)"
                )
        elif not is_space_dtype_shape_equiv(d.observation_space, single_obs):
            raise SpaceMismatchError(
                f"env {i}'s observation space {d.observation_space} does not share the shape "
                f"and dtype of {single_obs}, so they cannot be batched"
            )
        if d.action_space != single_act:
            raise SpaceMismatchError(
                f"env {i}'s action space {d.action_space} differs from env 0's "
                f"{single_act}; every env must have the same action space"
            )


def check_policy(failure: dict[str, Any], backend: str, can_end_workers: bool) -> FailurePolicy:
    """The failure policy from a backend's keywords; step_timeout only where workers can be ended."""
    unknown = set(failure) - set(FailureOptions.__annotations__)
    if unknown:
        raise TypeError(
            f"unexpected keyword argument(s) {sorted(unknown)}; the failure policy takes "
            f"{sorted(FailureOptions.__annotations__)}"
        )
    policy = FailurePolicy(**failure)
    if policy.step_timeout is not None and not can_end_workers:
        where = "threads of your process" if backend == "thread" else "your process"
        raise ValueError(
            f"step_timeout needs a backend that can end a stuck worker: backend='process' or "
            f"'ray'. The {backend} backend runs its envs in {where}, and a thread cannot be "
            "interrupted or killed, so a hung step could not be ended"
        )
    return policy
