"""PPO on Atari (ALE) in CleanRL's single-file style, on ``vecenv.make``.

The Nature-CNN actor-critic with CleanRL's Atari hyperparameters (8 envs x 128 steps, 4 epochs
of 4 minibatches, lr 2.5e-4 annealed, clip 0.1). Each env is ``gym.make(id, frameskip=1)`` with
gymnasium's ``AtariPreprocessing`` (frame skip 4, up to 30 no-ops, 84x84 grayscale), reward
clipping to its sign and ``FrameStackObservation(4)``; episodic returns are the raw scores of
whole games (CleanRL's life-loss and fire-on-reset wrappers are left out). Needs ``ale-py``
(``pip install "gymnasium[atari]"``), OpenCV and torch.

    python examples/ppo_atari.py                          # 10M steps (40M frames): ~10 h on 2 cores
    python examples/ppo_atari.py --env-id ale_py:ALE/Pong-v5
    python examples/ppo_atari.py --backend process --num-envs 16
    python examples/ppo_atari.py --smoke                  # a few hundred steps, for CI
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
from torch.distributions import Categorical

import vecenv


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env-id", default="ale_py:ALE/Breakout-v5",
                   help="an ALE id; the ale_py: prefix registers the ALE envs in every worker")
    p.add_argument("--backend", default="auto", help="serial, thread, process, ray or auto")
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--num-steps", type=int, default=128, help="steps per env per rollout")
    p.add_argument("--total-timesteps", type=int, default=10_000_000, help="agent steps (x4 frames)")
    p.add_argument("--learning-rate", type=float, default=2.5e-4)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--gae-lambda", type=float, default=0.95)
    p.add_argument("--num-minibatches", type=int, default=4)
    p.add_argument("--update-epochs", type=int, default=4)
    p.add_argument("--clip-coef", type=float, default=0.1)
    p.add_argument("--ent-coef", type=float, default=0.01)
    p.add_argument("--vf-coef", type=float, default=0.5)
    p.add_argument("--max-grad-norm", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--smoke", action="store_true", help="a tiny run that only checks it works")
    args = p.parse_args()
    if args.smoke:
        args.num_envs, args.num_steps, args.total_timesteps = 2, 128, 512
    args.batch_size = args.num_envs * args.num_steps
    args.minibatch_size = args.batch_size // args.num_minibatches
    args.num_iterations = max(1, args.total_timesteps // args.batch_size)
    return args


def atari_wrappers() -> list:
    """Per-env wrappers, outermost last; partials of gymnasium classes, so they pickle for spawn."""
    return [
        partial(gym.wrappers.AtariPreprocessing, frame_skip=4, noop_max=30, screen_size=84,
                grayscale_obs=True),
        gym.wrappers.RecordEpisodeStatistics,            # raw game scores, before clipping
        partial(gym.wrappers.TransformReward, func=np.sign),
        partial(gym.wrappers.FrameStackObservation, stack_size=4),
    ]


def layer_init(layer: nn.Module, std: float = np.sqrt(2), bias: float = 0.0) -> nn.Module:
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


class Agent(nn.Module):
    """The Nature-DQN torso (3 conv layers, 512 units) shared by a policy and a value head."""

    def __init__(self, n_actions: int):
        super().__init__()
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(4, 32, 8, stride=4)), nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, 512)), nn.ReLU(),
        )
        self.actor = layer_init(nn.Linear(512, n_actions), std=0.01)
        self.critic = layer_init(nn.Linear(512, 1), std=1.0)

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(self.network(x.float() / 255.0)).squeeze(-1)

    def get_action_and_value(self, x: torch.Tensor, action: torch.Tensor | None = None):
        hidden = self.network(x.float() / 255.0)
        dist = Categorical(logits=self.actor(hidden))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.critic(hidden).squeeze(-1)


def main() -> None:
    args = parse_args()
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    # "same_step" autoreset: a finished env hands back its next episode's first observation at
    # once (the final one is in infos["final_obs"]), so every stored step is a real transition.
    envs = vecenv.make(args.env_id, num_envs=args.num_envs, backend=args.backend,
                       autoreset_mode="same_step", env_kwargs={"frameskip": 1},
                       wrappers=atari_wrappers())
    try:
        assert isinstance(envs.single_action_space, gym.spaces.Discrete), "discrete actions only"
        obs_shape = envs.single_observation_space.shape
        assert obs_shape == (4, 84, 84), obs_shape
        agent = Agent(int(envs.single_action_space.n))
        optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
        print(f"ppo_atari: {args.env_id}, {args.num_envs} envs on {envs!r}", flush=True)

        shape = (args.num_steps, args.num_envs)
        obs_buf = torch.zeros(shape + obs_shape, dtype=torch.uint8)  # 4x smaller than float
        actions_buf = torch.zeros(shape, dtype=torch.long)
        logprobs_buf = torch.zeros(shape)
        rewards_buf = torch.zeros(shape)
        dones_buf = torch.zeros(shape)
        values_buf = torch.zeros(shape)

        returns_seen: deque[float] = deque(maxlen=20)
        global_step = 0
        start = time.perf_counter()
        next_obs, _ = envs.reset(seed=args.seed)
        next_obs = torch.as_tensor(next_obs)
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
                # A time-limit cut (ALE v5: 108k frames) is not a failure: bootstrap from the
                # value of the final observation.
                cut = truncated & ~terminated
                if cut.any():
                    final = np.stack([infos["final_obs"][i] for i in np.flatnonzero(cut)])
                    with torch.no_grad():
                        reward[torch.as_tensor(cut)] += args.gamma * agent.get_value(
                            torch.as_tensor(final))
                rewards_buf[step] = reward
                next_obs = torch.as_tensor(obs)
                next_done = torch.as_tensor(terminated | truncated, dtype=torch.float32)

                # Each env's RecordEpisodeStatistics: the finishing step's infos are in final_info.
                done_infos = infos.get("final_info", {})
                if "episode" in done_infos:
                    for i in np.flatnonzero(done_infos["_episode"]):
                        r = float(done_infos["episode"]["r"][i])
                        returns_seen.append(r)
                        print(f"step {global_step:>8}  env {i}  episodic return {r:.0f}  "
                              f"length {int(done_infos['episode']['l'][i])}", flush=True)

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

            b_obs = obs_buf.reshape((-1,) + obs_shape)
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

            if iteration % 10 == 0 or iteration == args.num_iterations:
                sps = global_step / (time.perf_counter() - start)
                mean = f"{np.mean(returns_seen):7.1f}" if returns_seen else "      -"
                print(f"step {global_step:>8}  mean return (last {len(returns_seen)}) {mean}  "
                      f"{sps:,.0f} steps/s", flush=True)
    finally:
        envs.close()

    elapsed = time.perf_counter() - start
    mean_return = float(np.mean(returns_seen)) if returns_seen else float("nan")
    print(f"ppo_atari: done, {global_step} env steps in {elapsed:.1f} s "
          f"({global_step / elapsed:,.0f} steps/s), mean return of the last {len(returns_seen)} "
          f"episodes {mean_return:.1f}")


if __name__ == "__main__":
    main()
