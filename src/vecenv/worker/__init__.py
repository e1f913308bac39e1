"""Worker layer: the env group that every transport runs."""

from vecenv.worker.group import EnvDescription, EnvGroup, InfoEntry

__all__ = ["EnvDescription", "EnvGroup", "InfoEntry"]
