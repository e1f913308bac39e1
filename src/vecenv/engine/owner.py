"""A vector env belongs to the process that made it: in a forked child its transport lets go of
what the child inherited (:func:`_forked`), and any use is a clear error (:func:`refuse_if_foreign`).
"""

from __future__ import annotations

import os
import weakref
from typing import Any

from vecenv.errors import VecEnvError

__all__ = ["adopt", "refuse_if_foreign", "release"]

#: the vector envs of this process that are not closed yet
_OPEN: weakref.WeakSet[Any] = weakref.WeakSet()


def adopt(env: Any) -> int:
    """Record ``env`` as open in this process; the owner's pid."""
    _OPEN.add(env)
    return os.getpid()


def release(env: Any) -> None:
    """``env`` is closed: nothing to hand over at a fork."""
    _OPEN.discard(env)


def refuse_if_foreign(env: Any, owner: int) -> None:
    """Raise when this process is not ``env``'s owner (a fork of it)."""
    if owner != os.getpid():
        raise VecEnvError(
            f"{type(env).__name__} was made in process {owner}, and this process ({os.getpid()}) is a "
            "fork of it: a vector env works only in the process that made it (its workers and "
            "memory are that process's); make a new vector env in this process"
        )


def _forked() -> None:
    """In a fork's child: every open vector env is its owner's."""
    for env in list(_OPEN):
        _OPEN.discard(env)
        env._open = False  # close() and garbage collection do nothing here
        env._flight.closed = True  # every call goes through _check_open, which refuses
        env._transport.disown()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)
