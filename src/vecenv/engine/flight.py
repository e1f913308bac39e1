"""The dispatcher: :class:`InFlight`, what every worker is running and what waits on it.

A :class:`~vecenv.engine.VectorEnv` sends every command through its InFlight and collects
through the :class:`~vecenv.engine.collect.Collect` strategy the flight holds. The flight's part
of a step: :meth:`~InFlight.check_and_write_actions` (the ids checked, the actions written into
the shared action buffer), :meth:`~InFlight.send_steps` (one command per worker, handed to the
transport as one round by :meth:`~InFlight.send`, or deferred while that worker is busy) and
:meth:`~InFlight.receive` (wait for workers with a reply, fetch each; a worker that died or
overran ``step_timeout`` is replaced by :class:`~.recovery.Recovery` or fails the call). The
whole step, from ``step()`` to a worker and back, is drawn once, in
:mod:`vecenv.transports.process`.

The call state (:mod:`.state`) moves only by the events fired here and by the collectors: a
command sent, results returned, a call cut short while sending or collecting, work dropped.
"""

from __future__ import annotations

import multiprocessing
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium import logger
from gymnasium.vector import AutoresetMode

from vecenv.engine.checks import check_env_ids
from vecenv.engine.collect import Collect, EachReady, FirstReady, FullBatch
from vecenv.engine.memory import MemoryLimit
from vecenv.engine.partition import Partition
from vecenv.engine.recovery import Recovery
from vecenv.engine.state import CallLifecycle, CallState, Event
from vecenv.engine.transport import Transport
from vecenv.errors import (
    AlreadyPendingCallError,
    ClosedEnvironmentError,
    EnvError,
    StepTimeoutError,
    VecEnvError,
    WorkerDiedError,
)
from vecenv.policy import FailurePolicy
from vecenv.spaces import StepBuffers
from vecenv.spaces.buffers import slots_for
from vecenv.worker.commands import STEP_ALL, Command, Reset, Step, StepQueued, with_given

if TYPE_CHECKING:
    from vecenv.engine.calls import Calls

__all__ = ["DROP_TIMEOUT", "NO_IDS", "InFlight"]

#: longest wait for a worker to finish its command when its reply is dropped after an interruption
DROP_TIMEOUT = 30.0

#: the envs of a command that returns values rather than rows (a call)
NO_IDS = np.empty(0, dtype=np.int64)


class InFlight:
    """The commands in flight for one vector env of ``partition.num_envs`` envs, and their results.

    One command per worker at a time; ``in_flight[w]`` holds the envs of worker ``w``'s command.
    A step for a busy worker waits in ``deferred`` (async batches); ``replies`` keeps what came
    back and was not returned yet. ``batches`` collects the results: every env's
    (:class:`~.collect.FullBatch`) or the first ready (:class:`~.collect.FirstReady`,
    :class:`~.collect.EachReady`); ``recovery`` replaces failed workers; ``log_env_errors`` logs
    an env's error as gymnasium's AsyncVectorEnv does.
    """

    def __init__(self, transport: Transport, partition: Partition, policy: FailurePolicy,
                 batch_size: int, autoreset_mode: AutoresetMode, copy: bool, log_env_errors: bool = False) -> None:
        n = partition.num_envs
        self.transport, self.partition, self.policy = transport, partition, policy
        self.num_envs, self.batch_size = n, batch_size
        self.autoreset_mode, self.copy, self.log_env_errors = autoreset_mode, copy, log_env_errors
        self.buffers: StepBuffers  # the transport's, set once it has allocated them
        #: the vector env was closed: a wait in another thread stops
        self.closed = True
        self.lifecycle = CallLifecycle()
        self.in_flight: dict[int, np.ndarray] = {}  # worker -> global ids of its command
        self.commands: dict[int, Command] = {}  # worker -> its last command (a restart runs a reset again)
        self.sent_at: dict[int, float] = {}
        self.deferred: dict[int, list[int]] = {}  # worker -> env ids to step once it is free
        #: the replies received and not yet returned, as they came: (envs, their info entries)
        self.replies: list[tuple[np.ndarray, Any]] = []
        # made with the buffers (allocate): the collection, the recovery, the memory limit
        self.batches: Collect
        self.recovery: Recovery
        self.memory: MemoryLimit | None = None

    @property
    def state(self) -> CallState:
        return self.lifecycle.state

    # ================================================================ checks
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

    def check_and_write_actions(self, actions: Any, env_ids: Any) -> np.ndarray | None:
        """Check ``env_ids`` and write ``actions`` into the action buffer; the ids (None: all).
        The collection refuses envs it cannot take a step for (busy, or ended under DISABLED)."""
        n = self.num_envs
        if env_ids is None:
            if self.batch_size < n:
                raise ValueError(
                    f"send(actions, env_ids): env_ids is required when batch_size ({self.batch_size}) "
                    f"< num_envs ({n}); pass the infos['env_id'] of the last recv()"
                )
            self.buffers.actions.assign(actions, None, "actions")
            if self.autoreset_mode is AutoresetMode.DISABLED:  # the only refusal of every env
                self.batches.refuse(None)
            return None
        ids = check_env_ids(env_ids, n)
        self.batches.refuse(ids)
        self.buffers.actions.assign(actions, ids, "actions")
        return ids

    # ================================================================ sending
    def send(self, commands: Sequence[tuple[int, Command, np.ndarray]]) -> None:
        """Record each ``(worker, command, its envs)`` as in flight, then hand them to the
        transport as one round (the records come first, so an interruption between the two
        leaves replies to drop, never one nobody expects)."""
        timed, given = self.policy.step_timeout is not None, self.buffers.actions.unconverted
        if commands is self.partition.whole_steps and not timed and not given:  # the usual step
            self.in_flight.update(self.partition.whole_in_flight)
            self.commands.update(self.partition.whole_commands)
            self.transport.send(self.partition.whole_round)
            return
        round_ = []
        for w, command, envs in commands:
            self.in_flight[w] = envs
            self.commands[w] = command
            if timed:
                self.sent_at[w] = time.monotonic()
            if given and type(command) is Step:  # actions as the caller gave them
                command = with_given(command, given, *self.partition[w])
            round_.append((w, command))
        self.transport.send(round_)

    def send_steps(self, ids: np.ndarray | None) -> None:
        """Step the envs ``ids`` (all when None) with the actions in the buffer: each worker's
        command goes now, or once that worker is free; an env whose worker was restarted while it
        waited comes back truncated instead (:meth:`.recovery.Recovery.return_later`)."""
        previous = self.lifecycle.state
        try:
            if self.memory is not None:
                self.memory.between_steps()
            restarted, later = None, self.recovery.later
            if later:  # whole batches too: a call may have restarted a worker
                ids = np.arange(self.num_envs) if ids is None else ids
                restarted = [i for i in ids.tolist() if i in later]
            self.lifecycle.fire(Event.SEND_STEP)
            if ids is None:
                commands = self.partition.whole_steps
            else:
                self.batches.sent(ids, False)
                stepping = ids[~np.isin(ids, restarted)] if restarted else ids
                if type(self.batches) is EachReady:  # a busy worker takes its envs' steps as it goes
                    self.send(self.batches.post(stepping, self.in_flight))
                    if restarted:
                        self.replies.append(self.recovery.return_later(restarted))
                    return
                commands = [(w, STEP_ALL if local is None else Step(local), envs)
                            for w, local, envs in self.partition.by_worker(stepping)]
            if self.buffers.lender is not None:
                self.choose_slot([w for w, _, _ in commands])
            if self.in_flight:  # async batches: a busy worker's steps wait until it is free
                for w, _, envs in commands:
                    if w in self.in_flight:
                        self.deferred.setdefault(w, []).extend(envs.tolist())
                commands = [c for c in commands if c[0] not in self.in_flight]
            self.send(commands)
            if restarted:
                self.replies.append(self.recovery.return_later(restarted))
        except BaseException:
            self.interrupted_send(previous)
            raise

    def send_reset(self, ids: np.ndarray, seeds: list, options: dict | None) -> None:
        """Reset the envs ``ids``, env ``i`` with ``seeds[i]`` and ``options`` as given."""
        previous = self.lifecycle.state
        try:
            self.lifecycle.fire(Event.SEND_RESET)
            self.batches.sent(ids, True)
            self.replies.clear()
            for i in ids.tolist():  # these envs start new episodes: their restarts are reset away
                self.recovery.later.pop(i, None)
            by_worker = list(self.partition.by_worker(ids))
            if self.buffers.lender is not None:
                self.choose_slot([w for w, _, _ in by_worker])
            partition = self.partition
            self.send([(w, Reset(seeds[slice(*partition[w])], options, local), envs) for w, local, envs in by_worker])
        except BaseException:
            self.interrupted_send(previous)
            raise

    def send_call(self, commands: Iterable[tuple[int, Command]]) -> None:
        """Send a call on the sub-envs: each ``(worker, command)`` of ``commands``."""
        previous = self.lifecycle.state
        try:
            self.lifecycle.fire(Event.SEND_CALL)
            self.send([(w, command, NO_IDS) for w, command in commands])
        except BaseException:
            self.interrupted_send(previous)
            raise

    def send_deferred(self, w: int) -> None:
        """Send worker ``w``, now free, the steps deferred while it was busy (async batches)."""
        deferred = self.deferred.pop(w, None)
        if deferred:
            ids = np.array(sorted(deferred), dtype=np.int64)
            self.send([(w, Step(ids - self.partition[w][0]), ids)])

    def allocate(self, observation_space: Any, action_space: Any) -> StepBuffers:
        """The transport's buffers, with observation slots to lend (:mod:`vecenv.spaces.slots`)
        where this flight would copy large batches out: ``copy=True``, whole batches, and groups
        that write the observations themselves."""
        transport, n = self.transport, self.num_envs
        if self.copy and self.batch_size == n and transport.lends_observations:
            transport.observation_slots = slots_for(observation_space, n)
        self.buffers = b = transport.allocate(observation_space, action_space, n)
        self.recovery = Recovery(transport, self.partition, self.policy, self.autoreset_mode, b)
        if self.policy.max_worker_memory is not None:
            self.memory = MemoryLimit(self, self.recovery, transport, self.partition, self.policy)
        disabled, bs = self.autoreset_mode is AutoresetMode.DISABLED, self.batch_size
        if bs == n:
            self.batches = FullBatch(self, self.lifecycle, b, disabled, self.copy)
        elif transport.queues_envs:  # readiness env by env
            self.batches = EachReady(self, self.lifecycle, b, disabled, bs, transport, self.partition,
                                     self.policy.step_timeout)
        else:
            self.batches = FirstReady(self, self.lifecycle, b, disabled, bs)
        return b

    def choose_slot(self, workers: list[int]) -> None:
        """Before ``workers`` write observations: where they are lent, the slot to write
        (:mod:`vecenv.spaces.slots`), the other workers' rows carried over to it."""
        lender, commanded = self.buffers.lender, set(workers)
        if lender is not None:
            lender.choose([self.partition[w] for w in range(len(self.partition)) if w not in commanded])

    # ================================================================ receiving
    def receive(self, deadline: float | None, timeout: float | None, method: str, every: bool = False,
                wanted: Callable[[], int] | None = None, calls: Calls | None = None) -> None:
        """Wait until a worker in flight has a reply (or ``deadline``) and fetch every reply
        there: the rows are in the buffers already, the info entries go to :attr:`replies`,
        and a step deferred for that worker goes out. A worker that died or overran
        ``step_timeout`` is replaced (its envs' entries say so) or fails the call. ``every``:
        the caller wants every reply, so the transport may wake it once, when all are there;
        ``wanted``: how many more envs published one by one the wait is for (it ends at 0);
        ``calls``: the replies are a call's, each handed to ``calls`` (or its error)."""
        replied = self.wait(deadline, timeout, method, every, wanted, calls)
        if every and self.transport.fetches_every and len(replied) == len(self.in_flight) == len(self.partition.bounds) \
                and type(self.batches) is FullBatch:
            reply = self.transport.fetch_every()  # the usual synchronous step: all in one look
            if reply is not None:
                self.in_flight.clear()
                self.replies.append((self.partition.every_env, reply.entries))
                return
        for w in replied:
            envs = self.in_flight.pop(w)
            if calls is not None:
                try:
                    calls.replies[w] = self.recovery.fetch_call(w, self.commands.get(w))
                except BaseException as exc:  # the call fails with the first error
                    calls.failed(exc)
                continue
            try:
                reply = self.transport.fetch(w)
            except WorkerDiedError as exc:
                self.worker_failed(w, envs, exc)
                continue
            except BaseException:
                self.drop_in_flight()
                raise
            if type(self.commands.get(w)) is StepQueued:
                again = self.batches.fetched(w, reply)  # type: ignore[attr-defined]
                if again:
                    self.send(again)
                continue
            if reply.objects is not None:
                self.buffers.observations.set_objects(reply.objects, envs)
            self.replies.append((envs, reply.entries))
            if self.deferred:
                self.send_deferred(w)

    def wait(self, deadline: float | None, timeout: float | None, method: str, every: bool = False,
             wanted: Callable[[], int] | None = None, calls: Calls | None = None) -> list[int]:
        """Workers with a reply, waiting until one has, the caller's deadline, or a step deadline;
        a worker past ``step_timeout`` leaves the flight (:meth:`overdue`).

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
            replied = self.transport.ready(workers, left, every, wanted)
        except BaseException as exc:
            if self.closed:
                raise ClosedEnvironmentError(f"the vector env was closed during `{method}`") from exc
            self.lifecycle.fire(Event.WAIT_CUT)
            raise
        if self.closed:
            raise ClosedEnvironmentError(f"the vector env was closed during `{method}`")
        if not timed:
            return replied
        now = time.monotonic()
        if step_timeout is not None:  # also when others replied: async batches never wait on all
            late = [w for w in workers if w not in replied and now - self.sent_at[w] >= step_timeout]
            for w in late:
                self.overdue(w, self.in_flight.pop(w), method, calls)
            if late:
                return replied
        if not replied and deadline is not None and now >= deadline and not (wanted is not None and wanted() <= 0):
            raise multiprocessing.TimeoutError(f"The call to `{method}` has timed out after {timeout} second(s).")
        return replied

    # ================================================================ interruptions
    def interrupted_send(self, previous: CallState) -> None:
        """Sending was cut short: INTERRUPTED (reset() or close() next) if anything went out or
        was pending before (``previous``), never half-sent work that a later call would mistake
        for its own; else back to DEFAULT."""
        unsent = not self.in_flight and previous is CallState.DEFAULT
        self.lifecycle.fire(Event.UNSENT if unsent else Event.SEND_CUT)

    def interrupted_collect(self, error: BaseException) -> None:
        """Collecting was cut short by ``error``. A caller's timeout leaves the call pending, to
        wait again or to reset, and so does an exception in the wait itself (a
        ``KeyboardInterrupt``); one that leaves replies half fetched makes the env INTERRUPTED."""
        if isinstance(error, multiprocessing.TimeoutError):
            return
        if self.log_env_errors:
            log_env_error(error)
        if not self.lifecycle.droppable and (self.in_flight or self.state is not CallState.DEFAULT):
            self.lifecycle.fire(Event.COLLECT_CUT)

    def interrupted_call(self) -> None:
        """``step``/``reset``/``call`` are one call to their user: cut short anywhere (between
        send and wait too), what they left pending is the next reset()'s to drop. A call refused
        because another is pending left nothing: that one stays pending, as in gymnasium."""
        if self.state is not CallState.DEFAULT and not isinstance(sys.exc_info()[1], AlreadyPendingCallError):
            self.lifecycle.fire(Event.WAIT_CUT)

    # ================================================================ failures
    def overdue(self, w: int, envs: np.ndarray, method: str, calls: Calls | None) -> None:
        """Worker ``w`` overran ``step_timeout``: on a step or reset a failure of the worker; on
        a call (``calls``) it is ended, and the call fails."""
        timeout, method = self.policy.step_timeout, method.removesuffix("_wait")
        if calls is None:
            self.worker_failed(w, envs, StepTimeoutError(envs.tolist(), w, timeout, method))
            return
        self.transport.terminate(w)
        calls.failed(StepTimeoutError(self.partition.envs_of(w), w, timeout, method))

    def worker_failed(self, w: int, envs: np.ndarray, error: VecEnvError) -> None:
        """Worker ``w`` died or hung while running a step or reset for ``envs``: replaced as the
        recovery plans it (its envs' episodes end now; a step deferred for one of its other envs
        returns at once), or the call fails with every other reply dropped."""
        command = self.commands.get(w)
        if type(command) is StepQueued:  # every env it holds, posted before or since
            envs = self.batches.lost(w)  # type: ignore[attr-defined]
        try:
            entries = self.recovery.failed(w, envs, error, command)
        except BaseException:
            self.drop_in_flight()  # a worker not replaced stays dead: the next command to it reports so
            raise
        later = self.recovery.later
        deferred = self.deferred.pop(w, [])  # sent while the old worker was busy
        now = [i for i in deferred if i in later]
        if len(now) < len(deferred):
            self.deferred[w] = [i for i in deferred if i not in later]
        self.replies.append((envs, entries))
        self.send_deferred(w)
        if now:
            self.replies.append(self.recovery.return_later(now))

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
        self.drop_held()

    def drop_all(self) -> None:
        """After an interruption: let every worker finish what it was given and drop the replies,
        so the next call starts from a known state. A worker that does not finish within
        ``step_timeout`` (or :data:`DROP_TIMEOUT`) is ended; the next command reports it."""
        limit = self.policy.step_timeout or DROP_TIMEOUT
        for w in range(self.transport.num_workers):
            if not self.transport.drop_outstanding(w, limit):
                self.transport.terminate(w)
        self.in_flight.clear()
        self.drop_held()

    def drop_held(self) -> None:
        """Nothing is in flight any more: drop every deferred step and every reply not returned."""
        self.deferred.clear()
        self.replies.clear()
        self.batches.drop()
        self.lifecycle.fire(Event.DROPPED)


def log_env_error(error: BaseException) -> None:
    """Log an env's error through gymnasium's logger, in the words of gymnasium's AsyncVectorEnv."""
    if not isinstance(error, EnvError):
        return
    logger.error(
        f"Received the following error from Worker-{error.worker} - env {error.env_index} raised it in "
        f"{error.method}; the worker keeps running"
    )
    logger.error(error.remote_traceback.rstrip())
    logger.error("Raising the last exception back to the main process.")
