"""vecenv.sb3's VecEnv API: DummyVecEnv against SB3's, from_vector_env, attribute access."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
from sb3_testenvs import DictEnv, assert_same, make_cartpole, make_dict_env, run_side_by_side

import vecenv.sb3 as vsb3
from helpers import FAST_START
from vecenv.infos import InfoEntry
from vecenv.sb3 import DummyVecEnv, SubprocVecEnv, from_vector_env
from vecenv.sb3._backend import unbatch_info

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")


def _python(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.path.abspath(SRC)}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def sb3_vec_env():
    return pytest.importorskip("stable_baselines3.common.vec_env")


# ---------------------------------------------------------------------------- import contract
@pytest.mark.timeout(60)
def test_import_needs_neither_sb3_nor_torch():
    code = (
        "import sys, vecenv.sb3\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
        "assert 'stable_baselines3' not in sys.modules, 'SB3 imported'\n"
        "import gymnasium as gym\n"
        "v = vecenv.sb3.DummyVecEnv([lambda: gym.make('CartPole-v1')])\n"
        "v.reset(); v.step([0]); v.close()\n"
        "assert 'torch' not in sys.modules\n"
        "print('ok')"
    )
    result = _python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sb3_first", [True, False])
def test_sb3_recognises_vecenv_classes_whichever_is_imported_first(sb3_first):
    pytest.importorskip("stable_baselines3")
    sb3_import = "from stable_baselines3.common import vec_env as sv\n"
    code = (
        (sb3_import if sb3_first else "")
        + "import gymnasium as gym\nfrom vecenv.sb3 import DummyVecEnv, VecNormalize\n"
        + "v = VecNormalize(DummyVecEnv([lambda: gym.make('CartPole-v1')]))\n"
        + ("" if sb3_first else sb3_import)
        + "assert isinstance(v, sv.VecEnv) and isinstance(v, sv.VecEnvWrapper)\n"
        + "assert isinstance(v, sv.VecNormalize) and isinstance(v.venv, sv.DummyVecEnv)\n"
        + "assert not isinstance(v.venv, sv.VecEnvWrapper)\n"
        + "from stable_baselines3.common.vec_env import unwrap_vec_normalize\n"
        + "assert unwrap_vec_normalize(v) is v\n"
        + "v.close(); print('ok')"
    )
    result = _python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


# ---------------------------------------------------------------------------- differential
@pytest.mark.timeout(60)
def test_dummy_matches_sb3_on_cartpole(sb3_vec_env, closing):
    ours = DummyVecEnv([make_cartpole for _ in range(3)])
    theirs = sb3_vec_env.DummyVecEnv([make_cartpole for _ in range(3)])
    closing(ours)
    closing(theirs)
    assert ours.observation_space == theirs.observation_space
    assert ours.action_space == theirs.action_space
    assert ours.render_mode == theirs.render_mode
    assert ours.metadata == theirs.metadata
    ends = run_side_by_side(ours, theirs, steps=120, seed=3)
    assert ends >= 6


@pytest.mark.timeout(60)
def test_dummy_matches_sb3_on_dict_env_with_truncation(sb3_vec_env, closing):
    ours = DummyVecEnv([make_dict_env for _ in range(3)])
    theirs = sb3_vec_env.DummyVecEnv([make_dict_env for _ in range(3)])
    closing(ours)
    closing(theirs)
    ours.seed(5)
    theirs.seed(5)
    assert_same(ours.reset(), theirs.reset())
    truncated = terminated = 0
    for _ in range(60):
        actions = np.array([0, 1, 2])
        o1, r1, d1, i1 = ours.step(actions)
        o2, r2, d2, i2 = theirs.step(actions)
        assert_same((o1, r1, d1, i1), (o2, r2, d2, i2))
        assert_same(ours.reset_infos, theirs.reset_infos)
        assert r1.dtype == np.float32 and d1.dtype == np.bool_
        for i in np.flatnonzero(d1):
            assert set(i1[i]["terminal_observation"]) == {"vec", "img"}
            truncated += i1[i]["TimeLimit.truncated"]
            terminated += not i1[i]["TimeLimit.truncated"]
    assert truncated > 0 and terminated > 0  # both ways an episode ends were compared


@pytest.mark.timeout(60)
def test_options_and_seeds_are_used_once(sb3_vec_env, closing):
    ours = DummyVecEnv([make_dict_env for _ in range(3)])
    theirs = sb3_vec_env.DummyVecEnv([make_dict_env for _ in range(3)])
    closing(ours)
    closing(theirs)
    for venv in (ours, theirs):
        venv.seed(7)
        venv.set_options([{"scale": 2.0}, {}, {"scale": 3.0}])  # different per env
    assert_same(ours.reset(), theirs.reset())
    assert [info["scale"] for info in ours.reset_infos] == [2.0, 1.0, 3.0]
    assert_same(ours.reset_infos, theirs.reset_infos)
    for venv in (ours, theirs):
        venv.set_options({"scale": 4.0})  # one dict for all
    assert_same(ours.reset(), theirs.reset())
    assert [info["scale"] for info in ours.reset_infos] == [4.0] * 3
    # seeds and options were consumed: the next reset is unseeded and uses default options
    ours.reset()
    assert [info["scale"] for info in ours.reset_infos] == [1.0] * 3
    assert ours._seeds == [None] * 3


@pytest.mark.timeout(60)
def test_same_seed_gives_same_episode_and_unseeded_reset_differs(closing):
    venv = DummyVecEnv([make_cartpole, make_cartpole])
    closing(venv)
    assert venv.seed(11) == [11, 12]
    first = venv.reset()
    venv.seed(11)
    np.testing.assert_array_equal(venv.reset(), first)
    assert not np.array_equal(first[0], first[1])  # each env gets its own seed
    seeds = venv.seed()
    assert seeds[1] == seeds[0] + 1


@pytest.mark.timeout(60)
def test_returned_observation_is_never_overwritten(closing):
    venv = DummyVecEnv([make_cartpole, make_cartpole])
    closing(venv)
    venv.seed(0)
    obs = venv.reset()
    kept = obs.copy()
    for _ in range(30):
        new_obs, _, dones, infos = venv.step(np.array([1, 1]))
        np.testing.assert_array_equal(obs, kept)
        for i in np.flatnonzero(dones):
            term = infos[i]["terminal_observation"]
            assert not np.shares_memory(term, new_obs)
        obs, kept = new_obs, new_obs.copy()


# ---------------------------------------------------------------------------- per-env requests
@pytest.mark.timeout(60)
def test_attribute_requests_match_sb3(sb3_vec_env, closing):
    ours = DummyVecEnv([make_dict_env for _ in range(3)])
    theirs = sb3_vec_env.DummyVecEnv([make_dict_env for _ in range(3)])
    closing(ours)
    closing(theirs)
    for venv in (ours, theirs):
        venv.seed(0)
        venv.reset()
    assert ours.get_attr("scale") == theirs.get_attr("scale") == [1.0] * 3
    assert ours.get_attr("t", indices=[2, 0]) == theirs.get_attr("t", indices=[2, 0])
    assert ours.get_attr("render_mode", indices=1) == [None]
    assert ours.env_method("add_bonus", 1.5, indices=[0, 2]) == [1.5, 1.5]
    assert theirs.env_method("add_bonus", 1.5, indices=[0, 2]) == [1.5, 1.5]
    assert ours.env_method("add_bonus", value=0.5) == theirs.env_method("add_bonus", value=0.5)
    assert ours.get_attr("bonus") == [2.0, 0.5, 2.0]
    ours.set_attr("bonus", 10.0, indices=1)
    assert ours.get_attr("bonus") == [2.0, 10.0, 2.0]
    # methods come back uncalled from get_attr, as in SB3
    assert all(callable(m) for m in ours.get_attr("add_bonus"))
    assert ours.has_attr("bonus") and not ours.has_attr("no_such_thing")
    assert ours.env_is_wrapped(gym.wrappers.TimeLimit) == [True] * 3
    assert ours.env_is_wrapped(gym.wrappers.RecordEpisodeStatistics, indices=[0]) == [False]
    # the bonus changed the envs' behaviour (set_attr reached the env, not just the wrapper)
    _, rewards, _, _ = ours.step(np.zeros(3, dtype=np.int64))
    assert rewards[1] >= 10.0 and rewards[0] < 10.0


@pytest.mark.timeout(60)
def test_failed_requests_raise_clearly_and_leave_env_working(closing):
    venv = DummyVecEnv([make_dict_env, make_dict_env])
    closing(venv)
    venv.reset()
    with pytest.raises(AttributeError, match="no_such_attr"):
        venv.get_attr("no_such_attr")
    with pytest.raises(AttributeError, match="no_such_method"):
        venv.env_method("no_such_method")
    with pytest.raises(TypeError, match="unsupported operand") as info:  # SB3's DummyVecEnv: the same
        venv.env_method("add_bonus", "not a number")
    assert type(info.value) is TypeError  # the env's own exception, as SB3 gives it
    assert any("env 0" in note for note in getattr(info.value, "__notes__", ())), "names the env"
    with pytest.raises(IndexError):
        venv.get_attr("t", indices=[5])
    obs, rewards, dones, infos = venv.step(np.array([0, 1]))
    assert rewards.shape == (2,) and len(infos) == 2
    assert venv.get_attr("t") == [0 if done else 1 for done in dones]


@pytest.mark.timeout(60)
def test_env_method_runs_in_place_on_the_envs_without_serializing(closing, monkeypatch):
    """What makes env_method cheap enough to call every step on DummyVecEnv: each call runs the
    method once per env, on the envs themselves, and pickles nothing."""
    import pickle

    import cloudpickle

    venv = DummyVecEnv([make_dict_env for _ in range(4)])
    closing(venv)
    venv.reset()
    envs = list(venv.envs)

    def refuse(*args, **kwargs):
        raise AssertionError("env_method pickled something")

    for module in (pickle, cloudpickle):
        monkeypatch.setattr(module, "dumps", refuse)
        monkeypatch.setattr(module, "dump", refuse)
    for k in range(1, 201):
        assert venv.env_method("add_bonus", 1.0) == [float(k)] * 4
    assert venv.env_method("add_bonus", 0.5, indices=[2]) == [200.5]
    assert [e.unwrapped.bonus for e in envs] == [200.0, 200.0, 200.5, 200.0]
    assert all(a is b for a, b in zip(venv.envs, envs, strict=True))  # the same env objects


@pytest.mark.timeout(60)
def test_same_instance_twice_is_refused():
    env = make_cartpole()
    with pytest.raises(ValueError, match="same environment instance"):
        DummyVecEnv([lambda: env, lambda: env])
    env.close()


@pytest.mark.timeout(60)
def test_envs_and_unwrapped_and_context_manager():
    with DummyVecEnv([make_cartpole, make_cartpole]) as venv:
        assert len(venv.envs) == 2 and all(isinstance(e, gym.Env) for e in venv.envs)
        assert venv.unwrapped is venv
        venv.reset()
    assert venv.closed
    venv.close()  # idempotent


# ---------------------------------------------------------------------------- rendering
@pytest.mark.timeout(60)
def test_render_tiles_rgb_frames(sb3_vec_env, closing):
    fns = [lambda: make_dict_env(render_mode="rgb_array") for _ in range(3)]
    ours = DummyVecEnv(fns)
    theirs = sb3_vec_env.DummyVecEnv(fns)
    closing(ours)
    closing(theirs)
    for venv in (ours, theirs):
        venv.seed(0)
        venv.reset()
        venv.step(np.array([0, 1, 2]))
    assert ours.render_mode == "rgb_array"
    images = ours.get_images()
    assert len(images) == 3 and images[0].shape == (4, 5, 3)
    assert_same(ours.render(), theirs.render())
    assert ours.render().shape == (8, 10, 3)  # 2x2 grid, one black tile
    with pytest.warns(UserWarning):
        assert ours.render(mode="depth") is None


@pytest.mark.timeout(60)
def test_render_without_render_mode_warns(closing):
    venv = DummyVecEnv([make_cartpole])
    closing(venv)
    with pytest.warns(UserWarning):
        assert venv.render() is None
    with pytest.warns(UserWarning):
        assert venv.get_images() == [None]


# ---------------------------------------------------------------------------- from_vector_env
@pytest.mark.timeout(60)
def test_from_gymnasium_sync_vector_env_matches_dummy(closing):
    fns = [make_dict_env for _ in range(3)]
    gym_venv = gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    adapted = from_vector_env(gym_venv)
    ours = DummyVecEnv(fns)
    closing(adapted)
    closing(ours)
    ends = run_side_by_side(adapted, ours, steps=40, seed=1)
    assert ends > 0
    assert adapted.env_method("add_bonus", 1.0, indices=[1]) == [1.0]
    # in-process access: the call ran on that env object itself, and on no other
    assert [env.unwrapped.bonus for env in gym_venv.envs] == [0.0, 1.0, 0.0]


@pytest.mark.timeout(60)
def test_from_vector_env_through_gymnasium_vector_wrappers(closing):
    fns = [make_cartpole for _ in range(2)]
    base = gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    wrapped = gym.wrappers.vector.TransformReward(base, lambda r: r * 2.0)
    adapted = from_vector_env(wrapped)
    reference = DummyVecEnv(fns)
    closing(adapted)
    closing(reference)
    adapted.seed(4)
    reference.seed(4)
    np.testing.assert_array_equal(adapted.reset(), reference.reset())
    for _ in range(40):
        o1, r1, d1, i1 = adapted.step(np.array([1, 0]))
        o2, r2, d2, i2 = reference.step(np.array([1, 0]))
        np.testing.assert_array_equal(r1, 2 * r2)
        assert_same((o1, d1, i1), (o2, d2, i2))
    assert adapted.get_attr("spec")[0].id == "CartPole-v1"


@pytest.mark.timeout(60)
def test_from_async_vector_env_uses_generic_access(closing):
    fns = [make_cartpole for _ in range(2)]
    venv = gym.vector.AsyncVectorEnv(
        fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP, context=FAST_START
    )
    adapted = from_vector_env(venv)
    closing(adapted)
    # no per-env access through a subprocess vector env: a request for some envs says so
    with pytest.raises(NotImplementedError, match="env_method on a subset of envs is not available for AsyncVectorEnv"):
        adapted.env_method("reset", indices=[1])
    adapted.seed(0)
    adapted.reset()
    done_seen = False
    for _ in range(60):
        _, _, dones, infos = adapted.step(np.array([1, 1]))
        for i in np.flatnonzero(dones):
            done_seen = True
            assert infos[i]["terminal_observation"].shape == (4,)
    assert done_seen
    assert adapted.get_attr("spec", indices=[1])[0].id == "CartPole-v1"
    with pytest.raises(NotImplementedError):
        adapted.env_method("reset", indices=[0])
    assert adapted.env_is_wrapped(gym.wrappers.TimeLimit) == [False, False]


@pytest.mark.timeout(60)
def test_from_vector_env_refuses_next_step_mode():
    venv = gym.vector.SyncVectorEnv([make_cartpole])  # NEXT_STEP by default
    with pytest.raises(ValueError, match='autoreset_mode="same_step"'):
        from_vector_env(venv)
    venv.close()


@pytest.mark.timeout(60)
def test_from_vector_env_refuses_async_batches():
    import vecenv

    venv = vecenv.SerialVectorEnv(
        [make_cartpole, make_cartpole], autoreset_mode="same_step", batch_size=1
    )
    try:
        with pytest.raises(ValueError, match="batch"):
            from_vector_env(venv)
    finally:
        venv.close()


# ---------------------------------------------------------------------------- fast path
class EntriesSyncVectorEnv(gym.vector.SyncVectorEnv):
    """gymnasium's SyncVectorEnv plus the engine's raw-entries protocol, to pin the fast path."""

    def reset_entries(self, seed=None, options=None, env_ids=None):
        if env_ids is not None:
            mask = np.zeros(self.num_envs, dtype=bool)
            mask[env_ids] = True
            options = {**(options or {}), "reset_mask": mask}
        obs, infos = self.reset(seed=seed, options=options)
        entries = [InfoEntry(i, unbatch_info(infos, i)) for i in range(self.num_envs)]
        return obs, [e for e in entries if e.info]

    def step_entries(self, actions):
        obs, rew, term, trunc, infos = self.step(actions)
        entries = []
        for i in range(self.num_envs):
            info = unbatch_info(infos, i, frozenset(("final_obs", "_final_obs", "final_info", "_final_info")))
            if term[i] or trunc[i]:
                entries.append(
                    InfoEntry(i, info, True, infos["final_obs"][i], unbatch_info(infos["final_info"], i))
                )
            elif info:
                entries.append(InfoEntry(i, info))
        return obs, rew, term, trunc, entries


@pytest.mark.timeout(60)
def test_fast_path_matches_batched_path(closing):
    fns = [make_dict_env for _ in range(3)]
    fast = from_vector_env(EntriesSyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP))
    slow = from_vector_env(gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP))
    closing(fast)
    closing(slow)
    assert fast._fast and not slow._fast
    fast.set_options([{"scale": 2.0}, {}, {}])
    slow.set_options([{"scale": 2.0}, {}, {}])
    assert run_side_by_side(fast, slow, steps=40, seed=2) > 0


# ---------------------------------------------------------------------------- SubprocVecEnv
def test_subproc_rejects_unknown_start_method():
    with pytest.raises(ValueError, match="start_method"):
        SubprocVecEnv([make_cartpole], start_method="threads")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_subproc_matches_dummy(start_method, closing):
    fns = [make_dict_env for _ in range(4)]
    sub = SubprocVecEnv(fns, start_method=start_method, num_workers=2)
    ref = DummyVecEnv(fns)
    closing(sub)
    closing(ref)
    assert run_side_by_side(sub, ref, steps=30, seed=9) > 0
    assert sub.env_method("add_bonus", 2.0, indices=[3, 1]) == [2.0, 2.0]
    assert sub.get_attr("bonus") == [0.0, 2.0, 0.0, 2.0]
    sub.set_attr("bonus", 1.0, indices=[0])
    assert sub.get_attr("bonus", indices=0) == [1.0]
    assert sub.env_is_wrapped(gym.wrappers.TimeLimit) == [True] * 4
    with pytest.raises(AttributeError):
        sub.get_attr("missing")
    assert not sub.has_attr("missing")
    sub.step(np.zeros(4, dtype=np.int64))


def test_public_names_exist():
    for name in vsb3.__all__:
        assert getattr(vsb3, name) is not None
    assert issubclass(DummyVecEnv, vsb3.VecEnv) and issubclass(vsb3.VecNormalize, vsb3.VecEnvWrapper)


def test_dict_env_is_deterministic_given_seed():
    a, b = DictEnv(), DictEnv()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_same(a.reset(seed=1), b.reset(seed=1))


@pytest.mark.timeout(60)
def test_make_vec_env_with_subproc_and_failing_env_method(closing):
    venv = vsb3.make_vec_env(
        "CartPole-v1", n_envs=3, seed=2, vec_env_cls=SubprocVecEnv,
        vec_env_kwargs={"start_method": "fork", "num_workers": 2},
    )
    closing(venv)
    ref = vsb3.make_vec_env("CartPole-v1", n_envs=3, seed=2)
    closing(ref)
    assert venv.env_is_wrapped(vsb3.Monitor) == [True] * 3
    np.testing.assert_array_equal(venv.reset(), ref.reset())
    with pytest.raises(AssertionError, match="invalid") as info:  # CartPole's own assert, as in SB3
        venv.env_method("step", "not an action", indices=[1])
    assert type(info.value) is AssertionError
    assert any("env 1" in note for note in getattr(info.value, "__notes__", ())), "names the failing env"
    # the vector env still works and is still in step with the reference
    for _ in range(3):
        a, b = venv.step(np.array([0, 1, 0])), ref.step(np.array([0, 1, 0]))
        np.testing.assert_array_equal(a[0], b[0])


# ---------------------------------------------------------------------------- vecenv's keywords
def _faulty(fault=None, at=3):
    from vecenv.testing import FaultyEnv

    return FaultyEnv(fault, at=at)


@pytest.mark.timeout(60)
def test_subproc_on_error_restart_ends_the_episode_as_a_truncation(closing):
    """docs/sb3.md: SubprocVecEnv takes on_error=; a failed env is rebuilt and its episode ends as a
    time-limit truncation (SB3's way of saying the episode was cut), the others run on as if
    nothing happened."""
    from functools import partial

    fns = [_faulty, partial(_faulty, "step_raise", 2), _faulty]
    sub = SubprocVecEnv(fns, start_method="fork", num_workers=2, on_error="restart")
    ref = DummyVecEnv([_faulty] * 3)
    closing(sub)
    closing(ref)
    for venv in (sub, ref):
        venv.seed(0)
    obs, want = sub.reset(), ref.reset()
    np.testing.assert_array_equal(obs, want)
    acts = np.zeros(3, dtype=np.int64)
    o1, r1, d1, i1 = sub.step(acts)
    o2, r2, d2, i2 = ref.step(acts)
    assert_same((o1, r1, d1, list(i1)), (o2, r2, d2, list(i2)))
    held = o1[1].copy()
    o1, r1, d1, i1 = sub.step(acts)  # env 1 fails on its 2nd step
    o2, r2, d2, i2 = ref.step(acts)
    assert d1.tolist() == [False, True, False] and r1[1] == 0.0
    assert i1[1]["restarted"] and "ValueError: planted step failure at step 2" in i1[1]["restart_reason"]
    assert i1[1]["TimeLimit.truncated"]
    np.testing.assert_array_equal(i1[1]["terminal_observation"], held)  # where the episode stood
    for i in (0, 2):  # the others are untouched
        np.testing.assert_array_equal(o1[i], o2[i])
        assert r1[i] == r2[i] and not d1[i] and i1[i] == i2[i]
    _, _, d1, i1 = sub.step(acts)  # the run goes on
    assert not d1.any() and not any("restarted" in info for info in i1)
    assert sub.get_attr("steps") == [3, 1, 3]  # env 1 was rebuilt: one step in its new episode


@pytest.mark.timeout(60)
def test_subproc_on_error_raise_is_the_default(closing):
    from functools import partial

    sub = SubprocVecEnv([_faulty, partial(_faulty, "step_raise", 1)], start_method="fork", num_workers=2)
    closing(sub)
    sub.reset()
    with pytest.raises(ValueError, match="planted step failure at step 1") as info:
        sub.step(np.zeros(2, dtype=np.int64))
    assert type(info.value) is ValueError
    assert any("env 1" in note for note in getattr(info.value, "__notes__", ()))


@pytest.mark.timeout(60)
def test_subproc_step_timeout_ends_a_hung_env(closing):
    """docs/sb3.md: SubprocVecEnv takes step_timeout=: a hung env is reported by name, never a hang;
    with on_error="restart" its worker is replaced and the run goes on."""
    from functools import partial

    import vecenv

    fns = [_faulty, partial(_faulty, "hang", 2)]
    sub = SubprocVecEnv(fns, start_method="fork", num_workers=2, step_timeout=0.5)
    closing(sub)
    sub.reset()
    sub.step(np.zeros(2, dtype=np.int64))
    with pytest.raises(vecenv.StepTimeoutError, match=r"envs \[1\] \(worker 1\) did not finish step within 0.5 s") as info:
        sub.step(np.zeros(2, dtype=np.int64))
    assert type(info.value) is vecenv.StepTimeoutError and isinstance(info.value, TimeoutError)
    restarting = SubprocVecEnv(fns, start_method="fork", num_workers=2, step_timeout=0.5, on_error="restart")
    closing(restarting)
    restarting.reset()
    restarting.step(np.zeros(2, dtype=np.int64))
    _, _, dones, infos = restarting.step(np.zeros(2, dtype=np.int64))
    assert dones.tolist() == [False, True]
    assert infos[1]["restarted"] and "StepTimeoutError" in infos[1]["restart_reason"]
    _, _, dones, _ = restarting.step(np.zeros(2, dtype=np.int64))
    assert not dones.any()
