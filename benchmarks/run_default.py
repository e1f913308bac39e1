"""Run the default ``vecenv bench`` suite and keep its JSON and plot next to this script.

    python benchmarks/run_default.py            # writes benchmarks/results/default.{json,png}
    python benchmarks/run_default.py --rounds 9 # extra options go to `vecenv bench`

The README's figures come from this script (see docs/bench.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

from vecenv.cli import main

RESULTS = Path(__file__).resolve().parent / "results"


def run(extra: list[str]) -> int:
    """``vecenv bench`` with the default suite, writing results/default.json and default.png."""
    RESULTS.mkdir(exist_ok=True)
    argv = ["bench", "--json", str(RESULTS / "default.json")]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("matplotlib not installed: no plot (pip install 'vecenv[bench]')", file=sys.stderr)
    else:
        argv += ["--plot", str(RESULTS / "default.png")]
    return main(argv + extra)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
