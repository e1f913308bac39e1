"""Looking at observations and infos for ``vecenv check``: hashing, sizing, describing them,
saying why one is outside its space, and tracking the type of each info value."""

from __future__ import annotations

import hashlib
from typing import Any

import gymnasium as gym
import numpy as np

from vecenv.infos import why_not_shared


def digest(value: Any, h: Any = None) -> Any:
    """A hash of a (nested) observation: dtype, shape and bytes of every leaf."""
    h = h or hashlib.blake2b(digest_size=16)
    if isinstance(value, dict):
        for k in sorted(value, key=str):
            h.update(repr(k).encode())
            digest(value[k], h)
    elif isinstance(value, (tuple, list)):
        h.update(b"(")
        for v in value:
            digest(v, h)
        h.update(b")")
    else:
        a = np.asarray(value)
        if a.dtype == object:
            h.update(repr(value).encode())
        else:
            h.update(f"{a.dtype}{a.shape}".encode())
            h.update(np.ascontiguousarray(a).tobytes())
    return h


def same(a: Any, b: Any) -> bool:
    """Whether two (nested) observations have the same dtypes, shapes and bytes."""
    return digest(a).digest() == digest(b).digest()


def nbytes(value: Any) -> int:
    """The bytes of array data in a (nested) observation; object arrays count as 0."""
    if isinstance(value, dict):
        return sum(nbytes(v) for v in value.values())
    if isinstance(value, (tuple, list)):
        return sum(nbytes(v) for v in value)
    a = np.asarray(value)
    return int(a.nbytes) if a.dtype != object else 0


def describe(value: Any) -> str:
    """The structure of a (nested) observation in words, e.g. ``uint8 array (84, 84)``."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {describe(v)}" for k, v in value.items()) + "}"
    if isinstance(value, tuple):
        return "(" + ", ".join(describe(v) for v in value) + ")"
    if isinstance(value, np.ndarray):
        return f"{value.dtype} array {value.shape}"
    return type(value).__name__


def size_text(n: int) -> str:
    """A byte count in B, KB or MB."""
    if n < 1024:
        return f"{n:.0f} B"
    return f"{n / 1024:.1f} KB" if n < 1024**2 else f"{n / 1024**2:.1f} MB"


def why_outside(space: gym.Space, obs: Any, path: str = "observation") -> str:
    """In plain words, why ``obs`` is not in ``space``."""
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(obs, dict):
            return f"{path} is a {type(obs).__name__}, the space is a Dict"
        if set(obs) != set(space.spaces):
            return f"{path} has keys {sorted(obs)}, the space has {sorted(space.spaces)}"
        for k, sub in space.spaces.items():
            if not sub.contains(obs[k]):
                return why_outside(sub, obs[k], f"{path}[{k!r}]")
    if isinstance(space, gym.spaces.Tuple):
        if not isinstance(obs, tuple) or len(obs) != len(space.spaces):
            return f"{path} is {describe(obs)}, the space is a Tuple of {len(space.spaces)}"
        for i, sub in enumerate(space.spaces):
            if not sub.contains(obs[i]):
                return why_outside(sub, obs[i], f"{path}[{i}]")
    if isinstance(space, gym.spaces.Box):
        why = _why_outside_box(space, obs, path)
        if why is not None:
            return why
    if isinstance(space, gym.spaces.Discrete):
        return f"{path} = {obs!r} ({type(obs).__name__}) is not an integer in [{space.start}, {space.start + space.n})"
    return f"{path} = {describe(obs)} is not in {space}"


def _why_outside_box(space: gym.spaces.Box, obs: Any, path: str) -> str | None:
    """Why ``obs`` is not in the Box ``space``, or None when no reason is found."""
    if not isinstance(obs, np.ndarray):
        return f"{path} is a {type(obs).__name__}, not a numpy array of {space.dtype}"
    if obs.shape != space.shape:
        return f"{path} has shape {obs.shape}, the space {space.shape}"
    if not np.can_cast(obs.dtype, space.dtype):
        return f"{path} has dtype {obs.dtype}, the space {space.dtype} (cast it in the env)"
    low = obs < space.low
    high = obs > space.high
    if low.any() or high.any():
        idx = np.argwhere(low | high)[0]
        i = tuple(int(x) for x in idx)
        return (
            f"{path}{list(i)} = {obs[i].item()!r} is outside "
            f"[{space.low[i].item()!r}, {space.high[i].item()!r}] "
            f"({int((low | high).sum())} values out of bounds)"
        )
    if np.isnan(obs).any() if obs.dtype.kind == "f" else False:
        return f"{path} contains NaN"
    return None


def _signature(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"ndarray[{value.dtype}, shape {value.shape}]"
    if isinstance(value, np.generic):
        return f"numpy {value.dtype}"
    return type(value).__name__


class InfoTypes:
    """Remembers the first type seen for each info key (nested dicts by path)."""

    def __init__(self) -> None:
        self.first: dict[str, tuple[str, str]] = {}
        self.changes: dict[str, tuple[str, str, str, str]] = {}
        #: info key path -> why its info travels pickled rather than in shared memory
        self.unshared: dict[str, str] = {}
        self.seen_any = False

    def see(self, info: dict[str, Any], when: str, prefix: str = "") -> None:
        if not prefix and info:
            self.seen_any = True
            for path, why in why_not_shared(info).items():
                self.unshared.setdefault(path, why)
        for key, value in info.items():
            path = f"{prefix}[{key!r}]"
            if isinstance(value, dict):
                self.see(value, when, path)
                continue
            sig = _signature(value)
            seen = self.first.setdefault(path, (sig, when))
            if seen[0] != sig and path not in self.changes:
                self.changes[path] = (seen[0], seen[1], sig, when)
