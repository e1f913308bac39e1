"""PPO in CleanRL's single-file style on ``vecenv.Collector`` (async half-batches, (T, N) rollouts).

The same PPO as ``cleanrl_ppo.py`` (CartPole, actor-critic MLPs) and ``ppo_atari.py`` (``--atari``:
Pong with the Nature CNN), but the rollout comes from ``vecenv.Collector`` over async batches
(``batch_size = num_envs // 2``): the policy picks actions for one half of the envs while the other
half steps, and the collector hands back every env's 128 steps in order, ready for GAE.

    python examples/ppo_collector.py                     # CartPole-v1, 100k steps, about a minute
    python examples/ppo_collector.py --atari             # Pong, 10M steps (many hours on 2 cores)
    python examples/ppo_collector.py --smoke             # CartPole, 16k steps: checks the return rises
"""

from __future__ import annotations

import argparse
import random
import time
from functools import partial

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
from torch.distributions import Categorical

import vecenv


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--atari", action="store_true", help="Pong with the Nature CNN instead of CartPole")
    p.add_argument("--backend", default="process", help="serial, thread, process or auto")
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=None, help="envs per async batch (default num_envs // 2)")
    p.add_argument("--num-steps", type=int, default=128, help="steps per env per rollout")
    p.add_argument("--total-timesteps", type=int, default=None, help="default 100k (CartPole), 10M (Pong)")
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--gae-lambda", type=float, default=0.95)
    p.add_argument("--num-minibatches", type=int, default=4)
    p.add_argument("--update-epochs", type=int, default=4)
    p.add_argument("--ent-coef", type=float, default=0.01)
    p.add_argument("--vf-coef", type=float, default=0.5)
    p.add_argument("--max-grad-norm", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--smoke", action="store_true", help="a short CartPole run that checks the return rises")
    args = p.parse_args()
    args.learning_rate, args.clip_coef = (2.5e-4, 0.1) if args.atari else (1e-3, 0.2)
    if args.total_timesteps is None:
        args.total_timesteps = 10_000_000 if args.atari else 100_000
    if args.smoke:
        args.atari, args.backend, args.num_envs, args.num_steps, args.total_timesteps = False, "serial", 4, 128, 16_384
    args.batch_size = args.batch_size or max(1, args.num_envs // 2)
    args.rollout_size = args.num_envs * args.num_steps
    args.minibatch_size = args.rollout_size // args.num_minibatches
    args.num_iterations = max(1, args.total_timesteps // args.rollout_size)
    return args


def layer_init(layer: nn.Module, std: float = np.sqrt(2), bias: float = 0.0) -> nn.Module:
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


class Agent(nn.Module):
    """An actor-critic: two tanh MLPs (CartPole) or the Nature-DQN torso with two heads (Atari)."""

    def __init__(self, obs_shape: tuple[int, ...], n_actions: int, atari: bool):
        super().__init__()
        self.atari = atari
        if atari:
            self.torso = nn.Sequential(
                layer_init(nn.Conv2d(4, 32, 8, stride=4)), nn.ReLU(),
                layer_init(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
                layer_init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(),
                nn.Flatten(), layer_init(nn.Linear(64 * 7 * 7, 512)), nn.ReLU(),
            )
            self.actor = layer_init(nn.Linear(512, n_actions), std=0.01)
            self.critic = layer_init(nn.Linear(512, 1), std=1.0)
        else:
            d = int(np.prod(obs_shape))
            self.torso = nn.Flatten()
            self.actor = nn.Sequential(layer_init(nn.Linear(d, 64)), nn.Tanh(), layer_init(nn.Linear(64, 64)),
                                       nn.Tanh(), layer_init(nn.Linear(64, n_actions), std=0.01))
            self.critic = nn.Sequential(layer_init(nn.Linear(d, 64)), nn.Tanh(), layer_init(nn.Linear(64, 64)),
                                        nn.Tanh(), layer_init(nn.Linear(64, 1), std=1.0))

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        return self.torso(x.float() / 255.0 if self.atari else x.float())

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(self.hidden(x)).squeeze(-1)

    def get_action_and_value(self, x: torch.Tensor, action: torch.Tensor | None = None):
        h = self.hidden(x)
        dist = Categorical(logits=self.actor(h))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.critic(h).squeeze(-1)


def make_envs(args: argparse.Namespace) -> vecenv.VectorEnv:
    # "same_step": a finished env hands back its next episode's first observation at once (the
    # final one is in the infos), so every row of the rollout is a real transition.
    common = dict(backend=args.backend, autoreset_mode="same_step", batch_size=args.batch_size)
    if args.backend in ("process", "thread"):
        common["num_workers"] = args.num_envs  # one env per worker: a batch is whichever envs are ready
    if not args.atari:
        return vecenv.make("CartPole-v1", args.num_envs, **common)
    wrappers = [
        partial(gym.wrappers.AtariPreprocessing, frame_skip=4, noop_max=30, screen_size=84, grayscale_obs=True),
        gym.wrappers.RecordEpisodeStatistics,            # raw game scores, before clipping
        partial(gym.wrappers.TransformReward, func=np.sign),
        partial(gym.wrappers.FrameStackObservation, stack_size=4),
    ]
    return vecenv.make("ale_py:ALE/Pong-v5", args.num_envs, env_kwargs={"frameskip": 1}, wrappers=wrappers,
                       **common)


def game_scores(rollout: vecenv.Rollout) -> list[float]:
    """Raw Atari scores from RecordEpisodeStatistics (SAME_STEP: in the ended episode's final_info)."""
    scores = []
    for infos in rollout.infos:
        final = infos.get("final_info", {})
        if "episode" in final:
            scores += final["episode"]["r"][final["_episode"]].tolist()
    return scores


def main() -> None:
    args = parse_args()
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # leave the other cores to the env workers

    envs = make_envs(args)
    try:
        agent = Agent(envs.single_observation_space.shape, int(envs.single_action_space.n), args.atari)
        optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

        def policy(obs: np.ndarray, env_ids: np.ndarray):
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(torch.as_tensor(obs))
            return action.numpy(), {"logprob": logprob.numpy(), "value": value.numpy()}

        collector = vecenv.Collector(envs, policy, steps=args.num_steps, seed=args.seed, device="cpu")
        returns: list[float] = []
        first: list[float] = []
        start, global_step = time.perf_counter(), 0
        for iteration in range(1, args.num_iterations + 1):
            optimizer.param_groups[0]["lr"] = (1.0 - (iteration - 1.0) / args.num_iterations) * args.learning_rate
            r = collector.collect()  # (T, N) tensors; the next collect() overwrites them
            global_step += args.rollout_size
            episodes = game_scores(r) if args.atari else r.episode_returns.tolist()
            returns += episodes
            if iteration <= 2:
                first += episodes

            obs, actions, logprobs, values = r.observations, r.actions, r.extras["logprob"], r.extras["value"]
            rewards = r.rewards.clone()
            dones = (r.terminations | r.truncations).float()
            cut = torch.nonzero(r.truncations & ~r.terminations)  # a time-limit cut: bootstrap from its final obs
            if len(cut):
                final = np.stack([r.infos[t]["final_obs"][i] for t, i in cut.tolist()])
                with torch.no_grad():
                    rewards[cut[:, 0], cut[:, 1]] += args.gamma * agent.get_value(torch.as_tensor(final))

            with torch.no_grad():  # generalized advantage estimation, backwards through the rollout
                next_value = agent.get_value(r.next_observations)
                advantages = torch.zeros_like(rewards)
                lastgaelam = torch.zeros(args.num_envs)
                for t in reversed(range(args.num_steps)):
                    nextvalues = next_value if t == args.num_steps - 1 else values[t + 1]
                    nonterminal = 1.0 - dones[t]
                    delta = rewards[t] + args.gamma * nextvalues * nonterminal - values[t]
                    lastgaelam = delta + args.gamma * args.gae_lambda * nonterminal * lastgaelam
                    advantages[t] = lastgaelam
                returns_t = advantages + values

            b_obs = obs.reshape(args.rollout_size, *obs.shape[2:])
            b_actions, b_logprobs = actions.reshape(-1), logprobs.reshape(-1)
            b_advantages, b_returns, b_values = advantages.reshape(-1), returns_t.reshape(-1), values.reshape(-1)
            for _ in range(args.update_epochs):  # clipped-objective updates over shuffled minibatches
                order = torch.randperm(args.rollout_size)
                for lo in range(0, args.rollout_size, args.minibatch_size):
                    mb = order[lo:lo + args.minibatch_size]
                    _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb], b_actions[mb])
                    ratio = (newlogprob - b_logprobs[mb]).exp()
                    adv = b_advantages[mb]
                    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                    pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)).mean()
                    v_clipped = b_values[mb] + (newvalue - b_values[mb]).clamp(-args.clip_coef, args.clip_coef)
                    v_loss = 0.5 * torch.max((newvalue - b_returns[mb]) ** 2, (v_clipped - b_returns[mb]) ** 2).mean()
                    loss = pg_loss - args.ent_coef * entropy.mean() + args.vf_coef * v_loss
                    optimizer.zero_grad()
                    loss.backward()
                    nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                    optimizer.step()

            if returns and (iteration % 10 == 0 or iteration == args.num_iterations):
                sps = global_step / (time.perf_counter() - start)
                print(f"step {global_step:>8}  mean return (last 20) {np.mean(returns[-20:]):7.1f}  "
                      f"{sps:,.0f} steps/s", flush=True)
    finally:
        envs.close()

    early = float(np.mean(first)) if first else float("nan")
    late = float(np.mean(returns[-20:])) if returns else float("nan")
    verdict = "return rose" if late > early + (1.0 if args.atari else 2 * early) else "return did not rise"
    print(f"ppo_collector: done, {verdict}: mean return of the first 2 rollouts' episodes {early:.1f}, "
          f"of the last 20 episodes {late:.1f}; {global_step} env steps in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
