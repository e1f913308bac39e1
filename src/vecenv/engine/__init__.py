"""Engine layer: the one gymnasium-API vector env core every backend shares, and the transport
contract it drives."""

from vecenv.engine.checks import SpaceMismatchError
from vecenv.engine.core import VectorEnv
from vecenv.engine.modes import parse_autoreset_mode
from vecenv.engine.partition import split_envs
from vecenv.engine.state import CallState
from vecenv.engine.transport import Transport

__all__ = [
    "CallState",
    "SpaceMismatchError",
    "Transport",
    "VectorEnv",
    "parse_autoreset_mode",
    "split_envs",
]
