"""vecenv.envpool on EnvPool's Atari ids (``"Pong-v5"``): EnvPool's preprocessing, options,
infos and errors; and EnvPool-style infos for every task (no ``_key`` masks, keys that persist).

The layout (spaces, info keys, dtypes, shapes) is checked against a fixed expectation on each
backend, and that expectation against real EnvPool's when it is installed (in a subprocess, so
that no EnvPool thread is alive when the process backend forks).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import vecenv.envpool.registration
from vecenv import envpool

pytest.importorskip("ale_py", reason="ale_py is not installed (pip install 'vecenv[sims]')")
pytest.importorskip("cv2", reason="opencv is not installed (pip install 'vecenv[sims]')")

from vecenv.envpool.atari import ATARI_DEFAULTS, AtariEnv  # noqa: E402

PROCESS = {"num_threads": 2, "backend_kwargs": {"context": "fork"}}
BACKENDS = {"serial": {}, "process": PROCESS}

#: Pong-v5's layout in EnvPool 1.2.5 (``layout`` of its spaces, reset info and step info)
PONG = {
    "observation_space": ["Box", "uint8", [4, 84, 84], 0, 255],
    "action_space": ["Discrete", 6],
    "obs": ["uint8", [4, 84, 84]],
    "info": {
        "env_id": ["int32", []], "players": {"env_id": ["int32", []]}, "lives": ["int32", []],
        "reward": ["float32", []], "terminated": ["int32", []], "ram": ["uint8", [128]],
        "elapsed_step": ["int32", []],
    },
    "step": [["float32", []], ["bool", []], ["bool", []]],
}


def layout(value):
    """Per-env dtype and shape of a batched value (nested dicts kept), JSON-comparable."""
    if isinstance(value, dict):
        return {key: layout(v) for key, v in value.items()}
    return [str(value.dtype), list(value.shape[1:])]


def space_layout(space):
    if isinstance(space, spaces.Discrete):
        return ["Discrete", int(space.n)]
    return ["Box", str(space.dtype), list(space.shape), int(space.low.min()), int(space.high.max())]


def pool_layout(envs) -> dict:
    """``PONG``'s form for a pool: its spaces, the reset batch and one step's batch."""
    obs, info = envs.reset()
    reset = {"obs": layout(obs), "info": layout(info)}
    obs, rew, term, trunc, info = envs.step(np.zeros(len(envs), dtype=np.int64))
    assert {"obs": layout(obs), "info": layout(info)} == reset  # the same keys at reset and step
    return {"observation_space": space_layout(envs.observation_space),
            "action_space": space_layout(envs.action_space), **reset,
            "step": [layout(rew), layout(term), layout(trunc)]}


#: run in a subprocess: real EnvPool's Pong-v5 layout and its Atari config, as two JSON lines
REAL = """
import json, os, sys
import envpool
sys.path.insert(0, os.getcwd())
from test_envpool_atari import ATARI_DEFAULTS, pool_layout
envs = envpool.make("Pong-v5", env_type="gymnasium", num_envs=2)
print(json.dumps(pool_layout(envs)))
keys = {*ATARI_DEFAULTS, "task", "max_episode_steps"}
print(json.dumps({key: value for key, value in envs.config.items() if key in keys}))
"""


@pytest.mark.timeout(120)
def test_the_expected_layout_is_real_envpools():
    pytest.importorskip("envpool", reason="envpool is not installed: compared with PONG only")
    done = subprocess.run([sys.executable, "-c", REAL], capture_output=True, text=True, timeout=100,
                          cwd=os.path.dirname(__file__))
    assert done.returncode == 0, done.stderr[-2000:]
    real, config = (json.loads(line) for line in done.stdout.strip().splitlines()[-2:])
    assert real == PONG
    assert len(config) == len(ATARI_DEFAULTS) + 2
    ours = envpool.make_spec("Pong-v5").config._asdict()
    assert {key: ours[key] for key in config} == config  # every Atari option and its default


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", BACKENDS)
def test_pong_has_envpools_layout(backend):
    envs = envpool.make("Pong-v5", env_type="gymnasium", num_envs=2, backend=backend, **BACKENDS[backend])
    try:
        assert pool_layout(envs) == PONG
        config = envs.config
        assert config["task"] == "pong" and config["task_id"] == "Pong-v5"
        assert config["max_episode_steps"] == 27000 == envs.spec.max_episode_steps
        assert {key: config[key] for key in ATARI_DEFAULTS} == ATARI_DEFAULTS
        obs, rew, term, trunc, info = envs.step(np.array([1, 2]))
        assert info["elapsed_step"].tolist() == [2, 2] and info["lives"].tolist() == [0, 0]
        assert obs.any() and not term.any() and not trunc.any()
    finally:
        envs.close()


@pytest.mark.timeout(60)
def test_options_change_spaces_and_config():
    spec = envpool.make_spec("Breakout-v5", stack_num=2, gray_scale=False, img_height=100,
                             img_width=80, full_action_space=True, frame_skip=2, mode=0)
    assert spec.observation_space == spaces.Box(0, 255, (6, 100, 80), np.uint8)
    assert spec.action_space == spaces.Discrete(18)
    assert (spec.config.stack_num, spec.config.gray_scale, spec.config.img_height,
            spec.config.frame_skip, spec.config.mode, spec.config.task) == (2, False, 100, 2, 0, "breakout")
    envs = envpool.make("Breakout-v5", num_envs=1, backend="serial", stack_num=2, gray_scale=False,
                        img_height=100, img_width=80, render_mode="rgb_array")
    try:
        obs, _ = envs.reset()
        assert obs.shape == (1, 6, 100, 80) and obs.dtype == np.uint8
        assert np.array_equal(obs[0, :3], obs[0, 3:])  # a new game fills the stack
        assert envs.render().shape == (1, 210, 160, 3)
    finally:
        envs.close()


@pytest.mark.timeout(60)
def test_gym_style_and_truncation():
    envs = envpool.make("Pong-v5", env_type="gym", num_envs=2, backend="serial", max_episode_steps=3)
    try:
        assert envs.reset().shape == (2, 4, 84, 84)
        for t in (1, 2, 3):
            obs, rew, done, info = envs.step(np.zeros(2, dtype=np.int64))
            assert info["elapsed_step"].tolist() == [t, t]
        assert done.all() and info["TimeLimit.truncated"].all() and not info["terminated"].any()
        obs, rew, done, info = envs.step(np.zeros(2, dtype=np.int64))  # auto-reset: a new game
        assert info["elapsed_step"].tolist() == [0, 0] and not done.any()
    finally:
        envs.close()


def test_reward_clip_keeps_the_raw_reward_in_info():
    env = AtariEnv("atlantis", reward_clip=True)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(300):
        _, reward, *_, info = env.step(rng.integers(env.action_space.n))
        assert reward == np.sign(info["reward"])
        if info["reward"] > 1:
            break
    else:
        pytest.fail("atlantis gave no reward above 1 in 300 random steps")
    env.close()


def test_episodic_life_ends_an_episode_without_resetting_the_game():
    env = AtariEnv("breakout", episodic_life=True, max_episode_steps=2000)
    _, info = env.reset(seed=1)
    assert info["lives"] == 5 and info["elapsed_step"] == 0
    rng = np.random.default_rng(1)
    losses = 0
    for _ in range(2000):
        _, _, terminated, truncated, info = env.step(rng.integers(env.action_space.n))
        if not (terminated or truncated):
            continue
        lives, elapsed, frame = int(info["lives"]), int(info["elapsed_step"]), env.ale.getEpisodeFrameNumber()
        _, after = env.reset()
        if info["terminated"]:  # the game is over: a new one
            assert losses == 4 and after["lives"] == 5 and after["elapsed_step"] == 0
            break
        losses += 1
        assert terminated and not truncated and 0 < lives
        assert after["lives"] == lives and after["elapsed_step"] == elapsed  # the same game goes on
        assert env.ale.getEpisodeFrameNumber() > frame
    else:
        pytest.fail("breakout's game did not end in 2000 random steps")
    env.close()


@pytest.mark.timeout(60)
def test_a_pool_reports_the_envs_own_elapsed_step_with_episodic_life():
    envs = envpool.make("Breakout-v5", num_envs=1, backend="serial", episodic_life=True, seed=1)
    try:
        envs.reset()
        rng = np.random.default_rng(1)
        for _ in range(500):
            obs, rew, term, trunc, info = envs.step(rng.integers(4, size=1))
            if term[0]:
                break
        assert term[0] and info["lives"][0] == 4
        before = info["elapsed_step"][0]
        obs, rew, term, trunc, info = envs.step(np.zeros(1, dtype=np.int64))  # the auto-reset
        assert info["elapsed_step"][0] == before and info["lives"][0] == 4  # not a new game
    finally:
        envs.close()


@pytest.mark.parametrize(("kwargs", "error", "words"), [
    ({"stack_nums": 2}, ValueError, ["'stack_nums'", "stack_num", "gray_scale"]),
    ({"width": 84}, ValueError, ["'width'", "img_width"]),
    ({"stack_num": 0}, ValueError, ["stack_num", "int >= 1", "0"]),
    ({"img_height": 84.0}, ValueError, ["img_height", "84.0"]),
    ({"noop_max": True}, ValueError, ["noop_max", "True"]),
    ({"gray_scale": 1}, TypeError, ["gray_scale", "bool", "1"]),
    ({"repeat_action_probability": 1.5}, ValueError, ["repeat_action_probability", "[0, 1]"]),
    ({"mode": 99}, ValueError, ["mode", "pong offers", "99"]),
    ({"difficulty": -2}, ValueError, ["difficulty", "-1"]),
    ({"render_mode": "human"}, ValueError, ["render_mode", "rgb_array"]),
    ({"max_episode_steps": 0}, ValueError, ["max_episode_steps", "int >= 1"]),
])
def test_bad_options_are_refused_before_any_worker_starts(monkeypatch, kwargs, error, words):
    def never(*args, **kw):
        raise AssertionError("a vector env was made")

    monkeypatch.setattr(vecenv.envpool.registration, "make_vector_env", never)
    with pytest.raises(error) as caught:
        envpool.make("Pong-v5", num_envs=2, backend="process", **kwargs)
    for word in words:
        assert word in str(caught.value), (word, str(caught.value))


def test_without_ale_py_an_atari_id_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ale_py", None)
    with pytest.raises(ImportError, match=r"vecenv\[sims\]"):
        envpool.make("Pong-v5", num_envs=1, backend="serial")
    assert "Pong-v5" not in envpool.list_all_envs()


def test_ids_gymnasium_knows_are_unchanged():
    import ale_py

    gym.register_envs(ale_py)
    ids = envpool.list_all_envs()
    assert {"Pong-v5", "MontezumaRevenge-v5", "Breakout-v5", "ALE/Pong-v5", "CartPole-v1"} <= set(ids)
    assert envpool.make_spec("ALE/Pong-v5").observation_space.shape == (210, 160, 3)
    spec = envpool.make_spec("CartPole-v1")
    assert "stack_num" not in spec.config._fields and spec.max_episode_steps == 500
    with pytest.raises(gym.error.Error):
        envpool.make_spec("Pongg-v5")  # not a game: gymnasium's own error
    with pytest.raises(TypeError, match="stack_num"):
        envpool.make_spec("CartPole-v1", stack_num=2)  # a gymnasium id takes its own keywords


# ==================================================================== EnvPool-style infos
class Sparse(gym.Env):
    """Info keys that come and go: ``start`` at reset, ``hit`` and nested ``detail`` on some steps."""

    observation_space = spaces.Box(0, 10, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {"start": np.int16(7)}

    def step(self, action):
        self.t += 1
        info = {}
        if self.t % 3 == 0:
            info["hit"] = np.float32(self.t)
            info["detail"] = {"where": np.arange(2, dtype=np.uint8) + self.t}
        return np.full(1, self.t, np.float32), 1.0, self.t >= 5, False, info


def no_masks(info, path="info"):
    for key, value in info.items():
        assert not (key.startswith("_") and key[1:] in info), f"{path}[{key!r}]"
        if isinstance(value, dict):
            no_masks(value, f"{path}[{key!r}]")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("batch_size", [None, 2])
def test_infos_have_no_masks_and_keep_every_key_seen(batch_size):
    envs = envpool.make(Sparse, num_envs=4, batch_size=batch_size, backend="serial")
    try:
        envs.async_reset()
        seen: dict = {}
        for t in range(40):
            obs, rew, term, trunc, info = envs.recv()
            no_masks(info)
            n = len(info["env_id"])
            for key, kind in seen.items():
                assert key in info and layout(info[key]) == kind, (t, key)
            seen.update({key: layout(value) for key, value in info.items()})
            if "hit" in seen:
                hit = info["hit"]
                assert hit.shape == (n,) and hit.dtype == np.float32
                assert info["detail"]["where"].shape == (n, 2)
                assert info["detail"]["where"].dtype == np.uint8
            envs.send(np.zeros(n, dtype=np.int64), info["env_id"])
        assert {"start", "hit", "detail"} <= set(seen)
        envs.recv()
        if batch_size is None:  # a reset batch after steps: the step keys, zero-filled
            obs, info = envs.reset()
            no_masks(info)
            assert info["hit"].tolist() == [0.0] * 4 and info["start"].tolist() == [7] * 4
            assert info["detail"]["where"].shape == (4, 2)
    finally:
        envs.close()
