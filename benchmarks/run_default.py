"""Run the default ``vecenv bench`` suite and keep its JSON and plot next to this script.

    python benchmarks/run_default.py            # writes benchmarks/results/default.{json,png}
    python benchmarks/run_default.py --out DIR  # somewhere else
    python benchmarks/run_default.py --rounds 9 # extra options go to `vecenv bench`

The README's figures come from this script (see docs/bench.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vecenv.cli import main

RESULTS = Path(__file__).resolve().parent / "results"


def run(argv: list[str]) -> int:
    """``vecenv bench`` with the default suite, writing default.json and default.png in ``--out``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the JSON and PNG")
    args, extra = parser.parse_known_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    bench = ["bench", "--json", str(args.out / "default.json")]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("matplotlib not installed: no plot (pip install 'vecenv[bench]')", file=sys.stderr)
    else:
        bench += ["--plot", str(args.out / "default.png")]
    return main(bench + extra)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
