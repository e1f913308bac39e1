"""RLlib's PPO trains with its env runner stepping vecenv, through gymnasium's vector entry point.

RLlib builds each env runner's vector env with ``gym.make_vec(id, n, vectorization_mode=...)``;
with ``gym_env_vectorize_mode="vector_entry_point"`` that is the id's registered vector entry
point, here ``vecenv.make`` (:func:`vecenv.register_vector_env`). RLlib pins its own gymnasium
(1.2.2 with ray 2.60), so CI runs this file in a venv of its own (``.ci/clients``).
"""

from __future__ import annotations

import pytest

pytest.importorskip("ray.rllib", reason="needs RLlib: pip install 'ray[rllib]' (.ci/clients makes its venv)",
                    exc_type=ImportError)

import gymnasium as gym  # noqa: E402

import vecenv  # noqa: E402

ENV_ID = "VecenvRLlibCartPole-v1"


def train(env: str, mode: str, iterations: int = 2) -> tuple[type, list[tuple[float, float]]]:
    """The env runner's vector env class, and (mean episode return, env steps sampled) after
    each iteration of a small seeded PPO run on the local env runner."""
    from ray.rllib.algorithms.ppo import PPOConfig

    config = (PPOConfig().environment(env)
              .env_runners(num_env_runners=0, num_envs_per_env_runner=4, gym_env_vectorize_mode=mode)
              .training(train_batch_size_per_learner=256, minibatch_size=64, num_epochs=1)
              .debugging(seed=0))
    algo = config.build_algo()
    try:
        cls = type(algo.env_runner.env.unwrapped)
        results = []
        for _ in range(iterations):
            runners = algo.train()["env_runners"]
            results.append((runners["episode_return_mean"], runners["num_env_steps_sampled_lifetime"]))
        return cls, results
    finally:
        algo.stop()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend, options", [("serial", {}), ("process", {"num_workers": 2})])
def test_ppo_trains_on_vecenv_as_on_sync_vector_env(ray_local, backend, options):
    vecenv.register_vector_env(ENV_ID, "CartPole-v1", backend=backend, **options)
    try:
        cls, got = train(ENV_ID, "vector_entry_point")
    finally:
        del gym.registry[ENV_ID]
    assert issubclass(cls, vecenv.VectorEnv) and cls.__name__ == f"{backend.capitalize()}VectorEnv"
    expected_cls, expected = train("CartPole-v1", "sync")
    assert expected_cls is gym.vector.SyncVectorEnv
    assert got == expected  # same seeds: the same episodes, the same learning
    assert got[-1][1] >= 512
