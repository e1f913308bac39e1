"""SB3 algorithms on vecenv.sb3: identical training to SB3's own VecEnvs, save/load/evaluate."""

from __future__ import annotations

import numpy as np
import pytest
from sb3_testenvs import make_cartpole

from vecenv.sb3 import DummyVecEnv, SubprocVecEnv, VecMonitor, VecNormalize

sb3 = pytest.importorskip("stable_baselines3")
torch = pytest.importorskip("torch")
sv = pytest.importorskip("stable_baselines3.common.vec_env")

def _train(venv, steps: int = 2048):
    torch.set_num_threads(1)
    model = sb3.PPO(
        "MlpPolicy",
        venv,
        n_steps=256,
        batch_size=128,
        n_epochs=2,
        policy_kwargs={"net_arch": [32]},
        seed=0,
        device="cpu",
    )
    model.learn(total_timesteps=steps)
    return model


def _assert_same_parameters(a, b) -> None:
    pa, pb = a.policy.state_dict(), b.policy.state_dict()
    assert pa.keys() == pb.keys()
    for key in pa:
        assert torch.allclose(pa[key], pb[key]), key


@pytest.mark.timeout(120)
def test_ppo_trains_identically_on_vecenv_and_sb3_dummy():
    ours = DummyVecEnv([make_cartpole] * 2)
    theirs = sv.DummyVecEnv([make_cartpole] * 2)
    try:
        model_ours = _train(ours)
        model_theirs = _train(theirs)
        assert model_ours.env is ours  # taken as-is, not re-wrapped
        assert model_ours.num_timesteps == model_theirs.num_timesteps == 2048
        _assert_same_parameters(model_ours, model_theirs)
        # a training that diverged would not match: check the parameters did move
        untrained = sb3.PPO("MlpPolicy", sv.DummyVecEnv([make_cartpole]), policy_kwargs={"net_arch": [32]}, seed=0, device="cpu")
        moved = any(
            not torch.allclose(p, q)
            for p, q in zip(model_ours.policy.parameters(), untrained.policy.parameters(), strict=True)
        )
        assert moved
    finally:
        ours.close()
        theirs.close()


@pytest.mark.timeout(120)
def test_ppo_trains_identically_on_vecenv_subproc():
    ours = SubprocVecEnv([make_cartpole] * 2, start_method="fork", num_workers=2)
    theirs = sv.DummyVecEnv([make_cartpole] * 2)
    try:
        _assert_same_parameters(_train(ours), _train(theirs))
    finally:
        ours.close()
        theirs.close()


@pytest.mark.timeout(120)
def test_model_saved_with_vecnormalize_loads_and_evaluates(tmp_path):
    from stable_baselines3.common.evaluation import evaluate_policy

    train_env = VecNormalize(VecMonitor(DummyVecEnv([make_cartpole] * 2)), gamma=0.99)
    model = _train(train_env, steps=1024)
    model.save(tmp_path / "ppo")
    train_env.save(str(tmp_path / "vecnormalize.pkl"))
    mean_before = train_env.obs_rms.mean.copy()
    count_before = float(train_env.obs_rms.count)
    # VecNormalize counts every observation it normalized while training: one per env and step
    # (its RunningMeanStd starts at 1e-4), the initial reset's observations included
    assert count_before == pytest.approx(1e-4 + 2 * (1 + 1024 // 2))
    train_env.close()

    eval_env = VecNormalize.load(str(tmp_path / "vecnormalize.pkl"), VecMonitor(DummyVecEnv([make_cartpole])))
    eval_env.training = False
    eval_env.norm_reward = False
    try:
        np.testing.assert_array_equal(eval_env.obs_rms.mean, mean_before)
        assert eval_env.obs_rms.count == count_before  # the statistics were saved and loaded
        loaded = sb3.PPO.load(tmp_path / "ppo", env=eval_env, device="cpu")
        assert loaded.get_vec_normalize_env() is eval_env  # SB3 finds our VecNormalize
        _assert_same_parameters(loaded, model)
        rewards, lengths = evaluate_policy(loaded, eval_env, n_eval_episodes=3, return_episode_rewards=True)
        assert len(rewards) == 3 and all(r == length for r, length in zip(rewards, lengths, strict=True))
        assert all(r >= 8 for r in rewards)  # CartPole gives 1 per step: unnormalized returns
        assert eval_env.obs_rms.count == count_before  # evaluating (training=False) updates nothing
        np.testing.assert_array_equal(eval_env.obs_rms.mean, mean_before)
    finally:
        eval_env.close()
