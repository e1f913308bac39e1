"""vecenv.pettingzoo.make_sb3: the agents' rows behind SB3's VecEnv API, against the reference
loop of tests/pz_envs.py in same_step mode."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pettingzoo", reason="vecenv.pettingzoo needs pettingzoo (pip install 'vecenv[pettingzoo]')")

import vecenv.pettingzoo as vpz  # noqa: E402
from pz_envs import DyingEnv, Reference  # noqa: E402


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend, kwargs", [("serial", {}), ("process", {"num_workers": 2, "context": "fork"})])
def test_rows_dones_and_terminal_observations_match_the_reference(backend, kwargs):
    ref = Reference(DyingEnv, 2, "same_step")
    with vpz.make_sb3(DyingEnv, 2, backend=backend, **kwargs) as venv:
        venv.seed(3)
        obs = venv.reset()
        np.testing.assert_array_equal(obs, ref.reset(3)["obs"])
        rng = np.random.default_rng(0)
        ended = 0
        for t in range(14):
            actions = rng.integers(0, 3, venv.num_envs)
            obs, rewards, dones, infos = venv.step(actions)
            record = ref.step(actions)
            assert rewards.dtype == np.float32
            np.testing.assert_array_equal(obs, record["obs"], err_msg=f"step {t}")
            np.testing.assert_array_equal(rewards, record["reward"].astype(np.float32))
            np.testing.assert_array_equal(dones, record["terminated"] | record["truncated"])
            for i, info in enumerate(infos):
                assert info["TimeLimit.truncated"] == bool(record["truncated"][i] and not record["terminated"][i])
                assert info["active"] == record["active"][i]
                assert ("terminal_observation" in info) == (i in record["final_obs"])
                if i in record["final_obs"]:
                    np.testing.assert_array_equal(info["terminal_observation"], record["final_obs"][i])
                    ended += 1
        assert ended > 0


@pytest.mark.timeout(30)
def test_per_env_calls_reach_each_rows_game():
    with vpz.make_sb3(DyingEnv, 2, backend="serial") as venv:
        assert venv.num_envs == 6 and venv.metadata["name"] == "dying_v0"
        assert venv.get_attr("possible_agents", [0, 4]) == [["a", "b", "c"]] * 2
        venv.set_attr("die_at", 99, indices=[3])
        assert venv.get_attr("die_at") == [None] * 3 + [99] * 3
        assert venv.env_method("observation_space", "a", indices=1)[0].shape == (2,)
        assert venv.env_is_wrapped(object) == [False] * 6


@pytest.mark.timeout(30)
def test_an_env_instance_is_copied_per_game_as_supersuit_does():
    env = DyingEnv()
    with vpz.make_sb3(env, 3, backend="serial", seed=0) as venv:
        obs = venv.reset()
    assert obs.shape == (9, 2) and len({obs[0, 1], obs[3, 1], obs[6, 1]}) == 3


@pytest.mark.timeout(30)
def test_sb3_takes_it_as_its_own_vec_env():
    pytest.importorskip("stable_baselines3", reason="needs stable-baselines3 (pip install 'vecenv[sb3]')")
    from stable_baselines3.common.vec_env import VecEnv, VecMonitor

    with vpz.make_sb3(DyingEnv, 1, backend="serial") as venv:
        assert isinstance(venv, VecEnv)
        monitored = VecMonitor(venv)
        monitored.reset()
        monitored.step(np.zeros(3, dtype=np.int64))
