"""Async batches against stragglers: ``vecenv/VariableBusy-v0`` (50-500 µs a step), 16 envs,
synchronous and in batches of the first 8 ready: results/async_batch.json.

    python benchmarks/run_async_batch.py [--out DIR] [vecenv bench options]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # beside this script (not automatic everywhere)
from _common import bench  # noqa: E402

if __name__ == "__main__":
    sys.exit(bench(sys.argv[1:], {"async_batch": [
        "vecenv/VariableBusy-v0", "--num-envs", "16", "--batch-size", "8", "--compare", "gym-sync,gym-async"]}))
