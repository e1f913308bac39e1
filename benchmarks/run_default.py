"""The default ``vecenv bench`` suite, the README's figures: results/default.json and default.png.

    python benchmarks/run_default.py [--out DIR] [vecenv bench options, e.g. --rounds 9]
"""

import sys

from _common import bench

if __name__ == "__main__":
    sys.exit(bench(sys.argv[1:], {"default": []}, plot="default"))
