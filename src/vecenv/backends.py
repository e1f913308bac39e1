"""The vector env classes users build: one per transport, all sharing the engine."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import gymnasium as gym
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from vecenv.engine import VectorEnv
from vecenv.transports import SerialTransport

__all__ = ["AsyncVectorEnv", "ProcessVectorEnv", "SerialVectorEnv", "SyncVectorEnv"]


class SerialVectorEnv(VectorEnv):
    """Steps every env in the caller's process, one after the other.

    The fastest choice for cheap envs on one core, and the reference the other backends are
    tested against. Same constructor as ``gymnasium.vector.SyncVectorEnv``; ``envs`` gives the
    sub-env objects.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        copy: bool = True,
        observation_mode: str | tuple[spaces.Space, spaces.Space] = "same",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        *,
        batch_size: int | None = None,
        on_error: str = "raise",
        max_restarts: int = 3,
        restart_window: float = 60.0,
    ) -> None:
        super().__init__(
            env_fns,
            SerialTransport(),
            num_workers=1,
            batch_size=batch_size,
            copy=copy,
            observation_mode=observation_mode,
            autoreset_mode=autoreset_mode,
            on_error=on_error,
            max_restarts=max_restarts,
            restart_window=restart_window,
        )


#: Drop-in name for ``gymnasium.vector.SyncVectorEnv``.
SyncVectorEnv = SerialVectorEnv

# Other backends register here as they land (each lives in its transport's module):
from vecenv.transports.process import AsyncVectorEnv, ProcessVectorEnv  # noqa: E402
from vecenv.transports.ray_actors import RayVectorEnv  # noqa: E402, F401
from vecenv.transports.thread import ThreadVectorEnv  # noqa: E402, F401
