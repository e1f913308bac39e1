"""Small deterministic envs for testing vector envs: every kind of space a batch buffer handles,
episodes ending at different times, sparse infos. Module-level, so every start method pickles them.
"""

from __future__ import annotations

import os
import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["CountingEnv", "DictTupleEnv", "FaultyEnv", "TextEnv", "TupleDiscreteEnv"]


class _EpisodeEnv(gym.Env):
    """Shared episode logic: random termination, truncation at ``max_steps``, sparse infos."""

    def __init__(self, max_steps: int, p_terminate: float, observation_space: gym.Space,
                 action_space: gym.Space) -> None:
        self.max_steps, self.p_terminate, self.t = max_steps, p_terminate, 0
        self.observation_space, self.action_space = observation_space, action_space

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        info: dict[str, Any] = {}
        if options:
            info["options_seen"] = sorted(options)
        if self.np_random.random() < 0.5:
            info["reset_note"] = int(self.np_random.integers(100))
        return self._obs(), info

    def step(self, action):
        self.t += 1
        draw = self.np_random.random()
        terminated = bool(draw < self.p_terminate)
        truncated = self.t >= self.max_steps and not terminated
        reward = float(self.np_random.normal()) + self._action_value(action)
        info: dict[str, Any] = {}
        if self.t % 3 == 0:
            info["every_third"] = self.t
        if draw > 0.8:
            info["vec"] = self.np_random.random(2).astype(np.float32)
            info["nested"] = {"level": float(draw), "tag": "high"}
        if draw < 0.2:
            info["flag"] = True
        return self._obs(), reward, terminated, truncated, info

    def _obs(self) -> Any:
        raise NotImplementedError

    def _action_value(self, action: Any) -> float:
        raise NotImplementedError


class DictTupleEnv(_EpisodeEnv):
    """Dict observation with nested Tuple, every fixed leaf kind; Tuple action."""

    def __init__(self, max_steps: int = 12, p_terminate: float = 0.08) -> None:
        super().__init__(max_steps, p_terminate, spaces.Dict({
            "pos": spaces.Box(-1.0, 1.0, (3,), np.float32),
            "count": spaces.Discrete(50),
            "flags": spaces.MultiBinary(4),
            "nested": spaces.Tuple((spaces.MultiDiscrete([3, 4]), spaces.Box(0.0, 1.0, (2, 2), np.float64))),
        }), spaces.Tuple((spaces.Discrete(3), spaces.Box(-1.0, 1.0, (2,), np.float32))))

    def _obs(self):
        r = self.np_random
        return {
            "pos": r.uniform(-1, 1, 3).astype(np.float32),
            "count": np.int64(min(self.t, 49)),
            "flags": r.integers(0, 2, 4).astype(np.int8),
            "nested": (r.integers(0, [3, 4]).astype(np.int64), r.random((2, 2))),
        }

    def _action_value(self, action) -> float:
        return float(action[0]) + float(np.sum(action[1]))


class TupleDiscreteEnv(_EpisodeEnv):
    """Tuple observation (Box, Discrete); MultiDiscrete action."""

    def __init__(self, max_steps: int = 10, p_terminate: float = 0.1) -> None:
        obs_space = spaces.Tuple((spaces.Box(-5, 5, (2,), np.float32), spaces.Discrete(7)))
        super().__init__(max_steps, p_terminate, obs_space, spaces.MultiDiscrete([3, 2]))

    def _obs(self):
        return (self.np_random.uniform(-5, 5, 2).astype(np.float32), np.int64(self.t % 7))

    def _action_value(self, action) -> float:
        return float(action[0] * 2 + action[1])


class CountingEnv(_EpisodeEnv):
    """Discrete observation (the step count), MultiBinary action."""

    def __init__(self, max_steps: int = 8, p_terminate: float = 0.05) -> None:
        super().__init__(max_steps, p_terminate, spaces.Discrete(max_steps + 1), spaces.MultiBinary(3))

    def _obs(self):
        return np.int64(self.t)

    def _action_value(self, action) -> float:
        return float(np.sum(action))


class TextEnv(_EpisodeEnv):
    """A custom (Text) observation space, batched as a tuple of strings; Discrete action."""

    def __init__(self, max_steps: int = 9, p_terminate: float = 0.1) -> None:
        super().__init__(max_steps, p_terminate, spaces.Text(max_length=8, min_length=1), spaces.Discrete(2))

    def _obs(self):
        return "ab"[self.t % 2] * (1 + self.t % 7)

    def _action_value(self, action) -> float:
        return float(action)


class FaultyEnv(gym.Env):
    """A Box env that misbehaves on purpose, for fault-injection tests.

    ``fault`` is one of ``"step_raise"``, ``"reset_raise"``, ``"call_raise"``, ``"exit"``
    (``os._exit(3)``), ``"segfault"``, ``"hang"``, ``"slow"``; it strikes at step ``at``
    (counted from the first step after construction; reset faults on the ``at``-th reset).
    """

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, fault: str | None = None, at: int = 3, sleep: float = 0.05, render_mode=None) -> None:
        self.fault = fault
        self.at = at
        self.sleep = sleep
        self.render_mode = render_mode
        self.steps = 0
        self.resets = 0
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.resets += 1
        if self.fault == "reset_raise" and self.resets >= self.at:
            raise RuntimeError(f"planted reset failure on reset {self.resets}")
        return self.np_random.uniform(-1, 1, 2).astype(np.float32), {}

    def step(self, action):
        self.steps += 1
        if self.steps >= self.at:
            if self.fault == "step_raise":
                raise ValueError(f"planted step failure at step {self.steps}")
            if self.fault == "exit":
                os._exit(3)
            if self.fault == "segfault":
                import ctypes

                ctypes.string_at(0)
            if self.fault == "hang":
                while True:
                    time.sleep(1)
            if self.fault == "slow":
                time.sleep(self.sleep)
        obs = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return obs, 1.0, False, self.steps % 50 == 0, {}

    def planted(self, x: int = 1) -> int:
        """A method for ``call`` tests; raises when ``fault == "call_raise"``."""
        if self.fault == "call_raise":
            raise KeyError(f"planted call failure with x={x}")
        return x * 2

    def render(self):
        return np.full((4, 4, 3), self.steps % 256, dtype=np.uint8)
