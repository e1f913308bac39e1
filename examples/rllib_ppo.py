"""RLlib's PPO with its env runner stepping vecenv, through gymnasium's vector entry point.

RLlib builds each env runner's envs with ``gym.make_vec(id, n, vectorization_mode=...)``. With
``gym_env_vectorize_mode="vector_entry_point"`` that is the vector env the id registers, and
``vecenv.register_vector_env`` registers one that is ``vecenv.make(env_id, n, backend=...)``: one
env runner then steps its envs across processes (``--backend process``), or however
``backend="auto"`` measures best here.

    python examples/rllib_ppo.py                     # CartPole-v1, 20 iterations
    python examples/rllib_ppo.py --smoke             # 2 small iterations

Needs RLlib (``pip install "ray[rllib]"``, which pins its own gymnasium). Remote env runners
(``num_env_runners > 0``) need the id registered in their processes too: register it in a module
of yours and name the id ``"your_module:VecenvCartPole-v1"`` (gymnasium imports the module).
"""

from __future__ import annotations

import argparse

import vecenv


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-id", default="CartPole-v1", help="the gymnasium env to train on")
    parser.add_argument("--backend", default="auto", help="vecenv's backend inside the env runner")
    parser.add_argument("--num-envs", type=int, default=8, help="envs stepped by the env runner")
    parser.add_argument("--iterations", type=int, default=20, help="PPO training iterations")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="2 small iterations: a quick check")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    try:
        import ray
        from ray.rllib.algorithms.ppo import PPOConfig
    except ImportError as exc:
        raise SystemExit(f"rllib_ppo needs RLlib: pip install 'ray[rllib]' ({exc})") from exc

    env_id = f"vecenv/{args.env_id}"  # gymnasium's namespace syntax: "vecenv/CartPole-v1"
    vecenv.register_vector_env(env_id, args.env_id, backend=args.backend)
    config = (PPOConfig()
              .environment(env_id)
              .env_runners(num_env_runners=0, num_envs_per_env_runner=args.num_envs,
                           gym_env_vectorize_mode="vector_entry_point")
              .debugging(seed=args.seed))
    iterations = args.iterations
    if args.smoke:
        config = config.training(train_batch_size_per_learner=256, minibatch_size=64, num_epochs=1)
        iterations = 2
    algo = config.build_algo()
    try:
        print(f"rllib_ppo: env runner steps {algo.env_runner.env.unwrapped!r}")
        for i in range(iterations):
            runners = algo.train()["env_runners"]
            print(f"iteration {i + 1}: mean episode return {runners.get('episode_return_mean', float('nan')):.1f}, "
                  f"env steps {int(runners['num_env_steps_sampled_lifetime'])}")
    finally:
        algo.stop()
        ray.shutdown()
    print("rllib_ppo: done")


if __name__ == "__main__":
    main()
