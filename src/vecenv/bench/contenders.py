"""What ``vecenv bench`` measures: vecenv's backends and the installed peer libraries.

A :class:`Contender` builds a :class:`Driver` for one env and ``num_envs``; every driver steps
its vector env in the same tight loop with the same pre-generated actions, so the only thing
that differs between contenders is the vector env itself.
"""

from __future__ import annotations

import importlib.util
import math
import multiprocessing
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
from gymnasium.vector.utils import batch_space

import vecenv
from vecenv.bench.envs import EnvTarget
from vecenv.bench.puffer import (
    INSTALL,
    PUFFER_PEERS,
    build_puffer,
    puffer_close,
    puffer_reset,
    puffer_steps,
    puffer_unsupported,
)

#: peer name -> what it is (for --help and docs)
PEERS: dict[str, str] = {
    "gym-sync": "gymnasium.vector.SyncVectorEnv",
    "gym-async": "gymnasium.vector.AsyncVectorEnv",
    "sb3-dummy": "stable_baselines3 DummyVecEnv",
    "sb3-subproc": "stable_baselines3 SubprocVecEnv",
    "envpool": "envpool (gymnasium API)",
    **PUFFER_PEERS,
}

#: peer name -> the modules it needs
_PEER_MODULES: dict[str, tuple[str, ...]] = {
    "sb3-dummy": ("stable_baselines3",), "sb3-subproc": ("stable_baselines3",), "envpool": ("envpool",),
    **{name: ("pufferlib", "psutil") for name in PUFFER_PEERS},
}
#: peer name -> how to install what it needs, where ``pip install MODULE`` is not it
_PEER_INSTALL = dict.fromkeys(PUFFER_PEERS, INSTALL)
#: vecenv backend -> the optional module it needs
_BACKEND_MODULES = {"ray": "ray"}

#: distinct action batches pre-generated per measurement (cycled through)
POOL_SIZE = 64


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def peer_unavailable(name: str) -> str | None:
    """Why peer ``name`` cannot run here (None when it can)."""
    for module in _PEER_MODULES.get(name, ()):
        if not _installed(module):
            how = _PEER_INSTALL.get(name, f"pip install {module.replace('_', '-')}")
            return f"{module} is not installed ({how})"
    return None


def missing_backend_dependency(name: str) -> str | None:
    """Why vecenv backend ``name`` cannot run here although its class exists (None when it can)."""
    module = _BACKEND_MODULES.get(name)
    if module and not _installed(module):
        return f"backend {name!r} needs {module} (pip install 'vecenv[{module}]')"
    return None


#: backends run only when named (``--backends ray``): starting a local Ray instance takes
#: seconds and its daemons share the cores with the other contenders
OPT_IN_BACKENDS = ("ray",)


#: bench-only variants: ``auto`` is what ``vecenv.make`` builds by default (see
#: :mod:`vecenv.layout`); ``name+flag`` runs backend ``name`` with ``flag=True``
VARIANTS = {"auto": ("auto", {}), "process+inline": ("process", {"inline": True}),
            "process+affinity": ("process", {"affinity": True})}
#: the variants run when none are named (pinning is a choice for the machine at hand)
DEFAULT_VARIANTS = ("process+inline",)


def default_backends(variants: bool = False) -> list[str]:
    """The vecenv backends measured or checked when none are named (with ``variants``, also
    ``auto`` first and the variants of those backends, e.g. ``process+inline``)."""
    names = [
        b for b in vecenv.available_backends()
        if b not in OPT_IN_BACKENDS and missing_backend_dependency(b) is None
    ]
    if variants:
        names = ["auto", *names, *(v for v in DEFAULT_VARIANTS if VARIANTS[v][0] in names)]
    return names


def action_pool(action_space: gym.Space, rows: int, seed: int, size: int = POOL_SIZE) -> list[Any]:
    """``size`` batches of ``rows`` random actions, reproducible from ``seed``."""
    space = batch_space(action_space, rows)
    space.seed(seed)
    return [space.sample() for _ in range(size)]


class Driver:
    """One built vector env, stepped in a tight loop; subclasses adapt each library's API."""

    #: env steps one loop iteration makes
    per_iteration: int
    #: processes or threads stepping the envs (None when unknown)
    num_workers: int | None

    def __init__(self, envs: Any, actions: list[Any], per_iteration: int, num_workers: int | None):
        self.envs = envs
        self.actions = actions
        self.per_iteration = per_iteration
        self.num_workers = num_workers

    def reset(self, seed: int) -> None:
        """Reset every env, env ``i`` with ``seed + i``."""
        self.envs.reset(seed=seed)

    def run(self, iterations: int, deadline: float) -> int:
        """Step until ``iterations`` steps are done or ``deadline`` (perf_counter) passes."""
        step, actions, k, now = self.envs.step, self.actions, len(self.actions), time.perf_counter
        i = 0
        while i < iterations:
            step(actions[i % k])
            i += 1
            if now() >= deadline:
                break
        return i

    def close(self) -> None:
        """Close the vector env (errors while closing are ignored: a failure is reported already)."""
        try:
            self.envs.close()
        except Exception:
            pass


class _BatchDriver(Driver):
    """vecenv's async-batch mode: ``send`` to the envs the last ``recv`` returned."""

    def reset(self, seed: int) -> None:
        _, infos = self.envs.reset(seed=seed)
        self._ids = infos["env_id"]

    def run(self, iterations: int, deadline: float) -> int:
        send, recv, actions, k = self.envs.send, self.envs.recv, self.actions, len(self.actions)
        now, ids, i = time.perf_counter, self._ids, 0
        while i < iterations:
            send(actions[i % k], ids)
            ids = recv()[4]["env_id"]
            i += 1
            if now() >= deadline:
                break
        self._ids = ids
        return i


class _SB3Driver(Driver):
    """Stable-Baselines3's VecEnv API: ``seed`` then ``reset``; 4-tuple steps."""

    def reset(self, seed: int) -> None:
        self.envs.seed(seed)
        self.envs.reset()


@dataclass(frozen=True)
class Contender:
    """One thing to measure: a vecenv backend (optionally in async-batch mode) or a peer."""

    #: label in tables and JSON: ``vecenv/serial``, ``vecenv/process[b=4]``, ``gym-sync``...
    name: str
    #: ``"vecenv"`` or ``"peer"``
    kind: str
    #: vecenv backend name, or the peer's name
    backend: str
    batch_size: int | None = None
    #: extra keyword arguments for the vecenv backend
    options: tuple[tuple[str, Any], ...] = ()

    def build(self, target: EnvTarget, num_envs: int, seed: int) -> Driver:
        """Build the vector env and its driver (the caller closes it)."""
        builder = _BUILDERS[self.backend] if self.kind == "peer" else _build_vecenv
        return builder(self, target, num_envs, seed)

    def supports(self, target: EnvTarget, num_envs: int | None = None) -> str | None:
        """Why this contender cannot run ``target`` (at ``num_envs``, when given; None when it can)."""
        if self.kind == "peer" and self.backend in PUFFER_PEERS:
            workers = dict(self.options).get("num_workers")
            return puffer_unsupported(self.backend, target, num_envs, self.batch_size, workers)
        if self.backend == "envpool":
            if target.gym_id is None or target.kwargs:
                return "envpool runs its own registered ids only"
            import envpool

            if target.gym_id not in envpool.list_all_envs():
                return f"envpool has no {target.gym_id}"
        return None


def vecenv_contender(backend: str, batch_size: int | None = None, **options: Any) -> Contender:
    """A contender for vecenv backend ``backend`` (or a variant such as ``process+inline``)."""
    name = f"vecenv/{backend}" + (f"[b={batch_size}]" if batch_size else "")
    if backend in VARIANTS:
        backend, extra = VARIANTS[backend]
        options = {**extra, **options}
    return Contender(name, "vecenv", backend, batch_size, tuple(sorted(options.items())))


def peer_contender(name: str, batch_size: int | None = None, num_workers: int | None = None) -> Contender:
    """A contender for peer ``name`` (one of :data:`PEERS`).

    ``batch_size`` and ``num_workers`` are PufferLib's (``pufferlib-mp``, ``pufferlib-async``):
    by default, the workers PufferLib accepts here and, for ``pufferlib-async``, ``num_envs // 2``.
    """
    if name not in PEERS:
        raise ValueError(f"unknown peer {name!r}: expected one of {list(PEERS)}")
    if (batch_size is not None or num_workers is not None) and name not in ("pufferlib-mp", "pufferlib-async"):
        raise ValueError(f"peer {name!r} takes no batch_size or num_workers (PufferLib's "
                         "Multiprocessing peers do)")
    label = name + (f"[b={batch_size}]" if batch_size else "") + (f"[w={num_workers}]" if num_workers else "")
    options = (("num_workers", num_workers),) if num_workers else ()
    return Contender(label, "peer", name, batch_size, options)


# ==================================================================== builders
def _guarded(make: Callable[[], Any], finish: Callable[[Any], Driver]) -> Driver:
    """``finish(make())``, closing what ``make`` built if ``finish`` fails."""
    envs = make()
    try:
        return finish(envs)
    except BaseException:
        try:
            envs.close()
        except Exception:
            pass
        raise


def _build_vecenv(c: Contender, target: EnvTarget, n: int, seed: int) -> Driver:
    kwargs = dict(c.options)
    if c.batch_size:
        kwargs["batch_size"] = c.batch_size
    env_fns = [target.env_fn] * n

    def finish(envs: vecenv.VectorEnv) -> Driver:
        rows = c.batch_size or n
        actions = action_pool(envs.single_action_space, rows, seed)
        cls = _BatchDriver if c.batch_size else Driver
        return cls(envs, actions, rows, getattr(envs, "num_workers", None))

    return _guarded(lambda: vecenv.make(env_fns, backend=c.backend, **kwargs), finish)


def sb3_start_method() -> str:
    """The start method for SB3's SubprocVecEnv: the one gymnasium's AsyncVectorEnv gets (SB3
    would pick forkserver, whose workers each re-import torch)."""
    return multiprocessing.get_start_method()


class _EnvPoolDriver(Driver):
    """EnvPool seeds its envs at make."""

    def reset(self, seed: int) -> None:
        self.envs.reset()


def _sb3(name: str) -> Any:
    return getattr(importlib.import_module("stable_baselines3.common.vec_env"), name)


#: peer -> (build its vector env from (target, n, seed), driver class, workers for n envs);
#: SB3 and EnvPool show one env's action space, gymnasium a batch's
_PLAIN_PEERS: dict[str, tuple[Callable[[EnvTarget, int, int], Any], type[Driver], Callable[[int], int | None]]] = {
    "gym-sync": (lambda t, n, s: gym.vector.SyncVectorEnv([t.env_fn] * n), Driver, lambda n: 1),
    "gym-async": (lambda t, n, s: gym.vector.AsyncVectorEnv([t.env_fn] * n), Driver, lambda n: n),
    "sb3-dummy": (lambda t, n, s: _sb3("DummyVecEnv")([t.env_fn] * n), _SB3Driver, lambda n: 1),
    "sb3-subproc": (
        lambda t, n, s: _sb3("SubprocVecEnv")([t.env_fn] * n, start_method=sb3_start_method()),
        _SB3Driver, lambda n: n,
    ),
    "envpool": (
        lambda t, n, s: importlib.import_module("envpool").make_gymnasium(t.gym_id, num_envs=n, seed=s),
        _EnvPoolDriver, lambda n: None,
    ),
}


def _build_plain_peer(c: Contender, target: EnvTarget, n: int, seed: int) -> Driver:
    make, driver, workers = _PLAIN_PEERS[c.backend]

    def finish(envs: Any) -> Driver:
        space = envs.single_action_space if c.backend.startswith("gym-") else envs.action_space
        return driver(envs, action_pool(space, n, seed), n, workers(n))

    return _guarded(lambda: make(target, n, seed), finish)


class _PufferDriver(Driver):
    """PufferLib's ``pufferlib.vector`` API: ``async_reset(seed)`` + ``recv()``, then ``send`` /
    ``recv``; a watchdog bounds every wait on its Multiprocessing workers (:mod:`vecenv.bench.puffer`)."""

    def __init__(self, envs: Any, actions: list[Any], per_iteration: int, num_workers: int | None,
                 watch: Any) -> None:
        super().__init__(envs, actions, per_iteration, num_workers)
        self.watch = watch

    def reset(self, seed: int) -> None:
        puffer_reset(self.envs, seed, self.watch)

    def run(self, iterations: int, deadline: float) -> int:
        return puffer_steps(self.envs, self.actions, iterations, deadline, self.watch)

    def close(self) -> None:
        try:
            puffer_close(self.envs, self.watch)
        except Exception:
            pass


def _build_puffer(c: Contender, target: EnvTarget, n: int, seed: int) -> Driver:
    workers = dict(c.options).get("num_workers")
    envs, rows, used, watch = build_puffer(c.backend, target, n, seed, c.batch_size, workers)
    try:
        return _PufferDriver(envs, action_pool(envs.single_action_space, rows, seed), rows, used, watch)
    except BaseException:
        puffer_close(envs, watch)
        raise


_BUILDERS: dict[str, Callable[[Contender, EnvTarget, int, int], Driver]] = {
    **dict.fromkeys(_PLAIN_PEERS, _build_plain_peer),
    **dict.fromkeys(PUFFER_PEERS, _build_puffer),
}


def iterations_for(env_steps: int | None, per_iteration: int) -> int:
    """Loop iterations that make at least ``env_steps`` env steps (unbounded when None)."""
    if env_steps is None:
        return 2**62
    return max(1, math.ceil(env_steps / per_iteration))


def first_line(exc: BaseException) -> str:
    """``Type: first line of the message`` — short enough for a table cell."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
