"""PettingZoo's multi-agent games on vecenv: every agent of ``num_games`` games as a row.

    envs = vecenv.pettingzoo.make(pistonball_v6.parallel_env, num_games=4)

Row ``g * num_agents + k`` is agent ``possible_agents[k]`` of game ``g``; ``infos["active"]``
says which rows hold an agent in this step. :func:`make_sb3` gives the same rows behind
Stable-Baselines3's VecEnv API. PettingZoo is an optional extra: ``pip install
'vecenv[pettingzoo]'``. See docs/pettingzoo.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gymnasium.vector import AutoresetMode

from vecenv.pettingzoo.game import INSTALL, GameEnv, InstanceCopier, import_pettingzoo
from vecenv.pettingzoo.vector import PettingZooVectorEnv, make_games

__all__ = ["INSTALL", "GameEnv", "PettingZooVectorEnv", "make", "make_sb3"]


def make(env_fn: Callable[[], Any], num_games: int, *, backend: str = "auto",
         reset_when: str = "all", autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
         seed: int | None = None, **options: Any) -> PettingZooVectorEnv:
    """A gymnasium vector env over the agents of ``num_games`` copies of a PettingZoo game.

    Args:
        env_fn: returns a PettingZoo ``ParallelEnv`` (an ``AECEnv`` is converted with
            PettingZoo's ``aec_to_parallel``). Every agent needs the same observation and action
            space (pad them first otherwise, e.g. with SuperSuit's pad wrappers).
        num_games: how many games; ``num_envs = num_games * len(possible_agents)``.
        backend: as for :func:`vecenv.make` (``"serial"``, ``"thread"``, ``"process"``,
            ``"ray"``, ``"auto"``); each game is one env of that backend.
        reset_when: a game resets when ``"all"`` its agents are done, or ``"any"`` (then the
            others are truncated on that step).
        autoreset_mode: ``"next_step"`` (default), ``"same_step"`` or ``"disabled"``, per game.
        seed: the seed of the first reset when it is given none: game ``g`` gets ``seed + g``.
        **options: passed to :func:`vecenv.make` (``num_workers``, ``context``, ``copy``, ...).
    """
    import_pettingzoo()
    return make_games(env_fn, num_games, backend=backend, reset_when=reset_when,
                      autoreset_mode=autoreset_mode, seed=seed, **options)


def make_sb3(env: Any, num_games: int, *, backend: str = "auto", reset_when: str = "all",
             seed: int | None = None, **options: Any) -> Any:
    """The agents of ``num_games`` games behind Stable-Baselines3's VecEnv API.

    ``env`` is a factory (as for :func:`make`), or an env instance that each game copies (a
    PettingZoo env, or SuperSuit's ``pettingzoo_env_to_vec_env_v1`` of one), as SuperSuit's
    ``concat_vec_envs_v1`` copies it. Episodes auto-reset in the same step, SB3's convention,
    with each row's last observation in ``infos[i]["terminal_observation"]``.
    """
    from vecenv.pettingzoo.sb3 import PettingZooVecEnv

    pz = import_pettingzoo()
    env = getattr(env, "par_env", env)  # SuperSuit's MarkovVectorEnv holds the game as par_env
    env_fn = InstanceCopier(env) if isinstance(env, (pz.ParallelEnv, pz.AECEnv)) else env
    envs = make(env_fn, num_games, backend=backend, reset_when=reset_when,
                autoreset_mode="same_step", seed=seed, **options)
    try:
        return PettingZooVecEnv(envs)
    except BaseException:
        envs.close()
        raise
