"""Thread transport: one env group per thread, writing straight into the caller's buffers.

Each worker thread owns one :class:`~vecenv.worker.EnvGroup`, created in that thread (so envs
with thread-affine state, e.g. a rendering context, live where they are stepped, and groups are
built in parallel). Commands travel through a per-worker ``queue.SimpleQueue``; finished workers
put their index on one shared ``SimpleQueue``, so :meth:`ThreadTransport.ready` hands workers back
in the order they finish. Measured on this project's 2-core host, a round trip costs ~24 µs
with ``SimpleQueue`` against ~37 µs with a pair of ``threading.Event`` and ~34 µs with a
``Condition`` (one worker; the gap widens with more workers).

The right backend when a step releases the GIL (C/C++ simulators, numpy-heavy steps) or on a
free-threaded Python; for pure-Python steps under the GIL prefer processes.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

import gymnasium as gym
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from vecenv.engine import VectorEnv
from vecenv.spaces import StepBuffers
from vecenv.transports.base import Transport, usable_cores
from vecenv.worker import EnvDescription, EnvGroup

__all__ = ["ThreadTransport", "ThreadVectorEnv"]

_STOP = None  # sentinel command: close the group and end the thread


class _Worker:
    """One daemon thread running one env group; replies go to ``done`` as the worker's index."""

    def __init__(
        self,
        index: int,
        env_fns: Sequence[Callable[[], Any]],
        start: int,
        autoreset_mode: AutoresetMode,
        done: queue.SimpleQueue,
    ) -> None:
        self.index = index
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.done = done
        self.group: EnvGroup | None = None
        self.reply: tuple[bool, Any] = (True, None)
        self.thread = threading.Thread(
            target=self._run,
            args=(env_fns, start, autoreset_mode),
            name=f"vecenv-thread-{index}",
            daemon=True,  # a hung env must not block interpreter exit
        )
        self.thread.start()

    def _run(self, env_fns: Sequence[Callable[[], Any]], start: int, mode: AutoresetMode) -> None:
        try:
            self.group = EnvGroup(env_fns, start, self.index, mode)
            self.reply = (True, self.group.describe())
        except BaseException as exc:  # reported by the constructor
            self.reply = (False, exc)
            self.done.put(self.index)
            return
        self.done.put(self.index)
        group, inbox, done, index = self.group, self.inbox, self.done, self.index
        while True:
            item = inbox.get()
            if item is _STOP:
                break
            try:
                self.reply = (True, group.handle(*item))
            except BaseException as exc:  # delivered by fetch(); the thread keeps serving
                self.reply = (False, exc)
            done.put(index)
        group.close()


class ThreadTransport(Transport):
    """Runs each env group on its own thread; groups write into the caller's buffer rows."""

    name = "thread"

    def __init__(self) -> None:
        self.workers: list[_Worker] = []
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self._finished: dict[int, None] = {}  # workers with a reply, in the order they finished

    def start(
        self,
        env_fns: Sequence[Callable[[], Any]],
        partition: list[tuple[int, int]],
        autoreset_mode: AutoresetMode,
    ) -> list[EnvDescription]:
        self.partition = partition
        self.num_workers = len(partition)
        try:
            for w, (start, stop) in enumerate(partition):
                self.workers.append(_Worker(w, env_fns[start:stop], start, autoreset_mode, self._done))
            for _ in self.workers:  # every group is built (or failed) before we go on
                self._done.get()
        except BaseException:
            self.close()
            raise
        failed = [w for w in self.workers if not w.reply[0]]
        if failed:
            self.close()
            raise failed[0].reply[1]
        return [d for w in self.workers for d in w.reply[1]]

    def attach(self, buffers: StepBuffers) -> None:
        # The workers are idle (blocked on their inbox); the queue hand-off of the next command
        # orders this write before the worker reads it.
        for worker, (start, stop) in zip(self.workers, self.partition, strict=True):
            worker.group.attach(buffers.rows(start, stop))

    def submit(self, worker: int, command: str, payload: tuple) -> None:
        self.workers[worker].inbox.put((command, payload))

    def ready(self, workers: Collection[int], timeout: float | None = None) -> list[int]:
        wanted = set(workers)
        finished, done = self._finished, self._done
        if not wanted.intersection(finished):
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    w = done.get(timeout=left)
                except queue.Empty:
                    return []
                finished[w] = None
                if w in wanted:
                    break
        while True:  # take every other reply that is already in, without waiting
            try:
                finished[done.get_nowait()] = None
            except queue.Empty:
                break
        return [w for w in finished if w in wanted]

    def fetch(self, worker: int) -> Any:
        del self._finished[worker]
        ok, value = self.workers[worker].reply
        self.workers[worker].reply = (True, None)
        if not ok:
            raise value
        return value

    def close(self, timeout: float | None = None) -> None:
        workers, self.workers = self.workers, []
        for w in workers:
            w.inbox.put(_STOP)
        deadline = time.monotonic() + (5.0 if timeout is None else timeout)
        for w in workers:  # a hung env's thread is abandoned (it is a daemon)
            w.thread.join(max(0.0, deadline - time.monotonic()))
        self._finished.clear()


class ThreadVectorEnv(VectorEnv):
    """Env groups on a pool of threads, one thread per worker, stepping in parallel.

    The right choice when a step releases the GIL (C/C++ simulators, numpy-heavy steps) and on
    free-threaded Python (3.13t/3.14t): no process boundary, no copies, ~25 µs of wake-up per
    worker and step. Pure-Python steps under the GIL gain nothing from threads: use processes.

    Args:
        env_fns: one callable per env, each returning a fresh env.
        num_workers: threads (env groups); default the usable cores, at most ``num_envs``.
        batch_size: ``< num_envs`` for async batches (:meth:`send` / :meth:`recv`).
        copy: return copies of the observations (``False``: views of the shared buffer).
        observation_mode: ``"same"``, ``"different"`` or a ``(batched, single)`` space tuple.
        autoreset_mode: ``"next_step"`` (default), ``"same_step"`` or ``"disabled"``.
        on_error, max_restarts, restart_window: the failure policy (see :class:`vecenv.VectorEnv`).
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        *,
        num_workers: int | None = None,
        batch_size: int | None = None,
        copy: bool = True,
        observation_mode: str | tuple[spaces.Space, spaces.Space] = "same",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        on_error: str = "raise",
        max_restarts: int = 3,
        restart_window: float = 60.0,
    ) -> None:
        if num_workers is None:
            num_workers = usable_cores()  # the engine caps it at num_envs
        super().__init__(
            env_fns,
            ThreadTransport(),
            num_workers=num_workers,
            batch_size=batch_size,
            copy=copy,
            observation_mode=observation_mode,
            autoreset_mode=autoreset_mode,
            on_error=on_error,
            max_restarts=max_restarts,
            restart_window=restart_window,
        )
