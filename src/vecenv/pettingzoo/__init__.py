"""PettingZoo's multi-agent games on vecenv: every agent of ``num_games`` games as a row (row
``g * num_agents + k`` is agent ``possible_agents[k]`` of game ``g``), behind gymnasium's vector
API (:func:`make`) or SB3's VecEnv API (:func:`make_sb3`). See docs/pettingzoo.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from operator import attrgetter
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from vecenv.engine import VectorEnv, parse_autoreset_mode
from vecenv.engine.checks import check_count, refuse_recycling
from vecenv.infos import add_info
from vecenv.pettingzoo.game import INSTALL, GameEnv, import_pettingzoo
from vecenv.policy import FailurePolicy

__all__ = ["INSTALL", "GameEnv", "PettingZooVectorEnv", "make", "make_sb3"]

def _tree(fn: Callable[[np.ndarray], np.ndarray], x: Any) -> Any:
    """``fn`` applied to every array of a (nested) dict or tuple of arrays."""
    if isinstance(x, dict):
        return {key: _tree(fn, value) for key, value in x.items()}
    if isinstance(x, tuple):
        return tuple(_tree(fn, value) for value in x)
    return fn(x)


class PettingZooVectorEnv(gym.vector.VectorEnv):  # type: ignore[misc]
    """Every agent of ``num_games`` PettingZoo games as a row of gymnasium's vector API.

    ``num_envs = num_games * num_agents``; row ``g * num_agents + k`` is agent
    ``possible_agents[k]`` of game ``g``. The infos hold ``active`` (the rows whose agent took
    part in this step: the others are zeros), ``agent`` and ``game`` (each row's), and
    ``game_ended`` (the rows of games that ended in this step), beside the agents' own infos and,
    in ``same_step`` mode, ``final_obs``/``final_info`` per row. Build it with
    :func:`vecenv.pettingzoo.make`.
    """

    def __init__(self, games: VectorEnv, autoreset_mode: AutoresetMode, reset_when: str,
                 seed: int | None = None) -> None:
        self.games = games
        self.num_games = g = games.num_envs
        facts = attrgetter("possible_agents", "agent_observation_space", "agent_action_space")
        agents, self.single_observation_space, self.single_action_space = games.apply(
            facts, indices=[0])[0]
        self.possible_agents = list(agents)
        self.num_agents = n = len(self.possible_agents)
        self.num_envs = g * n
        self.autoreset_mode = autoreset_mode
        self.reset_when = reset_when
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = {**games.metadata, "autoreset_mode": autoreset_mode}
        self.render_mode = games.render_mode
        self.spec = None
        self.closed = False
        masks = dict.fromkeys(("_agent", "_game", "_active", "_game_ended"), np.ones(g * n, bool))
        agent, game = np.array(self.possible_agents * g), np.repeat(np.arange(g), n)
        self._constant = {"agent": agent, "game": game, **masks}
        for array in self._constant.values():
            array.flags.writeable = False  # every step's infos share them
        self._pending_seed = seed  # the first reset's, when it is given none

    # ------------------------------------------------------------------ reset / step
    def reset(self, *, seed: int | Sequence[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset the games: game ``g`` gets ``seed + g`` (or ``seed[g]`` from a list, one per
        game). ``options={"reset_mask": rows}`` resets only the games that hold a marked row
        (e.g. ``infos["game_ended"]``)."""
        if seed is None:
            seed = self._pending_seed
        self._pending_seed = None
        if options is not None and "reset_mask" in options:  # rows -> games with a row marked
            mask = np.asarray(options["reset_mask"])
            if mask.dtype != np.bool_ or mask.shape != (self.num_envs,):
                raise ValueError(f"reset_mask must be a bool array of shape ({self.num_envs},), one per "
                                 f"row, got {mask.dtype} of shape {mask.shape}")
            games_mask = mask.reshape(self.num_games, self.num_agents).any(axis=1)
            options = {**options, "reset_mask": np.asarray(games_mask)}
        games, infos = self.games.reset(seed=seed, options=options)
        return self._obs_rows(games), self._info_rows(games, infos)

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every game with one action per row (inactive rows' actions are ignored)."""
        games, _, _, _, infos = self.games.step(self._by_game(actions))
        rows = self.num_envs
        return (self._obs_rows(games), games["reward"].reshape(rows), games["terminated"].reshape(rows),
                games["truncated"].reshape(rows), self._info_rows(games, infos))

    def _obs_rows(self, games: dict) -> Any:
        """The games' ``(games, agents, ...)`` observations as ``(rows, ...)`` (views)."""
        return _tree(lambda x: x.reshape(self.num_envs, *x.shape[2:]), games["obs"])

    def _info_rows(self, games: dict, infos: dict) -> dict[str, Any]:
        """The infos of the rows: the masks and names, and the reports of the games that sent one."""
        n, rows = self.num_agents, self.num_envs
        row_infos: dict[str, Any] = {"active": games["active"].reshape(rows),
                                     "game_ended": np.repeat(games["ended"], n), **self._constant}
        for g in np.flatnonzero(infos.get("_agents", [])).tolist():
            report, first = infos["agents"][g], g * n
            for k, obs in report.final_obs.items():
                final = {"final_obs": obs, "final_info": report.final_info.get(k, {})}
                add_info(row_infos, final, first + k, rows)
            for k, info in report.infos.items():
                add_info(row_infos, info, first + k, rows)
        return row_infos

    def _by_game(self, actions: Any) -> Any:
        """The rows' actions as ``(games, agents, ...)`` arrays (views where they can be)."""
        g, n, rows = self.num_games, self.num_agents, self.num_envs

        def split(x: Any) -> np.ndarray:
            x = np.asarray(x)
            if x.ndim == 0 or x.shape[0] != rows:
                raise ValueError(f"expected one action per row: {rows} ({g} games x {n} agents), "
                                 f"got an array of shape {x.shape}")
            return x.reshape(g, n, *x.shape[1:])

        return _tree(split, actions)

    # ------------------------------------------------------------------ the rest
    def render(self) -> tuple[Any, ...]:
        """Each game's frame."""
        return self.games.render()

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call ``name`` on each game's PettingZoo env (or get its value): one result per game."""
        return self.games.call(name, *args, **kwargs)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """``name`` of each game's env: one value per game."""
        return self.games.get_attr(name)

    def close(self, **kwargs: Any) -> None:
        """Close every game and the workers that run them; calling it again does nothing."""
        if not self.closed:
            self.closed = True
            self.games.close(**kwargs)

    def __enter__(self) -> PettingZooVectorEnv:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"PettingZooVectorEnv(num_games={self.num_games}, num_agents={self.num_agents}, "
                f"backend={self.games.backend!r})")


def make(env_fn: Callable[[], Any], num_games: int, *, backend: str = "auto",
         reset_when: str = "all", autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
         seed: int | None = None, **options: Any) -> PettingZooVectorEnv:
    """A gymnasium vector env over the agents of ``num_games`` copies of a PettingZoo game.

    Args:
        env_fn: returns a PettingZoo ``ParallelEnv`` (or ``AECEnv``, converted) whose agents share
            one observation and one action space (pad them first otherwise, as with SuperSuit).
        num_games: how many games; ``num_envs = num_games * len(possible_agents)``.
        backend: as for :func:`vecenv.make`; each game is one env of that backend.
        reset_when: a game resets when ``"all"`` its agents are done, or ``"any"`` (then the
            others are truncated on that step).
        autoreset_mode: ``"next_step"`` (default), ``"same_step"`` or ``"disabled"``, per game.
        seed: the seed of the first reset when it is given none: game ``g`` gets ``seed + g``.
        **options: passed to :func:`vecenv.make` (``num_workers``, ``context``, ``copy``, ...);
            ``max_episodes_per_env=N`` rebuilds each game's env every N games (process and ray
            backends; reported as ``infos["recycled"]`` in its agents' rows); ``max_worker_memory``
            is not supported for games.
    """
    import vecenv

    import_pettingzoo()
    if reset_when not in ("all", "any"):
        raise ValueError(f"reset_when must be one of ('all', 'any'), got {reset_when!r}")
    if not callable(env_fn):
        raise TypeError(f"env_fn: expected a callable returning a PettingZoo env, got {env_fn!r:.100}")
    mode = parse_autoreset_mode(autoreset_mode)
    num_games = check_count("num_games", num_games, None)
    for key, allowed in (("batch_size", (None, num_games)), ("on_error", ("raise",))):
        if options.get(key, allowed[0]) not in allowed:
            raise ValueError(f"vecenv.pettingzoo.make: {key}={options[key]!r} is not supported for "
                             f"PettingZoo games (every game is stepped at once, a failure raises)")
    if options.get("max_worker_memory") is not None:
        raise ValueError(
            f"vecenv.pettingzoo.make: max_worker_memory={options['max_worker_memory']!r} is not supported "
            "for PettingZoo games yet: a game cut short by a replaced worker could not be reset (the "
            "games reset themselves); use max_episodes_per_env=N, which rebuilds each game's env "
            "every N games")
    max_episodes = options.pop("max_episodes_per_env", None)
    if max_episodes is not None:  # each game counts its own games (it resets itself)
        refuse_recycling(FailurePolicy(max_episodes_per_env=max_episodes), backend)
        backend = "process" if backend == "auto" else backend
    game_fn = partial(GameEnv, env_fn, reset_when, mode.name.lower(), max_episodes)
    games = vecenv.make(game_fn, num_games, backend=backend, autoreset_mode="disabled", **options)
    try:
        return PettingZooVectorEnv(games, mode, reset_when, seed)
    except BaseException:
        games.close()
        raise


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
    if isinstance(env, (pz.ParallelEnv, pz.AECEnv)):  # each call unpickles a fresh copy
        env = partial(cloudpickle.loads, cloudpickle.dumps(env))
    envs = make(env, num_games, backend=backend, reset_when=reset_when,
                autoreset_mode="same_step", seed=seed, **options)
    try:
        return PettingZooVecEnv(envs)
    except BaseException:
        envs.close()
        raise
