"""Catch NaN and inf at their source: :class:`VecCheckNan`."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from gymnasium import spaces

from vecenv.sb3.base import VecEnv, VecEnvObs, VecEnvStepReturn, VecEnvWrapper


class VecCheckNan(VecEnvWrapper):
    """Check actions, observations and rewards for NaN (and inf) and report where they came from:
    the model (bad actions) or the environment (bad observations/rewards).

    :param raise_exception: raise ``ValueError`` instead of warning
    :param warn_once: stop checking after the first warning (ignored when raising)
    :param check_inf: also look for +inf/-inf
    """

    def __init__(self, venv: VecEnv, raise_exception: bool = False, warn_once: bool = True,
                 check_inf: bool = True) -> None:
        super().__init__(venv)
        if isinstance(venv.action_space, spaces.Dict):
            raise NotImplementedError("VecCheckNan doesn't support dict action spaces")
        self.raise_exception = raise_exception
        self.warn_once = warn_once
        self.check_inf = check_inf
        self._user_warned = False
        self._actions: Any = None
        self._observations: Any = None

    def step_async(self, actions: np.ndarray) -> None:
        self._check_val(event="step_async", actions=actions)
        self._actions = actions
        self.venv.step_async(actions)

    def step_wait(self) -> VecEnvStepReturn:
        observations, rewards, dones, infos = self.venv.step_wait()
        self._check_val(event="step_wait", observations=observations, rewards=rewards, dones=dones)
        self._observations = observations
        return observations, rewards, dones, infos

    def reset(self) -> VecEnvObs:
        observations = self.venv.reset()
        self._check_val(event="reset", observations=observations)
        self._observations = observations
        return observations

    def check_array_value(self, name: str, value: np.ndarray) -> list[tuple[str, str]]:
        """``[(name, "inf"), (name, "nan")]`` for whichever problems ``value`` has."""
        value = np.asarray(value)
        if not (
            np.issubdtype(value.dtype, np.floating)
            or np.issubdtype(value.dtype, np.complexfloating)
        ):
            return []  # integers and booleans cannot hold NaN or inf
        found = []
        if self.check_inf and np.isinf(value).any():
            found.append((name, "inf"))
        if np.isnan(value).any():
            found.append((name, "nan"))
        return found

    def _check_val(self, event: str, **values: Any) -> None:
        if not self.raise_exception and self.warn_once and self._user_warned:
            return
        found: list[tuple[str, str]] = []
        for name, value in values.items():
            if isinstance(value, (np.ndarray, list, np.generic, float)):
                found += self.check_array_value(name, np.asarray(value))
            elif isinstance(value, dict):
                for key, inner in value.items():
                    found += self.check_array_value(f"{name}.{key}", inner)
            elif isinstance(value, tuple):
                for idx, inner in enumerate(value):
                    found += self.check_array_value(f"{name}.{idx}", inner)
            else:
                raise TypeError(f"Unsupported observation type {type(value)}.")
        if not found:
            return
        self._user_warned = True
        problems = ", ".join(f"found {kind} in {name}" for name, kind in found)
        if event == "reset":
            origin = "environment observation (at reset)"
        elif event == "step_wait":
            origin = f"environment, Last given value was: \r\n\taction={self._actions}"
        else:
            origin = f"RL model, Last given value was: \r\n\tobservations={self._observations}"
        message = f"{problems}.\r\nOriginated from the {origin}"
        if self.raise_exception:
            raise ValueError(message)
        warnings.warn(message, UserWarning, stacklevel=3)
