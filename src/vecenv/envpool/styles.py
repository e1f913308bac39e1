"""EnvPool's two return conventions (docs/envpool.md has the table): ``env_type="gymnasium"`` and
``env_type="gym"``, which speaks the ``gym`` package's spaces and API where it is installed.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import re
import warnings
from types import ModuleType
from typing import Any

import gymnasium
import numpy as np

from vecenv.envpool.pool import EnvPool


def old_gym() -> ModuleType | None:
    """The ``gym`` package where it is installed (EnvPool's ``env_type="gym"`` speaks it), else None."""
    if importlib.util.find_spec("gym") is None:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gym's notice that it is unmaintained
        return importlib.import_module("gym")


def to_gym_space(space: gymnasium.Space, gym: ModuleType) -> Any:
    """``space`` as the ``gym`` package's space of the same kind (Box, Discrete, MultiDiscrete,
    MultiBinary, Dict, Tuple); any other space is returned as it is."""
    spaces = gym.spaces
    if isinstance(space, gymnasium.spaces.Box):
        return spaces.Box(low=space.low, high=space.high, dtype=space.dtype)
    if isinstance(space, gymnasium.spaces.Discrete):
        start = int(space.start)
        return spaces.Discrete(int(space.n), start=start) if start else spaces.Discrete(int(space.n))
    if isinstance(space, gymnasium.spaces.MultiDiscrete):
        return spaces.MultiDiscrete(space.nvec, dtype=space.dtype)
    if isinstance(space, gymnasium.spaces.MultiBinary):
        return spaces.MultiBinary(space.n)
    if isinstance(space, gymnasium.spaces.Dict):
        return spaces.Dict({key: to_gym_space(sub, gym) for key, sub in space.spaces.items()})
    if isinstance(space, gymnasium.spaces.Tuple):
        return spaces.Tuple([to_gym_space(sub, gym) for sub in space.spaces])
    return copy.deepcopy(space)


class GymnasiumEnvPool(EnvPool):
    """An :class:`EnvPool` returning gymnasium's tuples (``env_type="gymnasium"``)."""

    env_type = "gymnasium"

    @classmethod
    def spaces(cls, observation_space: gymnasium.Space, action_space: gymnasium.Space) -> tuple[Any, Any]:
        """One env's spaces as the pool shows them (copies: callers may edit them)."""
        return copy.deepcopy(observation_space), copy.deepcopy(action_space)

    def _to(self, obs: Any, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
            infos: dict[str, Any], reset: bool, return_info: bool) -> Any:
        return (obs, infos) if reset else (obs, rewards, terminated, truncated, infos)


class GymEnvPool(GymnasiumEnvPool):
    """An :class:`EnvPool` for ``env_type="gym"``: the ``gym`` package's spaces and API where it
    is installed (gym 0.26's tuples for gym >= 0.26), else old gym's tuples (``done`` and
    ``info["TimeLimit.truncated"]`` in place of ``terminated`` / ``truncated``)."""

    env_type = "gym"

    @classmethod
    def spaces(cls, observation_space: gymnasium.Space, action_space: gymnasium.Space) -> tuple[Any, Any]:
        """The ``gym`` package's spaces where it is installed, as EnvPool's are."""
        gym = old_gym()
        if gym is None:
            return super().spaces(observation_space, action_space)
        return to_gym_space(observation_space, gym), to_gym_space(action_space, gym)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        gym = old_gym()  # 0.26 or newer: terminated/truncated steps, reset() -> (obs, info)
        self._new_api = gym is not None and tuple(
            int(part) for part in re.findall(r"\d+", gym.__version__)[:2]) >= (0, 26)

    def _to(self, obs: Any, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
            infos: dict[str, Any], reset: bool, return_info: bool) -> Any:
        if self._new_api:
            return super()._to(obs, rewards, terminated, truncated, infos, reset, return_info)
        if reset and not return_info:
            return obs
        infos["TimeLimit.truncated"] = truncated & ~terminated
        return (obs, infos) if reset else (obs, rewards, terminated | truncated, infos)
