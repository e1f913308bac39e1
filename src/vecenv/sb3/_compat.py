"""Make SB3 recognise vecenv's classes without importing SB3 (or torch) ourselves.

SB3's ``VecEnv`` is an ``abc.ABC``, so ``SB3Class.register(OurClass)`` makes
``isinstance(our_venv, SB3Class)`` true. Registration happens as soon as SB3's ``vec_env``
package exists in the process:

* at ``import vecenv.sb3`` and at every VecEnv construction, if SB3 is already imported;
* otherwise a one-shot import hook registers right after SB3's ``vec_env`` package has
  finished loading, so ``PPO("MlpPolicy", venv)`` works even when SB3 is imported later.

The hook only compares module names and steps aside once it has fired.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from typing import Any

_SB3_VEC_ENV = "stable_baselines3.common.vec_env"

#: the classes of vecenv.sb3 registered under SB3's class of the same name
_NAMES = ("VecEnv", "VecEnvWrapper", "DummyVecEnv", "SubprocVecEnv", "VecFrameStack", "VecNormalize",
          "VecTransposeImage", "VecMonitor", "VecCheckNan", "VecExtractDictObs", "VecVideoRecorder")

_lock = threading.Lock()
_registered = False


def register_if_loaded() -> bool:
    """Register vecenv's classes with SB3 if SB3's ``vec_env`` package is loaded; idempotent."""
    global _registered
    if _registered:
        return True
    sb3 = sys.modules.get(_SB3_VEC_ENV)
    if sb3 is None or getattr(sb3, "VecEnv", None) is None:
        return False  # not imported, or still being imported
    ours = importlib.import_module("vecenv.sb3")
    with _lock:
        if _registered:
            return True
        for name in _NAMES:
            sb3_cls = getattr(sb3, name, None)
            if sb3_cls is not None and hasattr(sb3_cls, "register"):
                sb3_cls.register(getattr(ours, name))
        _registered = True
    _remove_hook()
    return True


class _LoaderProxy(importlib.abc.Loader):
    """Delegates to the real loader, then registers once the module has executed."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        register_if_loaded()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _SB3ImportHook(importlib.abc.MetaPathFinder):
    """Meta-path finder that wraps the loader of SB3's ``vec_env`` package; finds nothing else."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != _SB3_VEC_ENV:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _LoaderProxy(spec.loader)
                return spec
        return None


_hook = _SB3ImportHook()


def install_hook() -> None:
    """Register now if SB3 is loaded, else arrange to register when it gets imported."""
    if register_if_loaded():
        return
    if _hook not in sys.meta_path:
        sys.meta_path.insert(0, _hook)


def _remove_hook() -> None:
    try:
        sys.meta_path.remove(_hook)
    except ValueError:
        pass
