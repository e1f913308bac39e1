"""``env_type="gym"`` where the ``gym`` package is installed: gym's spaces and API, as EnvPool
(up to 1.0, the versions that depended on gym and that CleanRL pins) gives them.

CleanRL's ``ppo_atari_envpool.py`` asserts ``isinstance(envs.action_space, gym.spaces.Discrete)``
and wraps the pool in a ``gym.Wrapper``; with ``from vecenv import envpool`` in place of
``import envpool`` both hold. Skipped where gym is not installed (CI installs gym 0.23.1,
CleanRL's pin, for this file).
"""

from __future__ import annotations

import importlib.util
import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    gym = pytest.importorskip("gym", reason="needs the gym package: pip install gym==0.23.1 (CleanRL's pin)")

from vecenv import envpool  # noqa: E402
from vecenv.envpool.styles import to_gym_space  # noqa: E402

HAS_ALE = importlib.util.find_spec("ale_py") is not None


class EpisodeReturns(gym.Wrapper):
    """CleanRL's pattern: a ``gym.Wrapper`` over the pool that sums rewards per env."""

    def __init__(self, env):
        super().__init__(env)
        self.num_envs = env.num_envs
        self.returns = np.zeros(self.num_envs)
        self.finished: list[float] = []

    def reset(self, **kwargs):
        self.returns[:] = 0
        return super().reset(**kwargs)

    def step(self, action):
        obs, rewards, dones, infos = super().step(action)
        self.returns += rewards
        self.finished += self.returns[dones].tolist()
        self.returns[dones] = 0
        return obs, rewards, dones, infos


@pytest.fixture
def old_api(monkeypatch):
    """gym before 0.26 (CleanRL pins 0.23.1): 4-tuple steps, ``reset()`` returns the observations."""
    monkeypatch.setattr(gym, "__version__", "0.23.1")


@pytest.mark.timeout(120)
@pytest.mark.skipif(not HAS_ALE, reason="needs ale_py: pip install 'vecenv[sims]'")
def test_cleanrl_ppo_atari_envpool_edge(old_api):
    envs = envpool.make("Breakout-v5", env_type="gym", num_envs=2, episodic_life=True, reward_clip=True,
                        seed=1, backend="serial")
    envs.num_envs = 2
    envs.single_action_space = envs.action_space
    envs.single_observation_space = envs.observation_space
    envs = EpisodeReturns(envs)
    assert isinstance(envs.action_space, gym.spaces.Discrete), "only discrete action space is supported"
    assert isinstance(envs.single_observation_space, gym.spaces.Box)
    assert envs.single_observation_space.shape == (4, 84, 84)
    obs = envs.reset()
    assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
    rng = np.random.default_rng(0)
    for _ in range(300):
        obs, reward, done, info = envs.step(rng.integers(0, envs.single_action_space.n, 2))
        assert done.dtype == np.bool_ and set(info) >= {"lives", "reward", "TimeLimit.truncated"}
        assert set(np.unique(reward)) <= {-1.0, 0.0, 1.0}  # reward_clip
    assert envs.finished  # episodic_life: every lost life ends an episode
    envs.close()


def test_gym_spaces_of_every_kind_match_gymnasiums():
    cases = [
        spaces.Box(-1.0, 2.0, (3, 2), np.float32),
        spaces.Discrete(5, start=-2),
        spaces.MultiDiscrete([3, 4]),
        spaces.MultiBinary(6),
        spaces.Dict({"a": spaces.Discrete(2), "b": spaces.Tuple([spaces.Box(0, 1, (2,)), spaces.MultiBinary(2)])}),
    ]
    for space in cases:
        converted = to_gym_space(space, gym)
        assert type(converted).__module__.startswith("gym.")
        space.seed(0)
        for _ in range(5):
            sample = space.sample()
            assert converted.contains(sample) if not isinstance(space, spaces.Dict) else \
                converted.contains(dict(sample))
    box = to_gym_space(cases[0], gym)
    np.testing.assert_array_equal(box.low, cases[0].low)
    assert box.dtype == np.float32 and to_gym_space(cases[1], gym).start == -2
    text = spaces.Text(5)
    assert to_gym_space(text, gym) == text  # no gym counterpart: gymnasium's, as it is


@pytest.mark.timeout(60)
def test_gym_type_old_api_with_gym_spaces(old_api):
    with envpool.make("CartPole-v1", env_type="gym", num_envs=2, seed=0, backend="serial") as envs:
        assert isinstance(envs.observation_space, gym.spaces.Box)
        assert isinstance(envs.spec.action_space, gym.spaces.Discrete)
        obs = envs.reset()
        assert isinstance(obs, np.ndarray) and obs.shape == (2, 4)
        assert len(envs.step(np.zeros(2, dtype=np.int64))) == 4
    spec = envpool.make_spec("CartPole-v1", env_type="gym")
    assert isinstance(spec.observation_space, gym.spaces.Box)


@pytest.mark.timeout(60)
def test_gym_026_gets_its_five_tuples_as_from_gymnasium(monkeypatch):
    """EnvPool with gym >= 0.26: reset() -> (obs, info), step -> 5-tuple, gym's spaces."""
    monkeypatch.setattr(gym, "__version__", "0.26.2")
    kwargs = dict(num_envs=3, seed=2, backend="serial")
    with envpool.make("CartPole-v1", env_type="gym", **kwargs) as ours, \
            envpool.make("CartPole-v1", env_type="gymnasium", **kwargs) as theirs:
        assert isinstance(ours.action_space, gym.spaces.Discrete)
        assert isinstance(theirs.action_space, gymnasium.spaces.Discrete)
        obs, info = ours.reset()
        np.testing.assert_array_equal(obs, theirs.reset()[0])
        for _ in range(30):
            actions = np.ones(3, dtype=np.int64)
            got, expected = ours.step(actions), theirs.step(actions)
            assert len(got) == 5 and "TimeLimit.truncated" not in got[-1]
            for a, b in zip(got[:4], expected[:4], strict=True):
                np.testing.assert_array_equal(a, b)
