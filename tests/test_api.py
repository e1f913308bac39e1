"""The user-facing API: make, closing, errors from sub-envs, async batches, drop-in names."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import vecenv
from helpers import BACKEND_KWARGS, assert_same, make_backend
from vecenv.testing import FaultyEnv, TextEnv

pytestmark = pytest.mark.timeout(60)


def test_make_variants():
    with vecenv.make("CartPole-v1", num_envs=3, backend="serial") as envs:
        assert envs.num_envs == 3 and repr(envs) == "SerialVectorEnv(CartPole-v1, num_envs=3)"
        assert envs.spec.id == "CartPole-v1"
    with vecenv.make(lambda max_steps: TextEnv(max_steps=max_steps), 2, backend="serial",
                     env_kwargs={"max_steps": 4}) as envs:
        assert envs.get_attr("max_steps") == (4, 4)
    with vecenv.make([lambda: TextEnv(max_steps=3), lambda: TextEnv(max_steps=5)], backend="serial") as envs:
        assert envs.num_envs == 2 and envs.get_attr("max_steps") == (3, 5)
    with pytest.raises(ValueError, match="num_envs=3 but 2 env callables"):
        vecenv.make([TextEnv, TextEnv], 3)
    assert "serial" in vecenv.available_backends()


def test_env_kwargs_reach_gym_make_and_wrappers_wrap_each_env(backend):
    """``env_kwargs`` go to ``gym.make`` (here: a 7-step time limit) and ``wrappers`` wrap each
    env: the same values as gymnasium's SyncVectorEnv over the envs built by hand."""
    ref = gym.vector.SyncVectorEnv(
        [lambda: gym.wrappers.TimeAwareObservation(gym.make("CartPole-v1", max_episode_steps=7))] * 2
    )
    kwargs = BACKEND_KWARGS[backend]
    with vecenv.make("CartPole-v1", 2, backend=backend, env_kwargs={"max_episode_steps": 7},
                     wrappers=[gym.wrappers.TimeAwareObservation], **kwargs) as envs:
        assert envs.single_observation_space == ref.single_observation_space
        assert envs.single_observation_space.shape == (5,)  # the wrapper's extra time entry
        assert_same(envs.reset(seed=0), ref.reset(seed=0))
        truncs_seen = []
        for t in range(8):
            actions = np.array([t % 2, 1 - t % 2])  # alternate pushes: the pole stays up
            out = envs.step(actions)
            assert_same(out, ref.step(actions), f"step {t}")
            _, _, terms, truncs, _ = out
            assert not terms.any()
            truncs_seen.append(truncs.tolist())
        # the 7th step ends both episodes by the time limit, the 8th is the autoreset step
        assert truncs_seen == [[False, False]] * 6 + [[True, True], [False, False]]
    ref.close()


def test_available_backends_are_the_four_make_accepts():
    from vecenv.make import BACKENDS

    assert vecenv.available_backends() == list(BACKENDS) == ["serial", "thread", "process", "ray"]


def test_serial_envs_and_sync_alias():
    assert issubclass(vecenv.SyncVectorEnv, vecenv.SerialVectorEnv)  # gymnasium's name, the serial backend
    with vecenv.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2) as envs:
        assert len(envs.envs) == 2 and all(e.spec.id == "CartPole-v1" for e in envs.envs)


def test_close_is_idempotent_and_later_calls_fail(backend):
    envs = make_backend(backend, [lambda: gym.make("CartPole-v1")] * 2)
    envs.reset(seed=0)
    envs.close()
    envs.close()
    assert envs.closed
    for call in (lambda: envs.step(np.zeros(2, int)), envs.reset, lambda: envs.call("reset"),
                 lambda: envs.get_attr("spec"), lambda: envs.set_attr("x", 1), envs.render):
        with pytest.raises(vecenv.ClosedEnvironmentError, match="after a call to `close\\(\\)`"):
            call()


def test_sub_env_error_names_env_and_keeps_env_usable(backend):
    fns = [FaultyEnv, FaultyEnv, lambda: FaultyEnv("step_raise", at=2)]
    with make_backend(backend, fns) as envs:
        envs.reset(seed=0)
        envs.step(np.zeros(3, int))
        with pytest.raises(vecenv.EnvError) as info:
            envs.step(np.zeros(3, int))
        err = info.value
        assert err.env_index == 2 and err.method == "step" and err.exc_type == "ValueError"
        assert "planted step failure at step 2" in str(err) and "Traceback" in err.remote_traceback
        assert "env 2" in str(err)
        # other envs stay consistent: a call and a fresh reset work
        assert envs.get_attr("steps")[:2] == (2, 2)
    fns = [FaultyEnv, lambda: FaultyEnv("call_raise")]
    with make_backend(backend, fns) as envs:
        with pytest.raises(vecenv.EnvError, match=r"env 1 .*KeyError in call\('planted'\)"):
            envs.call("planted", 2)
        assert envs.call_at([0], "planted", 2) == [4]


def test_env_fn_error_is_reported(backend):
    def broken():
        raise OSError("cannot open the simulator")

    with pytest.raises(OSError, match=r"^cannot open the simulator\n\(vecenv\) env 1 .*OSError in env_fn\(\)") as caught:
        make_backend(backend, [FaultyEnv, broken])
    assert isinstance(caught.value, vecenv.EnvError) and caught.value.env_index == 1


def test_async_batches_return_every_env(backend):
    n, batch = 6, 2
    with make_backend(backend, [lambda: gym.make("CartPole-v1")] * n, batch_size=batch) as envs:
        obs, infos = envs.reset(seed=0)
        assert obs.shape == (batch, 4)
        seen = set(infos["env_id"].tolist())
        ids = infos["env_id"]
        for step in range(5000):  # first-ready need not be fair: go on until all came back
            if step >= 30 and seen == set(range(n)):
                break
            envs.send(np.zeros(len(ids), int), ids)
            obs, rew, term, trunc, infos = envs.recv()
            ids = infos["env_id"]
            assert obs.shape == (batch, 4) and rew.shape == (batch,) and len(set(ids.tolist())) == batch
            seen |= set(ids.tolist())
        assert seen == set(range(n))
        with pytest.raises(ValueError, match="env_ids is required"):
            envs.send(np.zeros(n, int))
        with pytest.raises(ValueError, match="still stepping or waiting"):
            others = np.array(sorted(set(range(n)) - set(ids.tolist()))[:2])
            envs.send(np.zeros(2, int), others)
        with pytest.raises(ValueError, match="out of range"):
            envs.send(np.zeros(1, int), [n])


def test_async_batch_trajectories_match_full_steps(backend):
    """Each env's own trajectory is the same whatever order the batches come back in."""
    n = 4
    fns = [lambda: gym.make("CartPole-v1")] * n
    ref = gym.vector.SyncVectorEnv(fns)
    ref_obs, _ = ref.reset(seed=5)
    history = {i: [ref_obs[i]] for i in range(n)}
    for _ in range(20):
        obs, *_ = ref.step(np.ones(n, int))
        for i in range(n):
            history[i].append(obs[i])
    ref.close()
    with make_backend(backend, fns, batch_size=2) as envs:
        obs, infos = envs.reset(seed=5)
        got = {i: [] for i in range(n)}
        # First-ready batches need not be fair: a worker the OS does not schedule for a while
        # returns nothing meanwhile. Step until every env has given 10 results (bounded).
        for _ in range(5000):
            for row, i in enumerate(infos["env_id"].tolist()):
                got[i].append(obs[row])
            if min(len(g) for g in got.values()) >= 10:
                break
            ids = infos["env_id"]
            obs, _, _, _, infos = envs.step(np.ones(len(ids), int), ids)
    for i in range(n):
        assert len(got[i]) >= 10
        assert np.array_equal(np.array(got[i][:10]), np.array(history[i][:10]))


def test_step_async_out_of_order_errors(backend):
    with make_backend(backend, [lambda: gym.make("CartPole-v1")] * 2) as envs:
        with pytest.raises(vecenv.errors.NoAsyncCallError):
            envs.step_wait()
        envs.reset(seed=0)
        envs.step_async(np.zeros(2, int))
        with pytest.raises(vecenv.errors.AlreadyPendingCallError):
            envs.step_async(np.zeros(2, int))
        with pytest.raises(vecenv.errors.AlreadyPendingCallError):
            envs.call("render")
        obs, *_ = envs.step_wait()
        assert obs.shape == (2, 4)
        envs.call_async("np_random_seed")
        assert envs.call_wait() == (0, 1)  # reset(seed=0) seeds env i with 0 + i


def test_a_closed_env_collected_as_the_interpreter_shuts_down_raises_nothing(monkeypatch):
    """A vector env's ``__del__`` reads no module global: one collected while the interpreter shuts
    down finds them set to None (seen on 3.13t as 'Exception ignored in VectorEnv.__del__')."""
    import types

    import vecenv.engine.core as core

    envs = vecenv.make("CartPole-v1", 2, backend="serial")
    envs.close()
    for name, value in list(vars(core).items()):
        if isinstance(value, types.ModuleType):
            monkeypatch.setattr(core, name, None)
    envs.__del__()
