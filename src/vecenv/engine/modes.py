"""Parsing of the autoreset mode, in the spellings gymnasium and vecenv users write it."""

from __future__ import annotations

from typing import Any

from gymnasium.vector import AutoresetMode

__all__ = ["is_same_step", "parse_autoreset_mode"]

_MODES = {mode.name.lower().replace("_", ""): mode for mode in AutoresetMode}  # "nextstep"...


def parse_autoreset_mode(mode: str | AutoresetMode) -> AutoresetMode:
    """Accept the enum, our spellings (``"next_step"``) and gymnasium's (``"NextStep"``)."""
    if isinstance(mode, AutoresetMode):
        return mode
    if isinstance(mode, str):
        key = mode.lower().replace("_", "").replace("-", "").replace(" ", "")
        if key in _MODES:
            return _MODES[key]
    raise ValueError(
        f"{mode!r} is not a valid AutoresetMode: unknown autoreset_mode {mode!r}, expected "
        "'next_step', 'same_step', 'disabled' (or gymnasium's 'NextStep', 'SameStep', 'Disabled') "
        "or a gymnasium.vector.AutoresetMode"
    )


def is_same_step(mode: Any) -> bool:
    """Whether ``mode`` (e.g. a vector env's ``metadata["autoreset_mode"]``: the enum, its value,
    or a spelling :func:`parse_autoreset_mode` takes) is SAME_STEP; False for anything else."""
    try:
        return parse_autoreset_mode(getattr(mode, "value", mode)) is AutoresetMode.SAME_STEP
    except ValueError:
        return False
