"""The call lifecycle as one state machine: every state x event against the expected table, then
each interruption and failure in each waiting state of a real flight (scripted transport)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from test_flight import flight, scripted_env
from vecenv.engine.calls import Calls
from vecenv.engine.state import TRANSITIONS, CallLifecycle, CallState, Event
from vecenv.errors import AlreadyPendingCallError, VecEnvError, WorkerDiedError
from vecenv.worker.commands import Call

D, R, S, C, X = (CallState.DEFAULT, CallState.WAITING_RESET, CallState.WAITING_STEP,
                 CallState.WAITING_CALL, CallState.INTERRUPTED)
E = Event
#: what each event does in each state, written out (None: it cannot happen there)
EXPECTED = {
    E.SEND_RESET: {D: R, R: None, S: None, C: None, X: None},
    E.SEND_STEP: {D: S, R: None, S: S, C: None, X: None},
    E.SEND_CALL: {D: C, R: None, S: None, C: None, X: None},
    E.UNSENT: {D: D, R: D, S: D, C: D, X: None},
    E.BATCH_RETURNED: {D: None, R: S, S: S, C: None, X: None},
    E.RETURNED: {D: None, R: D, S: D, C: D, X: None},
    E.SEND_CUT: {D: X, R: X, S: X, C: X, X: X},
    E.COLLECT_CUT: {D: X, R: X, S: X, C: X, X: X},
    E.WAIT_CUT: {D: D, R: R, S: S, C: C, X: X},
    E.DROPPED: {D: D, R: D, S: D, C: D, X: D},
    E.CLOSED: {D: D, R: D, S: D, C: D, X: D},
}


def test_the_table_names_every_event() -> None:
    assert set(EXPECTED) == set(Event)


@pytest.mark.parametrize(("state", "event"), list(itertools.product(CallState, Event)))
def test_every_state_and_event(state: CallState, event: Event) -> None:
    lifecycle = CallLifecycle()
    lifecycle.state = state
    lifecycle.droppable = state is not D
    expected = EXPECTED[event][state]
    if expected is None:
        assert (state, event) not in TRANSITIONS
        with pytest.raises(RuntimeError, match="no transition"):
            lifecycle.fire(event)
        assert lifecycle.state is state
        return
    assert lifecycle.fire(event) is expected and lifecycle.state is expected
    # a cut wait marks the pending call for reset() to drop; reaching DEFAULT forgets that
    assert lifecycle.droppable is (expected is not D and (state is not D or event is E.WAIT_CUT))


def waiting(state: CallState, batch_size: int | None = None):
    """A flight of 4 envs on 2 workers that waits in ``state``; its transport and calls."""
    f, t = flight(batch_size=batch_size)
    calls = Calls(f, f.partition, f.lifecycle)
    if state is R:
        f.send_reset(np.arange(4), [None] * 4, None)
    elif state is S:
        f.send_steps(f.check_and_write_actions(np.zeros(4, dtype=np.int64), None if batch_size is None else np.arange(4)))
    else:
        calls.send(Call("name", (), {}))
    assert f.state is state and sorted(f.in_flight) == [0, 1]
    return f, t, calls


def cut_after_first_send(t) -> None:
    """The first command of a round ``t`` is given goes out, then a KeyboardInterrupt cuts the
    sending short."""
    send = t.send

    def cut(commands: list) -> None:
        send(commands[:1])
        raise KeyboardInterrupt

    t.send = cut


def collect(f, calls, state: CallState):
    return calls.collect(None, "call_wait") if state is C else f.batches.collect(None, "step_wait")


CASES = [(s, b) for s in (R, S, C) for b in (None, 2) if not (s is C and b == 2)]


@pytest.mark.parametrize(("state", "batch_size"), CASES)
def test_an_interrupted_wait_keeps_the_call_pending_for_reset_to_drop(state: CallState, batch_size: int | None) -> None:
    f, t, calls = waiting(state, batch_size)
    t.interrupt_next_wait = True
    with pytest.raises(KeyboardInterrupt):
        collect(f, calls, state)
    assert f.state is state and f.lifecycle.droppable
    f.drop_all()
    assert f.state is D and not f.lifecycle.droppable and not f.in_flight


@pytest.mark.parametrize(("state", "batch_size"), CASES)
def test_a_dead_worker_fails_the_call_and_drops_the_others(state: CallState, batch_size: int | None) -> None:
    f, t, calls = waiting(state, batch_size)
    t.reply(0, WorkerDiedError(0, [0, 1], -9))
    t.reply(1)
    with pytest.raises(WorkerDiedError):
        collect(f, calls, state)
    assert f.state is D and not f.in_flight and not t.replies


@pytest.mark.parametrize(("state", "batch_size"), [(R, None), (S, None), (R, 2), (S, 2)])
def test_an_interruption_while_taking_a_reply_drops_every_reply(state: CallState, batch_size: int | None) -> None:
    f, t, calls = waiting(state, batch_size)
    t.reply(0, KeyboardInterrupt())
    t.reply(1)
    with pytest.raises(KeyboardInterrupt):
        collect(f, calls, state)
    assert f.state is D and not f.in_flight and not t.replies


@pytest.mark.parametrize("state", [D, S])
def test_a_send_cut_after_a_command_went_out_interrupts(state: CallState) -> None:
    f, t = flight(batch_size=2)
    if state is S:
        f.send_reset(np.arange(4), [None] * 4, None)
        t.reply(0)
        f.batches.collect(None, "reset_wait")  # envs 0, 1 returned; worker 1 still resetting
    assert f.state is state
    cut_after_first_send(t)
    with pytest.raises(KeyboardInterrupt):
        f.send_steps(f.check_and_write_actions(np.zeros(2, dtype=np.int64), [0, 1]))
    assert f.state is X
    with pytest.raises(VecEnvError, match="interrupted part-way"):
        f.check_idle("step_async")


@pytest.mark.parametrize(("state", "batch_size"), CASES)
def test_an_interrupted_call_around_a_wait_is_for_reset_to_drop(state: CallState, batch_size: int | None) -> None:
    f, _, _ = waiting(state, batch_size)
    with pytest.raises(KeyboardInterrupt):
        try:
            raise KeyboardInterrupt
        except BaseException:
            f.interrupted_call()  # as step(), reset() and call() do, cut short anywhere
            raise
    assert f.state is state and f.lifecycle.droppable


@pytest.mark.parametrize(("state", "batch_size"), CASES)
def test_a_collect_cut_with_replies_half_taken_interrupts(state: CallState, batch_size: int | None) -> None:
    f, _, _ = waiting(state, batch_size)
    f.interrupted_collect(RuntimeError("an error in the caller's process while collecting"))
    assert f.state is X


def test_a_reset_or_call_of_no_envs_waits_for_nothing_and_returns() -> None:
    f, t = flight()
    f.send_reset(np.array([], dtype=np.int64), [None] * 4, None)
    assert f.state is R and not t.sent
    f.batches.collect(None, "reset_wait")
    assert f.state is D
    calls = Calls(f, f.partition, f.lifecycle)
    calls.send_at(np.array([], dtype=np.int64), lambda local, envs: Call("x", (), {}, local))
    assert f.state is C and calls.collect(None, "get_attr") == {} and f.state is D


def test_a_step_cut_short_in_each_phase() -> None:
    """``step()`` checks, sends and collects as one call: bad actions leave the pending steps for
    reset() to drop, a cut send interrupts, a cut wait stays pending."""
    env, t = scripted_env(batch_size=2)
    f = env._flight
    assert f.state is S  # envs 2, 3 are still to come through recv()
    with pytest.raises(ValueError, match="still stepping"):
        env.step(np.zeros(2, dtype=np.int64), [2, 3])
    assert f.state is S and f.lifecycle.droppable
    with pytest.raises(AlreadyPendingCallError, match="call reset\\(\\) to drop it"):
        env.call("name")
    f.drop_all()
    assert f.state is D
    env2, t2 = scripted_env()
    t2.interrupt_next_wait = True
    with pytest.raises(KeyboardInterrupt):
        env2.step(np.zeros(4, dtype=np.int64))
    assert env2._flight.state is S and env2._flight.lifecycle.droppable and sorted(env2._flight.in_flight) == [0, 1]
    env3, t3 = scripted_env()
    cut_after_first_send(t3)
    with pytest.raises(KeyboardInterrupt):
        env3.step(np.zeros(4, dtype=np.int64))
    assert env3._flight.state is X
    with pytest.raises(VecEnvError, match="interrupted part-way"):
        env3.step(np.zeros(4, dtype=np.int64))
    for e in (env, env2, env3):
        e.close()
