"""EnvPool's Python API on any gymnasium env, on vecenv's engine.

An EnvPool training loop runs with only the import changed::

    from vecenv import envpool          # was: import envpool

    envs = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=8, batch_size=4, seed=1)
    envs.async_reset()
    while training:
        obs, rew, term, trunc, info = envs.recv()
        envs.send(policy(obs), info["env_id"])

Seeds are fixed at make (env ``i`` gets ``seed + i``), finished envs reset on their next step,
infos carry int32 ``env_id`` and ``elapsed_step`` and ``players``, rewards are float32, and the
spaces are one env's. ``env_type="gym"`` returns old gym's 4-tuples. EnvPool's dm_env flavour
and XLA ops are refused. See docs/envpool.md.
"""

from vecenv.envpool.pool import EnvPool, EnvSpec
from vecenv.envpool.registration import (
    list_all_envs,
    make,
    make_dm,
    make_gym,
    make_gymnasium,
    make_spec,
)
from vecenv.envpool.styles import GymEnvPool, GymnasiumEnvPool

__all__ = [
    "EnvPool",
    "EnvSpec",
    "GymEnvPool",
    "GymnasiumEnvPool",
    "list_all_envs",
    "make",
    "make_dm",
    "make_gym",
    "make_gymnasium",
    "make_spec",
]
