"""In-flight bookkeeping: :class:`InFlight`, what every worker is running and what waits on it.

A :class:`~vecenv.engine.VectorEnv` holds one InFlight (one of the two collectors of
:mod:`.batches`) and sends every command through it::

    VectorEnv.step(actions) -> InFlight.results(step=...): one try around the whole step
      -> check_actions               actions into the shared action buffer, ids checked
      -> put_steps                   one command per worker: Transport.submit, or deferred
                                     while that worker is busy (async batches)
      -> collect                     FullBatches: every reply; AsyncBatches: the first
                                     batch_size envs ready (send() and recv() alone:
                                     send_steps and results, each its half)
        -> gather    Transport.ready / fetch, in the order workers finish; a worker that died
                     or overran step_timeout goes to worker_failed: a Recovery plan, or fail()
        -> accept    rows are in the buffers already; infos held per env

The call state (:mod:`.state`) moves only by the events the methods here fire: a command sent,
results returned, an interruption while sending or collecting, in-flight work dropped.
"""

from __future__ import annotations

import copy
import multiprocessing
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from vecenv.engine.checks import check_env_ids, refuse_ended
from vecenv.engine.partition import Partition
from vecenv.engine.recovery import Recovery, Restart
from vecenv.engine.state import CallLifecycle, CallState, Event
from vecenv.engine.transport import Transport
from vecenv.errors import (
    AlreadyPendingCallError,
    ClosedEnvironmentError,
    NoAsyncCallError,
    StepTimeoutError,
    VecEnvError,
    WorkerDiedError,
)
from vecenv.infos import InfoEntry
from vecenv.policy import FailurePolicy
from vecenv.spaces import StepBuffers
from vecenv.worker.commands import STEP_ALL, Command, Reset, Step, with_given
from vecenv.worker.restarts import truncate_rows

__all__ = ["InFlight", "SETTLE_TIMEOUT"]

#: longest wait for a worker to finish its command when the env settles after an interruption
SETTLE_TIMEOUT = 30.0

_CHECKING, _SENDING, _COLLECTING = "checking", "sending", "collecting"  # where a step was cut short

#: ``overdue(worker, its envs, method)``: what becomes of a worker that overran ``step_timeout``
Overdue = Callable[[int, np.ndarray, str], None]


class InFlight:
    """The commands in flight for one vector env of ``partition.num_envs`` envs, and their results.

    One command per worker at a time; ``in_flight[w]`` holds the envs of worker ``w``'s command.
    A step for a busy worker waits in ``deferred`` (async batches); ``pending_infos`` keeps each env's
    info entry until its batch is returned. A subclass collects the results
    (:meth:`collect`): every env's (full batches) or the first ready (async batches).
    """

    def __init__(self, transport: Transport, partition: Partition, policy: FailurePolicy,
                 batch_size: int, autoreset_mode: AutoresetMode, copy: bool) -> None:
        n = partition.num_envs
        self.transport, self.partition, self.policy = transport, partition, policy
        self.num_envs, self.batch_size = n, batch_size
        self.autoreset_mode, self.copy = autoreset_mode, copy
        self.buffers: StepBuffers  # the transport's, set once it has allocated them
        #: the vector env was closed: a wait in another thread stops
        self.closed = True
        self.recovery = Recovery(self)
        self.lifecycle = CallLifecycle()
        self.in_flight: dict[int, np.ndarray] = {}  # worker -> global ids of its command
        self.commands: dict[int, Command] = {}  # worker -> its last command (a restart runs a reset again)
        self.sent_at: dict[int, float] = {}
        self.busy = np.zeros(n, dtype=np.bool_)
        self.needs_reset = np.zeros(n, dtype=np.bool_)  # DISABLED mode: ended, not yet reset
        self.deferred: dict[int, list[int]] = {}  # worker -> env ids to step once it is free
        self.ready: deque[int] = deque()
        self.pending_infos: dict[int, InfoEntry] = {}
        #: envs whose worker was restarted while they were not in flight; their next send returns
        #: a truncation instead of stepping (the restart report, and for SAME_STEP the new env's
        #: reset observation and info)
        self.restarted: dict[int, tuple[dict, Any, dict]] = {}

    @property
    def state(self) -> CallState:
        return self.lifecycle.state

    # ================================================================ interruptions
    def interrupted_send(self, previous: CallState) -> None:
        """Sending was cut short: INTERRUPTED (reset() or close() next) if anything went out or
        was pending before (``previous``), never half-sent work that a later call would mistake
        for its own; else back to DEFAULT."""
        unsent = not self.in_flight and previous is CallState.DEFAULT
        self.lifecycle.fire(Event.UNSENT if unsent else Event.SEND_CUT)

    def interrupted_call(self) -> None:
        """``step``/``reset``/``call`` are one call to their user: cut short anywhere (between
        send and wait too), what they left pending is the next reset()'s to drop. A call refused
        because another is pending left nothing: that one stays pending, as in gymnasium."""
        if self.state is not CallState.DEFAULT and not isinstance(sys.exc_info()[1], AlreadyPendingCallError):
            self.lifecycle.fire(Event.WAIT_CUT)

    def interrupted_collect(self) -> None:
        """Collecting was cut short. An exception in the wait itself (a ``KeyboardInterrupt``)
        leaves the call pending, to wait again or to reset (so does a caller's timeout); one
        that leaves replies half taken makes the env INTERRUPTED."""
        if not self.lifecycle.droppable and (self.in_flight or self.state is not CallState.DEFAULT):
            self.lifecycle.fire(Event.COLLECT_CUT)

    @contextmanager
    def sending(self, event: Event) -> Iterator[None]:  # a reset or a call
        previous = self.state
        try:
            self.lifecycle.fire(event)
            yield
        except BaseException:
            self.interrupted_send(previous)
            raise

    @contextmanager
    def one_call(self) -> Iterator[None]:
        try:
            yield
        except BaseException:
            self.interrupted_call()
            raise

    @contextmanager
    def collecting(self) -> Iterator[None]:
        try:
            yield
        except multiprocessing.TimeoutError:
            raise
        except BaseException:
            self.interrupted_collect()
            raise

    def check_idle(self, method: str) -> None:
        """Refuse ``method`` while a call is pending or after an interruption."""
        if self.state is CallState.INTERRUPTED:
            raise VecEnvError(
                f"Calling `{method}` after a call was interrupted part-way: call reset() (which lets "
                "every worker finish first) or close()"
            )
        if self.state is not CallState.DEFAULT or self.in_flight:
            state = self.state.value
            hint = "; call reset() to drop it" if self.lifecycle.droppable else ""
            raise AlreadyPendingCallError(
                f"Calling `{method}` while waiting for a pending call to `{state}` to complete{hint}.", state
            )

    def may_send_steps(self) -> bool:
        """Whether a step may be sent in the current state (else :meth:`check_idle` says why)."""
        return self.state is CallState.DEFAULT

    # ================================================================ sending
    def submit(self, w: int, command: Command, envs: np.ndarray) -> None:
        """Record ``command`` as in flight, then send it (the record comes first, so an
        interruption between the two leaves a worker to settle, never a reply nobody expects)."""
        self.in_flight[w] = envs
        self.commands[w] = command
        if self.policy.step_timeout is not None:
            self.sent_at[w] = time.monotonic()
        if type(command) is Step and self.buffers.actions.unconverted:  # actions as the caller gave them
            command = with_given(command, self.buffers.actions.unconverted, *self.partition[w])
        self.transport.submit(w, command)

    def send_reset(self, ids: np.ndarray, seeds: list, options: dict | None) -> None:
        """Reset the envs ``ids``, env ``i`` with ``seeds[i]`` and ``options`` as given."""
        with self.sending(Event.SEND_RESET):
            self.resetting(ids)
            self.needs_reset[ids] = False
            by_worker = list(self.partition.by_worker(ids))
            self.choose_slot([w for w, _, _ in by_worker])
            for w, local, envs in by_worker:
                a, b = self.partition[w]
                self.submit(w, Reset(seeds[a:b], options, local), envs)
            self.transport.flush()

    def resetting(self, ids: np.ndarray) -> None:
        """The envs ``ids`` are about to be reset."""

    def check_actions(self, actions: Any, env_ids: Any) -> np.ndarray | None:
        """Check ``env_ids`` and write ``actions`` into the action buffer; the ids (None: all)."""
        n, disabled = self.num_envs, self.autoreset_mode is AutoresetMode.DISABLED
        if env_ids is None:
            self.check_all_envs()
            self.buffers.actions.assign(actions, None, "actions")
            if disabled and self.needs_reset.any():
                refuse_ended(np.flatnonzero(self.needs_reset))
            return None
        ids = check_env_ids(env_ids, n)
        if self.busy[ids].any():
            raise ValueError(
                f"send(actions, env_ids): envs {ids[self.busy[ids]].tolist()} are still stepping or waiting to be "
                "received; send actions only to envs returned by recv()"
            )
        if disabled and self.needs_reset[ids].any():
            refuse_ended(ids[self.needs_reset[ids]])
        self.buffers.actions.assign(actions, ids, "actions")
        return ids

    def check_all_envs(self) -> None:
        """A step for every env (``env_ids=None``) may be sent."""

    def stepping(self, ids: np.ndarray) -> None:
        """The envs ``ids`` are about to be stepped."""

    def send_steps(self, ids: np.ndarray | None) -> None:
        """Step the envs ``ids`` (all when None) with the actions in the buffer (:meth:`put_steps`)."""
        previous = self.state
        try:  # what sending() does, inline on the step path
            self.put_steps(ids)
        except BaseException:
            self.interrupted_send(previous)
            raise

    def put_steps(self, ids: np.ndarray | None) -> None:
        """Send the steps of the envs ``ids``: each worker's share goes now, or once its worker is
        free; an env whose worker was restarted while it waited comes back truncated instead."""
        restarted = None
        if self.restarted:  # whole batches too: a call may have restarted a worker
            ids = np.arange(self.num_envs) if ids is None else ids
            restarted = [i for i in ids.tolist() if i in self.restarted]
        self.lifecycle.fire(Event.SEND_STEP)
        if ids is None:
            commands = self.partition.whole_steps
        else:
            self.stepping(ids)
            stepping = ids[~np.isin(ids, restarted)] if restarted else ids
            commands = [(w, STEP_ALL if local is None else Step(local), envs)
                        for w, local, envs in self.partition.by_worker(stepping)]
        self.choose_slot([w for w, _, _ in commands])
        for w, command, envs in commands:
            if w in self.in_flight:
                self.deferred.setdefault(w, []).extend(envs.tolist())
            else:
                self.submit(w, command, envs)
        self.transport.flush()
        if restarted:
            self.return_restarted(restarted)

    def choose_slot(self, workers: list[int]) -> None:
        """Before ``workers`` write observations: where they are lent, the slot to write
        (:mod:`vecenv.spaces.slots`), the other workers' rows carried over to it."""
        lender = self.buffers.lender
        if lender is not None:
            commanded = set(workers)
            lender.choose([self.partition[w] for w in range(len(self.partition)) if w not in commanded])

    def return_restarted(self, ids: list[int]) -> None:
        """Return the envs ``ids``, whose worker was restarted while they waited, as truncated.

        The observation is the last one the caller got (NEXT_STEP, DISABLED) or the new env's
        first one with that last one as ``final_obs`` (SAME_STEP); the infos say restarted.
        """
        b = self.buffers
        for i in ids:
            report, reset_obs, reset_info = self.restarted.pop(i)
            truncate_rows(b, i)
            if reset_obs is None:
                entry = InfoEntry(i, dict(report))
            else:
                final_obs = copy.deepcopy(b.observations.item(i))
                b.observations.write(i, reset_obs)
                entry = InfoEntry(i, {**reset_info, **report}, True, final_obs, dict(report))
            self.pending_infos[i] = entry
            self.ready.append(i)

    # ================================================================ waiting
    def wait_ready(self, deadline: float | None, timeout: float | None, method: str,
                   overdue: Overdue, every: bool = False) -> list[int]:
        """Workers with a reply, waiting until one has, the caller's deadline, or a step deadline;
        a worker past ``step_timeout`` leaves the flight through ``overdue``.

        An exception inside the wait itself (a ``KeyboardInterrupt``) leaves the call pending
        and resumable; a ``close()`` from another thread ends the wait with ClosedEnvironmentError.
        """
        workers = list(self.in_flight)
        step_timeout = self.policy.step_timeout
        timed = deadline is not None or step_timeout is not None
        now = time.monotonic() if timed else 0.0
        left = None if deadline is None else max(0.0, deadline - now)
        if step_timeout is not None:
            due = min(self.sent_at[w] for w in workers) + step_timeout
            left = max(0.0, due - now) if left is None else min(left, max(0.0, due - now))
        try:
            ready = (self.transport.ready_all if every else self.transport.ready)(workers, left)
        except BaseException as exc:
            if self.closed:
                raise ClosedEnvironmentError(f"the vector env was closed during `{method}`") from exc
            self.lifecycle.fire(Event.WAIT_CUT)
            raise
        if self.closed:
            raise ClosedEnvironmentError(f"the vector env was closed during `{method}`")
        if not timed:
            return ready
        now = time.monotonic()
        if step_timeout is not None:  # also when others are ready: async batches never wait on all
            late = [w for w in workers if w not in ready and now - self.sent_at[w] >= step_timeout]
            for w in late:
                overdue(w, self.in_flight.pop(w), method)
            if late:
                return ready
        if not ready and deadline is not None and now >= deadline:
            raise multiprocessing.TimeoutError(f"The call to `{method}` has timed out after {timeout} second(s).")
        return ready

    def gather(self, count: int | None, timeout: float | None, method: str) -> None:
        """Collect replies until ``count`` envs are ready (every reply when ``None``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.in_flight if count is None else len(self.ready) < count:
            if not self.in_flight:
                raise NoAsyncCallError(f"Calling `{method}` with no envs in flight.", method)
            for w in self.wait_ready(deadline, timeout, method, self.step_overdue, count is None):
                self.take_reply(w)

    def step_overdue(self, w: int, envs: np.ndarray, method: str) -> None:
        """Worker ``w`` overran ``step_timeout`` on a step or reset: a failure of the worker."""
        error = StepTimeoutError(envs.tolist(), w, self.policy.step_timeout, method.removesuffix("_wait"))
        self.worker_failed(w, envs, error)

    def take_reply(self, w: int) -> None:
        envs = self.in_flight.pop(w)
        try:
            reply = self.transport.fetch(w)
        except WorkerDiedError as exc:
            self.worker_failed(w, envs, exc)
            return
        except BaseException:
            self.drop_in_flight()
            raise
        self.accept(w, envs, reply.entries, reply.objects)

    def accept(self, w: int, envs: np.ndarray, entries: Any, objects: Any) -> None:
        """Take a worker's results for ``envs``: they are ready to be returned."""
        if objects is not None:
            self.buffers.observations.set_objects(objects, envs)
        self.keep(envs, entries)
        deferred = self.deferred.pop(w, None)
        if deferred:
            ids = np.array(sorted(deferred), dtype=np.int64)
            self.submit(w, Step(ids - self.partition[w][0]), ids)
            self.transport.flush()

    def keep(self, envs: np.ndarray, entries: Any) -> None:
        """Hold the info ``entries`` of the envs ``envs`` until their batch is returned."""
        for entry in entries:
            self.pending_infos[entry.index] = entry

    def fetch_now(self, w: int, command: Command) -> Any:
        """Run ``command`` on ``w`` and wait for its reply (outside the in-flight bookkeeping)."""
        self.transport.submit(w, command)
        if not self.transport.ready([w], self.policy.step_timeout):
            self.transport.terminate(w)
            raise StepTimeoutError(self.partition.envs_of(w), w, self.policy.step_timeout, "restart")
        return self.transport.fetch(w)

    # ================================================================ results
    def results(self, timeout: float | None, method: str, raw: bool = False, step: tuple | None = None) -> tuple:
        """Wait for the pending step or reset: ``(obs, rewards, terminations, truncations,
        infos)`` of every env, or of the first ``batch_size`` ready (``raw``: the per-env info
        entries instead of batched infos). ``step``: ``(actions, env_ids)`` to check and send
        first, the whole of one ``step()`` (the fast path) under this one try."""
        previous, phase = self.state, _CHECKING if step is not None else _COLLECTING
        try:
            if step is not None:
                ids = self.check_actions(*step)
                phase = _SENDING
                self.put_steps(ids)
                phase = _COLLECTING
            return self.collect(timeout, method, raw)
        except multiprocessing.TimeoutError:
            raise
        except BaseException:
            if phase is _SENDING:
                self.interrupted_send(previous)
            elif phase is _COLLECTING:
                self.interrupted_collect()
            if step is not None:  # a step() cut short anywhere: see interrupted_call
                self.interrupted_call()
            raise

    def collect(self, timeout: float | None, method: str, raw: bool) -> tuple:
        """The collector's part of :meth:`results`."""
        raise NotImplementedError

    # ================================================================ failures
    def worker_failed(self, w: int, envs: np.ndarray, error: VecEnvError) -> None:
        """Worker ``w`` died or hung while running a step or reset for ``envs``: replaced as the
        recovery plans it (its envs' episodes truncated), or the call fails."""
        lender = self.buffers.lender
        if lender is not None and lender.moved:  # its rows: the last ones the caller got
            lender.restore(*self.partition[w])
        if not self.recovery.may_restart(w, error):
            self.fail(w, envs, error)
            return
        try:
            plan = self.recovery.restart(w, envs, error, self.commands.get(w))
        except BaseException:
            self.drop_in_flight()  # the worker stays dead: the next command to it reports so
            raise
        self.apply_restart(w, envs, plan)

    def apply_restart(self, w: int, envs: np.ndarray, plan: Restart) -> None:
        """Apply the restart of worker ``w``: its envs ``envs`` (in flight) end truncated now,
        its other envs at their next send (a step deferred for one of them returns at once)."""
        self.restarted.update(plan.later)
        if not plan.fresh:
            truncate_rows(self.buffers, envs)
        deferred = self.deferred.pop(w, [])  # sent while the old worker was busy
        now = [i for i in deferred if i in self.restarted]
        if len(now) < len(deferred):
            self.deferred[w] = [i for i in deferred if i not in self.restarted]
        self.accept(w, envs, plan.entries, plan.objects)
        if now:
            self.return_restarted(now)

    def fail(self, w: int, envs: np.ndarray, error: VecEnvError) -> None:
        """Worker ``w`` failed and is not replaced: drop the others' replies, then raise ``error``."""
        if isinstance(error, StepTimeoutError):
            self.transport.terminate(w)
        self.drop_in_flight()
        raise error

    # ================================================================ dropping work
    def drop_in_flight(self) -> None:
        """After a failure: wait out every other worker's reply and drop it, so none arrives a
        step late. A worker that does not answer within ``step_timeout`` is ended."""
        for w in list(self.in_flight):
            self.in_flight.pop(w)
            try:
                if self.transport.ready([w], self.policy.step_timeout):
                    self.transport.fetch(w)
                else:
                    self.transport.terminate(w)
            except BaseException:
                pass
        self.forget(Event.DROPPED)

    def drop_all(self) -> None:
        """After an interruption: let every worker finish what it was given and drop the replies,
        so the next call starts from a known state. A worker that does not finish within
        ``step_timeout`` (or :data:`SETTLE_TIMEOUT`) is ended; the next command reports it."""
        limit = self.policy.step_timeout or SETTLE_TIMEOUT
        for w in range(self.transport.num_workers):
            if not self.transport.settle(w, limit):
                self.transport.terminate(w)
        self.in_flight.clear()
        self.forget(Event.DROPPED)

    def forget(self, event: Event) -> None:
        """Nothing in flight any more (``event``: returned, dropped or closed): forget every
        result not yet returned."""
        for pending in (self.deferred, self.ready, self.pending_infos):
            if pending:
                pending.clear()
        self.lifecycle.fire(event)
