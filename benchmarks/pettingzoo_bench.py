"""PettingZoo games vectorized: vecenv.pettingzoo, SuperSuit's ``concat_vec_envs_v1`` and
PufferLib's PettingZoo emulation, in game steps per second (a game step: every agent of one game).

    python benchmarks/pettingzoo_bench.py --rounds 5 --seconds 2 --json benchmarks/results/pettingzoo/bench.json

Contenders: ``loop`` (a plain loop over the ParallelEnvs, for scale), ``vecenv-serial``,
``vecenv-process`` (2 workers), ``vecenv-auto``, ``supersuit`` (2 CPUs), ``pufferlib-mp`` (2
workers; skipped without pufferlib-core). Interleaved rounds; medians, spreads and each
contender's per-round ratio to SuperSuit and PufferLib. Needs pettingzoo[butterfly], mpe2, supersuit.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import vecenv.pettingzoo as vpz  # noqa: E402

#: env name -> (ParallelEnv factory, games)
GAMES: dict[str, tuple[Callable[[], Any], int]] = {}


def _games() -> dict[str, tuple[Callable[[], Any], int]]:
    from mpe2 import simple_spread_v3
    from pettingzoo.butterfly import pistonball_v6

    return {
        "pistonball": (partial(pistonball_v6.parallel_env, continuous=True), 4),
        "simple_spread": (partial(simple_spread_v3.parallel_env, max_cycles=25), 8),
    }


class Loop:
    """The ParallelEnvs stepped in a plain loop: dict actions, a game reset when its agents are gone."""

    def __init__(self, env_fn: Callable[[], Any], games: int) -> None:
        self.games = [env_fn() for _ in range(games)]
        self.agents = self.games[0].possible_agents

    def reset(self, seed: int) -> None:
        for g, env in enumerate(self.games):
            env.reset(seed=seed + g)

    def step(self, actions: np.ndarray) -> None:
        n = len(self.agents)
        for g, env in enumerate(self.games):
            row = {a: g * n + k for k, a in enumerate(self.agents)}
            env.step({a: actions[row[a]] for a in env.agents})
            if not env.agents:
                env.reset()

    def close(self) -> None:
        for env in self.games:
            env.close()


class GymLike:
    """A gymnasium-API vector env (vecenv's, SuperSuit's) under one interface."""

    def __init__(self, envs: Any) -> None:
        self.envs = envs

    def reset(self, seed: int) -> None:
        self.envs.reset(seed=seed)

    def step(self, actions: np.ndarray) -> None:
        self.envs.step(actions)

    def close(self) -> None:
        self.envs.close()


class Puffer:
    """PufferLib's Multiprocessing over PettingZooPufferEnv, with vecenv.bench's watchdog (its
    workers spin forever when one dies) and bounded close."""

    def __init__(self, env_fn: Callable[[], Any], games: int) -> None:
        from vecenv.bench.puffer import _Watchdog, import_pufferlib

        vector, emulation = import_pufferlib()
        creator = partial(emulation.PettingZooPufferEnv, env_creator=env_fn)
        self.envs = vector.make(creator, backend=vector.Multiprocessing, num_envs=games,
                                num_workers=2, batch_size=games)
        self.watch = _Watchdog(self.envs)
        self.watch.start()

    def reset(self, seed: int) -> None:
        self.envs.async_reset(seed)
        self.envs.recv()

    def step(self, actions: np.ndarray) -> None:
        self.envs.send(actions)
        self.envs.recv()
        if self.watch.failed is not None:
            raise RuntimeError(self.watch.failed)
        self.watch.beat += 1

    def close(self) -> None:
        from vecenv.bench.puffer import puffer_close

        puffer_close(self.envs, self.watch)


def contenders() -> dict[str, Callable[[Callable[[], Any], int], Any]]:
    import supersuit as ss

    found: dict[str, Callable[[Callable[[], Any], int], Any]] = {
        "loop": Loop,
        "vecenv-serial": lambda fn, g: GymLike(vpz.make(fn, g, backend="serial")),
        "vecenv-process": lambda fn, g: GymLike(vpz.make(fn, g, backend="process", num_workers=2)),
        "vecenv-auto": lambda fn, g: GymLike(vpz.make(fn, g)),
        "supersuit": lambda fn, g: GymLike(ss.concat_vec_envs_v1(
            ss.pettingzoo_env_to_vec_env_v1(fn()), g, num_cpus=2, base_class="gymnasium")),
    }
    try:
        from vecenv.bench.puffer import import_pufferlib

        import_pufferlib()
        found["pufferlib-mp"] = Puffer
    except ImportError as exc:
        print(f"pufferlib-mp skipped: {exc}")
    return found


def measure(build: Callable[[Callable[[], Any], int], Any], env_fn: Callable[[], Any], games: int,
            seconds: float, warmup: int = 5) -> dict[str, Any]:
    """One measurement: game steps per second over ``seconds`` of stepping."""
    probe = env_fn()
    agent = probe.possible_agents[0]
    space = probe.action_space(agent)
    rows = games * len(probe.possible_agents)
    probe.close()
    space.seed(0)
    actions = [np.stack([space.sample() for _ in range(rows)]) for _ in range(16)]
    envs = build(env_fn, games)
    try:
        envs.reset(0)
        for i in range(warmup):
            envs.step(actions[i % 16])
        load = os.getloadavg()[0]
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            envs.step(actions[steps % 16])
            steps += 1
        elapsed = time.perf_counter() - start
    finally:
        envs.close()
    result: dict[str, Any] = {"game_steps_per_s": steps * games / elapsed, "load": load}
    layout = getattr(getattr(getattr(envs, "envs", None), "games", None), "layout", None)
    if layout is not None:  # what backend="auto" chose
        result["layout"] = layout.name
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--envs", default="pistonball,simple_spread")
    parser.add_argument("--contenders", default=None, help="comma-separated (default: all)")
    parser.add_argument("--json", default=None, help="write every measurement here")
    args = parser.parse_args()
    games = _games()
    everyone = contenders()
    names = args.contenders.split(",") if args.contenders else list(everyone)
    results: dict[str, dict[str, list[dict[str, float]]]] = {}
    for r in range(args.rounds):
        for env_name in args.envs.split(","):
            env_fn, g = games[env_name]
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                m = measure(everyone[name], env_fn, g, args.seconds)
                results.setdefault(env_name, {}).setdefault(name, []).append(m)
                chosen = f", auto chose {m['layout']}" if "layout" in m else ""
                print(f"round {r + 1} {env_name:14s} {name:15s} {m['game_steps_per_s']:9.1f} game steps/s "
                      f"(load {m['load']:.1f}{chosen})", flush=True)
    report(results, games)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"games": {k: v[1] for k, v in games.items()},
                                               "results": results}, indent=1))


def report(results: dict[str, dict[str, list[dict[str, Any]]]], games: dict) -> None:
    """Medians and spreads, and each contender against SuperSuit and PufferLib: the median over
    rounds of the ratio within a round (the two measured minutes apart, not tens of minutes)."""
    for env_name, by in results.items():
        rounds = len(next(iter(by.values())))
        print(f"\n{env_name} ({games[env_name][1]} games), game steps/s, {rounds} rounds")
        print("| contender | median | min-max | x supersuit (per round) | x pufferlib-mp (per round) |")
        print("|---|---:|---:|---:|---:|")
        for name, ms in by.items():
            values = [m["game_steps_per_s"] for m in ms]
            cells = []
            for peer in ("supersuit", "pufferlib-mp"):
                if peer not in by:
                    cells.append("-")
                    continue
                ratios = [v / p["game_steps_per_s"] for v, p in zip(values, by[peer], strict=True)]
                cells.append(f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")
            print(f"| {name} | {statistics.median(values):.0f} | {min(values):.0f}-{max(values):.0f} | "
                  f"{cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
