"""Small space and observation helpers shared by the SB3 wrappers (SB3's image heuristics)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from gymnasium import spaces


def is_image_space_channels_first(space: spaces.Box) -> bool:
    """SB3's heuristic: the channel axis is the smallest of the three (first => CxHxW)."""
    smallest = int(np.argmin(space.shape))
    if smallest == 1:
        warnings.warn(
            "Treating the image space as channels-last although its middle axis is the smallest.",
            stacklevel=2,
        )
    return smallest == 0


def is_image_space(space: spaces.Space, check_channels: bool = False, normalized_image: bool = False) -> bool:
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


def stack_obs(obs_list: list[Any], space: spaces.Space) -> Any:
    """Stack one observation per env into a batch with the leading env axis."""
    if isinstance(space, spaces.Dict):
        return {key: np.stack([o[key] for o in obs_list]) for key in space.spaces}
    if isinstance(space, spaces.Tuple):
        return tuple(np.stack([o[i] for o in obs_list]) for i in range(len(space.spaces)))
    return np.stack(obs_list)


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
