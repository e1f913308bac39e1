"""SB3's observation wrappers: :class:`VecFrameStack` (with :class:`StackedObservations`),
:class:`VecTransposeImage`, :class:`VecExtractDictObs` and :class:`VecCheckNan`."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces

from vecenv.sb3.base import (
    AssertionTypeError,
    AssertionValueError,
    VecEnv,
    VecEnvObs,
    VecEnvStepReturn,
    VecEnvWrapper,
)


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


def is_image_space(space: spaces.Space) -> bool:
    """True for a 3-d uint8 Box in [0, 255], which SB3 takes for an image."""
    return (
        isinstance(space, spaces.Box)
        and len(space.shape) == 3
        and space.dtype == np.uint8
        and not np.any(space.low != 0)
        and not np.any(space.high != 255)
    )


class _ObservationWrapper(VecEnvWrapper):
    """A wrapper that maps every observation (terminal ones included) with :meth:`observe`."""

    def observe(self, observations: Any) -> Any:
        raise NotImplementedError

    def reset(self) -> VecEnvObs:
        return self.observe(self.venv.reset())

    def step_wait(self) -> VecEnvStepReturn:
        observations, rewards, dones, infos = self.venv.step_wait()
        for info in infos:
            if "terminal_observation" in info:
                info["terminal_observation"] = self.observe(info["terminal_observation"])
        return self.observe(observations), rewards, dones, infos


class VecExtractDictObs(_ObservationWrapper):
    """Replace Dict observations (and terminal observations) by their entry ``key``."""

    def __init__(self, venv: VecEnv, key: str) -> None:
        if not isinstance(venv.observation_space, spaces.Dict):
            raise AssertionTypeError(
                "VecExtractDictObs can only be used with Dict obs space, not "
                f"{venv.observation_space}"
            )
        self.key = key
        super().__init__(venv, observation_space=venv.observation_space.spaces[key])

    def observe(self, observations: Any) -> Any:
        return observations[self.key]


class VecTransposeImage(_ObservationWrapper):
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
        if not skip and isinstance(space, spaces.Dict):
            self.image_space_keys: list[str] = []
            new = copy.deepcopy(space)
            for key, sub in new.spaces.items():
                if is_image_space(sub):
                    self.image_space_keys.append(key)
                    new.spaces[key] = self.transpose_space(sub, key)  # type: ignore[arg-type]
            space = new
        elif not skip:
            space = self.transpose_space(space)  # type: ignore[arg-type]
        super().__init__(venv, observation_space=space)

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
        return np.transpose(image, (2, 0, 1) if image.ndim == 3 else (0, 3, 1, 2))

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

    observe = transpose_observations


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
        if value.dtype.kind not in "fc":
            return []  # integers and booleans cannot hold NaN or inf
        found = [(name, "inf")] if self.check_inf and np.isinf(value).any() else []
        return found + [(name, "nan")] if np.isnan(value).any() else found

    def _check_val(self, event: str, **values: Any) -> None:
        if not self.raise_exception and self.warn_once and self._user_warned:
            return
        found: list[tuple[str, str]] = []
        for name, value in values.items():
            if isinstance(value, (np.ndarray, list, np.generic, float)):
                found += self.check_array_value(name, np.asarray(value))
            elif isinstance(value, (dict, tuple)):
                items = value.items() if isinstance(value, dict) else enumerate(value)
                for key, inner in items:
                    found += self.check_array_value(f"{name}.{key}", inner)
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
            subs = {
                key: StackedObservations(num_envs, n_stack, sub, channels_order[key])  # type: ignore[arg-type]
                for key, sub in observation_space.spaces.items()
            }
            self.sub_stacked_observations = subs
            self.stacked_observation_space = spaces.Dict(
                {key: sub.stacked_observation_space for key, sub in subs.items()}
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

    def reset(self, observation: Any) -> Any:
        """Start every stack afresh: zeros, then the reset observation in the newest place."""
        if isinstance(observation, dict):
            subs = self.sub_stacked_observations
            return {key: subs[key].reset(obs) for key, obs in observation.items()}
        stack = np.zeros_like(self.stacked_obs)
        self._newest(stack, observation.shape[self.stack_dimension])[...] = observation
        self.stacked_obs = stack
        return stack

    def _newest(self, stack: np.ndarray, width: int) -> np.ndarray:
        """View of the newest ``width`` channels of a batched stack."""
        return stack[:, -width:] if self.channels_first else stack[..., -width:]

    def update(self, observations: Any, dones: np.ndarray,
               infos: list[dict[str, Any]]) -> tuple[Any, list[dict[str, Any]]]:
        """Push a step's observations; envs that are done get a fresh stack, and their
        ``terminal_observation`` becomes the stacked last frames of the finished episode."""
        if isinstance(observations, dict):
            ends = [info.get("terminal_observation") for info in infos]
            stacked = {}
            for key, obs in observations.items():
                key_infos = [{} if t is None else {"terminal_observation": t[key]} for t in ends]
                stacked[key], _ = self.sub_stacked_observations[key].update(obs, dones, key_infos)
                for terminal, key_info in zip(ends, key_infos, strict=True):
                    if terminal is not None:
                        terminal[key] = key_info["terminal_observation"]
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
            venv.num_envs, n_stack, venv.observation_space, channels_order  # type: ignore[arg-type]
        )
        super().__init__(venv, observation_space=self.stacked_obs.stacked_observation_space)

    def step_wait(self) -> VecEnvStepReturn:
        observations, rewards, dones, infos = self.venv.step_wait()
        observations, infos = self.stacked_obs.update(observations, dones, infos)
        return observations, rewards, dones, infos

    def reset(self) -> VecEnvObs:
        return self.stacked_obs.reset(self.venv.reset())
