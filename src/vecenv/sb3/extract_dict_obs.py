"""Keep one entry of a Dict observation: :class:`VecExtractDictObs`."""

from __future__ import annotations

from gymnasium import spaces

from vecenv.sb3._errors import AssertionTypeError
from vecenv.sb3.base import VecEnv, VecEnvObs, VecEnvStepReturn, VecEnvWrapper


class VecExtractDictObs(VecEnvWrapper):
    """Replace Dict observations (and terminal observations) by their entry ``key``."""

    def __init__(self, venv: VecEnv, key: str) -> None:
        if not isinstance(venv.observation_space, spaces.Dict):
            raise AssertionTypeError(
                "VecExtractDictObs can only be used with Dict obs space, not "
                f"{venv.observation_space}"
            )
        self.key = key
        super().__init__(venv, observation_space=venv.observation_space.spaces[key])

    def reset(self) -> VecEnvObs:
        return self.venv.reset()[self.key]  # type: ignore[index, call-overload]

    def step_wait(self) -> VecEnvStepReturn:
        obs, rewards, dones, infos = self.venv.step_wait()
        for info in infos:
            if "terminal_observation" in info:
                info["terminal_observation"] = info["terminal_observation"][self.key]
        return obs[self.key], rewards, dones, infos  # type: ignore[index, call-overload]
