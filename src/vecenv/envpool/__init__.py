"""EnvPool's Python API on any gymnasium env, on vecenv's engine: an EnvPool training loop runs
with only the import changed (``from vecenv import envpool``). See docs/envpool.md.
"""

from vecenv.envpool.pool import EnvPool
from vecenv.envpool.registration import (
    EnvSpec,
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
