"""The engine's call state, as gymnasium's ``AsyncState`` with one more: INTERRUPTED."""

from __future__ import annotations

from enum import Enum

__all__ = ["CallState"]


class CallState(Enum):
    """What the vector env is doing between calls.

    ``DEFAULT``: nothing pending. ``WAITING_*``: a call was sent and its results are still to be
    collected (``*_wait`` / ``recv``). ``INTERRUPTED``: an exception (a ``KeyboardInterrupt``, an
    error in the caller's process) cut a call short mid-way; only ``reset()`` and ``close()``
    work, and ``reset()`` first settles every worker.
    """

    DEFAULT = "default"
    WAITING_RESET = "reset"
    WAITING_STEP = "step"
    WAITING_CALL = "call"
    INTERRUPTED = "interrupted"
