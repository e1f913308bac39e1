"""The standard benchmark envs (importing this module registers ``vecenv/Busy-v0`` and
``vecenv/VariableBusy-v0``), and turning an env argument into a picklable env factory."""

from __future__ import annotations

import importlib
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from vecenv.make import find_spec

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
    wait = False  # sleep for the step's cost rather than burn it (VariableBusyEnv's option)

    def __init__(self, step_cost_us: float = 100.0, episode_length: int = 1000,
                 obs_shape: tuple[int, ...] = (84, 84, 4)) -> None:
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

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._frames = self.np_random.integers(0, 256, self._frames.shape, dtype=np.uint8)
        self._t = 0
        self._target = int(self.np_random.integers(4))
        return self._frames[0].copy(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        (time.sleep if self.wait else spin)(self._step_cost())
        a = int(action)
        reward = 1.0 if a == self._target else 0.0
        self._target = int(self.np_random.integers(4))
        self._t += 1
        obs = self._frames[(self._t + a) % _FRAMES].copy()
        return obs, reward, False, self._t >= self.episode_length, {}


class VariableBusyEnv(BusyEnv):
    """:class:`BusyEnv` whose step cost is drawn per step (reproducibly, from a generator seeded
    at :meth:`reset`), uniformly in ``[min_cost_us, max_cost_us]``: stragglers, which the
    async-batch mode is for. ``wait=True`` sleeps for the cost instead of burning CPU (an env
    waiting on an external simulator, a renderer or the network)."""

    def __init__(self, min_cost_us: float = 50.0, max_cost_us: float = 500.0,
                 episode_length: int = 1000, obs_shape: tuple[int, ...] = (84, 84, 4),
                 wait: bool = False) -> None:
        if not 0 <= min_cost_us <= max_cost_us:
            raise ValueError(
                f"expected 0 <= min_cost_us <= max_cost_us, got {min_cost_us!r} and {max_cost_us!r}"
            )
        super().__init__((min_cost_us + max_cost_us) / 2, episode_length, obs_shape)
        self.min_cost_us = float(min_cost_us)
        self.max_cost_us = float(max_cost_us)
        self.wait = bool(wait)
        self._cost_rng = np.random.default_rng()

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = super().reset(seed=seed, options=options)
        self._cost_rng = np.random.default_rng(int(self.np_random.integers(2**63)))
        return obs, info

    def _step_cost(self) -> float:
        return float(self._cost_rng.uniform(self.min_cost_us, self.max_cost_us)) * 1e-6

for _id, _entry_point in ((BUSY_ID, "vecenv.bench.envs:BusyEnv"),
                          (VARIABLE_BUSY_ID, "vecenv.bench.envs:VariableBusyEnv")):
    if _id not in gym.registry:
        gym.register(_id, entry_point=_entry_point)


# ==================================================================== env arguments
class EnvArgumentError(ValueError):
    """An env argument (id or ``module:callable``) that cannot be used."""


_FACTORY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*$")


def make_env(target: str, kwargs: dict[str, Any] | None = None,
             imports: tuple[str, ...] = ()) -> gym.Env:
    """Build one env from an id or ``module:callable``, after importing ``imports`` (``--import``:
    a spawned worker starts with a bare registry); module-level, so it pickles for spawn."""
    kwargs = dict(kwargs or {})
    for module in imports:
        importlib.import_module(module)
    factory = named_factory(target)
    if factory is not None:
        return factory(**kwargs)
    return gym.make(target, **kwargs)  # "module:EnvId" imports module here (gymnasium's make)


def _attribute(target: str) -> tuple[bool, Any]:
    """For ``module:attr.path``: whether the module has that attribute, and its value."""
    module_name, _, attr = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        if not hasattr(obj, part):
            return False, None
        obj = getattr(obj, part)
    return True, obj


def named_factory(target: str) -> Callable[..., gym.Env] | None:
    """The callable that ``module:callable`` names, or None when ``target`` is a gymnasium id
    (``module:EnvId`` included: a module with no callable of that name registers the id)."""
    if not _FACTORY.match(target):
        return None
    found, obj = _attribute(target)
    return obj if found and callable(obj) else None


@dataclass(frozen=True)
class EnvTarget:
    """A resolved env argument: its label and a picklable zero-argument factory."""

    name: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: "id" for a registered gymnasium id (``module:EnvId`` too), "factory" for ``module:callable``
    kind: str = "id"
    #: modules imported before the env is built (plugins that register ids: ``--import``)
    imports: tuple[str, ...] = ()

    @property
    def env_fn(self) -> Callable[[], gym.Env]:
        """A zero-argument factory that pickles by reference (safe for spawned workers)."""
        return partial(make_env, self.name, dict(self.kwargs), self.imports)

    @property
    def gym_id(self) -> str | None:
        """The registered id (None for a factory)."""
        return self.name if self.kind == "id" else None


def import_modules(modules: Sequence[str]) -> tuple[str, ...]:
    """Import each plugin module (``--import``), so the ids it registers resolve; an
    :class:`EnvArgumentError` names one that cannot be imported and why."""
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:  # a plugin's own import error, shown to the user
            raise EnvArgumentError(f"cannot import module {module!r} ({type(exc).__name__}: {exc})") from None
    return tuple(modules)


def resolve_env(target: str, kwargs: dict[str, Any] | None = None,
                imports: Sequence[str] = ()) -> EnvTarget:
    """Check that ``target`` names a registered env id, a ``module:EnvId`` id or an importable
    ``module:callable`` (a factory when the module has a callable of that name), after importing
    ``imports``; an :class:`EnvArgumentError` says what is wrong and, for an unknown namespace,
    how to import its plugin."""
    kwargs = dict(kwargs or {})
    if not isinstance(target, str) or not target.strip():
        raise EnvArgumentError(f"expected an env id, module:EnvId or module:callable, got {target!r}")
    target = target.strip()
    imported = import_modules(imports)
    factory_form = bool(_FACTORY.match(target))
    module_name, _, attr = target.partition(":")
    if factory_form:
        try:
            found, obj = _attribute(target)
        except ImportError as exc:
            raise EnvArgumentError(f"{target!r}: cannot import module {module_name!r} ({exc})") from None
        if found and not callable(obj):
            raise EnvArgumentError(f"{target!r}: {attr!r} is not callable (got {type(obj).__name__})")
        if found:
            return EnvTarget(target, kwargs, "factory", imported)
    try:
        find_spec(target)  # as gym.make would ("module:Env-v0" imports its module)
    except gym.error.Error as exc:
        if factory_form:
            raise EnvArgumentError(
                f"{target!r}: module {module_name!r} has no attribute {attr!r} (for module:callable) "
                f"and registers no env id {attr!r} (for module:EnvId): {exc}"
            ) from None
        hint = ""
        if isinstance(exc, gym.error.NamespaceNotFound) or (
            isinstance(exc, gym.error.NameNotFound) and ":" not in target and "/" not in target
        ):
            hint = (
                f"; if a package registers it, import that package first with --import MODULE, "
                f"or name it in the id as MODULE:{target} (gymnasium's module:EnvId form)"
            )
        raise EnvArgumentError(f"unknown env id {target!r}: {exc}{hint}") from None
    except ImportError as exc:
        raise EnvArgumentError(f"env id {target!r}: {exc}") from None
    return EnvTarget(target, kwargs, "id", imported)
