"""RL Zoo3's ``train`` stepping vecenv's VecEnv classes.

``python -m vecenv.rl_zoo3`` takes exactly the arguments of ``python -m rl_zoo3.train``; its
``--vec-env dummy`` / ``subproc`` means :class:`vecenv.sb3.DummyVecEnv` /
:class:`vecenv.sb3.SubprocVecEnv`, set through RL Zoo3's own hook for it
(``ExperimentManager.default_vec_env_cls``). Everything else (hyperparameters, SB3's
``VecNormalize`` / ``VecFrameStack``, logs) is RL Zoo3's::

    python -m vecenv.rl_zoo3 --algo ppo --env CartPole-v1 --vec-env subproc
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
