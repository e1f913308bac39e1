"""``envpool.make`` and its shortcuts: EnvPool's constructors, for any gymnasium env id or factory."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import TimeLimit

from vecenv.engine.checks import check_count
from vecenv.envpool.atari import (
    ATARI_MAX_EPISODE_STEPS,
    AtariEnv,
    atari_config,
    atari_game,
    atari_ids,
    check_atari_options,
)
from vecenv.envpool.checks import check_seeds, is_int
from vecenv.envpool.mujoco import EnvPoolMujocoInfos, mujoco_task
from vecenv.envpool.pool import EnvPool, EnvSpec
from vecenv.envpool.styles import GymEnvPool, GymnasiumEnvPool
from vecenv.make import find_spec
from vecenv.make import make as make_vector_env

Task = str | Callable[..., gym.Env]

_STYLES: dict[str, type[GymnasiumEnvPool]] = {"gymnasium": GymnasiumEnvPool, "gym": GymEnvPool}
#: EnvPool render options a gymnasium env cannot take after it is made
_RENDER_SIZE = ("render_width", "render_height", "render_camera_id")
#: vector env keywords that make() sets itself
_OWN = ("batch_size", "num_workers", "autoreset_mode", "env_kwargs", "wrappers", "backend")


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
        task_id: a registered gymnasium id (``"CartPole-v1"``; ``"module:EnvId"`` imports the
            module that registers it first), EnvPool's Atari id (``"Pong-v5"``, with EnvPool's
            preprocessing; needs ``vecenv[sims]``) or a callable returning an env.
        env_type: ``"gymnasium"`` (5-tuples) or ``"gym"`` (old gym's 4-tuples); ``"dm"`` is refused.
        num_envs: envs in the pool.
        batch_size: ``recv()`` returns the first ``batch_size`` envs ready (async mode when
            below ``num_envs``); ``None`` or 0: ``num_envs``.
        num_threads: the backend's worker count (default: the backend's, one process per
            usable core for ``"process"``).
        num_workers: a synonym of ``num_threads``.
        seed: env ``i`` is seeded ``seed + i`` on its first reset (or ``seed[i]``); ``None``: unseeded.
        max_episode_steps: truncate episodes after this many steps (default: the id's own limit;
            27000 for an Atari id).
        gym_reset_return_info: ``env_type="gym"`` only: ``reset()`` returns ``(obs, info)``.
        reward_threshold: recorded in ``config`` / ``spec`` (default: the id's own).
        render_env_id: the env ``render()`` draws by default.
        max_num_players: EnvPool's; only 1 player.
        thread_affinity_offset: EnvPool's: ``>= 0`` with ``backend="process"`` pins worker ``i``
            to the ``offset + i``-th usable core (``affinity=`` of the process backend, Linux);
            else no effect.
        backend: ``"serial"``, ``"thread"``, ``"process"``, ``"ray"`` or ``"auto"``.
        wrappers: applied in order to each env after it is made.
        backend_kwargs: passed to vecenv's backend (``context``, ``on_error``, ``step_timeout``, ...).
        **kwargs: the env's own keywords (to ``gymnasium.make`` or the callable), as EnvPool takes
            task options (``render_mode`` included); for an Atari id, EnvPool's Atari options
            (``stack_num``, ``frame_skip``, ``episodic_life``, ...; see docs/envpool.md).

    Examples:
        A synchronous pool (``batch_size`` left at ``num_envs``), EnvPool's ``reset`` / ``step``:

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
    options = dict(num_envs=num_envs, batch_size=batch_size, num_threads=num_threads,
                   num_workers=num_workers, seed=seed, max_episode_steps=max_episode_steps,
                   max_num_players=max_num_players, thread_affinity_offset=thread_affinity_offset,
                   gym_reset_return_info=gym_reset_return_info, reward_threshold=reward_threshold,
                   render_env_id=render_env_id, backend=backend, wrappers=wrappers,
                   backend_kwargs=backend_kwargs)
    plan = _plan(task_id, env_type, options, kwargs)
    extra = dict(plan.backend_kwargs)
    if plan.workers is not None and plan.backend != "serial":
        extra["num_workers"] = plan.workers
    offset = plan.config["thread_affinity_offset"]
    if offset >= 0 and plan.backend == "process" and hasattr(os, "sched_setaffinity"):
        usable = sorted(os.sched_getaffinity(0))  # EnvPool's worker i on core offset + i
        first = offset % len(usable)
        extra.setdefault("affinity", usable[first:] + usable[:first])
    venv = make_vector_env(plan.task, plan.num_envs, backend=plan.backend, autoreset_mode="next_step",
                           env_kwargs=plan.env_kwargs, wrappers=plan.wrappers,
                           batch_size=plan.batch_size, **extra)
    try:
        config = {**plan.config, "num_threads": venv.num_workers, "backend": venv.backend}
        # copies: callers may edit the pool's spaces (``envs.action_space.n -= 1``), never the engine's
        spec = EnvSpec(plan.name, config, *plan.cls.spaces(venv.single_observation_space,
                                                             venv.single_action_space), plan.gym_spec)
        return plan.cls(venv, spec, plan.seeds, plan.render_env_id, env_elapsed=plan.env_elapsed)
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
    plan = _plan(task_id, env_type, options, kwargs)
    env = gym.make(plan.task, **plan.env_kwargs) if isinstance(plan.task, str) else plan.task(**plan.env_kwargs)
    try:
        for wrapper in plan.wrappers:
            env = wrapper(env)
        observation_space, action_space = env.observation_space, env.action_space
    finally:
        env.close()
    config = {**plan.config, "num_threads": plan.workers or 0, "backend": plan.backend}
    return EnvSpec(plan.name, config, *plan.cls.spaces(observation_space, action_space), plan.gym_spec)


def list_all_envs() -> list[str]:
    """Every env id :func:`make` takes: gymnasium's registered ids, and EnvPool's Atari ids
    (``"Pong-v5"``) when ale_py is installed."""
    return sorted({*gym.registry, *atari_ids()})


# ==================================================================== argument checks
_DEFAULTS: dict[str, Any] = dict(make.__kwdefaults__ or {})


@dataclass
class _Plan:
    cls: type[GymnasiumEnvPool]
    task: Task
    name: str
    num_envs: int
    batch_size: int
    workers: int | None
    seeds: list[int | None]
    env_kwargs: dict[str, Any]
    wrappers: list[Callable[[gym.Env], gym.Env]]
    backend: str
    backend_kwargs: dict[str, Any]
    config: dict[str, Any]
    gym_spec: gym.envs.registration.EnvSpec | None
    render_env_id: int
    env_elapsed: bool  # the env reports ``elapsed_step`` itself (EnvPool's Atari envs)


def _plan(task: Any, env_type: Any, options: dict[str, Any], env_kwargs: dict[str, Any]) -> _Plan:
    """Check every argument of ``make`` (its keywords in ``options``) and say what to build."""
    cls = _style(env_type)
    n, batch, workers, seeds = _counts(options)
    render_env_id = _check_scalars(options, n)
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
    backend = options["backend"]  # "auto": vecenv.make measures and chooses (VECENV_BACKEND forces)
    config = {
        "num_envs": n, "batch_size": batch, "num_threads": workers, "max_num_players": 1,
        "thread_affinity_offset": int(options["thread_affinity_offset"]), "seed": options["seed"],
        "gym_reset_return_info": bool(options["gym_reset_return_info"]),
        "max_episode_steps": target.max_episode_steps, **target.options,
        "reward_threshold": target.reward_threshold, "render_env_id": render_env_id,
        "task_id": target.name, "backend": backend, **target.shown,
    }
    return _Plan(cls, target.task, target.name, n, batch, workers, seeds, target.env_kwargs,
                 wrappers, backend, backend_kwargs, config, target.gym_spec, render_env_id,
                 target.env_elapsed)


def _counts(options: dict[str, Any]) -> tuple[int, int, int | None, list[int | None]]:
    """``num_envs``, ``batch_size``, the worker count and one seed per env, checked."""
    batch_size = options["batch_size"]
    n = check_count("num_envs", options["num_envs"], None)
    batch = n if batch_size is None or (is_int(batch_size) and batch_size == 0) \
        else check_count("batch_size", batch_size, n)
    workers = _workers(options["num_threads"], options["num_workers"])
    return n, batch, workers, check_seeds(options["seed"], n)


def _check_scalars(options: dict[str, Any], n: int) -> int:
    """EnvPool's scalar options, checked; returns ``render_env_id``."""
    max_num_players, thread_affinity_offset = options["max_num_players"], options["thread_affinity_offset"]
    gym_reset_return_info, render_env_id = options["gym_reset_return_info"], options["render_env_id"]
    if max_num_players != 1:
        raise ValueError(f"max_num_players: gymnasium envs have one player, got {max_num_players!r}")
    if not is_int(thread_affinity_offset):
        raise ValueError(f"thread_affinity_offset: expected an int, got {thread_affinity_offset!r}")
    if not isinstance(gym_reset_return_info, (bool, np.bool_)):
        raise TypeError(f"gym_reset_return_info: expected a bool, got {gym_reset_return_info!r}")
    if not is_int(render_env_id) or not 0 <= render_env_id < n:
        raise ValueError(f"render_env_id: expected an env id below num_envs={n}, got {render_env_id!r}")
    return int(render_env_id)


@dataclass
class _Target:
    """What the envs are: the task for vecenv's make, its keywords, and what config shows."""

    task: Task
    name: str
    env_kwargs: dict[str, Any]
    max_episode_steps: int | None
    reward_threshold: float | None
    gym_spec: gym.envs.registration.EnvSpec | None = None
    options: dict[str, Any] = field(default_factory=dict)  # task options, after max_episode_steps
    shown: dict[str, Any] = field(default_factory=dict)  # the env's keywords, last in config
    env_elapsed: bool = False  # the env reports ``elapsed_step`` itself


def _target(task: Any, env_kwargs: dict[str, Any], max_episode_steps: int | None,
            reward_threshold: float | None, wrappers: list[Callable[[gym.Env], gym.Env]]) -> _Target:
    """The env to build from ``task_id``: a gymnasium id, EnvPool's Atari id, or a callable."""
    if isinstance(task, str):
        game = None if task in gym.registry or ":" in task else atari_game(task)
        if game is not None:
            return _atari_target(task, game, env_kwargs, max_episode_steps, reward_threshold)
        gym_spec = find_spec(task)  # gymnasium's clear error; "module:EnvId" imports module
        if max_episode_steps is not None:
            env_kwargs["max_episode_steps"] = max_episode_steps
        else:
            max_episode_steps = gym_spec.max_episode_steps
        if reward_threshold is None:
            reward_threshold = gym_spec.reward_threshold
        mujoco = mujoco_task(task)
        if mujoco is not None:  # EnvPool's info keys and dtypes, before the caller's wrappers
            wrappers.insert(0, partial(EnvPoolMujocoInfos, task=mujoco))
        return _Target(task, task, env_kwargs, max_episode_steps, reward_threshold, gym_spec,
                       shown=env_kwargs)
    if callable(task):
        if max_episode_steps is not None:
            wrappers.insert(0, partial(TimeLimit, max_episode_steps=max_episode_steps))
        name = getattr(task, "__name__", type(task).__name__)
        return _Target(task, name, env_kwargs, max_episode_steps, reward_threshold, shown=env_kwargs)
    raise TypeError(f"task_id: expected a registered env id or a callable returning an env, "
                    f"got {task!r:.80}")


def _atari_target(task_id: str, game: str, env_kwargs: dict[str, Any], max_episode_steps: int | None,
                  reward_threshold: float | None) -> _Target:
    """EnvPool's Atari id: :class:`~vecenv.envpool.atari.AtariEnv` with the options checked."""
    options = check_atari_options(game, env_kwargs)
    render = {"render_mode": options.pop("render_mode")} if "render_mode" in options else {}
    steps = ATARI_MAX_EPISODE_STEPS if max_episode_steps is None else max_episode_steps
    kwargs = {"game": game, "max_episode_steps": steps, **options, **render}
    return _Target(AtariEnv, task_id, kwargs, steps, reward_threshold,
                   options=atari_config(game, options), shown=render, env_elapsed=True)


def _style(env_type: Any) -> type[GymnasiumEnvPool]:
    if env_type == "dm":
        raise NotImplementedError("env_type='dm': dm_env's TimeStep API is not offered by "
                                  "vecenv.envpool; use env_type='gymnasium' or 'gym'")
    if env_type not in _STYLES:
        raise ValueError(f"env_type: expected 'gymnasium' or 'gym', got {env_type!r}")
    return _STYLES[env_type]


def _workers(num_threads: Any, num_workers: Any) -> int | None:
    """EnvPool's ``num_threads`` is vecenv's ``num_workers``: either names the worker count."""
    given = [(name, v) for name, v in (("num_threads", num_threads), ("num_workers", num_workers))
             if v is not None and not (is_int(v) and v == 0)]
    counts = {check_count(name, v, None) for name, v in given}
    if len(counts) > 1:
        raise ValueError(f"num_threads={num_threads} and num_workers={num_workers} name the same "
                         "worker count; pass one of them")
    return counts.pop() if counts else None
