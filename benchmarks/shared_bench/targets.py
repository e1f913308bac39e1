"""The envs run_shared.py measures, and how each library builds them (module-level factories:
spawned workers unpickle them by reference).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import gymnasium as gym

#: the targets measured when none are named
DEFAULT_TARGETS = ("CartPole-v1", "HalfCheetah-v5", "Pong")

#: Atari settings that make EnvPool's and ale_py's Pong the env gymnasium builds in
#: :func:`make_pong` (sticky actions 0.25, no fire on reset, rewards not clipped, full episodes)
ENVPOOL_PONG = {"repeat_action_probability": 0.25, "use_fire_reset": False,
                "reward_clip": False, "episodic_life": False}
ALE_PONG = {"repeat_action_probability": 0.25, "use_fire_reset": False,
            "reward_clipping": False, "episodic_life": False}


def make_pong() -> gym.Env:
    """``ALE/Pong-v5`` as CleanRL trains it: frame skip 4 (max-pooled), 30 no-ops at reset,
    84x84 grayscale, 4 frames stacked: observation ``uint8 (4, 84, 84)``, 6 actions."""
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make("ALE/Pong-v5", frameskip=1)
    env = gym.wrappers.AtariPreprocessing(
        env, frame_skip=4, noop_max=30, screen_size=84, grayscale_obs=True
    )
    return gym.wrappers.FrameStackObservation(env, 4)


@dataclass(frozen=True)
class Target:
    """One env, as each library builds it."""

    name: str
    #: what ``vecenv.make`` gets: a registered id or a factory
    vecenv_env: str | Callable[[], gym.Env]
    #: a zero-argument factory (gymnasium's SyncVectorEnv gets N of them)
    env_fn: Callable[[], gym.Env]
    #: EnvPool's task id and keyword arguments (None: EnvPool does not have it)
    envpool_task: str | None = None
    envpool_kwargs: dict[str, Any] = field(default_factory=dict)
    #: ale_py's ROM name for its C++ vector env (None: not an Atari game)
    ale_game: str | None = None
    ale_kwargs: dict[str, Any] = field(default_factory=dict)
    #: modules the env needs
    needs: tuple[str, ...] = ()
    #: observations are stacked 84x84 frames (what the policy scenario's CNN takes)
    image: bool = False


KNOWN: dict[str, Target] = {
    "CartPole-v1": Target("CartPole-v1", "CartPole-v1", partial(gym.make, "CartPole-v1"),
                          envpool_task="CartPole-v1"),
    "HalfCheetah-v5": Target("HalfCheetah-v5", "HalfCheetah-v5", partial(gym.make, "HalfCheetah-v5"),
                             envpool_task="HalfCheetah-v5", needs=("mujoco",)),
    "Pong": Target("Pong", make_pong, make_pong, envpool_task="Pong-v5",
                   envpool_kwargs=ENVPOOL_PONG, ale_game="pong", ale_kwargs=ALE_PONG,
                   needs=("ale_py",), image=True),
}


def installed(module: str) -> bool:
    """Whether ``module`` can be imported here (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def target(name: str) -> Target:
    """A known target, or any registered gymnasium id (EnvPool runs it if it has the same id).

    Raises:
        ValueError: ``name`` is neither.
    """
    if name in KNOWN:
        return KNOWN[name]
    try:
        gym.spec(name)
    except (gym.error.Error, ImportError) as exc:
        raise ValueError(f"unknown target {name!r}: expected one of {list(KNOWN)} "
                         f"or a registered gymnasium id ({exc})") from None
    return Target(name, name, partial(gym.make, name), envpool_task=name)


def unavailable(t: Target) -> str | None:
    """Why target ``t`` cannot be built here (None when it can)."""
    missing = [m for m in t.needs if not installed(m)]
    if missing:
        return f"{t.name} needs {', '.join(missing)} (pip install {' '.join(missing)})"
    return None
