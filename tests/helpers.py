"""Shared test helpers: value comparison and the backends under test."""

from __future__ import annotations

import importlib.util
import multiprocessing
import signal
import sys
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import vecenv
from vecenv.transports.process import unavailable
from vecenv.transports.process.mechanism import choose_mechanism


class PlainEnv(gym.Env):
    """Two zero floats an observation, reward 0, episodes that never end: a base for envs that
    plant one behaviour (a fork, a hang, a slow close)."""

    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, False, False, {}


#: extra constructor keywords per backend, so that multi-worker backends run several env groups
#: the quickest way to start a worker here: fork where there is one (Linux), else spawn (Windows)
FAST_START = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"

BACKEND_KWARGS: dict[str, dict[str, Any]] = {
    "serial": {},
    "thread": {"num_workers": 2},
    "process": {"num_workers": 2, "context": FAST_START},
    "ray": {"num_workers": 2},
}


#: backend -> (the module it needs beyond vecenv's core, the extra that installs it)
BACKEND_EXTRAS: dict[str, tuple[str, str]] = {"ray": ("ray", "vecenv[ray]")}


#: the process transport's mechanism in this run (VECENV_PROCESS_MECHANISM picks it)
MECHANISM = choose_mechanism().name
#: a test of the POSIX mechanism's own means (memfd, descriptors), not of the protocol
posix_mechanism_only = pytest.mark.skipif(
    MECHANISM != "posix", reason=f"tests the POSIX mechanism's own means; this run uses {MECHANISM!r}")

#: a test that needs vecenv's worker processes (skipped, with the reason, where they cannot run)
needs_processes = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))


def backends_under_test() -> list[str]:
    """Every backend vecenv has; one whose extra is not installed is skipped by
    :func:`use_backend`, visibly, never dropped from the list."""
    return vecenv.available_backends()


def missing_extra(name: str) -> str | None:
    """Why backend ``name`` cannot run in this installation, or None when it can."""
    module, extra = BACKEND_EXTRAS.get(name, (None, None))
    if module is not None and importlib.util.find_spec(module) is None:
        return f"the {name} backend needs {module}, which is not installed (pip install '{extra}')"
    return None


def use_backend(request: Any, name: str) -> str:
    """The one rule for a test on backend ``name``: skip (visibly, with the reason) when its extra
    is not installed; on ray, use the shared local Ray of the ``ray_local`` fixture."""
    reason = missing_extra(name)
    if reason is None and name in ("process", "inline"):
        reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    if name == "ray":
        request.getfixturevalue("ray_local")
    return name


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
    elif isinstance(b, (tuple, list)):
        kind = tuple if isinstance(b, tuple) else list
        assert isinstance(a, kind) and len(a) == len(b), f"{path}: {a!r} != {b!r}"
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


def assert_same_infos(ours: Any, theirs: Any, path: str) -> None:
    """:func:`assert_same`, plus the keys' order in every dict (gymnasium's infos keep the order
    in which the envs set their keys)."""
    assert_same(ours, theirs, path)
    if isinstance(theirs, dict):
        assert list(ours) == list(theirs), f"{path}: key order {list(ours)} != {list(theirs)}"
        for key, value in theirs.items():
            if isinstance(value, dict):
                assert_same_infos(ours[key], value, f"{path}[{key!r}]")


def assert_same_runs(got: list, expected: list, label: str = "") -> None:
    """Every result of two runs (lists of reset/step tuples) alike, infos' key order included."""
    for t, (theirs, mine) in enumerate(zip(expected, got, strict=True)):
        for k, (a, b) in enumerate(zip(mine, theirs, strict=True)):
            assert_same_infos(a, b, f"{label}step {t} item {k}")


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


# ---------------------------------------------------------------- interpreter exit without close()
#: a program that builds a vector env, prints its workers' pids and exits without close()
EXIT_WITHOUT_CLOSE = '''
import functools, os, sys, time
import gymnasium as gym
import numpy as np
import vecenv


class Env(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, folder, hang):
        self.folder, self.hang = folder, hang

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        if self.hang:
            time.sleep(3600)
        return np.zeros(2, np.float32), 0.0, False, False, {}

    def close(self):  # leaves a mark: the env was closed, not just killed with its worker
        open(os.path.join(self.folder, f"closed-{os.getpid()}-{id(self)}"), "w").close()


def make(folder, hang):
    return Env(folder, hang)


def getpid(env):
    return os.getpid()


if __name__ == "__main__":
    backend, context, state, folder = sys.argv[1:5]
    if backend == "ray":
        kwargs = {"ray_init_kwargs": {"num_cpus": 2, "log_to_driver": False}}
    else:
        kwargs = {"context": context}
    ENVS = vecenv.make([functools.partial(make, folder, state == "hung")] * 4, backend=backend,
                       num_workers=2, **kwargs)
    ENVS.reset(seed=0)
    print(" ".join(map(str, sorted(set(ENVS.apply(getpid))))), flush=True)
    if state != "idle":  # a step in flight; "hung": one that never ends
        ENVS.step_async(np.zeros(4, np.int64))
    # no close(): the interpreter exits with ENVS still referenced
'''


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not count)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def exit_without_close(tmp_path: Any, backend: str, context: str, state: str, timeout: float = 90):
    """Run :data:`EXIT_WITHOUT_CLOSE`; return (completed process, worker pids, envs closed)."""
    import os
    import subprocess
    import sys

    script = tmp_path / "exit_without_close.py"
    script.write_text(EXIT_WITHOUT_CLOSE)
    marks = tmp_path / "marks"
    marks.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run([sys.executable, str(script), backend, context, state, str(marks)],
                          capture_output=True, text=True, timeout=timeout, env=env)
    first = done.stdout.splitlines()[:1]
    pids = [int(p) for p in first[0].split()] if first else []
    return done, pids, len(os.listdir(marks))


def load_benchmark(name: str) -> Any:
    """The script ``benchmarks/<name>.py`` imported as the module ``_bench_<name>``."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
