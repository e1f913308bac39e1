"""SB3's exception classes, with vecenv's clearer checks behind them.

SB3 reports many wrong inputs with ``assert`` (``AssertionError``), or lets Python fail with an
``IndexError`` / ``TypeError``. vecenv raises classes that are both SB3's class and the
ValueError/TypeError a check should raise, so ``except AssertionError`` written for SB3 and
``except ValueError`` both work. Each message starts with SB3's words; vecenv's detail may follow.

An exception inside a sub-environment reaches the caller as the env's own exception (as with
SB3's ``DummyVecEnv``), with a note naming the env, its worker and, when it crossed a process,
the original traceback.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from gymnasium.error import DependencyNotInstalled

from vecenv.errors import EnvError


class AssertionValueError(AssertionError, ValueError):
    """A check SB3 makes with ``assert`` on a value (SB3 raises ``AssertionError``)."""


class AssertionTypeError(AssertionError, TypeError):
    """A check SB3 makes with ``assert`` on a type (SB3 raises ``AssertionError``)."""


class IndexValueError(IndexError, ValueError):
    """A count that does not match ``num_envs`` (SB3 fails with an ``IndexError`` there)."""


class TypeValueError(TypeError, ValueError):
    """Input of the wrong kind (SB3 fails with a ``TypeError`` there)."""


class VideoDependencyNotInstalled(DependencyNotInstalled, ImportError):
    """The video extra is missing (SB3 raises gymnasium's ``DependencyNotInstalled``)."""


def raise_original(err: EnvError) -> None:
    """Raise the exception ``err`` wraps, noted with where it happened; ``err`` if it has none."""
    original = err.original
    if not isinstance(original, Exception):
        if str(err.exc_type).rsplit(".", 1)[-1] == "AttributeError":
            raise AttributeError(str(err)) from err  # SB3: a missing attribute is an AttributeError
        raise err
    note = f"(vecenv) raised by env {err.env_index} (worker {err.worker}) in {err.method}"
    if original.__traceback__ is None and err.remote_traceback:
        note += "\n--- original traceback ---\n" + err.remote_traceback.rstrip()
    notes = getattr(original, "__notes__", [])
    if note not in notes:  # Python 3.10 has no add_note: the note is kept, not printed
        original.__notes__ = [*notes, note]  # type: ignore[attr-defined]
    raise original  # outside an ``except`` block: the env's own cause and context are kept


F = TypeVar("F", bound=Callable[..., Any])


def env_errors(method: F) -> F:
    """Decorator: a sub-env's exception leaves ``method`` as the env's own exception."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except EnvError as err:
            failed = err
        raise_original(failed)

    return wrapper  # type: ignore[return-value]
