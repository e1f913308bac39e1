"""Stable-Baselines3 PPO on ``vecenv.sb3.SubprocVecEnv`` with ``VecNormalize``.

Only the imports differ from plain SB3: ``make_vec_env``, ``SubprocVecEnv`` and ``VecNormalize``
come from ``vecenv.sb3``, and SB3's ``PPO`` takes them as its own. After training, the
normalization statistics are saved, loaded into a fresh evaluation env (frozen, rewards not
normalized) and the policy is evaluated there.

    python examples/sb3_ppo.py                  # 100k steps on CartPole-v1, 2-3 minutes on 2 cores
    python examples/sb3_ppo.py --num-workers 4  # envs spread over 4 worker processes
    python examples/sb3_ppo.py --smoke          # a few seconds, for CI
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch
from stable_baselines3 import PPO
from stable_baselines3.common.evaluation import evaluate_policy

from vecenv.sb3 import DummyVecEnv, SubprocVecEnv, VecNormalize, make_vec_env


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env-id", default="CartPole-v1")
    p.add_argument("--n-envs", type=int, default=8)
    p.add_argument("--num-workers", type=int, default=None,
                   help="worker processes (default: one per usable core)")
    p.add_argument("--total-timesteps", type=int, default=100_000)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--smoke", action="store_true", help="a tiny run that only checks it works")
    args = p.parse_args()
    if args.smoke:
        args.n_envs, args.total_timesteps, args.eval_episodes = 2, 256, 2
    return args


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)  # small MLPs: more threads only fight the env workers for cores
    worker_kwargs = {} if args.num_workers is None else {"num_workers": args.num_workers}
    venv = VecNormalize(make_vec_env(args.env_id, n_envs=args.n_envs, seed=args.seed,
                                     vec_env_cls=SubprocVecEnv, vec_env_kwargs=worker_kwargs))
    start = time.perf_counter()
    try:
        # RL Zoo's tuned CartPole-v1 settings (short rollouts, many epochs, decaying rates).
        model = PPO("MlpPolicy", venv, n_steps=32, batch_size=min(256, 32 * args.n_envs),
                    gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0,
                    learning_rate=lambda f: f * 1e-3, clip_range=lambda f: f * 0.2,
                    seed=args.seed, device="cpu", verbose=0)
        model.learn(total_timesteps=args.total_timesteps)
        train_s = time.perf_counter() - start
        with tempfile.TemporaryDirectory() as tmp:
            stats = os.path.join(tmp, "vecnormalize.pkl")
            venv.save(stats)
            eval_env = VecNormalize.load(
                stats, make_vec_env(args.env_id, n_envs=1, seed=args.seed + 1000,
                                    vec_env_cls=DummyVecEnv))
    finally:
        venv.close()

    eval_env.training = False     # freeze the running mean and variance
    eval_env.norm_reward = False  # report the env's own returns
    try:
        mean, std = evaluate_policy(model, eval_env, n_eval_episodes=args.eval_episodes,
                                    deterministic=True)
    finally:
        eval_env.close()
    print(f"sb3_ppo: trained {args.total_timesteps} steps in {train_s:.1f} s; "
          f"evaluation over {args.eval_episodes} episodes: mean return {mean:.1f} +/- {std:.1f}")


if __name__ == "__main__":
    main()
