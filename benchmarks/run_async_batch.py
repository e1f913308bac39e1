"""Async batches against stragglers: the variable-cost busy env, sync vs ``batch_size`` envs.

    python benchmarks/run_async_batch.py        # writes benchmarks/results/async_batch.{json,png}

Each step of ``vecenv/VariableBusy-v0`` costs 50-500 µs; a synchronous step waits for the
slowest env, a batch of the first ``--batch-size`` envs to finish does not.
"""

from __future__ import annotations

import sys
from pathlib import Path

from vecenv.cli import main

RESULTS = Path(__file__).resolve().parent / "results"


def run(extra: list[str]) -> int:
    """``vecenv bench`` on the variable busy env with and without async batches."""
    RESULTS.mkdir(exist_ok=True)
    argv = [
        "bench", "vecenv/VariableBusy-v0", "--num-envs", "16", "--batch-size", "8",
        "--compare", "gym-sync,gym-async", "--json", str(RESULTS / "async_batch.json"),
    ]
    return main(argv + extra)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
