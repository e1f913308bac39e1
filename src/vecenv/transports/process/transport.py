"""The caller's side of the process transport: start workers, post commands, wait, fetch."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Collection, Sequence
from typing import Any

import cloudpickle
import numpy as np
from gymnasium import spaces

from vecenv.engine.transport import DEFAULT_START_TIMEOUT
from vecenv.errors import StepTimeoutError, VecEnvError
from vecenv.infos import IN_ROWS, NO_REPLY, InfoReader, RowsReply
from vecenv.spaces import StepBuffers
from vecenv.transports.process import control, envfns, futex, handshake, lifetime, winjob, wire
from vecenv.transports.process.child import worker_main
from vecenv.transports.process.closing import DEFAULT_CLOSE_TIMEOUT, Closing
from vecenv.transports.process.control import ControlBlock, default_spin
from vecenv.transports.process.envfns import EnvFnPicklingError
from vecenv.transports.process.infos import caller_reader, infos_nbytes
from vecenv.transports.process.mainguard import check_main_guard
from vecenv.transports.process.mechanism import choose_mechanism
from vecenv.transports.process.protocol import Attach, Frame, Op, Reply, Sleep, Slot, Wake
from vecenv.transports.process.shm import aligned
from vecenv.transports.signals import deferred, quietly_started
from vecenv.worker import EnvDescription
from vecenv.worker.commands import Command, GivenStep, Step

__all__ = ["DEFAULT_CLOSE_TIMEOUT", "DEFAULT_YIELD_US", "EnvFnPicklingError", "ProcessTransport"]

#: default time each side calls sched_yield() (checking for its peer) before it blocks in the
#: kernel: hands the core to a runnable peer without the cross-CPU wake-up blocking costs
DEFAULT_YIELD_US = 500.0
#: seconds between looks at the sentinels of workers that other workers keep outpacing
DEATH_CHECK_S = 0.05
#: longest pause inside a reply's frame; past it the socket is out of step and the worker is ended
FRAME_TIMEOUT = 30.0


class ProcessTransport(Closing):
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
    ) -> None:
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
        self._bell: futex.Bell | None = None  # where workers sleep on a futex: the word they wait on
        self._unrung = False  # commands posted since the bell last rang
        self._action_objects = False
        self._next_death_check = 0.0
        self._closed = False
        self._closer: int | None = None  # the thread running close(): waits in others end
        self.main_spin = self.worker_spin = 0.0
        self.waiter = handshake.Waiter(0.0, 0.0)

    # ------------------------------------------------------------ start
    def launch(self) -> list[EnvDescription]:
        check_main_guard(self.start_method)
        if self.spin_us is None:
            self.main_spin, self.worker_spin = default_spin(self.num_workers)
        else:
            self.main_spin = self.worker_spin = max(0.0, float(self.spin_us)) * 1e-6
        self.waiter = handshake.Waiter(self.main_spin, self.yield_s)
        self._payloads = envfns.pack(self.env_fns[: self.partition[-1][1]], self.start_method)  # before any start
        lifetime.LIVE.add(self)
        for w in range(self.num_workers):
            self._spawn(w)
        deadline = self._start_deadline()
        descriptions, errors = [], []
        for w in range(self.num_workers):  # every worker builds its envs meanwhile
            try:
                descriptions.extend(self._handshake(w, deadline, "start"))
            except Exception as exc:  # noqa: PERF203 - read the others too (a Ctrl-C stops at once)
                errors.append(exc)
        if errors:
            raise errors[0]
        return descriptions

    def _start_deadline(self) -> float | None:
        return None if self.start_timeout is None else time.monotonic() + self.start_timeout

    def _spawn(self, w: int) -> None:
        """Start worker ``w``'s process (replacing an old one in place)."""
        start, stop = self.partition[w]
        parent, child = self.mechanism.pair()
        fns = self.env_fns[start:stop] if self._payloads is None else self._payloads[start:stop]
        forked = self.start_method == "fork"
        # Ctrl-C is the caller's: workers start deaf to it, and it waits until the worker is
        # recorded; from a thread that lasts, which their parent-death signal follows
        lifetime.start_lasting(quietly_started, not forked, self._start, w, parent, child, fns, forked)

    def _start(self, w: int, parent: Any, child: Any, fns: Any, forked: bool) -> None:
        """Start worker ``w``'s process and record it (quietly: see :meth:`_spawn`)."""
        start, _ = self.partition[w]
        try:
            # every context multiprocessing makes has Process; typeshed's BaseContext does not say so
            process = self.ctx.Process(  # type: ignore[attr-defined]
                target=worker_main,
                args=(self.first_worker + w, child, fns, start, self.autoreset_mode,
                      (self.worker_spin, self.yield_s), os.getpid(), parent if forked else None,
                      self.mechanism.name),
                name=f"vecenv-worker-{self.first_worker + w}",
                daemon=self.daemon,
            )
            process.start()
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        winjob.put_in_caller_job(process)  # Windows: ends with the caller, whatever its env does
        watch = lifetime.Watch(process)
        peer = self.mechanism.peer(parent, watch.waitable)
        if w < len(self.processes):
            self.processes[w], self.peers[w], self.watches[w] = process, peer, watch
        else:
            self.processes.append(process)
            self.peers.append(peer)
            self.watches.append(watch)

    def _handshake(self, w: int, deadline: float | None, phase: str) -> Any:
        """Read a reply sent outside the counters (the description, the attach) by ``deadline``;
        a worker that misses it is ended."""
        try:
            data = self._read(w, None if deadline is None else max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            start, stop = self.partition[w]
            raise StepTimeoutError(
                list(range(start, stop)), self.first_worker + w, self.start_timeout, phase,
                f"its envs were not built within start_timeout={self.start_timeout:g} s, so the worker was "
                "ended (raise start_timeout, or pass None, for envs that take longer to build)",
            ) from None
        return self._unpack(w, data)

    def _read(self, w: int, timeout: float | None) -> bytes:
        """Worker ``w``'s next frame: WorkerDiedError if it ended; TimeoutError if the frame did
        not come within ``timeout`` (the worker is then ended)."""
        try:
            return self.peers[w].read_frame(timeout)[1]
        except EOFError:
            self._mark_dead(w)
            raise self._died(w) from None
        except TimeoutError:
            self.terminate(w)
            raise

    # ------------------------------------------------------------ buffers
    def allocate(self, observation_space: spaces.Space, action_space: spaces.Space, num_envs: int) -> StepBuffers:
        slots = self.observation_slots
        nbytes = StepBuffers.nbytes(observation_space, action_space, num_envs, slots)
        ctrl_off = aligned(nbytes)
        mask_off = ctrl_off + ControlBlock.nbytes(self.num_workers)
        infos_off = aligned(mask_off + num_envs)
        size = aligned(infos_off + infos_nbytes(observation_space, num_envs))
        self._block = self.mechanism.block(size)
        buf = self._block.buffer
        self._buffers = StepBuffers(observation_space, action_space, num_envs, buf, slots)
        self.ctrl = ControlBlock(buf, ctrl_off, self.num_workers)
        self._mask = np.frombuffer(buf, np.bool_, num_envs, mask_off)
        self._infos = caller_reader(observation_space, num_envs, buf, infos_off, self.partition)
        self._bell = futex.Bell(self.ctrl.bell_word) if self.mechanism.name == "posix" and futex.available() else None
        self._layout = Attach(observation_space, action_space, num_envs, 0, 0, size, ctrl_off,
                              self.num_workers, mask_off, infos_off, self._bell is not None, slots)
        self._action_objects = self._buffers.actions.has_objects
        return self._buffers

    def _no_block(self) -> VecEnvError:
        """The error for a call that needs the shared block when there is none."""
        why = "the transport is closed" if self._closed else "allocate() has not run"
        return VecEnvError(f"ProcessTransport: no shared block (buffers, control block, infos): {why}")

    @property
    def info_reader(self) -> InfoReader:
        """The caller's reader of the info rows (made by :meth:`allocate`)."""
        if self._infos is None:
            raise RuntimeError("ProcessTransport.info_reader: allocate() has not run")
        return self._infos

    def attach(self, buffers: StepBuffers) -> None:
        if buffers is not self._buffers:
            raise ValueError("ProcessTransport.attach needs the buffers its allocate() returned")
        for w in range(self.num_workers):
            self._send_layout(w)
        deadline = self._start_deadline()
        for w in range(self.num_workers):
            self._handshake(w, deadline, "start")
        # the descriptor stays open until close(): a restarted worker maps the same block

    def _send_layout(self, w: int) -> None:
        start, stop = self.partition[w]
        data = cloudpickle.dumps(self._layout._replace(start=start, stop=stop))
        self.peers[w].write_frame_with_fd(Frame.ATTACH, data, self._block.token)

    # ------------------------------------------------------------ commands
    def send(self, commands: Sequence[tuple[int, Command]]) -> None:
        """Post each command (a step as a counter bump, anything else as a message too), then
        wake, with one ring of the bell, the workers asleep since."""
        ctrl = self.ctrl
        if ctrl is None:
            raise self._no_block()
        self._unrung = self._bell is not None  # ready() rings what an interruption left unrung
        for worker, command in commands:
            if worker in self.dead:
                continue  # fetch reports it
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
            ctrl.post(worker, op)  # the commit point
            if self._bell is None:
                handshake.notify(ctrl.slots[worker], Slot.WORKER_SLEEPS, self.peers[worker], Wake.WORKER)
        if self._unrung:
            self._ring()

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
        ctrl.post(worker, Op.COMMAND)
        try:
            self.peers[worker].write(data)
        except EOFError:
            self._mark_dead(worker)

    def _ring(self) -> None:
        """Wake, with one ring of the bell, the workers asleep since commands were posted to them."""
        self._unrung = False
        ctrl, bell = self.ctrl, self._bell
        control.fence()
        if ctrl is not None and bell is not None and (not control.TSO or ctrl.slots[:, Slot.WORKER_SLEEPS].any()):
            bell.ring()

    def outstanding(self, worker: int) -> bool:
        ctrl = self.ctrl
        return worker not in self.dead and ctrl is not None and (
            ctrl.outstanding(worker) or ctrl.slots[worker, Slot.REPLY] == Reply.MESSAGE
        )

    def ready(self, workers: Collection[int], timeout: float | None = None, every: bool = False) -> list[int]:
        if self._unrung:  # a send cut short before its ring
            self._ring()
        ctrl = self.ctrl
        if ctrl is None:
            return []
        dead = self.dead
        done = ctrl.finished(workers, dead)
        if done and len(done) < len(workers) and not every:  # a wait for all watches the processes
            self._look_for_deaths(workers, done)  # async batches: a dead worker is never waited on
            done = ctrl.finished(workers, dead)
        if done or timeout == 0:
            return done
        found: list[int] = []

        def finished() -> bool:
            found.extend(ctrl.finished(workers, dead))
            return bool(found)

        if self.waiter.spin(finished, timeout):
            return found
        found = self._sleep(workers, None if timeout is None else time.monotonic() + timeout, every)
        return found if found or not every else self._done(workers)  # at the deadline: those done

    def _done(self, workers: Collection[int]) -> list[int]:
        ctrl = self.ctrl
        return [] if ctrl is None else ctrl.finished(workers, self.dead)

    def _look_for_deaths(self, workers: Collection[int], done: list[int]) -> None:
        now = time.monotonic()
        if now < self._next_death_check:
            return
        self._next_death_check = now + DEATH_CHECK_S
        poller = self.mechanism.poller()
        owner = {}
        for w in workers:
            if w not in done and w not in self.dead:
                poller.register(self.peers[w].sentinel)
                owner[self.peers[w].sentinel] = w
        for key, _ in poller.poll(0) if owner else ():
            self._mark_dead(owner[key])
        self._look_at_exit_codes(workers)

    def _look_at_exit_codes(self, workers: Collection[int]) -> None:
        """Where a process cannot be waited on exactly (:class:`.lifetime.Watch`): its exit
        code, looked at in every bounded nap."""
        for w in workers:
            if w not in self.dead and not self.watches[w].exact and self.watches[w].ended():
                self._mark_dead(w)

    def _sleep(self, workers: Collection[int], deadline: float | None, every: bool) -> list[int]:
        """Block for a reply (``every``: for all of them, or a death; woken once, by the last to
        finish): declare it, re-check, then bounded polls on sockets and sentinels."""
        live = [w for w in workers if w not in self.dead]
        poller, owner = self.mechanism.poller(), {}
        for w in live:
            for key in (self.peers[w].waitable, self.peers[w].sentinel):
                poller.register(key)
                owner[key] = w
        ctrl = self.ctrl
        if ctrl is None:
            raise self._no_block()
        slots = ctrl.slots

        mode = Sleep.ALL if every else Sleep.ANY

        def declare(flag: int) -> None:
            if self.ctrl is not None:
                slots[live, Slot.CALLER_SLEEPS] = mode if flag else Sleep.AWAKE

        exact = all(self.watches[w].exact for w in live)

        def check() -> list[int]:
            if not exact:
                self._look_at_exit_codes(live)
            done = self._done(workers)
            if every and len(done) < len(workers) and not any(w in self.dead for w in workers):
                return []
            return done

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
        if not control.TSO:
            self.peers[worker].skip_wakeups()
        kind = ctrl.slots[worker, Slot.REPLY]
        if kind != Reply.MESSAGE:  # the hot path: the reply is all in shared memory
            if kind == Reply.INFOS and ctrl.take(worker, Reply.INFOS):
                return infos.take(worker, IN_ROWS)
            return NO_REPLY
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

    def _unpack(self, worker: int, data: bytes) -> Any:
        try:
            ok, value = wire.loads(data)
        except Exception as exc:
            raise VecEnvError(
                f"worker {self.first_worker + worker}: its reply could not be unpickled in the caller: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if not ok:
            raise value
        return value

    # ------------------------------------------------------------ failures
    def restart(self, worker: int) -> None:
        """Start a new process for ``worker``'s envs, mapped onto the same rows."""
        self.terminate(worker)
        old, watch = self.peers[worker], self.watches[worker]
        self._spawn(worker)
        old.close()
        watch.release()
        ctrl = self.ctrl
        if ctrl is None:
            raise self._no_block()
        ctrl.forget(worker)
        self.info_reader.forget(worker)
        self.dead.pop(worker, None)
        deadline = self._start_deadline()
        try:
            self._handshake(worker, deadline, "restart")  # the new group's description
            self._send_layout(worker)
            self._handshake(worker, deadline, "restart")
        except BaseException:
            self.terminate(worker)
            raise
