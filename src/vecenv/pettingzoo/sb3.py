"""The agents of PettingZoo games behind Stable-Baselines3's VecEnv API (one row per agent)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from vecenv.sb3.base import VecEnv, VecEnvIndices, VecEnvObs, VecEnvStepReturn

if TYPE_CHECKING:  # a type only: vecenv.pettingzoo imports this module to build one
    from vecenv.pettingzoo import PettingZooVectorEnv


class PettingZooVecEnv(VecEnv):
    """SB3's :class:`VecEnv` over a :class:`PettingZooVectorEnv` in ``same_step`` mode: row
    ``g * num_agents + k`` is agent ``possible_agents[k]`` of game ``g``.

    A row's ``done`` is its agent's terminated or truncated; its info holds
    ``terminal_observation`` then (its last observation), ``TimeLimit.truncated``, and
    ``active`` (False for the zero rows of agents not in the game). ``seed(s)`` seeds game ``g``
    with ``s + g`` at the next reset. Per-env calls (``get_attr``, ``env_method``, ...) reach
    the PettingZoo env of each row's game. Build it with :func:`vecenv.pettingzoo.make_sb3`.
    """

    def __init__(self, venv: PettingZooVectorEnv) -> None:
        if venv.metadata.get("autoreset_mode") is not gym.vector.AutoresetMode.SAME_STEP:
            raise ValueError("PettingZooVecEnv needs a PettingZooVectorEnv made with "
                             'autoreset_mode="same_step" (SB3 resets in the step that ends)')
        self.venv = venv
        self._actions: Any = None
        self.closed = False
        self.possible_agents = venv.possible_agents
        self.num_games, self.num_agents = venv.num_games, venv.num_agents
        super().__init__(venv.num_envs, venv.single_observation_space, venv.single_action_space)
        self.metadata = {k: v for k, v in venv.metadata.items() if k != "autoreset_mode"}

    # ------------------------------------------------------------------ reset / step
    def reset(self) -> VecEnvObs:
        """Reset every game with the pending seed (game ``g``: ``seeds[0] + g``) and options."""
        seed = self._seeds[0]
        options = self._options[0]
        if any(o != options for o in self._options):
            raise ValueError("set_options: every game of a PettingZooVecEnv is reset with the same "
                             "options; give one dict")
        obs, infos = self.venv.reset(seed=seed, options=dict(options) or None)
        self.reset_infos = _rows_of(infos, self.num_envs, _SKIP)
        self._reset_seeds()
        self._reset_options()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        actions, self._actions = self._actions, None
        obs, rewards, terms, truncs, infos = self.venv.step(actions)
        n = self.num_envs
        time_limit, active = (truncs & ~terms).tolist(), infos["active"].tolist()
        rows = [{"TimeLimit.truncated": t, "active": a} for t, a in zip(time_limit, active, strict=True)]
        if len(infos) > len(_PLAIN_KEYS):  # the agents' own infos, or episode ends
            # A row whose episode ended gets its final info and ``terminal_observation``; its
            # agent's next info (its game was reset) goes to ``reset_infos``.
            ended = set(np.flatnonzero(infos.get("_final_obs", [])).tolist())
            final_info = _rows_of(infos.get("final_info", {}), n)
            for i, info in enumerate(_rows_of(infos, n, _SKIP)):
                if i in ended:
                    self.reset_infos[i] = info
                    rows[i].update(final_info[i])
                    rows[i]["terminal_observation"] = infos["final_obs"][i]
                elif info:
                    rows[i].update(info)
        return obs, rewards.astype(np.float32), terms | truncs, rows

    def close(self) -> None:
        self.closed = True
        self.venv.close()  # idempotent

    # ------------------------------------------------------------------ per-env calls
    def _per_row(self, indices: VecEnvIndices, run: Callable[[list[int]], list[Any]]) -> list[Any]:
        """``run(games)``'s results, once per game of the rows ``indices``, one per row."""
        games = [i // self.num_agents for i in self._get_indices(indices)]
        once = sorted(set(games))
        by_game = dict(zip(once, run(once), strict=True))
        return [by_game[g] for g in games]

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return self._per_row(indices, lambda games: self.venv.games.get_attr_at(games, attr_name))

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        self._per_row(indices, lambda games: self.venv.games.set_attr_at(games, attr_name, [value] * len(games))
                      or [None] * len(games))

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
                   **method_kwargs: Any) -> list[Any]:
        """Call ``method_name`` on the PettingZoo env of each row's game: once per game, its
        result given to each of its rows."""
        return self._per_row(indices, lambda games: self.venv.games.apply(
            _call, method_name, method_args, method_kwargs, indices=games))

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        """False for every row: a game has no gymnasium wrappers."""
        return [False] * len(self._get_indices(indices))

    def __repr__(self) -> str:
        return f"PettingZooVecEnv(num_envs={self.num_envs}, venv={self.venv!r})"


#: the info keys every step has (see PettingZooVectorEnv._rows)
_PLAIN_KEYS = frozenset({"active", "_active", "agent", "_agent", "game", "_game", "game_ended", "_game_ended"})
_SKIP = _PLAIN_KEYS | {"final_obs", "final_info"}  # the keys that are not the agents' own infos


def _call(game: Any, name: str, args: tuple, kwargs: dict) -> Any:
    return game.get_wrapper_attr(name)(*args, **kwargs)


def _rows_of(infos: dict[str, Any], num_envs: int, skip: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """Gymnasium's batched infos (``_key`` masks) as one dict per row, without the keys ``skip``."""
    rows: list[dict[str, Any]] = [{} for _ in range(num_envs)]
    for key, value in infos.items():
        if key.startswith("_") or key in skip:
            continue
        mask = infos.get(f"_{key}")
        values = _rows_of(value, num_envs) if isinstance(value, dict) else value
        for i in np.flatnonzero(mask).tolist() if mask is not None else range(num_envs):
            rows[i][key] = values[i]
    return rows
