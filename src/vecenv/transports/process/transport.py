"""The caller's side of the process transport: post commands, wait, fetch (starting the workers
is :mod:`.starting`, closing them :mod:`.closing`)."""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Collection, Sequence
from functools import partial
from typing import Any

import cloudpickle
import numpy as np

from vecenv.engine.transport import DEFAULT_START_TIMEOUT
from vecenv.infos import IN_ROWS, NO_REPLY, InfoReader, RowsReply, StepReply
from vecenv.spaces import StepBuffers
from vecenv.transports.process import control, handshake, lifetime, wire
from vecenv.transports.process.closing import DEFAULT_CLOSE_TIMEOUT
from vecenv.transports.process.control import ControlBlock
from vecenv.transports.process.envfns import EnvFnPicklingError
from vecenv.transports.process.mechanism import choose_mechanism
from vecenv.transports.process.protocol import Frame, Op, Reply, Sleep, Slot, Wake
from vecenv.transports.process.starting import Starting
from vecenv.transports.signals import deferred
from vecenv.worker.commands import Command, GivenStep, Step

__all__ = ["DEFAULT_CLOSE_TIMEOUT", "DEFAULT_YIELD_US", "EnvFnPicklingError", "ProcessTransport"]

#: default time each side calls sched_yield() (checking for its peer) before it blocks in the
#: kernel: hands the core to a runnable peer without the cross-CPU wake-up blocking costs
DEFAULT_YIELD_US = 500.0
#: seconds between looks at the sentinels of workers that other workers keep outpacing
DEATH_CHECK_S = 0.05
#: longest pause inside a reply's frame; past it the socket is out of step and the worker is ended
FRAME_TIMEOUT = 30.0


class ProcessTransport(Starting):
    """Runs each env group in its own worker process; see the package docstring."""

    name = "process"
    can_end_workers = True

    def __init__(
        self,
        context: str | multiprocessing.context.BaseContext | None = None,
        daemon: bool = True,
        spin_us: float | None = None,
        yield_us: float | None = None,
        start_timeout: float | None = DEFAULT_START_TIMEOUT,
        mechanism: str | None = None,
        inline: bool = False,
        cores: tuple[int, ...] | None = None,
    ) -> None:
        self.cores = cores  # worker w runs on cores[w % len(cores)]; None: wherever the OS puts it
        self.runs_inline = inline  # the last group steps in the caller's thread (:mod:`.starting`)
        self._held: tuple[bool, Any] = (True, None)  # the inline group's reply, when not in the rows
        self.mechanism = choose_mechanism(mechanism)
        self.ctx = multiprocessing.get_context(context) if context is None or isinstance(context, str) else context
        self.start_method = self.ctx.get_start_method()
        self.daemon = daemon
        self.start_timeout = start_timeout
        self.spin_us = spin_us
        self.yield_s = DEFAULT_YIELD_US * 1e-6 if yield_us is None else max(0.0, float(yield_us)) * 1e-6
        self.processes: list[Any] = []
        self.peers: list[wire.Peer] = []
        self.watches: list[lifetime.Watch] = []  # how each worker's end is seen
        self.dead: dict[int, int | None] = {}
        self.ctrl: ControlBlock | None = None
        self._block: Any = None  # the mechanism's shared block
        self._buffers: StepBuffers | None = None
        self._mask: np.ndarray | None = None
        self._payloads: list[bytes] | None = None
        self._infos: InfoReader | None = None
        self._bell: control.Bell | None = None  # where workers sleep on a futex: the word they wait on
        self._unrung = False  # commands posted since the bell last rang
        self._action_objects = False
        self._next_death_check = 0.0
        self._closed = False
        self._closer: int | None = None  # the thread running close(): waits in others end
        self.worker_spin = 0.0
        self.waiter = handshake.Waiter(0.0, 0.0)

    # ------------------------------------------------------------ commands
    def send(self, commands: Sequence[tuple[int, Command]]) -> None:
        """Post each command (a step as a counter bump, anything else as a message too), wake
        with one ring of the bell the workers asleep since, then run the inline group's command
        here while they run theirs."""
        ctrl, bell, here = self.ctrl, self._bell, None
        if ctrl is None:
            raise self._no_block()
        for worker, command in commands:
            if worker in self.dead:
                continue  # fetch reports it
            if worker == self.inline_worker:
                here = command
                continue
            if type(command) is not Step or self._action_objects:
                self._send_message(worker, command)
                continue
            op = Op.STEP
            if command.ids is not None:  # the envs to step, flagged in the step mask
                masks = self._mask
                if masks is None:
                    raise self._no_block()
                mask = masks[slice(*self.partition[worker])]
                mask[:] = False
                mask[command.ids] = True
                op = Op.MASKED_STEP
            self._unrung = bell is not None  # ready() rings what an interruption left unrung
            ctrl.post(worker, op)  # the commit point
            if bell is None:
                handshake.notify(ctrl.slots[worker], Slot.WORKER_SLEEPS, self.peers[worker], Wake.WORKER)
        if self._unrung:
            self._unrung = False
            control.fence()
            if bell is not None and (not control.TSO or any(ctrl.slots[:, Slot.WORKER_SLEEPS].tolist())):
                bell.ring()
        if here is not None:
            self._run_inline(ctrl, here)

    def _run_inline(self, ctrl: ControlBlock, command: Command) -> None:
        """Run ``command`` on the inline group in this thread, as a worker runs it: the results
        in the shared rows, finished in its control slot; a reply the rows do not hold is kept
        for :meth:`fetch`. Cut short (a Ctrl-C), the command counts as finished with nothing."""
        group, infos, k = self.inline, self.inline_infos, self.inline_worker
        if group is None or infos is None:
            raise self._no_block()
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
            ctrl.finish(k, int(ctrl.slots[k, Slot.CMD]), kind)
        except BaseException:
            ctrl.drop(k)  # (a second cut, inside this, is put right by the next wait: _sleep)
            raise

    def _send_message(self, worker: int, command: Command) -> None:
        """Post a command that travels pickled (with the custom action leaves of a step)."""
        objects = None
        if type(command) is Step or type(command) is GivenStep:
            start, stop = self.partition[worker]
            buffers = self._buffers
            if buffers is None:
                raise self._no_block()
            objects = buffers.actions.rows(start, stop).get_objects()
        data = wire.frame(Frame.MESSAGE, cloudpickle.dumps((command, objects), wire.PROTOCOL))
        deferred(self._post_message, worker, data)  # posted and written, or neither

    def _post_message(self, worker: int, data: bytes) -> None:
        ctrl = self.ctrl
        if ctrl is None:
            raise self._no_block()
        self._unrung = self._bell is not None
        ctrl.post(worker, Op.COMMAND)
        try:
            self.peers[worker].write(data)
        except EOFError:
            self._mark_dead(worker)

    def outstanding(self, worker: int) -> bool:
        ctrl = self.ctrl
        return worker not in self.dead and ctrl is not None and (
            ctrl.outstanding(worker) or ctrl.slots[worker, Slot.REPLY] == Reply.MESSAGE
        )

    def ready(self, workers: Collection[int], timeout: float | None = None, every: bool = False) -> list[int]:
        ctrl = self.ctrl
        if ctrl is None:
            return []
        if self._unrung:  # a send cut short before its ring
            self.send(())
        dead = self.dead
        done = ctrl.finished(workers, dead)
        if done and len(done) < len(workers) and not every:  # a wait for all watches the processes
            self._look_for_deaths(workers, done)  # async batches: a dead worker is never waited on
            done = ctrl.finished(workers, dead)
        if (len(done) == len(workers) if every else done) or timeout == 0:
            return done
        if self.waiter.spin(partial(ctrl.finished, workers, dead, every), timeout):
            return ctrl.finished(workers, dead)
        found = self._sleep(workers, None if timeout is None else time.monotonic() + timeout, every)
        return found if found or not every else self._done(workers)  # at the deadline: those done

    def _done(self, workers: Collection[int], every: bool = False) -> list[int]:
        ctrl = self.ctrl
        return [] if ctrl is None else ctrl.finished(workers, self.dead, every)

    def _look_for_deaths(self, workers: Collection[int], done: list[int]) -> None:
        now = time.monotonic()
        if now < self._next_death_check:
            return
        self._next_death_check = now + DEATH_CHECK_S
        poller = self.mechanism.poller()
        owner = {}
        for w in workers:
            if w not in done and w not in self.dead and w != self.inline_worker:
                poller.register(self.peers[w].sentinel)
                owner[self.peers[w].sentinel] = w
        for key, _ in poller.poll(0) if owner else ():
            self._mark_dead(owner[key])
        self._look_at_exit_codes(workers)

    def _look_at_exit_codes(self, workers: Collection[int]) -> None:
        """Where a process cannot be waited on exactly (:class:`.lifetime.Watch`): its exit
        code, looked at in every bounded nap."""
        for w in workers:
            if w not in self.dead and w != self.inline_worker and not self.watches[w].exact and self.watches[w].ended():
                self._mark_dead(w)

    def _sleep(self, workers: Collection[int], deadline: float | None, every: bool) -> list[int]:
        """Block for a reply (``every``: for all of them, or a death; woken once, by the last to
        finish): declare it, re-check, then bounded polls on sockets and sentinels."""
        ctrl, k = self.ctrl, self.inline_worker
        if ctrl is None:
            raise self._no_block()
        if k in workers and ctrl.outstanding(k):  # never running now: its command was cut short
            ctrl.drop(k)
        live = [w for w in workers if w not in self.dead and w != k]
        poller, owner = self.mechanism.poller(), {}
        for w in live:
            for key in (self.peers[w].waitable, self.peers[w].sentinel):
                poller.register(key)
                owner[key] = w
        slots = ctrl.slots

        mode = Sleep.ALL if every else Sleep.ANY

        def declare(flag: int) -> None:
            if self.ctrl is not None:
                slots[live, Slot.CALLER_SLEEPS] = mode if flag else Sleep.AWAKE

        exact = all(self.watches[w].exact for w in live)

        def check() -> list[int]:
            if not exact:
                self._look_at_exit_codes(live)
            return self._done(workers, every)

        done = handshake.sleep(
            check, declare, poller, lambda fd: self._on_event(owner[fd], fd), deadline,
            lambda: self._closer in (None, threading.get_ident()),
        )
        return done or []

    def _on_event(self, w: int, fd: int) -> None:
        """A socket or sentinel of ``w`` is readable: take wake-ups, notice a death."""
        ctrl = self.ctrl
        if ctrl is None:
            raise self._no_block()
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
        if ctrl is None or infos is None:
            raise self._no_block()
        inline = worker == self.inline_worker
        if not control.TSO and not inline:
            self.peers[worker].skip_wakeups()
        kind = ctrl.slots[worker, Slot.REPLY]
        if kind != Reply.MESSAGE:  # the hot path: the reply is all in shared memory
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
        if type(value) is RowsReply:
            return infos.take(worker, value)
        return value

    def _take_message(self, worker: int) -> bytes:
        try:
            data = self._read(worker, FRAME_TIMEOUT)
        except TimeoutError:  # _read ended the worker (another signal's handler cut a read short)
            raise self._died(worker, f"ended, its reply stalled for {FRAME_TIMEOUT:g} s") from None
        ctrl = self.ctrl
        if ctrl is None:
            raise self._no_block()
        ctrl.take(worker, Reply.MESSAGE)
        return data
