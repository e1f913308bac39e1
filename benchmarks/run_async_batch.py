"""Async batches against stragglers: the variable-cost busy env, sync vs ``batch_size`` envs.

    python benchmarks/run_async_batch.py            # writes benchmarks/results/async_batch.json
    python benchmarks/run_async_batch.py --out DIR  # somewhere else

Each step of ``vecenv/VariableBusy-v0`` costs 50-500 µs; a synchronous step waits for the
slowest env, a batch of the first ``--batch-size`` envs to finish does not. Extra options go to
``vecenv bench``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vecenv.cli import main

RESULTS = Path(__file__).resolve().parent / "results"


def run(argv: list[str]) -> int:
    """``vecenv bench`` on the variable busy env with and without async batches."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the JSON")
    args, extra = parser.parse_known_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    bench = [
        "bench", "vecenv/VariableBusy-v0", "--num-envs", "16", "--batch-size", "8",
        "--compare", "gym-sync,gym-async", "--json", str(args.out / "async_batch.json"),
    ]
    return main(bench + extra)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
