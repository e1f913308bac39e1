"""The worker process: receive a command, run it on the env group, reply.

A whole-group step arrives as a counter bump in the control block (op ``S``, or ``M`` for the
envs flagged in the shared step mask) and, when its envs report nothing but arrays, is answered
the same way: nothing is pickled. Any other command, or a step whose infos are not empty,
travels as a pickled message on the socket.

Only the worker answers for itself: a process an env forks from it (a helper, a subprocess
before its exec) is a fork that shares the worker's socket and memory. The fork is marked when it
is made (:func:`.lifetime.mark_forks`), so an exit that env code raises there is the fork's own,
and a fork that comes back to this loop ends at once, touching neither socket nor memory.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from vecenv.errors import EnvError, portable_error
from vecenv.infos import InfoWriter, RowsReply, StepReply
from vecenv.spaces import BatchBuffer, StepBuffers
from vecenv.transports.process import control, envfns, handshake, lifetime, wire
from vecenv.transports.process.control import ControlBlock
from vecenv.transports.process.infos import worker_writer
from vecenv.transports.process.mechanism import MECHANISMS, Mechanism
from vecenv.transports.process.protocol import Attach, Field, Frame, Op, Reply, Wake
from vecenv.transports.process.queue import EnvCounters
from vecenv.worker import EnvGroup
from vecenv.worker.commands import Close

__all__ = ["THREAD_VARS", "worker_main"]

CMD, OP, PUBLISHED = Field.CMD, Field.OP, Field.PUBLISHED
#: environment variables that keep numeric libraries to one thread in a worker
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
               "NUMEXPR_NUM_THREADS")


class Child:
    """The loop one worker process runs over its env group."""

    # set by attach(), before serve() runs: the worker's control block, step mask, info writer
    # and action rows, the bell it sleeps on (None: it sleeps on its socket), and how it wakes a
    # sleeping caller (a ring of the caller's bell, or a byte on the socket)
    ctrl: ControlBlock
    mask: np.ndarray
    counters: EnvCounters
    infos: InfoWriter
    actions: BatchBuffer
    bell: control.Bell | None
    wake_caller: Callable[[], None]

    def __init__(self, index: int, peer: Any, spin: tuple[float, float], mechanism: Mechanism) -> None:
        self.index = index
        self.peer = peer
        self.mechanism = mechanism
        self.waiter = handshake.Waiter(*spin)  # seconds of busy spinning, then of sched_yield() spinning
        self.group: EnvGroup | None = None
        self.seq = 0
        self.is_fork = False  # this process is a fork of the worker that an env made

    def forked(self) -> None:
        """At a fork, in the new process: it is a fork, whose exits are its own (see the module
        docstring)."""
        self.is_fork = True
        if self.group is not None:
            self.group.contain_exits(False)

    def leave_if_fork(self, error: BaseException | None = None) -> None:
        """End this process without a word if it is a fork of the worker: with the status of the
        ``SystemExit`` that ``error`` is or carries, 1 for another error, 0 without one."""
        if not self.is_fork:
            return
        cause = error if isinstance(error, SystemExit) else getattr(error, "__cause__", None)
        code = cause.code if isinstance(cause, SystemExit) else 0 if error is None else 1
        os._exit(code if isinstance(code, int) else 0 if code is None else 1)

    # ------------------------------------------------------------ start-up
    def attach(self, group: EnvGroup) -> None:
        """Map the shared block the caller sends and give the group its rows."""
        op, data, token = self.peer.read_frame_with_fd()
        at = wire.loads(data)
        if op != Frame.ATTACH or type(at) is not Attach:
            raise RuntimeError(f"worker {self.index}: expected the shared-memory layout, got {op!r} "
                               f"{type(at).__name__}")
        block = self.mechanism.attach_block(token, at.nbytes)
        buffers = StepBuffers(at.observation_space, at.action_space, at.num_envs, block.buffer, at.slots)
        rows = buffers.rows(at.start, at.stop)
        group.attach(rows, ship_objects=True)
        self.actions = rows.actions  # the group's, for the life of this process
        ctrl = self.ctrl = ControlBlock(block.buffer, at.control_at, at.num_workers)
        self.mask = np.frombuffer(block.buffer, np.bool_, at.stop - at.start, at.mask_at + at.start)
        self.counters = EnvCounters(block.buffer, at.queue_at, at.num_envs)
        infos = self.infos = worker_writer(at.observation_space, at.num_envs, block.buffer, at.infos_at, at.start,
                                           at.stop)
        group.info_sink = infos.write
        self.bell = control.Bell(ctrl.bell_word) if at.bell else None
        self.wake_caller = control.Bell(ctrl.caller_word).ring_one if at.bell else partial(self.peer.wake, Wake.CALLER)
        self.seq = int(ctrl.rows[self.index, CMD])
        self.startup_reply(True, None, "attach")

    # ------------------------------------------------------------ commands
    def serve(self, group: EnvGroup) -> None:
        """Run commands until the caller sends Close or goes away."""
        infos, mask, actions = self.infos, self.mask, self.actions
        row = self.ctrl.rows[self.index]
        while True:
            self.wait_command(row)
            self.seq = int(row[CMD])
            op, name = int(row[OP]), "step"
            if op == Op.QUEUE:  # its envs' rows are published env by env, never cleared at once
                try:
                    late = self.run_queue(group)
                except Exception as exc:
                    self.reply(False, exc, name)
                    continue
                self.finish_queue(late)
                continue
            infos.begin()
            try:
                if op == Op.STEP:
                    result: Any = group.step(None)
                elif op == Op.MASKED_STEP:
                    result = group.step(np.flatnonzero(mask))
                else:
                    command, objects = wire.loads(self.peer.read_frame()[1])
                    name = type(command).__name__
                    if objects is not None:  # custom action leaves travel with the step
                        actions.set_objects(objects)
                    result = group.run(command)
                    if isinstance(command, Close):
                        self.reply(True, result, name)
                        return
            except Exception as exc:
                self.reply(False, exc, name)
                continue
            self.reply(True, result, name)

    def run_queue(self, group: EnvGroup) -> RowsReply | None:
        """Step every env of the group that the caller posted, one at a time, each published as
        soon as it is done, looking again until none is left (:mod:`.queue`); what the reply
        must carry (entries that did not fit their rows, schemas new to the caller), if any."""
        counters, infos, start = self.counters, self.infos, group.start
        ctrl, clock = self.ctrl, time.monotonic_ns
        posted, row = counters.posted, ctrl.rows[self.index]
        infos.new = []
        late: list = []
        stop = start + len(group.envs)
        while True:
            todo = counters.pending(start, stop)
            if not todo.size:
                break
            for i in todo.tolist():
                j = i - start
                seq = int(posted[i])
                infos.clear(j)
                reply = group.step((j,))
                if self.is_fork:
                    self.leave_if_fork()
                rest = infos.pack(reply.entries) if reply.entries else ()
                held = bool(rest) or bool(infos.new)
                late.extend(rest)
                counters.publish(i, seq, held, clock())
                row[PUBLISHED] += 1
                control.fence()
                if row[Field.CALLER_SLEEPS] and not held and ctrl.caller_waits_for_count(self.index):
                    self.wake_caller()
        if not late and not infos.new:
            return None
        new, infos.new = infos.new, []
        return RowsReply(late, None, new)

    def finish_queue(self, late: RowsReply | None) -> None:
        """Finish a queue command: in shared memory alone, or with the message ``late``."""
        if self.is_fork:
            self.leave_if_fork()
        if late is not None:
            self.reply(True, late, "step")
            return
        self.ctrl.finish(self.index, self.seq, Reply.IN_MEMORY)
        self.notify_caller()

    def wait_command(self, row: np.ndarray) -> None:
        """Return once the command counter moves (:mod:`.handshake`; the caller's death ends the
        process from :func:`.lifetime.watch_caller`)."""
        seq = self.seq
        moved = lambda: row[CMD] != seq  # noqa: E731
        if moved() or self.waiter.spin(moved):
            return
        if self.bell is not None:
            handshake.sleep_on_bell(moved, lambda flag: row.__setitem__(Field.WORKER_SLEEPS, flag), self.bell,
                                    self._caller_gone)
            return
        poller = self.mechanism.poller()
        poller.register(self.peer.waitable)
        handshake.sleep(moved, lambda flag: row.__setitem__(Field.WORKER_SLEEPS, flag), poller, self._on_wakeup)

    def _on_wakeup(self, fd: int) -> None:
        if self.peer.skip_wakeups() == b"":
            raise SystemExit(0)  # the caller closed its end

    def _caller_gone(self) -> None:
        """Between naps on the bell: end when the caller closed its end."""
        if self.peer.peek() == b"":
            raise SystemExit(0)

    # ------------------------------------------------------------ replying
    def reply(self, ok: bool, value: Any, name: str) -> None:
        """Finish the command: in shared memory alone when it allows (a step's infos included,
        :mod:`.infos`), else as a message."""
        if self.is_fork:
            self.leave_if_fork(None if ok else value)
        infos, ctrl = self.infos, self.ctrl
        if ok and type(value) is StepReply:
            message = infos.reply(value.entries, value.objects)
            if message is None:
                kind = Reply.INFOS if infos.dirty else Reply.IN_MEMORY
                ctrl.finish(self.index, self.seq, kind)
                self.notify_caller()
                return
            value = message
        data = self.dump(ok, value, name)
        ctrl.finish(self.index, self.seq, Reply.MESSAGE)
        self.peer.write(wire.frame(Frame.MESSAGE, data))  # wakes a caller asleep on the socket
        if self.bell is not None:  # one asleep on its bell needs a ring
            self.notify_caller()

    def notify_caller(self) -> None:
        """After finishing a command: a fence, then wake the caller if it sleeps and wants this
        wake-up; where stores may be seen out of order, always."""
        control.fence()
        if not control.TSO or self.ctrl.caller_waits_on(self.index):
            self.wake_caller()

    def startup_reply(self, ok: bool, value: Any, name: str) -> None:
        """A reply outside the counters, while starting: the description, the attach."""
        self.leave_if_fork(None if ok else value)
        self.peer.write(wire.frame(Frame.MESSAGE, self.dump(ok, value, name)))

    def dump(self, ok: bool, value: Any, name: str) -> bytes:
        if not ok:
            return wire.dumps((False, portable_error(value)))
        try:
            return wire.dumps((True, value))
        except Exception as exc:
            return wire.dumps((False, portable_error(self.unsendable(value, name, exc))))

    def unsendable(self, value: Any, name: str, exc: Exception) -> Exception:
        """The error for a result that cannot be pickled: the env whose info it is, if any."""
        for entry in value.entries if type(value) in (StepReply, RowsReply) else ():
            try:
                wire.dumps(entry)
            except Exception as bad:  # noqa: PERF203 - only on the failure path
                method = f"{name.lower()} (its info cannot be pickled to reach the caller)"
                return EnvError.from_exception(bad, entry.index, self.index, method)
        return RuntimeError(
            f"worker {self.index}: the result of {name} cannot be sent to the caller "
            f"(pickling failed: {type(exc).__name__}: {exc})"
        )


def worker_main(
    index: int,
    sock: Any,
    env_fns: Sequence[Callable[[], Any] | bytes],
    start: int,
    autoreset_mode: AutoresetMode,
    spin: tuple[float, float],
    caller_pid: int,
    caller_end: Any,
    mechanism: str = "posix",
) -> None:
    """Entry point of a worker process: build the group, describe it, attach, serve.

    ``caller_end``: with fork, the caller's end of this worker's socket (closed here);
    ``mechanism``: the name of the :class:`~.mechanism.Mechanism` the caller uses.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the caller's to handle, once
    if hasattr(signal, "pthread_sigmask"):  # started with SIGINT blocked: SIGTERM must end us,
        # and SIGINT stays blocked, so a handler an env installs (rclpy's) never runs
        signal.pthread_sigmask(signal.SIG_SETMASK, (signal.SIGINT,))
    for var in THREAD_VARS:  # for libraries the envs import from now on
        os.environ.setdefault(var, "1")
    if caller_end is not None:
        lifetime.drop_inherited(caller_end)
    lifetime.watch_caller(caller_pid)
    how = MECHANISMS[mechanism]
    child = Child(index, how.peer(sock), spin, how)
    lifetime.mark_forks(child.forked)
    try:
        try:
            fns = [envfns.unpack(fn, start + j, index) for j, fn in enumerate(env_fns)]
            group = child.group = EnvGroup(fns, start, index, autoreset_mode, contain_exits=True)
            descriptions = group.describe()
        except Exception as exc:
            child.startup_reply(False, exc, "env_fn()")
            return
        child.startup_reply(True, descriptions, "describe")
        child.attach(group)
        child.serve(group)
    except (SystemExit, KeyboardInterrupt, EOFError, OSError) as exc:
        child.leave_if_fork(exc)
    finally:
        child.leave_if_fork()
        if child.group is not None:
            child.group.close()
        sock.close()

