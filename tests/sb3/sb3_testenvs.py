"""Environments and helpers for the vecenv.sb3 tests (importable by worker processes)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.wrappers import TimeLimit


class DictEnv(gym.Env):
    """Dict observations (a float vector and a small HxWxC image), random termination, reset
    options and nested infos; made with a TimeLimit so both episode ends occur."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, render_mode: str | None = None) -> None:
        self.observation_space = spaces.Dict(
            {
                "vec": spaces.Box(-5.0, 5.0, (3,), np.float32),
                "img": spaces.Box(0, 255, (6, 7, 3), np.uint8),
            }
        )
        self.action_space = spaces.Discrete(3)
        self.render_mode = render_mode
        self.t = 0
        self.scale = 1.0
        self.bonus = 0.0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.t = 0
        self.scale = float((options or {}).get("scale", 1.0))
        return self._obs(), {"start": int(self.np_random.integers(100)), "scale": self.scale}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.t += 1
        terminated = bool(self.np_random.random() < 0.12)
        reward = 0.5 * float(action) + float(self.np_random.random()) + self.bonus
        return self._obs(), reward, terminated, False, {"t": self.t, "nested": {"a": int(action)}}

    def _obs(self) -> dict[str, np.ndarray]:
        return {
            "vec": (self.np_random.uniform(-1, 1, 3) * self.scale).astype(np.float32),
            "img": self.np_random.integers(0, 256, (6, 7, 3), dtype=np.uint8),
        }

    def render(self) -> np.ndarray:
        return np.full((4, 5, 3), self.t % 256, dtype=np.uint8)

    def add_bonus(self, value: float) -> float:
        self.bonus += value
        return self.bonus


class ImageEnv(DictEnv):
    """Channels-last uint8 image observations only."""

    def __init__(self, render_mode: str | None = None) -> None:
        super().__init__(render_mode)
        self.observation_space = spaces.Box(0, 255, (6, 7, 3), np.uint8)

    def _obs(self) -> np.ndarray:  # type: ignore[override]
        return super()._obs()["img"]


class NanEnv(gym.Env):
    """Box observations that turn NaN at step ``nan_at``."""

    def __init__(self, nan_at: int = 3) -> None:
        self.observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.nan_at = nan_at
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.t += 1
        value = np.nan if self.t == self.nan_at else float(self.t)
        return np.full(2, value, np.float32), 1.0, False, self.t >= 10, {}


def make_dict_env(max_steps: int = 9, render_mode: str | None = None) -> gym.Env:
    return TimeLimit(DictEnv(render_mode), max_episode_steps=max_steps)


def make_image_env(max_steps: int = 9) -> gym.Env:
    return TimeLimit(ImageEnv(), max_episode_steps=max_steps)


def make_cartpole(**kwargs: Any) -> gym.Env:
    return gym.make("CartPole-v1", **kwargs)


def assert_same(a: Any, b: Any, path: str = "value", rtol: float = 0.0) -> None:
    """Equal in structure, value and (for arrays) dtype; ``rtol`` > 0 compares floats closely."""
    if isinstance(b, dict):
        assert isinstance(a, dict), f"{path}: {type(a).__name__} is not a dict"
        assert set(a) == set(b), f"{path}: keys {sorted(map(str, a))} != {sorted(map(str, b))}"
        for key in b:
            assert_same(a[key], b[key], f"{path}[{key!r}]", rtol)
    elif isinstance(b, (list, tuple)):
        assert isinstance(a, (list, tuple)), f"{path}: {type(a).__name__} is not a sequence"
        assert len(a) == len(b), f"{path}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{path}[{i}]", rtol)
    elif isinstance(b, np.ndarray):
        a = np.asarray(a)
        assert a.dtype == b.dtype, f"{path}: dtype {a.dtype} != {b.dtype}"
        assert a.shape == b.shape, f"{path}: shape {a.shape} != {b.shape}"
        if rtol:
            np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-6, err_msg=path)
        else:
            np.testing.assert_array_equal(a, b, err_msg=path)
    elif isinstance(b, (float, np.floating)) and rtol:
        assert np.isclose(a, b, rtol=rtol), f"{path}: {a} != {b}"
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def run_side_by_side(
    ours: Any, theirs: Any, steps: int, seed: int = 0, rtol: float = 0.0, episode_time: bool = True
) -> int:
    """Seed, reset and step both VecEnvs with the same random actions, comparing everything.

    Returns the number of episode ends seen, so callers can check the run covered them.
    """
    ours.seed(seed)
    theirs.seed(seed)
    assert_same(ours.reset(), theirs.reset(), "reset obs", rtol)
    assert_same(ours.reset_infos, list(theirs.reset_infos), "reset_infos")
    ours.action_space.seed(seed)
    ends = 0
    for t in range(steps):
        actions = np.stack([ours.action_space.sample() for _ in range(ours.num_envs)])
        o1, r1, d1, i1 = ours.step(actions)
        o2, r2, d2, i2 = theirs.step(actions)
        assert_same(o1, o2, f"step {t} obs", rtol)
        assert_same(r1, r2, f"step {t} rewards", rtol)
        assert_same(d1, d2, f"step {t} dones")
        if not episode_time:  # wall-clock times differ between the two runs
            for info in (*i1, *i2):
                assert "episode" not in info or info["episode"].pop("t") >= 0
        assert_same(list(i1), list(i2), f"step {t} infos", rtol)
        assert_same(ours.reset_infos, list(theirs.reset_infos), f"step {t} reset_infos")
        ends += int(d1.sum())
    return ends
