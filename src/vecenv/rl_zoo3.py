"""``python -m vecenv.rl_zoo3``: RL Zoo3's ``train``, with exactly its arguments, stepping vecenv's
VecEnv classes (``--vec-env dummy`` / ``subproc``; docs/clients.md).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``rl_zoo3.train`` with ``argv`` (default: the command line) on vecenv's VecEnvs."""
    try:
        from rl_zoo3 import exp_manager, train
    except ImportError as exc:
        raise ImportError("vecenv.rl_zoo3 runs RL Zoo3's train: pip install rl_zoo3") from exc
    from vecenv.sb3 import DummyVecEnv, SubprocVecEnv

    args = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--vec-env", default="dummy", choices=["dummy", "subproc"])
    kind = parser.parse_known_args(args)[0].vec_env
    exp_manager.ExperimentManager.default_vec_env_cls = {"dummy": DummyVecEnv, "subproc": SubprocVecEnv}[kind]
    saved = sys.argv
    sys.argv = [f"{sys.executable} -m vecenv.rl_zoo3", *args]  # rl_zoo3.train reads sys.argv
    try:
        train.train()
    finally:
        sys.argv = saved


if __name__ == "__main__":
    main()
