"""The caller's side of the process transport: post commands, wait, fetch (starting the workers
is :mod:`.starting`, closing them :mod:`.closing`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Sequence
from functools import partial
from typing import Any

import cloudpickle
import numpy as np

from vecenv.engine.transport import WholeRound
from vecenv.errors import VecEnvError
from vecenv.infos import IN_ROWS, NO_REPLY, RowsReply, StepReply
from vecenv.transports.process import control, handshake, wire
from vecenv.transports.process.closing import DEFAULT_CLOSE_TIMEOUT
from vecenv.transports.process.control import ControlBlock
from vecenv.transports.process.envfns import EnvFnPicklingError
from vecenv.transports.process.protocol import Field, Frame, Op, Reply, Sleep, Wake
from vecenv.transports.process.starting import DEFAULT_YIELD_US, Starting
from vecenv.transports.signals import deferred
from vecenv.worker.commands import Command, GivenStep, Step, StepQueued

__all__ = ["DEFAULT_CLOSE_TIMEOUT", "DEFAULT_YIELD_US", "EnvFnPicklingError", "ProcessTransport"]

#: seconds between looks at the sentinels of workers that other workers keep outpacing
DEATH_CHECK_S = 0.05
#: longest pause inside a reply's frame; past it the socket is out of step and the worker is ended
FRAME_TIMEOUT = 30.0


class ProcessTransport(Starting):
    """Runs each env group in its own worker process; see the package docstring (its options,
    and the state both halves share, are set up by :class:`~.starting.Starting`)."""

    name = "process"
    can_end_workers = True
    fetches_every = True

    # ------------------------------------------------------------ commands
    def send(self, commands: Sequence[tuple[int, Command]]) -> None:
        """Post each command (a step as a counter bump, anything else as a message too), wake
        with one ring of the bell the workers asleep since, then run the inline group's command
        here while they run theirs."""
        ctrl, bell, here = self.ctrl, self._bell, None
        if type(commands) is WholeRound and self._posts_at_once:  # every worker steps all its envs
            self._unrung = True
            ops, counters = ctrl.columns[Field.OP], ctrl.columns[Field.CMD]
            ops.fill(Op.STEP)  # each row's operation, then its counter: the commit
            counters += 1
            commands = ()
        for worker, command in commands:
            if worker in self.dead:
                continue  # fetch reports it
            if worker == self.inline_worker:
                here = command
                continue
            if type(command) is StepQueued:  # the per-env counters say which envs (.queue)
                self._unrung = bell is not None
                ctrl.post(worker, Op.QUEUE)
                if bell is None:
                    handshake.notify(ctrl.rows[worker], Field.WORKER_SLEEPS, self.peers[worker], Wake.WORKER)
                continue
            if type(command) is not Step or self._action_objects:
                self._send_message(worker, command)
                continue
            op = Op.STEP
            if command.ids is not None:  # the envs to step, flagged in the step mask
                mask = self._mask[slice(*self.partition[worker])]
                mask[:] = False
                mask[command.ids] = True
                op = Op.MASKED_STEP
            self._unrung = bell is not None  # ready() rings what an interruption left unrung
            ctrl.post(worker, op)  # the commit point
            if bell is None:
                handshake.notify(ctrl.rows[worker], Field.WORKER_SLEEPS, self.peers[worker], Wake.WORKER)
        if self._unrung:
            self._unrung = False
            control.fence()
            if bell is not None and (not control.TSO or any(ctrl.columns[Field.WORKER_SLEEPS].tolist())):
                bell.ring()
        if here is not None:
            self._run_inline(ctrl, here)

    def _run_inline(self, ctrl: ControlBlock, command: Command) -> None:
        """Run ``command`` on the inline group in this thread, as a worker runs it: the results
        in the shared rows, finished in its control row; a reply the rows do not hold is kept
        for :meth:`fetch`. Cut short (a Ctrl-C), the command counts as finished with nothing."""
        group, infos, k = self.inline_group, self.inline_infos, self.inline_worker
        if group is None or infos is None:
            raise VecEnvError("ProcessTransport: the inline group is closed")
        try:
            ctrl.post(k, Op.COMMAND)
            if infos.dirty:  # the last command's info rows
                infos.begin()
            kind = Reply.IN_MEMORY
            try:
                value = group.step(command.ids) if type(command) is Step else group.run(command)
            except Exception as exc:
                self._held, kind = (False, exc), Reply.MESSAGE
            else:
                if type(value) is not StepReply:  # a call's values
                    self._held, kind = (True, value), Reply.MESSAGE
                elif value is not NO_REPLY or infos.dirty:
                    message = infos.reply(value.entries, value.objects)
                    if message is not None:
                        self._held, kind = (True, message), Reply.MESSAGE
                    elif infos.dirty:
                        kind = Reply.INFOS
            ctrl.finish(k, int(ctrl.rows[k, Field.CMD]), kind)
        except BaseException:
            ctrl.drop(k)  # (a second cut, inside this, is put right by the next wait: _sleep)
            raise

    def _send_message(self, worker: int, command: Command) -> None:
        """Post a command that travels pickled (with the custom action leaves of a step)."""
        objects = None
        if type(command) is Step or type(command) is GivenStep:
            start, stop = self.partition[worker]
            objects = self._buffers.actions.rows(start, stop).get_objects()
        data = wire.frame(Frame.MESSAGE, cloudpickle.dumps((command, objects), wire.PROTOCOL))
        deferred(self._post_message, worker, data)  # posted and written, or neither

    def _post_message(self, worker: int, data: bytes) -> None:
        self._unrung = self._bell is not None
        self.ctrl.post(worker, Op.COMMAND)
        try:
            self.peers[worker].write(data)
        except EOFError:
            self._mark_dead(worker)

    def outstanding(self, worker: int) -> bool:
        ctrl = self.ctrl
        return worker not in self.dead and (ctrl.outstanding(worker) or ctrl.rows[worker, Field.REPLY] == Reply.MESSAGE)

    def fetch_every(self) -> Any:
        """Every worker's reply at once when all of them finished a whole step in shared memory
        and their infos share one columnar schema (the usual synchronous step): one look at the
        control block and one at the info rows, none per worker. None: fetch each one."""
        ctrl, infos = self.ctrl, self._infos
        if self.dead or not control.TSO:
            return None
        kinds = ctrl.columns[Field.REPLY].tolist()  # every worker finished (the caller waited)
        if Reply.MESSAGE in kinds:
            return None
        reply = infos.take_every()
        if reply is not None and Reply.INFOS in kinds:
            ctrl.columns[Field.REPLY].fill(Reply.IN_MEMORY)  # taken
        return reply

    def infos_at(self, envs: np.ndarray, positions: list[int]) -> tuple[Any, list]:
        """The infos in the rows of ``envs[positions]``, published env by env: one column chunk
        over those positions when they share one flat schema, else their entries."""
        infos = self._infos
        worker_of = self._worker_of
        if worker_of is None:
            worker_of = self._worker_of = np.repeat(np.arange(self.num_workers),
                                                    [stop - start for start, stop in self.partition])
        chunk = infos.columns_at(envs, positions, worker_of)
        if chunk is not None:
            return chunk, []
        ids = envs[positions].tolist()
        entries: list = []
        for i in ids:
            entries.extend(infos.entries_of(int(worker_of[i]), [i]))
        return None, entries

    def ready(self, workers: Collection[int], timeout: float | None = None, every: bool = False,
              wanted: Callable[[], int] | None = None) -> list[int]:
        ctrl = self.ctrl
        if self._unrung:  # a send cut short before its ring
            self.send(())
        dead = self.dead
        done = ctrl.finished(workers, dead, every)
        if (done or wanted is not None) and len(done) < len(workers) and not every:
            self._look_for_deaths(workers, done)  # async batches: a dead worker is never waited on
            done = ctrl.finished(workers, dead)
        if (len(done) == len(workers) if every else done) or timeout == 0 or (wanted is not None and wanted() <= 0):
            return done
        check = partial(ctrl.finished, workers, dead, every)
        if self.waiter.spin(check if wanted is None else lambda: check() or wanted() <= 0, timeout):
            return ctrl.finished(workers, dead, every)
        found = self._sleep(workers, None if timeout is None else time.monotonic() + timeout, every, wanted)
        return found if found or not every else self._done(workers)  # at the deadline: those done

    def _done(self, workers: Collection[int], every: bool = False) -> list[int]:
        return self.ctrl.finished(workers, self.dead, every)

    def _look_for_deaths(self, workers: Collection[int], done: list[int]) -> None:
        now = time.monotonic()
        if now < self._next_death_check:
            return
        self._next_death_check = now + DEATH_CHECK_S
        poller = self.mechanism.poller()
        worker_of = {}
        for w in workers:
            if w not in done and w not in self.dead and w != self.inline_worker:
                poller.register(self.peers[w].sentinel)
                worker_of[self.peers[w].sentinel] = w
        for key, _ in poller.poll(0) if worker_of else ():
            self._mark_dead(worker_of[key])
        self._look_at_exit_codes(workers)

    def _look_at_exit_codes(self, workers: Collection[int]) -> None:
        """Where a process cannot be waited on exactly (:class:`.lifetime.Watch`): its exit
        code, looked at in every bounded nap."""
        for w in workers:
            if w not in self.dead and w != self.inline_worker and not self.watches[w].exact and self.watches[w].ended():
                self._mark_dead(w)

    def _sleep(self, workers: Collection[int], deadline: float | None, every: bool,
               wanted: Callable[[], int] | None = None) -> list[int]:
        """Block for a reply (``every``: for all of them, or a death; woken once, by the last to
        finish): declare it, re-check, then bounded naps on the caller's bell (looking for
        deaths between them) or polls on the sockets and sentinels."""
        ctrl, k, dead = self.ctrl, self.inline_worker, self.dead
        if k >= 0 and k in workers and ctrl.outstanding(k):  # never running now: its command was cut short
            ctrl.drop(k)
        live = [w for w in workers if w not in dead and w != k]
        sleeps = ctrl.columns[Field.CALLER_SLEEPS]
        flags = slice(None) if len(live) == len(sleeps) else live  # the rows whose flag is set
        mode = Sleep.ALL if every else Sleep.ANY if wanted is None else Sleep.COUNT
        bell = self._caller_bell
        # on the bell, deaths and exit codes are looked at between naps
        poller, worker_of, exact = (None, {}, True) if bell is not None else self._poller_of(live)

        def declare(flag: int) -> None:
            if flag and wanted is not None:  # the count first, then what is still wanted
                ctrl.want[0] = ctrl.published() + wanted()
            sleeps[flags] = mode if flag else Sleep.AWAKE

        def check() -> list[int] | bool:
            if not exact:
                self._look_at_exit_codes(live)
            return ctrl.finished(workers, dead, every) or (wanted is not None and wanted() <= 0)

        go_on = lambda: self._closer in (None, threading.get_ident())  # noqa: E731
        if bell is not None:
            done = handshake.sleep_on_bell(check, declare, bell, lambda: self._look_for_deaths(live, []), deadline,
                                           go_on)
        else:
            done = handshake.sleep(check, declare, poller, lambda fd: self._on_event(worker_of[fd], fd), deadline, go_on)
        return done if type(done) is list else self._done(workers, every) if done else []

    def _poller_of(self, live: list[int]) -> tuple[Any, dict, bool]:
        """A poller over the sockets and sentinels of ``live``, which worker each belongs to, and
        whether every one's end is seen exactly (:class:`.lifetime.Watch`); the one over every
        worker is made once (until a worker dies or starts again)."""
        every = len(live) == self.spawned
        if every and self._every_poller is not None:
            return self._every_poller
        poller, worker_of = self.mechanism.poller(), {}
        for w in live:
            for key in (self.peers[w].waitable, self.peers[w].sentinel):
                poller.register(key)
                worker_of[key] = w
        made = (poller, worker_of, all(self.watches[w].exact for w in live))
        if every:
            self._every_poller = made
        return made

    def _on_event(self, w: int, fd: int) -> None:
        """A socket or sentinel of ``w`` is readable: take wake-ups, notice a death."""
        ctrl = self.ctrl
        if w in self.dead or not ctrl.outstanding(w):
            if fd != self.peers[w].sentinel:
                self.peers[w].skip_wakeups()
            return
        if fd == self.peers[w].sentinel or self.peers[w].skip_wakeups() == b"":
            self._mark_dead(w)

    def fetch(self, worker: int) -> Any:
        ctrl, infos = self.ctrl, self._infos
        if worker in self.dead:
            raise self._died(worker)
        inline = worker == self.inline_worker
        if not control.TSO and not inline:
            self.peers[worker].skip_wakeups()
        kind = ctrl.rows[worker, Field.REPLY]
        if kind != Reply.MESSAGE:  # the hot path: the reply is all in shared memory (a queue's
            # never says INFOS: its rows are read env by env, .queue)
            if kind == Reply.INFOS and ctrl.take(worker, Reply.INFOS):
                return infos.take(worker, IN_ROWS)
            return NO_REPLY
        if inline:  # kept by _run_inline
            ctrl.take(worker, Reply.MESSAGE)
            (ok, value), self._held = self._held, (True, None)
            if not ok:
                raise value
        else:
            value = self._unpack(worker, deferred(self._take_message, worker))  # read and marked taken, or neither
        if type(value) is RowsReply:  # (a queue's: its entries and schemas; rows read env by env)
            return infos.learn(worker, value) if ctrl.rows[worker, Field.OP] == Op.QUEUE else infos.take(worker, value)
        return value

    def _take_message(self, worker: int) -> bytes:
        try:
            data = self._read(worker, FRAME_TIMEOUT)
        except TimeoutError:  # _read ended the worker (another signal's handler cut a read short)
            raise self._died(worker, f"ended, its reply stalled for {FRAME_TIMEOUT:g} s") from None
        self.ctrl.take(worker, Reply.MESSAGE)
        return data
