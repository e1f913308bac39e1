"""What is specific to the thread backend: concurrency, finishing order, threads, closing."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import textwrap
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import vecenv
from vecenv.make import usable_cores

pytestmark = pytest.mark.timeout(60)


def _vecenv_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("vecenv-thread-")]


class GateEnv(gym.Env):
    """Steps wait on ``gate`` (a Barrier, an Event or nothing) and may sleep; records threads."""

    observation_space = spaces.Box(-np.inf, np.inf, (1,), np.float64)
    action_space = spaces.Discrete(2)

    def __init__(self, gate=None, delay: float = 0.0) -> None:
        self.gate = gate
        self.delay = delay
        self.made_in = threading.current_thread().name
        self.stepped_in: set[str] = set()
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1), {}

    def step(self, action):
        self.stepped_in.add(threading.current_thread().name)
        if isinstance(self.gate, threading.Barrier):
            self.gate.wait()
        elif isinstance(self.gate, threading.Event):
            self.gate.wait()
        if self.delay:
            time.sleep(self.delay)
        self.t += 1
        return np.full(1, float(self.t)), 1.0, False, False, {}


def test_defaults_one_group_per_thread_or_one_group_per_env():
    # a thread an earlier test abandoned in a hung env may still be ending: count only new ones
    earlier = set(_vecenv_threads())

    def started() -> int:
        return len(set(_vecenv_threads()) - earlier)

    with vecenv.ThreadVectorEnv([GateEnv] * 5) as envs:
        assert envs.backend == "thread"
        assert envs.num_threads == usable_cores() and envs.num_workers == min(5, usable_cores())
        assert started() == usable_cores() - 1  # the caller is one of the threads
    with vecenv.ThreadVectorEnv([GateEnv] * 5, num_workers=3, batch_size=2) as envs:
        assert envs.num_threads == 3 and envs.num_workers == 5  # async batches: one group per env
        assert started() == 3  # helpers step; the caller computes
    with vecenv.ThreadVectorEnv([GateEnv] * 5, num_workers=2, groups=2) as envs:
        assert envs.num_workers == 2
    assert not started()


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_bad_thread_counts_are_refused_before_anything_starts(bad):
    for name in ("num_workers", "groups"):
        with pytest.raises(ValueError, match=rf"{name}: expected an int >= 1, got {bad!r}"):
            vecenv.ThreadVectorEnv([GateEnv] * 2, **{name: bad})
    with pytest.raises(ValueError, match=r"spin_us: expected a number of microseconds >= 0"):
        vecenv.ThreadVectorEnv([GateEnv] * 2, spin_us=-1)
    assert not _vecenv_threads()


def test_async_helpers_that_race_for_the_last_command_all_keep_serving():
    """Helpers share one queue with async batches: when two see one command, the one that loses
    looks again (it once died on the empty queue, leaving fewer helpers)."""
    with vecenv.ThreadVectorEnv([lambda: gym.make("CartPole-v1")] * 5, num_workers=3, batch_size=2) as envs:
        _, infos = envs.reset(seed=0)
        for _ in range(3000):
            envs.send(np.zeros(2, dtype=np.int64), infos["env_id"])
            *_, infos = envs.recv()
        assert len(_vecenv_threads()) == 3


def test_each_thread_steps_its_own_block_of_envs_at_once():
    """Both threads must be inside step() at once, or the barrier times out; the caller steps
    the first block, the helper the second, on every step."""
    barrier = threading.Barrier(2, timeout=10)
    with vecenv.ThreadVectorEnv([lambda: GateEnv(barrier)] * 2, num_workers=2) as envs:
        envs.reset(seed=0)
        for _ in range(3):
            obs, *_ = envs.step(np.zeros(2, int))
        assert obs[:, 0].tolist() == [3.0, 3.0]
        assert not barrier.broken
        stepped = envs.apply(lambda env: sorted(env.unwrapped.stepped_in))
        assert stepped == [[threading.current_thread().name], ["vecenv-thread-1"]]


def test_each_env_is_stepped_by_the_thread_that_owns_its_group_only():
    """Six envs on two threads: envs 0-2 in your thread, 3-5 in the helper's, on every step
    (env 0 is slow, so the helper has long started its own when your thread is done), and every
    call reaches them there."""
    fns = [lambda: GateEnv(delay=0.2)] + [GateEnv] * 5
    with vecenv.ThreadVectorEnv(fns, num_workers=2) as envs:
        envs.reset(seed=0)
        for _ in range(2):
            obs, *_ = envs.step(np.zeros(6, int))
        assert obs[:, 0].tolist() == [2.0] * 6
        stepped = envs.apply(lambda env: sorted(env.unwrapped.stepped_in))
        made = envs.apply(lambda env: env.unwrapped.made_in)
        me = threading.current_thread().name
        assert stepped == [[me]] * 3 + [["vecenv-thread-1"]] * 3
        assert made == [me] * 3 + ["vecenv-thread-1"] * 3


def test_async_batches_return_the_fastest_envs_first():
    """While one helper steps the slow env 0, the others take the fast envs from the queue and
    their batches come back, round after round; the slow env's result arrives later, intact."""
    fns = [lambda: GateEnv(delay=0.5)] + [GateEnv] * 3
    with vecenv.ThreadVectorEnv(fns, num_workers=3, batch_size=2) as envs:
        _, infos = envs.reset(seed=0)
        ids = [infos["env_id"], envs.recv()[-1]["env_id"]]  # the rest of the reset
        assert sorted(np.concatenate(ids).tolist()) == [0, 1, 2, 3]
        for part in ids:
            envs.send(np.zeros(2, int), part)
        for _ in range(4):
            obs, _, _, _, infos = envs.recv()
            assert 0 not in infos["env_id"].tolist(), "the slow env held the fast ones back"
            envs.send(np.zeros(2, int), infos["env_id"])
        got: dict = {}
        while 0 not in got:
            obs, _, _, _, infos = envs.recv(timeout=10)
            got.update(zip(infos["env_id"].tolist(), obs[:, 0].tolist(), strict=True))
            if 0 not in got:
                envs.send(np.zeros(2, int), infos["env_id"])
        assert got[0] == 1.0 and min(got.values()) >= 1.0


def test_recv_timeout_and_recovery():
    gate = threading.Event()
    with vecenv.ThreadVectorEnv([lambda: GateEnv(gate)] * 2, num_workers=2) as envs:
        envs.reset(seed=0)
        envs.step_async(np.zeros(2, int))
        t0 = time.monotonic()
        with pytest.raises(multiprocessing.TimeoutError):
            envs.step_wait(timeout=0.2)
        assert time.monotonic() - t0 < 2
        gate.set()
        obs, *_ = envs.step_wait()
        assert obs[:, 0].tolist() == [1.0, 1.0]


def test_env_fn_error_ends_every_thread():
    def broken():
        raise OSError("no simulator")

    with pytest.raises(vecenv.EnvError, match=r"env 3 .*OSError in env_fn\(\)") as info:
        vecenv.ThreadVectorEnv([GateEnv, GateEnv, GateEnv, broken], num_workers=2, groups=2)
    assert info.value.worker == 1 and "Traceback" in info.value.remote_traceback
    time.sleep(0.05)
    assert not _vecenv_threads()


class _Closing(GateEnv):
    made: list[int] = []
    closed: list[int] = []

    def __init__(self, index: int, barrier: threading.Barrier | None) -> None:
        if barrier is not None:
            barrier.wait()  # the two threads make envs at once
        super().__init__()
        self.index = index
        _Closing.made.append(index)

    def close(self) -> None:
        _Closing.closed.append(self.index)


def test_each_env_is_made_by_the_thread_that_steps_it():
    """A group's envs are made by the thread that steps them (the barrier in the env_fn makes
    both threads make one at once), so their objects are that thread's own."""
    barrier, steps = threading.Barrier(2, timeout=10), threading.Barrier(2, timeout=10)

    def make():
        barrier.wait()
        return GateEnv(steps)

    with vecenv.ThreadVectorEnv([make] * 2, num_workers=2) as envs:
        envs.reset(seed=0)
        envs.step(np.zeros(2, int))
        made = envs.apply(lambda env: env.unwrapped.made_in)
        stepped = envs.apply(lambda env: sorted(env.unwrapped.stepped_in))
        assert made == [threading.current_thread().name, "vecenv-thread-1"]
        assert stepped == [[made[0]], [made[1]]]


@pytest.mark.parametrize("late", [0.0, 0.05])
def test_an_env_fn_failing_in_one_thread_closes_the_envs_made_by_every_thread(late):
    """Env 2 of 4 fails while both threads make envs (env 0 in your thread, env 2 in the
    helper's, at once): the error names env 2 and env_fn(), as serial's would, and every env
    made is closed (``late``: the failure comes after your thread has made its envs)."""
    _Closing.made, _Closing.closed = [], []
    barrier = threading.Barrier(2, timeout=10)

    def broken():
        barrier.wait()
        time.sleep(late)
        raise OSError("no simulator")

    fns = [lambda: _Closing(0, barrier), lambda: _Closing(1, None), broken, lambda: _Closing(3, None)]
    with pytest.raises(vecenv.EnvError, match=r"env 2 .*OSError in env_fn\(\)") as info:
        vecenv.ThreadVectorEnv(fns, num_workers=2)
    assert info.value.worker == 1
    assert _Closing.made[0] == 0 and set(_Closing.made) <= {0, 1, 3}
    assert sorted(_Closing.closed) == sorted(_Closing.made)
    time.sleep(0.05)
    assert not _vecenv_threads()


def test_close_joins_threads_and_closes_every_env():
    closed = []

    class Closing(GateEnv):
        def close(self):
            closed.append(self)

    envs = vecenv.ThreadVectorEnv([Closing] * 3, num_workers=3)
    envs.reset(seed=0)
    envs.step(np.zeros(3, int))
    envs.close()
    envs.close()
    assert len(closed) == 3 and len(set(map(id, closed))) == 3
    assert not _vecenv_threads()
    with pytest.raises(vecenv.ClosedEnvironmentError):
        envs.step(np.zeros(3, int))


def test_close_with_a_hung_env_returns_in_bounded_time():
    gate, entered = threading.Event(), threading.Event()

    class Hung(GateEnv):
        def step(self, action):
            entered.set()
            return super().step(action)

    envs = vecenv.ThreadVectorEnv([GateEnv, lambda: Hung(gate)], num_workers=2)
    envs.reset(seed=0)
    envs.step_async(np.zeros(2, int))  # the helper steps its env; the caller is not waiting
    assert entered.wait(10)
    t0 = time.monotonic()
    envs.close(timeout=0.3)
    assert time.monotonic() - t0 < 2
    stuck = _vecenv_threads()
    assert [t.name for t in stuck] == ["vecenv-thread-1"] and stuck[0].daemon
    gate.set()  # let the abandoned thread finish
    stuck[0].join(5)
    assert not _vecenv_threads()


def test_hung_env_does_not_block_interpreter_exit():
    code = textwrap.dedent(
        """
        import threading, time, numpy as np, gymnasium as gym, vecenv
        class Hang(gym.Env):
            observation_space = gym.spaces.Box(0, 1, (1,))
            action_space = gym.spaces.Discrete(2)
            def reset(self, *, seed=None, options=None):
                return np.zeros(1, np.float32), {}
            def step(self, action):
                threading.Event().wait()
        envs = vecenv.ThreadVectorEnv([Hang, Hang], num_workers=2)
        envs.reset()
        envs.step_async(np.zeros(2, int))
        print("exiting", flush=True)
        """
    )
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "exiting" in out.stdout and time.monotonic() - t0 < 20


def test_errors_leave_threads_serving():
    from vecenv.testing import FaultyEnv

    with vecenv.ThreadVectorEnv([FaultyEnv, lambda: FaultyEnv("step_raise", at=1)], num_workers=2) as envs:
        envs.reset(seed=0)
        for _ in range(2):
            with pytest.raises(vecenv.EnvError, match=r"^planted step failure.*\n\(vecenv\) env 1 "):
                envs.step(np.zeros(2, int))
        assert envs.get_attr("steps") == (2, 2)
        assert len(_vecenv_threads()) == 1


class _Held(GateEnv):
    """A step that waits for ``release`` (at most 10 s)."""

    def __init__(self, release: threading.Event) -> None:
        super().__init__()
        self.release = release

    def step(self, action):
        self.release.wait(10)
        return super().step(action)


def test_a_command_a_busy_helper_has_not_started_is_taken_back():
    """Four groups on two threads: the helper steps groups 2 and 3 and is held inside group 2's
    step, so it cannot start group 3's; your thread steps groups 0 and 1 (slowly: the helper has
    started group 2 by then), then takes group 3 back and steps it too, and waits only for group
    2. Nothing runs twice; later steps go on as usual."""
    release = threading.Event()
    fns = [lambda: GateEnv(delay=0.1), GateEnv, lambda: _Held(release), GateEnv]
    with vecenv.ThreadVectorEnv(fns, num_workers=2, groups=4) as envs:
        envs.reset(seed=0)
        timer = threading.Timer(0.3, release.set)
        timer.start()
        try:
            obs, *_ = envs.step(np.zeros(4, int))
        finally:
            timer.cancel()
            release.set()
        assert obs[:, 0].tolist() == [1.0] * 4
        me = threading.current_thread().name
        stepped = envs.apply(lambda env: sorted(env.unwrapped.stepped_in))
        assert stepped[:2] == [[me], [me]] and stepped[2] == ["vecenv-thread-1"] and me in stepped[3]
        for _ in range(20):
            obs, *_ = envs.step(np.zeros(4, int))
        assert obs[:, 0].tolist() == [21.0] * 4


@pytest.mark.parametrize("batch_size", [2, None])
def test_a_caller_waiting_for_helpers_sleeps(batch_size):
    """While helpers step slow envs (async batches, or a wait with a timeout), the caller's
    thread waits without burning its core."""
    with vecenv.ThreadVectorEnv([lambda: GateEnv(delay=0.05)] * 4, num_workers=2, batch_size=batch_size) as envs:
        _, infos = envs.reset(seed=0)
        cpu, wall = time.thread_time(), time.monotonic()
        if batch_size:
            ids = infos["env_id"]
            for _ in range(4):
                envs.send(np.zeros(2, int), ids)
                ids = envs.recv()[-1]["env_id"]
        else:
            for _ in range(2):
                envs.step_async(np.zeros(4, int))
                envs.step_wait(timeout=10)
        cpu, wall = time.thread_time() - cpu, time.monotonic() - wall
        assert wall > 0.09 and cpu < 0.3 * wall, (cpu, wall)


def test_close_from_another_thread_ends_a_step_waiting_on_a_hung_helper():
    """The caller stepped its env and waits for the helper's, which hangs: close() from another
    thread ends the wait (ClosedEnvironmentError), and the hung helper is abandoned."""
    gate, entered = threading.Event(), threading.Event()

    class Hung(GateEnv):
        def step(self, action):
            entered.set()
            return super().step(action)

    envs = vecenv.ThreadVectorEnv([lambda: GateEnv(delay=0.3), lambda: Hung(gate)], num_workers=2)
    envs.reset(seed=0)
    closer = threading.Timer(0.3, lambda: entered.wait(10) and envs.close(timeout=0.3))
    closer.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(vecenv.ClosedEnvironmentError):
            envs.step(np.zeros(2, int))
        assert time.monotonic() - t0 < 5
    finally:
        closer.join()
        gate.set()
    for t in _vecenv_threads():
        t.join(5)
    assert not _vecenv_threads()


class _RaisingAsAcquired:
    """A lock whose acquire raises once it holds the lock, as a signal handler can when it runs
    the moment ``acquire`` (or ``__enter__``) returns."""

    def __init__(self) -> None:
        self.inner = threading.RLock()

    def acquire(self) -> None:
        self.inner.acquire()
        raise KeyboardInterrupt

    def release(self) -> None:
        self.inner.release()

    def _is_owned(self) -> bool:
        return self.inner._is_owned()


def test_a_lock_taken_through_locked_is_released_wherever_an_interrupt_lands():
    from vecenv.transports.spin import locked

    lock = _RaisingAsAcquired()
    with pytest.raises(KeyboardInterrupt):
        locked(lock, lambda: None)
    assert not lock._is_owned()
    plain = threading.RLock()
    with pytest.raises(KeyboardInterrupt):
        locked(plain, lambda: (_ for _ in ()).throw(KeyboardInterrupt()))
    assert plain.acquire(blocking=False)
    plain.release()


def test_spin_until_reads_no_thread_clock_when_the_condition_holds_and_stops_when_the_core_is_lost(monkeypatch):
    """``spin_until``: true at once without reading this thread's clock (a system call); false
    once ``seconds`` pass; false early when the thread clock says this thread ran less than
    MIN_RUNNING of the time since its first read (its core is shared)."""
    from vecenv.transports import spin as work

    reads = []

    def running() -> float:  # the clock of a thread that never loses its core
        reads.append(1)
        return time.perf_counter()

    monkeypatch.setattr(work.time, "thread_time", running)
    assert work.spin_until(lambda: True, 1.0) and not reads
    start = time.perf_counter()
    assert not work.spin_until(lambda: False, 0.002)
    assert 0.002 <= time.perf_counter() - start < 0.5
    if sys.platform == "win32":  # its thread clock says 100 ns but moves every 15.6 ms
        assert not work._THREAD_CLOCK
    if work._THREAD_CLOCK:
        assert reads, "a spin longer than CHECK_S looks at the thread clock"
        monkeypatch.setattr(work.time, "thread_time", lambda: 5.0)  # a thread that never runs
        start = time.perf_counter()
        assert not work.spin_until(lambda: False, 1.0)
        assert time.perf_counter() - start < 0.5, "a spin without its core stops before its length"
        monkeypatch.setattr(work.time, "thread_time", lambda: 0.0)  # never runs: its core is lost
        start = time.perf_counter()
        assert not work.spin_until(lambda: False, 5.0)
        assert time.perf_counter() - start < 1.0
