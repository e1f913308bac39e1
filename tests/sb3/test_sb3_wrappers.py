"""vecenv.sb3's VecEnv wrappers, side by side with SB3's own on the same seeds."""

from __future__ import annotations

import csv
import json
import os
import pickle

import numpy as np
import pytest
from gymnasium import spaces
from sb3_testenvs import (
    NanEnv,
    assert_same,
    make_cartpole,
    make_dict_env,
    make_image_env,
    run_side_by_side,
)

from vecenv.sb3 import (
    DummyVecEnv,
    Monitor,
    RunningMeanStd,
    StackedObservations,
    VecCheckNan,
    VecExtractDictObs,
    VecFrameStack,
    VecMonitor,
    VecNormalize,
    VecTransposeImage,
    is_wrapped,
    make_vec_env,
    sync_envs_normalization,
    unwrap_vec_normalize,
    unwrap_wrapper,
)


@pytest.fixture
def sv():
    return pytest.importorskip("stable_baselines3.common.vec_env")


def pair(sv, closing, fn, n=3):
    """(ours, SB3's) DummyVecEnv over ``n`` copies of ``fn``."""
    ours, theirs = DummyVecEnv([fn] * n), sv.DummyVecEnv([fn] * n)
    closing(ours)
    closing(theirs)
    return ours, theirs


# ---------------------------------------------------------------------------- VecFrameStack
@pytest.mark.timeout(60)
def test_frame_stack_matches_sb3_on_box(sv, closing):
    ours, theirs = pair(sv, closing, make_cartpole)
    ours, theirs = VecFrameStack(ours, 3), sv.VecFrameStack(theirs, 3)
    assert ours.observation_space == theirs.observation_space
    assert run_side_by_side(ours, theirs, steps=80, seed=0) > 0


@pytest.mark.timeout(60)
@pytest.mark.parametrize("order", [None, {"vec": "first", "img": "last"}])
def test_frame_stack_matches_sb3_on_dict(sv, closing, order):
    ours, theirs = pair(sv, closing, make_dict_env)
    ours, theirs = VecFrameStack(ours, 2, order), sv.VecFrameStack(theirs, 2, order)
    assert ours.observation_space == theirs.observation_space
    assert run_side_by_side(ours, theirs, steps=40, seed=1) > 0


@pytest.mark.timeout(60)
def test_frame_stack_channels_first_images(sv, closing):
    ours, theirs = pair(sv, closing, make_image_env, n=2)
    ours = VecFrameStack(VecTransposeImage(ours), 4)
    theirs = sv.VecFrameStack(sv.VecTransposeImage(theirs), 4)
    assert ours.observation_space.shape == (12, 6, 7)  # detected channels-first
    assert ours.observation_space == theirs.observation_space
    assert run_side_by_side(ours, theirs, steps=30, seed=2) > 0


def test_stacked_observations_semantics():
    space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    stack = StackedObservations(2, 3, space)
    first = stack.reset(np.array([[1, 1], [2, 2]], np.float32))
    np.testing.assert_array_equal(first[0], [0, 0, 0, 0, 1, 1])
    infos = [{}, {"terminal_observation": np.array([9, 9], np.float32)}]
    obs, infos = stack.update(np.array([[3, 3], [4, 4]], np.float32), np.array([False, True]), infos)
    np.testing.assert_array_equal(obs[0], [0, 0, 1, 1, 3, 3])
    np.testing.assert_array_equal(obs[1], [0, 0, 0, 0, 4, 4])  # new episode starts from zeros
    np.testing.assert_array_equal(infos[1]["terminal_observation"], [0, 0, 2, 2, 9, 9])
    np.testing.assert_array_equal(first[0], [0, 0, 0, 0, 1, 1])  # earlier result untouched
    with pytest.raises(ValueError):
        StackedObservations.compute_stacking(2, space, "middle")
    with pytest.raises(TypeError):
        StackedObservations(1, 2, spaces.Discrete(3))  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- VecNormalize
@pytest.mark.timeout(60)
def test_normalize_matches_sb3_on_box(sv, closing):
    ours, theirs = pair(sv, closing, make_cartpole)
    kw = dict(gamma=0.9, clip_obs=5.0, clip_reward=3.0)
    ours, theirs = VecNormalize(ours, **kw), sv.VecNormalize(theirs, **kw)
    assert run_side_by_side(ours, theirs, steps=120, seed=3, rtol=1e-5) > 0
    np.testing.assert_allclose(ours.obs_rms.mean, theirs.obs_rms.mean, rtol=1e-9)
    np.testing.assert_allclose(ours.obs_rms.var, theirs.obs_rms.var, rtol=1e-9)
    np.testing.assert_allclose(ours.ret_rms.var, theirs.ret_rms.var, rtol=1e-9)
    assert ours.obs_rms.count == theirs.obs_rms.count
    assert_same(ours.get_original_obs(), theirs.get_original_obs())
    assert_same(ours.get_original_reward(), theirs.get_original_reward())


@pytest.mark.timeout(60)
@pytest.mark.parametrize("keys", [None, ["vec"]])
def test_normalize_matches_sb3_on_dict(sv, closing, keys):
    ours, theirs = pair(sv, closing, make_dict_env)
    ours = VecNormalize(ours, norm_obs_keys=keys)
    theirs = sv.VecNormalize(theirs, norm_obs_keys=keys)
    assert ours.observation_space == theirs.observation_space
    if keys is None:  # the normalized image is a float Box now
        assert ours.observation_space["img"].dtype == np.float32
        assert ours.venv.observation_space["img"].dtype == np.uint8  # inner space untouched
    assert run_side_by_side(ours, theirs, steps=40, seed=4, rtol=1e-5) > 0


def test_normalize_rejects_what_it_cannot_normalize(closing):
    venv = DummyVecEnv([make_dict_env])
    closing(venv)
    with pytest.raises(ValueError, match="norm_obs_keys"):
        VecNormalize(DummyVecEnv([make_cartpole]), norm_obs_keys=["x"])
    with pytest.raises(KeyError):
        VecNormalize(venv, norm_obs_keys=["missing"])


@pytest.mark.timeout(60)
def test_normalize_training_flag_and_inverse(closing):
    venv = VecNormalize(DummyVecEnv([make_cartpole, make_cartpole]), norm_reward=True)
    closing(venv)
    venv.seed(0)
    venv.reset()
    for _ in range(30):
        venv.step(np.array([0, 1]))
    venv.training = False
    mean, count = venv.obs_rms.mean.copy(), venv.obs_rms.count
    obs, rewards, _, _ = venv.step(np.array([1, 0]))
    assert venv.obs_rms.count == count and np.array_equal(venv.obs_rms.mean, mean)
    original = venv.get_original_obs()
    np.testing.assert_allclose(venv.unnormalize_obs(obs), original, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        venv.unnormalize_reward(rewards), venv.get_original_reward(), rtol=1e-5
    )
    assert obs.dtype == np.float32 and rewards.dtype == np.float32


@pytest.mark.timeout(60)
def test_normalize_save_load_round_trip(tmp_path, closing):
    venv = VecNormalize(DummyVecEnv([make_cartpole, make_cartpole]), gamma=0.95, clip_obs=4.0)
    closing(venv)
    venv.seed(1)
    venv.reset()
    for _ in range(50):
        venv.step(np.array([0, 1]))
    path = str(tmp_path / "vecnormalize.pkl")
    venv.save(path)
    with open(path, "rb") as f:
        stored = pickle.load(f)
    assert stored.venv is None and "returns" not in stored.__dict__  # statistics only
    loaded = VecNormalize.load(path, DummyVecEnv([make_cartpole, make_cartpole]))
    closing(loaded)
    assert loaded.gamma == 0.95 and loaded.clip_obs == 4.0
    np.testing.assert_array_equal(loaded.obs_rms.mean, venv.obs_rms.mean)
    np.testing.assert_array_equal(loaded.obs_rms.var, venv.obs_rms.var)
    assert loaded.ret_rms.count == venv.ret_rms.count
    assert loaded.returns.shape == (2,) and not loaded.returns.any()
    with pytest.raises(ValueError, match="already wraps"):
        loaded.set_venv(DummyVecEnv([make_cartpole]))
    venv.training = loaded.training = False
    for v in (venv, loaded):
        v.seed(9)
    assert_same(loaded.reset(), venv.reset())
    a = loaded.step(np.array([1, 1]))
    b = venv.step(np.array([1, 1]))
    assert_same(a, b)
    with pytest.raises(ValueError, match="shape"):
        VecNormalize.load(path, DummyVecEnv([make_image_env]))


@pytest.mark.timeout(60)
def test_normalize_loads_statistics_saved_by_sb3(sv, tmp_path, closing):
    theirs = sv.VecNormalize(sv.DummyVecEnv([make_cartpole]))
    theirs.reset()
    for _ in range(20):
        theirs.step(np.array([1]))
    path = str(tmp_path / "sb3.pkl")
    theirs.save(path)
    ours = VecNormalize.load(path, DummyVecEnv([make_cartpole]))
    closing(ours)
    closing(theirs)
    assert type(ours) is VecNormalize and type(ours.obs_rms) is RunningMeanStd
    np.testing.assert_array_equal(ours.obs_rms.mean, theirs.obs_rms.mean)
    assert ours.ret_rms.count == theirs.ret_rms.count


def test_sync_envs_normalization(closing):
    train = VecNormalize(DummyVecEnv([make_cartpole]))
    evaluate = VecNormalize(DummyVecEnv([make_cartpole]), training=False)
    closing(train)
    closing(evaluate)
    train.reset()
    train.step(np.array([0]))
    sync_envs_normalization(train, evaluate)
    np.testing.assert_array_equal(evaluate.obs_rms.mean, train.obs_rms.mean)
    assert evaluate.obs_rms is not train.obs_rms
    assert unwrap_vec_normalize(VecMonitor(train)) is train
    with pytest.raises(ValueError):
        sync_envs_normalization(train, evaluate.venv)


def test_running_mean_std_matches_numpy():
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, size=(n, 4)) for n in (5, 17, 1, 40)]
    rms = RunningMeanStd(epsilon=1e-12, shape=(4,))
    for batch in batches:
        rms.update(batch)
    data = np.concatenate(batches)
    np.testing.assert_allclose(rms.mean, data.mean(axis=0), rtol=1e-9)
    np.testing.assert_allclose(rms.var, data.var(axis=0), rtol=1e-9)
    left, right = RunningMeanStd(1e-12, (4,)), RunningMeanStd(1e-12, (4,))
    left.update(batches[0])
    right.update(batches[1])
    merged = left.copy()
    merged.combine(right)
    np.testing.assert_allclose(merged.var, np.concatenate(batches[:2]).var(axis=0), rtol=1e-9)
    assert left.count == pytest.approx(5)  # copy() left the original alone


# ---------------------------------------------------------------------------- VecMonitor
def _read_monitor(path: str) -> tuple[dict, list[str], list[list[str]]]:
    with open(path) as f:
        first = f.readline()
        assert first.startswith("#")
        rows = list(csv.reader(f))
    return json.loads(first[1:]), rows[0], rows[1:]


@pytest.mark.timeout(60)
def test_monitor_matches_sb3_and_writes_the_same_csv(sv, closing, tmp_path):
    ours, theirs = pair(sv, closing, make_dict_env)
    ours = VecMonitor(ours, str(tmp_path / "ours"), info_keywords=("t",))
    theirs = sv.VecMonitor(theirs, str(tmp_path / "theirs"), info_keywords=("t",))
    ends = run_side_by_side(ours, theirs, steps=40, seed=6, episode_time=False)
    assert ends > 0 and ours.episode_count == theirs.episode_count == ends
    ours.close()
    theirs.close()
    header_o, cols_o, rows_o = _read_monitor(str(tmp_path / "ours.monitor.csv"))
    header_t, cols_t, rows_t = _read_monitor(str(tmp_path / "theirs.monitor.csv"))
    assert set(header_o) == set(header_t) == {"t_start", "env_id"}
    assert header_o["env_id"] == header_t["env_id"]
    assert cols_o == cols_t == ["r", "l", "t", "t"][: len(cols_o)]
    assert len(rows_o) == len(rows_t) == ends
    assert [(r[0], r[1]) for r in rows_o] == [(r[0], r[1]) for r in rows_t]


@pytest.mark.timeout(60)
def test_monitor_episode_info_on_cartpole(closing):
    venv = VecMonitor(DummyVecEnv([make_cartpole, make_cartpole]))
    closing(venv)
    venv.seed(0)
    venv.reset()
    lengths = np.zeros(2, int)
    returns = np.zeros(2)
    seen = 0
    for _ in range(100):
        _, rewards, dones, infos = venv.step(np.array([0, 1]))
        lengths += 1
        returns += rewards
        for i in np.flatnonzero(dones):
            episode = infos[i]["episode"]
            assert episode["l"] == lengths[i] and episode["r"] == pytest.approx(returns[i])
            assert episode["t"] >= 0
            lengths[i], returns[i] = 0, 0
            seen += 1
    assert seen > 0


# ---------------------------------------------------------------------------- other wrappers
@pytest.mark.timeout(60)
def test_transpose_matches_sb3(sv, closing):
    ours, theirs = pair(sv, closing, make_image_env, n=2)
    ours, theirs = VecTransposeImage(ours), sv.VecTransposeImage(theirs)
    assert ours.observation_space == theirs.observation_space
    assert ours.observation_space.shape == (3, 6, 7)
    assert run_side_by_side(ours, theirs, steps=30, seed=7) > 0


@pytest.mark.timeout(60)
def test_transpose_dict_and_skip(sv, closing):
    ours, theirs = pair(sv, closing, make_dict_env, n=2)
    ours, theirs = VecTransposeImage(ours), sv.VecTransposeImage(theirs)
    assert ours.image_space_keys == ["img"]
    assert ours.observation_space == theirs.observation_space
    assert run_side_by_side(ours, theirs, steps=30, seed=7) > 0
    skipped = VecTransposeImage(DummyVecEnv([make_image_env]), skip=True)
    closing(skipped)
    assert skipped.reset().shape == (1, 6, 7, 3)
    with pytest.raises(ValueError):
        VecTransposeImage(DummyVecEnv([make_cartpole]))


@pytest.mark.timeout(60)
def test_extract_dict_obs_matches_sb3(sv, closing):
    ours, theirs = pair(sv, closing, make_dict_env)
    ours, theirs = VecExtractDictObs(ours, "vec"), sv.VecExtractDictObs(theirs, "vec")
    assert ours.observation_space == theirs.observation_space
    assert run_side_by_side(ours, theirs, steps=40, seed=8) > 0


@pytest.mark.timeout(60)
def test_check_nan_raises_like_sb3(sv, closing):
    ours, theirs = pair(sv, closing, NanEnv, n=2)
    ours = VecCheckNan(ours, raise_exception=True)
    theirs = sv.VecCheckNan(theirs, raise_exception=True)
    ours.reset()
    theirs.reset()
    action = np.zeros((2, 1), np.float32)
    for _ in range(2):
        assert_same(ours.step(action), theirs.step(action))
    with pytest.raises(ValueError, match="nan in observations"):
        ours.step(action)
    with pytest.raises(ValueError, match="nan"):
        theirs.step(action)
    with pytest.raises(ValueError, match="RL model"):
        ours.step_async(np.full((2, 1), np.nan, np.float32))


@pytest.mark.timeout(60)
def test_check_nan_warns_once(closing):
    venv = VecCheckNan(DummyVecEnv([lambda: NanEnv(nan_at=1)]), raise_exception=False)
    closing(venv)
    venv.reset()
    with pytest.warns(UserWarning, match="nan"):
        venv.step(np.zeros((1, 1), np.float32))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        venv.step(np.full((1, 1), np.nan, np.float32))  # already warned once: silent


# ---------------------------------------------------------------------------- mixing with SB3
@pytest.mark.timeout(60)
def test_wrappers_mix_with_sb3_in_both_directions(sv, closing):
    def reference():
        venv = sv.VecFrameStack(sv.VecNormalize(sv.DummyVecEnv([make_cartpole] * 2)), 2)
        closing(venv)
        return venv

    sb3_over_ours = sv.VecFrameStack(sv.VecNormalize(DummyVecEnv([make_cartpole] * 2)), 2)
    ours_over_sb3 = VecFrameStack(VecNormalize(sv.DummyVecEnv([make_cartpole] * 2)), 2)
    closing(sb3_over_ours)
    closing(ours_over_sb3)
    assert run_side_by_side(sb3_over_ours, reference(), steps=60, seed=10, rtol=1e-5) > 0
    assert run_side_by_side(ours_over_sb3, reference(), steps=60, seed=10, rtol=1e-5) > 0
    # attribute look-ups fall through any mix of wrappers
    assert sb3_over_ours.get_attr("spec")[0].id == "CartPole-v1"
    assert isinstance(ours_over_sb3.obs_rms, RunningMeanStd)
    assert sb3_over_ours.unwrapped is sb3_over_ours.venv.venv


def test_attribute_fall_through_and_ambiguity(closing):
    base = DummyVecEnv([make_cartpole])
    closing(base)
    normalized = VecNormalize(base)
    stacked = VecFrameStack(normalized, 2)
    assert stacked.obs_rms is normalized.obs_rms
    assert stacked.unwrapped is base
    assert stacked.getattr_recursive("gamma") == 0.99
    with pytest.raises(AttributeError):
        stacked.no_such_attribute  # noqa: B018
    double = VecMonitor(VecNormalize(normalized))
    with pytest.raises(AttributeError, match="ambiguous"):
        double.obs_rms  # noqa: B018


def test_is_wrapped_answers_as_env_is_wrapped():
    """``is_wrapped`` is the check ``env_is_wrapped`` runs on each env: SB3's Monitor and
    vecenv's count as one wrapper."""
    sb3_monitor = pytest.importorskip("stable_baselines3.common.monitor")
    env = Monitor(make_cartpole())
    assert is_wrapped(env, Monitor) and is_wrapped(env, sb3_monitor.Monitor)
    assert is_wrapped(sb3_monitor.Monitor(make_cartpole()), Monitor)
    assert unwrap_wrapper(env, Monitor) is env
    assert not is_wrapped(env, VecMonitor) and not is_wrapped(make_cartpole(), Monitor)


# ---------------------------------------------------------------------------- make_vec_env
@pytest.mark.timeout(60)
def test_make_vec_env_matches_sb3(tmp_path, closing):
    env_util = pytest.importorskip("stable_baselines3.common.env_util")
    sb3_monitor = pytest.importorskip("stable_baselines3.common.monitor")
    ours = make_vec_env("CartPole-v1", n_envs=3, seed=4, monitor_dir=str(tmp_path / "m"))
    theirs = env_util.make_vec_env("CartPole-v1", n_envs=3, seed=4)
    closing(ours)
    closing(theirs)
    assert ours.render_mode == theirs.render_mode == "rgb_array"
    assert ours.env_is_wrapped(Monitor) == [True] * 3
    assert ours.env_is_wrapped(sb3_monitor.Monitor) == [True] * 3  # SB3's evaluate_policy asks this
    # make_vec_env already set the seeds: run without re-seeding
    ours._seeds, theirs._seeds = list(ours._seeds), list(theirs._seeds)
    assert ours._seeds == theirs._seeds == [4, 5, 6]
    assert_same(ours.reset(), theirs.reset())
    for _ in range(60):
        actions = np.array([0, 1, 1])
        a, b = ours.step(actions), theirs.step(actions)
        for info in (*a[3], *b[3]):
            info.get("episode", {}).pop("t", None)
        assert_same(a, b)
    ours.close()
    files = sorted(os.listdir(tmp_path / "m"))
    assert files == ["0.monitor.csv", "1.monitor.csv", "2.monitor.csv"]
    header, cols, rows = _read_monitor(str(tmp_path / "m" / "0.monitor.csv"))
    assert header["env_id"] == "CartPole-v1" and cols == ["r", "l", "t"] and rows


@pytest.mark.timeout(60)
def test_make_vec_env_arguments(closing):
    from gymnasium.wrappers import TimeLimit
    from sb3_testenvs import DictEnv

    venv = make_vec_env(
        DictEnv,
        n_envs=2,
        start_index=5,
        env_kwargs={"render_mode": "rgb_array"},
        wrapper_class=TimeLimit,
        wrapper_kwargs={"max_episode_steps": 2},
        vec_env_kwargs={},
        monitor_kwargs={"info_keywords": ("t",)},
    )
    closing(venv)
    assert venv.render_mode == "rgb_array"
    assert venv.env_is_wrapped(TimeLimit) == [True, True]
    venv.reset()
    ends = 0
    for _ in range(6):
        _, _, dones, infos = venv.step(np.array([0, 0]))
        for i in np.flatnonzero(dones):
            ends += 1
            if infos[i]["TimeLimit.truncated"]:
                # wrapper_class goes outside the Monitor, which does not see this end (as in SB3)
                assert "episode" not in infos[i]
            else:
                assert infos[i]["episode"]["l"] <= 2 and "t" in infos[i]["episode"]
    assert ends >= 6  # every episode ends within 2 steps


# ---------------------------------------------------------------------------- VecVideoRecorder
@pytest.mark.timeout(60)
def test_video_recorder_writes_a_clip(tmp_path, closing):
    pytest.importorskip("imageio")
    pytest.importorskip("imageio_ffmpeg")
    from vecenv.sb3 import VecVideoRecorder

    venv = DummyVecEnv([lambda: make_dict_env(render_mode="rgb_array")] * 2)
    recorder = VecVideoRecorder(venv, str(tmp_path), lambda step: step == 0, video_length=5, name_prefix="clip")
    recorder.reset()
    for _ in range(8):
        recorder.step(np.array([0, 1]))
    recorder.close()
    path = tmp_path / "clip-step-0-to-step-5.mp4"
    assert path.exists() and path.stat().st_size > 0
    with pytest.raises(ValueError, match="rgb_array"):
        VecVideoRecorder(DummyVecEnv([make_cartpole]), str(tmp_path), lambda s: True)


@pytest.mark.timeout(120)
def test_video_recorder_records_what_sb3_s_records(sv, tmp_path, closing):
    """The same frames, clips and clip names as SB3's VecVideoRecorder (which writes with
    moviepy) over the same envs; the clips read back frame for frame."""
    imageio = pytest.importorskip("imageio.v2")
    pytest.importorskip("imageio_ffmpeg")
    pytest.importorskip("moviepy")
    from vecenv.sb3 import VecVideoRecorder

    fn = lambda: make_dict_env(render_mode="rgb_array")  # noqa: E731
    ours_env, theirs_env = pair(sv, closing, fn, n=3)
    trigger = lambda step: step % 6 == 0  # noqa: E731
    ours = VecVideoRecorder(ours_env, str(tmp_path / "ours"), trigger, video_length=3, name_prefix="clip")
    theirs = sv.VecVideoRecorder(theirs_env, str(tmp_path / "sb3"), trigger, video_length=3, name_prefix="clip")
    ours_env.seed(1)
    theirs_env.seed(1)
    ours.reset()
    theirs.reset()
    for step in range(14):
        for recorder in (ours, theirs):
            recorder.step(np.array([0, 1, 2]))
        assert (ours.recording, ours.step_id) == (theirs.recording, theirs.step_id), step
        assert len(ours.recorded_frames) == len(theirs.recorded_frames), step
        for a, b in zip(ours.recorded_frames, theirs.recorded_frames, strict=True):
            np.testing.assert_array_equal(a, b)
    ours.close()
    theirs.close()
    names = sorted(os.listdir(tmp_path / "ours"))
    assert names == sorted(os.listdir(tmp_path / "sb3"))
    assert names == ["clip-step-0-to-step-3.mp4", "clip-step-12-to-step-15.mp4", "clip-step-6-to-step-9.mp4"]
    for name in names:
        got = [np.asarray(f) for f in imageio.get_reader(str(tmp_path / "ours" / name))]
        want = [np.asarray(f) for f in imageio.get_reader(str(tmp_path / "sb3" / name))]
        assert len(got) == len(want) > 0, name
        for a, b in zip(got, want, strict=True):  # H.264 is lossy: equal within a few levels
            assert a.shape == b.shape and np.abs(a.astype(int) - b.astype(int)).max() <= 4, name
