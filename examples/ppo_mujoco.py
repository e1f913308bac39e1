"""PPO with continuous actions on MuJoCo in CleanRL's single-file style, on ``vecenv.make``.

A Gaussian policy (tanh MLP 64x64 for the mean, a state-independent log std) and a tanh MLP
critic with CleanRL's MuJoCo hyperparameters (2048 steps per rollout, 10 epochs of 32
minibatches, lr 3e-4 annealed, clip 0.2, no entropy bonus), 8 envs by default where CleanRL steps
one. Each env clips actions and normalizes (and clips) observations and rewards with gymnasium's
wrappers, in its worker; episodic returns are the raw ones. Time-limit truncations (HalfCheetah's
every episode ends in one) bootstrap from the value of the final observation. Needs ``mujoco``
(``pip install "gymnasium[mujoco]"``) and torch.

    python examples/ppo_mujoco.py                         # HalfCheetah-v5, 1M steps: ~8 min on 2 cores
    python examples/ppo_mujoco.py --env-id Hopper-v5 --num-envs 4
    python examples/ppo_mujoco.py --backend process
    python examples/ppo_mujoco.py --smoke                 # a few hundred steps, for CI
"""

from __future__ import annotations

import argparse
import random
import time
from collections import deque
from functools import partial

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
from torch.distributions import Normal

import vecenv


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env-id", default="HalfCheetah-v5")
    p.add_argument("--backend", default="auto", help="serial, thread, process, ray or auto")
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--rollout-steps", type=int, default=2048,
                   help="env steps per rollout, all envs together (each env: this / num-envs)")
    p.add_argument("--total-timesteps", type=int, default=1_000_000)
    p.add_argument("--learning-rate", type=float, default=3e-4)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--gae-lambda", type=float, default=0.95)
    p.add_argument("--num-minibatches", type=int, default=32)
    p.add_argument("--update-epochs", type=int, default=10)
    p.add_argument("--clip-coef", type=float, default=0.2)
    p.add_argument("--ent-coef", type=float, default=0.0)
    p.add_argument("--vf-coef", type=float, default=0.5)
    p.add_argument("--max-grad-norm", type=float, default=0.5)
    p.add_argument("--max-episode-steps", type=int, default=None,
                   help="a shorter time limit than the env's (HalfCheetah's is 1000)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--smoke", action="store_true", help="a tiny run that only checks it works")
    args = p.parse_args()
    if args.smoke:
        args.num_envs, args.rollout_steps, args.total_timesteps = 2, 256, 512
        args.update_epochs, args.num_minibatches = 2, 4
        args.max_episode_steps = 50  # so that episodes end, and truncations bootstrap, in it
    args.num_steps = max(1, args.rollout_steps // args.num_envs)
    args.batch_size = args.num_envs * args.num_steps
    args.minibatch_size = args.batch_size // args.num_minibatches
    args.num_iterations = max(1, args.total_timesteps // args.batch_size)
    return args


def clip10(x):
    return np.clip(x, -10.0, 10.0)


def mujoco_wrappers(gamma: float) -> list:
    """Per-env wrappers, outermost last, as CleanRL wraps each env (so each env keeps its own
    running statistics, in its worker). gymnasium's vector NormalizeObservation would share one
    set, but it refuses "same_step" autoreset: it leaves ``infos["final_obs"]`` unnormalized."""
    return [
        gym.wrappers.RecordEpisodeStatistics,             # raw returns, before any normalization
        gym.wrappers.ClipAction,                          # Gaussian samples, clipped into bounds
        gym.wrappers.NormalizeObservation,
        partial(gym.wrappers.TransformObservation, func=clip10, observation_space=None),
        partial(gym.wrappers.NormalizeReward, gamma=gamma),
        partial(gym.wrappers.TransformReward, func=clip10),
    ]


def layer_init(layer: nn.Linear, std: float = np.sqrt(2), bias: float = 0.0) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


class Agent(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int):
        super().__init__()
        self.critic = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0),
        )
        self.actor_mean = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, act_dim), std=0.01),
        )
        self.actor_logstd = nn.Parameter(torch.zeros(1, act_dim))

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x).squeeze(-1)

    def get_action_and_value(self, x: torch.Tensor, action: torch.Tensor | None = None):
        mean = self.actor_mean(x)
        dist = Normal(mean, self.actor_logstd.expand_as(mean).exp())
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action).sum(-1), dist.entropy().sum(-1), self.get_value(x)


def main() -> None:
    args = parse_args()
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # small MLPs: more threads only fight the env workers for cores

    # "same_step" autoreset: a finished env hands back its next episode's first observation at
    # once (the final one, normalized like the others, is in infos["final_obs"]), so every stored
    # step is a real transition.
    env_kwargs = {} if args.max_episode_steps is None else {"max_episode_steps": args.max_episode_steps}
    envs = vecenv.make(args.env_id, num_envs=args.num_envs, backend=args.backend,
                       autoreset_mode="same_step", env_kwargs=env_kwargs,
                       wrappers=mujoco_wrappers(args.gamma))
    print(f"ppo_mujoco: {args.env_id}, {args.num_envs} envs on {envs!r}", flush=True)
    try:
        assert isinstance(envs.single_action_space, gym.spaces.Box), "continuous actions only"
        obs_dim = int(np.prod(envs.single_observation_space.shape))
        act_dim = int(np.prod(envs.single_action_space.shape))
        agent = Agent(obs_dim, act_dim)
        optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

        shape = (args.num_steps, args.num_envs)
        obs_buf = torch.zeros(shape + (obs_dim,))
        actions_buf = torch.zeros(shape + (act_dim,))
        logprobs_buf = torch.zeros(shape)
        rewards_buf = torch.zeros(shape)
        dones_buf = torch.zeros(shape)
        values_buf = torch.zeros(shape)

        returns_seen: deque[float] = deque(maxlen=20)
        global_step = 0
        start = time.perf_counter()
        next_obs, _ = envs.reset(seed=args.seed)
        next_obs = torch.as_tensor(next_obs, dtype=torch.float32).reshape(args.num_envs, -1)
        next_done = torch.zeros(args.num_envs)

        for iteration in range(1, args.num_iterations + 1):
            frac = 1.0 - (iteration - 1.0) / args.num_iterations  # linear learning-rate decay
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate

            for step in range(args.num_steps):
                global_step += args.num_envs
                obs_buf[step] = next_obs
                dones_buf[step] = next_done
                with torch.no_grad():
                    action, logprob, _, value = agent.get_action_and_value(next_obs)
                actions_buf[step], logprobs_buf[step], values_buf[step] = action, logprob, value

                obs, reward, terminated, truncated, infos = envs.step(action.numpy())
                reward = torch.as_tensor(reward, dtype=torch.float32)
                # A time-limit cut is not a failure (HalfCheetah's every episode ends in one):
                # bootstrap from the value of the final observation.
                cut = truncated & ~terminated
                if cut.any():
                    final = np.stack([infos["final_obs"][i] for i in np.flatnonzero(cut)])
                    with torch.no_grad():
                        final_v = agent.get_value(
                            torch.as_tensor(final, dtype=torch.float32).reshape(len(final), -1))
                    reward[torch.as_tensor(cut)] += args.gamma * final_v
                rewards_buf[step] = reward
                next_obs = torch.as_tensor(obs, dtype=torch.float32).reshape(args.num_envs, -1)
                next_done = torch.as_tensor(terminated | truncated, dtype=torch.float32)

                # Each env's RecordEpisodeStatistics: the finishing step's infos are in final_info.
                done_infos = infos.get("final_info", {})
                if "episode" in done_infos:
                    for i in np.flatnonzero(done_infos["_episode"]):
                        r = float(done_infos["episode"]["r"][i])
                        returns_seen.append(r)
                        print(f"step {global_step:>8}  env {i}  episodic return {r:8.1f}",
                              flush=True)

            # Generalized advantage estimation, backwards through the rollout.
            with torch.no_grad():
                next_value = agent.get_value(next_obs)
                advantages = torch.zeros_like(rewards_buf)
                lastgaelam = torch.zeros(args.num_envs)
                for t in reversed(range(args.num_steps)):
                    if t == args.num_steps - 1:
                        nextnonterminal, nextvalues = 1.0 - next_done, next_value
                    else:
                        nextnonterminal, nextvalues = 1.0 - dones_buf[t + 1], values_buf[t + 1]
                    delta = (rewards_buf[t] + args.gamma * nextvalues * nextnonterminal
                             - values_buf[t])
                    lastgaelam = delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam
                    advantages[t] = lastgaelam
                returns = advantages + values_buf

            b_obs = obs_buf.reshape(-1, obs_dim)
            b_actions, b_logprobs = actions_buf.reshape(-1, act_dim), logprobs_buf.reshape(-1)
            b_advantages, b_returns = advantages.reshape(-1), returns.reshape(-1)
            b_values = values_buf.reshape(-1)

            # Clipped-objective updates over shuffled minibatches.
            for _ in range(args.update_epochs):
                order = torch.randperm(args.batch_size)
                for lo in range(0, args.batch_size, args.minibatch_size):
                    mb = order[lo:lo + args.minibatch_size]
                    _, newlogprob, entropy, newvalue = agent.get_action_and_value(
                        b_obs[mb], b_actions[mb])
                    ratio = (newlogprob - b_logprobs[mb]).exp()
                    adv = b_advantages[mb]
                    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                    pg_loss = torch.max(
                        -adv * ratio,
                        -adv * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef),
                    ).mean()
                    v_clipped = b_values[mb] + (newvalue - b_values[mb]).clamp(
                        -args.clip_coef, args.clip_coef)
                    v_loss = 0.5 * torch.max((newvalue - b_returns[mb]) ** 2,
                                             (v_clipped - b_returns[mb]) ** 2).mean()
                    loss = pg_loss - args.ent_coef * entropy.mean() + args.vf_coef * v_loss
                    optimizer.zero_grad()
                    loss.backward()
                    nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                    optimizer.step()

            if iteration % 10 == 0 or iteration == args.num_iterations:
                sps = global_step / (time.perf_counter() - start)
                mean = f"{np.mean(returns_seen):8.1f}" if returns_seen else "       -"
                print(f"step {global_step:>8}  mean return (last {len(returns_seen)}) {mean}  "
                      f"{sps:,.0f} steps/s", flush=True)
    finally:
        envs.close()

    elapsed = time.perf_counter() - start
    mean_return = float(np.mean(returns_seen)) if returns_seen else float("nan")
    print(f"ppo_mujoco: done, {global_step} env steps in {elapsed:.1f} s "
          f"({global_step / elapsed:,.0f} steps/s), mean return of the last {len(returns_seen)} "
          f"episodes {mean_return:.1f}")


if __name__ == "__main__":
    main()
