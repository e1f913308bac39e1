"""In-flight bookkeeping: which worker runs what, which envs are ready, and every deadline.

:class:`Dispatcher` is the part of :class:`~vecenv.engine.VectorEnv` that sends commands to
workers and collects replies: one command in flight per worker (steps for a busy worker wait in
``_deferred``), replies taken in the order workers finish, async batches served from ``_ready``,
``step_timeout`` checked on every wait. Failures go to :class:`~vecenv.engine.recovery.Recovery`.

It also keeps every call interruption-safe (:meth:`Dispatcher._dispatching`, ``_collecting``,
``_one_call``) and lets one caller at a time in (:func:`one_caller`).
"""

from __future__ import annotations

import multiprocessing
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import wraps
from typing import Any, TypeVar

import numpy as np

from vecenv.engine.infos import batch_columns
from vecenv.engine.state import CallState
from vecenv.engine.transport import Transport
from vecenv.errors import (
    AlreadyPendingCallError,
    ClosedEnvironmentError,
    NoAsyncCallError,
    StepTimeoutError,
    WorkerDiedError,
)
from vecenv.policy import FailurePolicy
from vecenv.spaces import StepBuffers
from vecenv.worker import InfoEntry
from vecenv.worker.commands import Command, InfoColumns, Step, with_given

__all__ = ["CallerGuard", "Dispatcher", "Overdue", "one_caller"]

#: longest wait for a worker to finish its command when the env settles after an interruption
SETTLE_TIMEOUT = 30.0


class Overdue(Exception):
    """These workers overran ``step_timeout``."""

    def __init__(self, workers: list[int]) -> None:
        self.workers = workers


class CallerGuard:
    """Who is inside a vector env's API now: :attr:`owner` is ``(thread ident, method)`` or ``None``.

    Taken by :func:`one_caller` with one ``dict.setdefault``, a test-and-set that is atomic (one C
    call, under the GIL or a free-threaded build's per-dict lock) and never blocks.
    """

    __slots__ = ("slot",)

    def __init__(self) -> None:
        self.slot: dict[int, tuple[int, str]] = {}

    @property
    def owner(self) -> tuple[int, str] | None:
        return self.slot.get(0)


_F = TypeVar("_F", bound=Callable[..., Any])


def one_caller(method: _F) -> _F:
    """Let one thread at a time into ``method`` of a vector env (a second caller gets a
    RuntimeError at once, before anything is touched); calls it makes itself pass through.

    Interrupt-safe: the caller owns the guard through a token of its own, taken inside the
    ``try`` and given back by the ``finally`` whatever was raised, wherever (an interruption
    just after the take included), so a KeyboardInterrupt never leaves the guard held.
    """
    name = method.__name__
    get_ident = threading.get_ident

    @wraps(method)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        slot = self._guard.slot
        me = get_ident()
        owner = slot.get(0)
        if owner is not None and owner[0] == me:  # inside this thread's own call
            return method(self, *args, **kwargs)
        token = (me, name)
        try:
            owner = slot.setdefault(0, token)
            if owner is not token:
                raise RuntimeError(_refusal(owner, name))
            return method(self, *args, **kwargs)
        finally:  # no call here: a signal handler runs only at calls and loops, and must not skip this
            if 0 in slot and slot[0] is token:
                del slot[0]

    return guarded  # type: ignore[return-value]


def _refusal(owner: tuple[int, str], method: str) -> str:
    holder = next((t.name for t in threading.enumerate() if t.ident == owner[0]), f"id {owner[0]}")
    return (
        f"one caller at a time: {method}() was called from thread {threading.current_thread().name!r} "
        f"while thread {holder!r} is already running {owner[1]}() on this vector env; "
        "use one vector env per thread, or hold a lock around its calls"
    )


class Dispatcher:
    """Sends commands, tracks them in flight, and gathers the replies (a mixin of VectorEnv)."""

    _transport: Transport
    _buffers: StepBuffers
    policy: FailurePolicy
    num_envs: int
    batch_size: int
    _async_batches: bool
    closed: bool

    def _init_flight(self, n: int) -> None:
        self._in_flight: dict[int, np.ndarray] = {}  # worker -> global ids of its command
        self._sent_at: dict[int, float] = {}
        self._state = CallState.DEFAULT
        self._wait_interrupted = False  # a wait was cut short: reset() may drop its call
        self._busy = np.zeros(n, dtype=np.bool_)  # in flight, or ready but not yet returned
        self._deferred: dict[int, list[int]] = {}  # worker -> env ids to step once it is free
        self._ready: deque[int] = deque()
        self._held: dict[int, InfoEntry] = {}
        self._columns: list[InfoColumns] = []  # full batches: infos still in columns
        self._guard = CallerGuard()

    # ================================================================ interruption safety
    # Each rule is one ``_cut_*`` method; the context managers apply them around cold paths, and
    # the step path (step, send, recv) calls them from plain try/except, which costs nothing.
    def _cut_dispatch(self, previous: CallState) -> None:
        """Sending was cut short: INTERRUPTED (reset() or close() next) if anything went out, never
        half-sent work that a later call would mistake for its own."""
        self._state = CallState.INTERRUPTED if self._in_flight or previous is not CallState.DEFAULT else previous

    def _cut_call(self) -> None:
        """``step``/``reset``/``call`` are one call to their user: cut short anywhere (between
        send and wait too), what they left pending is the next reset()'s to drop. A call refused
        because another is pending left nothing: that one stays pending, as in gymnasium."""
        if self._state is not CallState.DEFAULT and not isinstance(sys.exc_info()[1], AlreadyPendingCallError):
            self._wait_interrupted = True

    def _cut_collect(self) -> None:
        """Collecting was cut short. An exception in the wait itself (a ``KeyboardInterrupt``)
        leaves the call pending, to wait again or to reset; one that leaves replies half taken
        makes the env INTERRUPTED. (A caller's timeout is not a cut: the call stays pending.)"""
        if not self._wait_interrupted and (self._in_flight or self._state is not CallState.DEFAULT):
            self._state = CallState.INTERRUPTED

    @contextmanager
    def _dispatching(self, state: CallState) -> Iterator[None]:
        previous, self._state = self._state, state
        try:
            yield
        except BaseException:
            self._cut_dispatch(previous)
            raise

    @contextmanager
    def _one_call(self) -> Iterator[None]:
        try:
            yield
        except BaseException:
            self._cut_call()
            raise

    @contextmanager
    def _collecting(self) -> Iterator[None]:
        try:
            yield
        except multiprocessing.TimeoutError:
            raise
        except BaseException:
            self._cut_collect()
            raise

    # ------------------------------------------------------------ sending
    def _submit(self, w: int, command: Command, gids: np.ndarray) -> None:
        """Record ``command`` as in flight, then send it (the record comes first, so an
        interruption between the two leaves a worker to settle, never a reply nobody expects)."""
        self._in_flight[w] = gids
        if self.policy.step_timeout is not None:
            self._sent_at[w] = time.monotonic()
        if type(command) is Step and self._buffers.actions.given:  # actions as the caller gave them
            command = with_given(command, self._buffers.actions.given, *self._partition[w])
        self._transport.submit(w, command)

    # ------------------------------------------------------------ waiting
    def _gather(self, count: int | None, timeout: float | None, method: str) -> None:
        """Collect replies until ``count`` envs are ready (every reply when ``None``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._in_flight if count is None else len(self._ready) < count:
            if not self._in_flight:
                raise NoAsyncCallError(f"Calling `{method}` with no envs in flight.", method)
            try:
                ready = self._wait_ready(deadline, timeout, method)
            except Overdue as late:
                for w in late.workers:
                    gids = self._in_flight.pop(w)
                    err = StepTimeoutError(gids.tolist(), w, self.policy.step_timeout, method.removesuffix("_wait"))
                    self._worker_failed(w, gids, err)
                continue
            for w in ready:
                self._take_reply(w)

    def _wait_ready(self, deadline: float | None, timeout: float | None, method: str) -> list[int]:
        """Workers with a reply, waiting until one has, the caller's deadline, or a step deadline.

        An exception inside the wait itself (a ``KeyboardInterrupt``) leaves the call pending
        and resumable; a ``close()`` from another thread ends the wait with ClosedEnvironmentError.
        """
        workers = list(self._in_flight)
        step_timeout = self.policy.step_timeout
        timed = deadline is not None or step_timeout is not None
        now = time.monotonic() if timed else 0.0
        left = None if deadline is None else max(0.0, deadline - now)
        if step_timeout is not None:
            due = min(self._sent_at[w] for w in workers) + step_timeout
            left = max(0.0, due - now) if left is None else min(left, max(0.0, due - now))
        try:
            ready = self._transport.ready(workers, left)
        except BaseException as exc:
            if self.closed:
                raise ClosedEnvironmentError(f"the vector env was closed during `{method}`") from exc
            self._wait_interrupted = True
            raise
        if self.closed:
            raise ClosedEnvironmentError(f"the vector env was closed during `{method}`")
        if not timed:
            return ready
        now = time.monotonic()
        if step_timeout is not None:  # also when others are ready: async batches never wait on all
            late = [w for w in workers if w not in ready and now - self._sent_at[w] >= step_timeout]
            if late:
                raise Overdue(late)
        if not ready and deadline is not None and now >= deadline:
            raise multiprocessing.TimeoutError(f"The call to `{method}` has timed out after {timeout} second(s).")
        return ready

    def _take_reply(self, w: int) -> None:
        gids = self._in_flight.pop(w)
        try:
            reply = self._transport.fetch(w)
        except WorkerDiedError as exc:
            self._worker_failed(w, gids, exc)
            return
        except BaseException:
            self._drain()
            raise
        self._accept(w, gids, reply.entries, reply.objects)

    def _accept(self, w: int, gids: np.ndarray, entries: Sequence[InfoEntry], objects: Any) -> None:
        """Take a worker's results for ``gids``: they are ready to be returned."""
        if objects is not None:
            self._buffers.observations.set_objects(objects, gids)
        if type(entries) is InfoColumns and not self._async_batches:
            self._columns.append(entries)  # a full batch may batch them by column
        else:
            for entry in entries:
                self._held[entry.index] = entry
        if self._async_batches:  # full batches wait for every reply, not a count
            self._ready.extend(gids.tolist())
        deferred = self._deferred.pop(w, None)
        if deferred:
            ids = np.array(sorted(deferred), dtype=np.int64)
            self._submit(w, Step(ids - self._partition[w][0]), ids)

    def _fetch_now(self, w: int, command: Command) -> Any:
        """Run ``command`` on ``w`` and wait for its reply (outside the in-flight bookkeeping)."""
        self._transport.submit(w, command)
        if not self._transport.ready([w], self.policy.step_timeout):
            self._transport.terminate(w)
            raise StepTimeoutError(self._partition.envs_of(w), w, self.policy.step_timeout, "restart")
        return self._transport.fetch(w)

    # ------------------------------------------------------------ clearing
    def _drain(self) -> None:
        """After a failure: wait out every other worker's reply, so none arrives a step late.

        A worker that does not answer within ``step_timeout`` is ended.
        """
        for w in list(self._in_flight):
            self._in_flight.pop(w)
            try:
                if self._transport.ready([w], self.policy.step_timeout):
                    self._transport.fetch(w)
                else:
                    self._transport.terminate(w)
            except BaseException:
                pass
        self._clear_flight()

    def _settle(self) -> None:
        """After an interruption: let every worker finish what it was given and drop the replies,
        so the next call starts from a known state. A worker that does not finish within
        ``step_timeout`` (or :data:`SETTLE_TIMEOUT`) is ended; the next command reports it."""
        limit = self.policy.step_timeout or SETTLE_TIMEOUT
        for w in range(self._transport.num_workers):
            if not self._transport.settle(w, limit):
                self._transport.terminate(w)
        self._in_flight.clear()
        self._clear_flight()

    def _columns_batch(self, raw: bool) -> dict[str, Any] | None:
        """A full batch's infos straight from its columns when no env's info came another way
        (and batched infos are wanted); otherwise the columns become per-env entries."""
        columns = self._columns
        infos = None if raw or self._held else batch_columns(columns, self.num_envs)
        if infos is None:
            for chunk in columns:
                for entry in chunk:
                    self._held[entry.index] = entry
        columns.clear()
        return infos

    def _clear_flight(self) -> None:
        if self._deferred:
            self._deferred.clear()
        if self._ready:
            self._ready.clear()
        if self._held:
            self._held.clear()
        if self._columns:
            self._columns.clear()
        if self._async_batches:  # full batches never mark envs busy
            self._busy.fill(False)
        self._state = CallState.DEFAULT
        self._wait_interrupted = False
