"""What ``vecenv bench`` measures: vecenv's backends and the installed peer libraries, each
built into a :class:`Driver` that steps its vector env in the same tight loop with the same
pre-generated actions, so that only the vector env differs between contenders."""

from __future__ import annotations

import contextlib
import importlib.util
import math
import multiprocessing
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
from gymnasium.vector.utils import batch_space

import vecenv
from vecenv.bench.envs import EnvTarget
from vecenv.bench.puffer import (
    INSTALL,
    PUFFER_PEERS,
    PufferLibFailure,
    build_puffer,
    import_pufferlib,
    puffer_close,
    puffer_layout,
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
            how = INSTALL if name in PUFFER_PEERS else f"pip install {module.replace('_', '-')}"
            return f"{module} is not installed ({how})"
    return None


def missing_backend_dependency(name: str) -> str | None:
    """Why vecenv backend ``name`` cannot run here although its class exists (None when it can)."""
    if name == "ray" and not _installed("ray"):  # the one backend with an optional module
        return "backend 'ray' needs ray (pip install 'vecenv[ray]')"
    return None


#: backends run only when named (``--backends ray``): a local Ray instance takes seconds to
#: start and its daemons share the cores with the other contenders
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


def _gym_reset(envs: Any, seed: int) -> Any:
    return envs.reset(seed=seed)


class Driver:
    """One built vector env, stepped in a tight loop; ``reset_with`` adapts a library's reset."""

    def __init__(self, envs: Any, actions: list[Any], per_iteration: int, num_workers: int | None,
                 reset_with: Callable[[Any, int], Any] = _gym_reset) -> None:
        self.envs = envs
        self.actions = actions
        #: env steps one loop iteration makes
        self.per_iteration = per_iteration
        #: processes or threads stepping the envs (None when unknown)
        self.num_workers = num_workers
        self._reset_with = reset_with

    def reset(self, seed: int) -> None:
        """Reset every env, env ``i`` with ``seed + i``."""
        self._reset_with(self.envs, seed)

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
        with contextlib.suppress(Exception):
            self.envs.close()


class BatchDriver(Driver):
    """An async-batch loop (vecenv's, EnvPool's, ale_py's): ``send`` to the envs the last ``recv``
    returned; ``reset_with`` returns ``(observations, infos)`` with their ``env_id``, and
    ``with_ids=False`` for a ``send`` that takes no ids (ale_py's)."""

    def __init__(self, envs: Any, actions: list[Any], per_iteration: int, num_workers: int | None,
                 reset_with: Callable[[Any, int], Any] = _gym_reset, with_ids: bool = True) -> None:
        super().__init__(envs, actions, per_iteration, num_workers, reset_with)
        self.with_ids = with_ids

    def reset(self, seed: int) -> None:
        self._ids = self._reset_with(self.envs, seed)[1]["env_id"]

    def run(self, iterations: int, deadline: float) -> int:
        send, recv, actions, k = self.envs.send, self.envs.recv, self.actions, len(self.actions)
        now, ids, i, with_ids = time.perf_counter, self._ids, 0, self.with_ids
        while i < iterations:
            if with_ids:
                send(actions[i % k], ids)
            else:
                send(actions[i % k])
            ids = recv()[4]["env_id"]
            i += 1
            if now() >= deadline:
                break
        self._ids = ids
        return i


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
            import_pufferlib()  # an ImportError: the runner reports its first line as the reason
            workers = dict(self.options).get("num_workers")
            try:
                if num_envs is not None:
                    puffer_layout(self.backend, num_envs, self.batch_size, workers)
            except ValueError as exc:
                return str(exc)
            return None
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
    """A contender for peer ``name`` (one of :data:`PEERS`); ``batch_size`` and ``num_workers``
    are PufferLib's Multiprocessing peers' (default: what PufferLib accepts here)."""
    if name not in PEERS:
        raise ValueError(f"unknown peer {name!r}: expected one of {list(PEERS)}")
    if (batch_size is not None or num_workers is not None) and name not in ("pufferlib-mp", "pufferlib-async"):
        raise ValueError(f"peer {name!r} takes no batch_size or num_workers (PufferLib's "
                         "Multiprocessing peers do)")
    label = name + (f"[b={batch_size}]" if batch_size else "") + (f"[w={num_workers}]" if num_workers else "")
    options = (("num_workers", num_workers),) if num_workers else ()
    return Contender(label, "peer", name, batch_size, options)


# ==================================================================== builders
@contextlib.contextmanager
def _closed_on_error(envs: Any) -> Iterator[None]:
    """Close ``envs`` if building its driver fails."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            envs.close()
        raise


def _build_vecenv(c: Contender, target: EnvTarget, n: int, seed: int) -> Driver:
    kwargs = dict(c.options)
    if c.batch_size:
        kwargs["batch_size"] = c.batch_size
    envs = vecenv.make([target.env_fn] * n, backend=c.backend, **kwargs)
    rows = c.batch_size or n
    with _closed_on_error(envs):
        actions = action_pool(envs.single_action_space, rows, seed)
        cls = BatchDriver if c.batch_size else Driver
        return cls(envs, actions, rows, getattr(envs, "num_workers", None))


def _sb3(name: str) -> Any:
    return getattr(importlib.import_module("stable_baselines3.common.vec_env"), name)


def _sb3_reset(envs: Any, seed: int) -> None:
    envs.seed(seed)  # SB3's VecEnv API: seed, then reset
    envs.reset()


#: peer -> (build its vector env from (target, n, seed), its reset, workers for n envs);
#: EnvPool seeds its envs at make
_Peer = tuple[Callable[[EnvTarget, int, int], Any], Callable[[Any, int], Any], Callable[[int], int | None]]
_PLAIN_PEERS: dict[str, _Peer] = {
    "gym-sync": (lambda t, n, s: gym.vector.SyncVectorEnv([t.env_fn] * n), _gym_reset,
                 lambda n: 1),
    "gym-async": (lambda t, n, s: gym.vector.AsyncVectorEnv([t.env_fn] * n), _gym_reset,
                  lambda n: n),
    "sb3-dummy": (lambda t, n, s: _sb3("DummyVecEnv")([t.env_fn] * n), _sb3_reset, lambda n: 1),
    "sb3-subproc": (  # the start method AsyncVectorEnv gets (SB3's forkserver re-imports torch)
        lambda t, n, s: _sb3("SubprocVecEnv")([t.env_fn] * n, start_method=multiprocessing.get_start_method()),
        _sb3_reset, lambda n: n,
    ),
    "envpool": (
        lambda t, n, s: importlib.import_module("envpool").make_gymnasium(t.gym_id, num_envs=n, seed=s),
        lambda envs, seed: envs.reset(), lambda n: None,
    ),
}


def _build_plain_peer(c: Contender, target: EnvTarget, n: int, seed: int) -> Driver:
    make, reset_with, workers = _PLAIN_PEERS[c.backend]
    envs = make(target, n, seed)
    with _closed_on_error(envs):  # SB3 and EnvPool show one env's action space, gymnasium a batch's
        space = envs.single_action_space if c.backend.startswith("gym-") else envs.action_space
        return Driver(envs, action_pool(space, n, seed), n, workers(n), reset_with)


class _PufferDriver(Driver):
    """PufferLib's ``pufferlib.vector`` API: ``async_reset(seed)`` + ``recv()``, then ``send`` /
    ``recv``; a watchdog bounds every wait on its Multiprocessing workers (:mod:`vecenv.bench.puffer`)."""

    def __init__(self, envs: Any, actions: list[Any], per_iteration: int, num_workers: int | None,
                 watch: Any) -> None:
        super().__init__(envs, actions, per_iteration, num_workers)
        self.watch = watch

    def reset(self, seed: int) -> None:
        self.envs.async_reset(seed)
        self.envs.recv()
        if self.watch is not None and self.watch.failed is not None:
            raise PufferLibFailure(self.watch.failed)

    def run(self, iterations: int, deadline: float) -> int:
        send, recv, k, now, i = self.envs.send, self.envs.recv, len(self.actions), time.perf_counter, 0
        watch = self.watch
        while i < iterations:
            send(self.actions[i % k])
            recv()
            i += 1
            if watch is not None:
                if watch.failed is not None:
                    raise PufferLibFailure(watch.failed)
                watch.beat = i
            if now() >= deadline:
                break
        return i

    def close(self) -> None:
        with contextlib.suppress(Exception):
            puffer_close(self.envs, self.watch)


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
