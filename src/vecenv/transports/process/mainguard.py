"""The main guard: a worker started with ``spawn`` or ``forkserver`` imports the main script,
and would build again a vector env built outside ``if __name__ == "__main__":``;
:func:`check_main_guard` says what to do instead before any worker starts."""

from __future__ import annotations

import ast
import multiprocessing
import sys
from types import FrameType

from vecenv.errors import MainGuardError

__all__ = ["check_main_guard", "script_rerun_line", "unguarded_main_line"]


def _fix(start_method: str) -> str:
    fork = (
        ', or pass context="fork" (a forked worker runs no script)'
        if "fork" in multiprocessing.get_all_start_methods() else ""
    )
    return (
        f'put the code that creates the vector env under `if __name__ == "__main__":` '
        f"(or in a function called from there){fork}; with start method {start_method!r} every "
        "worker imports the main script, and must not run it whole"
    )


def _guarded(statement: ast.stmt) -> bool:
    """Whether a top-level statement only runs in the main process: an ``if`` that tests
    ``__name__`` (or asks multiprocessing which process this is)."""
    if not isinstance(statement, ast.If):
        return False
    names = {n.id for n in ast.walk(statement.test) if isinstance(n, ast.Name)}
    attrs = {n.attr for n in ast.walk(statement.test) if isinstance(n, ast.Attribute)}
    return "__name__" in names or bool({"parent_process", "current_process"} & (names | attrs))


def unguarded_main_line(frame: FrameType | None = None) -> int | None:
    """The line of the main script's top level that is running now, when a worker importing the
    script would run it again (it is not inside a main guard); None otherwise, or when there is
    no script (an interactive interpreter, a notebook) or its source cannot be read."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not isinstance(path, str) or not path.endswith(".py"):
        return None
    frame = frame or sys._getframe()
    line = None
    while frame is not None:
        if frame.f_globals is main.__dict__ and frame.f_code.co_name == "<module>":
            line = frame.f_lineno
        frame = frame.f_back
    if line is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return None
    for statement in tree.body:
        if statement.lineno <= line <= (statement.end_lineno or statement.lineno):
            return None if _guarded(statement) else line
    return None


def script_rerun_line(context: str | None = None) -> int | None:
    """:func:`unguarded_main_line` when workers started with ``context`` (None: the default start
    method) would run the main script again, else None."""
    if (context or multiprocessing.get_context().get_start_method()) == "fork":
        return None
    return unguarded_main_line()


def check_main_guard(start_method: str) -> None:
    """Refuse to start workers that would run the caller's script again (never with ``fork``)."""
    if start_method == "fork":
        return
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise MainGuardError(
            "a vecenv process backend was started while a new process was importing the main "
            f"script: the script creates its vector env at its top level; {_fix(start_method)}"
        )
    line = unguarded_main_line()
    if line is not None:
        path = sys.modules["__main__"].__file__
        raise MainGuardError(
            f"{path}, line {line}: this creates a vecenv process backend at the script's top "
            f"level, so each of its workers would run the script again; {_fix(start_method)}"
        )
