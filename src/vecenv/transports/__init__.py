"""Transport layer: how commands reach env groups (serial, threads, processes, Ray)."""

from vecenv.transports.process import ProcessTransport
from vecenv.transports.ray_actors import RayTransport
from vecenv.transports.serial import SerialTransport
from vecenv.transports.thread import ThreadTransport

__all__ = ["ProcessTransport", "RayTransport", "SerialTransport", "ThreadTransport"]
