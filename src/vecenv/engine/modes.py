"""Parsing of the autoreset mode, in the spellings gymnasium and vecenv users write it."""

from __future__ import annotations

from gymnasium.vector import AutoresetMode

__all__ = ["parse_autoreset_mode"]

_MODES = {
    "nextstep": AutoresetMode.NEXT_STEP,
    "samestep": AutoresetMode.SAME_STEP,
    "disabled": AutoresetMode.DISABLED,
}


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
