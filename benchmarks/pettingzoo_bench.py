"""PettingZoo games vectorized: vecenv.pettingzoo, SuperSuit's ``concat_vec_envs_v1`` (2 CPUs) and
PufferLib's PettingZoo emulation (2 workers, where pufferlib-core is installed), beside a plain
loop, in game steps/s (every agent of one game); interleaved rounds, each contender's per-round
ratio to SuperSuit and PufferLib. Needs pettingzoo[butterfly], mpe2, supersuit.

    python benchmarks/pettingzoo_bench.py --rounds 5 --seconds 2 --json benchmarks/results/pettingzoo/bench.json
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from _common import interleave, parser, spread  # noqa: E402

import vecenv.pettingzoo as vpz  # noqa: E402
from vecenv.bench.puffer import _Watchdog, import_pufferlib, puffer_close  # noqa: E402


def games() -> dict[str, tuple[Callable[[], Any], int]]:
    """Env name -> (ParallelEnv factory, games)."""
    from mpe2 import simple_spread_v3
    from pettingzoo.butterfly import pistonball_v6

    return {"pistonball": (partial(pistonball_v6.parallel_env, continuous=True), 4),
            "simple_spread": (partial(simple_spread_v3.parallel_env, max_cycles=25), 8)}


class Loop:
    """The ParallelEnvs stepped in a plain loop: dict actions, a game reset when its agents are gone."""

    def __init__(self, env_fn: Callable[[], Any], games: int) -> None:
        self.envs = [env_fn() for _ in range(games)]
        self.agents = self.envs[0].possible_agents

    def reset(self, seed: int) -> None:
        for g, env in enumerate(self.envs):
            env.reset(seed=seed + g)

    def step(self, actions: np.ndarray) -> None:
        for g, env in enumerate(self.envs):
            row = {a: g * len(self.agents) + k for k, a in enumerate(self.agents)}
            env.step({a: actions[row[a]] for a in env.agents})
            if not env.agents:
                env.reset()

    def close(self) -> None:
        for env in self.envs:
            env.close()


class Puffer:
    """PufferLib's Multiprocessing over PettingZooPufferEnv, with vecenv.bench's watchdog (its
    workers spin forever when one dies) and bounded close."""

    def __init__(self, env_fn: Callable[[], Any], games: int) -> None:
        vector, emulation = import_pufferlib()
        creator = partial(emulation.PettingZooPufferEnv, env_creator=env_fn)
        self.envs = vector.make(creator, backend=vector.Multiprocessing, num_envs=games, num_workers=2,
                                batch_size=games)
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
        puffer_close(self.envs, self.watch)


def contenders() -> dict[str, Callable[[Callable[[], Any], int], Any]]:
    import supersuit as ss

    found: dict[str, Callable[[Callable[[], Any], int], Any]] = {
        "loop": Loop,
        "vecenv-serial": lambda fn, g: vpz.make(fn, g, backend="serial"),
        "vecenv-process": lambda fn, g: vpz.make(fn, g, backend="process", num_workers=2),
        "vecenv-auto": lambda fn, g: vpz.make(fn, g),
        "supersuit": lambda fn, g: ss.concat_vec_envs_v1(ss.pettingzoo_env_to_vec_env_v1(fn()), g, num_cpus=2,
                                                         base_class="gymnasium"),
    }
    try:
        import_pufferlib()
        found["pufferlib-mp"] = Puffer
    except ImportError as exc:
        print(f"pufferlib-mp skipped: {exc}")
    return found


def measure(build: Callable[[Callable[[], Any], int], Any], env_fn: Callable[[], Any], games: int,
            seconds: float, warmup: int = 5) -> dict[str, Any]:
    """Game steps per second of one contender, built (untimed), reset, warmed up, then stepped
    with pre-drawn random actions for ``seconds``."""
    probe = env_fn()
    space, rows = probe.action_space(probe.possible_agents[0]), games * len(probe.possible_agents)
    probe.close()
    space.seed(0)
    actions = [np.stack([space.sample() for _ in range(rows)]) for _ in range(16)]
    envs = build(env_fn, games)
    try:
        envs.reset(seed=0)
        for i in range(warmup):
            envs.step(actions[i % 16])
        load, steps, start = os.getloadavg()[0], 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            envs.step(actions[steps % 16])
            steps += 1
        elapsed = time.perf_counter() - start
    finally:
        envs.close()
    layout = getattr(getattr(envs, "games", None), "layout", None)
    return {"game_steps_per_s": steps * games / elapsed, "load": load,
            **({"layout": layout.name} if layout is not None else {})}  # what backend="auto" chose


def main() -> None:
    p = parser(__doc__, rounds=5, seconds=2.0, json_name="")
    p.add_argument("--envs", default="pistonball,simple_spread")
    p.add_argument("--contenders", default=None, help="comma-separated (default: all)")
    args = p.parse_args()
    found, everyone = games(), contenders()
    names = args.contenders.split(",") if args.contenders else list(everyone)
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for env_name in args.envs.split(","):
        env_fn, g = found[env_name]

        def log(r: int, name: str, m: dict[str, Any], env_name: str = env_name) -> None:
            chosen = f", auto chose {m['layout']}" if "layout" in m else ""
            print(f"round {r + 1} {env_name:14s} {name:15s} {m['game_steps_per_s']:9.1f} game steps/s "
                  f"(load {m['load']:.1f}{chosen})", flush=True)

        results[env_name] = by = interleave(names, args.rounds, lambda name, fn=env_fn, g=g: measure(
            everyone[name], fn, g, args.seconds), log)
        # against SuperSuit and PufferLib: the median over rounds of the ratio within a round (the
        # two measured minutes apart, not tens of minutes)
        print(f"\n{env_name} ({g} games), game steps/s, {args.rounds} rounds\n"
              "| contender | median [min-max] | x supersuit (per round) | x pufferlib-mp (per round) |\n|---|---:|---:|---:|")
        for name, ms in by.items():
            values = [m["game_steps_per_s"] for m in ms]
            cells = [spread([v / q["game_steps_per_s"] for v, q in zip(values, by[peer], strict=True)], ".2f")
                     if peer in by else "-" for peer in ("supersuit", "pufferlib-mp")]
            print(f"| {name} | {spread(values)} | {cells[0]} | {cells[1]} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"games": {k: v[1] for k, v in found.items()}, "results": results}, indent=1))


if __name__ == "__main__":
    main()
