"""Differential tests: every backend against gymnasium's SyncVectorEnv, value for value.

Both run the same env_fns with the same seeds and actions; every observation, reward, flag and
info (dtype included) must match, in all three autoreset modes, on every kind of space.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from helpers import assert_same, make_backend
from vecenv.engine import parse_autoreset_mode
from vecenv.testing import CountingEnv, DictTupleEnv, TextEnv, TupleDiscreteEnv

pytestmark = pytest.mark.timeout(120)

ENVS = {
    "cartpole": lambda: gym.make("CartPole-v1"),
    "dict_tuple": DictTupleEnv,
    "tuple_discrete": TupleDiscreteEnv,
    "counting": CountingEnv,
    "text": TextEnv,
}
MODES = ["next_step", "same_step", "disabled"]


def run_side_by_side(ours, ref, steps: int, seed: int = 3, ignore: tuple[str, ...] = ()) -> int:
    """Step both with identical actions; return how many episode ends were seen."""
    assert_same(ours.reset(seed=seed), ref.reset(seed=seed), "reset")
    ref.action_space.seed(seed)
    mode = ref.metadata["autoreset_mode"]
    ends = 0
    for t in range(steps):
        actions = ref.action_space.sample()
        out, want = ours.step(actions), ref.step(actions)
        assert_same(out, want, f"step {t}", ignore)
        ended = np.logical_or(want[2], want[3])
        ends += int(ended.sum())
        if mode == AutoresetMode.DISABLED and ended.any():
            got = ours.reset(options={"reset_mask": ended.copy()})
            assert_same(got, ref.reset(options={"reset_mask": ended.copy()}), f"masked reset {t}")
    return ends


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("env_name", list(ENVS))
def test_matches_gymnasium_sync(backend, env_name, mode):
    fns = [ENVS[env_name]] * 5
    ref = gym.vector.SyncVectorEnv(fns, autoreset_mode=parse_autoreset_mode(mode))
    with make_backend(backend, fns, autoreset_mode=mode) as ours:
        assert ours.observation_space == ref.observation_space
        assert ours.action_space == ref.action_space
        assert ours.single_observation_space == ref.single_observation_space
        assert ours.single_action_space == ref.single_action_space
        assert ours.metadata["autoreset_mode"] == ref.metadata["autoreset_mode"]
        ends = run_side_by_side(ours, ref, steps=60)
        assert ends > 0, "the comparison must cover episode ends"
    ref.close()


def test_seed_lists_and_none(backend):
    """A seed list seeds env i with seed[i]; ``None`` leaves env i's generator where it was.
    Every value that depends on the generators is compared with gymnasium's."""
    fns = [DictTupleEnv] * 3
    ref = gym.vector.SyncVectorEnv(fns)
    with make_backend(backend, fns) as ours:
        assert_same(ours.reset(seed=[1, 2, 3]), ref.reset(seed=[1, 2, 3]), "first reset")
        ref.action_space.seed(0)
        for t in range(4):  # move every env's generator on from its seed
            actions = ref.action_space.sample()
            assert_same(ours.step(actions), ref.step(actions), f"step {t}")
        got = ours.reset(seed=[7, None, 9])
        assert_same(got, ref.reset(seed=[7, None, 9]), "reset(seed=[7, None, 9])")
        # env 1 went on with the generator seeded 2 (not reseeded, not seeded afresh)
        fresh = gym.vector.SyncVectorEnv(fns)
        reseeded = fresh.reset(seed=[7, 2, 9])[0]
        fresh.close()
        assert np.array_equal(got[0]["pos"][[0, 2]], reseeded["pos"][[0, 2]])
        assert not np.array_equal(got[0]["pos"][1], reseeded["pos"][1])
        for t in range(4):  # and the generators keep agreeing afterwards
            actions = ref.action_space.sample()
            assert_same(ours.step(actions), ref.step(actions), f"step {t} after the seed list")
        a = ours.reset(seed=[5, 6, 7])
        b = ours.reset(seed=5)  # int seed means 5, 6, 7
        assert_same(b, a)
        assert_same(b, ref.reset(seed=5))
        c = ours.reset()  # unseeded: continues each env's generator
        assert not np.array_equal(c[0]["pos"], b[0]["pos"])
        assert_same(c, ref.reset())
        with pytest.raises(ValueError, match="one per env"):
            ours.reset(seed=[1, 2])
    ref.close()


@pytest.mark.parametrize("mode", ["next_step", "disabled"])
def test_reset_mask_resets_only_masked_envs(backend, mode):
    fns = [lambda: TupleDiscreteEnv(p_terminate=0.0)] * 4
    ref = gym.vector.SyncVectorEnv(fns, autoreset_mode=parse_autoreset_mode(mode))
    with make_backend(backend, fns, autoreset_mode=mode) as ours:
        assert_same(ours.reset(seed=0), ref.reset(seed=0))
        for _ in range(2):
            acts = np.array([[1, 0]] * 4)
            assert_same(ours.step(acts), ref.step(acts))
        mask = np.array([True, False, True, False])
        got = ours.reset(options={"reset_mask": mask, "extra": 1})
        assert_same(got, ref.reset(options={"reset_mask": mask.copy(), "extra": 1}))
        assert got[1]["options_seen"][0] == ["extra"]  # reset_mask is not passed to the envs
        for bad, err in [(mask.tolist(), TypeError), (np.ones(3, bool), ValueError),
                         (np.zeros(4, bool), ValueError), (np.ones(4, int), TypeError)]:
            with pytest.raises(err, match="reset_mask"):
                ours.reset(options={"reset_mask": bad})
    ref.close()


@pytest.mark.parametrize("backend_name", ["serial", "process"])
def test_reset_mask_leaves_the_callers_options_as_gymnasium_does(backend_name):
    fns = [lambda: TupleDiscreteEnv(p_terminate=0.0)] * 2
    ref = gym.vector.SyncVectorEnv(fns, autoreset_mode=AutoresetMode.DISABLED)
    with make_backend(backend_name, fns, autoreset_mode="disabled") as ours:
        ours.reset(seed=0)
        ref.reset(seed=0)
        ours_options = {"reset_mask": np.array([True, False]), "extra": 1}
        ref_options = {"reset_mask": np.array([True, False]), "extra": 1}
        assert_same(ours.reset(options=ours_options), ref.reset(options=ref_options))
        assert sorted(ours_options) == sorted(ref_options)
    ref.close()


def test_call_get_set_attr_render(backend):
    from vecenv.testing import FaultyEnv

    fns = [lambda: FaultyEnv(render_mode="rgb_array")] * 3
    ref = gym.vector.SyncVectorEnv(fns)
    with make_backend(backend, fns) as ours:
        ours.reset(seed=1)
        ref.reset(seed=1)
        assert ours.call("planted", 4) == ref.call("planted", 4) == (8, 8, 8)
        assert ours.call("at") == (3, 3, 3)  # a non-callable attribute is returned as is
        assert ours.get_attr("sleep") == ref.get_attr("sleep")
        ours.set_attr("sleep", [0.1, 0.2, 0.3])
        assert ours.get_attr("sleep") == (0.1, 0.2, 0.3)
        ours.set_attr("sleep", 0.5)
        assert ours.get_attr("sleep") == (0.5, 0.5, 0.5)
        with pytest.raises(ValueError, match="length equal to the number of environments"):
            ours.set_attr("sleep", [1, 2])
        assert ours.call_at([2, 0], "planted", x=5) == [10, 10]
        assert ours.get_attr_at([1], "at") == [3]
        ours.set_attr_at([1], "at", [9])
        assert ours.get_attr("at") == (3, 9, 3)
        assert ours.apply(lambda env, k: env.unwrapped.at + k, 1, indices=[1, 0]) == [10, 4]
        frames = ours.render()
        assert len(frames) == 3 and all(f.shape == (4, 4, 3) for f in frames)
        assert_same(frames, ref.render())
        assert ours.render_mode == "rgb_array"
        assert len(ours.np_random_seed) == 3
    ref.close()


def test_gymnasium_vector_wrappers_work_unchanged(backend):
    from gymnasium.wrappers.vector import NormalizeObservation, RecordEpisodeStatistics

    fns = [lambda: gym.make("CartPole-v1")] * 4
    ref = RecordEpisodeStatistics(NormalizeObservation(gym.vector.SyncVectorEnv(fns)))
    with make_backend(backend, fns) as inner:
        ours = RecordEpisodeStatistics(NormalizeObservation(inner))
        ends = run_side_by_side(ours, ref, steps=80, seed=11, ignore=("t",))  # t: wall time
        assert ends > 0
    ref.close()


def test_copy_semantics(backend):
    fns = [lambda: gym.make("CartPole-v1")] * 2
    with make_backend(backend, fns, copy=True) as envs:
        obs, _ = envs.reset(seed=0)
        before = obs.copy()
        envs.step(np.array([1, 1]))
        assert np.array_equal(obs, before), "copy=True results must not change behind the caller"
    with make_backend(backend, fns, copy=False) as envs:
        obs, _ = envs.reset(seed=0)
        first = obs.copy()
        obs2, *_ = envs.step(np.array([1, 1]))
        assert np.array_equal(obs2, obs) and not np.array_equal(obs, first), "copy=False returns views"
