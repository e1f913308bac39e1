"""vecenv on real simulators, side by side with gymnasium's and SB3's vector envs and EnvPool's
C++ builds of the same envs: MuJoCo ``HalfCheetah-v5`` and ALE Pong (``ALE/Pong-v5`` with
gymnasium's AtariPreprocessing(frame_skip=4) and FrameStackObservation(4)), N=8, random actions,
on an idle machine.

    python benchmarks/run_real.py                    # ~4 min on 2 cores; results/real.json
    python benchmarks/run_real.py --envs HalfCheetah-v5 --rounds 5
    python benchmarks/run_real.py --quick            # a smoke test

These envs return infos every step (MuJoCo's x_position, x_velocity, ...; ALE's lives and frame
numbers), which vecenv's process backend carries in shared memory. Any option of
``run_shared.py`` works here (``--scenario busy`` measures beside a busy process); the defaults
differ: the idle scenario, these two envs, and the contenders below. Tables show medians of
interleaved rounds and the ratio to gymnasium's SyncVectorEnv.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run_shared  # noqa: E402

CONTENDERS = ("gym-sync", "gym-async", "vecenv-default", "vecenv-process", "sb3-dummy",
              "sb3-subproc", "vecenv-sb3-subproc", "envpool")
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
