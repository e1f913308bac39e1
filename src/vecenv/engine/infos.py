"""Info batching: per-env info dicts into gymnasium's dict of arrays with ``_key`` masks.

The rules follow gymnasium 1.x exactly (``VectorEnv._add_info``): Python ``int``/``float``/
``bool`` and numpy scalars get an array of their own type, arrays a stacked array of their
shape and dtype, nested dicts are batched recursively, anything else goes in an object array;
``final_obs`` is always an object array so each env's last observation stays unbatched.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from vecenv.worker import InfoEntry

__all__ = ["add_info", "batch_infos"]


def add_info(infos: dict[str, Any], info: dict[str, Any], row: int, n: int) -> dict[str, Any]:
    """Merge one env's ``info`` into the batched ``infos`` (``n`` rows) at ``row``; returns ``infos``."""
    for key, value in info.items():
        if key == "final_obs":
            array = infos.get(key)
            if array is None:
                array = np.full(n, None, dtype=object)
            array[row] = value
        elif isinstance(value, dict):
            array = add_info(infos.get(key, {}), value, row, n)
        else:
            array = infos.get(key)
            if array is None:
                kind = type(value)
                if kind in (int, float, bool) or issubclass(kind, np.number):
                    array = np.zeros(n, dtype=kind)
                elif isinstance(value, np.ndarray):
                    array = np.zeros((n, *value.shape), dtype=value.dtype)
                else:
                    array = np.full(n, None, dtype=object)
            array[row] = value
        mask = infos.get(f"_{key}")
        if mask is None:
            mask = np.zeros(n, dtype=np.bool_)
        mask[row] = True
        infos[key] = array
        infos[f"_{key}"] = mask
    return infos


def batch_infos(
    entries: Iterable[InfoEntry], n: int, rows: dict[int, int] | None = None
) -> dict[str, Any]:
    """Batch env reports into one info dict of ``n`` rows.

    ``rows`` maps an env index to its row (async batches); by default the row is the env index.
    A SAME_STEP entry for a finished episode adds ``final_obs``/``final_info`` before the new
    episode's reset info, as gymnasium does.
    """
    infos: dict[str, Any] = {}
    for entry in entries:
        row = entry.index if rows is None else rows[entry.index]
        if entry.ended:
            add_info(infos, {"final_obs": entry.final_obs, "final_info": entry.final_info}, row, n)
        add_info(infos, entry.info, row, n)
    return infos
