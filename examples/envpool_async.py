"""An EnvPool-style async training loop on ``vecenv.envpool``.

``recv()`` hands back the first ``batch_size`` envs ready, the policy acts on that batch, and
``send(actions, info["env_id"])`` returns the actions to exactly those envs while the others keep
stepping. Episodes are assembled per env, keyed by ``env_id``, and a small torch policy learns
from the finished ones (REINFORCE with normalized returns). Code written for EnvPool runs with
``import envpool`` changed to ``from vecenv import envpool``.

    python examples/envpool_async.py                # 100k steps on CartPole-v1, about a minute
    python examples/envpool_async.py --num-envs 32 --batch-size 8 --backend process
    python examples/envpool_async.py --smoke        # a few seconds, for CI
"""

from __future__ import annotations

import argparse
import time
from collections import deque

import numpy as np
import torch
import torch.nn as nn
from torch.distributions import Categorical

from vecenv import envpool


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env-id", default="CartPole-v1")
    p.add_argument("--backend", default="auto", help="serial, thread, process, ray or auto")
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=8, help="envs per recv(); < num-envs: async")
    p.add_argument("--num-threads", type=int, default=None, help="workers (default: one per core)")
    p.add_argument("--total-steps", type=int, default=100_000)
    p.add_argument("--episodes-per-update", type=int, default=8)
    p.add_argument("--learning-rate", type=float, default=1e-2)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--smoke", action="store_true", help="a tiny run that only checks it works")
    args = p.parse_args()
    if args.smoke:
        args.num_envs, args.batch_size, args.total_steps = 4, 2, 400
    return args


def discounted(rewards: list[float], gamma: float) -> list[float]:
    out, g = [], 0.0
    for r in reversed(rewards):
        g = r + gamma * g
        out.append(g)
    return out[::-1]


def main() -> None:
    args = parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # small MLPs: more threads only fight the env workers for cores

    envs = envpool.make(args.env_id, env_type="gymnasium", num_envs=args.num_envs,
                        batch_size=args.batch_size, num_threads=args.num_threads,
                        seed=args.seed, backend=args.backend)
    try:
        obs_dim = int(np.prod(envs.observation_space.shape))
        policy = nn.Sequential(nn.Linear(obs_dim, 64), nn.Tanh(),
                               nn.Linear(64, int(envs.action_space.n)))
        optimizer = torch.optim.Adam(policy.parameters(), lr=args.learning_rate)

        # Per-env bookkeeping, keyed by env_id: the running episode of each env.
        ep_obs: list[list[np.ndarray]] = [[] for _ in range(args.num_envs)]
        ep_act: list[list[int]] = [[] for _ in range(args.num_envs)]
        ep_rew: list[list[float]] = [[] for _ in range(args.num_envs)]
        episodes_per_env = np.zeros(args.num_envs, dtype=int)
        finished: list[tuple[list, list, list]] = []
        returns_seen: deque[float] = deque(maxlen=20)
        steps, next_report = 0, max(args.total_steps // 10, 1)
        start = time.perf_counter()

        envs.async_reset()  # every env resets; recv() returns them batch by batch
        while steps < args.total_steps:
            obs, rew, term, trunc, info = envs.recv()
            env_id = info["env_id"]
            steps += len(env_id)
            done = term | trunc
            for j, e in enumerate(env_id):
                if info["elapsed_step"][j] == 0:  # the first observation of a new episode
                    ep_obs[e], ep_act[e], ep_rew[e] = [], [], []
                else:                             # the reward for this env's last action
                    ep_rew[e].append(float(rew[j]))
                if done[j]:
                    finished.append((ep_obs[e], ep_act[e], ep_rew[e]))
                    returns_seen.append(sum(ep_rew[e]))
                    episodes_per_env[e] += 1

            with torch.no_grad():
                logits = policy(torch.as_tensor(obs, dtype=torch.float32).reshape(len(obs), -1))
                actions = Categorical(logits=logits).sample().numpy()
            envs.send(actions, env_id)  # these envs step while we learn below

            # An env that just ended resets on its next step and drops that action: keep the rest.
            for j in np.flatnonzero(~done):
                e = env_id[j]
                ep_obs[e].append(obs[j])
                ep_act[e].append(int(actions[j]))

            if len(finished) >= args.episodes_per_update:
                b_obs = torch.as_tensor(np.concatenate([np.stack(o) for o, _, _ in finished]),
                                        dtype=torch.float32).reshape(-1, obs_dim)
                b_act = torch.as_tensor([a for _, acts, _ in finished for a in acts])
                b_ret = torch.as_tensor([g for _, _, rews in finished
                                         for g in discounted(rews, args.gamma)])
                b_ret = (b_ret - b_ret.mean()) / (b_ret.std() + 1e-8)
                logp = Categorical(logits=policy(b_obs)).log_prob(b_act)
                loss = -(logp * b_ret).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                finished.clear()
            if steps >= next_report and returns_seen:
                next_report += max(args.total_steps // 10, 1)
                print(f"step {steps:>7}  mean return (last {len(returns_seen)}) "
                      f"{np.mean(returns_seen):6.1f}  "
                      f"{steps / (time.perf_counter() - start):,.0f} steps/s", flush=True)
        elapsed = time.perf_counter() - start
    finally:
        envs.close()  # also ends the steps still in flight

    mean_return = float(np.mean(returns_seen)) if returns_seen else float("nan")
    print(f"episodes finished per env_id: {episodes_per_env.tolist()}")
    print(f"envpool_async: done, {steps} env steps in {elapsed:.1f} s, "
          f"mean return of the last {len(returns_seen)} episodes {mean_return:.1f}")


if __name__ == "__main__":
    main()
