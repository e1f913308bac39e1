"""Worker layer: the env group that every transport runs, and the commands it takes."""

from vecenv.worker import commands
from vecenv.worker.commands import InfoParts, StepReply
from vecenv.worker.group import EnvDescription, EnvGroup, InfoEntry

__all__ = ["EnvDescription", "EnvGroup", "InfoEntry", "InfoParts", "StepReply", "commands"]
