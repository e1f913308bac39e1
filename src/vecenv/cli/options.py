"""Option values for ``vecenv bench`` and ``vecenv check``: each parsed and checked before
anything runs, with a :class:`UsageError` that names the option and what was expected."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn


class UsageError(Exception):
    """Bad command-line usage: reported on stderr, exit code 2."""

    def __init__(self, message: str, usage: str | None = None) -> None:
        super().__init__(message)
        self.usage = usage


class Exit(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


class Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises instead of exiting, so ``main`` returns the exit code."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.format_usage())

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            sys.stderr.write(message)
        raise Exit(status)


# ==================================================================== argument types
def parse_int_list(option: str, text: str) -> list[int]:
    parts = [p.strip() for p in text.split(",")]
    try:
        values = [int(p) for p in parts]
    except ValueError:
        values = []
    if not values or any(v < 1 for v in values):
        raise UsageError(
            f"{option}: expected a comma-separated list of positive integers such as 2,8,16, got {text!r}"
        )
    return sorted(dict.fromkeys(values))


def check_positive(option: str, value: float | int | None, kind: str = "an integer") -> None:
    if value is not None and (not math.isfinite(value) or value <= 0):
        raise UsageError(f"{option}: expected {kind} > 0, got {value!r}")


def parse_env_kwargs(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--env-kwargs: expected a JSON object such as '{{\"step_cost_us\": 500}}' ({exc})") from None
    if not isinstance(value, dict):
        raise UsageError(f"--env-kwargs: expected a JSON object, got {text!r}")
    return value


def output_path(option: str, path: str | None) -> Path | None:
    if path is None:
        return None
    p = Path(path)
    if not p.parent.exists():
        raise UsageError(f"{option}: folder {str(p.parent)!r} does not exist")
    if p.is_dir():
        raise UsageError(f"{option}: {path!r} is a folder, expected a file name")
    return p


def resolve_envs(names: Sequence[str], kwargs: dict[str, Any], imports: Sequence[str]) -> list[Any]:
    from vecenv.bench.envs import EnvArgumentError, import_modules, resolve_env

    option = "--import"
    try:
        import_modules(imports)
        option = "env"
        return [resolve_env(name, kwargs, imports) for name in names]
    except EnvArgumentError as exc:
        raise UsageError(f"{option}: {exc}") from None


IMPORT_OPTION: dict[str, Any] = dict(action="append", default=[], dest="imports", metavar="MODULE", help="import MODULE first, so the env ids it registers resolve (repeatable): --import ale_py")


def name_choice(option: str, text: str | None, default: Callable[[], list[str]], expected: str,
                check: Callable[[str], None]) -> list[str]:
    """The names given to a comma-separated ``option``: ``default()`` when it is not given, no
    names for ``none``; otherwise each name is passed to ``check`` (which raises
    :class:`UsageError`) and duplicates are dropped.

    ``expected`` completes the error for an empty list: "{option}: expected a comma-separated
    list {expected}".
    """
    if text is None:
        return default()
    names = [p.strip() for p in text.split(",") if p.strip()]
    if names == ["none"]:
        return []
    if not names:
        raise UsageError(f"{option}: expected a comma-separated list {expected}")
    for name in names:
        check(name)
    return list(dict.fromkeys(names))


def parse_backends(option: str, text: str | None, variants: bool = False) -> list[str]:
    """The vecenv backends to run: every usable one by default; named ones checked.

    ``variants`` (bench only) also allows and defaults to variants such as ``process+inline``.
    """
    import vecenv
    from vecenv.bench.contenders import VARIANTS, default_backends, missing_backend_dependency
    from vecenv.make import BACKENDS

    available = vecenv.available_backends()

    def check(name: str) -> None:
        if variants and name in VARIANTS:
            name = VARIANTS[name][0]
        if name == "auto" and variants:
            return
        if name not in BACKENDS:
            raise UsageError(
                f"{option}: unknown backend {name!r}; expected names from {', '.join(BACKENDS)} "
                f"(available here: {', '.join(available)})"
            )
        if name not in available:
            raise UsageError(
                f"{option}: backend {name!r} is not available in this installation of vecenv "
                f"(available: {', '.join(available)})"
            )
        missing = missing_backend_dependency(name)
        if missing:
            raise UsageError(f"{option}: {missing}")

    return name_choice(
        option, text, lambda: default_backends(variants), f"of backends from {', '.join(BACKENDS)}", check
    )


def parse_peers(text: str | None) -> list[str]:
    """The peer libraries to compare with: every installed one by default; named ones checked."""
    from vecenv.bench.contenders import PEERS, peer_unavailable

    def check(name: str) -> None:
        if name not in PEERS:
            raise UsageError(f"--compare: unknown peer {name!r}; expected names from {', '.join(PEERS)}, or none")
        why = peer_unavailable(name)
        if why:
            raise UsageError(f"--compare: {name} cannot run: {why}")

    return name_choice(
        "--compare", text, lambda: [p for p in PEERS if peer_unavailable(p) is None],
        f"from {', '.join(PEERS)}, or none", check,
    )
