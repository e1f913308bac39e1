"""The control block: one row of shared counters per worker, and the memory fence.

The caller *posts* a command by storing its operation and bumping the worker's command counter
(that store is the commit point: before it nothing was sent, after it the command is out); the
worker *finishes* by storing the reply's kind and setting its done counter to the command's.
A command is outstanding while the two counters differ. How each side waits for the other's
counter, and wakes it, is :mod:`.handshake`.

Declaring sleep and then checking the peer's counter is a store followed by a load; x86 may let
the load pass the store, and both sides would miss each other (a lost wake-up). :func:`fence`
orders them.
"""

from __future__ import annotations

import platform
import threading
import time
from collections.abc import Collection

import numpy as np

from vecenv.system import usable_cores
from vecenv.transports.process.protocol import Reply, Sleep, Slot

__all__ = ["ControlBlock", "TSO", "default_spin", "fence"]

CMD, DONE, STAMP, OP, REPLY = Slot.CMD, Slot.DONE, Slot.STAMP, Slot.OP, Slot.REPLY
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


def default_spin(num_workers: int) -> tuple[float, float]:
    """``(caller, worker)`` busy-spin seconds: only when every process has a core of its own
    (a spinning waiter on a shared core holds the core its peer needs)."""
    if num_workers + 1 <= usable_cores():
        return 50e-6, 50e-6
    return 0.0, 0.0


class ControlBlock:
    """The counters of ``num_workers`` workers, over ``buffer`` at ``offset``, then one more row
    whose first 32 bits are the word that sleeping workers wait on (:mod:`.futex`)."""

    def __init__(self, buffer: memoryview, offset: int, num_workers: int) -> None:
        self.slots = np.frombuffer(buffer, np.int64, num_workers * Slot.SIZE, offset).reshape(num_workers, Slot.SIZE)
        self.bell_word = np.frombuffer(buffer, np.int32, 1, offset + self.slots.nbytes)

    @staticmethod
    def nbytes(num_workers: int) -> int:
        return (num_workers + 1) * Slot.SIZE * 8

    # ------------------------------------------------------------ caller side
    def post(self, w: int, op: int) -> None:
        """Hand worker ``w`` a command; the counter store is the commit point."""
        slot = self.slots[w]
        slot[OP] = op
        slot[CMD] = slot[CMD] + 1

    def outstanding(self, w: int) -> bool:
        slot = self.slots[w]
        return bool(slot[CMD] != slot[DONE])

    def finished(self, workers: Collection[int], dead: Collection[int]) -> list[int]:
        """Those of ``workers`` that are ``dead`` (first), then those whose last command is done,
        in the order they finished (one loop: this runs on every wait of every step)."""
        cmd, finished, stamp = self.slots[:, :3].T.tolist()  # CMD, DONE, STAMP: one snapshot
        done, ended = [], []
        for w in workers:
            if w in dead:
                ended.append(w)
            elif cmd[w] == finished[w]:
                done.append(w)
        if len(done) > 1:
            done.sort(key=stamp.__getitem__)
        return ended + done if ended else done

    def take(self, w: int, kind: int) -> bool:
        """Whether ``w``'s finished reply is of ``kind`` (a message waiting on the socket, infos
        in the block) and not yet taken; marks it taken."""
        slot = self.slots[w]
        if slot[REPLY] != kind:
            return False
        slot[REPLY] = Reply.IN_MEMORY
        return True

    def forget(self, w: int) -> None:
        """Drop whatever ``w`` was doing (it was ended): nothing is outstanding any more."""
        slot = self.slots[w]
        slot[DONE] = slot[CMD]
        slot[REPLY] = Reply.IN_MEMORY
        slot[Slot.WORKER_SLEEPS] = 0

    # ------------------------------------------------------------ worker side
    def finish(self, w: int, seq: int, kind: int) -> None:
        slot = self.slots[w]
        slot[REPLY] = kind
        slot[STAMP] = time.monotonic_ns()
        slot[DONE] = seq

    def caller_waits_on(self, w: int) -> bool:
        """After ``w`` finished (and a fence): whether the caller sleeps and wants a wake-up from
        ``w`` now: it waits for any reply (``CALLER_SLEEPS`` 1), or for all of the workers it
        marked 2 and every one of them is done (the last to finish wakes it, once a batch)."""
        flag = self.slots[w, Slot.CALLER_SLEEPS]
        if flag != Sleep.ALL:
            return bool(flag)
        rows = self.slots[self.slots[:, Slot.CALLER_SLEEPS] == Sleep.ALL]
        return bool((rows[:, CMD] == rows[:, DONE]).all())
