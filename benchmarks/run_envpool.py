"""EnvPool's C++ CartPole as a peer: the run behind docs/measurements/*-envpool.md.

    python benchmarks/run_envpool.py            # writes benchmarks/results/envpool.json
    python benchmarks/run_envpool.py --out DIR  # somewhere else

``vecenv bench CartPole-v1 --num-envs 8 --backends auto,serial,process,process+inline
--compare gym-sync,envpool --rounds 3``. EnvPool is not a vecenv dependency: ``pip install envpool`` first (without it
``vecenv bench`` says so and exits 2). Extra options go to ``vecenv bench``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vecenv.cli import main

RESULTS = Path(__file__).resolve().parent / "results"


def run(argv: list[str]) -> int:
    """``vecenv bench`` on CartPole with EnvPool among the peers."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the JSON")
    args, extra = parser.parse_known_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    bench = [
        "bench", "CartPole-v1", "--num-envs", "8", "--backends", "auto,serial,process,process+inline",
        "--compare", "gym-sync,envpool", "--rounds", "3", "--json", str(args.out / "envpool.json"),
    ]
    return main(bench + extra)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
