"""The default ``vecenv bench`` suite, the README's figures: results/default.json and default.png.

    python benchmarks/run_default.py [--out DIR] [vecenv bench options, e.g. --rounds 9]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # beside this script (not automatic everywhere)
from _common import bench  # noqa: E402

if __name__ == "__main__":
    sys.exit(bench(sys.argv[1:], {"default": []}, plot="default"))
