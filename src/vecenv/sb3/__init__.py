"""Stable-Baselines3's vectorized-environment API on vecenv's engine.

Switch by changing one import::

    from vecenv.sb3 import SubprocVecEnv, VecNormalize, make_vec_env

Only numpy, gymnasium and cloudpickle are needed; when SB3 is imported (before or after this
package), vecenv's classes count as SB3's (``isinstance(venv, stable_baselines3...VecEnv)``),
so SB3's algorithms and wrappers take them as they are.
"""

from vecenv.sb3._backend import is_wrapped, unwrap_wrapper
from vecenv.sb3.base import (
    CloudpickleWrapper,
    VecEnv,
    VecEnvIndices,
    VecEnvObs,
    VecEnvStepReturn,
    VecEnvWrapper,
    tile_images,
)
from vecenv.sb3.monitor import Monitor, ResultsWriter, VecMonitor, make_vec_env
from vecenv.sb3.normalize import (
    RunningMeanStd,
    VecNormalize,
    is_vecenv_wrapped,
    sync_envs_normalization,
    unwrap_vec_normalize,
    unwrap_vec_wrapper,
)
from vecenv.sb3.vec_envs import DummyVecEnv, SubprocVecEnv, VectorEnvAdapter, from_vector_env
from vecenv.sb3.video import VecVideoRecorder
from vecenv.sb3.wrappers import (
    StackedObservations,
    VecCheckNan,
    VecExtractDictObs,
    VecFrameStack,
    VecTransposeImage,
)

from vecenv.sb3 import _compat  # isort: skip

_compat.install_hook()

__all__ = [
    "CloudpickleWrapper",
    "DummyVecEnv",
    "Monitor",
    "ResultsWriter",
    "RunningMeanStd",
    "StackedObservations",
    "SubprocVecEnv",
    "VecCheckNan",
    "VecEnv",
    "VecEnvIndices",
    "VecEnvObs",
    "VecEnvStepReturn",
    "VecEnvWrapper",
    "VecExtractDictObs",
    "VecFrameStack",
    "VecMonitor",
    "VecNormalize",
    "VecTransposeImage",
    "VecVideoRecorder",
    "VectorEnvAdapter",
    "from_vector_env",
    "is_vecenv_wrapped",
    "is_wrapped",
    "make_vec_env",
    "sync_envs_normalization",
    "tile_images",
    "unwrap_vec_normalize",
    "unwrap_vec_wrapper",
    "unwrap_wrapper",
]
