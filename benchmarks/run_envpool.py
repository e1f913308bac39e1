"""EnvPool's C++ CartPole as a peer (``pip install envpool`` first): results/envpool.json.

    python benchmarks/run_envpool.py [--out DIR] [vecenv bench options]
"""

import sys

from _common import bench

if __name__ == "__main__":
    sys.exit(bench(sys.argv[1:], {"envpool": [
        "CartPole-v1", "--num-envs", "8", "--backends", "auto,serial,process,process+inline",
        "--compare", "gym-sync,envpool", "--rounds", "3"]}))
