"""The failure policy: what a vector env does when an env raises, a worker dies or a step hangs;
validated once where the vector env is built, and handed to the engine and every env group."""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Literal

from typing_extensions import TypedDict

__all__ = ["FailureOptions", "FailurePolicy"]


class FailureOptions(TypedDict, total=False):
    """The keyword arguments every backend accepts for its :class:`FailurePolicy`."""

    on_error: Literal["raise", "restart"]
    max_restarts: int
    restart_window: float
    step_timeout: float | None


@dataclass(frozen=True)
class FailurePolicy:
    """How failures are handled.

    Attributes:
        on_error: ``"raise"`` re-raises a failure in the caller; ``"restart"`` rebuilds the failed
            env (or worker) from its env_fn, ends its episode as a truncation and reports
            ``infos["restarted"]``.
        max_restarts: restarts allowed per env (and per worker) within ``restart_window``; past
            that the error is raised.
        restart_window: seconds after which a restart stops counting against ``max_restarts``.
        step_timeout: seconds a worker may take for one command before it is ended and reported
            (:class:`~vecenv.errors.StepTimeoutError`, or restarted); ``None`` waits as long as it
            takes.

    Examples:
        Every backend takes these fields as keyword arguments (and ``vecenv.make`` passes them
        on); the vector env keeps the validated policy as ``policy``:

        >>> import gymnasium as gym
        >>> import numpy as np
        >>> import vecenv
        >>> class Crashy(gym.Wrapper):  # an env whose third step raises
        ...     steps = 0
        ...     def step(self, action):
        ...         self.steps += 1
        ...         if self.steps == 3:
        ...             raise RuntimeError("simulator crashed")
        ...         return super().step(action)
        >>> envs = vecenv.make(lambda: Crashy(gym.make("CartPole-v1")), 2, backend="serial",
        ...                    on_error="restart", max_restarts=5)
        >>> envs.policy
        FailurePolicy(on_error='restart', max_restarts=5, restart_window=60.0, step_timeout=None)
        >>> _ = envs.reset(seed=0)
        >>> for _ in range(3):
        ...     *_, truncations, infos = envs.step(np.zeros(2, dtype=np.int64))
        >>> truncations, infos["restarted"], infos["restart_reason"][0]
        (array([ True,  True]), array([ True,  True]), 'RuntimeError: simulator crashed')
        >>> envs.close()

        With the default ``on_error="raise"`` the error reaches the caller, as its own type and
        as a :class:`vecenv.EnvError` saying where it happened:

        >>> envs = vecenv.make(lambda: Crashy(gym.make("CartPole-v1")), 2, backend="serial")
        >>> _ = envs.reset(seed=0)
        >>> try:
        ...     for _ in range(3):
        ...         _ = envs.step(np.zeros(2, dtype=np.int64))
        ... except RuntimeError as error:
        ...     print(isinstance(error, vecenv.EnvError), error.env_index, error.method)
        True 0 step
        >>> envs.close()

        Invalid values are refused where the vector env is built:

        >>> vecenv.FailurePolicy(on_error="retry")
        Traceback (most recent call last):
        ...
        ValueError: on_error: expected 'raise' or 'restart', got 'retry'
    """

    on_error: Literal["raise", "restart"] = "raise"
    max_restarts: int = 3
    restart_window: float = 60.0
    step_timeout: float | None = None

    def __post_init__(self) -> None:
        if self.on_error not in ("raise", "restart"):
            raise ValueError(f"on_error: expected 'raise' or 'restart', got {self.on_error!r}")
        if not _is_number(self.max_restarts, integral=True) or self.max_restarts < 0:
            raise ValueError(f"max_restarts: expected an int >= 0, got {self.max_restarts!r}")
        if not _is_number(self.restart_window) or self.restart_window <= 0:
            raise ValueError(f"restart_window: expected seconds > 0, got {self.restart_window!r}")
        timeout = self.step_timeout
        if timeout is not None and (not _is_number(timeout) or timeout <= 0):
            raise ValueError(f"step_timeout: expected seconds > 0 or None, got {timeout!r}")
        object.__setattr__(self, "restart_window", float(self.restart_window))
        if timeout is not None:
            object.__setattr__(self, "step_timeout", float(timeout))

    @property
    def restarts(self) -> bool:
        """Whether failed envs and workers are rebuilt."""
        return self.on_error == "restart"


def _is_number(value: object, integral: bool = False) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, numbers.Integral if integral else numbers.Real)
