"""Pick some envs' rows out of a full batch (a reset of some envs returns only theirs, as
EnvPool's does)."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

__all__ = ["take_info_rows", "take_rows"]


def take_rows(value: Any, space: spaces.Space, rows: np.ndarray) -> Any:
    """The ``rows`` of a batched observation of single space ``space`` (any nesting)."""
    if isinstance(space, spaces.Dict):
        return {key: take_rows(value[key], sub, rows) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(take_rows(v, sub, rows) for v, sub in zip(value, space.spaces, strict=True))
    if isinstance(value, np.ndarray):
        return value[rows]
    return tuple(value[i] for i in rows.tolist())  # a custom space: one object per env


def take_info_rows(infos: dict[str, Any], rows: np.ndarray) -> dict[str, Any]:
    """The ``rows`` of gymnasium-style batched infos (arrays and nested dicts of arrays)."""
    out: dict[str, Any] = {}
    for key, value in infos.items():
        if isinstance(value, dict):
            out[key] = take_info_rows(value, rows)
        elif isinstance(value, np.ndarray):
            out[key] = value[rows]
        else:
            out[key] = value
    return out
