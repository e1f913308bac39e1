"""Errors raised by vecenv: what failed, where, and why.

Every failure of a sub-environment or worker is a :class:`VecEnvError`; errors in the caller's
own input are ``ValueError`` / ``TypeError`` subclasses raised before anything reaches a worker.
"""

from __future__ import annotations

import signal
import traceback
import weakref
from typing import Any

import cloudpickle
from gymnasium.error import (
    AlreadyPendingCallError,
    ClosedEnvironmentError,
    CustomSpaceError,
    NoAsyncCallError,
)

__all__ = [
    "ActionIndexError",
    "ActionKeyError",
    "ActionSpaceError",
    "AlreadyPendingCallError",
    "ClosedEnvironmentError",
    "EnvError",
    "MainGuardError",
    "NoAsyncCallError",
    "StepTimeoutError",
    "VecEnvError",
    "WorkerDiedError",
    "add_detail",
    "portable_error",
    "typed_error_class",
]

#: an EnvError's fields, in its constructor's order
_FIELDS = ("env_index", "worker", "method", "exc_type", "exc_message", "remote_traceback")
_Fields = tuple[int, int, str, str, str, str]


class ActionKeyError(ValueError, KeyError):
    """A dict of actions lacks a key of the action space: a ``ValueError``, and the ``KeyError``
    gymnasium's vector envs raise for it."""

    def __str__(self) -> str:  # the message itself, not KeyError's repr of it
        return str(self.args[0]) if self.args else ""


class ActionIndexError(TypeError, IndexError):
    """A tuple of actions has fewer parts than the Tuple action space: a ``TypeError``, and the
    ``IndexError`` gymnasium's vector envs raise for it."""


class ActionSpaceError(ValueError, CustomSpaceError):
    """Actions for a custom-space leaf (Text, Graph, ...) that are not a sequence of items: a
    ``ValueError``, and the ``CustomSpaceError`` gymnasium's vector envs raise for it."""


class VecEnvError(RuntimeError):
    """Base class of the failures that happen inside sub-environments or their workers."""


class EnvError(VecEnvError):
    """A sub-environment raised an exception.

    It keeps the original's type where it can: an ``EnvError[ThatClass]``, a subclass of both, so
    ``except ValueError:`` catches it as it would the env's own, with the original's ``args``;
    ``str()`` starts with the original's message, then says where it happened. A class that
    cannot be rebuilt here (or an exit) gives a plain ``EnvError`` with the text.

    Attributes:
        env_index: index of the failing env in the vector env.
        worker: index of the worker (env group) that held it.
        method: what was running (``"step"``, ``"reset"``, ``"call:name"`` ...).
        exc_type: qualified name of the original exception type.
        exc_message: ``str()`` of the original exception.
        remote_traceback: the original traceback text, as formatted where it was raised.
        original: the original exception object when it could be carried over, else ``None``
            (it is also chained as ``__cause__``).
    """

    env_index: int
    worker: int
    method: str
    exc_type: str
    exc_message: str
    remote_traceback: str
    #: lines added to the message after the fact (see :func:`add_detail`)
    details: tuple[str, ...] = ()

    def __init__(self, env_index: int, worker: int, method: str, exc_type: str, exc_message: str,
                 remote_traceback: str, original: BaseException | None = None) -> None:
        self._fill((env_index, worker, method, exc_type, exc_message, remote_traceback), original)
        super().__init__(self._text())

    def _fill(self, fields: _Fields, original: BaseException | None) -> None:
        for name, value in zip(_FIELDS, fields, strict=True):
            setattr(self, name, value)
        self.original = original

    def _fields(self) -> _Fields:
        return tuple(getattr(self, name) for name in _FIELDS)  # type: ignore[return-value]

    def _text(self) -> str:
        return "\n".join((
            f"{self.exc_message}\n(vecenv) env {self.env_index} (worker {self.worker}) raised "
            f"{self.exc_type} in {self.method}; its traceback:\n{self.remote_traceback.rstrip()}",
            *self.details,
        ))

    def __str__(self) -> str:  # the original message first, whatever the original class prints
        if type(self) is EnvError:
            return super().__str__()  # the text, with any note added to args after construction
        return self._text()

    @classmethod
    def from_exception(cls, exc: BaseException, env_index: int, worker: int, method: str) -> EnvError:
        """Wrap ``exc``, raised by env ``env_index`` in ``method``, keeping its type when it can."""
        kind = type(exc)
        name = f"{kind.__module__}.{kind.__qualname__}".removeprefix("builtins.")
        fields = (env_index, worker, method, name, str(exc), _traceback_text(exc))
        return _typed(kind, exc.args, _state(exc), fields, exc)

    def without_original(self) -> EnvError:
        """A copy without the original object (for an original that cannot be pickled)."""
        kind = getattr(self, "_kind", None)
        if kind is not None:
            return _typed(kind, self.args, {"details": self.details}, self._fields(), None)
        copy = EnvError(*self._fields())
        copy.args = self.args
        return copy

    def __reduce__(self):  # the fields always arrive; the original class when it can be rebuilt
        kind = getattr(self, "_kind", None)
        payload = None
        bare = {"details": self.details}
        for parts in ((kind, self.args, _state(self), self.original), (kind, self.args, bare, None),
                      (kind, (), bare, None)) if kind is not None else ():
            try:
                payload = cloudpickle.dumps(parts)
                break
            except Exception:  # noqa: PERF203 - only while pickling an error
                continue
        return (_rebuild, (self._fields(), payload, self.original if kind is None else None, self.args))


#: EnvError's own attributes (never copied from or to the original's)
_OWN = frozenset((*_FIELDS, "original", "_kind"))
#: original class -> its EnvError subclass (or EnvError when it cannot have one)
_TYPED: weakref.WeakKeyDictionary[type, type[EnvError]] = weakref.WeakKeyDictionary()


def add_detail(error: BaseException, text: str) -> None:
    """Add a line to the end of ``error``'s message (it survives pickling)."""
    if isinstance(error, EnvError):
        error.details = (*error.details, text)
        if type(error) is EnvError:
            error.args = (error._text(),)
    else:
        error.args = (f"{error.args[0]}\n{text}" if error.args else text, *error.args[1:])


def typed_error_class(kind: type[BaseException]) -> type[EnvError]:
    """``EnvError[kind]``, a subclass of EnvError and ``kind``; EnvError itself when ``kind`` is
    not an ``Exception`` (an exit, an interrupt), is vecenv's own, or cannot be subclassed."""
    if not issubclass(kind, Exception) or issubclass(kind, VecEnvError):
        return EnvError
    cls = _TYPED.get(kind)
    if cls is None:
        try:
            cls = type(f"EnvError[{kind.__qualname__}]", (EnvError, kind), {"__module__": __name__})
        except Exception:  # a final class, a layout or metaclass conflict
            cls = EnvError
        _TYPED[kind] = cls
    return cls


def _state(exc: BaseException) -> dict:
    return {k: v for k, v in getattr(exc, "__dict__", {}).items() if k not in _OWN}


def _typed(kind: type, args: tuple, state: dict, fields: _Fields, original: BaseException | None) -> EnvError:
    cls = typed_error_class(kind)
    if cls is not EnvError:
        try:
            err: Any = kind.__new__(cls, *args)  # the original class decides the memory layout
            defines_init = next(k for k in kind.__mro__ if "__init__" in k.__dict__)
            if defines_init.__module__ == "builtins":  # fills C-level fields (OSError's errno, ...); no user code
                kind.__init__(err, *args)  # type: ignore[misc]
            err.__dict__.update(state)
            err._fill(fields, original)
            err._kind = kind
            err.args = tuple(args)
            return err
        except Exception:  # an odd constructor: the text alone
            pass
    return EnvError(*fields, original)


def _rebuild(fields: _Fields, payload: bytes | None, original: BaseException | None, args: tuple) -> EnvError:
    """Unpickle an EnvError: typed when its original class loads here, else with the text."""
    if payload is not None:
        try:
            kind, kind_args, state, typed_original = cloudpickle.loads(payload)
            return _typed(kind, kind_args, state, fields, typed_original)
        except Exception:  # the class is not importable in this process
            pass
    err = EnvError(*fields, original)
    if payload is None:
        err.args = args  # the message, including any note added after construction
    return err


class WorkerDiedError(VecEnvError):
    """A worker ended without being asked to (crash, ``os._exit``, signal, out of memory)."""

    def __init__(self, worker: int, env_indices: list[int], exitcode: int | None, detail: str = ""):
        self.worker = worker
        self.env_indices = list(env_indices)
        self.exitcode = exitcode
        if exitcode is None:
            how = "exit status unknown"
        elif exitcode >= 0:
            how = f"exit code {exitcode}"
        else:
            try:
                how = f"killed by {signal.Signals(-exitcode).name}"
            except ValueError:
                how = f"killed by signal {-exitcode}"
        super().__init__(f"worker {worker} holding envs {self.env_indices} died ({how})"
                         + (f": {detail}" if detail else ""))

    def __reduce__(self):
        return (type(self), (self.worker, self.env_indices, self.exitcode))


class MainGuardError(VecEnvError):
    """A process backend was started where its workers would run the caller's script again
    (``spawn`` and ``forkserver`` import the main script in every worker); the message names
    the line and the fix."""


class StepTimeoutError(VecEnvError, TimeoutError):
    """A sub-environment took longer than ``step_timeout`` seconds (or, for ``method="start"``,
    Ray actors were not placed and started within ``start_timeout``; ``detail`` says why)."""

    def __init__(self, env_indices: list[int], worker: int | None, timeout: float | None,
                 method: str = "step", detail: str = ""):
        self.env_indices = list(env_indices)
        self.worker = worker
        self.timeout = timeout
        self.method = method
        self.detail = detail
        where = f" (worker {worker})" if worker is not None else ""
        super().__init__(
            f"envs {self.env_indices}{where} did not finish {method} "
            + (f"within {timeout:g} s" if timeout is not None else "in time")
            + (f": {detail}" if detail else "")
        )

    def __reduce__(self):
        return (type(self), (self.env_indices, self.worker, self.timeout, self.method, self.detail))


def _traceback_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def portable_error(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling, else a copy that does (its traceback kept as text)."""
    for candidate in (exc, exc.without_original()) if isinstance(exc, EnvError) else (exc,):
        try:
            cloudpickle.loads(cloudpickle.dumps(candidate))
            return candidate
        except Exception:
            pass
    return RuntimeError(
        f"{type(exc).__qualname__}: {exc} (the exception cannot be pickled)\n"
        f"--- original traceback ---\n{_traceback_text(exc)}"
    )
