"""Process transport: one env group per worker process, results in shared memory.

Each worker process runs an :class:`~vecenv.worker.EnvGroup` over a contiguous range of envs. The
batch buffers (observations, actions, rewards, flags) live in one anonymous shared-memory block
(see :mod:`vecenv.transports._shm`) that every worker maps, so groups write their results in
place. A worker and the main process talk over a Unix socket pair; a whole-group step costs one
byte each way and no pickling (see :mod:`vecenv.transports._channel`).

Waiting: each side first spins briefly on a counter in shared memory (no system call), then
blocks in ``poll`` on the sockets together with the worker processes' sentinels, so a dead worker
is reported at once (:class:`~vecenv.errors.WorkerDiedError`) and an oversubscribed machine does
not burn cores spinning. On x86 a wake-up byte is written only when the peer has declared (in the
control block) that it is about to block, so a step whose peer spins costs no system call. A
memory fence between each flag store and the peer-state load keeps the two sides from missing
each other; as a backstop the blocking side still re-checks the counter after bounded naps.

``inline=True`` runs the last env group in the main process itself (stepped in :meth:`submit`,
after the worker processes got their commands); it has no crash isolation and no step timeout.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import pickle
import platform
import select
import signal
import socket
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Collection, Sequence
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from vecenv.engine import VectorEnv
from vecenv.errors import EnvError, VecEnvError, WorkerDiedError
from vecenv.spaces import StepBuffers
from vecenv.transports._channel import (
    OP_ATTACH,
    OP_MASKED_STEP,
    OP_MESSAGE,
    OP_OK,
    OP_STEP,
    OP_WAKE,
    frame,
    recv_exact,
)
from vecenv.transports._shm import SharedBlock
from vecenv.transports.base import Transport, usable_cores
from vecenv.worker import EnvDescription, EnvGroup

__all__ = ["AsyncVectorEnv", "EnvFnPicklingError", "ProcessTransport", "ProcessVectorEnv"]

_PROTOCOL = pickle.HIGHEST_PROTOCOL
_ALIGN = 64
# control block: one 64-byte slot (8 int64) per worker, so workers never share a cache line
# _OP: the command's operation (S/M/P), _ROP: the reply's kind (0: OK, 1: pickled message);
# _WSLEEP / _MSLEEP: the worker / the main process is about to block, so it needs a wake-up byte
_CMD, _DONE, _STAMP, _OP, _ROP, _WSLEEP, _MSLEEP = 0, 1, 2, 3, 4, 5, 6

_FENCE_LOCK = threading.Lock()


def _fence() -> None:
    """A full memory barrier between a store and a load to shared memory (x86 may otherwise let
    the load pass the store, and both sides would miss each other's flag: a lost wake-up).

    Taking a lock is a locked (atomic) instruction, which orders every earlier store before every
    later load. Costs about 0.1 µs.
    """
    _FENCE_LOCK.acquire()
    _FENCE_LOCK.release()
_SLOT = 8
#: skip the wake-up byte while the peer spins: needs stores seen in program order (x86 TSO);
#: elsewhere every command and reply keeps its byte, whose system calls order the memory
SKIP_WAKEUPS = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686", "x86")
_OP_BYTES = {ord(OP_STEP): OP_STEP, ord(OP_MASKED_STEP): OP_MASKED_STEP, ord(OP_MESSAGE): OP_MESSAGE}
#: longest bounded sleep (ms) between re-checks of the counters; a lost wake-up costs at most this
_MAX_NAP_MS = 50
#: seconds between looks at the sentinels of workers that other workers keep outpacing
_DEATH_CHECK_S = 0.05
#: environment variables that keep numeric libraries to one thread in a worker
THREAD_VARS = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
#: how long ``close()`` waits for workers to finish by themselves when given no timeout
DEFAULT_CLOSE_TIMEOUT = 5.0


class EnvFnPicklingError(pickle.PicklingError, TypeError):
    """An env_fn cannot be pickled, so it cannot reach a worker started with spawn/forkserver."""


#: default time each side spends calling sched_yield() (checking for its peer in between) before
#: it blocks in the kernel. Yielding hands the core to a runnable worker or caller without the
#: cross-CPU wake-up that blocking costs (expensive in VMs); see docs/process.md.
DEFAULT_YIELD_US = 500.0


def _yield_until(condition: Callable[[], bool], seconds: float) -> bool:
    """Call ``os.sched_yield()`` until ``condition()`` holds or ``seconds`` pass; return it."""
    end = time.perf_counter() + seconds
    while True:
        if condition():
            return True
        if time.perf_counter() >= end:
            return False
        os.sched_yield()


def default_spin(num_workers: int) -> tuple[float, float]:
    """``(main, worker)`` spin times in seconds before blocking in the kernel.

    Spinning only pays when every process has a core of its own: on an oversubscribed machine a
    spinning waiter takes the core a worker needs (see docs/process.md for the measurements).
    """
    if num_workers + 1 <= usable_cores():
        return 50e-6, 50e-6
    return 0.0, 0.0


# ==================================================================== worker side
class _Worker:
    """The loop a worker process runs: receive a command, run it on the group, reply."""

    def __init__(
        self, index: int, sock: socket.socket, spin: tuple[float, float], parent_pid: int
    ) -> None:
        self.index = index
        self.sock = sock
        self.fd = sock.fileno()
        self.spin, self.yield_s = spin  # seconds of busy spinning, then of sched_yield() spinning
        self.parent_pid = parent_pid
        self.poller = select.poll()
        self.poller.register(self.fd, select.POLLIN)
        self.group: EnvGroup | None = None
        self.ctrl: np.ndarray | None = None
        self.mask: np.ndarray | None = None
        self.seq = 0
        self.op_read = False  # the command's op byte was already taken off the socket

    # ------------------------------------------------------------ receiving
    def wait_command(self) -> bytes:
        ctrl = self.ctrl
        if ctrl is not None and SKIP_WAKEUPS:
            slot = ctrl[self.index]
            seq = self.seq
            if slot[_CMD] == seq and self.spin > 0.0:
                end = time.perf_counter() + self.spin
                while slot[_CMD] == seq and time.perf_counter() < end:
                    pass
            if slot[_CMD] == seq and self.yield_s > 0.0:
                _yield_until(lambda: slot[_CMD] != seq, self.yield_s)
            if slot[_CMD] == seq:
                self.sleep(slot, seq)
            return _OP_BYTES.get(int(slot[_OP]), b"?")
        self.op_read = True  # the byte read below is the op itself
        if ctrl is not None and self.spin > 0.0:
            slot = ctrl[self.index]
            seq = self.seq
            if slot[_CMD] == seq:
                end = time.perf_counter() + self.spin
                while slot[_CMD] == seq and time.perf_counter() < end:
                    pass
            if slot[_CMD] != seq:
                return self.read(1)  # the byte is on its way
        while not self.poller.poll(1000):
            if os.getppid() != self.parent_pid:  # the main process is gone
                raise SystemExit(0)
        return self.read(1)

    def sleep(self, slot: np.ndarray, seq: int) -> None:
        """Block until the command counter moves: declare it, re-check, then bounded polls."""
        slot[_WSLEEP] = 1
        _fence()
        try:
            nap, waited = 1, 0
            while slot[_CMD] == seq:
                if self.poller.poll(nap):
                    if self.read(1) == OP_MESSAGE:  # a message's op byte (else a wake-up byte)
                        self.op_read = True
                    continue
                waited += nap
                nap = min(2 * nap, _MAX_NAP_MS)
                if waited >= 1000:
                    waited = 0
                    if os.getppid() != self.parent_pid:  # the main process is gone
                        raise SystemExit(0)
        finally:
            slot[_WSLEEP] = 0

    def take_op(self) -> None:
        """Take a message's op byte off the socket (skipping stale wake-up bytes)."""
        if self.op_read:
            self.op_read = False
            return
        while self.read(1) != OP_MESSAGE:
            pass

    def read(self, n: int) -> bytes:
        data = os.read(self.fd, n) if n == 1 else recv_exact(self.sock, n)
        if not data:
            raise SystemExit(0)  # main process closed its end
        return data

    def read_message(self) -> Any:
        size = int.from_bytes(self.read(8), "little")
        return pickle.loads(self.read(size)) if size else None

    # ------------------------------------------------------------ replying
    def reply(self, ok: bool, value: Any, command: str) -> None:
        if ok and type(value) is tuple and len(value) == 2 and value[1] is None and not value[0]:
            ctrl = self.ctrl
            if ctrl is not None and SKIP_WAKEUPS:  # the hot path: nothing to pickle
                slot = ctrl[self.index]
                slot[_ROP] = 0
                self.signal_done()
                _fence()
                if slot[_MSLEEP]:  # the main process is blocking: wake it
                    os.write(self.fd, OP_OK)
                return
            self.signal_done()
            os.write(self.fd, OP_OK)
            return
        data = self.dump(ok, value, command)
        if self.ctrl is not None:
            self.ctrl[self.index, _ROP] = 1
        self.signal_done()
        self.sock.sendall(frame(OP_MESSAGE, data))

    def signal_done(self) -> None:
        if self.ctrl is not None:
            slot = self.ctrl[self.index]
            slot[_STAMP] = time.monotonic_ns()
            slot[_DONE] = self.seq

    def dump(self, ok: bool, value: Any, command: str) -> bytes:
        try:
            return _dumps_checked((ok, value), check=not ok)
        except Exception as exc:
            problem = exc
        if not ok and isinstance(value, EnvError) and value.original is not None:
            value.original = None  # the message and traceback text still say everything
            try:
                return _dumps_checked((ok, value), check=True)
            except Exception as exc:
                problem = exc
        if ok:
            error: BaseException = RuntimeError(
                f"worker {self.index}: the result of {command!r} cannot be sent to the main process "
                f"(pickling failed: {type(problem).__name__}: {problem})"
            )
        else:
            text = "".join(traceback.format_exception(type(value), value, value.__traceback__))
            error = RuntimeError(
                f"worker {self.index}: {command!r} failed with an exception that cannot be sent to "
                f"the main process ({type(problem).__name__}: {problem}):\n{text}"
            )
        return pickle.dumps((False, error), _PROTOCOL)

    # ------------------------------------------------------------ commands
    def attach(self) -> None:
        size = int.from_bytes(self.read(8), "little")
        msg, fds, _, _ = socket.recv_fds(self.sock, size, 1)
        if len(msg) < size:
            msg += recv_exact(self.sock, size - len(msg))
        (obs_space, act_space, n, start, stop, nbytes, ctrl_off, num_workers, mask_off) = pickle.loads(msg)
        block = SharedBlock.attach(fds[0], nbytes)
        buffers = StepBuffers(obs_space, act_space, n, block.buffer)
        self.group.attach(buffers.rows(start, stop), ship_objects=True)
        self.ctrl = np.frombuffer(block.buffer, np.int64, num_workers * _SLOT, ctrl_off).reshape(num_workers, _SLOT)
        self.mask = np.frombuffer(block.buffer, np.bool_, stop - start, mask_off + start)
        self.seq = int(self.ctrl[self.index, _CMD])

    def serve(self) -> None:
        group = self.group
        while True:
            op = self.wait_command()
            if self.ctrl is not None:
                self.seq = int(self.ctrl[self.index, _CMD])
            command = "step"
            try:
                if op == OP_STEP:
                    result: Any = group.step(None)
                elif op == OP_MASKED_STEP:
                    result = group.step(np.flatnonzero(self.mask))
                elif op == OP_MESSAGE:
                    self.take_op()
                    message = self.read_message()
                    command, payload = message[0], message[1]
                    if len(message) > 2:  # objects of custom action leaves
                        group.buffers.actions.set_objects(message[2])
                    result = group.handle(command, payload)
                elif op == OP_ATTACH:
                    command = "attach"
                    self.op_read = False
                    self.attach()
                    result = None
                else:
                    raise RuntimeError(f"worker {self.index}: unknown operation {op!r}")
            except Exception as exc:
                self.reply(False, exc, command)
                continue
            self.reply(True, result, command)
            if command == "close":
                return


def _dumps_checked(obj: Any, check: bool) -> bytes:
    """Pickle ``obj`` (cloudpickle when plain pickle fails); ``check`` also tries to load it."""
    try:
        data = pickle.dumps(obj, _PROTOCOL)
    except Exception:
        data = cloudpickle.dumps(obj, _PROTOCOL)
    if check:
        pickle.loads(data)
    return data


def _worker_main(
    index: int,
    sock: socket.socket,
    env_fns: Sequence[Callable[[], Any] | bytes],
    start: int,
    autoreset_mode: AutoresetMode,
    spin: tuple[float, float],
    parent_pid: int,
    close_fds: Sequence[int],
) -> None:
    """Entry point of a worker process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the caller's to handle, once
    for var in THREAD_VARS:  # for libraries the envs import from now on
        os.environ.setdefault(var, "1")
    for fd in close_fds:  # with fork: other workers' sockets, so their EOF stays meaningful
        try:
            os.close(fd)
        except OSError:
            pass
    worker = _Worker(index, sock, spin, parent_pid)
    try:
        try:
            fns = [pickle.loads(fn) if isinstance(fn, bytes) else fn for fn in env_fns]
            worker.group = EnvGroup(fns, start, index, autoreset_mode)
            descriptions = worker.group.describe()
        except Exception as exc:
            worker.reply(False, exc, "env_fn()")
            return
        worker.reply(True, descriptions, "describe")
        worker.serve()
    except (SystemExit, KeyboardInterrupt, BrokenPipeError, ConnectionResetError, EOFError):
        pass
    finally:
        if worker.group is not None:
            worker.group.close()
        sock.close()


# ==================================================================== main side
_LIVE: weakref.WeakSet[ProcessTransport] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:  # before multiprocessing joins non-daemon workers that wait for us
    for transport in list(_LIVE):
        try:
            transport.close(1.0)
        except Exception:
            pass


class ProcessTransport(Transport):
    """Runs each env group in its own process; see the module docstring for the protocol."""

    name = "process"

    def __init__(
        self,
        context: str | multiprocessing.context.BaseContext | None = None,
        daemon: bool = True,
        spin_us: float | None = None,
        yield_us: float | None = None,
        inline: bool = False,
    ) -> None:
        if context is None or isinstance(context, str):
            self.ctx = multiprocessing.get_context(context)
        else:
            self.ctx = context
        self.start_method = self.ctx.get_start_method()
        self.daemon = daemon
        self.spin_us = spin_us
        self.yield_s = DEFAULT_YIELD_US * 1e-6 if yield_us is None else max(0.0, float(yield_us)) * 1e-6
        self.inline = bool(inline)
        self.processes: list[Any] = []
        self.socks: list[socket.socket] = []
        self.fds: list[int] = []
        self.sentinels: list[int] = []
        self.partition: list[tuple[int, int]] = []
        self.num_workers = 0
        self._block: SharedBlock | None = None
        self._buffers: StepBuffers | None = None
        self._ctrl: np.ndarray | None = None
        self._mask: np.ndarray | None = None
        self._seq: list[int] = []
        self._waiting: set[int] = set()  # workers with a reply to fetch
        self._raw: set[int] = set()  # outstanding command sent outside the counters (describe, attach)
        self._op_read: set[int] = set()  # a message reply whose op byte ready() already read
        self._dead: dict[int, int | None] = {}
        self._action_objects = False
        self._pollers: dict[tuple[int, ...], tuple[Any, dict[int, int]]] = {}
        self._next_death_check = 0.0  # see ready(): deaths among workers others keep outpacing
        self._closed = False
        self.main_spin = self.worker_spin = 0.0
        # inline mode: the last group runs in this process (an EnvGroup stepped in submit)
        self.remote = 0  # worker processes: num_workers, or num_workers - 1 with inline
        self._inline_w = -1
        self._inline_group: EnvGroup | None = None
        self._inline_reply: tuple[bool, Any] | None = None

    # ------------------------------------------------------------ start
    def start(
        self,
        env_fns: Sequence[Callable[[], Any]],
        partition: list[tuple[int, int]],
        autoreset_mode: AutoresetMode,
    ) -> list[EnvDescription]:
        self.partition = partition
        self.num_workers = len(partition)
        self.remote = self.num_workers - 1 if self.inline else self.num_workers
        self._inline_w = self.remote if self.inline else -1
        if self.spin_us is None:
            self.main_spin, self.worker_spin = default_spin(self.remote)
        else:
            self.main_spin = self.worker_spin = max(0.0, float(self.spin_us)) * 1e-6
        payloads = self._env_fn_payloads(env_fns)  # fails before any worker starts
        self._start_args = (list(env_fns), payloads, autoreset_mode)  # kept for restart()
        self._seq = [0] * self.num_workers
        _LIVE.add(self)
        try:
            for w, (start, stop) in enumerate(partition[: self.remote]):
                self._start_worker(w, start, stop, env_fns, payloads, autoreset_mode)
            descriptions: list[EnvDescription] = []
            errors: list[BaseException] = []
            for w in range(self.remote):
                self._waiting.add(w)
                try:
                    descriptions.extend(self.fetch(w))
                except BaseException as exc:  # noqa: PERF203 - keep reading the others
                    errors.append(exc)
            if self.inline and not errors:  # built while the workers build theirs
                descriptions.extend(self._build_inline())
            if errors:
                raise errors[0]
        except BaseException:
            self.close(1.0)
            raise
        return descriptions

    def _build_inline(self) -> list[EnvDescription]:
        env_fns, _, autoreset_mode = self._start_args
        start, stop = self.partition[self._inline_w]
        self._inline_group = EnvGroup(env_fns[start:stop], start, self._inline_w, autoreset_mode)
        return self._inline_group.describe()

    def _env_fn_payloads(self, env_fns: Sequence[Callable[[], Any]]) -> list[bytes] | None:
        if self.start_method == "fork":
            return None  # the children inherit the env_fns as they are
        if self.inline:  # the inline group's env_fns never leave this process
            env_fns = list(env_fns)[: self.partition[-1][0]]
        cache: dict[int, bytes] = {}
        out = []
        for i, fn in enumerate(env_fns):
            data = cache.get(id(fn))
            if data is None:
                try:
                    data = cloudpickle.dumps(fn, _PROTOCOL)
                except Exception as exc:
                    raise EnvFnPicklingError(
                        f"env_fns[{i}] ({fn!r:.80}) cannot be pickled, which the "
                        f"{self.start_method!r} start method needs to send it to a worker: "
                        f"{type(exc).__name__}: {exc}. Use context='fork', or build the env from "
                        "picklable parts (a module-level function, functools.partial, an env id)."
                    ) from exc
                cache[id(fn)] = data
            out.append(data)
        return out

    def _start_worker(self, w, start, stop, env_fns, payloads, autoreset_mode, replace=False) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if payloads is None:
                fns: Any = list(env_fns[start:stop])
                close_fds = list(self.fds)
            else:
                fns = payloads[start:stop]
                close_fds = []
            process = self.ctx.Process(
                target=_worker_main,
                args=(
                    w, child, fns, start, autoreset_mode, (self.worker_spin, self.yield_s),
                    os.getpid(), close_fds,
                ),
                name=f"vecenv-worker-{w}",
                daemon=self.daemon,
            )
            process.start()
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        parent.setblocking(False)
        if replace:
            old = self.processes[w]
            self.processes[w], self.socks[w] = process, parent
            self.fds[w], self.sentinels[w] = parent.fileno(), process.sentinel
            self._raw.add(w)
            self._op_read.discard(w)
            try:
                old.close()
            except ValueError:
                pass
            return
        self._raw.add(w)
        self.processes.append(process)
        self.socks.append(parent)
        self.fds.append(parent.fileno())
        self.sentinels.append(process.sentinel)

    # ------------------------------------------------------------ buffers
    def allocate(
        self, observation_space: spaces.Space, action_space: spaces.Space, num_envs: int
    ) -> StepBuffers:
        nbytes = StepBuffers.nbytes(observation_space, action_space, num_envs)
        ctrl_off = _aligned(nbytes)
        mask_off = ctrl_off + self.num_workers * _SLOT * 8
        size = _aligned(mask_off + num_envs)
        self._block = SharedBlock(size)
        buf = self._block.buffer
        self._buffers = StepBuffers(observation_space, action_space, num_envs, buf)
        self._ctrl = np.frombuffer(buf, np.int64, self.num_workers * _SLOT, ctrl_off).reshape(
            self.num_workers, _SLOT
        )
        self._mask = np.frombuffer(buf, np.bool_, num_envs, mask_off)
        self._layout = (observation_space, action_space, num_envs, size, ctrl_off, mask_off)
        self._action_objects = self._buffers.actions.has_objects
        return self._buffers

    def attach(self, buffers: StepBuffers) -> None:
        if buffers is not self._buffers:
            raise ValueError("ProcessTransport.attach needs the buffers its allocate() returned")
        for w in range(self.remote):
            self._send_attach(w)
        if self._inline_group is not None:
            start, stop = self.partition[self._inline_w]
            self._inline_group.attach(buffers.rows(start, stop))
        for w in range(self.remote):
            self.fetch(w)
        # the descriptor stays open until close(): a restarted worker maps the same block

    def _send_attach(self, w: int) -> None:
        obs_space, act_space, n, size, ctrl_off, mask_off = self._layout
        start, stop = self.partition[w]
        data = cloudpickle.dumps(
            (obs_space, act_space, n, start, stop, size, ctrl_off, self.num_workers, mask_off),
            _PROTOCOL,
        )
        self._write(w, OP_ATTACH + len(data).to_bytes(8, "little"))
        self._send_fds(w, data, self._block.fd)
        self._waiting.add(w)
        self._raw.add(w)

    # ------------------------------------------------------------ failures
    can_end_workers = True

    def terminate(self, worker: int) -> None:
        """Kill ``worker`` (SIGKILL: a hung env may ignore anything gentler).

        The inline group cannot be ended (it runs in this process); its reply is always ready, so
        the engine never finds it overdue.
        """
        if worker == self._inline_w:
            self._waiting.discard(worker)
            return
        process = self.processes[worker]
        if process.exitcode is None:
            process.kill()
            process.join(2.0)
        self._waiting.discard(worker)
        self._mark_dead(worker)

    def restart(self, worker: int) -> None:
        """Start a new worker process for ``worker``'s envs, mapped onto the same rows."""
        if worker == self._inline_w:  # rebuild the inline group
            old, self._inline_group = self._inline_group, None
            self._inline_reply = None
            self._waiting.discard(worker)
            if old is not None:
                try:
                    old.close()
                except Exception:
                    pass
            self._build_inline()
            start, stop = self.partition[worker]
            self._inline_group.attach(self._buffers.rows(start, stop))
            return
        self.terminate(worker)
        env_fns, payloads, autoreset_mode = self._start_args
        old_sock = self.socks[worker]
        start, stop = self.partition[worker]
        self._start_worker(worker, start, stop, env_fns, payloads, autoreset_mode, replace=True)
        old_sock.close()
        self._dead.pop(worker, None)
        self._pollers.clear()
        self._waiting.add(worker)
        self.fetch(worker)  # the new group's description
        self._send_attach(worker)
        self.fetch(worker)

    def _send_fds(self, w: int, data: bytes, fd: int) -> None:
        sock = self.socks[w]
        sock.setblocking(True)
        try:
            sent = socket.send_fds(sock, [data], [fd])
            if sent < len(data):
                sock.sendall(data[sent:])
        finally:
            sock.setblocking(False)

    # ------------------------------------------------------------ commands
    def submit(self, worker: int, command: str, payload: tuple) -> None:
        self._waiting.add(worker)
        if worker == self._inline_w:  # runs now, in this process (after the remote workers got theirs)
            try:
                self._inline_reply = (True, self._inline_group.handle(command, payload))
            except Exception as exc:  # delivered by fetch, like a remote error
                self._inline_reply = (False, exc)
            return
        self._raw.discard(worker)
        ctrl = self._ctrl
        if ctrl is not None:
            seq = self._seq[worker] + 1
            self._seq[worker] = seq
        if worker in self._dead:
            return  # fetch reports it
        if command == "step" and ctrl is not None and not self._action_objects:
            ids = payload[0]
            if ids is None:
                message = OP_STEP
            else:
                start, stop = self.partition[worker]
                mask = self._mask[start:stop]
                mask[:] = False
                mask[ids] = True
                message = OP_MASKED_STEP
            if SKIP_WAKEUPS:
                ctrl[worker, _OP] = message[0]
                ctrl[worker, _CMD] = seq
                _fence()
                if ctrl[worker, _WSLEEP]:  # the worker is blocking (or about to): wake it
                    try:
                        os.write(self.fds[worker], OP_WAKE)
                    except BlockingIOError:  # its buffer is full of wake-ups already
                        pass
                    except OSError:
                        self._mark_dead(worker)
                return
            ctrl[worker, _CMD] = seq
        else:
            if ctrl is not None:
                ctrl[worker, _OP] = OP_MESSAGE[0]
                ctrl[worker, _CMD] = seq
            body: tuple = (command, payload)
            if command == "step" and self._action_objects:
                start, stop = self.partition[worker]
                body = (command, payload, self._buffers.actions.rows(start, stop).get_objects())
            message = frame(OP_MESSAGE, cloudpickle.dumps(body, _PROTOCOL))
        try:
            self._write(worker, message)
        except OSError:
            self._mark_dead(worker)

    def ready(self, workers: Collection[int], timeout: float | None = None) -> list[int]:
        done = self._done(workers)
        if done and len(done) < len(workers):
            # Async batches: while other workers keep the batches full, a dead worker would never
            # be waited on, and its envs never return. Look at the sentinels now and then.
            now = time.monotonic()
            if now >= self._next_death_check:
                self._next_death_check = now + _DEATH_CHECK_S
                if self._check_sentinels([w for w in workers if w not in done]):
                    done = self._done(workers)
        if done or timeout == 0:
            return done
        if self.main_spin > 0.0 and self._ctrl is not None:
            end = time.perf_counter() + (self.main_spin if timeout is None else min(self.main_spin, timeout))
            while time.perf_counter() < end:
                done = self._done(workers)
                if done:
                    return done
        if self.yield_s > 0.0 and self._ctrl is not None:
            found: list[int] = []

            def finished() -> bool:
                found.extend(self._done(workers))
                return bool(found)

            if _yield_until(finished, self.yield_s if timeout is None else min(self.yield_s, timeout)):
                return found
        deadline = None if timeout is None else time.monotonic() + timeout
        key = tuple(workers)
        entry = self._pollers.get(key)
        if entry is None:
            poller = select.poll()
            owner: dict[int, int] = {}
            for w in workers:
                if w in self._dead or w == self._inline_w:
                    continue
                for fd in (self.fds[w], self.sentinels[w]):
                    poller.register(fd, select.POLLIN)
                    owner[fd] = w
            entry = self._pollers[key] = (poller, owner)
            if len(self._pollers) > 64:
                self._pollers.clear()
        poller, owner = entry
        ctrl = self._ctrl
        if ctrl is not None and SKIP_WAKEUPS:
            return self._sleep(workers, poller, owner, deadline)
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            events = poller.poll(None if left is None else int(left * 1000 + 0.999))
            ctrl = self._ctrl
            for fd, ev in events:
                w = owner[fd]
                if ctrl is not None and ctrl[w, _DONE] == self._seq[w]:
                    continue  # a complete reply, even if the worker died after sending it
                if fd == self.sentinels[w] or ev & (select.POLLHUP | select.POLLERR):
                    if ctrl is not None or not self._readable(w, hangup=False):
                        self._mark_dead(w)
            done = self._done(workers)
            if done or (deadline is not None and time.monotonic() >= deadline):
                return done

    def _sleep(self, workers: Collection[int], poller: Any, owner: dict[int, int], deadline: float | None) -> list[int]:
        """Block for a reply: declare it to the workers, re-check, then bounded polls.

        A worker writes its reply byte only when it sees this flag; a wake-up lost to store-load
        reordering costs at most one bounded nap. Stale reply bytes are drained here.
        """
        ctrl = self._ctrl
        seq = self._seq
        flagged = [w for w in owner.values() if w not in self._dead]
        for w in flagged:
            ctrl[w, _MSLEEP] = 1
        _fence()
        try:
            nap = 1
            while True:
                done = self._done(workers)
                if done:
                    return done
                ms = nap
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return done
                    ms = min(ms, int(left * 1000 + 0.999))
                events = poller.poll(ms)
                if not events:
                    nap = min(2 * nap, _MAX_NAP_MS)
                for fd, _ in events:
                    w = owner[fd]
                    finished = ctrl[w, _DONE] == seq[w]
                    if fd == self.sentinels[w]:
                        if not finished:
                            self._mark_dead(w)
                        continue
                    if finished and ctrl[w, _ROP] != 0 or w in self._op_read:
                        continue  # the message is fetch's to read
                    try:
                        byte = os.read(fd, 1)
                    except BlockingIOError:
                        continue
                    except OSError:
                        byte = b""
                    if byte == OP_MESSAGE:
                        self._op_read.add(w)
                    elif not byte and not finished:
                        self._mark_dead(w)
        finally:
            for w in flagged:
                ctrl[w, _MSLEEP] = 0

    def _done(self, workers: Collection[int]) -> list[int]:
        ctrl = self._ctrl
        if ctrl is None:
            return [w for w in workers if w in self._dead or self._readable(w)]
        seq = self._seq
        iw = self._inline_w
        finished = ctrl[:, _DONE].tolist()  # one snapshot: cheaper than a numpy lookup per worker
        if iw >= 0:
            done = [
                w for w in workers
                if (self._inline_reply is not None if w == iw else finished[w] == seq[w] or w in self._dead)
            ]
        else:
            done = [w for w in workers if finished[w] == seq[w] or w in self._dead]
        if len(done) > 1:  # the inline group finished first, in submit
            done.sort(key=lambda w: -1 if w in self._dead or w == iw else int(ctrl[w, _STAMP]))
        return done

    def _readable(self, w: int, hangup: bool = True) -> bool:
        """Whether ``w``'s socket has data (or, with ``hangup``, is closed)."""
        poller = select.poll()
        poller.register(self.fds[w], select.POLLIN)
        events = poller.poll(0)
        return bool(events) and (hangup or not events[0][1] & select.POLLHUP)

    def fetch(self, worker: int) -> Any:
        self._waiting.discard(worker)
        if worker == self._inline_w:
            ok, value = self._inline_reply
            self._inline_reply = None
            if not ok:
                raise value
            return value
        ctrl = self._ctrl
        fast = SKIP_WAKEUPS and ctrl is not None and worker not in self._raw
        if fast and ctrl[worker, _DONE] == self._seq[worker] and ctrl[worker, _ROP] == 0:
            return ([], None)  # the hot path: the reply is all in shared memory
        if worker in self._dead and not self._readable(worker):
            raise self._died(worker)
        try:
            if worker in self._op_read:
                self._op_read.discard(worker)
                op = OP_MESSAGE
            else:
                op = self._read(worker, 1)
                while fast and op == OP_OK:  # stale wake-up bytes before the message
                    op = self._read(worker, 1)
            if op == OP_OK:
                return ([], None)
            if op != OP_MESSAGE:
                raise RuntimeError(f"worker {worker} sent an unknown reply {op!r}")
            size = int.from_bytes(self._read(worker, 8), "little")
            data = self._read(worker, size)
        except EOFError:
            self._mark_dead(worker)
            raise self._died(worker) from None
        try:
            ok, value = pickle.loads(data)
        except Exception as exc:
            raise VecEnvError(
                f"worker {worker}: its reply could not be unpickled in the main process: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if not ok:
            raise value
        return value

    # ------------------------------------------------------------ low-level I/O
    def _read(self, w: int, n: int) -> bytes:
        fd = self.fds[w]
        if n == 1:
            try:
                data = os.read(fd, 1)
            except BlockingIOError:
                data = None
            except ConnectionResetError:  # the worker died with data unread
                raise EOFError from None
            if data is not None:
                if not data:
                    raise EOFError
                return data
        buf = bytearray(n)
        view = memoryview(buf)
        sock = self.socks[w]
        pos = 0
        while pos < n:
            try:
                got = sock.recv_into(view[pos:], n - pos)
            except BlockingIOError:
                self._wait_io(w, select.POLLIN)
                continue
            except ConnectionResetError:
                raise EOFError from None
            if not got:
                raise EOFError
            pos += got
        return bytes(buf)

    def _write(self, w: int, data: bytes) -> None:
        fd = self.fds[w]
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                self._wait_io(w, select.POLLOUT)

    def _wait_io(self, w: int, event: int) -> None:
        """Block until the socket is ready for ``event``; ``EOFError`` if the worker died."""
        poller = select.poll()
        poller.register(self.fds[w], event)
        poller.register(self.sentinels[w], select.POLLIN)
        while True:
            events = dict(poller.poll())
            if self.fds[w] in events:
                return
            if self.sentinels[w] in events:
                self._mark_dead(w)
                raise (EOFError if event == select.POLLIN else BrokenPipeError)()

    def _check_sentinels(self, workers: list[int]) -> bool:
        """Mark the workers among ``workers`` whose process has ended; whether any had."""
        poller = select.poll()
        owner = {}
        for w in workers:
            if w not in self._dead and w != self._inline_w:
                poller.register(self.sentinels[w], select.POLLIN)
                owner[self.sentinels[w]] = w
        found = False
        for fd, _ in poller.poll(0) if owner else ():
            self._mark_dead(owner[fd])
            found = True
        return found

    def _mark_dead(self, w: int) -> None:
        if w not in self._dead:
            process = self.processes[w]
            process.join(1.0)
            self._dead[w] = process.exitcode
            self._pollers.clear()

    def _died(self, w: int) -> WorkerDiedError:
        start, stop = self.partition[w]
        return WorkerDiedError(w, list(range(start, stop)), self._dead.get(w))

    # ------------------------------------------------------------ closing
    def close(self, timeout: float | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        _LIVE.discard(self)
        if self._inline_group is not None:
            group, self._inline_group = self._inline_group, None
            self._inline_reply = None
            self._waiting.discard(self._inline_w)
            try:
                group.close()
            except Exception:
                pass
        budget = DEFAULT_CLOSE_TIMEOUT if timeout is None else max(0.0, float(timeout))
        deadline = time.monotonic() + budget
        alive = [w for w in range(len(self.processes)) if w not in self._dead]
        # a worker still busy with a command: let it finish (within the budget), drop the reply
        for w in alive:
            if w in self._waiting:
                try:
                    if self.ready([w], max(0.0, deadline - time.monotonic())):
                        self.fetch(w)
                except Exception:
                    pass
        asked = []
        for w in alive:
            if w in self._dead or w in self._waiting:
                continue
            try:
                self.submit(w, "close", ())
                asked.append(w)
            except Exception:
                pass
        for w in asked:
            try:
                if self.ready([w], max(0.0, deadline - time.monotonic())):
                    self.fetch(w)
            except Exception:
                pass
        for process in self.processes:
            process.join(max(0.0, deadline - time.monotonic()))
        for process in self.processes:
            if process.exitcode is None:
                process.terminate()
                process.join(1.0)
            if process.exitcode is None:
                process.kill()
                process.join(1.0)
        for sock in self.socks:
            sock.close()
        for process in self.processes:
            try:
                process.close()
            except ValueError:  # still running after SIGKILL: nothing more to do
                pass
        if self._block is not None:
            self._block.close_fd()
        self._pollers.clear()
        self._ctrl = self._mask = None
        self._waiting.clear()

    def __del__(self) -> None:
        try:
            self.close(1.0)
        except Exception:
            pass


def _aligned(pos: int) -> int:
    return (pos + _ALIGN - 1) // _ALIGN * _ALIGN


# ==================================================================== user-facing classes
class ProcessVectorEnv(VectorEnv):
    """Steps the envs in worker processes, several envs per worker, results in shared memory.

    Args:
        env_fns: one callable per env, each returning a fresh ``gymnasium.Env``.
        num_workers: worker processes (default: the usable cores, at most ``len(env_fns)``); the
            envs are split into contiguous groups, one group per worker.
        batch_size: for async batches: :meth:`recv` returns the first ``batch_size`` envs to finish
            (with ``infos["env_id"]``); default ``len(env_fns)`` (synchronous).
        context: multiprocessing start method (``"fork"``, ``"spawn"``, ``"forkserver"``) or
            context; default: the platform default. With spawn/forkserver the env_fns travel with
            cloudpickle.
        shared_memory: accepted for gymnasium compatibility; fixed-shape arrays always travel in
            shared memory and custom-space leaves are pickled, whatever its value.
        copy: return copies of the observations (default); ``False`` returns views into shared
            memory that stay valid until the next step/recv.
        daemon: make the workers daemonic (ended when the main process exits).
        observation_mode, autoreset_mode: as in gymnasium.
        on_error, max_restarts, restart_window, step_timeout: the failure policy (see
            :class:`vecenv.VectorEnv`).
        spin_us: how long each side busy-spins before yielding (default: 50 when every process
            has its own core, else 0).
        yield_us: how long each side then keeps calling ``sched_yield()`` (checking for its peer
            in between) before it blocks in the kernel (default 500): on a machine with fewer
            cores than processes this hands the core over without a wake-up.
        inline: step the last env group in this process, during ``step`` itself, while the worker
            processes step theirs (``num_workers`` still counts env groups, so ``num_workers=2,
            inline=True`` is one worker process plus this one). Faster for cheap envs on few
            cores; the inline envs lose crash isolation (a segfault there ends the caller) and
            ``step_timeout`` cannot end them. Default ``False``.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        *,
        num_workers: int | None = None,
        batch_size: int | None = None,
        context: str | multiprocessing.context.BaseContext | None = None,
        shared_memory: bool = True,
        copy: bool = True,
        daemon: bool = True,
        observation_mode: str | tuple[spaces.Space, spaces.Space] = "same",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        on_error: str = "raise",
        max_restarts: int = 3,
        restart_window: float = 60.0,
        step_timeout: float | None = None,
        spin_us: float | None = None,
        yield_us: float | None = None,
        inline: bool = False,
    ) -> None:
        self.shared_memory = shared_memory
        self.context = context
        self.daemon = daemon
        if num_workers is None:
            try:
                count = len(env_fns)
            except TypeError:
                count = 1
            num_workers = max(1, min(usable_cores(), count))
        super().__init__(
            env_fns,
            ProcessTransport(context, daemon, spin_us=spin_us, yield_us=yield_us, inline=inline),
            num_workers=num_workers,
            batch_size=batch_size,
            copy=copy,
            observation_mode=observation_mode,
            autoreset_mode=autoreset_mode,
            on_error=on_error,
            max_restarts=max_restarts,
            restart_window=restart_window,
            step_timeout=step_timeout,
        )

    @property
    def processes(self) -> list[Any]:
        """The worker processes (``multiprocessing.Process``), one per env group (but the inline one)."""
        return list(self._transport.processes)


class AsyncVectorEnv(ProcessVectorEnv):
    """Drop-in for ``gymnasium.vector.AsyncVectorEnv``: same constructor, same behaviour.

    Like gymnasium it runs one env per worker process unless ``num_workers`` is given; pass
    ``num_workers`` (e.g. the number of cores) to group envs and pay one round trip per worker.
    gymnasium's custom ``worker`` function is not supported.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        shared_memory: bool = True,
        copy: bool = True,
        context: str | None = None,
        daemon: bool = True,
        worker: Callable | None = None,
        observation_mode: str | tuple[spaces.Space, spaces.Space] = "same",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        *,
        num_workers: int | None = None,
        batch_size: int | None = None,
        on_error: str = "raise",
        max_restarts: int = 3,
        restart_window: float = 60.0,
        step_timeout: float | None = None,
        spin_us: float | None = None,
        yield_us: float | None = None,
    ) -> None:
        if worker is not None:
            raise NotImplementedError(
                "AsyncVectorEnv(worker=...): vecenv runs its own worker loop; custom worker "
                "functions are not supported"
            )
        if num_workers is None:
            try:
                num_workers = max(1, len(env_fns))
            except TypeError:
                num_workers = 1
        super().__init__(
            env_fns,
            num_workers=num_workers,
            batch_size=batch_size,
            context=context,
            shared_memory=shared_memory,
            copy=copy,
            daemon=daemon,
            observation_mode=observation_mode,
            autoreset_mode=autoreset_mode,
            on_error=on_error,
            max_restarts=max_restarts,
            restart_window=restart_window,
            step_timeout=step_timeout,
            spin_us=spin_us,
            yield_us=yield_us,
        )

