"""The vector env classes users build, one per transport, all sharing the engine.

Every class takes the failure policy's keywords (``on_error``, ``max_restarts``,
``restart_window``, ``step_timeout``; see :class:`vecenv.FailurePolicy`) and passes them to the
engine, which validates them once.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from typing_extensions import Unpack

from vecenv.engine import VectorEnv, usable_cores
from vecenv.engine.transport import DEFAULT_START_TIMEOUT
from vecenv.policy import FailureOptions
from vecenv.transports import InlineTransport, ProcessTransport, SerialTransport, ThreadTransport
from vecenv.transports.ray_actors import RayTransport, import_ray

__all__ = [
    "AsyncVectorEnv",
    "ProcessVectorEnv",
    "RayVectorEnv",
    "SerialVectorEnv",
    "SyncVectorEnv",
    "ThreadVectorEnv",
]

ObservationMode = str | tuple[spaces.Space, spaces.Space]


def _start_timeout(value: Any) -> float | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
        raise ValueError(f"start_timeout: expected a number of seconds > 0 or None, got {value!r}")
    return value


def _count(env_fns: Any) -> int:
    try:
        return max(1, len(env_fns))
    except TypeError:
        return 1  # the engine reports what env_fns should be


class SerialVectorEnv(VectorEnv):
    """Steps every env in the caller's process, one after the other.

    The fastest choice for cheap envs on one core, and the reference the other backends are
    tested against. Same constructor as ``gymnasium.vector.SyncVectorEnv``; ``envs`` gives the
    sub-env objects.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        copy: bool = True,
        observation_mode: ObservationMode = "same",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        *,
        batch_size: int | None = None,
        **failure: Unpack[FailureOptions],
    ) -> None:
        super().__init__(env_fns, SerialTransport(), num_workers=1, batch_size=batch_size, copy=copy,
                         observation_mode=observation_mode, autoreset_mode=autoreset_mode, **failure)


#: Drop-in name for ``gymnasium.vector.SyncVectorEnv``.
SyncVectorEnv = SerialVectorEnv


class ThreadVectorEnv(VectorEnv):
    """Env groups on a pool of threads, one thread per worker, stepping in parallel.

    The right choice when a step releases the GIL (C/C++ simulators, numpy-heavy steps) and on
    free-threaded Python: no process boundary, no copies. Pure-Python steps under the GIL gain
    nothing from threads: use processes. Threads cannot be interrupted, so ``step_timeout`` is
    refused.

    Args:
        env_fns: one callable per env, each returning a fresh env.
        num_workers: threads (env groups); default the usable cores, at most ``num_envs``.
        batch_size: ``< num_envs`` for async batches (:meth:`send` / :meth:`recv`).
        copy, observation_mode, autoreset_mode: as in gymnasium.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        *,
        num_workers: int | None = None,
        batch_size: int | None = None,
        copy: bool = True,
        observation_mode: ObservationMode = "same",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        **failure: Unpack[FailureOptions],
    ) -> None:
        super().__init__(env_fns, ThreadTransport(), num_workers=num_workers or usable_cores(),
                         batch_size=batch_size, copy=copy, observation_mode=observation_mode,
                         autoreset_mode=autoreset_mode, **failure)


class ProcessVectorEnv(VectorEnv):
    """Steps the envs in worker processes, several envs per worker, results in shared memory.

    Args:
        env_fns: one callable per env, each returning a fresh ``gymnasium.Env``.
        num_workers: env groups (default: the usable cores, at most ``len(env_fns)``); the envs
            are split into contiguous groups, one group per worker process.
        batch_size: for async batches: :meth:`recv` returns the first ``batch_size`` envs to finish
            (with ``infos["env_id"]``); default ``len(env_fns)`` (synchronous).
        context: multiprocessing start method (``"fork"``, ``"spawn"``, ``"forkserver"``) or
            context; default: the platform default. With spawn/forkserver the env_fns travel with
            cloudpickle.
        shared_memory: accepted for gymnasium compatibility; fixed-shape arrays always travel in
            shared memory and custom-space leaves are pickled, whatever its value.
        copy: return copies of the observations (default); ``False`` returns views into shared
            memory that stay valid until the next step/recv.
        daemon: make the workers daemonic (ended when the main process exits).
        observation_mode, autoreset_mode: as in gymnasium.
        spin_us: how long each side busy-spins before yielding (default: 50 when every process
            has its own core, else 0).
        yield_us: how long each side then keeps calling ``sched_yield()`` before it blocks in the
            kernel (default 500).
        inline: step the last env group in this process, during ``step`` itself, while the worker
            processes step theirs (``num_workers=2, inline=True`` is one worker process plus this
            one). Faster for cheap envs on few cores; the inline envs lose crash isolation and
            ``step_timeout`` cannot end them. Default ``False``.
        start_timeout: seconds a worker may take to build its envs (at start and on every
            rebuild) before it is ended and :class:`vecenv.errors.StepTimeoutError` names it;
            ``None`` waits as long as it takes. Default 120.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        *,
        num_workers: int | None = None,
        batch_size: int | None = None,
        context: str | multiprocessing.context.BaseContext | None = None,
        shared_memory: bool = True,
        copy: bool = True,
        daemon: bool = True,
        observation_mode: ObservationMode = "same",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        spin_us: float | None = None,
        yield_us: float | None = None,
        inline: bool = False,
        start_timeout: float | None = DEFAULT_START_TIMEOUT,
        **failure: Unpack[FailureOptions],
    ) -> None:
        self.shared_memory = shared_memory
        self.context = context
        self.daemon = daemon
        processes = ProcessTransport(context, daemon, spin_us=spin_us, yield_us=yield_us,
                                     start_timeout=_start_timeout(start_timeout))
        transport = InlineTransport(processes) if inline else processes
        super().__init__(env_fns, transport, num_workers=num_workers or min(usable_cores(), _count(env_fns)),
                         batch_size=batch_size, copy=copy, observation_mode=observation_mode,
                         autoreset_mode=autoreset_mode, **failure)

    @property
    def processes(self) -> list[Any]:
        """The worker processes (``multiprocessing.Process``), one per env group (but an inline one)."""
        return list(self._transport.processes)


class AsyncVectorEnv(ProcessVectorEnv):
    """Drop-in for ``gymnasium.vector.AsyncVectorEnv``: same constructor, same behaviour.

    Like gymnasium it runs one env per worker process unless ``num_workers`` is given; pass
    ``num_workers`` (e.g. the number of cores) to group envs and pay one round trip per worker.
    gymnasium's custom ``worker`` function is not supported.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        shared_memory: bool = True,
        copy: bool = True,
        context: str | None = None,
        daemon: bool = True,
        worker: Callable | None = None,
        observation_mode: ObservationMode = "same",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        *,
        num_workers: int | None = None,
        **options: Any,
    ) -> None:
        if worker is not None:
            raise NotImplementedError(
                "AsyncVectorEnv(worker=...): vecenv runs its own worker loop; custom worker "
                "functions are not supported"
            )
        super().__init__(env_fns, num_workers=num_workers or _count(env_fns), context=context,
                         shared_memory=shared_memory, copy=copy, daemon=daemon,
                         observation_mode=observation_mode, autoreset_mode=autoreset_mode, **options)


class RayVectorEnv(VectorEnv):
    """Env groups as Ray actors: many envs per actor, across the cores of a Ray cluster.

    Ray is started locally when none is running (and shut down again at :meth:`close`);
    ``address="auto"`` (or ``"ray://..."``) joins an existing cluster, which is left running.

    Args:
        env_fns: one callable per env (pickled with cloudpickle and sent to the actors).
        num_workers: actors (env groups); default as many as the cluster's CPUs fit, at most
            ``num_envs``.
        num_cpus_per_worker: CPUs Ray reserves for each actor (may be fractional).
        address: Ray cluster to join (``"auto"``, ``"ray://host:10001"``...); ``None`` starts a
            local Ray unless one is already initialised.
        ray_init_kwargs: extra keywords for ``ray.init`` (e.g. ``{"num_cpus": 8}``, ``runtime_env``).
        start_timeout: seconds the actors may take to be placed and build their envs (at start and
            on a restart) before :class:`vecenv.errors.StepTimeoutError` says which did not;
            ``None`` waits as long as it takes (an autoscaling cluster adding nodes).
        batch_size: ``< num_envs`` for async batches; slow actors stop holding fast ones back.
        copy, observation_mode, autoreset_mode: as in gymnasium. Under the failure policy a hung
            or dead actor is killed and, with ``on_error="restart"``, replaced.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        *,
        num_workers: int | None = None,
        num_cpus_per_worker: float = 1,
        address: str | None = None,
        ray_init_kwargs: dict[str, Any] | None = None,
        batch_size: int | None = None,
        copy: bool = True,
        observation_mode: ObservationMode = "same",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        start_timeout: float | None = DEFAULT_START_TIMEOUT,
        **failure: Unpack[FailureOptions],
    ) -> None:
        import_ray()  # a clear ImportError before anything else
        _start_timeout(start_timeout)
        if isinstance(num_cpus_per_worker, bool) or not isinstance(num_cpus_per_worker, (int, float)) \
                or num_cpus_per_worker < 0:
            raise ValueError(f"num_cpus_per_worker: expected a number >= 0, got {num_cpus_per_worker!r}")
        transport = RayTransport(num_cpus_per_worker, address, ray_init_kwargs, start_timeout)
        try:
            if num_workers is None:
                cpus = transport.cluster_cpus()
                num_workers = max(1, int(cpus // num_cpus_per_worker)) if num_cpus_per_worker else int(cpus)
                num_workers = max(1, num_workers)  # the engine caps it at num_envs
            super().__init__(env_fns, transport, num_workers=num_workers, batch_size=batch_size, copy=copy,
                             observation_mode=observation_mode, autoreset_mode=autoreset_mode, **failure)
        except BaseException:
            transport.close()
            raise
