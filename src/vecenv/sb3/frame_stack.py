"""Frame stacking: :class:`StackedObservations` (the buffer logic) and :class:`VecFrameStack`."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces

from vecenv.sb3._errors import AssertionTypeError, AssertionValueError
from vecenv.sb3._spaces import is_image_space, is_image_space_channels_first
from vecenv.sb3.base import VecEnv, VecEnvObs, VecEnvStepReturn, VecEnvWrapper


class StackedObservations:
    """Keeps the last ``n_stack`` observations of each env concatenated along the channel axis.

    ``channels_order`` is "first" or "last"; None detects it for images (SB3's heuristic) and
    uses "last" otherwise. For a Dict space it may be a mapping from key to order. Every
    returned batch is a new array, so earlier results are never modified in place.
    """

    def __init__(self, num_envs: int, n_stack: int, observation_space: spaces.Box | spaces.Dict,
                 channels_order: str | Mapping[str, str | None] | None = None) -> None:
        self.n_stack = n_stack
        self.observation_space = observation_space
        self.stacked_observation_space: spaces.Box | spaces.Dict
        if isinstance(observation_space, spaces.Dict):
            if not isinstance(channels_order, Mapping):
                channels_order = {key: channels_order for key in observation_space.spaces}
            self.sub_stacked_observations = {
                key: StackedObservations(
                    num_envs,
                    n_stack,
                    subspace,  # type: ignore[arg-type]
                    channels_order[key],  # type: ignore[arg-type]
                )
                for key, subspace in observation_space.spaces.items()
            }
            self.stacked_observation_space = spaces.Dict(
                {
                    key: sub.stacked_observation_space
                    for key, sub in self.sub_stacked_observations.items()
                }
            )
            return
        if not isinstance(observation_space, spaces.Box):
            raise TypeError(
                "StackedObservations only supports Box and Dict as observation spaces. "
                f"{observation_space} was provided."
            )
        if isinstance(channels_order, Mapping):
            raise TypeError("When the observation space is Box, channels_order can't be a dict.")
        (self.channels_first, self.stack_dimension, self.stacked_shape, self.repeat_axis) = (
            self.compute_stacking(n_stack, observation_space, channels_order)
        )
        self.stacked_observation_space = spaces.Box(
            low=np.repeat(observation_space.low, n_stack, axis=self.repeat_axis),
            high=np.repeat(observation_space.high, n_stack, axis=self.repeat_axis),
            dtype=observation_space.dtype,  # type: ignore[arg-type]
        )
        self.stacked_obs = np.zeros((num_envs, *self.stacked_shape), dtype=observation_space.dtype)

    @staticmethod
    def compute_stacking(
        n_stack: int, observation_space: spaces.Box, channels_order: str | None = None
    ) -> tuple[bool, int, tuple[int, ...], int]:
        """Return ``(channels_first, stack axis incl. env axis, stacked shape, repeat axis)``."""
        if channels_order is None:
            channels_first = is_image_space(observation_space) and is_image_space_channels_first(
                observation_space  # type: ignore[arg-type]
            )
        elif channels_order in ("first", "last"):
            channels_first = channels_order == "first"
        else:
            raise AssertionValueError(
                "`channels_order` must be one of following: 'last', 'first' "
                f"(got {channels_order!r})"
            )
        repeat_axis = 0 if channels_first else -1
        shape = list(observation_space.shape)
        shape[repeat_axis] *= n_stack
        return channels_first, (1 if channels_first else -1), tuple(shape), repeat_axis

    def _newest(self, stack: np.ndarray, width: int) -> np.ndarray:
        """View of the newest ``width`` channels of a batched stack."""
        return stack[:, -width:] if self.channels_first else stack[..., -width:]

    def reset(self, observation: Any) -> Any:
        """Start every stack afresh: zeros, then the reset observation in the newest slot."""
        if isinstance(observation, dict):
            return {
                key: self.sub_stacked_observations[key].reset(obs)
                for key, obs in observation.items()
            }
        stack = np.zeros_like(self.stacked_obs)
        self._newest(stack, observation.shape[self.stack_dimension])[...] = observation
        self.stacked_obs = stack
        return stack

    def update(self, observations: Any, dones: np.ndarray,
               infos: list[dict[str, Any]]) -> tuple[Any, list[dict[str, Any]]]:
        """Push a step's observations; envs that are done get a fresh stack, and their
        ``terminal_observation`` becomes the stacked last frames of the finished episode."""
        if isinstance(observations, dict):
            stacked = {}
            for key, obs in observations.items():
                key_infos = [
                    {"terminal_observation": info["terminal_observation"][key]}
                    if "terminal_observation" in info
                    else {}
                    for info in infos
                ]
                stacked[key], key_infos = self.sub_stacked_observations[key].update(
                    obs, dones, key_infos
                )
                for info, key_info in zip(infos, key_infos, strict=True):
                    if "terminal_observation" in info:
                        info["terminal_observation"] = {
                            **info["terminal_observation"],
                            key: key_info["terminal_observation"],
                        }
            return stacked, infos

        width = observations.shape[self.stack_dimension]
        # Drop the oldest frame: shift every stack towards the front by one frame.
        stack = np.roll(self.stacked_obs, -width, axis=self.stack_dimension)
        for i in np.flatnonzero(dones):
            info = infos[i]
            if "terminal_observation" in info:
                older = stack[i, :-width] if self.channels_first else stack[i, ..., :-width]
                info["terminal_observation"] = np.concatenate(
                    (older, info["terminal_observation"]), axis=self.repeat_axis
                )
            else:
                warnings.warn(
                    "VecFrameStack wrapping a VecEnv without terminal_observation info",
                    stacklevel=2,
                )
            stack[i] = 0
        self._newest(stack, width)[...] = observations
        self.stacked_obs = stack  # a new array each call: earlier results stay intact
        return stack, infos


class VecFrameStack(VecEnvWrapper):
    """Stack the last ``n_stack`` observations of each env (Box or Dict observation spaces).

    ``channels_order``: "first", "last", None (detect for images, else "last"), or a mapping per
    key for Dict spaces.
    """

    def __init__(self, venv: VecEnv, n_stack: int,
                 channels_order: str | Mapping[str, str] | None = None) -> None:
        if not isinstance(venv.observation_space, (spaces.Box, spaces.Dict)):
            raise AssertionTypeError(
                "VecFrameStack only works with gym.spaces.Box and gym.spaces.Dict observation "
                f"spaces, not {venv.observation_space}"
            )
        self.stacked_obs = StackedObservations(
            venv.num_envs,
            n_stack,
            venv.observation_space,
            channels_order,  # type: ignore[arg-type]
        )
        super().__init__(venv, observation_space=self.stacked_obs.stacked_observation_space)

    def step_wait(self) -> VecEnvStepReturn:
        observations, rewards, dones, infos = self.venv.step_wait()
        observations, infos = self.stacked_obs.update(observations, dones, infos)
        return observations, rewards, dones, infos

    def reset(self) -> VecEnvObs:
        return self.stacked_obs.reset(self.venv.reset())
