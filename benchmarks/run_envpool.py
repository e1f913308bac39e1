"""EnvPool's C++ CartPole as a peer (``pip install envpool`` first): results/envpool.json.

    python benchmarks/run_envpool.py [--out DIR] [vecenv bench options]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # beside this script (not automatic everywhere)
from _common import bench  # noqa: E402

if __name__ == "__main__":
    sys.exit(bench(sys.argv[1:], {"envpool": [
        "CartPole-v1", "--num-envs", "8", "--backends", "auto,serial,process,process+inline",
        "--compare", "gym-sync,envpool", "--rounds", "3"]}))
