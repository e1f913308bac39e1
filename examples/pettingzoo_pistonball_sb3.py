"""PettingZoo's SB3 pistonball tutorial (tutorials/SB3/pistonball/sb3_pistonball_vector.py)
with vecenv in place of SuperSuit's vector envs: one line changed (marked below).

One PPO policy plays every piston; each piston of each of the 4 games is a row of one SB3
VecEnv, the games stepped in 2 worker processes.

    pip install 'vecenv[pettingzoo,sb3]' 'pettingzoo[butterfly]' supersuit
    python examples/pettingzoo_pistonball_sb3.py            # the tutorial's run (minutes)
    python examples/pettingzoo_pistonball_sb3.py --smoke    # a few seconds
"""

from __future__ import annotations

import argparse
import time

import supersuit as ss
from pettingzoo.butterfly import pistonball_v6
from stable_baselines3 import PPO
from stable_baselines3.ppo import CnnPolicy

import vecenv.pettingzoo


def train_butterfly_supersuit(steps: int = 10_000, seed: int | None = 0, n_steps: int = 256,
                              **env_kwargs) -> PPO:
    # Train a single model to play as each agent in a cooperative Parallel environment
    env = pistonball_v6.parallel_env(**env_kwargs)

    # Pre-process using SuperSuit (color reduction, resizing and frame stacking)
    env = ss.color_reduction_v0(env, mode="B")
    env = ss.resize_v1(env, x_size=84, y_size=84)
    env = ss.frame_stack_v1(env, 3)

    env.reset(seed=seed)

    print(f"Starting training on {env.metadata['name']!s}.")

    env = ss.pettingzoo_env_to_vec_env_v1(env)
    # was: env = ss.concat_vec_envs_v1(env, 4, num_cpus=2, base_class="stable_baselines3")
    env = vecenv.pettingzoo.make_sb3(env, 4, backend="process", num_workers=2, seed=seed)

    model = PPO(
        CnnPolicy,
        env,
        verbose=0,
        gamma=0.95,
        n_steps=n_steps,
        ent_coef=0.0905168,
        learning_rate=0.00062211,
        vf_coef=0.042202,
        max_grad_norm=0.9,
        gae_lambda=0.99,
        n_epochs=5,
        clip_range=0.3,
        batch_size=256,
    )
    model.learn(total_timesteps=steps)
    print(f"Finished training on {env.unwrapped.metadata['name']!s} "
          f"({model.num_timesteps} agent steps, {env.num_envs} rows).")
    env.close()
    return model


def evaluate(model: PPO, num_games: int, **env_kwargs) -> float:
    # The tutorial's evaluation: the AEC API, the same model for every piston
    env = pistonball_v6.env(**env_kwargs)
    env = ss.color_reduction_v0(env, mode="B")
    env = ss.resize_v1(env, x_size=84, y_size=84)
    env = ss.frame_stack_v1(env, 3)
    rewards = dict.fromkeys(env.possible_agents, 0.0)
    for i in range(num_games):
        env.reset(seed=i)
        for _agent in env.agent_iter():
            obs, reward, termination, truncation, info = env.last()
            if termination or truncation:
                for a in env.agents:
                    rewards[a] += env.rewards[a]
                break
            env.step(model.predict(obs, deterministic=True)[0])
    env.close()
    return sum(rewards.values()) / len(rewards)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a tiny run, to check it works")
    args = parser.parse_args()
    env_kwargs = {
        "n_pistons": 20, "time_penalty": -0.1, "continuous": True, "random_drop": True,
        "random_rotate": True, "ball_mass": 0.75, "ball_friction": 0.3, "ball_elasticity": 1.5,
        "max_cycles": 25,
    }
    steps, n_steps, games = 40_960 * 2, 256, 10
    if args.smoke:
        env_kwargs["n_pistons"] = 4
        steps, n_steps, games = 4 * 4 * 16 * 2, 16, 1  # 16 rows, two rollouts of 16 steps
    start = time.perf_counter()
    model = train_butterfly_supersuit(steps=steps, seed=0, n_steps=n_steps, **env_kwargs)
    print(f"pettingzoo_pistonball_sb3: trained in {time.perf_counter() - start:.1f} s")
    print(f"Avg reward: {evaluate(model, games, **env_kwargs):.2f}")


if __name__ == "__main__":
    main()
