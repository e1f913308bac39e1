"""PettingZoo test games (imports pettingzoo: import it after ``pytest.importorskip``), and a
reference loop over plain ParallelEnvs that says what vecenv.pettingzoo must return."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv


class DyingEnv(ParallelEnv):
    """Three agents that come and go: ``a`` and ``b`` start, ``c`` joins after the first step.
    Each leaves at a random step of the episode: ``a`` terminated, with a reward of 10 on its
    last step, ``b`` and ``c`` truncated. Agent ``a`` reports an info every other step.

    ``die_at``: the worker process exits (``os._exit(3)``) on that step, as a crash would.
    """

    metadata = {"name": "dying_v0", "render_modes": []}

    def __init__(self, die_at: int | None = None) -> None:
        self.possible_agents = ["a", "b", "c"]
        self.agents: list[str] = []
        self.die_at = die_at
        self.rng = np.random.default_rng()
        self.steps = 0

    def observation_space(self, agent: str) -> spaces.Space:
        return spaces.Box(-np.inf, np.inf, (2,), np.float32)

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(3)

    def _obs(self, agent: str) -> np.ndarray:
        return np.array([self.t, self.rng.random()], dtype=np.float32)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        self.ends = {a: int(self.rng.integers(2, 6)) for a in self.possible_agents}
        self.agents = ["a", "b"]
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        self.steps += 1
        if self.die_at is not None and self.steps == self.die_at:
            os._exit(3)
        self.t += 1
        if self.t == 1:
            self.agents.append("c")
        obs = {a: self._obs(a) for a in self.agents}
        rewards = {a: float(actions.get(a, 0)) + self.t / 10 for a in self.agents}
        terms = {a: a == "a" and self.t >= self.ends[a] for a in self.agents}
        truncs = {a: a != "a" and self.t >= self.ends[a] for a in self.agents}
        if terms.get("a"):
            rewards["a"] = 10.0
        infos: dict[str, dict] = {a: {} for a in self.agents}
        if "a" in infos and self.t % 2:
            infos["a"] = {"t": self.t}
        self.agents = [a for a in self.agents if not (terms[a] or truncs[a])]
        return obs, rewards, terms, truncs, infos


class MixedSpacesEnv(DyingEnv):
    """Agent ``c`` sees more than the others: the agents' observation spaces differ."""

    def observation_space(self, agent: str) -> spaces.Space:
        return spaces.Box(-np.inf, np.inf, (3 if agent == "c" else 2,), np.float32)


class DictObsEnv(DyingEnv):
    """DyingEnv whose observations are a Dict: the step count and a random draw apart."""

    def observation_space(self, agent: str) -> spaces.Space:
        return spaces.Dict({"t": spaces.Box(0, 99, (), np.int64), "x": spaces.Box(0, 1, (1,), np.float32)})

    def _obs(self, agent: str) -> dict:
        return {"t": np.int64(self.t), "x": np.array([self.rng.random()], dtype=np.float32)}


class Reference:
    """What vecenv.pettingzoo must return, from a plain loop over ``num_games`` ParallelEnvs.

    Each call returns a record of the rows: obs, reward, terminated, truncated, active,
    game_ended and final_obs (a dict row -> observation, ``same_step`` only).
    """

    def __init__(self, env_fn: Any, num_games: int, mode: str = "next_step", reset_when: str = "all") -> None:
        self.games = [env_fn() for _ in range(num_games)]
        self.agents = self.games[0].possible_agents
        self.mode, self.reset_when = mode, reset_when
        space = self.games[0].observation_space(self.agents[0])
        self.zero = np.zeros(space.shape, space.dtype)
        self.over = [False] * num_games
        self.last = self._blank()

    def row(self, g: int, agent: str) -> int:
        return g * len(self.agents) + self.agents.index(agent)

    def reset(self, seed: int) -> dict[str, Any]:
        """Every game reset, game g with seed + g."""
        record = self._blank()
        for g, env in enumerate(self.games):
            self._reset_into(record, g, env.reset(seed=seed + g)[0])
        self.last = record
        return record

    def reset_ended(self) -> dict[str, Any]:
        """``disabled``: the games that ended reset; the others' rows as they were."""
        record = {key: value.copy() for key, value in self.last.items() if key != "final_obs"}
        for g, env in enumerate(self.games):
            if self.over[g]:
                n = len(self.agents)
                record["obs"][g * n:(g + 1) * n] = self.zero
                record["active"][g * n:(g + 1) * n] = False
                self._reset_into(record, g, env.reset()[0])
        self.last = record
        return record

    def _reset_into(self, record: dict[str, Any], g: int, obs: dict) -> None:
        for a, o in obs.items():
            record["obs"][self.row(g, a)] = o
            record["active"][self.row(g, a)] = True
        self.over[g] = False

    def step(self, actions: np.ndarray) -> dict[str, Any]:
        record = self._blank()
        for g, env in enumerate(self.games):
            if self.over[g]:
                if self.mode == "next_step":
                    self._reset_into(record, g, env.reset()[0])
                continue
            self._step_game(record, g, env, actions)
        self.last = record
        return record

    def _step_game(self, record: dict[str, Any], g: int, env: Any, actions: np.ndarray) -> None:
        obs, rew, term, trunc, _ = env.step({a: actions[self.row(g, a)] for a in env.agents})
        done = {a: bool(term.get(a, False) or trunc.get(a, False)) for a in obs}
        if self.reset_when == "any":
            ended = any(done.values())
        else:
            ended = all(done.get(a, False) for a in env.agents)
        for a, o in obs.items():
            r = self.row(g, a)
            record["reward"][r] = rew.get(a, 0.0)
            record["terminated"][r] = term.get(a, False)
            record["truncated"][r] = trunc.get(a, False) or (ended and not done[a])
            record["active"][r] = True
            if self.mode == "same_step" and (record["terminated"][r] or record["truncated"][r]):
                record["final_obs"][r] = o
            else:
                record["obs"][r] = o
        n = len(self.agents)
        record["game_ended"][g * n:(g + 1) * n] = ended
        if ended and self.mode == "same_step":
            for a, o in env.reset()[0].items():
                record["obs"][self.row(g, a)] = o
        elif ended:
            self.over[g] = True

    def _blank(self) -> dict[str, Any]:
        rows = len(self.games) * len(self.agents)
        return {"obs": np.repeat(self.zero[None], rows, axis=0), "reward": np.zeros(rows),
                "terminated": np.zeros(rows, bool), "truncated": np.zeros(rows, bool),
                "active": np.zeros(rows, bool), "game_ended": np.zeros(rows, bool), "final_obs": {}}
