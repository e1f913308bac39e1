"""Transport layer: how commands reach env groups (serial, threads, processes, Ray)."""

from vecenv.transports.base import Transport, split_envs
from vecenv.transports.serial import SerialTransport

__all__ = ["SerialTransport", "Transport", "split_envs"]
