"""How the SB3 layer reaches the sub-environments of a gymnasium-API vector env.

Three kinds of vector env are handled, best first:

* vecenv's own engine (``apply``/``step_entries``): every attribute request runs as one
  ``apply`` of a module-level function in the env's worker, giving SB3's exact semantics;
* any vector env whose ``unwrapped`` holds an in-process ``envs`` list (gymnasium's
  ``SyncVectorEnv``): the functions run directly on the sub-envs;
* any other gymnasium ``VectorEnv`` (e.g. ``AsyncVectorEnv``): its ``get_attr``/``call``/
  ``set_attr``, which address all envs at once.

It also turns gymnasium's batched info dicts back into one dict per env.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import gymnasium as gym
import numpy as np

# --------------------------------------------------------------------------- functions run per env
# Module-level so they pickle by reference when sent to worker processes.


def get_wrapper_attr(env: gym.Env, name: str) -> Any:
    """``name`` on the first wrapper (or the env) that has it, like SB3's ``get_attr``."""
    return env.get_wrapper_attr(name)


def has_wrapper_attr(env: gym.Env, name: str) -> bool:
    try:
        env.get_wrapper_attr(name)
    except AttributeError:
        return False
    return True


def call_wrapper_method(env: gym.Env, name: str, args: tuple, kwargs: dict) -> Any:
    method = env.get_wrapper_attr(name)
    if not callable(method):
        raise TypeError(
            f"'{type(method).__name__}' object is not callable: env_method({name!r}) found a "
            f"{type(method).__name__} attribute, not a method"
        )
    return method(*args, **kwargs)


def set_wrapper_attr(env: gym.Env, name: str, value: Any) -> None:
    """Set ``name`` where the wrapper chain defines it (on the outermost wrapper if nowhere)."""
    setter = getattr(env, "set_wrapper_attr", None)
    if setter is None:
        setattr(env, name, value)
        return
    try:
        setter(name, value, force=True)
    except TypeError:  # gymnasium < 1.1 has no ``force``
        setter(name, value)


def unwrapped_id(env: gym.Env) -> int:
    return id(env.unwrapped)


ClassRef = Any  # a class, or (module, qualname) resolved in the worker


def class_ref(cls: type) -> ClassRef:
    """Refer to a class by name when possible, so workers need not import its module (SB3/torch)."""
    if "<locals>" in cls.__qualname__:
        return cls
    return (cls.__module__, cls.__qualname__)


def _resolve(ref: ClassRef) -> type | None:
    if isinstance(ref, type):
        return ref
    module_name, qualname = ref
    obj: Any = sys.modules.get(module_name)  # not loaded here => no instance can exist here
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return obj if isinstance(obj, type) else None


# SB3's gymnasium Monitor and vecenv's are interchangeable for is_wrapped / env_is_wrapped.
_MONITORS = (("stable_baselines3.common.monitor", "Monitor"), ("vecenv.sb3.monitor", "Monitor"))

W = TypeVar("W")


def unwrap_wrapper(env: gym.Env, wrapper_class: type[W] | tuple[type, ...]) -> W | None:
    """The first gymnasium wrapper of type ``wrapper_class`` in ``env``'s chain, or None."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, wrapper_class):
            return env  # type: ignore[return-value]
        env = env.env
    return None


def is_wrapped(env: gym.Env, wrapper_class: ClassRef) -> bool:
    """Whether ``env``'s gymnasium wrapper chain contains ``wrapper_class`` (a class, or a
    :func:`class_ref` to one, as workers get it); SB3's ``Monitor`` and vecenv's count as one."""
    wanted = _resolve(wrapper_class)
    classes: list[type] = [wanted] if wanted is not None else []
    if wanted is not None and (wanted.__module__, wanted.__qualname__) in _MONITORS:
        classes += [c for c in map(_resolve, _MONITORS) if c is not None]
    return bool(classes) and unwrap_wrapper(env, tuple(classes)) is not None


# --------------------------------------------------------------------------- access strategies
class SubEnvAccess:
    """Run per-env requests on selected sub-envs of a vector env, whatever its kind."""

    def __init__(self, venv: Any) -> None:
        root = getattr(venv, "unwrapped", venv)
        self.venv = venv
        self.num_envs: int = venv.num_envs
        self._apply: Callable[..., list] | None = None
        self.kind = "generic"  # requests go through the vector API, to every env at once
        if callable(getattr(type(root), "apply", None)):
            self.kind, self._apply = "engine", partial(_apply_in_passes, root.apply)
        elif isinstance(getattr(root, "envs", None), (list, tuple)):
            envs = root.envs
            self.kind = "in_process"
            self._apply = lambda fn, indices, args: [fn(envs[i], *args) for i in indices]
        self.can_apply = self._apply is not None

    def apply(self, fn: Callable[..., Any], indices: list[int], *args: Any) -> list[Any]:
        """``[fn(env_i, *args) for i in indices]``, run where the envs live."""
        if self._apply is None:
            raise NotImplementedError(
                f"{type(self.venv).__name__} gives no per-env access; this request needs a vecenv or "
                "in-process vector env"
            )
        return self._apply(fn, indices, args)

    def _all(self, indices: list[int]) -> bool:
        return sorted(indices) == list(range(self.num_envs))

    def get_attr(self, name: str, indices: list[int]) -> list[Any]:
        if self.can_apply:
            return self.apply(get_wrapper_attr, indices, name)
        values = list(self.venv.get_attr(name))  # note: gymnasium calls callable attributes
        return [values[i] for i in indices]

    def has_attr(self, name: str) -> bool:
        indices = list(range(self.num_envs))
        if self.can_apply:
            return all(self.apply(has_wrapper_attr, indices, name))
        try:
            self.venv.get_attr(name)
        except AttributeError:
            return False
        return True

    def set_attr(self, name: str, value: Any, indices: list[int]) -> None:
        if self.can_apply:
            self.apply(set_wrapper_attr, indices, name, value)
            return
        if not self._all(indices):
            raise NotImplementedError(
                f"set_attr on a subset of envs is not available for {type(self.venv).__name__}"
            )
        values = [value] * self.num_envs
        self.venv.set_attr(name, values)

    def call(self, name: str, indices: list[int], args: tuple, kwargs: dict) -> list[Any]:
        if self.can_apply:
            return self.apply(call_wrapper_method, indices, name, args, kwargs)
        if not self._all(indices):
            raise NotImplementedError(
                f"env_method on a subset of envs is not available for {type(self.venv).__name__}"
            )
        results = list(self.venv.call(name, *args, **kwargs))
        return [results[i] for i in indices]

    def is_wrapped(self, wrapper_class: type, indices: list[int]) -> list[bool]:
        if self.can_apply:
            return self.apply(is_wrapped, indices, class_ref(wrapper_class))
        return [False] * len(indices)  # the wrapper chain cannot be inspected


def _apply_in_passes(apply: Callable[..., Any], fn: Callable[..., Any], indices: list[int],
                     args: tuple) -> list[Any]:
    """``apply`` over ``indices`` in order; an index given twice runs twice (SB3 allows that,
    vecenv's engine takes each env once per call), so repeats go in later passes."""
    if len(set(indices)) == len(indices):
        return list(apply(fn, *args, indices=indices))
    passes: list[list[int]] = []  # the k-th pass holds each index's k-th occurrence
    slots: list[tuple[int, int]] = []
    seen: dict[int, int] = {}
    for i in indices:
        k = seen.get(i, 0)
        seen[i] = k + 1
        if k == len(passes):
            passes.append([])
        slots.append((k, len(passes[k])))
        passes[k].append(i)
    results = [list(apply(fn, *args, indices=batch)) for batch in passes]
    return [results[k][j] for k, j in slots]


# --------------------------------------------------------------------------- info un-batching
_FINAL_KEYS = frozenset(("final_obs", "_final_obs", "final_info", "_final_info"))


def unbatch_info(infos: dict[str, Any], index: int, skip: frozenset[str] = frozenset()) -> dict:
    """Env ``index``'s info dict from gymnasium's batched infos (``_key`` masks, nested dicts)."""
    out: dict[str, Any] = {}
    for key, value in infos.items():
        if key in skip:
            continue
        mask = infos.get("_" + key)
        if mask is None:
            if key.startswith("_") and key[1:] in infos:
                continue  # a mask, not data
            mask_set = True  # unmasked data (some wrappers write plain lists)
        else:
            mask_set = bool(mask[index])
        if not mask_set:
            continue
        if isinstance(value, dict):
            out[key] = unbatch_info(value, index)
        else:
            item = value[index]
            out[key] = item.item() if isinstance(item, np.generic) else item
    return out


def unbatch_step_infos(infos: dict[str, Any], num_envs: int,
                       ended: np.ndarray) -> tuple[list[dict], list[tuple[int, Any, dict]]]:
    """Split SAME_STEP batched infos into per-env dicts and ``(index, final_obs, final_info)``
    for every env whose episode ended (its per-env dict is then the new episode's reset info)."""
    if not infos:
        per_env: list[dict] = [{} for _ in range(num_envs)]
    else:
        per_env = [unbatch_info(infos, i, _FINAL_KEYS) for i in range(num_envs)]
    finals: list[tuple[int, Any, dict]] = []
    if ended.any():
        final_obs = infos.get("final_obs")
        final_info = infos.get("final_info", {})
        for i in np.flatnonzero(ended).tolist():
            i = int(i)
            if final_obs is None:
                raise RuntimeError(
                    "An episode ended but the vector env reported no 'final_obs' info; "
                    "is it really in SAME_STEP autoreset mode?"
                )
            finals.append((i, final_obs[i], unbatch_info(final_info, i) if final_info else {}))
    return per_env, finals
