"""The thread backend's queue of work no thread took yet, and which group a thread takes next.

Groups are queued in the order their commands were submitted. A thread takes the first one it
may join: a command run whole leaves the queue when taken; a step shared env by env
(:class:`~vecenv.transports.work.Share`) stays queued until its envs are all taken, so every
free thread can join it. With async batches your thread takes only what
:class:`~vecenv.transports.pace.Pace` says is quick, and the steps it times start and stop here.
All of it runs under the transport's lock.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from vecenv.transports.pace import Pace
from vecenv.transports.work import Share
from vecenv.worker.commands import GivenStep, Step

__all__ = ["Pending"]


class Pending(deque[int]):
    """Groups with work no thread took yet, in the order queued.

    ``commands``, ``shares``, ``shared``: the transport's lists, by group (each group's current
    command, the envs of its shared step not yet taken, whether its command is shared).
    ``pace``: with async batches, the step times your thread picks by; else None.
    """

    def __init__(self, commands: list[Any], shares: list[Share], shared: list[bool],
                 pace: Pace | None) -> None:
        super().__init__()
        self.commands, self.shares, self.shared, self.pace = commands, shares, shared, pace

    def next_for(self, caller: bool) -> int:
        """The group a thread takes next, -1 if none: the first it may join (a shared step whose
        envs are all taken leaves the queue); for your thread, with async batches, the first
        :meth:`for_caller` allows."""
        if caller and self.pace is not None:
            return self.for_caller()
        while self:
            w = self[0]
            if self._open(w):
                return w
            self.popleft()  # a shared step whose envs are all taken
        return -1

    def taken(self, w: int) -> None:
        """A thread took group ``w``: a command run whole leaves the queue; a timed step starts."""
        if self.pace is not None and self._timed(w):
            self.pace.start(w)
        if not self.shares[w]:
            self.remove(w)  # run whole by this thread

    def done(self, w: int) -> None:
        """Group ``w``'s command is done: it leaves the queue if still listed (a shared step, or
        a claim cut short), and a timed step stops."""
        self.discard(w)
        if self.pace is not None and self._timed(w):
            self.pace.stop(w)

    def discard(self, w: int) -> None:
        """Group ``w`` leaves the queue if it is in it."""
        if w in self:
            self.remove(w)

    def for_caller(self) -> int:
        """With async batches, the first queued group your thread may take: any command but a
        step, and a step only where it is known to be quick; -1 if none."""
        pace = self.pace
        assert pace is not None
        for w in self:
            if self._open(w) and (not self._timed(w) or pace.quick(w)):
                return w
        return -1

    def caller_may_take(self) -> bool:
        """Whether something queued is for your thread to take."""
        return bool(self) if self.pace is None else self.for_caller() >= 0

    def _open(self, w: int) -> bool:
        """Whether a thread may still join group ``w``'s command."""
        return not self.shared[w] or bool(self.shares[w])

    def _timed(self, w: int) -> bool:
        """Whether group ``w``'s command is a step :class:`Pace` times (one thread's, whole)."""
        kind = type(self.commands[w])
        return (kind is Step or kind is GivenStep) and not self.shared[w]
