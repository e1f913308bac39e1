"""Make SB3 recognise vecenv's classes without importing SB3 (or torch) ourselves.

SB3's ``VecEnv`` is an ``abc.ABC``, so ``SB3Class.register(OurClass)`` makes ``isinstance`` true.
Registration runs at ``import vecenv.sb3`` and at every VecEnv construction if SB3's ``vec_env``
package is loaded; otherwise a one-shot import hook runs it right after that package has loaded,
so ``PPO("MlpPolicy", venv)`` works even when SB3 is imported later.
"""

from __future__ import annotations

import importlib.abc
import sys
from typing import Any

_SB3_VEC_ENV = "stable_baselines3.common.vec_env"
#: the classes of vecenv.sb3 registered under SB3's class of the same name
_NAMES = ("VecEnv", "VecEnvWrapper", "DummyVecEnv", "SubprocVecEnv", "VecFrameStack",
          "VecNormalize", "VecTransposeImage", "VecMonitor", "VecCheckNan", "VecExtractDictObs",
          "VecVideoRecorder")
_registered = False


def register_if_loaded() -> bool:
    """Register vecenv's classes with SB3 if SB3's ``vec_env`` package is loaded; idempotent."""
    global _registered
    sb3 = sys.modules.get(_SB3_VEC_ENV)
    if _registered or getattr(sb3, "VecEnv", None) is None:
        return _registered  # done already, or SB3 not imported (or still being imported)
    ours = importlib.import_module("vecenv.sb3")
    for name in _NAMES:
        if hasattr(getattr(sb3, name, None), "register"):
            getattr(sb3, name).register(getattr(ours, name))
    _registered = True
    if _hook in sys.meta_path:
        sys.meta_path.remove(_hook)
    return True


class _LoaderProxy(importlib.abc.Loader):
    """Delegates to the real loader, then registers once the module has executed."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        register_if_loaded()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _SB3ImportHook(importlib.abc.MetaPathFinder):
    """Wraps the loader of SB3's ``vec_env`` package in a :class:`_LoaderProxy`, finds nothing."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != _SB3_VEC_ENV:
            return None
        for finder in sys.meta_path:
            find = None if finder is self else getattr(finder, "find_spec", None)
            spec = None if find is None else find(fullname, path, target)
            if spec is not None:
                if hasattr(spec.loader, "exec_module"):
                    spec.loader = _LoaderProxy(spec.loader)
                return spec
        return None


_hook = _SB3ImportHook()


def install_hook() -> None:
    """Register now if SB3 is loaded, else arrange to register when it gets imported."""
    if not register_if_loaded() and _hook not in sys.meta_path:
        sys.meta_path.insert(0, _hook)
