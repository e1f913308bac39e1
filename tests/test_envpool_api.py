"""vecenv.envpool: EnvPool's Python API on vecenv's engine.

Every trajectory is checked value for value against plain gymnasium envs (or gymnasium's
SyncVectorEnv) given the same seeds and actions, stepped the way EnvPool steps them: env ``i``
seeded ``seed + i`` at its first reset, a finished env reset on its next step with reward 0.
"""

from __future__ import annotations

import doctest
import multiprocessing
import os
import time
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.wrappers import TimeLimit

import vecenv.envpool.pool
import vecenv.envpool.styles
from vecenv import envpool

PROCESS = {"num_workers": 2, "backend_kwargs": {"context": "fork"}}
BACKENDS = {"serial": {}, "process": PROCESS}


class Corridor(gym.Env):
    """A custom env: a walker on a short line that slips at random; ends at either end.

    Box observation, Discrete(3) action (left, stay, right), infos at reset and step, and an
    ``rgb_array`` render whose pixels hold the position.
    """

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, half_length: int = 3, render_mode: str | None = None) -> None:
        self.half_length = half_length
        self.render_mode = render_mode
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Discrete(3)
        self.pos = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = int(self.np_random.integers(-1, 2))
        return self._obs(), {"start": self.pos}

    def step(self, action):
        move = int(action) - 1
        if self.np_random.random() < 0.25:
            move = -move
        self.pos += move
        terminated = abs(self.pos) >= self.half_length
        reward = 1.0 if self.pos >= self.half_length else (-1.0 if terminated else -0.01)
        return self._obs(), reward, terminated, False, {"pos": self.pos}

    def _obs(self) -> np.ndarray:
        noise = self.np_random.uniform(-1, 1)
        return np.array([self.pos / self.half_length, noise], dtype=np.float32)

    def render(self):
        return np.full((4, 5, 3), self.pos + 10, dtype=np.uint8)


class Idle(gym.Env):
    """Never ends by itself: only a time limit ends its episodes. Observation: its step count."""

    observation_space = spaces.Box(0, 1000, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.t], dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t], dtype=np.float32), 1.0, False, False, {"env_id": -1}


class Sleepy(Idle):
    """Idle, but each step takes 0.3 s (for timeouts)."""

    def step(self, action):
        time.sleep(0.3)
        return super().step(action)


def cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


class Reference:
    """One plain gymnasium env per env id, stepped as EnvPool steps it (next-step auto-reset)."""

    def __init__(self, make_env, seeds) -> None:
        self.envs = [make_env() for _ in seeds]
        self.seeds = list(seeds)
        self.started = [False] * len(seeds)
        self.ended = [False] * len(seeds)
        self.elapsed = [0] * len(seeds)

    def result(self, i: int, action=None):
        """Env ``i``'s next result: ``(obs, reward, terminated, truncated, elapsed, info)``."""
        env = self.envs[i]
        if not self.started[i] or self.ended[i]:
            obs, info = env.reset(seed=None if self.started[i] else self.seeds[i])
            reward, terminated, truncated, elapsed = 0.0, False, False, 0
            self.started[i] = True
        else:
            obs, reward, terminated, truncated, info = env.step(action)
            elapsed = self.elapsed[i] + 1
        self.ended[i], self.elapsed[i] = terminated or truncated, elapsed
        return obs, reward, terminated, truncated, elapsed, info

    def close(self) -> None:
        for env in self.envs:
            env.close()


def check_row(row, i, obs, rew, term, trunc, info, expected, info_key=None):
    e_obs, e_rew, e_term, e_trunc, e_elapsed, e_info = expected
    np.testing.assert_array_equal(obs[row], e_obs, err_msg=f"env {i}")
    assert rew[row] == np.float32(e_rew), (i, rew[row], e_rew)
    assert (term[row], trunc[row]) == (e_term, e_trunc), i
    assert info["elapsed_step"][row] == e_elapsed, (i, info["elapsed_step"][row], e_elapsed)
    if info_key is not None and info_key in e_info:
        assert f"_{info_key}" not in info and info[info_key][row] == e_info[info_key]


def envpool_loop(envs, ref: Reference, num_recv: int, n_actions: int, seed: int = 0,
                 info_key: str | None = None, float_actions: bool = False) -> int:
    """EnvPool's async loop (async_reset, then recv -> send(actions, info["env_id"])), each batch
    checked against ``ref``; returns how many episodes ended."""
    rng = np.random.default_rng(seed)
    last_action: dict[int, int] = {}
    ended = 0
    envs.async_reset()
    for _ in range(num_recv):
        obs, rew, term, trunc, info = envs.recv()
        env_id = info["env_id"]
        assert env_id.dtype == np.int32 and rew.dtype == np.float32
        assert len(env_id) == envs.config["batch_size"] == len(obs)
        np.testing.assert_array_equal(info["players"]["env_id"], env_id)
        for row, i in enumerate(env_id.tolist()):
            check_row(row, i, obs, rew, term, trunc, info, ref.result(i, last_action.get(i)), info_key)
        ended += int(np.sum(term | trunc))
        actions = rng.integers(0, n_actions, len(env_id))
        last_action.update(zip(env_id.tolist(), actions.tolist(), strict=True))
        envs.send(actions.astype(np.float32) if float_actions else actions, env_id)
    return ended


# ==================================================================== the EnvPool loop
@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_async_loop_on_cartpole_matches_gymnasium(backend):
    with envpool.make("CartPole-v1", env_type="gymnasium", num_envs=4, batch_size=2, seed=5,
                      backend=backend, **BACKENDS[backend]) as envs:
        assert envs.is_async and len(envs) == 4
        ref = Reference(cartpole, [5, 6, 7, 8])
        assert envpool_loop(envs, ref, 150, 2, float_actions=backend == "serial") > 0
        ref.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", ["serial", "thread", "process"])
def test_async_loop_on_a_custom_env_matches_gymnasium(backend):
    kwargs = {"num_workers": 4, "backend_kwargs": {"context": "fork"}} if backend == "process" else {}
    if backend == "thread":
        kwargs = {"num_threads": 2}
    with envpool.make(Corridor, num_envs=4, batch_size=3, seed=11, backend=backend,
                      half_length=3, **kwargs) as envs:
        ref = Reference(lambda: Corridor(half_length=3), [11, 12, 13, 14])
        assert envpool_loop(envs, ref, 120, 3, seed=1, info_key="pos") > 5
        ref.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_sync_step_matches_gymnasium_sync_vector_env(backend):
    """batch_size == num_envs: every env each step, in env order, as gymnasium's SyncVectorEnv."""
    rng = np.random.default_rng(3)
    ref = gym.vector.SyncVectorEnv([cartpole] * 3)
    with envpool.make("CartPole-v1", num_envs=3, seed=9, backend=backend, **BACKENDS[backend]) as envs:
        assert not envs.is_async
        obs, info = envs.reset()
        e_obs, _ = ref.reset(seed=9)
        np.testing.assert_array_equal(obs, e_obs)
        np.testing.assert_array_equal(info["env_id"], [0, 1, 2])
        for _ in range(120):
            actions = rng.integers(0, 2, 3)
            obs, rew, term, trunc, info = envs.step(actions)
            e_obs, e_rew, e_term, e_trunc, _ = ref.step(actions)
            np.testing.assert_array_equal(obs, e_obs)
            np.testing.assert_array_equal(rew, e_rew.astype(np.float32))
            np.testing.assert_array_equal(term, e_term)
            np.testing.assert_array_equal(trunc, e_trunc)
    ref.close()


@pytest.mark.timeout(60)
def test_cleanrl_style_sync_loop_with_gym_type_and_a_wrapper():
    """CleanRL's envpool shim: set num_envs / single_*_space, wrap, reset() -> obs, 4-tuples."""

    class RecordEpisodeStatistics(gym.Wrapper):
        def __init__(self, env):
            super().__init__(env)
            self.num_envs = env.num_envs
            self.finished: list[tuple[float, int]] = []

        def reset(self, **kwargs):
            observations = super().reset(**kwargs)
            self.returns = np.zeros(self.num_envs, dtype=np.float32)
            self.lengths = np.zeros(self.num_envs, dtype=np.int32)
            return observations

        def step(self, action):
            observations, rewards, dones, infos = super().step(action)
            self.returns += rewards
            self.lengths += infos["elapsed_step"] > 0  # not the auto-reset step (reward 0)
            for i in np.flatnonzero(dones):
                self.finished.append((float(self.returns[i]), int(self.lengths[i])))
            self.returns[dones] = 0
            self.lengths[dones] = 0
            return observations, rewards, dones, infos

    envs = envpool.make("CartPole-v1", env_type="gym", num_envs=4, seed=1, backend="serial")
    envs.num_envs = 4
    envs.single_action_space = envs.action_space
    envs.single_observation_space = envs.observation_space
    # the gym package's spaces where it is installed (as EnvPool's), else gymnasium's
    gym_spaces = getattr(vecenv.envpool.styles.old_gym(), "spaces", spaces)
    assert isinstance(envs.single_action_space, gym_spaces.Discrete)
    assert envs.single_observation_space.shape == (4,)
    wrapped = RecordEpisodeStatistics(envs)
    next_obs = wrapped.reset()
    assert next_obs.shape == (4, 4)
    rng = np.random.default_rng(0)
    for _ in range(200):
        actions = rng.integers(0, envs.single_action_space.n, envs.num_envs)
        next_obs, reward, done, info = wrapped.step(actions)
        assert done.dtype == np.bool_ and "TimeLimit.truncated" in info
    # CartPole pays 1 a step: each finished episode's return is its length
    assert wrapped.finished and all(ret == length for ret, length in wrapped.finished)
    wrapped.close()
    assert envs.vector_env.closed


# ==================================================================== EnvPool's conventions
@pytest.fixture
def without_gym(monkeypatch):
    """env_type="gym" as it is where the gym package is not installed: old gym's tuples."""
    monkeypatch.setattr(vecenv.envpool.styles, "old_gym", lambda: None)


@pytest.mark.timeout(60)
def test_gym_type_returns_four_tuples_with_done_and_time_limit(without_gym):
    """env_type="gym": (obs, rew, done, info), info["TimeLimit.truncated"], reset() -> obs."""
    seed, n, limit = 4, 3, 4
    ref = gym.vector.SyncVectorEnv([lambda: TimeLimit(Corridor(half_length=4), limit)] * n)
    e_obs, _ = ref.reset(seed=seed)
    with envpool.make_gym(Corridor, num_envs=n, seed=seed, backend="serial", half_length=4,
                          max_episode_steps=limit) as envs:
        assert type(envs).__name__ == "GymEnvPool" and envs.config["max_episode_steps"] == limit
        obs = envs.reset()
        assert isinstance(obs, np.ndarray)
        np.testing.assert_array_equal(obs, e_obs)
        rng = np.random.default_rng(0)
        saw_truncation = saw_termination = False
        for _ in range(40):
            actions = rng.integers(0, 3, n)
            result = envs.step(actions)
            assert len(result) == 4
            obs, rew, done, info = result
            e_obs, e_rew, e_term, e_trunc, _ = ref.step(actions)
            np.testing.assert_array_equal(obs, e_obs)
            np.testing.assert_array_equal(rew, e_rew.astype(np.float32))
            np.testing.assert_array_equal(done, e_term | e_trunc)
            np.testing.assert_array_equal(info["TimeLimit.truncated"], e_trunc & ~e_term)
            saw_truncation |= bool((e_trunc & ~e_term).any())
            saw_termination |= bool(e_term.any())
        assert saw_truncation and saw_termination
    ref.close()


@pytest.mark.timeout(60)
def test_gym_reset_return_info_and_recv_reset_forms(without_gym):
    with envpool.make("CartPole-v1", env_type="gym", num_envs=2, seed=0, backend="serial",
                      gym_reset_return_info=True) as envs:
        obs, info = envs.reset()
        assert obs.shape == (2, 4) and info["TimeLimit.truncated"].tolist() == [False, False]
        envs.async_reset()
        assert isinstance(envs.recv(reset=True, return_info=False), np.ndarray)
        envs.async_reset()
        obs, info = envs.recv(reset=True, return_info=True)
        assert obs.shape == (2, 4) and info["env_id"].tolist() == [0, 1]
        envs.async_reset()
        assert len(envs.recv()) == 4  # recv after async_reset: the step form, reward 0
    # EnvPool's async loop in the gym form: recv() -> (obs, rew, done, info)
    with envpool.make_gym(Corridor, num_envs=3, batch_size=2, seed=0, backend="serial") as envs:
        envs.async_reset()
        for _ in range(20):
            obs, rew, done, info = envs.recv()
            assert obs.shape == (2, 2) and done.dtype == np.bool_ and "TimeLimit.truncated" in info
            envs.send(np.ones(2, dtype=np.int64), info["env_id"])
    with envpool.make("CartPole-v1", num_envs=2, seed=0, backend="serial") as envs:
        envs.async_reset()
        obs, info = envs.recv(reset=True)
        assert obs.shape == (2, 4)
        envs.async_reset()
        obs, rew, term, trunc, info = envs.recv(False)  # a bool is `reset`, never a timeout
        assert rew.tolist() == [0.0, 0.0] and not term.any() and not trunc.any()


@pytest.mark.timeout(60)
def test_infos_dtypes_and_properties():
    with envpool.make("CartPole-v1", num_envs=4, batch_size=2, seed=0, backend="serial") as envs:
        assert len(envs) == 4 and envs.is_async and envs.num_envs == 4
        assert envs.all_env_ids.dtype == np.int32 and envs.all_env_ids.tolist() == [0, 1, 2, 3]
        single = gym.make("CartPole-v1")
        assert envs.observation_space == single.observation_space == envs.spec.observation_space
        assert envs.action_space == single.action_space == envs.spec.gymnasium_action_space
        assert envs.single_action_space == envs.action_space
        config = envs.config
        for key in ("num_envs", "batch_size", "num_threads", "max_num_players", "seed",
                    "thread_affinity_offset", "gym_reset_return_info", "max_episode_steps"):
            assert key in config, key
        assert (config["num_envs"], config["batch_size"], config["seed"]) == (4, 2, 0)
        assert config["max_episode_steps"] == 500 and envs.spec.reward_threshold == 475.0
        assert envs.spec.config.num_envs == 4
        config["num_envs"] = 99
        assert envs.config["num_envs"] == 4  # a fresh copy each time
        envs.async_reset()
        obs, rew, term, trunc, info = envs.recv()
        assert set(info) == {"env_id", "players", "elapsed_step"}
        assert info["env_id"].dtype == info["elapsed_step"].dtype == np.int32
        assert info["players"]["env_id"].dtype == np.int32
        assert rew.dtype == np.float32 and term.dtype == trunc.dtype == np.bool_
        assert "GymnasiumEnvPool(" in repr(envs) and "num_envs=4" in str(envs)
        envs.action_space.n -= 1  # a caller's edit of the pool's space (seen in EnvPool users' code)
        assert envs.vector_env.single_action_space.n == 2  # leaves the engine's alone
        envs.send(np.ones(2, dtype=np.int64), info["env_id"])
        envs.recv()
    with envpool.make("CartPole-v1", num_envs=3, batch_size=0, backend="serial") as envs:
        assert not envs.is_async and envs.config["seed"] == 42  # EnvPool's defaults
        obs, _ = envs.reset()
        np.testing.assert_array_equal(obs[2], gym.make("CartPole-v1").reset(seed=44)[0])


@pytest.mark.timeout(60)
def test_elapsed_step_and_next_step_autoreset():
    """EnvPool's auto-reset table: steps 1..limit, then a reset step (reward 0, elapsed 0)."""
    with envpool.make(Idle, num_envs=2, seed=0, max_episode_steps=3, backend="serial") as envs:
        envs.reset()
        seen = []
        for _ in range(8):
            obs, rew, term, trunc, info = envs.step(np.zeros(2, dtype=np.int64))
            seen.append((int(info["elapsed_step"][0]), float(rew[0]), bool(trunc[0]), float(obs[0, 0])))
            assert info["env_id"].tolist() == [0, 1] and "_env_id" not in info  # EnvPool's, not the env's
        assert seen == [(1, 1.0, False, 1.0), (2, 1.0, False, 2.0), (3, 1.0, True, 3.0),
                        (0, 0.0, False, 0.0), (1, 1.0, False, 1.0), (2, 1.0, False, 2.0),
                        (3, 1.0, True, 3.0), (0, 0.0, False, 0.0)]


@pytest.mark.timeout(60)
def test_seeds_at_make_reproduce():
    def trajectory(seed):
        with envpool.make(Corridor, num_envs=3, batch_size=2, seed=seed, backend="serial") as envs:
            envs.async_reset()
            out = []
            for _ in range(30):
                obs, rew, term, trunc, info = envs.recv()
                out.append((obs.copy(), rew.copy(), info["env_id"].copy()))
                envs.send(np.ones(2, dtype=np.int64), info["env_id"])
            return out

    same = trajectory(3)
    for a, b in zip(same, trajectory(3), strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)
    assert not all(np.array_equal(a[0], b[0]) for a, b in zip(same, trajectory(4), strict=True))
    # a sequence gives one seed per env
    with envpool.make(Corridor, num_envs=2, seed=[7, 3], backend="serial") as envs:
        obs, _ = envs.reset()
        np.testing.assert_array_equal(obs[1], Corridor().reset(seed=3)[0])
        assert envs.config["seed"] == [7, 3]
    with envpool.make(Corridor, num_envs=2, seed=None, backend="serial") as envs:
        assert envs.reset()[0].shape == (2, 2)


@pytest.mark.timeout(60)
def test_reset_some_envs_in_sync_mode():
    with envpool.make(Corridor, num_envs=4, seed=20, backend="serial") as envs:
        obs, info = envs.reset(np.array([2, 0], dtype=np.int32))
        assert info["env_id"].tolist() == [2, 0] and obs.shape == (2, 2)
        np.testing.assert_array_equal(obs[0], Corridor().reset(seed=22)[0])
        np.testing.assert_array_equal(obs[1], Corridor().reset(seed=20)[0])
        assert info["start"].tolist() == [Corridor().reset(seed=22)[1]["start"],
                                          Corridor().reset(seed=20)[1]["start"]]
        # every env's first reset gets its make-time seed, whenever it comes
        obs, info = envs.reset(options={"reset_mask": np.array([False, True, False, True])})
        assert info["env_id"].tolist() == [1, 3]
        np.testing.assert_array_equal(obs[1], Corridor().reset(seed=23)[0])
        obs, info = envs.reset(3)
        assert info["env_id"].tolist() == [3] and info["elapsed_step"].tolist() == [0]
        obs, rew, term, trunc, info = envs.step(np.ones(4))
        assert obs.shape == (4, 2) and info["elapsed_step"].tolist() == [1, 1, 1, 1]
        with pytest.warns(UserWarning, match="seed"):
            envs.reset(seed=1)
        with pytest.warns(UserWarning, match="abandoned"):
            envs.seed(1)
        # the engine's reset_mask check, each fault a ValueError of reset
        for mask in ([1, 0, 0, 0], [True, False], [False] * 4):
            with pytest.raises(ValueError, match=r"reset: `options\['reset_mask'\]`"):
                envs.reset(options={"reset_mask": mask})


@pytest.mark.timeout(60)
def test_send_forms_and_action_casts():
    with envpool.make(Corridor, num_envs=3, batch_size=2, seed=0, backend="serial") as envs:
        envs.async_reset()
        _, _, _, _, info = envs.recv()
        first = info["env_id"]
        envs.send(np.array([2.0, 0.9]))  # no env_id: the envs of the last batch; floats cast
        with pytest.raises(ValueError, match="still stepping"):
            envs.send(np.array([1, 1]), first)  # so those envs are busy now
        _, _, _, _, info = envs.recv()
        envs.send({"action": np.array([1, 1]), "env_id": info["env_id"]})  # EnvPool's dict form
        envs.recv()
        with pytest.raises(ValueError, match="finite"):
            envs.send(np.array([np.nan, 1.0]))
        with pytest.raises(ValueError, match="twice"):
            envs.send({"action": np.array([1, 1]), "env_id": [0, 1]}, [0, 1])
    with envpool.make(Corridor, num_envs=3, seed=0, backend="serial") as envs, \
            envpool.make(Corridor, num_envs=3, seed=0, backend="serial") as twin:
        envs.reset()
        twin.reset()
        for _ in range(10):
            a = envs.step(np.array([0.0, 1.7, 2.2]))  # EnvPool casts: 0, 1, 2
            b = twin.step(np.array([0, 1, 2]))
            np.testing.assert_array_equal(a[0], b[0])
        # sync mode: a permutation of every env works (action k to env env_id[k])
        a = envs.step(np.array([2, 1, 0]), env_id=np.array([2, 1, 0]))
        b = twin.step(np.array([0, 1, 2]))
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[4]["env_id"], [0, 1, 2])
        with pytest.raises(ValueError, match="sync mode"):
            envs.send(np.array([1]), env_id=np.array([0]))


@pytest.mark.timeout(60)
def test_render_from_the_pool():
    with envpool.make(Corridor, num_envs=2, seed=0, backend="serial", render_mode="rgb_array",
                      render_env_id=1) as envs:
        envs.reset()
        frames = envs.render()
        assert frames.shape == (1, 4, 5, 3) and frames.dtype == np.uint8
        assert envs.render(env_ids=[0, 1]).shape == (2, 4, 5, 3)
        with pytest.raises(ValueError, match="camera"):
            envs.render(camera_id=0)
    with envpool.make(Corridor, num_envs=1, backend="serial") as envs:
        envs.reset()
        with pytest.raises(RuntimeError, match="render_mode"):
            envs.render()


@pytest.mark.timeout(60)
def test_make_spec_and_shortcuts():
    spec = envpool.make_spec("CartPole-v1", num_envs=4, max_episode_steps=100)
    assert spec.observation_space == gym.make("CartPole-v1").observation_space
    assert spec.config.num_envs == 4 and spec.max_episode_steps == 100
    assert envpool.make_spec(Corridor, half_length=5).action_space == spaces.Discrete(3)
    with pytest.raises(NotImplementedError, match="dm_env"):
        spec.observation_spec()
    with envpool.make_gymnasium("CartPole-v1", num_envs=1, backend="serial") as envs:
        assert envs.env_type == "gymnasium" and len(envs.reset()) == 2
    assert "CartPole-v1" in envpool.list_all_envs()


@pytest.mark.timeout(60)
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="pinning needs os.sched_setaffinity (Linux)")
def test_thread_affinity_offset_pins_worker_i_to_core_offset_plus_i_on_processes():
    usable = sorted(os.sched_getaffinity(0))
    with envpool.make_gymnasium("CartPole-v1", num_envs=2, num_threads=2, backend="process",
                                thread_affinity_offset=1) as envs:
        pinned = [os.sched_getaffinity(p.pid) for p in envs.vector_env.processes]
        assert pinned == [{usable[(1 + i) % len(usable)]} for i in range(2)]
        assert envs.config["thread_affinity_offset"] == 1
    with envpool.make_gymnasium("CartPole-v1", num_envs=2, num_threads=2, backend="process") as envs:
        assert [os.sched_getaffinity(p.pid) for p in envs.vector_env.processes] == [set(usable)] * 2


@pytest.mark.timeout(60)
def test_recv_timeout_leaves_the_call_pending():
    with envpool.make(Sleepy, num_envs=2, seed=0, backend="thread", num_threads=2) as envs:
        envs.reset()
        envs.send(np.zeros(2, dtype=np.int64))
        with pytest.raises(multiprocessing.TimeoutError):
            envs.recv(timeout=0.01)
        obs, rew, term, trunc, info = envs.recv(timeout=10)
        assert obs[:, 0].tolist() == [1.0, 1.0] and info["elapsed_step"].tolist() == [1, 1]


# ==================================================================== refused, clearly
@pytest.mark.timeout(60)
def test_bad_inputs_are_refused_clearly():
    with envpool.make("CartPole-v1", num_envs=4, batch_size=2, seed=0, backend="serial") as envs:
        envs.async_reset()
        for timeout in (True, False, np.bool_(True)):
            with pytest.raises(TypeError, match="timeout"):
                envs.recv(timeout=timeout)
        with pytest.raises(TypeError, match="timeout"):
            envs.recv(timeout="1")
        with pytest.raises(ValueError, match="timeout"):
            envs.recv(timeout=-1)
        with pytest.raises(TypeError, match="reset"):
            envs.recv(0.5)  # a timeout passed as `reset`
        with pytest.raises(TypeError, match="return_info"):
            envs.recv(False, None)
        envs.recv()  # still usable
        with pytest.raises(ValueError, match="async mode"):
            envs.reset(np.array([0]))
        with pytest.raises(NotImplementedError, match="XLA"):
            envs.xla()
        with pytest.raises(TypeError, match="timeout"):
            envs.close(timeout=True)
    bad = [
        ({"env_type": "jax"}, ValueError, "env_type"),
        ({"env_type": "dm"}, NotImplementedError, "dm_env"),
        ({"max_num_players": 2}, ValueError, "player"),
        ({"seed": -1}, ValueError, "seed"),
        ({"seed": 1.5}, TypeError, "seed"),
        ({"seed": True}, TypeError, "seed"),
        ({"num_envs": 2, "seed": [1, 2, 3]}, ValueError, "one per env"),
        ({"num_envs": 2, "batch_size": 3}, ValueError, "batch_size"),
        ({"num_envs": True}, ValueError, "num_envs"),
        ({"num_threads": 2, "num_workers": 3}, ValueError, "num_threads"),
        ({"render_width": 64}, ValueError, "render_width"),
        ({"backend_kwargs": {"batch_size": 2}}, ValueError, "backend_kwargs"),
        ({"gym_reset_return_info": 1}, TypeError, "gym_reset_return_info"),
        ({"render_env_id": 5}, ValueError, "render_env_id"),
    ]
    for kwargs, error, match in bad:
        with pytest.raises(error, match=match):
            envpool.make("CartPole-v1", **{"backend": "serial", **kwargs})
    with pytest.raises(NotImplementedError, match="dm_env"):
        envpool.make_dm("CartPole-v1")
    with pytest.raises(TypeError, match="task_id"):
        envpool.make(3)


def test_docstring_example_runs():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = doctest.testmod(vecenv.envpool.pool, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


# ==================================================================== EnvPool's MuJoCo infos
def _info_layout(infos: dict, prefix: str = "") -> dict[str, tuple[str, tuple[int, ...]]]:
    """``{key: (dtype, shape)}`` of a batch's infos, nested keys joined with dots."""
    out: dict[str, tuple[str, tuple[int, ...]]] = {}
    for key, value in infos.items():
        if isinstance(value, dict):
            out.update(_info_layout(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = (str(np.asarray(value).dtype), np.asarray(value).shape)
    return out


def _reset_and_step_infos(make, task_id: str, **kwargs) -> tuple[dict, dict, dict]:
    """The infos of a 2-env pool's reset, of its first step and of a step where one env has
    just been reset (EnvPool's autoreset), and close it."""
    with warnings.catch_warnings():  # EnvPool's float64 Box bounds make gymnasium warn
        warnings.simplefilter("ignore")
        envs = make(task_id, num_envs=2, seed=0, **kwargs)
    try:
        _, reset_info = envs.reset()
        zeros = np.zeros((2, *envs.action_space.shape), dtype=envs.action_space.dtype)
        step_info = envs.step(zeros)[4]
        envs.reset(np.array([0]))
        mixed_info = envs.step(zeros)[4]
    finally:
        envs.close()
    return reset_info, step_info, mixed_info


MUJOCO_IDS = ["HalfCheetah-v5", "Hopper-v5", "Ant-v5"]


class TaggedInfos(gym.Wrapper):
    """A user's wrapper adding an info key of its own on reset and step."""

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return obs, {**info, "tag": 7}

    def step(self, action):
        *out, info = self.env.step(action)
        return (*out, {**info, "tag": 7})


@pytest.mark.timeout(120)
@pytest.mark.parametrize("task_id", MUJOCO_IDS)
@pytest.mark.parametrize("backend", ["serial", "process"])
def test_mujoco_infos_match_envpools_keys_and_dtypes(task_id, backend):
    """EnvPool's MuJoCo ids return EnvPool's info keys on reset and on step, with its dtypes
    (HalfCheetah-v5: reward_ctrl, reward_run, x_position, x_velocity; float64), through
    vecenv.envpool.make on either backend; checked against EnvPool's own build."""
    pytest.importorskip("mujoco", reason="MuJoCo is not installed (pip install 'vecenv[sims]')")
    real = pytest.importorskip("envpool", reason="EnvPool is not installed (pip install envpool==1.2.5)")
    kwargs = {"backend": "serial"} if backend == "serial" else PROCESS
    ours = _reset_and_step_infos(envpool.make_gymnasium, task_id, **kwargs)
    theirs = _reset_and_step_infos(real.make_gymnasium, task_id)
    for what, mine, reference in zip(("reset", "step", "step after a reset"), ours, theirs, strict=True):
        assert _info_layout(mine) == _info_layout(reference), what


@pytest.mark.timeout(120)
def test_mujoco_infos_without_envpool_installed():
    """The same keys as EnvPool 1.2.5 (recorded), reset and step alike, renamed from gymnasium's:
    HalfCheetah's reward_run is gymnasium's reward_forward (= x_velocity, weight 1); Hopper's
    gymnasium-only keys are left out; a wrapper's own keys pass through."""
    pytest.importorskip("mujoco", reason="MuJoCo is not installed (pip install 'vecenv[sims]')")
    expected = {
        "HalfCheetah-v5": {"reward_ctrl", "reward_run", "x_position", "x_velocity"},
        "Hopper-v5": {"x_position", "x_velocity"},
        "Ant-v5": {"distance_from_origin", "reward_contact", "reward_ctrl", "reward_forward",
                   "reward_survive", "x_position", "x_velocity", "y_position", "y_velocity"},
    }
    pool_keys = {"env_id", "players", "elapsed_step"}
    for task_id, keys in expected.items():
        for infos in _reset_and_step_infos(envpool.make_gymnasium, task_id, backend="serial"):
            assert set(infos) == keys | pool_keys, task_id
            assert all(infos[k].dtype == np.float64 and infos[k].shape == (2,) for k in keys)
    _, step, _ = _reset_and_step_infos(envpool.make_gymnasium, "HalfCheetah-v5", backend="serial")
    np.testing.assert_array_equal(step["reward_run"], step["x_velocity"])
    assert step["x_velocity"].any()

    reset, step, _ = _reset_and_step_infos(envpool.make_gymnasium, "Hopper-v5", backend="serial",
                                           wrappers=[TaggedInfos])
    assert set(reset) == set(step) == {"x_position", "x_velocity", "tag"} | pool_keys
    assert step["tag"].tolist() == [7, 7]
    assert envpool.make_spec("HalfCheetah-v5").id == "HalfCheetah-v5"


# ==================================================================== the layout
@pytest.mark.timeout(120)
def test_auto_chooses_the_layout_as_vecenv_make_does(monkeypatch):
    """backend="auto" (the default) is vecenv.make's: VECENV_BACKEND forces it, else it is
    measured; ``layout`` says what was chosen and why (None for an explicit backend)."""
    monkeypatch.setenv("VECENV_BACKEND", "serial")
    with envpool.make("CartPole-v1", num_envs=2, seed=0) as envs:
        assert envs.layout.backend == "serial" and "VECENV_BACKEND" in envs.layout.reason
        assert envs.config["backend"] == "serial" and type(envs.vector_env).__name__ == "SerialVectorEnv"
    monkeypatch.delenv("VECENV_BACKEND")
    with envpool.make("CartPole-v1", num_envs=2, seed=0) as envs:
        assert envs.layout is not None and envs.layout.reason
        assert envs.config["backend"] == envs.layout.backend == envs.vector_env.backend
    with envpool.make("CartPole-v1", num_envs=2, seed=0, backend="serial") as envs:
        assert envs.layout is None
