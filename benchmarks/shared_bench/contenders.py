"""run_shared.py's targets (the envs) and contenders (the vector envs, by the names docs/bench.md
lists), built into :mod:`vecenv.bench`'s drivers; a ``-bK`` suffix runs the EnvPool-style async
loop on batches of K. Also CleanRL's Atari CNN, the policy scenario's."""

from __future__ import annotations

import contextlib
import functools
import re
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from vecenv.bench import contenders as bench
from vecenv.bench.contenders import Driver, action_pool, first_line
from vecenv.bench.contenders import _installed as installed
from vecenv.bench.envs import EnvTarget

#: the targets measured when none are named
DEFAULT_TARGETS = ("CartPole-v1", "HalfCheetah-v5", "Pong")
#: vecenv contender -> (backend, keyword arguments)
VECENV = {"vecenv-default": ("auto", {}), "vecenv-serial": ("serial", {}), "vecenv-thread": ("thread", {}),
          "vecenv-process": ("process", {}), "vecenv-inline": ("process", {"inline": True, "num_workers": 2})}
#: vecenv.bench's peers, under their own names
PEERS = ("gym-sync", "gym-async", "sb3-dummy", "sb3-subproc", "pufferlib-serial", "pufferlib-mp", "pufferlib-async")
BASES = (*VECENV, *PEERS, "pufferlib-mp-w1", "envpool", "ale-vector", "vecenv-sb3-dummy", "vecenv-sb3-subproc")
#: contenders of the random-action scenarios when none are named
DEFAULT = ("gym-sync", "vecenv-default", "vecenv-serial", "vecenv-process", "vecenv-inline",
           "envpool", *(() if getattr(sys, "_is_gil_enabled", lambda: True)() else ("vecenv-thread",)))
#: contenders of the policy scenario when none are named
DEFAULT_POLICY = (*DEFAULT, "vecenv-default-b4", "envpool-b4", "ale-vector-b4")
_NAME = re.compile(r"^(?P<base>[a-z0-9-]+?)(?:-b(?P<batch>\d+))?$")


def make_pong() -> gym.Env:
    """``ALE/Pong-v5`` as CleanRL trains it: frame skip 4 (max-pooled), 30 no-ops at reset,
    84x84 grayscale, 4 frames stacked: observation ``uint8 (4, 84, 84)``, 6 actions."""
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make("ALE/Pong-v5", frameskip=1)
    env = gym.wrappers.AtariPreprocessing(env, frame_skip=4, noop_max=30, screen_size=84, grayscale_obs=True)
    return gym.wrappers.FrameStackObservation(env, 4)


@dataclass(frozen=True)
class Target(EnvTarget):
    """One env, as each library builds it (vecenv.bench's contenders take it as their env)."""

    #: a zero-argument factory in place of the id ``name`` (module-level: spawned workers unpickle it)
    factory: Callable[[], gym.Env] | None = None
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

    @property
    def env_fn(self) -> Callable[[], gym.Env]:
        return self.factory or super().env_fn


#: the same Pong in EnvPool and ale_py: sticky actions 0.25, no fire on reset, rewards not clipped
_PONG = {"repeat_action_probability": 0.25, "use_fire_reset": False, "episodic_life": False}
KNOWN = {
    "CartPole-v1": Target("CartPole-v1", envpool_task="CartPole-v1"),
    "HalfCheetah-v5": Target("HalfCheetah-v5", envpool_task="HalfCheetah-v5", needs=("mujoco",)),
    "Pong": Target("Pong", kind="factory", factory=make_pong, envpool_task="Pong-v5", ale_game="pong",
                   envpool_kwargs={**_PONG, "reward_clip": False}, ale_kwargs={**_PONG, "reward_clipping": False},
                   needs=("ale_py",), image=True),
}


def target(name: str) -> Target:
    """A known target, or any registered gymnasium id (EnvPool runs it if it has the same id);
    a ValueError for anything else."""
    if name in KNOWN:
        return KNOWN[name]
    try:
        gym.spec(name)
    except (gym.error.Error, ImportError) as exc:
        raise ValueError(f"unknown target {name!r}: expected one of {list(KNOWN)} "
                         f"or a registered gymnasium id ({exc})") from None
    return Target(name, envpool_task=name)


def target_missing(t: Target) -> str | None:
    """Why target ``t`` cannot be built here (None when it can)."""
    missing = [m for m in t.needs if not installed(m)]
    return f"{t.name} needs {', '.join(missing)} (pip install {' '.join(missing)})" if missing else None


def parse(name: str) -> tuple[str, int | None]:
    """``"envpool-b4"`` -> ``("envpool", 4)``; raises ValueError for an unknown name."""
    m = _NAME.match(name)
    if not m or m["base"] not in BASES:
        raise ValueError(f"unknown contender {name!r}: expected one of {list(BASES)}, "
                         f"optionally with -bK (async batches of K), e.g. envpool-b4")
    return m["base"], int(m["batch"]) if m["batch"] else None


def bench_contender(base: str, batch: int | None) -> bench.Contender | None:
    """vecenv.bench's contender for ``base`` (None for the ones built here)."""
    if base in VECENV:
        backend, kwargs = VECENV[base]
        return bench.vecenv_contender(backend, batch, **kwargs)
    if base == "pufferlib-mp-w1":
        return bench.peer_contender("pufferlib-mp", num_workers=1)
    if base == "pufferlib-mp" and batch:  # PufferLib's async pool with batches of K
        return bench.peer_contender("pufferlib-async", batch_size=batch)
    return bench.peer_contender(base) if base in PEERS else None


def unavailable(name: str, t: Target, num_envs: int) -> str | None:
    """Why contender ``name`` cannot run target ``t`` here (None when it can)."""
    base, batch = parse(name)
    if batch is not None and not 1 <= batch < num_envs:
        return f"batch size {batch} must be between 1 and num_envs - 1 ({num_envs - 1})"
    if batch and base.startswith("pufferlib") and base != "pufferlib-mp":
        return f"{base} takes no -bK (pufferlib-mp-bK is the async pool with batches of K)"
    if batch and base.startswith(("gym-", "sb3-", "vecenv-sb3-")):
        return f"{base} has no async batches"
    c = bench_contender(base, batch)
    if c is not None:
        try:
            return (bench.peer_unavailable(c.backend) if c.kind == "peer" else None) or c.supports(t, num_envs)
        except Exception as exc:  # e.g. PufferLib's own import fails
            return first_line(exc)
    if "sb3" in base or base == "envpool":  # the modules vecenv.bench's SB3 and EnvPool peers need
        missing = bench.peer_unavailable("envpool" if base == "envpool" else "sb3-dummy")
        if missing or base != "envpool":
            return missing
        import envpool

        if t.envpool_task not in envpool.list_all_envs():
            return f"envpool has no {t.name}"
    if base == "ale-vector":
        if t.ale_game is None:
            return "ale_py's vector env runs Atari games only"
        try:
            from ale_py.vector_env import AtariVectorEnv  # noqa: F401
        except ImportError as exc:
            return f"ale_py has no C++ vector env here ({exc}; ale_py >= 0.11 has one)"
    return None


def _envpool_reset(envs: Any, seed: int) -> tuple[Any, dict]:
    envs.async_reset()
    obs, _, _, _, infos = envs.recv()
    return obs, infos


def build(name: str, t: Target, n: int, seed: int = 0) -> Driver:
    """Build contender ``name`` on target ``t`` into a driver (the caller closes it)."""
    base, batch = parse(name)
    c = bench_contender(base, batch)
    if c is not None:
        return c.build(t, n, seed)
    rows = batch or n
    if "sb3" in base:  # vecenv's SB3 VecEnvs: SB3's API (seed, then reset; same-step autoreset)
        from vecenv import sb3

        envs = (sb3.DummyVecEnv if base.endswith("dummy") else sb3.SubprocVecEnv)([t.env_fn] * n)
        return Driver(envs, action_pool(envs.action_space, n, seed), n, None, lambda e, s: (e.seed(s), e.reset()))
    if base == "envpool":
        import envpool

        with warnings.catch_warnings():  # its float64 Box bounds make gymnasium warn
            warnings.simplefilter("ignore", UserWarning)
            envs = envpool.make(t.envpool_task, env_type="gymnasium", num_envs=n, batch_size=rows, seed=seed,
                                **t.envpool_kwargs)
        actions = action_pool(envs.action_space, rows, seed)
        return (bench.BatchDriver(envs, actions, rows, None, _envpool_reset) if batch
                else Driver(envs, actions, n, None, lambda e, s: e.reset()))
    from ale_py.vector_env import AtariVectorEnv

    envs = AtariVectorEnv(t.ale_game, n, batch_size=batch or 0, **t.ale_kwargs)
    actions = action_pool(envs.single_action_space, rows, seed)
    return bench.BatchDriver(envs, actions, rows, None, with_ids=False) if batch else Driver(envs, actions, n, None)


# ==================================================================== the policy scenario
def make_policy(n_actions: int, seed: int = 0) -> Callable[[np.ndarray], np.ndarray]:
    """CleanRL's Atari CNN (``ppo_atari.py``) on one torch thread: from a batch of stacked frames
    to a batch of sampled actions (int64)."""
    import torch
    from torch import nn

    torch.set_num_threads(1)
    with contextlib.suppress(RuntimeError):  # already set, or torch already ran parallel work
        torch.set_num_interop_threads(1)
    torch.manual_seed(seed)
    net = nn.Sequential(
        nn.Conv2d(4, 32, 8, stride=4), nn.ReLU(),
        nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
        nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
        nn.Flatten(),
        nn.Linear(64 * 7 * 7, 512), nn.ReLU(),
        nn.Linear(512, n_actions),
    ).eval()
    gen = torch.Generator().manual_seed(seed)

    @torch.inference_mode()
    def act(obs: np.ndarray) -> np.ndarray:
        x = torch.from_numpy(np.asarray(obs)).float().div_(255.0)
        probs = torch.softmax(net(x), dim=-1)
        return torch.multinomial(probs, 1, generator=gen).squeeze(1).numpy()

    return act


@functools.cache
def action_count(name: str) -> int:
    """The number of actions of target ``name``'s env."""
    env = target(name).env_fn()
    env.close()
    return int(env.action_space.n)


class PolicyLoop:
    """Stands in for a driver's vector env and its actions: keeps the observations of every
    reset, step and recv, and gives the policy's actions for the last of them."""

    def __init__(self, envs: Any, act: Callable[[Any], Any]) -> None:
        self.envs, self.act, self.obs = envs, act, None

    def __getattr__(self, name: str) -> Any:
        call = getattr(self.envs, name)
        if name not in ("reset", "step", "recv"):
            return call

        def kept(*args: Any, **kwargs: Any) -> Any:
            out = call(*args, **kwargs)
            self.obs = out[0] if isinstance(out, tuple) else out
            return out

        return kept

    def __len__(self) -> int:
        return 1

    def __getitem__(self, i: int) -> Any:
        return self.act(self.obs)
