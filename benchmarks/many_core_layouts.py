"""Which process layout a many-core machine wants, and the machine's ceiling: the same envs
stepped by each layout, built afresh in turn every round (docs/bench.md#many-cores-16-and-64-envs).

    python benchmarks/many_core_layouts.py --num-envs 64 --env HalfCheetah-v5 --env Pong --json out.json
    python benchmarks/many_core_layouts.py --layouts gym-sync,ceiling --env vecenv/Busy-v0

With C usable cores: ``ceiling`` (C processes that never communicate, each stepping a gymnasium
SyncVectorEnv of its share), ``process`` (C workers), ``inline`` (the last of C groups in the
caller), ``workers-1`` (C - 1 workers), ``affinity`` (pinned), ``workers-1-affinity`` and
``inline-affinity`` (pinned to cores 1..), ``batch-half`` (async batches of N/2),
``workers-1-spin`` and ``inline-spin`` (``spin_us=2000``), ``auto`` (``vecenv.make``'s choice).
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
from _common import drive, free_running, parser, spread  # noqa: E402
from shared_bench.contenders import target  # noqa: E402  (Pong as CleanRL trains it, or a gymnasium id)

import vecenv  # noqa: E402
from vecenv.system import usable_cores  # noqa: E402

LAYOUTS = ("gym-sync", "ceiling", "process", "inline", "workers-1", "affinity", "workers-1-affinity",
           "inline-affinity", "batch-half", "auto")


def build(layout: str, name: str, n: int) -> Any:
    """The vector env ``layout`` names, of ``n`` envs ``name``."""
    fns, cores = [target(name).env_fn] * n, usable_cores()
    rest = list(range(1, cores))
    options: dict[str, dict[str, Any]] = {
        "process": {}, "inline": {"inline": True}, "workers-1": {"num_workers": cores - 1},
        "affinity": {"affinity": True}, "workers-1-affinity": {"num_workers": cores - 1, "affinity": rest},
        "inline-affinity": {"inline": True, "affinity": rest}, "batch-half": {"batch_size": n // 2},
        "workers-1-spin": {"num_workers": cores - 1, "spin_us": 2000}, "inline-spin": {"inline": True, "spin_us": 2000},
    }
    if layout == "gym-sync":
        return gym.vector.SyncVectorEnv(fns)
    if layout == "auto":
        return vecenv.make(fns[0], n)
    return vecenv.ProcessVectorEnv(fns, **{"num_workers": min(cores, n), **options[layout]})


def measure(layout: str, name: str, n: int, seconds: float) -> dict[str, Any]:
    """Env steps/s and the caller's CPU µs per vector step of one layout, built fresh (and, for
    ``auto``, the layout it chose); the ceiling's caller only waits."""
    if layout == "ceiling":
        shares = np.array_split(np.arange(n), min(usable_cores(), n))
        return {"steps_per_s": free_running([[target(name).env_fn] * len(s) for s in shares], seconds), "caller_cpu_us": 0.0}
    envs = build(layout, name, n)
    chosen = getattr(envs, "layout", None)
    rate, cpu = drive(envs, seconds)
    return {"steps_per_s": rate, "caller_cpu_us": cpu, **({"chose": f"{chosen.name} x{chosen.num_workers}"} if chosen else {})}


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__, rounds=5, seconds=1.0, json_name="")
    p.add_argument("--env", action="append", help="env ids (default: HalfCheetah-v5, Pong)")
    p.add_argument("--layouts", default=",".join(LAYOUTS))
    p.add_argument("--num-envs", type=int, default=64)
    args = p.parse_args(argv)
    cores, layouts = usable_cores(), args.layouts.split(",")
    runs: dict[str, Any] = {"cores": cores, "num_envs": args.num_envs, "python": sys.version,
                            "cpu": platform.machine(), "envs": {}}
    for name in args.env or ["HalfCheetah-v5", "Pong"]:
        rounds: list[dict[str, dict[str, Any]]] = runs["envs"].setdefault(name, [])
        for r in range(args.rounds):
            rounds.append({})
            for layout in layouts:
                got = rounds[-1][layout] = measure(layout, name, args.num_envs, args.seconds)
                print(f"{name} round {r + 1} {layout:<19} {got['steps_per_s']:10,.0f} steps/s  caller "
                      f"{got['caller_cpu_us']:7.0f} µs/step {got.get('chose', '')}", flush=True)
            if args.json:
                args.json.write_text(json.dumps(runs, indent=1))
        print(f"\n{name}: env steps/s, median [min-max] of {len(rounds)} rounds; "
              f"share = steps/s / ({cores} x gym-sync in the same round)")
        for layout in layouts:
            line = f"  {layout:<19} {spread([r[layout]['steps_per_s'] for r in rounds]):>26}"
            if "gym-sync" in layouts:
                line += "  share " + spread([r[layout]["steps_per_s"] / (cores * r["gym-sync"]["steps_per_s"])
                                             for r in rounds], ".2f")
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
