"""Stable-Baselines3's vectorized-environment API: :class:`VecEnv` and :class:`VecEnvWrapper`, a
numpy-only re-implementation of SB3's abstract API that SB3 recognises as its own when imported."""

from __future__ import annotations

import operator
import warnings
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from copy import deepcopy
from typing import Any, Union

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium import spaces

from vecenv.sb3 import _compat

#: Which sub-environments a call targets: ``None`` (all), one index, or several.
VecEnvIndices = Union[None, int, Iterable[int]]  # noqa: UP007
#: A batch of observations: one array, or a dict / tuple of arrays for structured spaces.
VecEnvObs = Union[np.ndarray, dict[str, np.ndarray], tuple[np.ndarray, ...]]  # noqa: UP007
#: What ``step`` returns: observations, rewards (float32), dones (bool) and one info dict per env.
VecEnvStepReturn = tuple[VecEnvObs, np.ndarray, np.ndarray, list[dict[str, Any]]]


# SB3 reports many wrong inputs with ``assert`` or lets Python fail with an IndexError/TypeError;
# vecenv raises classes that are both SB3's class and the one a check should raise, so
# ``except AssertionError`` written for SB3 and ``except ValueError`` both work.
class AssertionValueError(AssertionError, ValueError):
    """A check SB3 makes with ``assert`` on a value."""


class AssertionTypeError(AssertionError, TypeError):
    """A check SB3 makes with ``assert`` on a type."""


class IndexValueError(IndexError, ValueError):
    """A count that does not match ``num_envs`` (SB3 fails with an ``IndexError`` there)."""


class TypeValueError(TypeError, ValueError):
    """Input of the wrong kind (SB3 fails with a ``TypeError`` there)."""


def tile_images(images: Sequence[np.ndarray]) -> np.ndarray:
    """Arrange N same-sized HxWxC images on a near-square grid (rows first), padding with black."""
    batch = np.asarray(images)
    n, height, width, channels = batch.shape
    rows = int(np.ceil(np.sqrt(n)))
    cols = int(np.ceil(n / rows))
    grid = np.zeros((rows * cols, height, width, channels), dtype=batch.dtype)
    grid[:n] = batch
    grid = grid.reshape(rows, cols, height, width, channels).swapaxes(1, 2)
    return grid.reshape(rows * height, cols * width, channels)


class VecEnv(ABC):
    """Abstract batch of ``num_envs`` environments with SB3's API.

    Subclasses implement ``reset``, ``step_async``, ``step_wait``, ``close``, ``get_attr``,
    ``set_attr``, ``env_method`` and ``env_is_wrapped``.
    """

    def __init__(self, num_envs: int, observation_space: spaces.Space,
                 action_space: spaces.Space) -> None:
        _compat.register_if_loaded()
        self.num_envs = num_envs
        self.observation_space = observation_space
        self.action_space = action_space
        # Info dicts returned by the last reset of each sub-environment.
        self.reset_infos: list[dict[str, Any]] = [{} for _ in range(num_envs)]
        # Seeds and options for the next reset() only.
        self._seeds: list[int | None] = [None] * num_envs
        self._options: list[dict[str, Any]] = [{} for _ in range(num_envs)]

        try:
            render_modes = self.get_attr("render_mode")
        except AttributeError:
            warnings.warn(
                "The `render_mode` attribute is not defined in your environment. It will be set to "
                "None.",
                stacklevel=2,
            )
            render_modes = [None] * num_envs
        if any(mode != render_modes[0] for mode in render_modes):
            raise AssertionValueError(
                "render_mode mode should be the same for all environments "
                f"(got {list(render_modes)})"
            )
        self.render_mode: str | None = render_modes[0] if render_modes else None
        # "human" over rgb_array envs shows the tiled rgb_array images
        mode = self.render_mode
        modes = {None: [], "rgb_array": ["human", "rgb_array"]}.get(mode, [mode])
        self.metadata: dict[str, Any] = {"render_modes": modes}

    # ----------------------------------------------------------------- abstract API
    @abstractmethod
    def reset(self) -> VecEnvObs:
        """Reset every env (with the pending seeds/options); return the first observations."""

    @abstractmethod
    def step_async(self, actions: np.ndarray) -> None:
        """Start stepping every env with its action; collect the result with :meth:`step_wait`."""

    @abstractmethod
    def step_wait(self) -> VecEnvStepReturn:
        """Wait for :meth:`step_async`'s step; return ``(obs, rewards, dones, infos)``."""

    @abstractmethod
    def close(self) -> None:
        """Release the environments and any worker processes."""

    @abstractmethod
    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """Return ``attr_name`` of each selected env (looked up through its gymnasium wrappers)."""

    @abstractmethod
    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Set ``attr_name`` to ``value`` on each selected env."""

    @abstractmethod
    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
                   **method_kwargs: Any) -> list[Any]:
        """Call ``method_name(*method_args, **method_kwargs)`` on each selected env; the results."""

    @abstractmethod
    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper],
                       indices: VecEnvIndices = None) -> list[bool]:
        """Whether each selected env has ``wrapper_class`` in its gymnasium wrapper chain."""

    # ----------------------------------------------------------------- shared behaviour
    def step(self, actions: np.ndarray) -> VecEnvStepReturn:
        """Step every env synchronously: ``step_async`` followed by ``step_wait``."""
        self.step_async(actions)
        return self.step_wait()

    def has_attr(self, attr_name: str) -> bool:
        """True if every env has ``attr_name``."""
        try:
            self.get_attr(attr_name)
        except AttributeError:
            return False
        return True

    def get_images(self) -> Sequence[np.ndarray | None]:
        """One RGB frame per env (needs ``render_mode="rgb_array"``)."""
        raise NotImplementedError

    def render(self, mode: str | None = None) -> np.ndarray | None:
        """Render the envs; with ``rgb_array`` return one image tiling every env's frame.

        ``mode`` exists for SB3 compatibility: since gymnasium 0.26 the mode is fixed when the
        envs are created, so another mode than theirs only warns, except "human" over
        "rgb_array", which shows the tiled frame with OpenCV.
        """
        if mode == "human" and self.render_mode != mode:
            if self.render_mode != "rgb_array":
                warnings.warn(
                    f"You tried to render a VecEnv with mode='{mode}' but the render mode defined "
                    "when initializing the environment must be 'human' or 'rgb_array', not "
                    f"'{self.render_mode}'.",
                    stacklevel=2,
                )
                return None
        elif mode and self.render_mode != mode:
            warnings.warn(
                "Starting from gymnasium v0.26, render modes are determined during the "
                "initialization of the environment. The mode argument is kept for backward "
                f"compatibility, but the mode ({mode}) has to be the same as the environment "
                f"render mode ({self.render_mode}), which is not the case.",
                stacklevel=2,
            )
            return None
        mode = mode or self.render_mode
        if mode is None:
            warnings.warn(
                "You tried to call render() but no `render_mode` was passed to the env "
                "constructor.",
                stacklevel=2,
            )
            return None
        if self.render_mode == "human" or mode not in ("rgb_array", "human"):
            # The envs render themselves; nothing comes back.
            self.env_method("render")
            return None
        image = tile_images(self.get_images())  # type: ignore[arg-type]
        if mode == "rgb_array":
            return image
        try:
            import cv2
        except ModuleNotFoundError as exc:  # pragma: no cover - depends on the machine
            raise ModuleNotFoundError(
                f"{exc}: render(mode='human') over rgb_array envs shows the frames with OpenCV "
                "(pip install opencv-python)",
                name=exc.name,
            ) from exc
        cv2.imshow("vecenv", image[:, :, ::-1])
        cv2.waitKey(1)
        return None

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        """Set the seeds used by the next ``reset()``: env ``i`` gets ``seed + i`` (a random
        ``seed`` when None, so that the envs still differ)."""
        if seed is None:
            seed = int(np.random.randint(0, np.iinfo(np.uint32).max, dtype=np.uint32))
        self._seeds = [seed + i for i in range(self.num_envs)]
        return self._seeds

    def set_options(self, options: list[dict] | dict | None = None) -> None:
        """Set the options passed to the next ``reset()``: one dict for all envs, or one per env."""
        if options is None or isinstance(options, dict):
            self._options = [deepcopy(options or {}) for _ in range(self.num_envs)]
        else:
            if len(options) != self.num_envs:
                raise IndexValueError(
                    f"list index out of range: set_options got {len(options)} option dicts for "
                    f"{self.num_envs} envs"
                )
            self._options = deepcopy(list(options))

    def _reset_seeds(self) -> None:
        self._seeds = [None] * self.num_envs

    def _reset_options(self) -> None:
        self._options = [{} for _ in range(self.num_envs)]

    @property
    def unwrapped(self) -> VecEnv:
        """The innermost VecEnv under any :class:`VecEnvWrapper`."""
        return self

    def getattr_depth_check(self, name: str, already_found: bool) -> str | None:
        """Name of this class if it would shadow ``name`` already found higher up, else None."""
        if already_found and hasattr(self, name):
            return f"{type(self).__module__}.{type(self).__name__}"
        return None

    #: what SB3's class indexes with env indices ("list" of envs, "tuple" of pipes), for messages
    _indexed_container = "list"

    def _get_indices(self, indices: VecEnvIndices) -> list[int]:
        """``indices`` as a list of env indices: None (all), one int, or any iterable of ints;
        negative ones count from the end, as with SB3's list indexing."""
        if indices is None:
            return list(range(self.num_envs))
        items = [indices] if isinstance(indices, (int, np.integer)) else indices
        container = self._indexed_container
        result = []
        for item in items:
            try:
                i = operator.index(item)
            except TypeError:
                raise TypeError(
                    f"{container} indices must be integers or slices, not {type(item).__name__}"
                ) from None
            if not -self.num_envs <= i < self.num_envs:
                raise IndexError(
                    f"{container} index out of range: env index {i} for {self.num_envs} envs"
                )
            result.append(i % self.num_envs)
        return result

    def __enter__(self) -> VecEnv:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class VecEnvWrapper(VecEnv):
    """Base class of wrappers around a :class:`VecEnv` (SB3's or vecenv's).

    Everything not overridden is forwarded to ``venv``; attributes this wrapper lacks are looked
    up down the wrapper chain, and a lookup that would be ambiguous (the name exists on two
    levels, and the outer one is not this wrapper) raises ``AttributeError``.
    """

    def __init__(self, venv: VecEnv, observation_space: spaces.Space | None = None,
                 action_space: spaces.Space | None = None) -> None:
        self.venv = venv
        super().__init__(
            num_envs=venv.num_envs,
            observation_space=observation_space or venv.observation_space,
            action_space=action_space or venv.action_space,
        )
        self.class_attributes = frozenset(dir(type(self)))

    def step_async(self, actions: np.ndarray) -> None:
        self.venv.step_async(actions)

    @abstractmethod
    def reset(self) -> VecEnvObs: ...

    @abstractmethod
    def step_wait(self) -> VecEnvStepReturn: ...

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        return self.venv.seed(seed)

    def set_options(self, options: list[dict] | dict | None = None) -> None:
        return self.venv.set_options(options)

    def close(self) -> None:
        return self.venv.close()

    def render(self, mode: str | None = None) -> np.ndarray | None:
        return self.venv.render(mode=mode)

    def get_images(self) -> Sequence[np.ndarray | None]:
        return self.venv.get_images()

    def has_attr(self, attr_name: str) -> bool:
        return self.venv.has_attr(attr_name)

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return self.venv.get_attr(attr_name, indices)

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        return self.venv.set_attr(attr_name, value, indices)

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
                   **method_kwargs: Any) -> list[Any]:
        return self.venv.env_method(method_name, *method_args, indices=indices, **method_kwargs)

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper],
                       indices: VecEnvIndices = None) -> list[bool]:
        return self.venv.env_is_wrapped(wrapper_class, indices=indices)

    @property
    def unwrapped(self) -> VecEnv:
        return self.venv.unwrapped

    # ----------------------------------------------------------------- attribute fall-through
    def __getattr__(self, name: str) -> Any:
        # Only called for names not found normally. Guard the names needed before __init__ /
        # during unpickling, which would otherwise recurse forever.
        if name in ("venv", "class_attributes") or (name.startswith("__") and name.endswith("__")):
            raise AttributeError(name)
        shadowed = self.getattr_depth_check(name, already_found=False)
        if shadowed is not None:
            own_class = f"{type(self).__module__}.{type(self).__name__}"
            raise AttributeError(
                f"Error: Recursive attribute lookup for {name} from {own_class} is ambiguous and "
                f"hides attribute from {shadowed}"
            )
        return self.getattr_recursive(name)

    def _own_attribute_names(self) -> set[str] | frozenset[str]:
        class_names = self.__dict__.get("class_attributes") or frozenset(dir(type(self)))
        return class_names | self.__dict__.keys()

    def getattr_recursive(self, name: str) -> Any:
        """Find ``name`` on this wrapper or, failing that, on the first venv below that has it."""
        if name in self._own_attribute_names():
            return getattr(self, name)
        venv = self.__dict__.get("venv")
        if venv is None:
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r} (and no venv)")
        if hasattr(venv, "getattr_recursive"):
            return venv.getattr_recursive(name)
        return getattr(venv, name)

    def getattr_depth_check(self, name: str, already_found: bool) -> str | None:
        """Return the class name of the first venv below that would be hidden by ``name``."""
        here = name in self._own_attribute_names()
        if here and already_found:
            return f"{type(self).__module__}.{type(self).__name__}"
        venv = self.__dict__.get("venv")
        if venv is None or not hasattr(venv, "getattr_depth_check"):
            return None
        return venv.getattr_depth_check(name, already_found or here)


class CloudpickleWrapper:
    """Holds any object and pickles it with cloudpickle (lambdas, closures, local classes)."""

    def __init__(self, var: Any) -> None:
        self.var = var

    def __getstate__(self) -> bytes:
        return cloudpickle.dumps(self.var)

    def __setstate__(self, state: bytes) -> None:
        self.var = cloudpickle.loads(state)
