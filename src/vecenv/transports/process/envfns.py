"""The env_fns on their way to the workers: inherited under ``fork``, else each pickled once in
the caller (one that cannot be is named before any worker starts) and unpickled in the worker."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from typing import Any

import cloudpickle

from vecenv.errors import EnvError
from vecenv.transports.process import wire

__all__ = ["EnvFnPicklingError", "pack", "unpack"]


class EnvFnPicklingError(pickle.PicklingError, TypeError):
    """An env_fn cannot be pickled, so it cannot reach a worker started with spawn/forkserver."""


def pack(env_fns: Sequence[Callable[[], Any]], start_method: str) -> list[bytes] | None:
    """Each env_fn as the worker will receive it: ``None`` under fork (they are inherited),
    else its pickle (one per distinct callable)."""
    if start_method == "fork":
        return None
    cache: dict[int, bytes] = {}
    out = []
    for i, fn in enumerate(env_fns):
        if id(fn) not in cache:
            try:
                cache[id(fn)] = cloudpickle.dumps(fn, wire.PROTOCOL)
            except Exception as exc:
                raise EnvFnPicklingError(
                    f"env_fns[{i}] ({fn!r:.80}) cannot be pickled, which the {start_method!r} "
                    f"start method needs to send it to a worker: {type(exc).__name__}: {exc}. Use "
                    "context='fork', or build the env from picklable parts (a module-level function, "
                    "functools.partial, an env id)."
                ) from exc
        out.append(cache[id(fn)])
    return out


def unpack(fn: Callable[[], Any] | bytes, env_index: int, worker: int) -> Callable[[], Any]:
    """In the worker: the env_fn itself, unpickled when it came as bytes."""
    if not isinstance(fn, bytes):
        return fn
    try:
        return wire.loads(fn)
    except Exception as exc:
        raise EnvError.from_exception(exc, env_index, worker, "unpickling its env_fn in the worker") from exc
