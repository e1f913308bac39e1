"""The process transport's protocol: every code the caller and a worker exchange, each named once.

What travels, and where::

    caller                                   shared memory / socket              worker
    ------                                   ----------------------              ------
    Attach (typed, pickled) with the block's descriptor, in a Frame.ATTACH ----> maps the block
    a step:    row[OP] = Op.STEP or Op.MASKED_STEP (+ the step mask) ---------> steps in place
    a queue:   POSTED[i] += 1 per env, row[OP] = Op.QUEUE ---------------------> steps each env,
               <-------------- DONE[i] = POSTED[i] as each env is done            publishing it
    a command: row[OP] = Op.COMMAND, then a Frame.MESSAGE (pickled command) --> runs it
                          row[CMD] += 1 is the commit point of either
    a Wake.WORKER byte (or a ring of the bell), only if the worker sleeps -----> wakes
               <-------------- row[REPLY] = Reply.IN_MEMORY: all in shared memory
               <-------------- row[REPLY] = Reply.INFOS: infos in the info rows too
               <-------------- row[REPLY] = Reply.MESSAGE, then a Frame.MESSAGE
                               row[DONE] = row[CMD] finishes the command
               <-------------- a Wake.CALLER byte (or a ring of the caller's bell), only if
                               the caller declared it sleeps

A frame is its op byte, an 8-byte little-endian length and the payload. Wake-up bytes travel
between frames and are skipped wherever a frame is read.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["Attach", "Frame", "Op", "Reply", "Field", "Sleep", "Wake"]


class Field:
    """The fields of a worker's row in the control block (int64 each; one 64-byte row)."""

    CMD, DONE, STAMP, OP, REPLY, WORKER_SLEEPS, CALLER_SLEEPS, PUBLISHED = range(8)
    #: int64 fields in a row (a cache line: workers never share one)
    SIZE = 8


class Sleep:
    """What a sleeping caller wants (its ``CALLER_SLEEPS`` flag in each worker's row)."""

    #: awake: no wake-up byte
    AWAKE = 0
    #: a wake-up from the first of these workers to finish
    ANY = 1
    #: one wake-up, from the last of the workers marked ALL to finish
    ALL = 2
    #: one wake-up, from the worker whose published env brings the count of envs published
    #: (every row's ``PUBLISHED`` summed) to the control block's ``want`` (:mod:`.queue`), or
    #: from a worker that finishes its command
    COUNT = 3


class Op:
    """What a posted command asks for (the row's ``OP`` field)."""

    #: step every env of the group with the actions in shared memory
    STEP = ord("S")
    #: step the envs flagged in the shared step mask
    MASKED_STEP = ord("M")
    #: read a pickled command from the socket (a :class:`Frame.MESSAGE`) and run it
    COMMAND = ord("P")
    #: step, one at a time, the envs whose per-env counter moved, publishing each when done
    #: (:mod:`.queue`), until none is left
    QUEUE = ord("Q")


class Reply:
    """What a finished command left for the caller (the row's ``REPLY`` field)."""

    #: the result is all in shared memory
    IN_MEMORY = 0
    #: a pickled ``(ok, value)`` follows on the socket
    MESSAGE = 1
    #: the result is all in shared memory, info entries included (:mod:`.infos`)
    INFOS = 2


class Frame:
    """A frame's op byte."""

    #: a pickled command (to a worker) or reply (to the caller)
    MESSAGE = b"P"
    #: the shared block's :class:`Attach` layout, with the block's descriptor
    ATTACH = b"A"


class Wake:
    """One-byte wake-ups, written only to a side that declared it sleeps."""

    WORKER = b"W"
    CALLER = b"K"
    ALL = (WORKER, CALLER)


class Attach(NamedTuple):
    """The shared block's layout, sent to a worker once it has described its envs: where its
    rows, its control row, its step mask and its infos are."""

    observation_space: Any
    action_space: Any
    num_envs: int
    start: int
    stop: int
    nbytes: int
    control_at: int
    num_workers: int
    mask_at: int
    #: the per-env counters of async batches (:mod:`.queue`)
    queue_at: int
    infos_at: int
    #: each side sleeps on a futex word of the control block (:class:`.control.Bell`), not its socket
    bell: bool
    #: observation slots in the block (:mod:`vecenv.spaces.slots`)
    slots: int
