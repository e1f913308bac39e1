"""Bad input gets a clear error before anything is stepped, and the env stays usable."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import vecenv
from helpers import make_backend
from vecenv.testing import DictTupleEnv, TupleDiscreteEnv

pytestmark = pytest.mark.timeout(60)


def cartpole():
    return gym.make("CartPole-v1")


def test_wrong_actions_are_refused_and_env_stays_usable(backend):
    with make_backend(backend, [cartpole] * 3) as envs:
        envs.reset(seed=0)
        cases = [
            (np.array([0, 1]), ValueError, r"expected shape \(3,\).*got shape \(2,\)"),
            (np.zeros((3, 2), int), ValueError, r"expected shape \(3,\)"),
            (np.array([0.5, 1.0, 0.0]), TypeError, "expected integer values.*float64"),
            (["a", "b", "c"], TypeError, "expected integer values"),
            ({"x": [0, 1, 2]}, ValueError, r"got shape \(\) from a dict"),
        ]
        for actions, err, pattern in cases:
            with pytest.raises(err, match=pattern):
                envs.step(actions)
        obs, rewards, *_ = envs.step(np.array([0, 1, 0]))  # still usable
        assert obs.shape == (3, 4) and rewards.tolist() == [1.0, 1.0, 1.0]


def test_structured_action_errors_name_the_leaf(backend):
    with make_backend(backend, [DictTupleEnv] * 2) as envs:
        envs.reset(seed=0)
        good = envs.action_space.sample()
        with pytest.raises(TypeError, match=r"actions: expected a tuple of 2 parts"):
            envs.step(good[0])
        with pytest.raises(ValueError, match=r"actions\[1\]: expected shape \(2, 2\)"):
            envs.step((good[0], np.zeros((2, 3), np.float32)))
        envs.step(good)
    with make_backend(backend, [TupleDiscreteEnv] * 2) as envs:
        envs.reset(seed=0)
        with pytest.raises(ValueError, match=r"expected shape \(2, 2\)"):
            envs.step(np.array([1, 0]))


def test_step_before_reset(backend):
    with make_backend(backend, [cartpole] * 2) as envs:
        with pytest.raises(gym.error.ResetNeeded, match="before reset"):
            envs.step(np.array([0, 1]))
        envs.reset()
        envs.step(np.array([0, 1]))


def test_disabled_mode_refuses_to_step_an_ended_env(backend):
    fns = [lambda: TupleDiscreteEnv(max_steps=2, p_terminate=0.0)] * 2
    with make_backend(backend, fns, autoreset_mode="disabled") as envs:
        envs.reset(seed=0)
        acts = np.array([[0, 0], [1, 1]])
        envs.step(acts)
        *_, truncs, _ = envs.step(acts)
        assert truncs.all()
        with pytest.raises(ValueError, match=r"envs \[0, 1\] finished their episodes.*reset_mask"):
            envs.step(acts)
        envs.reset(options={"reset_mask": np.array([True, True])})
        envs.step(acts)


class _OtherObs(gym.Env):
    observation_space = gym.spaces.Box(0, 1, (5,))
    action_space = gym.spaces.Discrete(2)


class _OtherAct(gym.Env):
    observation_space = gym.make("CartPole-v1").observation_space
    action_space = gym.spaces.Discrete(3)


def test_mismatched_spaces_are_named(backend):
    with pytest.raises(vecenv.SpaceMismatchError, match=r"env 1's observation space Box.*\(5,\).*differs from env 0's"):
        make_backend(backend, [cartpole, _OtherObs])
    with pytest.raises(RuntimeError, match=r"env 2's action space Discrete\(3\) differs from env 0's Discrete\(2\)"):
        make_backend(backend, [cartpole, cartpole, _OtherAct])


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown backend 'gpu'"):
        vecenv.make("CartPole-v1", 2, backend="gpu")
    with pytest.raises(ValueError, match="unknown autoreset_mode 'sometimes'"):
        vecenv.make("CartPole-v1", 2, autoreset_mode="sometimes")
    with pytest.raises(ValueError, match="num_envs: expected an int >= 1, got 0"):
        vecenv.make("CartPole-v1", 0)
    with pytest.raises(ValueError, match="at least one env"):
        vecenv.SerialVectorEnv([])
    with pytest.raises(TypeError, match=r"env_fns\[1\]: expected a callable"):
        vecenv.SerialVectorEnv([cartpole, "CartPole-v1"])
    with pytest.raises(gym.error.Error, match="NoSuchEnv"):
        vecenv.make("NoSuchEnv-v0", 2)
    with pytest.raises(ValueError, match="batch_size: expected at most num_envs=2, got 3"):
        vecenv.SerialVectorEnv([cartpole] * 2, batch_size=3)
    with pytest.raises(ValueError, match="observation_mode"):
        vecenv.SerialVectorEnv([cartpole] * 2, observation_mode="similar")


def test_autoreset_mode_spellings():
    from gymnasium.vector import AutoresetMode

    for spelling, mode in [("next_step", AutoresetMode.NEXT_STEP), ("SameStep", AutoresetMode.SAME_STEP),
                           ("DISABLED", AutoresetMode.DISABLED), (AutoresetMode.SAME_STEP, AutoresetMode.SAME_STEP)]:
        with vecenv.make("CartPole-v1", 1, backend="serial", autoreset_mode=spelling) as envs:
            assert envs.autoreset_mode is mode and envs.metadata["autoreset_mode"] is mode
