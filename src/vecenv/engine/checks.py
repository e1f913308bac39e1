"""Argument checks: every input is checked here, before anything is sent to a worker.

Each check names the argument, what was expected and what came, in the words gymnasium uses
for the same mistake where it has them.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.spaces.utils import is_space_dtype_shape_equiv
from gymnasium.vector.utils import batch_differing_spaces, batch_space

from vecenv.policy import FailureOptions, FailurePolicy
from vecenv.system import HAS_PROC

__all__ = [
    "check_timeout",
    "refuse_ended",
    "SpaceMismatchError",
    "batched_spaces",
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
        raise ValueError(f"{name}: expected an int >= 1, got {value!r} ({type(value).__name__})")
    if upper is not None and value > upper:  # type: ignore[operator]
        raise ValueError(f"{name}: expected at most num_envs={upper}, got {value}")
    return int(value)


def check_observation_mode(mode: Any) -> None:
    """``"same"``, ``"different"`` or a ``(batched, single)`` pair of spaces, as gymnasium takes it."""
    if isinstance(mode, tuple) and len(mode) == 2:
        if not all(isinstance(s, spaces.Space) for s in mode):
            raise TypeError(
                f"Expected both elements of observation_mode to be Spaces, got {type(mode[0])} and "
                f"{type(mode[1])}: the tuple is (batched observation space, single observation space)"
            )
    elif isinstance(mode, tuple) or not isinstance(mode, str) or mode not in ("same", "different"):
        raise ValueError(
            "Invalid `observation_mode`, expected: 'same' or 'different' or tuple of single and batch "
            f"observation space, actual got {mode}: observation_mode must be 'same' (every env has "
            "the same observation space), 'different' (spaces of one shape and dtype, bounds may "
            "differ) or a (batched observation space, single observation space) tuple"
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
                f"If seeds are passed as a list the length must match num_envs={n} but got "
                f"length={len(seeds)}. reset(seed=...) takes an int, or a list of one per env"
            )
        return seeds
    raise TypeError(f"reset(seed=...): expected None, an int or a list of {n} ints, got {seed!r}")


def check_timeout(timeout: Any, method: str) -> None:
    """A wait's ``timeout``: seconds (any real number) or None; a bool is refused, since
    ``recv(False)`` reads as a flag rather than a timeout of zero."""
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, numbers.Real)):
        raise TypeError(
            f"{method}(timeout=...): expected a number of seconds or None, got {timeout!r} "
            f"({type(timeout).__name__})"
        )


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


def check_env_ids(env_ids: Any, n: int, name: str = "env_ids") -> np.ndarray:
    """``env_ids`` as an int64 array of distinct indices below ``n`` (``name`` is what the
    caller calls the argument, for the messages)."""
    ids = np.asarray(env_ids)
    if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
        raise TypeError(f"{name}: expected a 1-D sequence of env indices, got {env_ids!r:.80}")
    ids = ids.astype(np.int64, copy=False)
    values = ids.tolist()  # plain Python: batches are small, and numpy's per-call cost dominates
    if values and (min(values) < 0 or max(values) >= n):
        raise ValueError(f"{name}: {[i for i in values if not 0 <= i < n]} out of range for num_envs={n}")
    if len(set(values)) != len(values):
        raise ValueError(f"{name}: each env may appear once, got {values}")
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


def batched_spaces(descriptions: Sequence[Any], observation_mode: Any, vector_class: type) -> tuple[spaces.Space, ...]:
    """The single and batched observation and action spaces of the envs ``descriptions``
    (``observation_mode`` as gymnasium's vector envs take it), checked to batch (:func:`check_spaces`)."""
    first, n = descriptions[0], len(descriptions)
    single_obs, single_act = first.observation_space, first.action_space
    act = batch_space(single_act, n)
    if isinstance(observation_mode, tuple):
        obs, single_obs = observation_mode
    elif observation_mode == "same":
        obs = batch_space(single_obs, n)
    else:
        obs = batch_differing_spaces([d.observation_space for d in descriptions])
    check_spaces(descriptions, observation_mode, single_obs, single_act, vector_class)
    return single_obs, obs, single_act, act


def check_spaces(descriptions: Sequence[Any], observation_mode: Any, single_obs: spaces.Space,
                 single_act: spaces.Space, vector_class: type | None = None) -> None:
    """Every env's spaces must batch with env 0's (equal, or for ``"different"`` of one shape).

    The message opens with the words of gymnasium's vector env for the same mistake: its
    ``AsyncVectorEnv``'s when ``vector_class`` (the vector env's class) sets ``gym_messages = "async"``,
    else its ``SyncVectorEnv``'s, with ``vector_class``'s name.
    """
    name = vector_class.__name__ if vector_class is not None else "VectorEnv"
    mimic_async = getattr(vector_class, "gym_messages", "sync") == "async"
    observations = [(i, True, d.observation_space) for i, d in enumerate(descriptions)]
    actions = [(i, False, d.action_space) for i, d in enumerate(descriptions)]
    # gymnasium's Sync checks env by env, its Async every observation space first
    order = observations + actions if mimic_async else [c for pair in zip(observations, actions, strict=True) for c in pair]
    for i, is_obs, space in order:
        if is_obs:
            _check_observation_space(i, space, observation_mode, single_obs, name, mimic_async)
        elif space != single_act:
            opening = (
                f"Some environments have an action space different from `{single_act}`. In order to "
                "batch actions, the action spaces from all environments must be equal."
                if mimic_async else
                f"Sub-environment action space doesn't make the `single_action_space`, "
                f"action_space={space}, single_action_space={single_act}."
            )
            raise SpaceMismatchError(
                f"{opening} (env {i}'s action space {space} differs from env 0's {single_act}; "
                "every env must have the same action space)"
            )


def _check_observation_space(i: int, space: spaces.Space, observation_mode: Any, single: spaces.Space,
                             name: str, mimic_async: bool) -> None:
    if observation_mode == "same":
        if space == single:
            return
        opening = (
            f"{name}(..., observation_mode='same') however some of the sub-environments observation "
            "spaces are not equivalent."
            if mimic_async else
            f"{name}(..., observation_mode='same') however the sub-environments observation spaces "
            f"are not equivalent. single_observation_space={single}, sub-environment "
            f"observation_space={space}."
        )
        raise SpaceMismatchError(
            f"{opening} If this is intentional, use `observation_mode='different'` instead. (env {i}'s "
            f"observation space {space} differs from env 0's {single}; 'different' batches spaces "
            "that share a shape and dtype, such as Boxes with other bounds)"
        )
    if not is_space_dtype_shape_equiv(space, single):
        opening = (
            f"{name}(..., observation_mode='different' or custom space) however the sub-environment's "
            "observation spaces do not share a common shape and dtype."
            if mimic_async else
            f"{name}(..., observation_mode='different' or custom space) however the sub-environments "
            f"observation spaces do not share a common shape and dtype, single_observation_space="
            f"{single}, sub-environment observation space={space}."
        )
        raise SpaceMismatchError(
            f"{opening} (env {i}'s observation space {space} does not share the shape and dtype of "
            f"{single}, so they cannot be batched)"
        )


def check_policy(failure: Mapping[str, Any], backend: str, can_end_workers: bool) -> FailurePolicy:
    """The failure policy from a backend's keywords; step_timeout only where workers can be ended."""
    unknown = set(failure) - set(FailureOptions.__annotations__)
    if unknown:
        raise TypeError(
            f"unexpected keyword argument(s) {sorted(unknown)}; the failure policy takes "
            f"{sorted(FailureOptions.__annotations__)}. An env's own keywords (max_episode_steps, "
            "render_mode, ...) go to gym.make inside each env_fn, or to vecenv.make(id, n, ...) "
            "directly or in env_kwargs={...}, which passes them to every env"
        )
    policy = FailurePolicy(**failure)
    if policy.step_timeout is not None and not can_end_workers:
        where = "threads of your process" if backend == "thread" else "your process"
        raise ValueError(
            f"step_timeout needs a backend that can end a stuck worker: backend='process' or "
            f"'ray'. The {backend} backend runs its envs in {where}, and a thread cannot be "
            "interrupted or killed, so a hung step could not be ended"
        )
    refuse_recycling(policy, backend)
    return policy


def refuse_recycling(policy: FailurePolicy, backend: str) -> None:
    """``max_episodes_per_env`` and ``max_worker_memory`` only where they can act: envs in
    worker processes (and Ray actors, for the first)."""
    asked = [f"{name}={getattr(policy, name)!r}" for name in ("max_episodes_per_env", "max_worker_memory")
             if getattr(policy, name) is not None and (backend in ("serial", "thread") or
                                                       (backend == "ray" and name == "max_worker_memory"))]
    if not asked:
        if policy.max_worker_memory is not None and not HAS_PROC:
            raise ValueError(
                f"max_worker_memory={policy.max_worker_memory!r}: a worker's memory is read from /proc "
                "(Linux), which this platform lacks; use max_episodes_per_env=N to rebuild leaking envs")
        return
    if backend == "ray":
        raise ValueError(
            f"{asked[0]} is not supported on the ray backend: vecenv does not read a Ray actor's "
            "memory; use backend='process', or Ray's own memory monitor (RAY_memory_usage_threshold)"
        )
    where = "threads of your process" if backend == "thread" else "your process"
    raise ValueError(
        f"{' and '.join(asked)} {'need' if len(asked) > 1 else 'needs'} env groups in worker processes: backend='process' (or 'ray', for "
        f"max_episodes_per_env). The {backend} backend runs its envs in {where}: there is no worker "
        "process to replace, and what an env leaks stays in your process's memory (the envs share "
        "it) even when the env is rebuilt"
    )


def refuse_ended(ended: np.ndarray) -> None:
    """Refuse to step the ``ended`` envs (DISABLED autoreset) until they are reset."""
    raise ValueError(
        f"envs {ended.tolist()} finished their episodes and autoreset_mode is DISABLED: reset them "
        "first with reset(options={'reset_mask': mask})"
    )
