"""EnvPool's infos for its MuJoCo task ids (``"HalfCheetah-v5"``, ``"Ant-v4"``, ...).

EnvPool's C++ MuJoCo envs return the same info keys on reset as on step, every value a float64
(zeros on reset where nothing has happened yet), and name some of them differently from
gymnasium's Python envs: ``reward_run`` where gymnasium's HalfCheetah-v5 says ``reward_forward``,
Humanoid's ``reward_linvel`` / ``reward_alive`` / ``reward_impact`` / ``reward_quadctrl`` for
gymnasium's ``reward_forward`` / ``reward_survive`` / ``reward_contact`` / ``reward_ctrl``. Keys
that gymnasium's env returns and EnvPool's does not (Hopper's ``z_distance_from_origin``,
Humanoid's ``tendon_length``, ...) are left out, so a pool from :func:`vecenv.envpool.make`
returns EnvPool's keys and dtypes. :class:`EnvPoolMujocoInfos` does this in each env; keys that
the table below does not know (a user's wrapper's) pass through unchanged.
"""

from __future__ import annotations

import re
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

#: an EnvPool info key: the gymnasium keys its value comes from (first found; v5 names, then v4),
#: and its value when the env gives none of them (on reset)
_Key = tuple[tuple[str, ...], float]

_POS = {"x_position": (("x_position",), 0.0), "x_velocity": (("x_velocity",), 0.0)}
_PLANE = {**_POS, "y_position": (("y_position",), 0.0), "y_velocity": (("y_velocity",), 0.0),
          "distance_from_origin": (("distance_from_origin",), 0.0)}

#: task (the id without its version) -> EnvPool's info keys, as EnvPool 1.2.5 returns them
MUJOCO_INFOS: dict[str, dict[str, _Key]] = {
    "HalfCheetah": {"reward_run": (("reward_forward", "reward_run"), 0.0),
                    "reward_ctrl": (("reward_ctrl",), 0.0), **_POS},
    "Hopper": dict(_POS),
    "Walker2d": dict(_POS),
    "Ant": {"reward_forward": (("reward_forward",), 0.0), "reward_ctrl": (("reward_ctrl",), 0.0),
            "reward_contact": (("reward_contact",), 0.0),
            "reward_survive": (("reward_survive",), 0.0), **_PLANE},
    "Humanoid": {"reward_linvel": (("reward_forward", "reward_linvel"), 0.0),
                 "reward_quadctrl": (("reward_ctrl", "reward_quadctrl"), 0.0),
                 "reward_alive": (("reward_survive", "reward_alive"), 0.0),
                 "reward_impact": (("reward_contact", "reward_impact"), 0.0), **_PLANE},
    "HumanoidStandup": {"reward_linup": (("reward_linup",), 0.0),
                        "reward_quadctrl": (("reward_quadctrl", "reward_ctrl"), 0.0),
                        "reward_impact": (("reward_impact", "reward_contact"), 0.0),
                        "reward_alive": (("reward_alive",), 1.0)},
    "Swimmer": {"reward_fwd": (("reward_forward", "reward_fwd"), 0.0),
                "reward_ctrl": (("reward_ctrl",), 0.0), **_PLANE},
    "Reacher": {"reward_dist": (("reward_dist",), 0.0), "reward_ctrl": (("reward_ctrl",), 0.0)},
    "Pusher": {"reward_dist": (("reward_dist",), 0.0), "reward_ctrl": (("reward_ctrl",), 0.0),
               "reward_near": (("reward_near",), 0.0)},
    "InvertedPendulum": {},
    "InvertedDoublePendulum": {},
}

#: gymnasium's info keys of each task that EnvPool does not return (dropped)
_DROPPED: dict[str, frozenset[str]] = {
    task: frozenset({"x_position", "x_velocity", "y_position", "y_velocity", "z_distance_from_origin",
                     "distance_from_origin", "tendon_length", "tendon_velocity", "forward_reward",
                     "reward_forward", "reward_ctrl", "reward_survive", "reward_contact", "reward_run",
                     "reward_linvel", "reward_quadctrl", "reward_alive", "reward_impact", "reward_fwd",
                     "reward_linup", "reward_dist", "reward_near", "distance_penalty",
                     "velocity_penalty"} - set(keys))
    for task, keys in MUJOCO_INFOS.items()
}
_ID = re.compile(r"(?P<task>[A-Za-z0-9]+)-v[45]")


def mujoco_task(task_id: str) -> str | None:
    """The task of an EnvPool MuJoCo id (``"HalfCheetah-v5"`` -> ``"HalfCheetah"``), else None.

    Only the ``-v4`` and ``-v5`` ids, which gymnasium registers and EnvPool also has.
    """
    m = _ID.fullmatch(task_id)
    return m["task"] if m and m["task"] in MUJOCO_INFOS else None


class EnvPoolMujocoInfos(gym.Wrapper):
    """Infos as EnvPool's MuJoCo ``task`` returns them: its keys on reset and step, float64."""

    def __init__(self, env: gym.Env, task: str) -> None:
        super().__init__(env)
        if task not in MUJOCO_INFOS:
            raise ValueError(f"task: expected one of EnvPool's MuJoCo tasks {sorted(MUJOCO_INFOS)}, "
                             f"got {task!r}")
        self.task = task
        self._keys = MUJOCO_INFOS[task]
        self._dropped = _DROPPED[task]

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        return obs, self._infos(info)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, self._infos(info)

    def _infos(self, info: dict[str, Any]) -> dict[str, Any]:
        out = {key: value for key, value in info.items()
               if key not in self._dropped and key not in self._keys}
        for key, (sources, default) in self._keys.items():
            value = next((info[s] for s in sources if s in info), default)
            out[key] = np.float64(value)
        return out
