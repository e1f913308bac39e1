"""Errors raised by vecenv: what failed, where, and why.

Every error a sub-environment or worker causes is a :class:`VecEnvError`, so a training loop
can catch one type. Errors about the caller's own input are ordinary ``ValueError`` /
``TypeError`` subclasses raised before anything is sent to a worker.
"""

from __future__ import annotations

import traceback

import cloudpickle
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError

__all__ = [
    "AlreadyPendingCallError",
    "ClosedEnvironmentError",
    "EnvError",
    "NoAsyncCallError",
    "StepTimeoutError",
    "VecEnvError",
    "WorkerDiedError",
    "portable_error",
]


class VecEnvError(RuntimeError):
    """Base class of the failures that happen inside sub-environments or their workers."""


class EnvError(VecEnvError):
    """A sub-environment raised an exception.

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

    def __init__(
        self,
        env_index: int,
        worker: int,
        method: str,
        exc_type: str,
        exc_message: str,
        remote_traceback: str,
        original: BaseException | None = None,
    ) -> None:
        self.env_index = env_index
        self.worker = worker
        self.method = method
        self.exc_type = exc_type
        self.exc_message = exc_message
        self.remote_traceback = remote_traceback
        self.original = original
        super().__init__(
            f"env {env_index} (worker {worker}) raised {exc_type} in {method}: {exc_message}\n"
            f"--- original traceback ---\n{remote_traceback.rstrip()}"
        )

    @classmethod
    def from_exception(cls, exc: BaseException, env_index: int, worker: int, method: str) -> EnvError:
        """Wrap ``exc``, raised by env ``env_index`` in ``method``, with its traceback text."""
        kind = type(exc)
        name = f"{kind.__module__}.{kind.__qualname__}".removeprefix("builtins.")
        return cls(env_index, worker, method, name, str(exc), format_traceback(exc), exc)

    def without_original(self) -> EnvError:
        """A copy that carries the text alone (for an original that cannot be pickled)."""
        copy = EnvError(self.env_index, self.worker, self.method, self.exc_type, self.exc_message,
                        self.remote_traceback, None)
        copy.args = self.args
        return copy

    def __reduce__(self):  # keep the fields when the error crosses a process boundary
        return (
            type(self),
            (
                self.env_index,
                self.worker,
                self.method,
                self.exc_type,
                self.exc_message,
                self.remote_traceback,
                self.original,
            ),
            {"args": self.args},  # the message, including any note added after construction
        )


class WorkerDiedError(VecEnvError):
    """A worker ended without being asked to (crash, ``os._exit``, signal, out of memory)."""

    def __init__(self, worker: int, env_indices: list[int], exitcode: int | None, detail: str = ""):
        self.worker = worker
        self.env_indices = list(env_indices)
        self.exitcode = exitcode
        how = describe_exitcode(exitcode)
        msg = f"worker {worker} holding envs {self.env_indices} died ({how})"
        if detail:
            msg += f": {detail}"
        super().__init__(msg)

    def __reduce__(self):
        return (type(self), (self.worker, self.env_indices, self.exitcode))


class StepTimeoutError(VecEnvError, TimeoutError):
    """A sub-environment took longer than ``step_timeout`` seconds (or, for ``method="start"``,
    Ray actors were not placed and started within ``start_timeout``; ``detail`` says why)."""

    def __init__(
        self, env_indices: list[int], worker: int | None, timeout: float, method: str = "step", detail: str = ""
    ):
        self.env_indices = list(env_indices)
        self.worker = worker
        self.timeout = timeout
        self.method = method
        self.detail = detail
        where = f" (worker {worker})" if worker is not None else ""
        super().__init__(
            f"envs {self.env_indices}{where} did not finish {method} within {timeout:g} s"
            + (f": {detail}" if detail else "")
        )

    def __reduce__(self):
        return (type(self), (self.env_indices, self.worker, self.timeout, self.method, self.detail))


def describe_exitcode(exitcode: int | None) -> str:
    """Say in words how a process ended: ``exit code 3`` or ``killed by SIGSEGV``."""
    import signal

    if exitcode is None:
        return "exit status unknown"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


def format_traceback(exc: BaseException) -> str:
    """The traceback of ``exc`` as Python prints it."""
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def portable_error(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling, else a copy that does (its traceback kept as text)."""
    for candidate in (exc, exc.without_original() if isinstance(exc, EnvError) else None):
        if candidate is None:
            continue
        try:
            cloudpickle.loads(cloudpickle.dumps(candidate))
            return candidate
        except Exception:
            pass
    return RuntimeError(
        f"{type(exc).__qualname__}: {exc} (the exception cannot be pickled)\n"
        f"--- original traceback ---\n{format_traceback(exc)}"
    )
