"""``EnvSpec``: what EnvPool's ``env.spec`` / ``envpool.make_spec`` describe, for any gymnasium env."""

from __future__ import annotations

from collections import namedtuple
from typing import Any, NamedTuple

import gymnasium as gym


def config_tuple(config: dict[str, Any]) -> NamedTuple:
    """The config dict as a namedtuple, as EnvPool's ``spec.config`` is (``spec.config.num_envs``)."""
    return namedtuple("Config", list(config), rename=True)(*config.values())  # type: ignore[return-value]


class EnvSpec:
    """A pool's configuration and its single-env spaces.

    ``observation_space`` / ``action_space`` (and their ``gymnasium_*`` aliases) are one env's
    spaces, as in EnvPool; ``env_spec`` is gymnasium's registration spec when the pool was made
    from an id. dm_env's ``observation_spec()`` / ``action_spec()`` are refused.
    """

    def __init__(self, task_id: str, config: dict[str, Any], observation_space: gym.Space,
                 action_space: gym.Space, env_spec: gym.envs.registration.EnvSpec | None = None) -> None:
        self.id = task_id
        self.config = config_tuple(config)
        self.observation_space = observation_space
        self.action_space = action_space
        self.env_spec = env_spec

    @property
    def gymnasium_observation_space(self) -> gym.Space:
        """One env's observation space (EnvPool's name for the gymnasium flavour)."""
        return self.observation_space

    @property
    def gymnasium_action_space(self) -> gym.Space:
        """One env's action space (EnvPool's name for the gymnasium flavour)."""
        return self.action_space

    @property
    def reward_threshold(self) -> float | None:
        """The task's reward threshold, ``None`` when it has none."""
        return self.config.reward_threshold  # type: ignore[attr-defined]

    @property
    def max_episode_steps(self) -> int | None:
        """Steps after which an episode is truncated, ``None`` when unlimited."""
        return self.config.max_episode_steps  # type: ignore[attr-defined]

    def observation_spec(self) -> Any:
        """Refused: dm_env specs need EnvPool's dm flavour, which vecenv does not offer."""
        raise NotImplementedError("EnvSpec.observation_spec(): dm_env specs are not offered by "
                                  "vecenv.envpool; use spec.observation_space")

    def action_spec(self) -> Any:
        """Refused: dm_env specs need EnvPool's dm flavour, which vecenv does not offer."""
        raise NotImplementedError("EnvSpec.action_spec(): dm_env specs are not offered by "
                                  "vecenv.envpool; use spec.action_space")

    def __repr__(self) -> str:
        return (f"EnvSpec({self.id!r}, observation_space={self.observation_space}, "
                f"action_space={self.action_space}, config={self.config})")
