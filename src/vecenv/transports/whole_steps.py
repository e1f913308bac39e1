"""The thread backend's whole-batch steps: one group's step handed to every helper at once.

Data flow of one such step (the engine waits for every group, so the caller takes part)::

    submit ── open(w) ──► a job in each helper's Mailbox      (the share of w already dealt)
    caller ── caller_part(w): steps envs of w until none is left
    helper ── take ── steps envs of w ── post(its part) ──┐
    caller ── complete(w): every helper posted its part,  ◄┘ or never started (the job is taken
              back) ──► the parts, joined by the transport into the group's reply

No lock is taken on this path: a mailbox's operations are the deque's own (atomic), and the
caller's parts are the caller's alone. Building a group whose envs are shared goes the same way:
each thread makes the envs it will step (:func:`make_block`), and :func:`built_group` puts the
blocks together.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any, NamedTuple

from vecenv.errors import EnvError
from vecenv.infos import NO_REPLY
from vecenv.transports.work import Mailbox, Share, part_of
from vecenv.worker import EnvGroup
from vecenv.worker.group import MadeEnvs, close_envs, make_envs

__all__ = ["CALLER", "Build", "WholeSteps", "built_group", "make_block"]

Part = tuple[bool, Any]
#: the caller's slot among the threads that take a step's envs (helpers have slots 1, 2, ...)
CALLER = 0


class WholeSteps:
    """The whole-batch steps open now, by group, and the helpers' mailboxes they go through."""

    __slots__ = ("mailboxes", "shares", "parts", "collected", "posted")

    def __init__(self, mailboxes: list[Mailbox], shares: list[Share]) -> None:
        self.mailboxes = mailboxes
        self.shares = shares
        #: per group, while its step is open: the caller's parts of it (None: no open step)
        self.parts: list[list[Part] | None] = [None] * len(shares)
        self.collected = [0] * len(shares)  # per open step: helpers whose part is in parts
        self.posted = False  # a helper posted a part since the caller last looked

    def open(self, w: int) -> None:
        """Group ``w``'s step (its share dealt) is handed to every helper."""
        self.parts[w] = []
        self.collected[w] = 0
        for mailbox in self.mailboxes:
            mailbox.hand(w)

    def any_open(self, groups: Collection[int]) -> bool:
        parts = self.parts
        for w in groups:
            if parts[w] is not None:
                return True
        return False

    def caller_part(self, w: int, run: Callable[[int, int], Any],
                    cut: Callable[[int, BaseException], BaseException]) -> None:
        """The caller's part of group ``w``'s step: ``run(w, CALLER)`` steps envs until none is left.
        An exception that is not an ``Exception`` (a Ctrl-C) makes the part ``cut(w, exc)``, and
        gets through."""
        parts = self.parts[w]
        assert parts is not None
        try:
            parts.append(part_of(run(w, CALLER)))
        except Exception as exc:
            parts.append((False, exc))
        except BaseException as exc:
            parts.append((False, cut(w, exc)))
            raise

    def post(self, mailbox: Mailbox, w: int, part: Part) -> None:
        """A helper's part of group ``w``'s step."""
        mailbox.post(w, part)
        self.posted = True

    def complete(self, w: int) -> list[Part] | None:
        """Every part of group ``w``'s step once it is done (no env left to take, and each
        helper posted its part or never started: then its job is taken back), closing it;
        None while it is not. Parts are taken out of the mailboxes in their order as each is
        done, so a later look starts at the first helper still running."""
        if any(self.shares[w].queues):  # what Share's bool says, without a call to it
            return None
        parts = self.parts[w]
        assert parts is not None
        mailboxes = self.mailboxes
        k = self.collected[w]
        while k < len(mailboxes):
            part = mailboxes[k].part(w)
            if part is None:
                self.collected[w] = k
                return None
            parts.append(part)
            k += 1
        self.parts[w] = None
        return parts

    def drop(self, w: int) -> list[Part] | None:
        """Leave what no thread took of group ``w``'s step; its parts once every helper is done
        with it (as :meth:`complete`)."""
        self.shares[w].clear()
        return self.complete(w)

    def running(self, w: int) -> bool:
        """Whether a helper runs group ``w``'s step now."""
        return any(mailbox.current == w for mailbox in self.mailboxes)

    def clear(self) -> None:
        """Take back every job no helper started (the transport closes)."""
        for mailbox in self.mailboxes:
            mailbox.clear()


class Build(NamedTuple):
    """Build a group from its env_fns (the first command of every group). With whole batches
    it is shared like a step: each thread makes the envs it will step (:func:`make_block`)."""

    env_fns: Sequence[Callable[[], Any]]
    start: int


def make_block(env_fns: Sequence[Callable[[], Any]], share: Share, slot: int) -> MadeEnvs:
    """Thread ``slot`` makes the envs it takes from ``share`` (its own block first: the envs it
    will step), until none is left or an env_fn fails (then the others stop too)."""
    part = make_envs(env_fns, share.taken_by(slot))
    if part.failure is not None:
        share.clear()
    return part


def built_group(parts: list[Part], env_fns: Sequence[Callable[[], Any]], start: int, w: int,
                autoreset_mode: Any) -> tuple[Part, EnvGroup | None]:
    """Group ``w`` from every thread's block of made envs, with its reply (its envs'
    descriptions); or no group and the first error, with every env made closed again."""
    made = [part for ok, part in parts if ok and part is not NO_REPLY]
    errors = [part for ok, part in parts if not ok]
    if errors:  # a thread was cut short (or a helper raised SystemExit and the like)
        for part in made:
            close_envs(part.envs.values())
        return (False, errors[0]), None
    try:
        group = EnvGroup(env_fns, start, w, autoreset_mode, made=made)
    except EnvError as exc:  # an env_fn failed: every env made is closed
        return (False, exc), None
    return (True, group.describe()), group
