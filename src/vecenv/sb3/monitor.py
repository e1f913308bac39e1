"""Episode statistics: :class:`VecMonitor` (vector level), :class:`Monitor` (per env, which
:func:`make_vec_env` applies) and :class:`ResultsWriter` (SB3's ``monitor.csv`` format). Both add
``info["episode"] = {"r": return, "l": length, "t": seconds since start}`` when an episode ends."""

from __future__ import annotations

import csv
import json
import os
import time
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from vecenv.sb3.base import VecEnv, VecEnvObs, VecEnvStepReturn, VecEnvWrapper
from vecenv.sb3.vec_envs import DummyVecEnv, GymnasiumEnvFn

MONITOR_EXT = "monitor.csv"


class ResultsWriter:
    """Writes episode rows to ``<filename>.monitor.csv`` (or ``<dir>/monitor.csv``), after a
    ``#{"t_start": ..., "env_id": ...}`` header line and the column names ``r,l,t,<extra keys>``."""

    def __init__(self, filename: str = "", header: dict[str, float | str] | None = None,
                 extra_keys: tuple[str, ...] = (), override_existing: bool = True) -> None:
        if not filename.endswith(MONITOR_EXT):
            if os.path.isdir(filename):
                filename = os.path.join(filename, MONITOR_EXT)
            else:
                filename = f"{filename}.{MONITOR_EXT}"
        filename = os.path.realpath(filename)
        os.makedirs(os.path.dirname(filename), exist_ok=True)
        self.filename = filename
        mode = "wt" if override_existing else "at"
        self.file_handler = open(filename, mode, newline="\n")  # noqa: SIM115
        self.logger = csv.DictWriter(self.file_handler, fieldnames=("r", "l", "t", *extra_keys))
        if override_existing:
            self.file_handler.write(f"#{json.dumps(header or {})}\n")
            self.logger.writeheader()
        self.file_handler.flush()

    def write_row(self, epinfo: dict[str, Any]) -> None:
        """Append one episode's row and flush, so the file is readable while training runs."""
        self.logger.writerow(epinfo)
        self.file_handler.flush()

    def close(self) -> None:
        self.file_handler.close()


class Monitor(gym.Wrapper):
    """Per-env episode statistics, as SB3's ``Monitor`` (which :func:`make_vec_env` applies).

    ``env_is_wrapped(stable_baselines3.common.monitor.Monitor)`` is true for this wrapper too.
    """

    EXT = MONITOR_EXT

    def __init__(self, env: gym.Env, filename: str | None = None, allow_early_resets: bool = True,
                 reset_keywords: tuple[str, ...] = (), info_keywords: tuple[str, ...] = (),
                 override_existing: bool = True) -> None:
        super().__init__(env)
        self.t_start = time.time()
        self.results_writer: ResultsWriter | None = None
        if filename is not None:
            env_id = str(env.spec.id if env.spec is not None else None)
            header: dict[str, float | str] = {"t_start": self.t_start, "env_id": env_id}
            extra = reset_keywords + info_keywords
            self.results_writer = ResultsWriter(filename, header, extra, override_existing)
        self.reset_keywords = reset_keywords
        self.info_keywords = info_keywords
        self.allow_early_resets = allow_early_resets
        self.rewards: list[float] = []
        self.needs_reset = True
        self.episode_returns: list[float] = []
        self.episode_lengths: list[int] = []
        self.episode_times: list[float] = []
        self.total_steps = 0
        self.current_reset_info: dict[str, Any] = {}

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        if not self.allow_early_resets and not self.needs_reset:
            raise RuntimeError(
                "Tried to reset an environment before done. If you want to allow early resets, "
                "wrap your env with Monitor(env, path, allow_early_resets=True)"
            )
        self.rewards = []
        self.needs_reset = False
        for key in self.reset_keywords:
            value = kwargs.get(key)
            if value is None:
                raise ValueError(f"Expected you to pass keyword argument {key} into reset")
            self.current_reset_info[key] = value
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        if self.needs_reset:
            raise RuntimeError("Tried to step environment that needs reset")
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.rewards.append(float(reward))
        if terminated or truncated:
            self.needs_reset = True
            ep_return = sum(self.rewards)
            ep_length = len(self.rewards)
            elapsed = time.time() - self.t_start
            ep_info = {"r": round(ep_return, 6), "l": ep_length, "t": round(elapsed, 6)}
            for key in self.info_keywords:
                ep_info[key] = info[key]
            ep_info.update(self.current_reset_info)
            self.episode_returns.append(ep_return)
            self.episode_lengths.append(ep_length)
            self.episode_times.append(elapsed)
            if self.results_writer is not None:
                self.results_writer.write_row(ep_info)
            info["episode"] = ep_info
        self.total_steps += 1
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        super().close()
        if self.results_writer is not None:
            self.results_writer.close()

    def get_total_steps(self) -> int:
        return self.total_steps

    def get_episode_rewards(self) -> list[float]:
        return self.episode_returns

    def get_episode_lengths(self) -> list[int]:
        return self.episode_lengths

    def get_episode_times(self) -> list[float]:
        return self.episode_times


class VecMonitor(VecEnvWrapper):
    """Episode return, length and time for every env of a VecEnv, as SB3's ``VecMonitor``.

    :param filename: where to write the ``monitor.csv`` log (None: no file)
    :param info_keywords: step-info keys copied into each episode record
    """

    def __init__(self, venv: VecEnv, filename: str | None = None,
                 info_keywords: tuple[str, ...] = ()) -> None:
        try:
            already = bool(venv.env_is_wrapped(Monitor)[0])
        except (AttributeError, NotImplementedError):
            already = False
        if already:
            warnings.warn(
                "The environment is already wrapped with a `Monitor` wrapper but you are wrapping "
                "it with a `VecMonitor` wrapper, the `Monitor` statistics will be overwritten by "
                "the `VecMonitor` ones.",
                UserWarning,
                stacklevel=2,
            )
        VecEnvWrapper.__init__(self, venv)
        self.episode_count = 0
        self.t_start = time.time()
        try:
            spec = getattr(venv, "spec", None)
        except Exception:  # noqa: BLE001 - a failing attribute lookup must not break construction
            spec = None
        env_id = str(spec.id if spec is not None else None)
        header: dict[str, float | str] = {"t_start": self.t_start, "env_id": env_id}
        self.results_writer = ResultsWriter(filename, header, info_keywords) if filename else None
        self.info_keywords = info_keywords
        self.episode_returns = np.zeros(self.num_envs, dtype=np.float32)
        self.episode_lengths = np.zeros(self.num_envs, dtype=np.int32)

    def reset(self) -> VecEnvObs:
        obs = self.venv.reset()
        self.episode_returns = np.zeros(self.num_envs, dtype=np.float32)
        self.episode_lengths = np.zeros(self.num_envs, dtype=np.int32)
        return obs

    def step_wait(self) -> VecEnvStepReturn:
        obs, rewards, dones, infos = self.venv.step_wait()
        self.episode_returns += rewards
        self.episode_lengths += 1
        new_infos = list(infos)
        for i in np.flatnonzero(dones):
            info = dict(infos[i])
            elapsed = round(time.time() - self.t_start, 6)
            episode = {"r": self.episode_returns[i], "l": self.episode_lengths[i], "t": elapsed}
            for key in self.info_keywords:
                episode[key] = info[key]
            info["episode"] = episode
            self.episode_count += 1
            self.episode_returns[i] = 0
            self.episode_lengths[i] = 0
            if self.results_writer is not None:
                self.results_writer.write_row(episode)
            new_infos[i] = info
        return obs, rewards, dones, new_infos

    def close(self) -> None:
        if self.results_writer is not None:
            self.results_writer.close()
        return self.venv.close()


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
    env_kwargs = env_kwargs or {}

    def make_env(rank: int) -> gym.Env:
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
        env = Monitor(env, filename=monitor_path, **(monitor_kwargs or {}))
        if wrapper_class is not None:
            env = wrapper_class(env, **(wrapper_kwargs or {}))
        return env

    ranks = range(start_index, start_index + n_envs)
    env_fns: list[Callable[[], gym.Env]] = [partial(make_env, rank) for rank in ranks]
    vec_env = (vec_env_cls or DummyVecEnv)(env_fns, **(vec_env_kwargs or {}))
    vec_env.seed(seed)
    return vec_env
