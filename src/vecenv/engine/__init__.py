"""Engine layer: the one gymnasium-API vector env core every backend shares."""

from vecenv.engine.core import SpaceMismatchError, VectorEnv
from vecenv.engine.infos import add_info, batch_infos
from vecenv.engine.modes import parse_autoreset_mode

__all__ = ["SpaceMismatchError", "VectorEnv", "add_info", "batch_infos", "parse_autoreset_mode"]
