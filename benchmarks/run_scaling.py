"""The many-core figures: 16 and 64 envs, and async batches (docs/bench.md#many-cores-16-and-64-envs);
PufferLib's peers join where ``pufferlib.vector`` imports, EnvPool the first run where it is installed.

    python benchmarks/run_scaling.py [--out DIR] [vecenv bench options, e.g. --rounds 3]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import bench  # noqa: E402


def runs() -> dict[str, list[str]]:
    from vecenv.bench.contenders import peer_unavailable
    from vecenv.bench.puffer import import_pufferlib

    try:
        puffer = peer_unavailable("pufferlib-mp") is None and bool(import_pufferlib())
    except ImportError:
        puffer = False
    first = ["gym-sync", "gym-async", *(["envpool"] if peer_unavailable("envpool") is None else []),
             *(["pufferlib-serial", "pufferlib-mp", "pufferlib-async"] if puffer else [])]
    batched = ",".join(["gym-sync", "gym-async", *(["pufferlib-async"] if puffer else [])])
    variable = ["vecenv/VariableBusy-v0", "--num-envs", "48", "--batch-size", "16", "--backends", "process",
                "--compare", batched]
    return {"scaling": ["CartPole-v1", "vecenv/Busy-v0", "--num-envs", "16,64", "--backends",
                        "auto,serial,thread,process,process+inline", "--compare", ",".join(first)],
            "scaling_async_batch": variable,
            "scaling_async_batch_wait": [*variable, "--env-kwargs", '{"wait": true}']}


def run(argv: list[str]) -> int:
    return bench(argv, runs(), plot="scaling")


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
