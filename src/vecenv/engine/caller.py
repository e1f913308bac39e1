"""One caller at a time: a vector env's API lets one thread in (:func:`one_caller`); a second
caller gets a clear error at once, before anything is touched."""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

__all__ = ["CallerGuard", "one_caller"]


class CallerGuard:
    """Who is inside a vector env's API now: :attr:`holder`, the caller holding the guard, is
    ``(thread ident, method)`` or ``None``.

    Taken by :func:`one_caller` with one ``dict.setdefault``, a test-and-set that is atomic (one C
    call, under the GIL or a free-threaded build's per-dict lock) and never blocks.
    """

    __slots__ = ("held",)

    def __init__(self) -> None:
        self.held: dict[int, tuple[int, str]] = {}  # key 0: the holder's token, while held

    @property
    def holder(self) -> tuple[int, str] | None:
        return self.held.get(0)


_F = TypeVar("_F", bound=Callable[..., Any])


def one_caller(method: _F) -> _F:
    """Let one thread at a time into ``method`` of a vector env (a second caller gets a
    RuntimeError at once, before anything is touched); calls it makes itself pass through.

    Interrupt-safe: the caller holds the guard through a token of its own, taken inside the
    ``try`` and given back by the ``finally`` whatever was raised, wherever (an interruption
    just after the take included), so a KeyboardInterrupt never leaves the guard held.
    """
    name = method.__name__
    get_ident = threading.get_ident

    @wraps(method)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        held = self._guard.held
        me = get_ident()
        holder = held.get(0)
        if holder is not None and holder[0] == me:  # inside this thread's own call
            return method(self, *args, **kwargs)
        token = (me, name)
        try:
            holder = held.setdefault(0, token)
            if holder is not token:
                raise RuntimeError(_refusal(holder, name))
            return method(self, *args, **kwargs)
        finally:  # no call here: a signal handler runs only at calls and loops, and must not skip this
            try:  # one read: another thread may give its token back between a test and a read
                if held[0] is token:
                    del held[0]  # only this thread ever removes this token
            except KeyError:
                pass

    return guarded  # type: ignore[return-value]


def _refusal(holder: tuple[int, str], method: str) -> str:
    thread = next((t.name for t in threading.enumerate() if t.ident == holder[0]), f"id {holder[0]}")
    return (
        f"one caller at a time: {method}() was called from thread {threading.current_thread().name!r} "
        f"while thread {thread!r} is already running {holder[1]}() on this vector env; "
        "use one vector env per thread, or hold a lock around its calls"
    )
