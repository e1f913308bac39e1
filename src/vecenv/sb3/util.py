"""Helpers from SB3's ``env_util`` and ``vec_env``: :func:`make_vec_env`, wrapper look-ups and
:func:`sync_envs_normalization`."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from typing import Any, TypeVar

import gymnasium as gym

from vecenv.sb3._errors import AssertionValueError
from vecenv.sb3._spaces import GymnasiumEnvFn
from vecenv.sb3.base import VecEnv, VecEnvWrapper
from vecenv.sb3.monitor import Monitor
from vecenv.sb3.normalize import VecNormalize
from vecenv.sb3.vec_envs import DummyVecEnv

W = TypeVar("W")


def unwrap_vec_wrapper(env: VecEnv, vec_wrapper_class: type[W]) -> W | None:
    """The first :class:`VecEnvWrapper` of type ``vec_wrapper_class`` around ``env``, or None."""
    while env is not None:
        if isinstance(env, vec_wrapper_class):
            return env
        env = getattr(env, "venv", None) if _is_vec_wrapper(env) else None  # type: ignore[assignment]
    return None


def _is_vec_wrapper(env: Any) -> bool:
    # Our wrappers, and SB3's (which have ``venv`` and ``getattr_recursive``) when mixed in.
    return isinstance(env, VecEnvWrapper) or (
        "venv" in getattr(env, "__dict__", {}) and hasattr(type(env), "getattr_recursive")
    )


def unwrap_vec_normalize(env: VecEnv) -> VecNormalize | None:
    """The :class:`VecNormalize` around ``env``, if any."""
    return unwrap_vec_wrapper(env, VecNormalize)


def is_vecenv_wrapped(env: VecEnv, vec_wrapper_class: type[VecEnvWrapper]) -> bool:
    """Whether ``env`` is (somewhere) wrapped in ``vec_wrapper_class``."""
    return unwrap_vec_wrapper(env, vec_wrapper_class) is not None


def sync_envs_normalization(env: VecEnv, eval_env: VecEnv) -> None:
    """Copy the VecNormalize statistics of a training env to an identically wrapped eval env."""
    train, evaluate = env, eval_env
    while _is_vec_wrapper(train):
        if not _is_vec_wrapper(evaluate):
            raise AssertionValueError(
                "Error while synchronizing normalization stats: expected the eval env to be a "
                f"VecEnvWrapper but got {evaluate} instead. This is probably due to the training "
                "env not being wrapped the same way as the evaluation env. Training env type: "
                f"{train}."
            )
        if isinstance(train, VecNormalize):
            if not isinstance(evaluate, VecNormalize):
                raise AssertionValueError(
                    "Error while synchronizing normalization stats: expected the eval env to be a "
                    f"VecNormalize but got {evaluate} instead. This is probably due to the "
                    "training env not being wrapped the same way as the evaluation env. Training "
                    f"env type: {train}."
                )
            if hasattr(train, "obs_rms"):
                evaluate.obs_rms = copy.deepcopy(train.obs_rms)
            evaluate.ret_rms = copy.deepcopy(train.ret_rms)
        train, evaluate = train.venv, evaluate.venv  # type: ignore[attr-defined]


def make_vec_env(env_id: str | Callable[..., gym.Env], n_envs: int = 1, seed: int | None = None,
                 start_index: int = 0, monitor_dir: str | None = None,
                 wrapper_class: Callable[..., gym.Env] | None = None,
                 env_kwargs: dict[str, Any] | None = None,
                 vec_env_cls: Callable[..., VecEnv] | None = None,
                 vec_env_kwargs: dict[str, Any] | None = None,
                 monitor_kwargs: dict[str, Any] | None = None,
                 wrapper_kwargs: dict[str, Any] | None = None) -> VecEnv:
    """Create ``n_envs`` monitored envs in a VecEnv (default :class:`DummyVecEnv`), as SB3's.

    Each env is made from ``env_id`` (a registered id, made with ``render_mode="rgb_array"``
    when the env accepts it, or a callable taking ``env_kwargs``), wrapped in :class:`Monitor`
    (logging to ``monitor_dir/<rank>.monitor.csv`` if given), then in ``wrapper_class``.
    ``seed`` seeds env ``rank``'s action space with ``seed + rank`` now and its first reset
    with ``seed + i`` (``vec_env.seed(seed)``).
    """
    env_kwargs = dict(env_kwargs or {})
    vec_env_kwargs = dict(vec_env_kwargs or {})
    monitor_kwargs = dict(monitor_kwargs or {})
    wrapper_kwargs = dict(wrapper_kwargs or {})

    def make_env(rank: int) -> Callable[[], gym.Env]:
        def _init() -> gym.Env:
            if isinstance(env_id, str):
                try:
                    env = gym.make(env_id, **{"render_mode": "rgb_array", **env_kwargs})
                except TypeError:  # the env takes no render_mode
                    env = gym.make(env_id, **env_kwargs)
            else:
                env = GymnasiumEnvFn(lambda: env_id(**env_kwargs))()
            if seed is not None:
                env.action_space.seed(seed + rank)  # the env itself is seeded at the first reset
            monitor_path = None
            if monitor_dir is not None:
                os.makedirs(monitor_dir, exist_ok=True)
                monitor_path = os.path.join(monitor_dir, str(rank))
            env = Monitor(env, filename=monitor_path, **monitor_kwargs)
            if wrapper_class is not None:
                env = wrapper_class(env, **wrapper_kwargs)
            return env

        return _init

    cls = vec_env_cls or DummyVecEnv
    vec_env = cls([make_env(start_index + i) for i in range(n_envs)], **vec_env_kwargs)
    vec_env.seed(seed)
    return vec_env
