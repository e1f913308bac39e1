"""The agents of ``num_games`` PettingZoo games as the rows of one gymnasium vector env.

Each game runs in vecenv's workers as a :class:`~vecenv.pettingzoo.game.GameEnv` (its arrays in
shared memory on the process backend); this side reshapes the games' arrays, ``(games, agents,
...)``, into rows, ``(games * agents, ...)``: row ``game * num_agents + k`` is agent
``possible_agents[k]`` of that game. Views, not copies, and no loop over games or rows on a step,
except over the few games that report infos.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from vecenv.engine import VectorEnv, parse_autoreset_mode
from vecenv.engine.checks import check_count
from vecenv.infos import add_info
from vecenv.pettingzoo.game import RESET_WHEN, AgentReport, GameEnv

_MODE_NAMES = {AutoresetMode.NEXT_STEP: "next_step", AutoresetMode.SAME_STEP: "same_step",
               AutoresetMode.DISABLED: "disabled"}


def _frozen(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


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
        agents, self.single_observation_space, self.single_action_space = games.apply(
            _agent_facts, indices=[0])[0]
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
        ones = np.ones(self.num_envs, dtype=np.bool_)
        self._constant = {
            "agent": _frozen(np.array(self.possible_agents * g)), "_agent": _frozen(ones.copy()),
            "game": _frozen(np.repeat(np.arange(g), n)), "_game": _frozen(ones.copy()),
            "_active": _frozen(ones.copy()), "_game_ended": _frozen(ones),
        }
        self._pending_seed = seed  # the first reset's, when it is given none

    # ------------------------------------------------------------------ reset / step
    def reset(self, *, seed: int | Sequence[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset the games: game ``g`` gets ``seed + g`` (or ``seed[g]`` from a list, one per
        game). ``options={"reset_mask": rows}`` resets only the games that hold a marked row
        (e.g. ``infos["game_ended"]``)."""
        if seed is None and self._pending_seed is not None:
            seed = self._pending_seed
        self._pending_seed = None
        if options is not None and "reset_mask" in options:
            options = dict(options)
            options["reset_mask"] = self._game_mask(options["reset_mask"])
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
        rows = self.num_envs
        return _tree(lambda x: x.reshape(rows, *x.shape[2:]), games["obs"])

    def _info_rows(self, games: dict, infos: dict) -> dict[str, Any]:
        """The infos of the rows: the masks and names, and the reports of the games that sent one."""
        n = self.num_agents
        row_infos: dict[str, Any] = {"active": games["active"].reshape(self.num_envs),
                                     "game_ended": np.repeat(games["ended"], n), **self._constant}
        reports = infos.get("agents")
        if reports is not None:
            for g in np.flatnonzero(infos["_agents"]).tolist():
                self._add_report(row_infos, reports[g], g * n)
        return row_infos

    def _add_report(self, infos: dict[str, Any], report: AgentReport, first: int) -> None:
        rows = self.num_envs
        for k, obs in report.final_obs.items():
            add_info(infos, {"final_obs": obs, "final_info": report.final_info.get(k, {})}, first + k, rows)
        for k, info in report.infos.items():
            add_info(infos, info, first + k, rows)

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

    def _game_mask(self, mask: Any) -> np.ndarray:
        """A reset mask of rows as a mask of games: a game with any row marked."""
        array = np.asarray(mask)
        if array.dtype != np.bool_ or array.shape != (self.num_envs,):
            raise ValueError(f"reset_mask must be a bool array of shape ({self.num_envs},), one per "
                             f"row, got {array.dtype} of shape {array.shape}")
        return np.asarray(array.reshape(self.num_games, self.num_agents).any(axis=1))

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


def _agent_facts(game: GameEnv) -> tuple[list[str], gym.Space, gym.Space]:
    """A game's possible agents and their common observation and action spaces."""
    return game.possible_agents, game.agent_observation_space, game.agent_action_space


def make_games(env_fn: Callable[[], Any], num_games: int, *, backend: str,
               reset_when: str, autoreset_mode: str | AutoresetMode, seed: int | None = None,
               **options: Any) -> PettingZooVectorEnv:
    """Build the vector env of :func:`vecenv.pettingzoo.make` (its arguments are checked here)."""
    import vecenv

    if reset_when not in RESET_WHEN:
        raise ValueError(f"reset_when must be one of {RESET_WHEN}, got {reset_when!r}")
    if not callable(env_fn):
        raise TypeError(f"env_fn: expected a callable returning a PettingZoo env, got {env_fn!r:.100}")
    mode = parse_autoreset_mode(autoreset_mode)
    num_games = check_count("num_games", num_games, None)
    for key, allowed in (("batch_size", (None, num_games)), ("on_error", ("raise",))):
        if options.get(key, allowed[0]) not in allowed:
            raise ValueError(f"vecenv.pettingzoo.make: {key}={options[key]!r} is not supported for "
                             f"PettingZoo games (every game is stepped at once, a failure raises)")
    game_fn = partial(GameEnv, env_fn, reset_when, _MODE_NAMES[mode])
    games = vecenv.make(game_fn, num_games, backend=backend, autoreset_mode="disabled", **options)
    try:
        return PettingZooVectorEnv(games, mode, reset_when, seed)
    except BaseException:
        games.close()
        raise
