"""Thread transport: one env group per thread, writing straight into the caller's buffers.

Each worker thread owns one :class:`~vecenv.worker.EnvGroup`, created in that thread (so envs
with thread-affine state, e.g. a rendering context, live where they are stepped, and groups are
built in parallel). Commands travel through a per-worker ``queue.SimpleQueue``; finished workers
put their index on one shared ``SimpleQueue``, so :meth:`ThreadTransport.ready` hands workers back
in the order they finish. ``SimpleQueue`` because its round trip was the shortest of those
measured, against a pair of ``threading.Event`` and a ``Condition`` (figures in docs/thread.md).

The right backend when a step releases the GIL (C/C++ simulators, numpy-heavy steps) or on a
free-threaded Python; for pure-Python steps under the GIL prefer processes.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

from gymnasium.vector import AutoresetMode

from vecenv.engine.transport import Transport
from vecenv.spaces import StepBuffers
from vecenv.transports.signals import deferred
from vecenv.worker import EnvDescription, EnvGroup
from vecenv.worker.commands import Command

__all__ = ["ThreadTransport"]

_STOP = None  # sentinel command: close the group and end the thread


class _Barrier:
    """Queued behind everything a worker was given: once served, its inbox holds nothing older."""

    __slots__ = ("token",)

    def __init__(self, token: int) -> None:
        self.token = token


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
        self.served = 0  # commands finished
        self.passed = 0  # token of the last barrier served
        self.thread = threading.Thread(
            target=self._run,
            args=(env_fns, start, autoreset_mode),
            name=f"vecenv-thread-{index}",
            daemon=True,  # a hung env must not block interpreter exit
        )
        self.thread.start()

    def _run(self, env_fns: Sequence[Callable[[], Any]], start: int, mode: AutoresetMode) -> None:
        try:
            self.group = EnvGroup(env_fns, start, self.index, mode, contain_exits=True)  # no Ctrl-C lands here
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
            if type(item) is _Barrier:
                self.passed = item.token
                done.put(index)
                continue
            try:
                self.reply = (True, group.run(item))
            except BaseException as exc:  # delivered by fetch(); the thread keeps serving
                self.reply = (False, exc)
            self.served += 1  # the truth; the queue item below only wakes the caller
            done.put(index)
        group.close()


class ThreadTransport(Transport):
    """Runs each env group on its own thread; groups write into the caller's buffer rows."""

    name = "thread"

    def __init__(self) -> None:
        self.workers: list[_Worker] = []
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self._finished: dict[int, None] = {}  # workers with a reply, in the order they finished
        self._sent: dict[int, int] = {}  # worker -> commands sent to it
        self._taken: dict[int, int] = {}  # worker -> replies fetched from it
        self._barriers = 0  # barriers queued (see settle)

    def launch(self) -> list[EnvDescription]:
        for w, (start, _) in enumerate(self.partition):
            self.workers.append(_Worker(w, self.group_fns(w), start, self.autoreset_mode, self._done))
        for _ in self.workers:  # every group is built (or failed) before we go on
            self._done.get()
        failed = [w for w in self.workers if not w.reply[0]]
        if failed:
            raise failed[0].reply[1]
        return [d for w in self.workers for d in w.reply[1]]

    def attach(self, buffers: StepBuffers) -> None:
        # The workers are idle (blocked on their inbox); the queue hand-off of the next command
        # orders this write before the worker reads it.
        for worker, (start, stop) in zip(self.workers, self.partition, strict=True):
            worker.group.attach(buffers.rows(start, stop))  # type: ignore[union-attr]

    def submit(self, worker: int, command: Command) -> None:
        deferred(self._queue, worker, command)  # queued and counted, or neither

    def _queue(self, worker: int, command: Command) -> None:
        self.workers[worker].inbox.put(command)
        self._sent[worker] = self._sent.get(worker, 0) + 1

    def outstanding(self, worker: int) -> bool:
        return self._sent.get(worker, 0) != self._taken.get(worker, 0)

    def _finished_now(self, wanted: set[int]) -> list[int]:
        """Workers among ``wanted`` whose command is done, in the order they were seen finishing."""
        found = [w for w in wanted if self.outstanding(w) and self.workers[w].served == self._sent[w]]
        for w in found:
            self._finished.setdefault(w, None)
        return [w for w in self._finished if w in found]

    def ready(self, workers: Collection[int], timeout: float | None = None) -> list[int]:
        wanted = set(workers)
        return self._wait(lambda: self._finished_now(wanted), timeout)

    def _wait(self, condition: Callable[[], Any], timeout: float | None) -> Any:
        """Re-check ``condition`` at each wake-up from the workers until it is true or ``timeout``
        seconds have passed; its last value. A wake-up only says to look: the state is the truth."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            value = condition()
            left = None if deadline is None else deadline - time.monotonic()
            if value or (left is not None and left <= 0):
                return value
            try:
                self._finished.setdefault(self._done.get(timeout=left), None)
            except queue.Empty:
                pass

    def fetch(self, worker: int) -> Any:
        self._finished.pop(worker, None)
        self._taken[worker] = self._sent.get(worker, 0)
        ok, value = self.workers[worker].reply
        self.workers[worker].reply = (True, None)
        if not ok:
            raise value
        return value

    def settle(self, worker: int, timeout: float | None) -> bool:
        """Let ``worker`` serve everything it was given, drop the reply, and count afresh.

        ``deferred`` holds SIGINT back wherever it lands, but other signals only in the
        calling thread: one the kernel delivers to another thread still runs its handler in the
        main thread at once, so an interruption can land between queueing a command and counting
        it. The counters may then disagree with the worker; a barrier queued behind everything
        else says when the worker's own count is final, and both counters are set to it.
        """
        w = self.workers[worker]
        self._barriers += 1
        token = self._barriers
        w.inbox.put(_Barrier(token))
        if not self._wait(lambda: w.passed == token, timeout):
            return False
        self._sent[worker] = self._taken[worker] = w.served
        self._finished.pop(worker, None)
        w.reply = (True, None)
        return True

    def close(self, timeout: float | None = None) -> None:
        workers, self.workers = self.workers, []
        for w in workers:
            w.inbox.put(_STOP)
        deadline = time.monotonic() + (5.0 if timeout is None else timeout)
        for w in workers:  # a hung env's thread is abandoned (it is a daemon)
            w.thread.join(max(0.0, deadline - time.monotonic()))
        self._finished.clear()
