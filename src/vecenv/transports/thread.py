"""Thread transport: env groups stepped by a pool of threads.

Data flow of one call (``T`` threads: the caller and ``T - 1`` helpers)::

    whole-batch step or reset of a group (shared env by env; see whole_steps.py):
    engine ── submit(w, step) ──► share[w] (envs dealt in blocks) ──► a job in each helper's mailbox
    caller ── ready(ws): steps its part, then waits for each helper's part (or takes a job back)
       └──► reply = every part joined

    any other command (call, render, ... or async batches: one env a group):
    engine ── submit(w, command) ──► commands[w], pending ◄── claim ── helper threads
    engine ◄── ready(ws) / fetch(w) ── caller (claims work too while it waits)
                 └────────── finished (in the order groups finish) ◄── replies[w], served[w]

A step (or reset) of a group is shared env by env (:class:`~vecenv.transports.work.Share`):
each thread takes its own block first, then what the others have not started, so the core that
is free does more of the work. Each env is stepped by one thread at a time and writes straight
into its row of the caller's batch buffers. With whole batches such a step reaches the helpers
without a lock (:class:`~vecenv.transports.whole_steps.WholeSteps`); other commands go through
one queue under a lock (``pending``), run whole by whichever thread claims them.

Waiting threads spin, then sleep (:mod:`~vecenv.transports.wakeups`); they spin on a
free-threaded Python only: under the GIL a spinning thread would keep it from the others.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Collection
from typing import Any

from vecenv.engine.transport import Transport
from vecenv.errors import VecEnvError
from vecenv.spaces import StepBuffers
from vecenv.system import gil_enabled
from vecenv.transports.pace import Pace
from vecenv.transports.pending import Pending
from vecenv.transports.wakeups import Wakeups, moved_since
from vecenv.transports.whole_steps import CALLER as _CALLER
from vecenv.transports.whole_steps import Build, WholeSteps, built_group, make_block
from vecenv.transports.work import Mailbox, Share, joined, locked, part_of, run_share, spin_until
from vecenv.worker import EnvDescription, EnvGroup
from vecenv.worker.commands import Command, GivenStep, Reset, Step
from vecenv.worker.group import warn_close_failures

__all__ = ["ThreadTransport"]

#: the reply slot of a group with nothing to hand over
_EMPTY: tuple[bool, Any] = (True, None)


class _Helper:
    """One daemon thread serving the queue; ``wake`` gets a token when work arrives."""

    def __init__(self, transport: ThreadTransport, index: int) -> None:
        self.slot = index
        self.wake: queue.SimpleQueue = queue.SimpleQueue()
        self.mailbox = Mailbox()  # the whole-batch steps handed to it
        self.thread = threading.Thread(target=transport.serve_forever, args=(self,),
                                       name=f"vecenv-thread-{index}", daemon=True)  # a hung env must not block exit


class ThreadTransport(Transport):
    """Steps env groups on ``threads`` threads (the caller's included) that share one queue.

    ``threads``: how many threads step at once, the caller's included (default: one per usable
    core). ``spin_us``: how long an idle helper and a waiting caller keep looking for work before
    they sleep; ``None``: 100 µs on a free-threaded Python, 0 under the GIL.

    ``whole_batches``: the engine waits for every group of a call (no async batches), so the
    caller steps envs for as long as any is queued, then waits for the helpers. With async
    batches the caller returns a batch as soon as enough envs are done, and computes the next
    actions while the helpers step the others; while it waits it steps only queued envs whose
    steps are known to be quick (:mod:`~vecenv.transports.pace`), so a slow env cannot hold
    its batch back.
    """

    name = "thread"

    def __init__(self, threads: int | None = None, spin_us: float | None = None,
                 whole_batches: bool = True) -> None:
        self.threads = threads
        self.whole_batches = whole_batches
        spin = (0.0 if gil_enabled() else 100e-6) if spin_us is None else spin_us * 1e-6
        self.helpers: list[_Helper] = []
        self.groups: list[EnvGroup | None] = []
        self._commands: list[Any] = []
        self._shares: list[Share] = []
        self._replies: list[tuple[bool, Any]] = []
        self._parts: list[list[tuple[bool, Any]]] = []  # a shared step's replies with entries, per group
        self._sent: list[int] = []  # commands given to each group
        self._served: list[int] = []  # commands each group finished
        self._taken: list[int] = []  # replies fetched
        self._runners: list[list[int]] = []  # threads running each group's command now
        self._shared: list[bool] = []  # whether each group's command is a step shared env by env
        self._whole = WholeSteps([], [])  # the whole-batch steps open now
        self._caller_in = -1  # the group the caller is running (-1: none)
        self._pending = Pending([], [], [], None)  # groups with work no thread took yet
        self._done: deque[int] = deque()  # groups that finished, in that order, not yet seen
        self._finished: dict[int, None] = {}  # groups seen finished, reply not yet fetched
        #: guards claiming and finishing work, and going to sleep; taken through :func:`locked`
        #: wherever the caller's thread takes it (a Ctrl-C must not leave it held)
        self._lock = threading.RLock()
        self._wakeups = Wakeups(self._lock, spin)
        self._stopping = False

    # ----------------------------------------------------------------- lifecycle
    def launch(self) -> list[EnvDescription]:
        g = self.num_workers
        self.groups, self._commands, self._replies = [None] * g, [None] * g, [_EMPTY] * g
        self._parts, self._runners = [[] for _ in range(g)], [[] for _ in range(g)]
        self._shared = [False] * g
        self._sent, self._served, self._taken = [0] * g, [0] * g, [0] * g
        threads = max(1, self.threads or 1)
        self.helpers = [_Helper(self, k + 1) for k in range(threads - 1)]  # the caller is one
        self._shares = [Share(len(self.helpers) + 1, stop - start) for start, stop in self.partition]
        pace = Pace(g) if self.helpers and not self.whole_batches else None  # see the class docstring
        self._pending = Pending(self._commands, self._shares, self._shared, pace)
        self._whole = WholeSteps([h.mailbox for h in self.helpers], self._shares)
        for h in self.helpers:
            h.thread.start()
        for w, (start, _) in enumerate(self.partition):  # groups are built in parallel too
            self.submit(w, Build(self.group_fns(w), start))  # type: ignore[arg-type]
        for w in range(g):  # every group is built (or failed) before one is used
            self.ready([w])
        results = [self._take(w) for w in range(g)]
        failed = [value for ok, value in results if not ok]
        if failed:
            raise failed[0]
        return [d for _, described in results for d in described]

    def attach(self, buffers: StepBuffers) -> None:
        # every group is idle; taking the next command (under the lock, or out of a mailbox:
        # deque operations are atomic) orders this write before the thread that runs it reads it
        for group, (start, stop) in zip(self.groups, self.partition, strict=True):
            group.attach(buffers.rows(start, stop))  # type: ignore[union-attr]

    def close(self, timeout: float | None = None) -> None:
        locked(self._lock, self._stop)
        helpers, self.helpers = self.helpers, []
        self._whole.clear()
        for h in helpers:
            h.wake.put(None)
        self._wakeups.wake_caller()  # a wait in another thread ends (ready() returns nothing)
        deadline = time.monotonic() + (5.0 if timeout is None else timeout)
        for h in helpers:  # a thread stuck in a hung env is abandoned (it is a daemon)
            h.thread.join(max(0.0, deadline - time.monotonic()))
        groups, self.groups = self.groups, []
        for w, group in enumerate(groups):  # not one that a thread still runs
            if (group is not None and all(r == _CALLER for r in self._runners[w])
                    and not self._whole.running(w)):
                warn_close_failures(group.close())
        self._finished.clear()

    def _stop(self) -> None:
        self._stopping = True
        self._wakeups.work.bump()  # a spinning helper looks up and sees it
        self._pending.clear()
        for share in self._shares:
            share.clear()

    # ----------------------------------------------------------------- the engine's side
    def submit(self, worker: int, command: Command) -> None:
        # Counted, then queued: a signal handler that raises between the two leaves a count
        # that settle() puts right (a command nobody runs is not waited for).
        self._commands[worker] = command
        kind = type(command)
        share = self._shares[worker]
        if (kind is Step or kind is GivenStep or kind is Reset) and share.size > 1:
            self._shared[worker] = True
            share.deal(command.ids)  # type: ignore[union-attr,arg-type]
        elif kind is Build and share.size > 1 and self.whole_batches:
            self._shared[worker] = True  # each env made by the thread that will step it
            share.deal(None)
        else:
            self._shared[worker] = False
        self._sent[worker] += 1
        if self._shared[worker] and self.whole_batches:
            self._whole.open(worker)
            self._wakeups.queued(every_helper=True)
            return
        self._pending.append(worker)
        self._wakeups.queued(every_helper=False)

    def outstanding(self, worker: int) -> bool:
        return self._sent[worker] != self._taken[worker]

    def ready(self, workers: Collection[int], timeout: float | None = None) -> list[int]:
        """Groups among ``workers`` with a reply, in the order they finished. The caller takes
        queued work itself while it waits, unless the wait has a ``timeout`` and helpers can
        do the work (nothing can cut an env's step short to keep a deadline)."""
        if self._caller_in >= 0:  # an earlier wait was cut short inside a group's command
            self._cut(self._caller_in, KeyboardInterrupt())
        deadline = None if timeout is None else time.monotonic() + timeout
        wanted = workers  # a handful of groups: a list is looked up as fast as a set
        greedy = self.whole_batches
        # env code cannot be bounded: under a timeout the caller steps nothing while a helper can
        helps = not self.helpers or timeout is None
        if self._whole.any_open(wanted):
            self._serve_whole(wanted, helps, deadline)
        while True:
            found = None if greedy and self._pending and helps else self._finished_now(wanted)
            if found:
                return found
            if helps:
                w = self._claim(_CALLER)
                if w >= 0:
                    self._serve_here(w)
                    continue
            found = self._finished_now(wanted)
            if found or self._stopping or (deadline is not None and time.monotonic() >= deadline):
                return found
            self._await_finish(deadline, helps)

    def _serve_whole(self, wanted: Collection[int], helps: bool, deadline: float | None) -> None:
        """Take part in the whole-batch steps among ``wanted`` (when the caller ``helps``), then
        wait until each is complete (or ``deadline``)."""
        whole = self._whole
        for w in wanted:  # (a share all taken by the helpers makes a part that steps nothing)
            if helps and whole.parts[w] is not None:
                whole.caller_part(w, self._run, self._cut_error)
        moved = None
        while True:
            waiting = False
            for w in wanted:
                if whole.parts[w] is not None and not self._whole_done(w, whole.complete(w)):
                    waiting = True
            if not waiting or self._stopping or (deadline is not None and time.monotonic() >= deadline):
                return
            if moved is None:  # taken before a look that precedes a wait: no post goes unseen
                moved = moved_since(self._wakeups.progress)
                continue
            self._finished_now(())  # what general work finished meanwhile is seen, not waited on
            self._await_finish(deadline, False, moved)
            moved = None

    def _whole_done(self, w: int, parts: list[tuple[bool, Any]] | None) -> bool:
        """Finish group ``w``'s whole-batch step from its ``parts`` (None: not complete yet)."""
        if parts is None:
            return False
        command = self._commands[w]
        if type(command) is Build:
            reply, self.groups[w] = built_group(parts, command.env_fns, command.start, w,
                                                self.autoreset_mode)
        else:
            reply = joined(parts)
        self._complete(w, reply)
        return True

    def _complete(self, w: int, reply: tuple[bool, Any]) -> None:
        """Group ``w``'s command is done with ``reply`` (both paths end here)."""
        self._replies[w] = reply
        self._served[w] += 1
        self._done.append(w)

    def fetch(self, worker: int) -> Any:
        ok, value = self._take(worker)
        if not ok:
            raise value
        return value

    def settle(self, worker: int, timeout: float | None) -> bool:
        """Let the threads running ``worker``'s command finish, drop what none started and the
        reply, and count afresh from what the group really served.

        An interruption can land between counting a command and queueing it, or cut the caller
        out of a group it was stepping; the group's own count and its runners are the truth.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        whole = self._whole
        while True:
            still_open = whole.parts[worker] is not None and not self._whole_done(worker, whole.drop(worker))
            if not still_open and locked(self._lock, self._settled, worker):
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            self._await_finish(deadline, False)

    def _settled(self, worker: int) -> bool:
        """Drop what no thread started of ``worker``'s command; when no thread runs it any more,
        count afresh from what it served (True)."""
        self._pending.discard(worker)  # never started, or its envs not all taken
        self._shares[worker].clear()
        runners = self._runners[worker]
        while _CALLER in runners:  # the caller was cut out of it
            runners.remove(_CALLER)
        if self._caller_in == worker:
            self._caller_in = -1
        if runners:
            return False
        self._sent[worker] = self._taken[worker] = self._served[worker]
        self._replies[worker] = _EMPTY
        self._parts[worker].clear()
        self._finished.pop(worker, None)
        return True

    # ----------------------------------------------------------------- running commands
    def _claim(self, who: int) -> int:
        """A queued group for ``who`` to run (or to take envs of, for a shared step); -1 when
        nothing is queued."""
        if not self._pending:
            return -1
        return locked(self._lock, self._claim_next, who)

    def _claim_next(self, who: int) -> int:
        w = -1 if self._stopping else self._pending.next_for(who == _CALLER)
        if w >= 0:
            if who == _CALLER:
                self._caller_in = w  # first: a cut after it is put right by the next wait
            self._runners[w].append(who)
            self._pending.taken(w)
        return w

    def _run(self, w: int, slot: int) -> Any:
        command = self._commands[w]
        if type(command) is Build:
            if self._shared[w]:
                return make_block(command.env_fns, self._shares[w], slot)
            made = self.groups[w] = EnvGroup(command.env_fns, command.start, w, self.autoreset_mode)
            return made.describe()
        group: Any = self.groups[w]
        if not self._shared[w]:
            return command.run(group)
        return run_share(command, group, self._shares[w], slot)

    def _serve_here(self, w: int) -> None:
        """Run (a share of) group ``w``'s command in the caller's thread, where a Ctrl-C must
        get through: an exception that is not an ``Exception`` ends the wait, and the group's
        reply says it was cut short."""
        try:
            reply = (True, self._run(w, _CALLER))
        except Exception as exc:
            reply = (False, exc)
        except BaseException as exc:
            self._cut(w, exc)
            raise
        self._finish(w, _CALLER, reply)

    def _cut(self, w: int, exc: BaseException) -> None:
        """The caller left group ``w``'s command part-way (``exc`` cut it): that is its reply."""
        self._finish(w, _CALLER, (False, self._cut_error(w, exc)))

    def _cut_error(self, w: int, exc: BaseException) -> VecEnvError:
        return VecEnvError(f"worker {w}: its {type(self._commands[w]).__name__.lower()} was cut short by "
                           f"{type(exc).__name__} in the calling thread; call reset()")

    def serve_forever(self, helper: _Helper) -> None:
        """A helper thread's loop: take queued work and run it until the transport closes."""
        me = helper.slot
        pending, mailbox, wakeups, whole, lock = self._pending, helper.mailbox, self._wakeups, self._whole, self._lock
        jobs = mailbox.jobs

        def busy() -> bool:
            return bool(pending or jobs or self._stopping)

        while not self._stopping:
            if jobs:
                w = mailbox.take()
                if w >= 0:  # else the caller took it back
                    reply = self._helper_part(w, me)
                    with lock:
                        whole.post(mailbox, w, reply)
                        wake = wakeups.progressed()
                    if wake:
                        wakeups.wake_caller()
                continue
            w = self._claim(me)
            if w >= 0:
                self._finish(w, me, self._helper_part(w, me))
                continue
            wakeups.helper_nap(helper.wake, busy)

    def _helper_part(self, w: int, me: int) -> tuple[bool, Any]:
        """Helper ``me`` runs group ``w``'s command (or its share of it). Whatever env code
        raises, a ``SystemExit`` or ``KeyboardInterrupt`` included, is its reply, raised in the
        caller by :meth:`fetch` as if the caller had stepped that env; the thread keeps serving."""
        try:
            return part_of(self._run(w, me))
        except BaseException as exc:
            return False, exc

    def _finish(self, w: int, who: int, reply: tuple[bool, Any]) -> None:
        """``who`` is done with group ``w``; the last runner of a step with no env left makes
        the group's reply from every runner's part."""
        if locked(self._lock, self._finished_by, w, who, reply):
            self._wakeups.wake_caller()

    def _finished_by(self, w: int, who: int, reply: tuple[bool, Any]) -> bool:
        """:meth:`_finish` under the lock; whether the caller sleeps and must be woken."""
        runners = self._runners[w]
        if who in runners:
            runners.remove(who)
        if who == _CALLER:
            self._caller_in = -1
        if self._shared[w]:
            parts = self._parts[w]
            parts.append(reply)
            if runners or self._shares[w]:
                return False  # others still step this group's envs
            reply = joined(parts)
            parts.clear()
        self._pending.done(w)
        self._complete(w, reply)
        return self._wakeups.progressed()

    # ----------------------------------------------------------------- the caller's waits
    def _finished_now(self, wanted: Collection[int]) -> list[int]:
        """Groups among ``wanted`` whose command is done, in the order they finished."""
        done, finished = self._done, self._finished
        while done:
            finished[done.popleft()] = None
        sent, served, taken = self._sent, self._served, self._taken
        return [w for w in finished if w in wanted and taken[w] < sent[w] == served[w]]

    def _await_finish(self, deadline: float | None, helps: bool,
                      moved: Callable[[], bool] | None = None) -> None:
        """Wait until a group finishes, a helper posts its part of a shared step, work is queued
        (when the caller ``helps``) or ``deadline``; a spurious return is harmless. ``moved``:
        whether there was progress since the caller last looked (default: since now)."""
        wakeups = self._wakeups
        if moved is None:
            moved = moved_since(wakeups.progress, wakeups.work) if helps else moved_since(wakeups.progress)
        queued = helps and self._pending and self._pending.pace is None  # else looked at under the lock
        if self._done or queued or (wakeups.spin and spin_until(moved, wakeups.spin)):
            return
        if locked(self._lock, self._sleep_as_caller, helps):
            wakeups.caller_sleep(deadline)

    def _sleep_as_caller(self, helps: bool) -> bool:
        """Mark the caller asleep unless there is something to look at (then False)."""
        whole = self._whole
        if self._done or whole.posted or (helps and self._pending.caller_may_take()):
            whole.posted = False
            return False
        self._wakeups.caller_asleep = True
        return True

    def _take(self, w: int) -> tuple[bool, Any]:
        self._finished.pop(w, None)
        self._taken[w] = self._sent[w]
        reply, self._replies[w] = self._replies[w], _EMPTY
        return reply

