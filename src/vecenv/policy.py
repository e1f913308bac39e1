"""The failure policy: what a vector env does when an env raises, a worker dies or a step hangs;
validated once where the vector env is built, and handed to the engine and every env group."""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Literal

import numpy as np
from typing_extensions import TypedDict

__all__ = ["FailureOptions", "FailurePolicy", "parse_bytes", "recycle_report", "recycled_seed"]


class FailureOptions(TypedDict, total=False):
    """The keyword arguments every backend accepts for its :class:`FailurePolicy`."""

    on_error: Literal["raise", "restart"]
    max_restarts: int
    restart_window: float
    step_timeout: float | None
    max_episodes_per_env: int | None
    max_worker_memory: int | str | None


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
        max_episodes_per_env: rebuild each env from its env_fn, inside its worker, when it has
            run this many episodes (at the reset that would start the next one, so no episode is
            cut); reported as ``infos["recycled"]``. The rebuilt env's first reset is seeded
            with :func:`recycled_seed`. ``None``: never. Process and Ray backends only.
        max_worker_memory: replace a worker process whose resident memory passed this many bytes
            (an int, or a string such as ``"2GB"`` or ``"400MB"``), between steps; its envs'
            episodes end as truncations reported in ``infos["recycled"]``. Read from ``/proc``
            every 100 ms, sooner (by steps) for a worker that grows (Linux). ``None``: never. Process
            backend only.

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
        FailurePolicy(on_error='restart', max_restarts=5, restart_window=60.0, step_timeout=None, max_episodes_per_env=None, max_worker_memory=None)
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
    max_episodes_per_env: int | None = None
    max_worker_memory: int | str | None = None

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
        every = self.max_episodes_per_env
        if every is not None and (not _is_number(every, integral=True) or every < 1):
            raise ValueError(f"max_episodes_per_env: expected an int >= 1 or None, got {every!r}")
        object.__setattr__(self, "max_worker_memory", parse_bytes("max_worker_memory", self.max_worker_memory))
        object.__setattr__(self, "restart_window", float(self.restart_window))
        if timeout is not None:
            object.__setattr__(self, "step_timeout", float(timeout))

    @property
    def restarts(self) -> bool:
        """Whether failed envs and workers are rebuilt."""
        return self.on_error == "restart"

    @property
    def recycles(self) -> bool:
        """Whether envs or workers are rebuilt before they fail (``max_episodes_per_env``,
        ``max_worker_memory``)."""
        return self.max_episodes_per_env is not None or self.max_worker_memory is not None


_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_bytes(name: str, value: object) -> int | None:
    """``value`` (an int of bytes, or a string such as ``"2GB"``, ``"400 MB"``, ``"1.5GiB"``)
    as bytes; None stays None; a ValueError naming ``name`` for anything else."""
    if value is None:
        return None
    if _is_number(value, integral=True):
        number: float = int(value)  # type: ignore[call-overload]
    else:
        text = value.strip().upper().replace(" ", "") if isinstance(value, str) else ""
        digits = text.rstrip("KMGTIB")
        unit = text[len(digits):]
        try:
            number = float(digits) * _UNITS[unit]
        except (ValueError, KeyError):
            raise ValueError(f"{name}: expected bytes as an int or a string such as '2GB' or '400MB' "
                             f"(units B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), got {value!r}") from None
    if number < 1:
        raise ValueError(f"{name}: expected a positive number of bytes, got {value!r}")
    return int(number)


def recycled_seed(seed: int | None, replacements: int, rebuilds: int) -> int | None:
    """The seed of a rebuilt env's first reset: from the env's own seed (the last one its
    ``reset`` was given, ``None`` if never), how many times its worker was replaced
    (``max_worker_memory``) and how many times it was rebuilt in this worker
    (``max_episodes_per_env``): ``int(SeedSequence([seed, replacements, rebuilds]).generate_state(1)[0])``,
    a 32-bit seed, so that runs with the same seeds repeat. An env never seeded stays unseeded."""
    if seed is None:
        return None
    return int(np.random.SeedSequence([seed, replacements, rebuilds]).generate_state(1)[0])


def _is_number(value: object, integral: bool = False) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, numbers.Integral if integral else numbers.Real)


def recycle_report(reason: str) -> dict:
    """The info entries of an env rebuilt (or whose worker was replaced) before it failed:
    ``max_episodes_per_env`` or ``max_worker_memory``, as ``reason`` says."""
    return {"recycled": True, "recycle_reason": reason}
