"""The control block: one row of shared counters per worker, the bell that sleeping workers wait
on, and the memory fence.

The caller *posts* a command by storing its operation and bumping the worker's command counter
(that store is the commit point: before it nothing was sent, after it the command is out); the
worker *finishes* by storing the reply's kind and setting its done counter to the command's.
A command is outstanding while the two counters differ. How each side waits for the other's
counter, and wakes it, is :mod:`.handshake`.

Declaring sleep and then checking the peer's counter is a store followed by a load; x86 may let
the load pass the store, and both sides would miss each other (a lost wake-up). :func:`fence`
orders them.

The bell is one word of the block that every sleeping worker waits on (a Linux futex). The
caller posts a command to each worker by storing counters, then rings the bell once: one
``futex(FUTEX_WAKE)`` system call wakes every worker asleep on the word, however many there are,
where a wake-up byte per worker would cost the caller a system call per worker. A worker sleeps
on the word with the value it read before its last look at its command counter::

    worker                                   caller
    ------                                   ------
    declare SLEEPS, fence()                  store each worker's command counter
    seen = word                              fence()
    command counter moved? -> run it         any worker declared SLEEPS? (or stores not in order)
    futex_wait(word, seen, nap)                word += 1; futex_wake(word, all)

A worker that read the old command counter read the old word too (stores are seen in order, and
the worker reads the word first), so its wait either sees the word already moved and returns at
once, or is asleep when the wake comes. Naps remain the backstop, as with wake-up bytes.

The caller sleeps the same way on a word of its own (the *caller's bell*), which any worker may
ring: a ring adds one to the word and wakes the caller in one atomic system call
(``FUTEX_WAKE_OP``), so rings of workers racing each other are never lost, and the caller
sleeps on one word instead of polling a socket and a process handle per worker (between naps it
looks at the handles for a death). Linux only: elsewhere, and with the portable mechanism, each
side wakes the other with a byte on its socket (:mod:`.handshake`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
import sys
import threading
import time
from collections.abc import Collection

import numpy as np

from vecenv.system import usable_cores
from vecenv.transports.process.protocol import Field, Reply, Sleep

__all__ = ["MANY_CORES", "Bell", "ControlBlock", "TSO", "bell_available", "default_spin", "default_workers", "fence",
           "spins"]

CMD, DONE, STAMP, OP, REPLY = Field.CMD, Field.DONE, Field.STAMP, Field.OP, Field.REPLY
#: stores are seen in program order (x86 TSO): a peer that spins needs no wake-up byte; elsewhere
#: every command and reply keeps its byte, whose system calls order the memory
TSO = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686", "x86")


def fence() -> None:
    """A full memory barrier: orders every earlier store before every later load.

    Acquiring a lock is a locked (atomic) instruction. The lock is a fresh one each time, so an
    interruption can never leave a lock held that another call, thread or forked child would
    then wait on forever.
    """
    threading.Lock().acquire()


def spins(num_workers: int, cores: int) -> bool:
    """Whether waits spin by default: only when every process (``num_workers`` workers and the
    caller) has a core of its own (a spinning waiter on a shared core holds the core its peer needs)."""
    return num_workers + 1 <= cores


#: above this many usable cores, a default layout leaves the caller a core of its own
MANY_CORES = 8


def default_workers(num_envs: int, cores: int, *, caller_steps: bool = False, batch_size: int | None = None) -> int:
    """Env groups a layout gets when ``num_workers`` is not given: a group per usable core, at most
    ``num_envs``. Worker processes leave the caller a core (cores − 1) on more than
    :data:`MANY_CORES` cores, so that waits can spin (:func:`spins`), and with async batches (a
    ``batch_size`` below ``num_envs``), whose caller computes the next actions while the workers
    step (docs/process.md, "Constructor" and "Async batches: when they pay off", gives the
    measurements). A layout whose ``caller_steps`` a group itself (inline, threads) keeps a group
    per core."""
    batches = batch_size is not None and batch_size < num_envs
    keep = 1 if (cores > MANY_CORES or batches) and not caller_steps else 0
    return max(1, min(num_envs, cores - keep))


def default_spin(num_workers: int) -> tuple[float, float]:
    """``(caller, worker)`` busy-spin seconds (:func:`spins`)."""
    if spins(num_workers, usable_cores()):
        return 50e-6, 50e-6
    return 0.0, 0.0


class ControlBlock:
    """The counters of ``num_workers`` workers, over ``buffer`` at ``offset``, then a row the
    caller writes (the workers' bell, the count it wants) and one the workers write (the
    caller's bell), so that neither side's stores land on a cache line the other writes."""

    def __init__(self, buffer: memoryview, offset: int, num_workers: int) -> None:
        self.rows = np.frombuffer(buffer, np.int64, num_workers * Field.SIZE, offset).reshape(num_workers, Field.SIZE)
        #: each field's column over every worker (views, for the reads and writes of every step)
        self.columns = tuple(self.rows[:, field] for field in range(Field.SIZE))
        after = offset + self.rows.nbytes
        #: the word sleeping workers wait on
        self.bell_word = np.frombuffer(buffer, np.int32, 1, after)
        #: a caller asleep for envs published one by one wants a wake-up once every row's
        #: ``PUBLISHED`` adds up to this (:data:`Sleep.COUNT`)
        self.want = np.frombuffer(buffer, np.int64, 1, after + 8)
        #: the word a sleeping caller waits on
        self.caller_word = np.frombuffer(buffer, np.int32, 1, after + Field.SIZE * 8)

    @staticmethod
    def nbytes(num_workers: int) -> int:
        return (num_workers + 2) * Field.SIZE * 8

    # ------------------------------------------------------------ caller side
    def post(self, w: int, op: int) -> None:
        """Hand worker ``w`` a command; the counter store is the commit point."""
        row = self.rows[w]
        row[OP] = op
        row[CMD] = row[CMD] + 1

    def outstanding(self, w: int) -> bool:
        row = self.rows[w]
        return bool(row[CMD] != row[DONE])

    def finished(self, workers: Collection[int], dead: Collection[int], every: bool = False) -> list[int]:
        """Those of ``workers`` that are ``dead`` (first), then those whose last command is done,
        in the order they finished (one loop: this runs on every wait of every step). ``every``:
        nothing until all are done or one is dead (then in no particular order)."""
        if every and not dead and len(workers) == len(self.rows):  # a whole step: one comparison
            return list(workers) if self.columns[CMD].tolist() == self.columns[DONE].tolist() else []
        cmd, finished, stamp = self.rows[:, :3].T.tolist()  # CMD, DONE, STAMP: one snapshot
        done, ended = [], []
        for w in workers:
            if w in dead:
                ended.append(w)
            elif cmd[w] == finished[w]:
                done.append(w)
        if every and not ended and len(done) < len(workers):
            return []
        if len(done) > 1:
            done.sort(key=stamp.__getitem__)
        return ended + done if ended else done

    def take(self, w: int, kind: int) -> bool:
        """Whether ``w``'s finished reply is of ``kind`` (a message waiting on the socket, infos
        in the block) and not yet taken; marks it taken."""
        row = self.rows[w]
        if row[REPLY] != kind:
            return False
        row[REPLY] = Reply.IN_MEMORY
        return True

    def drop(self, w: int) -> None:
        """Drop whatever ``w`` was doing (it was ended): nothing is outstanding any more."""
        row = self.rows[w]
        row[DONE] = row[CMD]
        row[REPLY] = Reply.IN_MEMORY
        row[Field.WORKER_SLEEPS] = 0

    # ------------------------------------------------------------ worker side
    def finish(self, w: int, seq: int, kind: int) -> None:
        row = self.rows[w]
        row[REPLY] = kind
        row[STAMP] = time.monotonic_ns()
        row[DONE] = seq

    def published(self) -> int:
        """Envs published so far, every worker's count summed."""
        return int(self.columns[Field.PUBLISHED].sum())

    def caller_waits_for_count(self, w: int) -> bool:
        """After ``w`` published an env (and a fence): whether the caller sleeps and wants a
        wake-up now (for any reply, or for as many envs as have been published now)."""
        flag = self.rows[w, Field.CALLER_SLEEPS]
        if flag == Sleep.COUNT:
            return self.published() >= self.want[0]
        return flag == Sleep.ANY

    def caller_waits_on(self, w: int) -> bool:
        """After ``w`` finished (and a fence): whether the caller sleeps and wants a wake-up from
        ``w`` now: it waits for any reply (``CALLER_SLEEPS`` 1), or for all of the workers it
        marked 2 and every one of them is done (the last to finish wakes it, once a batch)."""
        flag = self.rows[w, Field.CALLER_SLEEPS]
        if flag != Sleep.ALL:
            return bool(flag)
        rows = self.rows[self.columns[Field.CALLER_SLEEPS] == Sleep.ALL]
        return bool((rows[:, CMD] == rows[:, DONE]).all())


# ------------------------------------------------------------ the bell (Linux futex)
#: the futex system call's number per machine (Linux's unistd tables)
_SYSCALL = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98, "i686": 240, "i386": 240,
            "riscv64": 98, "ppc64le": 221, "s390x": 238}
_EVERYONE = 0x7FFFFFFF
_WAIT, _WAKE, _ALL, _ZERO = ctypes.c_int(0), ctypes.c_int(1), ctypes.c_int(_EVERYONE), ctypes.c_int(0)
#: FUTEX_WAKE_OP, and its operation "add 1 to the second word" (FUTEX_OP_ADD, argument 1; the
#: comparison's second wake is of nobody)
_WAKE_OP, _ADD_ONE, _ONE = ctypes.c_int(5), ctypes.c_int((1 << 28) | (1 << 12)), ctypes.c_int(1)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux") or platform.machine().lower() not in _SYSCALL:
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    except OSError:
        return None


_LIBC = _libc()
_NUMBER = ctypes.c_long(_SYSCALL.get(platform.machine().lower(), -1))


def bell_available() -> bool:
    """Whether futexes can be used here (Linux, a known machine, a C library)."""
    return _LIBC is not None


class Bell:
    """A bell: the shared int32 ``word`` (a 1-element array over the shared block), rung and
    waited on. The workers' bell has one ringer (:meth:`ring` wakes every sleeper); the caller's
    has many (:meth:`ring_one`: an atomic add, one sleeper)."""

    def __init__(self, word: np.ndarray) -> None:
        if _LIBC is None:
            raise OSError("futexes are available on Linux only")
        self.word = word
        self._address = ctypes.c_void_p(word.ctypes.data)
        self._syscall = _LIBC.syscall

    def seen(self) -> int:
        """The word's value, read before the waiter's last look at its counter."""
        return int(self.word[0])

    def ring(self) -> None:
        """Move the word and wake every waiter (one system call)."""
        self.word[0] = (int(self.word[0]) + 1) & _EVERYONE
        self._syscall(_NUMBER, self._address, _WAKE, _ALL, None, None, _ZERO)

    def ring_one(self) -> None:
        """Add one to the word and wake one sleeper, atomically (rings from several processes
        at once each move the word)."""
        self._syscall(_NUMBER, self._address, _WAKE_OP, _ONE, None, self._address, _ADD_ONE)

    def wait(self, seen: int, timeout_ms: int) -> None:
        """Sleep until a ring, ``timeout_ms``, or at once if the word is no longer ``seen``."""
        ts = _Timespec(timeout_ms // 1000, (timeout_ms % 1000) * 1_000_000)
        self._syscall(_NUMBER, self._address, _WAIT, ctypes.c_int(seen), ctypes.byref(ts), None, _ZERO)
