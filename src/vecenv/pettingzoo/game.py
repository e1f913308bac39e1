"""One PettingZoo game as a gymnasium env (the "game env") whose arrays hold a row per agent of
``possible_agents``; it resets its own game (rules: docs/pettingzoo.md), the engine's autoreset off.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space, concatenate

from vecenv.policy import recycle_report, recycled_seed

#: how to install what this package needs
INSTALL = "pip install 'vecenv[pettingzoo]'"


def import_pettingzoo() -> Any:
    """The ``pettingzoo`` module, or an ImportError naming the extra that installs it."""
    try:
        return importlib.import_module("pettingzoo")
    except ImportError as exc:
        raise ImportError(f"vecenv.pettingzoo needs PettingZoo, which cannot be imported ({exc}): "
                          f"{INSTALL}") from exc


@dataclass
class AgentReport:
    """What a game reports beyond its arrays, by agent index; sent only when not empty."""

    #: the agents' info dicts that are not empty
    infos: dict[int, dict] = field(default_factory=dict)
    #: SAME_STEP: the last observation of each agent whose episode ended in this step
    final_obs: dict[int, Any] = field(default_factory=dict)
    #: SAME_STEP: the last info of each of those agents
    final_info: dict[int, dict] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.infos or self.final_obs)


class GameEnv(gym.Env):
    """A PettingZoo game as a gymnasium env whose arrays hold one row per possible agent.

    Args:
        env_fn: makes the ParallelEnv (or AECEnv, converted) of this game.
        reset_when: ``"all"`` (the game ends when every agent is done) or ``"any"``.
        autoreset_mode: ``"next_step"``, ``"same_step"`` or ``"disabled"`` (see docs/pettingzoo.md).
        max_episodes: rebuild the game's env from ``env_fn`` when it has played this many games
            (at the reset that would start the next; its first reset seeded with
            :func:`vecenv.policy.recycled_seed`, reported as ``"recycled"`` in the agents' infos).
    """

    def __init__(self, env_fn: Callable[[], Any], reset_when: str = "all",
                 autoreset_mode: str = "next_step", max_episodes: int | None = None) -> None:
        self._env_fn, self.max_episodes = env_fn, max_episodes
        self._games = self._rebuilds = 0
        self._seed: int | None = None  # the last seed the game was reset with
        self.par = par = self._build()
        self.possible_agents = agents = list(par.possible_agents)
        self._index = {a: k for k, a in enumerate(agents)}
        self.num_agents = n = len(agents)
        # every agent needs the same spaces: a ValueError naming those that differ otherwise
        if not agents:
            raise ValueError("the env's possible_agents is empty: a game needs at least one agent")
        found = []
        for kind, space_of, pad in (("observation", par.observation_space, "pad_observations_v0"),
                                    ("action", par.action_space, "pad_action_space_v0")):
            first = space_of(agents[0])
            differ = [(a, s) for a in agents[1:] if (s := space_of(a)) != first]
            if differ:
                others = "".join(f", {a!r} has {s}" for a, s in differ[:3])
                more = f" (and {len(differ) - 3} more)" if len(differ) > 3 else ""
                raise ValueError(
                    f"the agents' {kind} spaces differ: {agents[0]!r} has {first}{others}{more}. "
                    f"vecenv.pettingzoo steps every agent as a row of one batch, so all agents "
                    f"need one {kind} space: pad them to a common one first, e.g. with SuperSuit's "
                    f"{pad} (supersuit.{pad}(env))")
            found.append(first)
        self.agent_observation_space, self.agent_action_space = found
        self.reset_when, self.mode = reset_when, autoreset_mode
        flags = spaces.Box(0, 1, (n,), np.bool_)  # type: ignore[arg-type]  # gymnasium takes bool
        self.observation_space = spaces.Dict({
            "obs": batch_space(self.agent_observation_space, n),
            "reward": spaces.Box(-np.inf, np.inf, (n,), np.float64),
            "terminated": flags, "truncated": flags, "active": flags,
            "ended": spaces.Box(0, 1, (), np.bool_),  # type: ignore[arg-type]
        })
        self.action_space = batch_space(self.agent_action_space, n)
        self.metadata = dict(getattr(par, "metadata", None) or {})
        self.render_mode = getattr(par, "render_mode", None)
        self._zero = _zeros(self.agent_observation_space)
        self._out = _zeros(self.observation_space)
        self._over = False

    def _build(self) -> Any:
        """A new ParallelEnv from ``env_fn`` (an AECEnv converted)."""
        pz, par = import_pettingzoo(), self._env_fn()
        if isinstance(par, pz.AECEnv):
            from pettingzoo.utils.conversions import aec_to_parallel

            return aec_to_parallel(par)
        if not isinstance(par, pz.ParallelEnv):
            raise TypeError(f"env_fn returned an object of type {type(par).__qualname__}, "
                            "expected a PettingZoo ParallelEnv or AECEnv")
        return par

    # gymnasium's attribute look-ups (vecenv's get_attr/set_attr) reach the game's own env first
    def get_wrapper_attr(self, name: str) -> Any:
        return getattr(self.par, name) if hasattr(self.par, name) else getattr(self, name)

    def set_wrapper_attr(self, name: str, value: Any, *, force: bool = True) -> bool:
        setattr(self if hasattr(self, name) and not hasattr(self.par, name) else self.par, name, value)
        return True

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        """Reset the game (``seed`` and ``options`` go to the PettingZoo env's ``reset``)."""
        report = AgentReport()
        self._reset_game(seed, options, report)
        for key in ("reward", "terminated", "truncated", "ended"):
            self._out[key][...] = 0
        return self._out, {"agents": report} if report else {}

    def step(self, actions: Any) -> tuple[dict, float, bool, bool, dict]:
        """Step the game with one action per row (the rows of absent agents are ignored)."""
        if self._over:  # the game ended on the last step
            if self.mode == "next_step":
                obs, info = self.reset()
                return obs, 0.0, False, False, info
            self._write_obs({})  # DISABLED: zero rows, all inactive, until the caller resets
            for key in ("reward", "terminated", "truncated", "active", "ended"):
                self._out[key][...] = 0
            return self._out, 0.0, False, False, {}
        index, out = self._index, self._out
        obs, rewards, terms, truncs, infos = self.par.step(
            {a: actions[index[a]] for a in self.par.agents})
        reward, term, trunc = out["reward"], out["terminated"], out["truncated"]
        for row, values in ((reward, rewards), (term, terms), (trunc, truncs)):
            row[:] = 0
            for a, v in values.items():
                row[index[a]] = v
        active = self._set_active(obs)
        done = term | trunc
        going = [a for a in self.par.agents if not done[index[a]]]
        over = bool(done.any()) if self.reset_when == "any" else not going
        if over:
            trunc |= active & ~done  # still in the game when it ended: cut short
        report = AgentReport()
        self._add_infos(report.infos, infos)
        if self.mode == "same_step":
            self._same_step(obs, report, (term | trunc) & active, over)
        else:
            self._write_obs(obs)
            self._over = over
        out["ended"][()] = over
        return out, 0.0, False, False, {"agents": report} if report else {}

    def _same_step(self, obs: dict, report: AgentReport, ended: np.ndarray, over: bool) -> None:
        """SAME_STEP: each agent whose episode ended hands its observation and info over to
        ``final_obs``/``final_info``; its row is zeros, or the game's reset when it is over."""
        agents = self.possible_agents
        for k in np.flatnonzero(ended).tolist():
            report.final_obs[k] = copy.deepcopy(obs[agents[k]])
            report.final_info[k] = report.infos.pop(k, {})
        if over:
            took_part = self._out["active"].copy()
            self._reset_game(None, None, report)
            self._out["active"][:] = took_part  # this step's rewards and flags are theirs
        else:
            self._write_obs({a: o for a, o in obs.items() if not ended[self._index[a]]})

    def _reset_game(self, seed: int | None, options: dict | None, report: AgentReport) -> None:
        recycled = self.max_episodes is not None and self._games >= self.max_episodes
        if recycled:  # a new env for the next game, seeded from the game's seed and its rebuilds
            self.par.close()
            self.par, self._games = self._build(), 0
            self._rebuilds += 1
            if seed is None:
                seed = recycled_seed(self._seed, 0, self._rebuilds)
        elif seed is not None:
            self._seed = seed
        self._games += 1
        obs, infos = self.par.reset(seed=seed, options=options)
        self._write_obs(obs)
        self._set_active(obs)
        self._add_infos(report.infos, infos)
        if recycled:
            for a in obs:
                report.infos[self._index[a]] = {**report.infos.get(self._index[a], {}),
                                                **recycle_report(f"max_episodes_per_env={self.max_episodes}")}
        self._over = False

    def _write_obs(self, obs: dict) -> None:
        """Each agent's observation to its row; zeros in the rows of the others."""
        items = [self._zero] * self.num_agents
        for a, o in obs.items():
            items[self._index[a]] = o
        concatenate(self.agent_observation_space, items, self._out["obs"])

    def _set_active(self, obs: dict) -> np.ndarray:
        active = self._out["active"]
        active[:] = False
        active[[self._index[a] for a in obs]] = True
        return active

    def _add_infos(self, target: dict[int, dict], infos: dict) -> None:
        for a, info in infos.items():
            if info and a in self._index:
                target[self._index[a]] = info

    def render(self) -> Any:
        return self.par.render()

    def close(self) -> None:
        self.par.close()


def _zeros(space: spaces.Space) -> Any:
    """Zeros of ``space``'s shape and dtype (a dict or tuple of them for Dict and Tuple)."""
    if isinstance(space, spaces.Dict):
        return {key: _zeros(sub) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_zeros(sub) for sub in space.spaces)
    return np.zeros(space.shape, dtype=space.dtype)
