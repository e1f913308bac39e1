"""vecenv on real simulators beside gymnasium's, SB3's, EnvPool's and PufferLib's vector envs:
``HalfCheetah-v5`` and ALE Pong (AtariPreprocessing, 4 stacked frames), N=8, random actions.

    python benchmarks/run_real.py                    # ~5 min on 2 cores; results/real.json
    python benchmarks/run_real.py --scenario idle,busy --contenders gym-sync,vecenv-default,pufferlib-mp
    python benchmarks/run_real.py --quick            # a smoke test

``run_shared.py`` with other defaults: the idle scenario, these two envs and the contenders
below; any of its options works. PufferLib's contenders (``pufferlib-mp-w1``: one worker,
``pufferlib-mp-bK``: batches of K) are described in docs/bench.md#pufferlib.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run_shared  # noqa: E402

CONTENDERS = ("gym-sync", "gym-async", "vecenv-default", "vecenv-thread", "vecenv-process", "sb3-dummy",
              "sb3-subproc", "vecenv-sb3-subproc", "envpool", "pufferlib-serial", "pufferlib-mp",
              "pufferlib-async")
DEFAULTS = {"--scenario": "idle", "--envs": "HalfCheetah-v5,Pong", "--contenders": ",".join(CONTENDERS),
            "--json": str(run_shared.RESULTS / "real.json")}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    for option, value in DEFAULTS.items():
        if not any(a == option or a.startswith(option + "=") for a in argv):
            argv += [option, value]
    return run_shared.main(argv)


if __name__ == "__main__":
    sys.exit(main())
