"""The life of a vector env's calls: its states (gymnasium's ``AsyncState`` with one more,
INTERRUPTED), the events that move them and every transition in one table. How a step's or a
reset's results return is :mod:`.collect`; one caller at a time is :mod:`.caller`.

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
:mod:`.collect` strategy returning results, an interruption), by firing its :class:`Event`.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["TRANSITIONS", "CallLifecycle", "CallState", "Event"]


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
