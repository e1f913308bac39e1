"""``envpool.make``, its shortcuts and ``EnvSpec``: EnvPool's constructors, for any gymnasium
env id or factory."""

from __future__ import annotations

import os
import re
from collections import namedtuple
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import TimeLimit

from vecenv.engine.checks import check_count
from vecenv.engine.checks import check_seeds as engine_check_seeds
from vecenv.envpool.atari import (
    ATARI_MAX_EPISODE_STEPS,
    AtariEnv,
    atari_config,
    atari_game,
    atari_ids,
    check_atari_options,
    is_int,
)
from vecenv.envpool.pool import EnvPool
from vecenv.envpool.styles import GymEnvPool, GymnasiumEnvPool
from vecenv.make import find_spec
from vecenv.make import make as make_vector_env

Task = str | Callable[..., gym.Env]

_STYLES: dict[str, type[GymnasiumEnvPool]] = {"gymnasium": GymnasiumEnvPool, "gym": GymEnvPool}
#: EnvPool render options a gymnasium env cannot take after it is made
_RENDER_SIZE = ("render_width", "render_height", "render_camera_id")
#: vector env keywords that make() sets itself
_OWN = ("batch_size", "num_workers", "autoreset_mode", "env_kwargs", "wrappers", "backend")


class EnvSpec:
    """A pool's configuration and its single-env spaces.

    ``observation_space`` / ``action_space`` (and their ``gymnasium_*`` aliases) are one env's
    spaces, as in EnvPool; ``env_spec`` is gymnasium's registration spec when the pool was made
    from an id. dm_env's ``observation_spec()`` / ``action_spec()`` are refused.
    """

    def __init__(self, task_id: str, config: dict[str, Any], observation_space: gym.Space,
                 action_space: gym.Space, env_spec: gym.envs.registration.EnvSpec | None = None) -> None:
        self.id = task_id
        # a namedtuple, as EnvPool's ``spec.config`` is (``spec.config.num_envs``)
        self.config: Any = namedtuple("Config", list(config), rename=True)(*config.values())
        self.observation_space = observation_space
        self.action_space = action_space
        self.env_spec = env_spec

    @property
    def gymnasium_observation_space(self) -> gym.Space:
        """One env's observation space (EnvPool's name for the gymnasium flavour)."""
        return self.observation_space

    @property
    def gymnasium_action_space(self) -> gym.Space:
        """One env's action space (EnvPool's name for the gymnasium flavour)."""
        return self.action_space

    @property
    def reward_threshold(self) -> float | None:
        """The task's reward threshold, ``None`` when it has none."""
        return self.config.reward_threshold

    @property
    def max_episode_steps(self) -> int | None:
        """Steps after which an episode is truncated, ``None`` when unlimited."""
        return self.config.max_episode_steps

    def observation_spec(self) -> Any:
        """Refused: dm_env specs need EnvPool's dm flavour, which vecenv does not offer."""
        raise NotImplementedError("EnvSpec.observation_spec(): dm_env specs are not offered by "
                                  "vecenv.envpool; use spec.observation_space")

    def action_spec(self) -> Any:
        """Refused: dm_env specs need EnvPool's dm flavour, which vecenv does not offer."""
        raise NotImplementedError("EnvSpec.action_spec(): dm_env specs are not offered by "
                                  "vecenv.envpool; use spec.action_space")

    def __repr__(self) -> str:
        return (f"EnvSpec({self.id!r}, observation_space={self.observation_space}, "
                f"action_space={self.action_space}, config={self.config})")




def make(task_id: Task, env_type: str = "gymnasium", *, num_envs: int = 1,
         batch_size: int | None = None, num_threads: int | None = None,
         num_workers: int | None = None, seed: int | Sequence[int] | None = 42,
         max_episode_steps: int | None = None, max_num_players: int = 1,
         thread_affinity_offset: int = -1, gym_reset_return_info: bool = False,
         reward_threshold: float | None = None, render_env_id: int = 0, backend: str = "auto",
         wrappers: Sequence[Callable[[gym.Env], gym.Env]] | None = None,
         backend_kwargs: dict[str, Any] | None = None, **kwargs: Any) -> EnvPool:
    """Make ``num_envs`` copies of a gymnasium env behind EnvPool's API.

    Args:
        task_id: a gymnasium id (``"CartPole-v1"``, ``"module:EnvId"``), EnvPool's Atari id
            (``"Pong-v5"``: EnvPool's preprocessing, needs ``vecenv[sims]``) or an env factory.
        env_type: ``"gymnasium"`` (5-tuples) or ``"gym"`` (old gym's 4-tuples); ``"dm"`` is refused.
        num_envs: envs in the pool.
        batch_size: ``recv()`` returns the first ``batch_size`` envs ready (async below
            ``num_envs``); ``None`` or 0: ``num_envs``.
        num_threads: the backend's worker count (default: the backend's).
        num_workers: a synonym of ``num_threads``.
        seed: env ``i`` is seeded ``seed + i`` on its first reset (or ``seed[i]``); ``None``: unseeded.
        max_episode_steps: truncate episodes after this many steps (default: the id's; Atari 27000).
        gym_reset_return_info: ``env_type="gym"`` only: ``reset()`` returns ``(obs, info)``.
        reward_threshold: recorded in ``config`` / ``spec`` (default: the id's own).
        render_env_id: the env ``render()`` draws by default.
        max_num_players: EnvPool's; only 1 player.
        thread_affinity_offset: ``>= 0`` with ``backend="process"`` pins worker ``i`` to the
            ``offset + i``-th usable core (Linux); else no effect.
        backend: ``"serial"``, ``"thread"``, ``"process"``, ``"ray"`` or ``"auto"``.
        wrappers: applied in order to each env after it is made.
        backend_kwargs: passed to vecenv's backend (``context``, ``on_error``, ``step_timeout``,
            ``max_episodes_per_env``, ``max_worker_memory``, ...).
        **kwargs: the env's own keywords (``render_mode`` included); for an Atari id, EnvPool's
            Atari options (``stack_num``, ``frame_skip``, ...; see docs/envpool.md).

    Examples:
        >>> import numpy as np
        >>> from vecenv import envpool
        >>> envs = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=3, seed=0,
        ...                     backend="serial")
        >>> obs, info = envs.reset()
        >>> obs, rew, term, trunc, info = envs.step(np.zeros(3, dtype=np.int64))
        >>> obs.shape, rew, info["env_id"]
        ((3, 4), array([1., 1., 1.], dtype=float32), array([0, 1, 2], dtype=int32))
        >>> envs.close()
    """
    options = {key: value for key, value in locals().items() if key in _DEFAULTS}
    cls, target, config, seeds, extra = _plan(task_id, env_type, options, kwargs)
    backend, workers = config["backend"], config["num_threads"]
    if workers is not None and backend != "serial":
        extra["num_workers"] = workers
    offset = config["thread_affinity_offset"]
    if offset >= 0 and backend == "process" and hasattr(os, "sched_setaffinity"):
        usable = sorted(os.sched_getaffinity(0))  # EnvPool's worker i on core offset + i
        first = offset % len(usable)
        extra.setdefault("affinity", usable[first:] + usable[:first])
    venv = make_vector_env(target.task, config["num_envs"], backend=backend,
                           autoreset_mode="next_step", env_kwargs=target.env_kwargs,
                           wrappers=target.wrappers, batch_size=config["batch_size"], **extra)
    try:
        config = {**config, "num_threads": venv.num_workers, "backend": venv.backend}
        # copies: callers may edit the pool's spaces (``envs.action_space.n -= 1``), never the engine's
        spaces = cls.spaces(venv.single_observation_space, venv.single_action_space)
        spec = EnvSpec(target.name, config, *spaces, target.gym_spec)
        return cls(venv, spec, seeds, config["render_env_id"], env_elapsed=target.env_elapsed)
    except BaseException:
        venv.close()
        raise


def make_gymnasium(task_id: Task, **kwargs: Any) -> EnvPool:
    """``make(task_id, env_type="gymnasium", ...)``."""
    return make(task_id, "gymnasium", **kwargs)


def make_gym(task_id: Task, **kwargs: Any) -> EnvPool:
    """``make(task_id, env_type="gym", ...)``: old gym's 4-tuples."""
    return make(task_id, "gym", **kwargs)


def make_dm(task_id: Task, **kwargs: Any) -> EnvPool:
    """Refused: dm_env's ``TimeStep`` API is not offered."""
    return make(task_id, "dm", **kwargs)


def make_spec(task_id: Task, env_type: str = "gymnasium", **kwargs: Any) -> EnvSpec:
    """The :class:`EnvSpec` that ``make`` with these arguments would give, from one env made here
    (in this process, then closed) instead of a pool."""
    options = {**_DEFAULTS, **{key: kwargs.pop(key) for key in list(kwargs) if key in _DEFAULTS}}
    cls, target, config, _, _ = _plan(task_id, env_type, options, kwargs)
    task, env_kwargs = target.task, target.env_kwargs
    env = gym.make(task, **env_kwargs) if isinstance(task, str) else task(**env_kwargs)
    try:
        for wrapper in target.wrappers:
            env = wrapper(env)
        spaces = cls.spaces(env.observation_space, env.action_space)
    finally:
        env.close()
    config["num_threads"] = config["num_threads"] or 0
    return EnvSpec(target.name, config, *spaces, target.gym_spec)


def list_all_envs() -> list[str]:
    """Every env id :func:`make` takes: gymnasium's registered ids, and EnvPool's Atari ids
    (``"Pong-v5"``) when ale_py is installed."""
    return sorted({*gym.registry, *atari_ids()})


# ==================================================================== argument checks
_DEFAULTS: dict[str, Any] = dict(make.__kwdefaults__ or {})


@dataclass
class _Target:
    """What the envs are: the task for vecenv's make, its keywords, and what config shows."""

    task: Task
    name: str
    env_kwargs: dict[str, Any]
    max_episode_steps: int | None
    reward_threshold: float | None
    wrappers: list[Callable[[gym.Env], gym.Env]]
    gym_spec: gym.envs.registration.EnvSpec | None = None
    options: dict[str, Any] = field(default_factory=dict)  # task options, after max_episode_steps
    shown: dict[str, Any] = field(default_factory=dict)  # the env's keywords, last in config
    env_elapsed: bool = False  # the env reports ``elapsed_step`` itself (EnvPool's Atari envs)


_Plan = tuple[type[GymnasiumEnvPool], _Target, dict[str, Any], list[int | None], dict[str, Any]]


def _plan(task: Any, env_type: Any, options: dict[str, Any], env_kwargs: dict[str, Any]) -> _Plan:
    """Check every argument of ``make`` (its keywords in ``options``) and say what to build: the
    pool's class, the envs, the pool's config, one seed per env and the backend's keywords."""
    if env_type == "dm":
        raise NotImplementedError("env_type='dm': dm_env's TimeStep API is not offered by "
                                  "vecenv.envpool; use env_type='gymnasium' or 'gym'")
    if env_type not in _STYLES:
        raise ValueError(f"env_type: expected 'gymnasium' or 'gym', got {env_type!r}")
    n = check_count("num_envs", options["num_envs"], None)
    batch = options["batch_size"]
    if batch is not None and not (is_int(batch) and batch == 0):
        batch = check_count("batch_size", batch, n)
    workers = _workers(options["num_threads"], options["num_workers"])
    seeds = check_seeds(options["seed"], n)
    players, offset = options["max_num_players"], options["thread_affinity_offset"]
    return_info, render_env_id = options["gym_reset_return_info"], options["render_env_id"]
    if players != 1:
        raise ValueError(f"max_num_players: gymnasium envs have one player, got {players!r}")
    if not is_int(offset):
        raise ValueError(f"thread_affinity_offset: expected an int, got {offset!r}")
    if not isinstance(return_info, (bool, np.bool_)):
        raise TypeError(f"gym_reset_return_info: expected a bool, got {return_info!r}")
    if not is_int(render_env_id) or not 0 <= render_env_id < n:
        raise ValueError(f"render_env_id: expected an env id below num_envs={n}, got {render_env_id!r}")
    max_episode_steps = options["max_episode_steps"]
    if max_episode_steps is not None:
        max_episode_steps = check_count("max_episode_steps", max_episode_steps, None)
    refused = [key for key in _RENDER_SIZE if key in env_kwargs]
    if refused:
        raise ValueError(f"{refused[0]}: not supported; a gymnasium env fixes its render size and "
                         "camera when made (pass the env's own keywords, e.g. width=/height=)")
    backend_kwargs = dict(options["backend_kwargs"] or {})
    clash = [key for key in _OWN if key in backend_kwargs]
    if clash:
        raise ValueError(f"backend_kwargs: {clash[0]!r} is set by envpool.make itself; pass it "
                         "as make's own argument")
    wrappers = list(options["wrappers"] or [])
    target = _target(task, dict(env_kwargs), max_episode_steps, options["reward_threshold"], wrappers)
    config = {
        "num_envs": n, "batch_size": n if batch in (None, 0) else batch, "num_threads": workers,
        "max_num_players": 1, "thread_affinity_offset": int(offset), "seed": options["seed"],
        "gym_reset_return_info": bool(return_info), "max_episode_steps": target.max_episode_steps,
        **target.options, "reward_threshold": target.reward_threshold,
        "render_env_id": int(render_env_id), "task_id": target.name,
        "backend": options["backend"],  # "auto": vecenv.make chooses (VECENV_BACKEND forces)
        **target.shown,
    }
    return _STYLES[env_type], target, config, seeds, backend_kwargs


def _target(task: Any, env_kwargs: dict[str, Any], max_episode_steps: int | None,
            reward_threshold: float | None, wrappers: list[Callable[[gym.Env], gym.Env]]) -> _Target:
    """The env to build from ``task_id``: a gymnasium id, EnvPool's Atari id, or a callable."""
    if isinstance(task, str):
        game = None if task in gym.registry or ":" in task else atari_game(task)
        if game is not None:  # AtariEnv with EnvPool's options, checked
            options = check_atari_options(game, env_kwargs)
            render = {"render_mode": options.pop("render_mode")} if "render_mode" in options else {}
            steps = ATARI_MAX_EPISODE_STEPS if max_episode_steps is None else max_episode_steps
            kwargs = {"game": game, "max_episode_steps": steps, **options, **render}
            return _Target(AtariEnv, task, kwargs, steps, reward_threshold, wrappers,
                           options=atari_config(game, options), shown=render, env_elapsed=True)
        gym_spec = find_spec(task)  # gymnasium's clear error; "module:EnvId" imports module
        if max_episode_steps is not None:
            env_kwargs["max_episode_steps"] = max_episode_steps
        else:
            max_episode_steps = gym_spec.max_episode_steps
        if reward_threshold is None:
            reward_threshold = gym_spec.reward_threshold
        match = re.fullmatch(r"([A-Za-z0-9]+)-v[45]", task)
        if match and match[1] in MUJOCO_INFOS:  # EnvPool's info keys, before the caller's wrappers
            wrappers.insert(0, partial(EnvPoolMujocoInfos, task=match[1]))
        return _Target(task, task, env_kwargs, max_episode_steps, reward_threshold, wrappers,
                       gym_spec, shown=env_kwargs)
    if callable(task):
        if max_episode_steps is not None:
            wrappers.insert(0, partial(TimeLimit, max_episode_steps=max_episode_steps))
        name = getattr(task, "__name__", type(task).__name__)
        return _Target(task, name, env_kwargs, max_episode_steps, reward_threshold, wrappers,
                       shown=env_kwargs)
    raise TypeError(f"task_id: expected a registered env id or a callable returning an env, "
                    f"got {task!r:.80}")


def _workers(num_threads: Any, num_workers: Any) -> int | None:
    """EnvPool's ``num_threads`` is vecenv's ``num_workers``: either names the worker count."""
    given = [(name, v) for name, v in (("num_threads", num_threads), ("num_workers", num_workers))
             if v is not None and not (is_int(v) and v == 0)]
    counts = {check_count(name, v, None) for name, v in given}
    if len(counts) > 1:
        raise ValueError(f"num_threads={num_threads} and num_workers={num_workers} name the same "
                         "worker count; pass one of them")
    return counts.pop() if counts else None


def check_seeds(seed: Any, n: int) -> list[int | None]:
    """One seed per env, as EnvPool seeds at make: the engine's rule (``seed + i`` for an int, or
    a list of ``n``), with every seed an int >= 0 and the words naming make's ``seed``."""
    listed = isinstance(seed, (list, tuple, np.ndarray))
    given = seed if seed is None or listed else _one_seed(seed, "seed")
    try:
        seeds = engine_check_seeds(given, n)
    except ValueError:  # a list of another length, in the words of reset(seed=...)
        raise ValueError(f"seed: a sequence of seeds needs one per env (num_envs={n}), got {len(seed)}") from None
    return [_one_seed(s, f"seed[{i}]") for i, s in enumerate(seeds)] if listed else seeds


def _one_seed(seed: Any, name: str) -> int:
    if not is_int(seed):
        raise TypeError(f"{name}: expected an int (or a sequence of one int per env), got {seed!r}")
    if seed < 0:
        raise ValueError(f"{name}: expected an int >= 0 (gymnasium seeds must be non-negative), got {seed}")
    return int(seed)


# ==================================================================== EnvPool's MuJoCo infos
#: an EnvPool info key: the gymnasium keys its value comes from (first found; v5 names, then v4),
#: and its value when the env gives none of them (on reset)
_Key = tuple[tuple[str, ...], float]
_POS = {"x_position": (("x_position",), 0.0), "x_velocity": (("x_velocity",), 0.0)}
_PLANE = {**_POS, "y_position": (("y_position",), 0.0), "y_velocity": (("y_velocity",), 0.0),
          "distance_from_origin": (("distance_from_origin",), 0.0)}

#: task (the id without its version) -> EnvPool's info keys, as EnvPool 1.2.5 returns them
MUJOCO_INFOS: dict[str, dict[str, _Key]] = {
    "HalfCheetah": {"reward_run": (("reward_forward", "reward_run"), 0.0),
                    "reward_ctrl": (("reward_ctrl",), 0.0), **_POS},
    "Hopper": dict(_POS),
    "Walker2d": dict(_POS),
    "Ant": {"reward_forward": (("reward_forward",), 0.0), "reward_ctrl": (("reward_ctrl",), 0.0),
            "reward_contact": (("reward_contact",), 0.0),
            "reward_survive": (("reward_survive",), 0.0), **_PLANE},
    "Humanoid": {"reward_linvel": (("reward_forward", "reward_linvel"), 0.0),
                 "reward_quadctrl": (("reward_ctrl", "reward_quadctrl"), 0.0),
                 "reward_alive": (("reward_survive", "reward_alive"), 0.0),
                 "reward_impact": (("reward_contact", "reward_impact"), 0.0), **_PLANE},
    "HumanoidStandup": {"reward_linup": (("reward_linup",), 0.0),
                        "reward_quadctrl": (("reward_quadctrl", "reward_ctrl"), 0.0),
                        "reward_impact": (("reward_impact", "reward_contact"), 0.0),
                        "reward_alive": (("reward_alive",), 1.0)},
    "Swimmer": {"reward_fwd": (("reward_forward", "reward_fwd"), 0.0),
                "reward_ctrl": (("reward_ctrl",), 0.0), **_PLANE},
    "Reacher": {"reward_dist": (("reward_dist",), 0.0), "reward_ctrl": (("reward_ctrl",), 0.0)},
    "Pusher": {"reward_dist": (("reward_dist",), 0.0), "reward_ctrl": (("reward_ctrl",), 0.0),
               "reward_near": (("reward_near",), 0.0)},
    "InvertedPendulum": {},
    "InvertedDoublePendulum": {},
}

#: gymnasium's info keys that EnvPool does not return, per task (dropped)
_GYM_KEYS = {key for keys in MUJOCO_INFOS.values() for k, (sources, _) in keys.items()
             for key in (k, *sources)} | {"z_distance_from_origin", "tendon_length", "tendon_velocity",
                                         "forward_reward", "distance_penalty", "velocity_penalty"}
_DROPPED = {task: frozenset(_GYM_KEYS - set(keys)) for task, keys in MUJOCO_INFOS.items()}


class EnvPoolMujocoInfos(gym.Wrapper):
    """Infos as EnvPool's C++ MuJoCo ``task`` returns them: its keys (some named unlike
    gymnasium's), the same on reset as on step, each a float64 (zeros on reset); the keys
    gymnasium's env adds are dropped, others (a user's wrapper's) pass through."""

    def __init__(self, env: gym.Env, task: str) -> None:
        super().__init__(env)
        if task not in MUJOCO_INFOS:
            raise ValueError(f"task: expected one of EnvPool's MuJoCo tasks {sorted(MUJOCO_INFOS)}, "
                             f"got {task!r}")
        self.task = task
        self._keys = MUJOCO_INFOS[task]
        self._dropped = _DROPPED[task]

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        return obs, self._infos(info)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, self._infos(info)

    def _infos(self, info: dict[str, Any]) -> dict[str, Any]:
        out = {key: value for key, value in info.items()
               if key not in self._dropped and key not in self._keys}
        for key, (sources, default) in self._keys.items():
            out[key] = np.float64(next((info[s] for s in sources if s in info), default))
        return out
