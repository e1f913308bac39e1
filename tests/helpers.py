"""Shared test helpers: value comparison and the backends under test."""

from __future__ import annotations

import importlib.util
import signal
from typing import Any

import numpy as np

import vecenv

#: extra constructor keywords per backend, so that multi-worker backends run several env groups
BACKEND_KWARGS: dict[str, dict[str, Any]] = {
    "serial": {},
    "thread": {"num_workers": 2},
    "process": {"num_workers": 2, "context": "fork"},
    "ray": {"num_workers": 2},
}


def backends_under_test() -> list[str]:
    """Every backend this installation can build (ray only when ray is installed)."""
    names = vecenv.available_backends()
    if "ray" in names and importlib.util.find_spec("ray") is None:
        names.remove("ray")
    return names


def make_backend(name: str, env_fns, **kwargs):
    """Build backend ``name`` over ``env_fns`` with the test defaults for it."""
    return vecenv.make(env_fns, backend=name, **{**BACKEND_KWARGS.get(name, {}), **kwargs})


def assert_same(a: Any, b: Any, path: str = "value", ignore: tuple[str, ...] = ()) -> None:
    """Assert two results are equal in structure, type, dtype and value (NaN-safe).

    Dict keys named in ``ignore`` (e.g. wall-clock times) are compared for presence only.
    """
    if isinstance(b, dict):
        assert isinstance(a, dict), f"{path}: {type(a).__name__} != dict"
        assert set(a) == set(b), f"{path}: keys {list(a)} != {list(b)}"
        for key in b:
            if key not in ignore:
                assert_same(a[key], b[key], f"{path}[{key!r}]", ignore)
    elif isinstance(b, tuple):
        assert isinstance(a, tuple) and len(a) == len(b), f"{path}: {a!r} != {b!r}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{path}[{i}]", ignore)
    elif isinstance(b, np.ndarray):
        assert isinstance(a, np.ndarray), f"{path}: {type(a).__name__} is not an ndarray"
        assert a.dtype == b.dtype, f"{path}: dtype {a.dtype} != {b.dtype}"
        assert a.shape == b.shape, f"{path}: shape {a.shape} != {b.shape}"
        if b.dtype == object:
            for i, (x, y) in enumerate(zip(a.tolist(), b.tolist(), strict=True)):
                assert_same(x, y, f"{path}[{i}]", ignore)
        else:
            assert np.array_equal(a, b, equal_nan=b.dtype.kind in "fc"), f"{path}: {a} != {b}"
    else:
        assert type(a) is type(b) or (np.isscalar(a) and np.isscalar(b)), f"{path}: {type(a)} != {type(b)}"
        assert a == b or (a != a and b != b), f"{path}: {a!r} != {b!r}"


class Alarm(KeyboardInterrupt):
    """A KeyboardInterrupt raised by :class:`RandomAlarms` at a random point."""


class RandomAlarms:
    """Owns SIGALRM while in a ``with`` block; :meth:`interrupted` runs a callable with one alarm
    set to go off after a random delay, raising :class:`Alarm` wherever it lands.

    Tests that use it must run under pytest-timeout's thread method (they own SIGALRM).
    """

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.armed = False

    def __enter__(self) -> RandomAlarms:
        self.old = signal.signal(signal.SIGALRM, self._raise)
        return self

    def __exit__(self, *exc: Any) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.old)

    def _raise(self, signum: int, frame: Any) -> None:
        if self.armed:  # a signal delivered after the run (deferred past its end) is dropped
            self.armed = False
            raise Alarm()

    def interrupted(self, run: Any, low: float, high: float) -> bool:
        """Run ``run()`` with an alarm due in ``[low, high)`` seconds; whether it landed."""
        try:
            self.armed = True
            signal.setitimer(signal.ITIMER_REAL, float(self.rng.uniform(low, high)))
            try:
                run()
            finally:
                self.armed = False
                signal.setitimer(signal.ITIMER_REAL, 0)
        except Alarm:
            return True
        return False
