"""vecenv: step many copies of a Gymnasium environment as one batched environment.

In one process (``backend="serial"``), across the cores of a machine (``"process"``,
``"thread"``) or across a Ray cluster (``"ray"``), behind gymnasium's vector API
(:class:`VectorEnv`) and Stable-Baselines3's VecEnv API (:mod:`vecenv.sb3`).
"""

from vecenv._version import __version__ as __version__  # re-exported; written in _version.py
from vecenv.backends import (
    AsyncVectorEnv,
    ProcessVectorEnv,
    RayVectorEnv,
    SerialVectorEnv,
    SyncVectorEnv,
    ThreadVectorEnv,
)
from vecenv.collector import Collector, Rollout
from vecenv.engine import SpaceMismatchError, VectorEnv
from vecenv.errors import (
    ClosedEnvironmentError,
    EnvError,
    MainGuardError,
    StepTimeoutError,
    VecEnvError,
    WorkerDiedError,
)
from vecenv.make import available_backends, make, register_vector_env
from vecenv.policy import FailurePolicy

__all__ = [
    "AsyncVectorEnv",
    "ClosedEnvironmentError",
    "Collector",
    "EnvError",
    "FailurePolicy",
    "ProcessVectorEnv",
    "RayVectorEnv",
    "Rollout",
    "SerialVectorEnv",
    "SpaceMismatchError",
    "StepTimeoutError",
    "SyncVectorEnv",
    "ThreadVectorEnv",
    "VecEnvError",
    "VectorEnv",
    "MainGuardError",
    "WorkerDiedError",
    "available_backends",
    "make",
    "register_vector_env",
]
