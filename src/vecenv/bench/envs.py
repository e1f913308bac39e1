"""The standard benchmark envs, and turning an env argument into a picklable env factory.

Importing this module registers ``vecenv/Busy-v0`` and ``vecenv/VariableBusy-v0`` with gymnasium
(keyword arguments pass through ``gym.make``).
"""

from __future__ import annotations

import importlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = [
    "BUSY_ID",
    "VARIABLE_BUSY_ID",
    "BusyEnv",
    "EnvArgumentError",
    "EnvTarget",
    "VariableBusyEnv",
    "make_env",
    "resolve_env",
    "spin",
]

BUSY_ID = "vecenv/Busy-v0"
VARIABLE_BUSY_ID = "vecenv/VariableBusy-v0"

#: frames kept per episode; each step returns a copy of one of them
_FRAMES = 4


def spin(seconds: float) -> None:
    """Burn ``seconds`` of CPU in a busy loop (holds the GIL, as a pure-Python env would)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class BusyEnv(gym.Env[np.ndarray, np.int64]):
    """The standard heavy benchmark env: an Atari-sized frame and a fixed CPU cost per step.

    Observation ``Box(0, 255, obs_shape, uint8)`` (default ``(84, 84, 4)``), action
    ``Discrete(4)``; each :meth:`step` busy-loops for ``step_cost_us`` microseconds and returns a
    fresh frame; an episode is truncated after ``episode_length`` steps. Frames and rewards come
    from ``np_random``, so a seed fixes the whole trajectory.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        step_cost_us: float = 100.0,
        episode_length: int = 1000,
        obs_shape: tuple[int, ...] = (84, 84, 4),
    ) -> None:
        if step_cost_us < 0:
            raise ValueError(f"step_cost_us: expected >= 0, got {step_cost_us!r}")
        if int(episode_length) < 1:
            raise ValueError(f"episode_length: expected an int >= 1, got {episode_length!r}")
        self.step_cost_us = float(step_cost_us)
        self.episode_length = int(episode_length)
        self.obs_shape = tuple(int(d) for d in obs_shape)
        self.observation_space = spaces.Box(0, 255, self.obs_shape, np.uint8)
        self.action_space = spaces.Discrete(4)
        self._frames = np.zeros((_FRAMES, *self.obs_shape), dtype=np.uint8)
        self._t = 0
        self._target = 0

    def _step_cost(self) -> float:
        """Seconds of CPU this step burns."""
        return self.step_cost_us * 1e-6

    def _spend(self, seconds: float) -> None:
        spin(seconds)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._frames = self.np_random.integers(0, 256, self._frames.shape, dtype=np.uint8)
        self._t = 0
        self._target = int(self.np_random.integers(4))
        return self._frames[0].copy(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self._spend(self._step_cost())
        a = int(action)
        reward = 1.0 if a == self._target else 0.0
        self._target = int(self.np_random.integers(4))
        self._t += 1
        obs = self._frames[(self._t + a) % _FRAMES].copy()
        return obs, reward, False, self._t >= self.episode_length, {}


class VariableBusyEnv(BusyEnv):
    """:class:`BusyEnv` whose step cost is drawn per step, uniformly in ``[min_cost_us, max_cost_us]``.

    The draw comes from a generator seeded at :meth:`reset`, so costs are reproducible; slow steps
    make stragglers, which is what the async-batch mode (``batch_size < num_envs``) is for. With
    ``wait=True`` the step sleeps for its cost instead of burning CPU: an env that waits on an
    external simulator, a renderer or the network.
    """

    def __init__(
        self,
        min_cost_us: float = 50.0,
        max_cost_us: float = 500.0,
        episode_length: int = 1000,
        obs_shape: tuple[int, ...] = (84, 84, 4),
        wait: bool = False,
    ) -> None:
        if not 0 <= min_cost_us <= max_cost_us:
            raise ValueError(
                f"expected 0 <= min_cost_us <= max_cost_us, got {min_cost_us!r} and {max_cost_us!r}"
            )
        super().__init__((min_cost_us + max_cost_us) / 2, episode_length, obs_shape)
        self.min_cost_us = float(min_cost_us)
        self.max_cost_us = float(max_cost_us)
        self.wait = bool(wait)
        self._cost_rng = np.random.default_rng()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = super().reset(seed=seed, options=options)
        self._cost_rng = np.random.default_rng(int(self.np_random.integers(2**63)))
        return obs, info

    def _step_cost(self) -> float:
        return float(self._cost_rng.uniform(self.min_cost_us, self.max_cost_us)) * 1e-6

    def _spend(self, seconds: float) -> None:
        if self.wait:
            time.sleep(seconds)
        else:
            spin(seconds)


def _register() -> None:
    for env_id, entry_point in (
        (BUSY_ID, "vecenv.bench.envs:BusyEnv"),
        (VARIABLE_BUSY_ID, "vecenv.bench.envs:VariableBusyEnv"),
    ):
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=entry_point)


_register()


# ==================================================================== env arguments
class EnvArgumentError(ValueError):
    """An env argument (id or ``module:callable``) that cannot be used."""


_FACTORY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*$")


def make_env(target: str, kwargs: dict[str, Any] | None = None) -> gym.Env:
    """Build one env from an id or ``module:callable`` (module-level, so it pickles for spawn)."""
    kwargs = dict(kwargs or {})
    factory = _factory(target)
    if factory is not None:
        return factory(**kwargs)
    return gym.make(target, **kwargs)


def _factory(target: str) -> Callable[..., gym.Env] | None:
    """The callable that ``module:callable`` names, or None when ``target`` is a gymnasium id."""
    if not _FACTORY.match(target):
        return None
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


@dataclass(frozen=True)
class EnvTarget:
    """A resolved env argument: its label and a picklable zero-argument factory."""

    name: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: "id" for a registered gymnasium id, "factory" for ``module:callable``
    kind: str = "id"

    @property
    def env_fn(self) -> Callable[[], gym.Env]:
        """A zero-argument factory that pickles by reference (safe for spawned workers)."""
        return partial(make_env, self.name, dict(self.kwargs))

    @property
    def gym_id(self) -> str | None:
        """The registered id (None for a factory)."""
        return self.name if self.kind == "id" else None


def resolve_env(target: str, kwargs: dict[str, Any] | None = None) -> EnvTarget:
    """Check that ``target`` names a registered env id or an importable ``module:callable``.

    Raises:
        EnvArgumentError: with a message saying what is wrong (unknown id, missing module or
            attribute, not callable).
    """
    kwargs = dict(kwargs or {})
    if not isinstance(target, str) or not target.strip():
        raise EnvArgumentError(f"expected an env id or module:callable, got {target!r}")
    target = target.strip()
    if _FACTORY.match(target):
        module_name, _, attr = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise EnvArgumentError(
                f"{target!r}: cannot import module {module_name!r} ({exc})"
            ) from None
        obj: Any = module
        for part in attr.split("."):
            if not hasattr(obj, part):
                raise EnvArgumentError(f"{target!r}: module {module_name!r} has no attribute {attr!r}")
            obj = getattr(obj, part)
        if not callable(obj):
            raise EnvArgumentError(f"{target!r}: {attr!r} is not callable (got {type(obj).__name__})")
        return EnvTarget(target, kwargs, "factory")
    try:
        gym.spec(target)
    except gym.error.Error as exc:
        raise EnvArgumentError(f"unknown env id {target!r}: {exc}") from None
    except ImportError as exc:  # "module:Env-v0" ids import their module
        raise EnvArgumentError(f"env id {target!r}: {exc}") from None
    return EnvTarget(target, kwargs, "id")
