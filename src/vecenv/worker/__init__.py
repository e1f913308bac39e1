"""Worker layer: the env group that every transport runs, and the commands it takes."""

from vecenv.worker import commands
from vecenv.worker.group import EnvDescription, EnvGroup

__all__ = ["EnvDescription", "EnvGroup", "commands"]
