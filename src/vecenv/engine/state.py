"""The life of a vector env's calls: its states (gymnasium's ``AsyncState`` with one more,
INTERRUPTED), the events that move them and every transition in one table; how a step's or a
reset's results return (the two :class:`Collect` strategies); and one caller at a time
(:func:`one_caller`).

::

    DEFAULT --SEND_RESET--> WAITING_RESET --RETURNED--> DEFAULT
       |                          |
       |                    BATCH_RETURNED (async batches: the rest comes by recv())
       |                          v
       +----SEND_STEP-----> WAITING_STEP ---RETURNED--> DEFAULT
       |                     ^        |
       |                     +--------+  SEND_STEP, BATCH_RETURNED (async batches)
       +----SEND_CALL-----> WAITING_CALL ---RETURNED--> DEFAULT

    WAITING_* --UNSENT (cut before anything went out, nothing pending before)--> DEFAULT

    any state --SEND_CUT, COLLECT_CUT--> INTERRUPTED --DROPPED (reset() lets workers finish)--> DEFAULT
    any state --DROPPED, CLOSED--> DEFAULT
    any state --WAIT_CUT--> the same state, its pending call marked for reset() to drop

A WAITING_* state says a call was sent and its results are still to be collected
(``*_wait`` / ``recv``); in async-batch mode WAITING_STEP also takes more steps (SEND_STEP) and
returns batches while other envs step. INTERRUPTED: an exception (a ``KeyboardInterrupt``, an
error in the caller's process) cut a call short part-way; only ``reset()`` (which first lets
every worker finish: DROPPED) and ``close()`` work.

:class:`CallLifecycle` is the only code that assigns a :class:`CallState`; each transition is made
by the method that causes it (:class:`~vecenv.engine.flight.InFlight` sending a command, a
:class:`Collect` strategy returning results, an interruption), by firing its :class:`Event`.

An :class:`~vecenv.engine.flight.InFlight` holds the collect strategy its ``batch_size`` asks for:
:class:`FullBatch` returns every env's results at once (``batch_size == num_envs``, gymnasium's
way); :class:`FirstReady` returns the first ``batch_size`` envs ready (EnvPool's way) while the
others go on stepping. Both wait through :meth:`InFlight.receive
<vecenv.engine.flight.InFlight.receive>`, which keeps the replies in ``InFlight.replies`` as they
came, and make batches of those.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from enum import Enum
from functools import wraps
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np
from gymnasium.vector import AutoresetMode

from vecenv.errors import NoAsyncCallError
from vecenv.infos import InfoColumns, InfoEntry, batch_infos, columns_infos

if TYPE_CHECKING:
    from vecenv.engine.flight import InFlight

__all__ = ["TRANSITIONS", "CallLifecycle", "CallState", "CallerGuard", "Collect", "Event", "FirstReady", "FullBatch",
           "one_caller"]


class CallState(Enum):
    """What the vector env is doing between calls (see the module's diagram)."""

    __hash__ = object.__hash__  # members are singletons: hashed by identity, in C, on every call

    DEFAULT = "default"
    WAITING_RESET = "reset"
    WAITING_STEP = "step"
    WAITING_CALL = "call"
    INTERRUPTED = "interrupted"


class Event(Enum):
    """What moves the call state."""

    __hash__ = object.__hash__

    SEND_RESET = "a reset is being sent"
    SEND_STEP = "a step is being sent"
    SEND_CALL = "a call is being sent"
    UNSENT = "sending was cut short before anything went out, with nothing pending before"
    SEND_CUT = "sending was cut short after something went out (or with work already pending)"
    WAIT_CUT = "a wait, or the call around it, was cut short: the call stays pending, for reset() to drop"
    COLLECT_CUT = "collecting was cut short with replies half fetched"
    BATCH_RETURNED = "an async batch was returned while other envs are still stepping or ready"
    RETURNED = "the pending call's last results were returned"
    DROPPED = "every worker's pending reply was waited out and dropped"
    CLOSED = "the vector env was closed"


_D, _R, _S, _C, _I = (CallState.DEFAULT, CallState.WAITING_RESET, CallState.WAITING_STEP,
                      CallState.WAITING_CALL, CallState.INTERRUPTED)
_E = Event

#: (state, event) -> the next state; a pair not in the table cannot happen (a bug if it does)
TRANSITIONS: dict[tuple[CallState, Event], CallState] = {
    (_D, _E.SEND_RESET): _R, (_D, _E.SEND_CALL): _C,
    (_D, _E.SEND_STEP): _S, (_S, _E.SEND_STEP): _S,  # async batches: more envs sent while others step
    (_D, _E.UNSENT): _D, (_R, _E.UNSENT): _D, (_S, _E.UNSENT): _D, (_C, _E.UNSENT): _D,
    (_R, _E.BATCH_RETURNED): _S, (_S, _E.BATCH_RETURNED): _S,  # async: the rest of a reset comes by recv()
    (_R, _E.RETURNED): _D, (_S, _E.RETURNED): _D, (_C, _E.RETURNED): _D,
    **{(state, _E.SEND_CUT): _I for state in CallState},
    **{(state, _E.COLLECT_CUT): _I for state in CallState},
    **{(state, _E.WAIT_CUT): state for state in CallState},
    **{(state, _E.DROPPED): _D for state in CallState},
    **{(state, _E.CLOSED): _D for state in CallState},
}


class CallLifecycle:
    """The call state of one vector env, and whether its pending call may be dropped by reset()
    (:attr:`droppable`: a wait or the call around it was cut short)."""

    __slots__ = ("droppable", "state")

    def __init__(self) -> None:
        self.state = CallState.DEFAULT
        self.droppable = False

    def fire(self, event: Event) -> CallState:
        """Make the transition ``event`` causes; returns the new state."""
        try:
            state = TRANSITIONS[self.state, event]
        except KeyError:
            raise RuntimeError(f"vecenv: no transition from {self.state} on {event.name} (a bug in vecenv)") from None
        self.droppable = state is not CallState.DEFAULT and (self.droppable or event is Event.WAIT_CUT)
        self.state = state
        return state


# ================================================================ returning results
class Collect(Protocol):
    """A way to return the results of the pending step or reset."""

    #: the call states in which a step may be sent
    step_states: frozenset[CallState]

    def sent(self, ids: np.ndarray, reset: bool) -> None:
        """The envs ``ids`` are being sent a step (or, ``reset``, a reset): async batches mark them busy."""

    def collect(self, timeout: float | None, method: str, raw: bool = False) -> tuple:
        """Wait for the results and return them: ``(obs, rewards, terminations, truncations,
        infos)`` (``raw``: the info entries as they came instead of batched infos). Cut short,
        the flight says what it left (:meth:`~vecenv.engine.flight.InFlight.interrupted_collect`)."""

    def drop(self) -> None:
        """Drop every result held and not returned."""


class FullBatch:
    """Every env's results at once. Infos that came as column chunks stay chunks until the
    batch is built, so they batch a column at a time."""

    step_states = frozenset({CallState.DEFAULT})

    def __init__(self, flight: InFlight) -> None:
        self.flight = flight

    def sent(self, ids: np.ndarray, reset: bool) -> None:
        pass

    def collect(self, timeout: float | None, method: str, raw: bool = False) -> tuple:
        flight = self.flight
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            while flight.in_flight:
                flight.receive(deadline, timeout, method, True)
            b, n = flight.buffers, flight.num_envs
            held: dict[int, InfoEntry] = {}
            columns: list[InfoColumns] = []
            for _, entries in flight.replies:
                if type(entries) is InfoColumns:
                    columns.append(entries)
                else:
                    for entry in entries:
                        held[entry.index] = entry
            flight.replies.clear()
            infos: Any
            if raw:  # the parts as they came: each names its envs
                infos = [*columns, *held.values()]
            else:  # by column where the chunks allow, else entry by entry
                infos = columns_infos(columns, held, n) if columns else None
                if infos is None:
                    infos = batch_infos([held[i] for i in sorted(held)], n) if held else {}
            flight.lifecycle.fire(Event.RETURNED)
            if flight.autoreset_mode is AutoresetMode.DISABLED:
                flight.needs_reset = np.logical_or(b.terminations, b.truncations)
            observations = b.slots[0].read(flight.copy) if b.lender is None else b.lender.lend()
            return observations, b.rewards.copy(), b.terminations.copy(), b.truncations.copy(), infos
        except BaseException as exc:
            flight.interrupted_collect(exc)
            raise

    def drop(self) -> None:
        pass


class FirstReady:
    """The first ``batch_size`` envs ready. An env is ``busy`` (the flight's) from its send until
    a batch returns it; finished envs queue in ``ready``, their info entries wait in ``entries``;
    steps may be sent while others are in flight."""

    step_states = frozenset({CallState.DEFAULT, CallState.WAITING_STEP})

    def __init__(self, flight: InFlight) -> None:
        self.flight = flight
        self.entries: dict[int, InfoEntry] = {}
        self.ready: deque[int] = deque()

    def sent(self, ids: np.ndarray, reset: bool) -> None:
        if reset:  # sent with nothing in flight: ``ids`` (all, or a reset_mask's) start new episodes
            self.drop()
            self.flight.replies.clear()
            for i in ids.tolist():
                self.flight.restarted.pop(i, None)
        self.flight.busy[ids] = True

    def collect(self, timeout: float | None, method: str, raw: bool = False) -> tuple:
        flight, ready, held = self.flight, self.ready, self.entries
        bs = flight.batch_size
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                for envs, entries in flight.replies:  # in the order they came
                    for entry in entries:
                        held[entry.index] = entry
                    ready.extend(envs.tolist())
                flight.replies.clear()
                if len(ready) >= bs:
                    break
                if not flight.in_flight:  # fewer than bs sent and not returned: return them all
                    if not ready:
                        raise NoAsyncCallError(f"Calling `{method}` with no envs in flight.", method)
                    bs = len(ready)
                    break
                flight.receive(deadline, timeout, method)
            b, ids = flight.buffers, [ready.popleft() for _ in range(bs)]
            rows = np.array(ids, dtype=np.int64)
            if held:
                at = {i: r for r, i in enumerate(ids)}
                infos = batch_infos([held.pop(i) for i in ids if i in held], bs, at)
            else:
                infos = {}
            infos["env_id"] = rows
            infos["_env_id"] = np.ones(bs, dtype=np.bool_)
            flight.busy[rows] = False
            if flight.autoreset_mode is AutoresetMode.DISABLED:
                flight.needs_reset[rows] = b.terminations[rows] | b.truncations[rows]
            # the rest of a reset, and of the steps sent, arrives through recv()
            flight.lifecycle.fire(Event.BATCH_RETURNED if flight.in_flight or ready else Event.RETURNED)
            return b.observations.read_rows(rows), b.rewards[rows], b.terminations[rows], b.truncations[rows], infos
        except BaseException as exc:
            flight.interrupted_collect(exc)
            raise

    def drop(self) -> None:
        self.entries.clear()
        self.ready.clear()
        self.flight.busy.fill(False)


# ================================================================ one caller at a time
class CallerGuard:
    """Who is inside a vector env's API now: :attr:`owner` is ``(thread ident, method)`` or ``None``.

    Taken by :func:`one_caller` with one ``dict.setdefault``, a test-and-set that is atomic (one C
    call, under the GIL or a free-threaded build's per-dict lock) and never blocks.
    """

    __slots__ = ("holder",)

    def __init__(self) -> None:
        self.holder: dict[int, tuple[int, str]] = {}

    @property
    def owner(self) -> tuple[int, str] | None:
        return self.holder.get(0)


_F = TypeVar("_F", bound=Callable[..., Any])


def one_caller(method: _F) -> _F:
    """Let one thread at a time into ``method`` of a vector env (a second caller gets a
    RuntimeError at once, before anything is touched); calls it makes itself pass through.

    Interrupt-safe: the caller owns the guard through a token of its own, taken inside the
    ``try`` and given back by the ``finally`` whatever was raised, wherever (an interruption
    just after the take included), so a KeyboardInterrupt never leaves the guard held.
    """
    name = method.__name__
    get_ident = threading.get_ident

    @wraps(method)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        holder = self._guard.holder
        me = get_ident()
        owner = holder.get(0)
        if owner is not None and owner[0] == me:  # inside this thread's own call
            return method(self, *args, **kwargs)
        token = (me, name)
        try:
            owner = holder.setdefault(0, token)
            if owner is not token:
                raise RuntimeError(_refusal(owner, name))
            return method(self, *args, **kwargs)
        finally:  # no call here: a signal handler runs only at calls and loops, and must not skip this
            try:  # one read: another thread may give its token back between a test and a read
                if holder[0] is token:
                    del holder[0]  # only this thread ever removes this token
            except KeyError:
                pass

    return guarded  # type: ignore[return-value]


def _refusal(owner: tuple[int, str], method: str) -> str:
    thread = next((t.name for t in threading.enumerate() if t.ident == owner[0]), f"id {owner[0]}")
    return (
        f"one caller at a time: {method}() was called from thread {threading.current_thread().name!r} "
        f"while thread {thread!r} is already running {owner[1]}() on this vector env; "
        "use one vector env per thread, or hold a lock around its calls"
    )
