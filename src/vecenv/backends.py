"""The vector env classes users build, one per transport, all sharing the engine. Each takes the
failure policy's keywords (:class:`vecenv.FailurePolicy`), which the engine validates once.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import logger, spaces
from gymnasium.vector import AutoresetMode
from typing_extensions import Unpack

from vecenv.engine import VectorEnv
from vecenv.engine.checks import check_count
from vecenv.engine.state import CallState
from vecenv.engine.transport import DEFAULT_START_TIMEOUT
from vecenv.policy import FailureOptions
from vecenv.system import pin_cores, usable_cores
from vecenv.transports import ProcessTransport, SerialTransport, ThreadTransport
from vecenv.transports.process import default_workers
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

# Every public class names gymnasium's VectorEnv among its direct bases (the engine already derives
# from it): libraries that look at the direct bases, such as skrl's wrap_env, then take these.


def _start_timeout(value: Any) -> float | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
        raise ValueError(f"start_timeout: expected a number of seconds > 0 or None, got {value!r}")
    return value


def _count(env_fns: Any) -> int:
    try:
        return max(1, len(env_fns))
    except TypeError:
        return 1  # the engine reports what env_fns should be


class SerialVectorEnv(VectorEnv, gym.vector.VectorEnv):
    """Steps every env in the caller's process, one after the other: the fastest choice for cheap
    envs on one core. Same constructor as ``gymnasium.vector.SyncVectorEnv``; ``envs`` gives the
    sub-env objects.

    Examples:
        >>> import gymnasium as gym
        >>> import vecenv
        >>> envs = vecenv.SerialVectorEnv([lambda: gym.make("CartPole-v1")] * 3)
        >>> obs, infos = envs.reset(seed=[1, 2, 3])
        >>> obs.shape
        (3, 4)

        Beyond gymnasium's API: calls on some envs only, and a function run where the envs live
        (in their worker, on the other backends):

        >>> envs.call_at([0, 2], "get_wrapper_attr", "spec")[0].id
        'CartPole-v1'
        >>> envs.apply(lambda env, k: env.unwrapped.gravity * k, 2)
        [19.6, 19.6, 19.6]
        >>> len(envs.envs)
        3
        >>> envs.close()
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


class SyncVectorEnv(SerialVectorEnv, gym.vector.VectorEnv):
    """Drop-in for ``gymnasium.vector.SyncVectorEnv``: the serial backend under gymnasium's name
    (so its repr and messages read as gymnasium's), with the same constructor."""


class ThreadVectorEnv(VectorEnv, gym.vector.VectorEnv):
    """Env groups stepped in parallel by threads, each group built and stepped by one thread.

    For a free-threaded Python (3.13t, 3.14t) or steps that release the GIL (C/C++ simulators):
    no process boundary, no copies. With whole batches your thread steps one group while the
    helpers step theirs. Threads cannot be interrupted, so ``step_timeout`` is refused.
    ``copy``, ``observation_mode`` and ``autoreset_mode`` are gymnasium's.

    Args:
        env_fns: one callable per env.
        num_workers: threads stepping at once, yours included; default the usable cores, at
            most ``num_envs``.
        groups: how many groups the envs are split into (contiguous, dealt to the threads in
            blocks); default one per thread, or one per env with async batches.
        batch_size: ``< num_envs`` for async batches (:meth:`send` / :meth:`recv`): then only
            helper threads step, and your thread computes while they do.
        spin_us: how long a waiting thread looks for work or a reply before it sleeps (default:
            100 on a free-threaded Python, 0 under the GIL).
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        *,
        num_workers: int | None = None,
        groups: int | None = None,
        batch_size: int | None = None,
        copy: bool = True,
        observation_mode: ObservationMode = "same",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        spin_us: float | None = None,
        **failure: Unpack[FailureOptions],
    ) -> None:
        env_fns = list(env_fns)
        threads = usable_cores() if num_workers is None else check_count("num_workers", num_workers, None)
        # a whole batch: one group per thread; async batches return envs as they finish, so each
        # env is a group of its own
        whole = batch_size is None or (isinstance(batch_size, int) and batch_size >= len(env_fns))
        default = min(threads, len(env_fns)) if whole else len(env_fns)
        n_groups = default if groups is None else check_count("groups", groups, None)
        if spin_us is not None and not (isinstance(spin_us, (int, float)) and spin_us >= 0):
            raise ValueError(f"spin_us: expected a number of microseconds >= 0, got {spin_us!r}")
        super().__init__(env_fns, ThreadTransport(threads, spin_us, whole), num_workers=max(1, n_groups),
                         batch_size=batch_size, copy=copy, observation_mode=observation_mode,
                         autoreset_mode=autoreset_mode, **failure)

    @property
    def num_threads(self) -> int:
        """Threads that step envs at once, the caller's included."""
        return self._transport.threads  # type: ignore[attr-defined]


class ProcessVectorEnv(VectorEnv, gym.vector.VectorEnv):
    """Steps the envs in worker processes, several envs per worker, results in shared memory.
    ``observation_mode`` and ``autoreset_mode`` are gymnasium's.

    Args:
        env_fns: one callable per env.
        num_workers: env groups, one per worker process (default: the usable cores, at most
            ``len(env_fns)``; one fewer on more than 8 cores or with async batches, so the caller
            keeps a core for its own work, unless ``inline``). Envs that wait rather than compute
            want more: up to one per env.
        batch_size: for async batches: :meth:`recv` returns the first ``batch_size`` envs to
            finish (with ``infos["env_id"]``).
        context: multiprocessing start method or context (default: the platform's).
        shared_memory: accepted for gymnasium compatibility (fixed-shape arrays always travel
            in shared memory).
        copy: ``False`` returns views into shared memory valid until the next step/recv.
        daemon: make the workers daemonic.
        spin_us: most µs each side busy-spins before yielding (default: 50 when every process
            has its own core, else 0).
        yield_us: most µs each side then calls ``sched_yield()`` before it blocks (default 500);
            a side whose waits show a contended core blocks at once.
        inline: step the last env group in this process, during ``step``, while the workers
            step theirs (``num_workers=2, inline=True`` is one worker process plus this one).
            Faster for cheap envs on few cores; the inline envs lose crash isolation, and
            ``step_timeout`` is refused with it.
        start_timeout: seconds a worker may take to build its envs (at start and on every
            rebuild) before :class:`vecenv.errors.StepTimeoutError` names it; ``None`` waits.
        mechanism: ``"posix"`` (socketpairs, ``poll``, memfd: the default where it runs) or
            ``"portable"`` (``multiprocessing`` pipes, memory shared by name: Windows); default
            ``$VECENV_PROCESS_MECHANISM``.
        affinity: pin each worker process to one core (Linux): ``True`` spreads the workers over
            the usable cores, in order; a sequence of core ids uses those (worker ``i`` on
            ``affinity[i % len(affinity)]``). Default ``False``: the OS places every process.

    Examples:
        Four envs in two worker processes (close it, or use ``with``, to end the workers):

        >>> import gymnasium as gym
        >>> import numpy as np
        >>> import vecenv
        >>> envs = vecenv.ProcessVectorEnv([lambda: gym.make("CartPole-v1")] * 4, num_workers=2)
        >>> obs, infos = envs.reset(seed=0)
        >>> obs, rewards, terminations, truncations, infos = envs.step(np.zeros(4, dtype=np.int64))
        >>> rewards, envs.num_workers
        (array([1., 1., 1., 1.]), 2)
        >>> envs.close()

        Async batches: :meth:`recv` returns the first ``batch_size`` envs to finish, named in
        ``infos["env_id"]``, and :meth:`send` takes actions for exactly those:

        >>> envs = vecenv.ProcessVectorEnv([lambda: gym.make("CartPole-v1")] * 4, num_workers=2,
        ...                                batch_size=2)
        >>> obs, infos = envs.reset(seed=0)
        >>> for _ in range(10):
        ...     envs.send(np.zeros(2, dtype=np.int64), infos["env_id"])
        ...     obs, rewards, terminations, truncations, infos = envs.recv()
        >>> obs.shape, infos["env_id"].shape
        ((2, 4), (2,))
        >>> envs.close()
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
        mechanism: str | None = None,
        affinity: bool | Sequence[int] = False,
        **failure: Unpack[FailureOptions],
    ) -> None:
        cores = pin_cores(affinity)
        if inline and failure.get("step_timeout") is not None:
            raise ValueError(
                f"step_timeout={failure['step_timeout']!r} cannot be combined with inline=True: the "
                "inline env group steps in your own thread, during step() itself, where a hung step "
                "can be neither interrupted nor ended, so step_timeout could not bound it. Pass "
                "inline=False (every env group in a worker process, which step_timeout ends when it "
                "hangs), or leave step_timeout=None"
            )
        self.shared_memory = shared_memory
        self.context = context
        self.daemon = daemon
        transport = ProcessTransport(context, daemon, spin_us=spin_us, yield_us=yield_us,
                                     start_timeout=_start_timeout(start_timeout), mechanism=mechanism,
                                     inline=inline, cores=cores)
        groups = num_workers or default_workers(_count(env_fns), usable_cores(), caller_steps=inline,
                                                batch_size=batch_size)
        super().__init__(env_fns, transport, num_workers=groups,
                         batch_size=batch_size, copy=copy, observation_mode=observation_mode,
                         autoreset_mode=autoreset_mode, **failure)

    @property
    def processes(self) -> list[Any]:
        """The worker processes (``multiprocessing.Process``), one per env group (but an inline one)."""
        return list(self._transport.processes)  # type: ignore[attr-defined]


class AsyncVectorEnv(ProcessVectorEnv, gym.vector.VectorEnv):
    """Drop-in for ``gymnasium.vector.AsyncVectorEnv``: same constructor, same behaviour.

    One env per worker process unless ``num_workers`` is given (e.g. the cores, to pay one round
    trip per group). ``max_concurrency=k`` runs at most ``k`` worker processes. As gymnasium's,
    it warns when closed with a call pending and logs an env's error through
    ``gymnasium.logger``. A custom ``worker`` function is not supported.
    """

    #: open error messages with the words of gymnasium's AsyncVectorEnv (see ``check_spaces``)
    gym_messages = "async"
    _log_env_errors = True

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
        max_concurrency: int | None = None,
        *,
        num_workers: int | None = None,
        **options: Any,
    ) -> None:
        workers = num_workers or _count(env_fns)  # one worker process per env unless given
        if max_concurrency is not None:  # checked with gymnasium's messages
            if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, (int, np.integer)):
                raise ValueError(f"`max_concurrency` must be an integer or None, got {type(max_concurrency)}.")
            if max_concurrency < 1:
                raise ValueError(f"`max_concurrency` must be a positive or None, got {max_concurrency}.")
            if num_workers is not None and num_workers > max_concurrency:
                raise ValueError(
                    f"max_concurrency={max_concurrency} with num_workers={num_workers}: each worker process "
                    "steps its envs one after another, so vecenv bounds the envs stepping at once by running "
                    "at most max_concurrency workers; pass num_workers <= max_concurrency, or only one of them"
                )
            workers = min(workers, int(max_concurrency))
        if worker is not None:
            raise NotImplementedError(
                "AsyncVectorEnv(worker=...): custom worker functions are not supported; vecenv runs "
                "its own worker loop. For what a custom worker usually changes: autoreset_mode= "
                "picks how finished episodes reset, on_error='restart' rebuilds failed envs, and "
                "envs.apply(fn) runs fn(env) where each env lives"
            )
        self.worker = None
        self.max_concurrency = max_concurrency
        super().__init__(env_fns, num_workers=workers, context=context, shared_memory=shared_memory,
                         copy=copy, daemon=daemon, observation_mode=observation_mode,
                         autoreset_mode=autoreset_mode, **options)

    def close_extras(self, timeout: float | None = None, terminate: bool = False, **kwargs: Any) -> None:
        """Close, warning as gymnasium does when a call is still pending (its results are dropped)."""
        flight = getattr(self, "_flight", None)
        state = CallState.DEFAULT if flight is None else flight.state
        if state in (CallState.WAITING_RESET, CallState.WAITING_STEP, CallState.WAITING_CALL) and \
                self.batch_size == self.num_envs:
            logger.warn(f"Calling `close` while waiting for a pending call to `{state.value}` to complete.")
        super().close_extras(timeout=timeout, terminate=terminate, **kwargs)


class RayVectorEnv(VectorEnv, gym.vector.VectorEnv):
    """Env groups as Ray actors, across the cores of a Ray cluster. Ray is started locally when
    none is running (and shut down at :meth:`close`); ``address="auto"`` joins a cluster.
    ``copy``, ``observation_mode`` and ``autoreset_mode`` are gymnasium's.

    Args:
        env_fns: one callable per env (sent to the actors with cloudpickle).
        num_workers: actors (env groups); default as many as the cluster's CPUs fit.
        num_cpus_per_worker: CPUs Ray reserves for each actor (may be fractional).
        address: Ray cluster to join (``"auto"``, ``"ray://host:10001"``...).
        ray_init_kwargs: extra keywords for ``ray.init`` (e.g. ``{"num_cpus": 8}``, ``runtime_env``).
        start_timeout: seconds the actors may take to be placed and build their envs before
            :class:`vecenv.errors.StepTimeoutError` says which did not; ``None`` waits (an
            autoscaling cluster).
        batch_size: ``< num_envs`` for async batches.
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
                # the engine caps it at num_envs
                num_workers = max(1, int(cpus // num_cpus_per_worker if num_cpus_per_worker else cpus))
            super().__init__(env_fns, transport, num_workers=num_workers, batch_size=batch_size, copy=copy,
                             observation_mode=observation_mode, autoreset_mode=autoreset_mode, **failure)
        except BaseException:
            transport.close()
            raise
