"""Channels-last images to channels-first, for PyTorch convolutions: :class:`VecTransposeImage`."""

from __future__ import annotations

import copy

import numpy as np
from gymnasium import spaces

from vecenv.sb3._errors import AssertionValueError
from vecenv.sb3._spaces import is_image_space, is_image_space_channels_first
from vecenv.sb3.base import VecEnv, VecEnvObs, VecEnvStepReturn, VecEnvWrapper


class VecTransposeImage(VecEnvWrapper):
    """Reorder HxWxC image observations (and image entries of Dict observations) to CxHxW.

    :param skip: pass observations through unchanged (SB3 applies this wrapper by heuristic;
        ``skip`` turns it off where the heuristic is wrong)
    """

    def __init__(self, venv: VecEnv, skip: bool = False) -> None:
        space = venv.observation_space
        if not (is_image_space(space) or isinstance(space, spaces.Dict)):
            raise AssertionValueError(
                "The observation space must be an image or dictionary observation space, "
                f"not {space}"
            )
        self.skip = skip
        if skip:
            super().__init__(venv)
            return
        if isinstance(space, spaces.Dict):
            self.image_space_keys: list[str] = []
            new_space = copy.deepcopy(space)
            for key, sub in new_space.spaces.items():
                if is_image_space(sub):
                    self.image_space_keys.append(key)
                    new_space.spaces[key] = self.transpose_space(sub, key)  # type: ignore[arg-type]
            super().__init__(venv, observation_space=new_space)
        else:
            transposed = self.transpose_space(space)  # type: ignore[arg-type]
            super().__init__(venv, observation_space=transposed)

    @staticmethod
    def transpose_space(observation_space: spaces.Box, key: str = "") -> spaces.Box:
        """The CxHxW space of a channels-last image space."""
        if not is_image_space(observation_space):
            raise AssertionValueError(
                "The observation space must be an image (uint8 HxWxC in [0, 255]), "
                f"not {observation_space}"
            )
        if is_image_space_channels_first(observation_space):
            raise AssertionValueError(
                f"The observation space {key} must follow the channel last convention (HxWxC), "
                f"not {observation_space}"
            )
        height, width, channels = observation_space.shape
        dtype = observation_space.dtype
        return spaces.Box(0, 255, (channels, height, width), dtype)  # type: ignore[arg-type]

    @staticmethod
    def transpose_image(image: np.ndarray) -> np.ndarray:
        """HxWxC -> CxHxW for one image, NxHxWxC -> NxCxHxW for a batch."""
        if image.ndim == 3:
            return np.transpose(image, (2, 0, 1))
        return np.transpose(image, (0, 3, 1, 2))

    def transpose_observations(self, observations: VecEnvObs) -> VecEnvObs:
        """Transpose the image parts of ``observations`` (a new dict for Dict observations)."""
        if self.skip:
            return observations
        if isinstance(observations, dict):
            out = dict(observations)
            for key in self.image_space_keys:
                out[key] = self.transpose_image(out[key])
            return out
        return self.transpose_image(observations)  # type: ignore[arg-type]

    def step_wait(self) -> VecEnvStepReturn:
        observations, rewards, dones, infos = self.venv.step_wait()
        for i in np.flatnonzero(dones):
            if "terminal_observation" in infos[i]:
                infos[i]["terminal_observation"] = self.transpose_observations(
                    infos[i]["terminal_observation"]
                )
        return self.transpose_observations(observations), rewards, dones, infos

    def reset(self) -> VecEnvObs:
        return self.transpose_observations(self.venv.reset())
