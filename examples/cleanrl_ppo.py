"""PPO in CleanRL's single-file style on ``vecenv.make`` (gymnasium's vector API).

Trains an actor-critic MLP with clipped PPO and GAE on CartPole-v1, stepping the envs with any
vecenv backend. Episodic returns come from gymnasium's ``RecordEpisodeStatistics`` vector wrapper.

    python examples/cleanrl_ppo.py                      # 100k steps, 1-2 minutes on 2 cores
    python examples/cleanrl_ppo.py --backend serial --num-envs 4
    python examples/cleanrl_ppo.py --smoke              # a few seconds, for CI
"""

from __future__ import annotations

import argparse
import random
import time
from collections import deque

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
from torch.distributions import Categorical

import vecenv


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env-id", default="CartPole-v1")
    p.add_argument("--backend", default="auto", help="serial, thread, process, ray or auto")
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--num-steps", type=int, default=128, help="steps per env per rollout")
    p.add_argument("--total-timesteps", type=int, default=100_000)
    p.add_argument("--learning-rate", type=float, default=1e-3)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--gae-lambda", type=float, default=0.95)
    p.add_argument("--num-minibatches", type=int, default=4)
    p.add_argument("--update-epochs", type=int, default=4)
    p.add_argument("--clip-coef", type=float, default=0.2)
    p.add_argument("--ent-coef", type=float, default=0.01)
    p.add_argument("--vf-coef", type=float, default=0.5)
    p.add_argument("--max-grad-norm", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--smoke", action="store_true", help="a tiny run that only checks it works")
    args = p.parse_args()
    if args.smoke:
        args.num_envs, args.num_steps, args.total_timesteps = 2, 32, 256
    args.batch_size = args.num_envs * args.num_steps
    args.minibatch_size = args.batch_size // args.num_minibatches
    args.num_iterations = max(1, args.total_timesteps // args.batch_size)
    return args


def layer_init(layer: nn.Linear, std: float = np.sqrt(2), bias: float = 0.0) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


class Agent(nn.Module):
    def __init__(self, obs_dim: int, n_actions: int):
        super().__init__()
        self.critic = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0),
        )
        self.actor = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, n_actions), std=0.01),
        )

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x).squeeze(-1)

    def get_action_and_value(self, x: torch.Tensor, action: torch.Tensor | None = None):
        dist = Categorical(logits=self.actor(x))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.get_value(x)


def main() -> None:
    args = parse_args()
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # small MLPs: more threads only fight the env workers for cores

    # "same_step" autoreset: a finished env hands back its next episode's first observation at
    # once (the final one is in infos["final_obs"]), so every stored step is a real transition.
    envs = vecenv.make(args.env_id, num_envs=args.num_envs, backend=args.backend,
                       autoreset_mode="same_step")
    envs = gym.wrappers.vector.RecordEpisodeStatistics(envs)
    try:
        assert isinstance(envs.single_action_space, gym.spaces.Discrete), "discrete actions only"
        obs_dim = int(np.prod(envs.single_observation_space.shape))
        agent = Agent(obs_dim, int(envs.single_action_space.n))
        optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

        shape = (args.num_steps, args.num_envs)
        obs_buf = torch.zeros(shape + (obs_dim,))
        actions_buf = torch.zeros(shape, dtype=torch.long)
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
                # A time-limit cut is not a failure: bootstrap from the value of the final obs.
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

                if "episode" in infos:
                    for i in np.flatnonzero(infos["_episode"]):
                        returns_seen.append(float(infos["episode"]["r"][i]))

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
            b_actions, b_logprobs = actions_buf.reshape(-1), logprobs_buf.reshape(-1)
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

            if returns_seen and (iteration % 10 == 0 or iteration == args.num_iterations):
                sps = global_step / (time.perf_counter() - start)
                print(f"step {global_step:>7}  mean return (last {len(returns_seen)}) "
                      f"{np.mean(returns_seen):6.1f}  {sps:,.0f} steps/s", flush=True)
    finally:
        envs.close()

    mean_return = float(np.mean(returns_seen)) if returns_seen else float("nan")
    print(f"cleanrl_ppo: done, {global_step} env steps in {time.perf_counter() - start:.1f} s, "
          f"mean return of the last {len(returns_seen)} episodes {mean_return:.1f}")


if __name__ == "__main__":
    main()
