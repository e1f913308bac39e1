"""vecenv on real simulators beside gymnasium's, SB3's, EnvPool's and PufferLib's vector envs:
run_shared.py's idle scenario on ``HalfCheetah-v5`` and Pong with the contenders below (any of
its options works; ``pufferlib-mp-w1`` and ``pufferlib-mp-bK``: docs/bench.md#pufferlib).

    python benchmarks/run_real.py                    # ~5 min on 2 cores; results/real.json
    python benchmarks/run_real.py --scenario idle,busy --contenders gym-sync,vecenv-default,pufferlib-mp
    python benchmarks/run_real.py --quick            # a smoke test
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run_shared  # noqa: E402
from _common import RESULTS  # noqa: E402

CONTENDERS = ("gym-sync", "gym-async", "vecenv-default", "vecenv-thread", "vecenv-process", "sb3-dummy",
              "sb3-subproc", "vecenv-sb3-subproc", "envpool", "pufferlib-serial", "pufferlib-mp",
              "pufferlib-async")
DEFAULTS = {"--scenario": "idle", "--envs": "HalfCheetah-v5,Pong", "--contenders": ",".join(CONTENDERS),
            "--json": str(RESULTS / "real.json")}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    for option, value in DEFAULTS.items():
        if not any(a == option or a.startswith(option + "=") for a in argv):
            argv += [option, value]
    return run_shared.main(argv)


if __name__ == "__main__":
    sys.exit(main())
