"""Checking one env's item (split into leaf values) or a batch (collected per leaf) against a
space's leaves; every error names the leaf, what was expected and what came, and is raised before
anything is written."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium.vector.utils import batch_space, iterate

from vecenv.errors import ActionIndexError, ActionKeyError, ActionSpaceError

if TYPE_CHECKING:
    from vecenv.spaces.buffers import Leaf

__all__ = ["collect", "misfit", "shape_of", "split"]


def shape_of(value: Any) -> tuple[int, ...] | None:
    """The shape of one item as numpy sees it (``None`` when it has none: a ragged list...)."""
    shape = getattr(value, "shape", None)
    if shape is not None:
        return shape
    if isinstance(value, (int, float)):
        return ()
    try:
        return np.shape(value)
    except Exception:
        return None


def misfit(what: str, leaf: Leaf, value: Any) -> ValueError:
    shape = shape_of(value)
    got = f"of type {type(value).__name__}" if shape is None else f"of shape {tuple(shape)}"
    return ValueError(
        f"{what}{leaf.name} {got} does not fit {what}_space{leaf.name} {leaf.space} (shape {leaf.shape})"
    )


def split(tree: Any, leaves: list[Leaf], item: Any, what: str, out: list) -> None:
    """Check one item against the tree (fixed leaves: exact shape) and append each leaf's value.

    Errors name the leaf by its path; a part missing from a Dict or Tuple names the keys expected.
    """
    if isinstance(tree, int):
        leaf = leaves[tree]
        if leaf.fixed and shape_of(item) != leaf.shape:
            raise misfit(what, leaf, item)
        out.append(item)
    elif tree[0] == "dict":
        for key, sub in tree[1]:
            try:
                part = item[key]
            except (KeyError, TypeError, IndexError):
                keys = [k for k, _ in tree[1]]
                got = f"keys {list(item)}" if isinstance(item, Mapping) else type(item).__name__
                raise ValueError(f"{what}: expected a dict with keys {keys}, got {got}") from None
            split(sub, leaves, part, what, out)
    else:
        subs = tree[1]
        if not isinstance(item, (tuple, list)) or len(item) != len(subs):
            got = f"length {len(item)}" if isinstance(item, (tuple, list)) else type(item).__name__
            raise ValueError(f"{what}: expected a tuple of {len(subs)} parts, got {got}")
        for sub, part in zip(subs, item, strict=True):
            split(sub, leaves, part, what, out)


def collect(tree: Any, leaves: list[Leaf], value: Any, k: int, where: str, out: list,
            given: list | None = None) -> bool:
    """Check a batched value against the tree and append each leaf's array to ``out``; whether
    every array leaf came as a numpy array of the leaf's dtype (so the buffer holds what
    gymnasium's ``iterate`` would hand each env). ``given`` (optional) gets, per leaf, what the
    envs are to be handed: the value as it came, or its exact integer cast. A missing dict key
    and a short tuple raise gymnasium's ``KeyError`` / ``IndexError`` too."""
    if isinstance(tree, int):
        leaf = leaves[tree]
        checked = _check_leaf(leaf, value, k, where)
        if not leaf.fixed:
            out.append(checked)
            if given is not None:
                given.append(value)
            return True
        array, cast = _check_dtype(leaf, checked, where)
        out.append(array)
        if given is not None:
            given.append(array if cast else value)
        # floats cast exactly to an integer leaf: the envs get the cast values, as stored
        return cast or (type(value) is np.ndarray and value.dtype == leaf.array.dtype)
    exact = True
    if tree[0] == "dict":
        keys = [key for key, _ in tree[1]]
        if not isinstance(value, Mapping):
            raise TypeError(f"{where}: expected a dict with keys {keys}, got {type(value).__name__}")
        if set(value.keys()) != set(keys):
            error: type[Exception] = ActionKeyError if set(keys) - set(value.keys()) else ValueError
            raise error(f"{where}: expected a dict with keys {keys}, got keys {list(value.keys())}")
        for key, sub in tree[1]:
            exact &= collect(sub, leaves, value[key], k, f"{where}[{key!r}]", out, given)
        return exact
    subs = tree[1]
    if not isinstance(value, (tuple, list)) or len(value) != len(subs):
        got = f"length {len(value)}" if isinstance(value, (tuple, list)) else type(value).__name__
        error = ActionIndexError if isinstance(value, (tuple, list)) and len(value) < len(subs) else TypeError
        raise error(f"{where}: expected a tuple of {len(subs)} parts, got {got}")
    for i, (sub, part) in enumerate(zip(subs, value, strict=True)):
        exact &= collect(sub, leaves, part, k, f"{where}[{i}]", out, given)
    return exact


def _iterable(value: Any) -> bool:
    try:
        iter(value)
    except TypeError:
        return False
    return True


def _check_leaf(leaf: Leaf, value: Any, k: int, where: str) -> Any:
    if leaf.own:  # a space registered with gymnasium: split by the iterate gymnasium would use
        try:
            items = list(iterate(batch_space(leaf.space, k), value))
        except Exception as exc:
            raise ValueError(f"{where}: gymnasium's iterate could not split {value!r:.80} into {k} "
                             f"items of {leaf.space} ({type(exc).__name__}: {exc})") from None
        if len(items) != k:
            raise ValueError(f"{where}: expected {k} items of {leaf.space}, got {len(items)}")
        value = items
    if not leaf.fixed:
        if not leaf.own and (not isinstance(value, (tuple, list, np.ndarray)) or len(value) != k):
            sequence = isinstance(value, (tuple, list, np.ndarray))
            got = f"{len(value)} items" if sequence else type(value).__name__
            error = ValueError if sequence or _iterable(value) else ActionSpaceError
            raise error(f"{where}: expected a sequence of {k} items of {leaf.space}, got {got}")
        out = np.empty(k, dtype=object)
        out[:] = list(value)
        return out
    expected_shape = (k, *leaf.array.shape[1:])
    try:
        array = np.asarray(value)
    except Exception as exc:  # ragged lists and the like
        raise ValueError(
            f"{where}: expected an array of shape {expected_shape} for {leaf.space}, got {value!r:.80} ({exc})"
        ) from None
    if array.ndim == 0 and not _iterable(value):
        raise TypeError(
            f"Unable to iterate over the following elements: {value}: {where} needs a batch of {k} "
            f"actions for {leaf.space}, one per env (shape {expected_shape}), not a single "
            f"{type(value).__name__}"
        )
    if array.shape != expected_shape:
        source = "" if isinstance(value, np.ndarray) else f" from a {type(value).__name__}"
        raise ValueError(
            f"{where}: expected shape {expected_shape} ({k} envs x {leaf.space}), "
            f"got shape {array.shape}{source}"
        )
    return array


def _check_dtype(leaf: Leaf, array: np.ndarray, where: str) -> tuple[np.ndarray, bool]:
    """``array`` (of the leaf's shape) if its values fit the leaf's dtype, with whether it was
    cast: floats that an integer leaf holds exactly come back as the leaf's dtype."""
    want, got = leaf.array.dtype, array.dtype
    if got.kind == "f" and want.kind in "iu":
        with np.errstate(invalid="ignore", over="ignore"):
            cast = array.astype(want)
            if np.all(cast == array):  # whole numbers only (NaN equals nothing; wrapped values differ)
                return cast, True
    if got.kind not in ("biu" if want.kind in "biu" else "biuf"):
        need = "integer" if want.kind in "biu" else "numeric"
        raise TypeError(
            f"{where}: expected {need} values for {leaf.space} (dtype {want}), got dtype {array.dtype}"
        )
    # integers that may not fit (storing them would wrap around): their range is checked
    if got != want and want.kind in "iu" and got.kind in "iu" and not np.can_cast(got, want) and array.size:
        limits = np.iinfo(want)
        low, high = array.min(), array.max()
        if low < limits.min or high > limits.max:
            bad = low if low < limits.min else high
            raise ValueError(
                f"{where}: value {bad} does not fit {leaf.space}, whose values are stored as {want} "
                f"({limits.min}..{limits.max})"
            )
    return array, False
