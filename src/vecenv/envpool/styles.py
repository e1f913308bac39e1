"""EnvPool's two return conventions: ``env_type="gymnasium"`` and ``env_type="gym"``.

========================  ==========================================  ================================
call                      ``"gymnasium"``                             ``"gym"`` (old gym, < 0.26)
========================  ==========================================  ================================
``recv()`` / ``step()``   ``(obs, rew, terminated, truncated, info)``  ``(obs, rew, done, info)``
``reset()``               ``(obs, info)``                             ``obs`` (``(obs, info)`` with
                                                                      ``gym_reset_return_info=True``)
``recv(reset=True)``      ``(obs, info)``                             ``(obs, info)``, or ``obs`` with
                                                                      ``return_info=False``
========================  ==========================================  ================================

``"gym"`` infos also hold ``TimeLimit.truncated`` (truncated and not terminated, as old gym's
``TimeLimit`` reported it); ``done`` is ``terminated | truncated``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vecenv.envpool.pool import EnvPool

__all__ = ["GymEnvPool", "GymnasiumEnvPool"]


class GymnasiumEnvPool(EnvPool):
    """An :class:`EnvPool` returning gymnasium's tuples (``env_type="gymnasium"``)."""

    env_type = "gymnasium"

    def _to(self, obs: Any, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
            infos: dict[str, Any], reset: bool, return_info: bool) -> Any:
        if reset:
            return obs, infos
        return obs, rewards, terminated, truncated, infos


class GymEnvPool(EnvPool):
    """An :class:`EnvPool` returning old gym's tuples (``env_type="gym"``): ``done`` and
    ``info["TimeLimit.truncated"]`` in place of ``terminated`` / ``truncated``."""

    env_type = "gym"

    def _to(self, obs: Any, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
            infos: dict[str, Any], reset: bool, return_info: bool) -> Any:
        if reset and not return_info:
            return obs
        infos["TimeLimit.truncated"] = truncated & ~terminated
        if reset:
            return obs, infos
        return obs, rewards, terminated | truncated, infos
