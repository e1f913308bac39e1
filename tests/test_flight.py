"""The engine's in-flight state machine (vecenv.engine.flight, .batches, .calls, .recovery) on a
scripted transport: no envs, no workers; each test says which worker replies when."""

from __future__ import annotations

import multiprocessing
from collections.abc import Collection

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from vecenv.engine import VectorEnv
from vecenv.engine.calls import Calls, in_order
from vecenv.engine.flight import InFlight
from vecenv.engine.partition import Partition
from vecenv.engine.state import CallState
from vecenv.engine.transport import Transport
from vecenv.errors import AlreadyPendingCallError, StepTimeoutError, VecEnvError, WorkerDiedError
from vecenv.infos import InfoEntry, StepReply
from vecenv.policy import FailurePolicy
from vecenv.spaces import StepBuffers
from vecenv.worker import EnvDescription
from vecenv.worker.commands import Call, Configure, Reset, Step


class Scripted(Transport):
    """Replies only when the test says so: ``reply(w, value)`` makes worker ``w`` ready."""

    name = "scripted"
    can_end_workers = True

    def __init__(self, num_workers: int) -> None:
        self.sent: list[tuple[int, object]] = []
        self.replies: dict[int, object] = {}
        self.terminated: list[int] = []
        self.restarted: list[int] = []
        self.interrupt_next_wait = False
        self.partition = [(0, 0)] * num_workers

    def launch(self) -> list[EnvDescription]:  # envs that never run: a Box observation, 3 actions
        return [EnvDescription(spaces.Box(-1, 1, (2,)), spaces.Discrete(3), {}, None)] * len(self.env_fns)

    def attach(self, buffers: StepBuffers) -> None:
        pass

    def send(self, commands: object) -> None:
        for worker, command in commands:  # type: ignore[attr-defined]
            self.sent.append((worker, command))
            if isinstance(command, Configure | Reset) and worker in self.restarted:
                self.replies[worker] = StepReply(())  # a fresh worker answers its set-up at once

    def reply(self, worker: int, value: object = None) -> None:
        self.replies[worker] = StepReply(()) if value is None else value

    def ready(self, workers: Collection[int], timeout: float | None = None, every: bool = False,
              wanted: object = None) -> list[int]:
        if self.interrupt_next_wait:
            self.interrupt_next_wait = False
            raise KeyboardInterrupt
        return [w for w in workers if w in self.replies]

    def fetch(self, worker: int) -> object:
        value = self.replies.pop(worker)
        if isinstance(value, BaseException):
            raise value
        return value

    def outstanding(self, worker: int) -> bool:
        return worker in self.replies

    def terminate(self, worker: int) -> None:
        self.terminated.append(worker)

    def restart(self, worker: int) -> None:
        self.restarted.append(worker)

    def close(self, timeout: float | None = None) -> None:
        pass


def flight(num_envs: int = 4, num_workers: int = 2, batch_size: int | None = None,
           step_timeout: float | None = None, on_error: str = "raise") -> tuple[InFlight, Scripted]:
    transport = Scripted(num_workers)
    policy = FailurePolicy(on_error=on_error, step_timeout=step_timeout)
    f = InFlight(transport, Partition(num_envs, num_workers), policy, batch_size or num_envs,
                 AutoresetMode.NEXT_STEP, copy=True)
    f.allocate(spaces.Box(-1, 1, (2,)), spaces.Discrete(3))
    f.closed = False
    return f, transport


def scripted_env(num_envs: int = 4, num_workers: int = 2, batch_size: int | None = None) -> tuple[VectorEnv, Scripted]:
    """A vector env on a scripted transport, reset (every worker replied to its reset)."""
    transport = Scripted(num_workers)
    env = VectorEnv([lambda: None] * num_envs, transport, num_workers=num_workers, batch_size=batch_size)
    env.reset_async()
    for w in range(num_workers):
        transport.reply(w)
    env.reset_wait()
    transport.sent.clear()
    return env, transport


def test_a_full_step_sends_one_command_per_worker_and_waits_for_every_reply() -> None:
    f, t = flight()
    f.send_steps(f.check_and_write_actions(np.array([0, 1, 2, 0]), None))
    assert f.state is CallState.WAITING_STEP and sorted(f.in_flight) == [0, 1]
    assert [w for w, _ in t.sent] == [0, 1] and f.buffers.actions.read(True).tolist() == [0, 1, 2, 0]
    t.reply(0, StepReply([InfoEntry(1, {"k": 1.0})]))
    t.reply(1)
    _, _, _, _, infos = f.batches.collect(None, "step_wait")
    assert infos["k"].tolist() == [0.0, 1.0, 0.0, 0.0] and infos["_k"].tolist() == [False, True, False, False]
    assert f.state is CallState.DEFAULT and not f.in_flight and not f.replies


def test_async_batches_defer_a_step_for_a_busy_worker_until_its_reply_is_taken() -> None:
    f, t = flight(batch_size=2)
    f.send_reset(np.arange(4), [None] * 4, None)
    t.reply(0)
    obs, *_, infos = f.batches.collect(None, "reset_wait")
    assert infos["env_id"].tolist() == [0, 1] and f.batches.busy.tolist() == [False, False, True, True]
    assert f.state is CallState.WAITING_STEP  # the rest of the reset comes through recv()
    f.send_steps(f.check_and_write_actions(np.array([1, 1]), [0, 1]))
    assert f.deferred == {}  # worker 0 was free: its step went at once
    t.sent.clear()
    t.reply(1)
    *_, infos = f.batches.collect(None, "step_wait")
    assert infos["env_id"].tolist() == [2, 3]
    f.send_steps(f.check_and_write_actions(np.array([2, 2]), [2, 3]))
    assert f.deferred == {} and [w for w, _ in t.sent] == [1]
    with pytest.raises(ValueError, match=r"envs \[0\] are still stepping"):
        f.check_and_write_actions(np.array([0]), [0])


def test_a_step_for_a_worker_in_flight_waits_in_deferred_and_goes_when_it_replies() -> None:
    f, t = flight(batch_size=1, num_envs=2, num_workers=1)
    f.send_reset(np.arange(2), [None] * 2, None)
    t.reply(0)
    *_, infos = f.batches.collect(None, "reset_wait")
    f.send_steps(f.check_and_write_actions(np.array([1]), infos["env_id"]))
    # worker 0 has nothing in flight now; its envs: one returned, one ready
    *_, infos2 = f.batches.collect(None, "step_wait")
    f.send_steps(f.check_and_write_actions(np.array([2]), infos2["env_id"]))
    assert 0 in f.in_flight and f.deferred == {0: [int(infos2["env_id"][0])]}
    t.sent.clear()
    t.reply(0)
    f.batches.collect(None, "step_wait")
    assert len(t.sent) == 1 and type(t.sent[0][1]) is Step and f.deferred == {}


def test_an_interrupted_wait_leaves_the_call_pending_and_resumable() -> None:
    f, t = flight()
    f.send_steps(f.check_and_write_actions(np.zeros(4, dtype=np.int64), None))
    t.interrupt_next_wait = True
    with pytest.raises(KeyboardInterrupt):
        f.batches.collect(None, "step_wait")
    assert f.state is CallState.WAITING_STEP and f.lifecycle.droppable
    with pytest.raises(AlreadyPendingCallError, match="call reset\\(\\) to drop it"):
        f.check_idle("step_async")
    t.reply(0)
    t.reply(1)
    f.batches.collect(None, "step_wait")
    assert f.state is CallState.DEFAULT and not f.lifecycle.droppable


def test_an_error_taking_a_reply_drains_the_others_so_none_arrives_a_step_late() -> None:
    f, t = flight()
    f.send_steps(f.check_and_write_actions(np.zeros(4, dtype=np.int64), None))
    t.reply(0, KeyboardInterrupt())  # cut short while taking worker 0's reply
    t.reply(1)
    with pytest.raises(KeyboardInterrupt):
        f.batches.collect(None, "step_wait")
    assert not f.in_flight and not t.replies and f.state is CallState.DEFAULT


def test_a_send_cut_after_a_command_went_out_makes_the_flight_interrupted_until_dropped() -> None:
    f, t = flight()
    send = t.send

    def cut_at_worker_1(commands: list) -> None:
        for worker, command in commands:
            if worker == 1:
                raise KeyboardInterrupt
            send([(worker, command)])

    t.send = cut_at_worker_1  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        f.send_steps(f.check_and_write_actions(np.zeros(4, dtype=np.int64), None))
    assert f.state is CallState.INTERRUPTED
    with pytest.raises(VecEnvError, match="interrupted part-way"):
        f.check_idle("step_async")
    t.reply(0)
    f.drop_all()  # worker 0's reply is dropped, not returned by the next call
    assert f.state is CallState.DEFAULT and not f.in_flight and not t.replies


def test_a_send_cut_before_anything_went_out_keeps_the_previous_state() -> None:
    f, _ = flight()
    f.interrupted_send(CallState.DEFAULT)
    assert f.state is CallState.DEFAULT
    f.in_flight[0] = np.arange(2)
    f.interrupted_send(CallState.DEFAULT)
    assert f.state is CallState.INTERRUPTED


def test_a_caller_timeout_is_not_an_interruption() -> None:
    f, _ = flight()
    f.send_steps(f.check_and_write_actions(np.zeros(4, dtype=np.int64), None))
    with pytest.raises(multiprocessing.TimeoutError):
        f.batches.collect(0.0, "step_wait")
    assert f.state is CallState.WAITING_STEP and not f.lifecycle.droppable and sorted(f.in_flight) == [0, 1]


def test_an_overdue_worker_fails_the_step_after_the_others_are_drained() -> None:
    f, t = flight(step_timeout=0.01)
    f.send_steps(f.check_and_write_actions(np.zeros(4, dtype=np.int64), None))
    t.reply(1)
    f.sent_at[0] -= 1.0  # worker 0 was sent its step a second ago and never answered
    with pytest.raises(StepTimeoutError) as caught:
        f.batches.collect(None, "step_wait")
    assert caught.value.env_indices == [0, 1] and t.terminated == [0]
    assert not f.in_flight and f.state is CallState.DEFAULT


def test_recovery_replaces_a_dead_worker_and_truncates_its_envs() -> None:
    f, t = flight(on_error="restart")
    f.send_steps(f.check_and_write_actions(np.zeros(4, dtype=np.int64), None))
    t.reply(0, WorkerDiedError(0, [0, 1], -9))
    t.reply(1)
    _, _, terms, truncs, infos = f.batches.collect(None, "step_wait")
    assert t.restarted == [0] and any(type(c) is Configure for w, c in t.sent if w == 0)
    assert truncs.tolist() == [True, True, False, False] and not terms.any()
    assert infos["_restarted"].tolist() == [True, True, False, False]


def test_calls_collect_every_reply_and_an_overdue_worker_fails_the_call() -> None:
    f, t = flight(step_timeout=0.01)
    calls = Calls(f, f.partition, f.lifecycle)
    calls.send(Call("name", (), {}))
    assert f.state is CallState.WAITING_CALL
    t.reply(0, ["a", "b"])
    t.reply(1, ["c", "d"])
    assert calls.collect(None, "call_wait") == {0: ["a", "b"], 1: ["c", "d"]}
    assert f.state is CallState.DEFAULT
    order = calls.send_at(np.array([3, 0]), lambda local, envs: Call("x", (), {}, local))
    t.reply(0, ["zero"])
    f.sent_at[1] -= 1.0
    with pytest.raises(StepTimeoutError):
        calls.collect(None, "call")
    assert t.terminated == [1] and f.state is CallState.DEFAULT and not calls.replies
    assert in_order({0: ["zero"], 1: ["three"]}, order) == ["three", "zero"]
