"""The many-core figures of the process-backend issue: 16 and 64 envs, and async batches.

    python benchmarks/run_scaling.py                  # writes benchmarks/results/scaling.{json,png}
    python benchmarks/run_scaling.py --out DIR        # somewhere else (the device machine's $OUT)
    python benchmarks/run_scaling.py --rounds 3       # extra options go to every `vecenv bench`

Three `vecenv bench` runs: CartPole-v1 and the busy env at 16 and 64 envs (serial, thread,
process against gymnasium's Sync/Async), then the variable-cost busy env (50-500 µs a step, its defaults) at
48 envs, synchronous and in batches of the first 16 ready, once burning CPU and once sleeping
(an env that waits on something outside it). Meant for a machine
with many cores (docs/bench.md says how to run it on the 16-core device machine); on 2 cores it
runs too, and shows the oversubscribed case.

Where PufferLib is usable (``pip install --no-deps pufferlib-core psutil``, see docs/bench.md),
its Serial and Multiprocessing vector envs join the first run, and its async pool (batches of
``num_envs // 2``) every run; EnvPool joins the first run where it is installed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vecenv.cli import main

RESULTS = Path(__file__).resolve().parent / "results"


def pufferlib_usable() -> bool:
    """Whether PufferLib's peers can run here (``pufferlib.vector`` imports)."""
    from vecenv.bench.contenders import peer_unavailable
    from vecenv.bench.puffer import import_pufferlib

    if peer_unavailable("pufferlib-mp") is not None:
        return False
    try:
        import_pufferlib()
    except ImportError:
        return False
    return True


def peers(pufferlib: bool, envpool: bool, async_only: bool = False) -> str:
    """The ``--compare`` list: gymnasium's, and PufferLib's and EnvPool's where they run."""
    names = ["gym-sync", "gym-async"]
    if envpool and not async_only:
        names.append("envpool")
    if pufferlib:
        names += ["pufferlib-async"] if async_only else ["pufferlib-serial", "pufferlib-mp", "pufferlib-async"]
    return ",".join(names)


def runs(out: Path) -> list[list[str]]:
    """The ``vecenv bench`` argument lists, writing into ``out``."""
    from vecenv.bench.contenders import peer_unavailable

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        plot: list[str] = []
    else:
        plot = ["--plot", str(out / "scaling.png")]
    puffer, envpool = pufferlib_usable(), peer_unavailable("envpool") is None
    return [
        ["bench", "CartPole-v1", "vecenv/Busy-v0", "--num-envs", "16,64",
         "--backends", "auto,serial,thread,process,process+inline", "--compare", peers(puffer, envpool),
         "--json", str(out / "scaling.json"), *plot],
        ["bench", "vecenv/VariableBusy-v0", "--num-envs", "48", "--batch-size", "16",
         "--backends", "process", "--compare", peers(puffer, envpool, async_only=True),
         "--json", str(out / "scaling_async_batch.json")],
        ["bench", "vecenv/VariableBusy-v0", "--env-kwargs", '{"wait": true}', "--num-envs", "48",
         "--batch-size", "16", "--backends", "process", "--compare", peers(puffer, envpool, async_only=True),
         "--json", str(out / "scaling_async_batch_wait.json")],
    ]


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the JSON and PNG")
    args, extra = parser.parse_known_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    status = 0
    for bench in runs(args.out):
        status = main(bench + extra) or status
    return status


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
