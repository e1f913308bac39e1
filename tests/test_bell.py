"""One wake-up for many workers, each way: the futex bell every sleeping worker waits on (one
system call wakes them all) and the caller's "wake me once, when all are done" flag."""

from __future__ import annotations

import mmap
import threading
import time

import numpy as np
import pytest

import vecenv
from helpers import needs_processes
from vecenv.transports.process import control, handshake
from vecenv.transports.process.control import ControlBlock
from vecenv.transports.process.mechanism import MECHANISMS
from vecenv.transports.process.protocol import Field, Sleep

pytestmark = needs_processes
needs_futex = pytest.mark.skipif(not control.bell_available(), reason="futexes are Linux-only")


def _block(num_workers: int) -> ControlBlock:
    memory = mmap.mmap(-1, ControlBlock.nbytes(num_workers))
    return ControlBlock(memoryview(memory), 0, num_workers)


def test_the_bell_words_lie_after_every_worker_row_each_on_a_line_of_its_own():
    ctrl = _block(3)
    ctrl.bell_word[0] = 7
    ctrl.caller_word[0] = 9
    assert not ctrl.rows.any()  # no worker's counters share their bytes
    assert ctrl.caller_word.ctypes.data - ctrl.bell_word.ctypes.data >= 64  # the caller's, the workers'
    assert ControlBlock.nbytes(3) >= ctrl.caller_word.ctypes.data + 4 - ctrl.rows.ctypes.data


@needs_futex
@pytest.mark.timeout(30)
def test_rings_racing_each_other_each_move_the_callers_word():
    """Workers ring the caller's bell at the same moments: each ring adds one atomically, so a
    caller that read the word before any of them always finds it moved."""
    bell = control.Bell(_block(1).caller_word)
    start = threading.Barrier(4)

    def ringer() -> None:
        start.wait()
        for _ in range(2000):
            bell.ring_one()

    threads = [threading.Thread(target=ringer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert bell.seen() == 4 * 2000


def test_a_caller_waiting_for_any_reply_is_woken_by_each():
    ctrl = _block(3)
    ctrl.rows[:, Field.CALLER_SLEEPS] = Sleep.ANY
    ctrl.post(0, 1)
    ctrl.post(1, 1)
    ctrl.finish(0, 1, 0)
    assert ctrl.caller_waits_on(0)
    ctrl.rows[:, Field.CALLER_SLEEPS] = Sleep.AWAKE
    assert not ctrl.caller_waits_on(0)


def test_a_look_for_every_reply_finds_nothing_until_all_are_done_or_one_died():
    ctrl = _block(3)
    for w in range(3):
        ctrl.post(w, 1)
    ctrl.finish(2, 1, 0)
    stamp = time.monotonic_ns()
    while time.monotonic_ns() == stamp:  # Windows' monotonic clock moves every 15.6 ms
        pass
    ctrl.finish(0, 1, 0)
    assert ctrl.finished([0, 1, 2], {}) == [2, 0]  # in the order they finished
    assert ctrl.finished([0, 1, 2], {}, every=True) == []
    assert ctrl.finished([0, 1, 2], {1: None}, every=True) == [1, 2, 0]  # a death ends the wait
    ctrl.finish(1, 1, 0)
    assert sorted(ctrl.finished([0, 1, 2], {}, every=True)) == [0, 1, 2]  # all of them, in no particular order


def test_a_caller_waiting_for_all_is_woken_only_by_the_last_to_finish():
    ctrl = _block(4)
    for w in range(3):
        ctrl.post(w, 1)
    ctrl.rows[:3, Field.CALLER_SLEEPS] = Sleep.ALL  # worker 3 is not part of this wait
    ctrl.post(3, 1)
    ctrl.finish(0, 1, 0)
    assert not ctrl.caller_waits_on(0)
    ctrl.finish(2, 1, 0)
    assert not ctrl.caller_waits_on(2)
    ctrl.finish(1, 1, 0)
    assert ctrl.caller_waits_on(1)  # all three done; worker 3 still busy does not matter


@needs_futex
@pytest.mark.timeout(20)
def test_one_ring_wakes_every_thread_asleep_on_the_word():
    ctrl = _block(1)
    bell = control.Bell(ctrl.bell_word)
    woke: list[float] = []

    def sleeper() -> None:
        seen = bell.seen()
        start = time.monotonic()
        while bell.seen() == seen and time.monotonic() - start < 5:
            bell.wait(seen, 5000)
        woke.append(time.monotonic() - start)

    threads = [threading.Thread(target=sleeper) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    bell.ring()
    for t in threads:
        t.join(10)
    assert len(woke) == 4 and max(woke) < 4.0


@needs_futex
@pytest.mark.timeout(20)
def test_a_wait_returns_at_once_when_the_word_moved_and_after_its_nap_otherwise():
    bell = control.Bell(_block(1).bell_word)
    seen = bell.seen()
    bell.ring()
    start = time.monotonic()
    bell.wait(seen, 2000)  # the word is no longer `seen`
    assert time.monotonic() - start < 1.0
    start = time.monotonic()
    bell.wait(bell.seen(), 30)
    assert 0.02 <= time.monotonic() - start < 1.0


@needs_futex
@pytest.mark.timeout(20)
def test_sleep_on_bell_declares_returns_on_the_counter_and_withdraws():
    ctrl = _block(1)
    bell = control.Bell(ctrl.bell_word)
    flags: list[int] = []
    moved = threading.Event()

    def poster() -> None:
        time.sleep(0.1)
        moved.set()
        bell.ring()

    threading.Thread(target=poster).start()
    handshake.sleep_on_bell(moved.is_set, flags.append, bell, lambda: None)
    assert flags == [1, 0]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mechanism", ["posix", "portable"])
def test_sleeping_workers_woken_once_each_way_step_like_gymnasium(mechanism):
    """Blocking waits only (no spin), more workers than cores: every step posts to sleeping
    workers and the caller sleeps for all of them."""
    import gymnasium as gym

    if mechanism == "posix" and MECHANISMS["posix"].missing():
        pytest.skip("no POSIX mechanism here")
    fns = [lambda: gym.make("CartPole-v1")] * 8
    ours = vecenv.make(fns, backend="process", num_workers=4, spin_us=0, yield_us=0, mechanism=mechanism)
    ref = gym.vector.SyncVectorEnv(fns)
    try:
        o1, _ = ours.reset(seed=3)
        o2, _ = ref.reset(seed=3)
        rng = np.random.default_rng(0)
        for _ in range(60):
            a = rng.integers(0, 2, 8)
            r1, r2 = ours.step(a), ref.step(a)
            for x, y in zip(r1[:4], r2[:4], strict=True):
                np.testing.assert_array_equal(x, y)
    finally:
        ours.close()
        ref.close()


def _env(seconds: float):
    import gymnasium as gym

    class Env(gym.Env):
        observation_space = gym.spaces.Box(0, 1, (1,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            return np.zeros(1, np.float32), {}

        def step(self, action):
            time.sleep(seconds)
            return np.zeros(1, np.float32), 0.0, False, False, {}

    return Env()


def fast_env():
    return _env(0.2)  # not done yet when the wait starts


def slow_env():
    return _env(3.0)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mechanism", ["posix", "portable"])
def test_a_wait_for_every_reply_that_runs_out_reports_the_workers_done(mechanism):
    """A caller that sleeps until all replies are there, woken once by the last, must still say
    which workers finished when its time runs out (a step deadline restarts only the others)."""
    if mechanism == "posix" and MECHANISMS["posix"].missing():
        pytest.skip("no POSIX mechanism here")
    envs = vecenv.ProcessVectorEnv([fast_env, fast_env, slow_env, slow_env], num_workers=2, spin_us=0,
                                   yield_us=0, mechanism=mechanism)
    try:
        envs.reset(seed=0)
        envs.step_async(np.zeros(4, np.int64))
        transport = envs._flight.transport
        start = time.monotonic()
        assert transport.ready([0, 1], 1.0, every=True) == [0]  # at its deadline: the one that is done
        assert 0.9 <= time.monotonic() - start < 2.5
        assert transport.ready([1], 10.0, every=True) == [1]
        envs.step_wait()
    finally:
        envs.close()
