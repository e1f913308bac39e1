"""Starting the process transport's workers: spawn each process, read its envs' description,
map the shared block into it, and start a worker again in place after a failure. With ``inline``
the last env group is built in the caller's process, on the same shared rows."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import time
from typing import Any

import cloudpickle
import numpy as np
from gymnasium import spaces

from vecenv.engine.transport import DEFAULT_START_TIMEOUT
from vecenv.errors import StepTimeoutError, VecEnvError
from vecenv.infos import InfoReader, InfoWriter
from vecenv.spaces import StepBuffers
from vecenv.transports.process import control, envfns, handshake, lifetime, winjob, wire
from vecenv.transports.process.child import worker_main
from vecenv.transports.process.closing import Closing
from vecenv.transports.process.control import ControlBlock, default_spin
from vecenv.transports.process.infos import caller_reader, infos_nbytes
from vecenv.transports.process.mainguard import check_main_guard
from vecenv.transports.process.mechanism import choose_mechanism
from vecenv.transports.process.protocol import Attach, Frame
from vecenv.transports.process.queue import EnvCounters
from vecenv.transports.process.shm import aligned
from vecenv.transports.signals import quietly_started
from vecenv.worker import EnvDescription, EnvGroup
from vecenv.worker.group import warn_close_failures

__all__ = ["DEFAULT_YIELD_US", "Starting"]

#: default time each side calls sched_yield() (checking for its peer) before it blocks in the
#: kernel: hands the core to a runnable peer without the cross-CPU wake-up blocking costs
DEFAULT_YIELD_US = 500.0


class Starting(Closing):
    """The starting half of :class:`~.transport.ProcessTransport` (see the module docstring),
    with the transport's options and state."""

    # the shared block and the caller's views over it, set together by allocate() (the engine
    # calls nothing that needs them before): the step buffers, the control block, the step mask,
    # the per-env counters of async batches (.queue), the info rows, the futex words each side
    # sleeps on (None: it sleeps on its socket), and the layout each worker is sent
    _block: Any
    _buffers: StepBuffers
    ctrl: ControlBlock
    _mask: np.ndarray
    counters: EnvCounters
    _infos: InfoReader
    _bell: control.Bell | None
    _caller_bell: control.Bell | None
    _layout: Attach
    #: whether a step's actions include leaves that travel pickled (custom spaces)
    _action_objects: bool
    #: whether a whole step of every worker is posted with two stores per column, not a loop
    _posts_at_once: bool
    #: the last group's index when it steps in the caller's thread (``inline``), else -1; the
    #: group, and the writer of its info rows
    inline_worker: int = -1
    inline_group: EnvGroup | None = None
    inline_infos: InfoWriter | None = None

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
        self.runs_inline = inline  # the last group steps in the caller's thread (``inline_worker``)
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
        self.allocated = False  # allocate() made the shared block
        self._payloads: list[bytes] | None = None
        self._unrung = False  # commands posted since the bell last rang
        self._worker_of: np.ndarray | None = None  # each env's worker, made by infos_at
        self._every_poller: tuple[Any, dict, bool] | None = None  # made by _poller_of
        self._next_death_check = 0.0
        self._closed = False
        self._closer: int | None = None  # the thread running close(): waits in others end
        self.worker_spin = 0.0
        self.waiter = handshake.Waiter(0.0, 0.0)

    # ------------------------------------------------------------ start
    @property
    def spawned(self) -> int:
        """How many groups run in worker processes: all but an inline one."""
        return self.num_workers - (self.inline_worker >= 0)

    def launch(self) -> list[EnvDescription]:
        self.inline_worker = self.num_workers - 1 if self.runs_inline else -1
        n = self.spawned
        if n:
            check_main_guard(self.start_method)
        if self.spin_us is None:
            main_spin, self.worker_spin = default_spin(n)
        else:
            main_spin = self.worker_spin = max(0.0, float(self.spin_us)) * 1e-6
        self.waiter = handshake.Waiter(main_spin, self.yield_s)
        self._payloads = envfns.pack(self.env_fns[: self.partition[n - 1][1] if n else 0], self.start_method)
        lifetime.LIVE.add(self)
        for w in range(n):
            self._spawn(w)
        if self.inline_worker >= 0:  # built here while the workers build theirs
            self.inline_group = self._inline_group()
        deadline = None if self.start_timeout is None else time.monotonic() + self.start_timeout
        descriptions, errors = [], []
        for w in range(n):
            try:
                descriptions.extend(self._startup_reply(w, deadline, "start"))
            except Exception as exc:  # noqa: PERF203 - read the others too (a Ctrl-C stops at once)
                errors.append(exc)
        if errors:
            raise errors[0]
        return descriptions + (self.inline_group.describe() if self.inline_group is not None else [])

    def _inline_group(self) -> EnvGroup:
        """The last group, built in this process (a Ctrl-C in its envs is the caller's)."""
        k = self.inline_worker
        return EnvGroup(self.group_fns(k), self.partition[k][0], k, self.autoreset_mode)

    def _attach_inline(self, group: EnvGroup) -> None:
        """Give the inline group its rows of the shared block, its infos included, as a worker's."""
        start, stop = self.partition[self.inline_worker]
        group.attach(self._buffers.rows(start, stop))
        if self.inline_infos is None:
            self.inline_infos = InfoWriter(self._infos.area.part(start, stop), start)
        group.info_sink = self.inline_infos.write

    def _spawn(self, w: int) -> None:
        """Start worker ``w``'s process and record it (replacing an old one in place). Ctrl-C is
        the caller's: workers start deaf to it, and it waits until the worker is recorded; from a
        thread that lasts, which their parent-death signal follows."""
        lifetime.start_lasting(quietly_started, self.start_method != "fork", self._start, w)

    def _start(self, w: int) -> None:
        start, stop = self.partition[w]
        forked = self.start_method == "fork"
        fns = self.env_fns[start:stop] if self._payloads is None else self._payloads[start:stop]
        parent, child = self.mechanism.pair()
        try:
            # every context multiprocessing makes has Process; typeshed's BaseContext does not say so
            process = self.ctx.Process(  # type: ignore[attr-defined]
                target=worker_main,
                args=(w, child, fns, start, self.autoreset_mode,
                      (self.worker_spin, self.yield_s), os.getpid(), parent if forked else None,
                      self.mechanism.name),
                name=f"vecenv-worker-{w}",
                daemon=self.daemon,
            )
            process.start()
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        if self.cores:
            with contextlib.suppress(ProcessLookupError):  # gone already: its end is seen as any
                os.sched_setaffinity(process.pid, {self.cores[w % len(self.cores)]})
        winjob.put_in_caller_job(process)  # Windows: ends with the caller, whatever its env does
        watch = lifetime.Watch(process)
        peer = self.mechanism.peer(parent, watch.waitable)
        self._every_poller = None  # it watched the old process
        if w < len(self.processes):
            self.processes[w], self.peers[w], self.watches[w] = process, peer, watch
        else:
            self.processes.append(process)
            self.peers.append(peer)
            self.watches.append(watch)

    def _startup_reply(self, w: int, deadline: float | None, phase: str) -> Any:
        """Read a reply sent outside the counters (the description, the attach) by ``deadline``;
        a worker that misses it is ended."""
        try:
            data = self._read(w, None if deadline is None else max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            start, stop = self.partition[w]
            raise StepTimeoutError(
                list(range(start, stop)), w, self.start_timeout, phase,
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
        queue_off = aligned(mask_off + num_envs)
        infos_off = aligned(queue_off + EnvCounters.nbytes(num_envs))
        size = aligned(infos_off + infos_nbytes(observation_space, num_envs))
        self._block = self.mechanism.block(size)
        buf = self._block.buffer
        self._buffers = StepBuffers(observation_space, action_space, num_envs, buf, slots)
        self.ctrl = ControlBlock(buf, ctrl_off, self.num_workers)
        self._mask = np.frombuffer(buf, np.bool_, num_envs, mask_off)
        self.counters = EnvCounters(buf, queue_off, num_envs)
        self._infos = caller_reader(observation_space, num_envs, buf, infos_off, self.partition)
        futex = self.mechanism.name == "posix" and control.bell_available()
        self._bell = control.Bell(self.ctrl.bell_word) if futex else None
        self._caller_bell = control.Bell(self.ctrl.caller_word) if futex else None
        self._layout = Attach(observation_space, action_space, num_envs, 0, 0, size, ctrl_off,
                              self.num_workers, mask_off, queue_off, infos_off, self._bell is not None, slots)
        self._action_objects = self._buffers.actions.has_objects
        # async batches env by env (.queue): where stores are seen in order, with no inline
        # group and no custom-space leaves (those travel with each reply)
        self.queues_envs = (control.TSO and self.inline_worker < 0 and not self._action_objects
                            and not self._buffers.observations.has_objects)
        # a whole step of every worker is posted with two stores per column, not a loop
        # (workers that sleep on the bell, no inline group, no action that travels pickled)
        self._posts_at_once = self._bell is not None and self.inline_worker < 0 and not self._action_objects
        self.allocated = True
        return self._buffers

    def attach(self, buffers: StepBuffers) -> None:
        if buffers is not self._buffers:
            raise ValueError("ProcessTransport.attach needs the buffers its allocate() returned")
        for w in range(self.spawned):
            self._send_layout(w)
        if self.inline_group is not None:
            self._attach_inline(self.inline_group)
        deadline = None if self.start_timeout is None else time.monotonic() + self.start_timeout
        for w in range(self.spawned):
            self._startup_reply(w, deadline, "start")
        # the descriptor stays open until close(): a restarted worker maps the same block

    def _send_layout(self, w: int) -> None:
        start, stop = self.partition[w]
        data = cloudpickle.dumps(self._layout._replace(start=start, stop=stop))
        self.peers[w].write_frame_with_fd(Frame.ATTACH, data, self._block.token)

    def _unpack(self, worker: int, data: bytes) -> Any:
        try:
            ok, value = wire.loads(data)
        except Exception as exc:
            raise VecEnvError(
                f"worker {worker}: its reply could not be unpickled in the caller: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if not ok:
            raise value
        return value

    def worker_pid(self, worker: int) -> int | None:
        return None if worker == self.inline_worker else self.processes[worker].pid

    # ------------------------------------------------------------ failures
    def restart(self, worker: int) -> None:
        """Start a new process for ``worker``'s envs, mapped onto the same rows (the inline
        group: build it again here from its env_fns, its envs not yet reset)."""
        old, ctrl, infos = self.inline_group, self.ctrl, self._infos
        if worker == self.inline_worker:
            if old is None:
                raise VecEnvError("ProcessTransport.restart: the inline group is closed")
            new = self._inline_group()
            self._attach_inline(new)
            self.inline_group = new
            ctrl.drop(worker)
            infos.restart(worker)
            warn_close_failures(old.close())
            return
        self.terminate(worker)
        peer, watch = self.peers[worker], self.watches[worker]
        self._spawn(worker)
        peer.close()
        watch.release()
        ctrl.drop(worker)
        infos.restart(worker)
        self.dead.pop(worker, None)
        deadline = None if self.start_timeout is None else time.monotonic() + self.start_timeout
        try:
            self._startup_reply(worker, deadline, "restart")  # the new group's description
            self._send_layout(worker)
            self._startup_reply(worker, deadline, "restart")
        except BaseException:
            self.terminate(worker)
            raise

    def close(self, timeout: float | None = None) -> None:
        inline, self.inline_group = self.inline_group, None
        try:
            if inline is not None:
                warn_close_failures(inline.close())
        finally:
            super().close(timeout)
