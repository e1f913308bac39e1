"""``vecenv.make`` takes ``gym.make_vec``'s arguments with their meaning: ``gym.make_vec(`` ->
``vecenv.make(`` is the whole change; a keyword neither takes is refused, naming where it belongs.

Compared against gymnasium's own ``make_vec`` with the same seeds and actions, on LunarLander
(Box2D) where it is installed, else on CartPole.
"""

from __future__ import annotations

import importlib.util
from contextlib import closing
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import vecenv
from helpers import FAST_START, needs_processes

HAS_BOX2D = importlib.util.find_spec("Box2D") is not None
ENV_ID = "LunarLander-v3" if HAS_BOX2D else "CartPole-v1"
#: an argument of the env's own constructor, with a value that changes its dynamics
ENV_ARG = {"gravity": -5.0} if HAS_BOX2D else {"sutton_barto_reward": True}


def rollout(envs: gym.vector.VectorEnv, steps: int = 40) -> list[Any]:
    """Everything the envs return over ``steps`` steps with seeded random actions."""
    out: list[Any] = [envs.reset(seed=3)[0].copy()]
    envs.action_space.seed(5)
    for _ in range(steps):
        obs, rewards, terminations, truncations, infos = envs.step(envs.action_space.sample())
        out += [obs.copy(), rewards.copy(), terminations.copy(), truncations.copy(), sorted(infos)]
    return out


def assert_same(a: list[Any], b: list[Any]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y)
        else:
            assert x == y


CASES = [
    {"max_episode_steps": 7},
    {"vectorization_mode": "sync", **ENV_ARG},
    {"disable_env_checker": True, "wrappers": [gym.wrappers.RecordEpisodeStatistics]},
    {"vector_kwargs": {"copy": False, "autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}},
    {"env_kwargs": ENV_ARG},  # vecenv's spelling of the same thing
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kwargs", CASES, ids=lambda k: ",".join(k))
def test_make_vec_arguments_give_gymnasiums_rollout(kwargs):
    theirs = dict(kwargs)
    if "env_kwargs" in theirs:
        theirs.update(theirs.pop("env_kwargs"))
    theirs.setdefault("vectorization_mode", "sync")  # CartPole's own vector entry point seeds otherwise
    with closing(gym.make_vec(ENV_ID, 3, **theirs)) as expected, vecenv.make(ENV_ID, 3, **kwargs) as got:
        assert got.single_observation_space == expected.single_observation_space
        assert got.metadata["autoreset_mode"] == expected.metadata["autoreset_mode"]
        assert_same(rollout(got), rollout(expected))


def test_max_episode_steps_truncates_as_in_make_vec():
    with vecenv.make("CartPole-v1", 2, max_episode_steps=3, backend="serial") as envs:
        envs.reset(seed=0)
        truncations = [envs.step(np.zeros(2, dtype=np.int64))[3].tolist() for _ in range(3)]
    assert truncations == [[False, False], [False, False], [True, True]]


@needs_processes
@pytest.mark.timeout(60)
def test_async_mode_is_the_process_backend_with_the_same_rollout():
    with closing(gym.make_vec(ENV_ID, 2, vectorization_mode="async", max_episode_steps=9)) as expected, \
            vecenv.make(ENV_ID, 2, vectorization_mode="async", max_episode_steps=9,
                        vector_kwargs={"context": FAST_START}) as got:
        assert got.backend == "process"
        assert_same(rollout(got, 15), rollout(expected, 15))


@pytest.mark.timeout(60)
@pytest.mark.skipif(importlib.util.find_spec("pygame") is None, reason="rendering needs pygame: "
                    "pip install 'gymnasium[classic-control]'")
def test_render_mode_reaches_each_env_and_render_returns_its_frames():
    with closing(gym.make_vec(ENV_ID, 2, vectorization_mode="sync", render_mode="rgb_array")) as expected, \
            vecenv.make(ENV_ID, 2, render_mode="rgb_array") as got:
        assert got.render_mode == expected.render_mode == "rgb_array"
        expected.reset(seed=1)
        got.reset(seed=1)
        frames, want = got.render(), expected.render()
        assert len(frames) == len(want) == 2
        for frame, other in zip(frames, want, strict=True):
            np.testing.assert_array_equal(frame, other)


def test_spec_records_the_env_keywords_as_make_vec_does():
    with vecenv.make("CartPole-v1", 2, backend="serial", max_episode_steps=9) as envs:
        assert envs.spec.id == "CartPole-v1"
        assert envs.spec.kwargs["max_episode_steps"] == 9
        assert envs.spec.kwargs["num_envs"] == 2


@pytest.mark.parametrize("call, names", [
    ({"max_episode_step": 5}, ["'max_episode_step'", "env_kwargs", "vector_kwargs", "max_episode_steps"]),
    ({"vector_kwargs": {"worker": None}}, ["vector_kwargs", "'worker'", "env_kwargs"]),
    ({"vectorization_mode": "vector_entry_point"}, ["vector_entry_point", "gym.make_vec", "register_vector_env"]),
    ({"vectorization_mode": "fast"}, ["vectorization_mode", "'fast'", "'sync'"]),
    ({"vectorization_mode": "sync", "backend": "thread"}, ["vectorization_mode='sync'", "backend='serial'",
                                                           "backend='thread'"]),
    ({"groups": 2, "backend": "process"}, ["'groups'", "thread", "backend='process'"]),
    ({"copy": False, "vector_kwargs": {"copy": True}}, ["'copy'", "vector_kwargs", "once"]),
    ({"max_episode_steps": 5, "env_kwargs": {"max_episode_steps": 6}}, ["'max_episode_steps'", "env_kwargs"]),
    ({"env_kwargs": [1]}, ["env_kwargs", "dict"]),
    ({"autoreset_mode": "same_step", "vector_kwargs": {"autoreset_mode": "disabled"}}, ["autoreset_mode",
                                                                                        "once"]),
])
def test_a_refused_keyword_is_named_with_where_it_belongs(call, names):
    with pytest.raises((TypeError, ValueError)) as info:
        vecenv.make("CartPole-v1", 2, **call)
    for name in names:
        assert name in str(info.value)


def test_a_factorys_unknown_keyword_is_refused_before_any_env_is_made():
    made = []

    def factory(length: float = 0.5) -> gym.Env:
        made.append(length)
        return gym.make("CartPole-v1")

    with pytest.raises(TypeError, match="'lenght'.*factory.*'length'"):
        vecenv.make(factory, 2, backend="serial", lenght=1.0)
    assert made == []
    with vecenv.make(factory, 2, backend="serial", length=1.0):
        assert made == [1.0, 1.0]


def test_the_engines_error_for_an_env_keyword_points_to_vecenv_make():
    with pytest.raises(TypeError, match="max_episode_steps.*vecenv.make.*env_kwargs"):
        vecenv.SyncVectorEnv([lambda: gym.make("CartPole-v1")], max_episode_steps=5)


# ======================================================================= vector entry point
@pytest.mark.timeout(60)
def test_a_registered_vector_entry_point_gives_vecenv_identical_to_sync_vector_env():
    vecenv.register_vector_env("VecenvTestCartPole-v1", "CartPole-v1", backend="serial")
    try:
        with gym.make_vec("VecenvTestCartPole-v1", 3) as got, closing(gym.make_vec("CartPole-v1", 3, vectorization_mode="sync")) as expected:
            assert isinstance(got, vecenv.SerialVectorEnv)
            assert got.spec.max_episode_steps == 500
            assert_same(rollout(got, 30), rollout(expected, 30))
        # gymnasium passes the spec's keywords (and its own) to the entry point: they reach each env
        with gym.make_vec("VecenvTestCartPole-v1", 2, max_episode_steps=4) as got:
            got.reset(seed=0)
            truncations = [got.step(np.zeros(2, dtype=np.int64))[3] for _ in range(4)]
            assert truncations[-1].all() and not truncations[-2].any()
        with gym.make("VecenvTestCartPole-v1") as one:  # a single env, as the base id makes it
            assert one.spec.max_episode_steps == 500
    finally:
        del gym.registry["VecenvTestCartPole-v1"]


def test_register_vector_env_refuses_what_is_not_an_env():
    with pytest.raises(TypeError, match="env: expected"):
        vecenv.register_vector_env("VecenvTestBad-v0", 3)  # type: ignore[arg-type]
    assert "VecenvTestBad-v0" not in gym.registry


@pytest.mark.timeout(60)
def test_an_env_spec_is_taken_as_make_vec_takes_it():
    spec = gym.spec("CartPole-v1")
    with closing(gym.make_vec(spec, 2, vectorization_mode="sync", max_episode_steps=6)) as expected, \
            vecenv.make(spec, 2, max_episode_steps=6) as got:
        assert got.spec.id == "CartPole-v1"
        assert_same(rollout(got, 20), rollout(expected, 20))
