"""Thread transport: env groups stepped by threads, your thread one of them (docs/thread.md).

Data flow of one call::

    engine ── send(round) ──► each w's queue (a deque) ──► the thread that serves it runs it ──► reply[w]
    engine ◄── ready(ws) ── your thread: runs the commands of the groups it steps, then waits for
                            the helpers' replies (a short spin, then sleep until woken)
    engine ◄── fetch(w) ─── reply[w] (a group's error raised here)

A waiting thread spins for ``spin`` seconds (on a free-threaded Python only: under the GIL a
spinning thread keeps the GIL from the thread it waits for), then sleeps. It marks itself asleep
under the transport's lock after a last look; whoever wakes it does so under the same lock, and
:data:`NAP` bounds every sleep all the same.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Sequence
from typing import Any, NamedTuple

from vecenv.engine.transport import Transport
from vecenv.errors import VecEnvError
from vecenv.spaces import StepBuffers
from vecenv.system import gil_enabled
from vecenv.transports.spin import locked, spin_until
from vecenv.worker import EnvDescription, EnvGroup
from vecenv.worker.commands import Command, Step
from vecenv.worker.group import warn_close_failures

__all__ = ["ThreadTransport"]

#: longest a sleeping thread waits before it looks again (a backstop: every wake-up is posted)
NAP = 0.1
#: the reply of a group with nothing to hand over
_EMPTY: tuple[bool, Any] = (True, None)


class Build(NamedTuple):
    """Build a group from its env_fns, in its stepper (the thread that steps it); reply: its envs'
    descriptions."""

    env_fns: Sequence[Callable[[], Any]]
    start: int


class _Sleeper:
    """A thread that may sleep: ``asleep`` is set under the transport's lock, ``wake`` wakes it."""

    __slots__ = ("asleep", "wake")

    def __init__(self) -> None:
        self.asleep = False
        self.wake: queue.SimpleQueue = queue.SimpleQueue()


class _Helper(_Sleeper):
    """A daemon thread running the commands of the groups it steps, oldest first."""

    __slots__ = ("jobs", "current", "thread")

    def __init__(self, transport: ThreadTransport, number: int, jobs: deque[int]) -> None:
        super().__init__()
        self.jobs = jobs  # groups with a command for this thread to run (shared with async batches)
        self.current = -1  # the group whose command runs now (-1: none)
        self.thread = threading.Thread(target=transport.serve_forever, args=(self,),
                                       name=f"vecenv-thread-{number}", daemon=True)  # a hung env must not block exit


class ThreadTransport(Transport):
    """Env groups, each stepped by one of ``threads`` threads (the caller's own included).

    ``threads``: how many threads step at once (default 1). ``spin_us``: how long a waiting
    thread looks before it sleeps; ``None``: 100 µs on a free-threaded Python, 0 under the GIL.
    ``whole_batches``: the engine waits for every group of a call, so your thread steps the first
    group(s) and each helper a contiguous block of the others, each group built and stepped by
    its stepper only; otherwise (async batches, every env a group) helpers take the groups'
    commands from one queue, oldest first, and your thread only waits.
    """

    name = "thread"

    def __init__(self, threads: int | None = None, spin_us: float | None = None,
                 whole_batches: bool = True) -> None:
        self.threads = max(1, threads or 1)
        self.whole_batches = whole_batches
        self.spin = (0.0 if gil_enabled() else 100e-6) if spin_us is None else spin_us * 1e-6
        self.helpers: list[_Helper] = []
        self.groups: list[EnvGroup | None] = []
        self._mine: deque[int] = deque()  # your groups with a command to run
        self._queues: list[deque[int]] = []  # where each group's commands go (_mine: yours)
        self._servers: list[list[_Helper]] = []  # the helpers that take each group's commands
        self._commands: list[Any] = []
        self._replies: list[tuple[bool, Any]] = []
        self._sent: list[int] = []  # commands given to each group
        self._served: list[int] = []  # commands each group finished
        self._taken: list[int] = []  # replies fetched
        self._done: deque[int] = deque()  # groups that finished, in that order, not yet seen
        self._finished: dict[int, None] = {}  # groups seen finished, reply not yet fetched
        self._caller = _Sleeper()
        self._caller_in = -1  # the group whose command your thread runs now (-1: none)
        #: guards going to sleep and waking; taken through :func:`locked` in your thread (a
        #: Ctrl-C must not leave it held)
        self._lock = threading.RLock()
        self._stopping = False

    # ----------------------------------------------------------------- lifecycle
    def launch(self) -> list[EnvDescription]:
        g = self.num_workers
        yours = 1 if self.whole_batches else 0  # your thread is thread 0 with whole batches
        helpers = min(self.threads, g + yours) - yours if self.threads > 1 else 0
        if self.whole_batches:  # contiguous blocks of groups, each with a queue of its own
            self.helpers = [_Helper(self, k + 1, deque()) for k in range(helpers)]
            threads: list[_Helper | None] = [None, *self.helpers]  # None: your thread
            steppers = [threads[w * len(threads) // g] for w in range(g)]
            self._queues = [self._mine if h is None else h.jobs for h in steppers]
            self._servers = [[] if h is None else [h] for h in steppers]
        else:  # async batches: one queue, any helper takes the next env
            shared: deque[int] = deque()
            self.helpers = [_Helper(self, k + 1, shared) for k in range(max(1, helpers))]
            self._queues, self._servers = [shared] * g, [self.helpers] * g
        self.groups, self._commands, self._replies = [None] * g, [None] * g, [_EMPTY] * g
        self._sent, self._served, self._taken = [0] * g, [0] * g, [0] * g
        for h in self.helpers:
            h.thread.start()
        for w, (start, _) in enumerate(self.partition):  # each group built by its stepper
            self.send([(w, Build(self.group_fns(w), start))])  # type: ignore[list-item]
        for w in range(g):  # every group is built (or failed) before one is used
            self.ready([w])
        results = [self._take(w) for w in range(g)]
        for ok, value in results:
            if not ok:
                raise value
        return [d for _, described in results for d in described]

    def attach(self, buffers: StepBuffers) -> None:
        # every group is idle; its stepper reads the rows after taking its next job from a deque
        for group, (start, stop) in zip(self.groups, self.partition, strict=True):
            group.attach(buffers.rows(start, stop))  # type: ignore[union-attr]

    def close(self, timeout: float | None = None) -> None:
        self._stopping = True
        self._mine.clear()
        helpers, self.helpers = self.helpers, []
        for h in helpers:
            h.jobs.clear()
            self._wake(h)
        self._wake(self._caller)  # a wait in another thread ends (ready() returns nothing)
        deadline = time.monotonic() + (5.0 if timeout is None else timeout)
        for h in helpers:  # a thread stuck in a hung env is abandoned (it is a daemon)
            h.thread.join(max(0.0, deadline - time.monotonic()))
        stuck = {h.current for h in helpers if h.thread.is_alive()}
        groups, self.groups = self.groups, []
        for w, group in enumerate(groups):
            if group is not None and w not in stuck:  # not one that a thread still runs
                warn_close_failures(group.close())
        self._finished.clear()

    # ----------------------------------------------------------------- the engine's side
    def send(self, commands: Sequence[tuple[int, Command]]) -> None:
        # counted, then queued: a signal handler that raises between the two leaves a count
        # that drop_outstanding() puts right (a command nobody runs is not waited for)
        for worker, command in commands:
            self._commands[worker] = command
            self._sent[worker] += 1
            self._queues[worker].append(worker)
            for h in self._servers[worker]:  # one helper that takes it and sleeps
                if h.asleep:
                    self._wake(h)
                    break

    def outstanding(self, worker: int) -> bool:
        return self._sent[worker] != self._taken[worker]

    def ready(self, workers: Collection[int], timeout: float | None = None, every: bool = False,
              wanted: Callable[[], int] | None = None) -> list[int]:
        """Groups among ``workers`` with a reply, in the order they finished (``every`` or not:
        your thread is woken the same way). Your thread runs the commands of its own groups
        first, then those no helper has started; a wait with a ``timeout`` hands your groups to
        the first helper instead and takes none back, since nothing can cut an env's step short
        to keep a deadline."""
        if self._caller_in >= 0:  # an earlier wait was cut short inside a group's command
            self._cut(self._caller_in, KeyboardInterrupt())
        mine = self._mine
        if mine and timeout is not None and self.helpers:
            helper = self.helpers[0]
            while mine:
                helper.jobs.append(mine.popleft())
            self._wake(helper)
        while mine:
            self._serve_here(mine.popleft())
        if self.whole_batches and timeout is None:
            self._take_back(workers)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            found = self._finished_now(workers)
            if found or self._stopping or (deadline is not None and time.monotonic() >= deadline):
                return found
            self._sleep(self._caller, lambda: self._done or self._stopping, deadline)

    def _take_back(self, workers: Collection[int]) -> None:
        """Run here the commands among ``workers`` that no helper has started by the time your
        thread is done with its own (a helper without its core: another program holds it), so
        a step is never slower than your thread stepping everything."""
        for h in self.helpers:
            jobs = h.jobs
            while jobs:
                try:
                    w = jobs[-1]  # the helper takes from the front
                except IndexError:
                    break
                if w not in workers or type(self._commands[w]) is Build:  # built by its stepper
                    break
                try:
                    jobs.remove(w)  # atomic: either this takes it or the helper does
                except ValueError:
                    break
                self._serve_here(w)

    def fetch(self, worker: int) -> Any:
        ok, value = self._take(worker)
        if not ok:
            raise value
        return value

    def drop_outstanding(self, worker: int, timeout: float | None) -> bool:
        """Drop ``worker``'s command if no thread started it, let the thread running it finish it otherwise,
        drop the reply and count afresh from what the group really served. An interruption can
        land between counting a command and queueing it, or cut your thread out of a group's
        command; the group's own count is the truth."""
        if self._caller_in == worker:
            self._cut(worker, KeyboardInterrupt())
        for jobs in [self._mine, *(h.jobs for h in self.helpers)]:  # (handed on by a timed wait)
            with contextlib.suppress(ValueError):  # not there, or a helper took it first
                jobs.remove(worker)  # atomic: either this takes it or a helper does
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._running(worker):  # a helper marks it current before it leaves the jobs
            if self._stopping or (deadline is not None and time.monotonic() >= deadline):
                return False
            self._sleep(self._caller, lambda: not self._running(worker) or self._stopping, deadline)
        self._sent[worker] = self._taken[worker] = self._served[worker]
        self._replies[worker] = _EMPTY
        self._finished.pop(worker, None)
        return True

    def _running(self, w: int) -> bool:
        """Whether a helper runs group ``w``'s command now."""
        return any(h.current == w for h in self.helpers)

    # ----------------------------------------------------------------- running commands
    def _run(self, w: int) -> Any:
        command, group = self._commands[w], self.groups[w]
        if type(command) is Step and group is not None:  # a step, as a worker process runs it
            return group.step(command.ids)
        if type(command) is Build:
            group = self.groups[w] = EnvGroup(command.env_fns, command.start, w, self.autoreset_mode)
            return group.describe()
        return command.run(group)

    def _serve_here(self, w: int) -> None:
        """Run group ``w``'s command in your thread, where a Ctrl-C must get through: an
        exception that is not an ``Exception`` ends the wait, and the group's reply says that
        its command was cut short."""
        self._caller_in = w  # first: a cut after it is put right by the next wait
        try:
            reply = (True, self._run(w))
        except Exception as exc:
            reply = (False, exc)
        except BaseException as exc:
            self._cut(w, exc)
            raise
        self._caller_in = -1
        self._complete(w, reply)

    def _cut(self, w: int, exc: BaseException) -> None:
        """Your thread left group ``w``'s command part-way (``exc`` cut it): that is its reply."""
        self._caller_in = -1
        self._complete(w, (False, VecEnvError(
            f"worker {w}: its {type(self._commands[w]).__name__.lower()} was cut short by "
            f"{type(exc).__name__} in the calling thread; call reset()")))

    def serve_forever(self, helper: _Helper) -> None:
        """A helper thread's loop: run its groups' commands until the transport closes. Whatever
        env code raises, a ``SystemExit`` or ``KeyboardInterrupt`` included, is the reply, raised
        in your thread by :meth:`fetch`; the thread keeps serving."""
        jobs = helper.jobs
        while not self._stopping:
            if not jobs:
                self._sleep(helper, lambda: jobs or self._stopping, None)
                continue
            try:
                w = jobs[0]
            except IndexError:  # async batches: another helper took the last one meanwhile
                continue
            helper.current = w  # before it leaves the jobs: drop_outstanding() waits while it runs
            try:
                jobs.remove(w)
            except ValueError:  # drop_outstanding() or another helper took it
                helper.current = -1
                continue
            try:
                reply = (True, self._run(w))
            except BaseException as exc:
                reply = (False, exc)
            self._complete(w, reply)
            helper.current = -1
            if self._caller.asleep:
                self._wake(self._caller)

    def _complete(self, w: int, reply: tuple[bool, Any]) -> None:
        """Group ``w``'s command is done with ``reply``."""
        self._replies[w] = reply
        self._served[w] += 1
        self._done.append(w)

    # ----------------------------------------------------------------- waiting
    def _sleep(self, me: _Sleeper, woken: Callable[[], object], deadline: float | None) -> None:
        """Wait until ``woken()``, ``deadline`` or :data:`NAP`: spin first, then sleep in
        ``me.wake`` (a spurious return is harmless: every caller looks again)."""
        if self.spin and spin_until(woken, self.spin):
            return
        if locked(self._lock, self._mark_asleep, me, woken):
            left = NAP if deadline is None else min(NAP, max(0.0, deadline - time.monotonic()))
            try:
                me.wake.get(timeout=left)
            except queue.Empty:
                pass
            me.asleep = False

    @staticmethod
    def _mark_asleep(me: _Sleeper, woken: Callable[[], object]) -> bool:
        """Mark ``me`` asleep, then look once more (under the lock): whether to sleep."""
        me.asleep = True
        if woken():
            me.asleep = False
            return False
        return True

    def _wake(self, sleeper: _Sleeper) -> None:
        locked(self._lock, self._post_wake, sleeper)

    @staticmethod
    def _post_wake(sleeper: _Sleeper) -> None:
        if sleeper.asleep:
            sleeper.asleep = False
            sleeper.wake.put(None)

    def _finished_now(self, wanted: Collection[int]) -> list[int]:
        """Groups among ``wanted`` whose command is done, in the order they finished."""
        done, finished = self._done, self._finished
        while done:
            finished[done.popleft()] = None
        sent, served, taken = self._sent, self._served, self._taken
        replied = []
        for w in finished:  # a loop, not a comprehension: this runs on every wait of every step
            if w in wanted and taken[w] < sent[w] == served[w]:
                replied.append(w)
        return replied

    def _take(self, w: int) -> tuple[bool, Any]:
        self._finished.pop(w, None)
        self._taken[w] = self._sent[w]
        reply, self._replies[w] = self._replies[w], _EMPTY
        return reply
