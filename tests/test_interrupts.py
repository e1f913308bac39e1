"""Interruption safety: an exception at any point leaves the vector env consistent or clearly
needing reset/close, never deadlocked, never returning stale data."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

import gymnasium as gym
import numpy as np
import pytest

import vecenv
from helpers import RandomAlarms, assert_same
from vecenv.engine import CallState

LAYOUTS = {
    "serial": dict(backend="serial"),
    "thread": dict(backend="thread", num_workers=2),
    "process": dict(backend="process", num_workers=2, context="fork"),
    "inline": dict(backend="process", num_workers=2, context="fork", inline=True),
}


def _cartpole():
    return gym.make("CartPole-v1")


def _rollout(envs, seed: int, steps: int = 5):
    out = [envs.reset(seed=seed)]
    acts = np.ones(envs.num_envs, dtype=np.int64)
    out += [envs.step(acts) for _ in range(steps)]
    return tuple(out)


@pytest.mark.timeout(120, method="thread")  # the test owns SIGALRM
@pytest.mark.parametrize("layout", ["serial", "thread", "process", "inline"])
def test_timed_interrupts_during_steps_leave_a_consistent_env(layout):
    """Hundreds of KeyboardInterrupts land at random points of a step loop; after each burst
    reset(seed=s) gives the serial backend's data and nothing blocks."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, ())
    handler = signal.getsignal(signal.SIGINT)
    interrupts = 0
    others: list = []
    with RandomAlarms(0) as alarms, vecenv.make(_cartpole, 4, **LAYOUTS[layout]) as envs, \
            vecenv.make(_cartpole, 4, backend="serial") as ref:
        acts = np.zeros(4, dtype=np.int64)
        steps = lambda: [envs.step(acts) for _ in range(50)]  # noqa: E731
        for burst in range(40):
            envs.reset(seed=burst)
            deadline = time.monotonic() + 0.25
            while time.monotonic() < deadline:
                try:
                    interrupts += alarms.interrupted(steps, 20e-6, 400e-6)
                except (gym.error.AlreadyPendingCallError, vecenv.VecEnvError) as exc:
                    others.append(repr(exc)[:120])
                    envs.reset(seed=burst)  # the env says what to do: do it
            assert_same(_rollout(envs, burst), _rollout(ref, burst))
        # a fresh env still starts and steps (no lock left held, none inherited by a child)
        with vecenv.make(_cartpole, 2, **LAYOUTS[layout]) as fresh:
            fresh.reset(seed=1)
            fresh.step(np.zeros(2, dtype=np.int64))
    assert interrupts >= 100, (interrupts, others)
    assert signal.pthread_sigmask(signal.SIG_BLOCK, ()) == mask  # no signal left blocked
    assert signal.getsignal(signal.SIGINT) is handler  # nor SIGINT left held


@pytest.mark.timeout(60)
@pytest.mark.parametrize("layout", ["process", "inline", "thread", "serial"])
def test_interrupt_inside_send_needs_reset_then_works(layout):
    """An interrupt after one worker got its command but before the others did."""
    with vecenv.make(_cartpole, 4, **LAYOUTS[layout]) as envs, \
            vecenv.make(_cartpole, 4, backend="serial") as ref:
        envs.reset(seed=3)
        transport = envs._transport
        send = transport.send
        calls = []

        def flaky(commands):  # the round's commands go out one by one, until the second
            for worker, command in commands:
                calls.append(worker)
                if len(calls) == 2:
                    raise KeyboardInterrupt
                send([(worker, command)])

        transport.send = flaky
        if transport.num_workers == 1:  # one worker: interrupt it mid-command instead
            transport.send = lambda commands: (_ for _ in ()).throw(KeyboardInterrupt())
        with pytest.raises(KeyboardInterrupt):
            envs.step(np.zeros(4, dtype=np.int64))
        transport.send = send
        assert envs._flight.state is CallState.INTERRUPTED
        with pytest.raises(vecenv.VecEnvError, match="reset"):
            envs.step(np.zeros(4, dtype=np.int64))
        assert_same(_rollout(envs, 5), _rollout(ref, 5))


class _CrashThenBrokenFactory:
    """An env that segfaults on its 3rd step; building it again raises (marker file)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __call__(self):
        if os.path.exists(self.marker):
            raise RuntimeError("cannot rebuild this env")
        return _Segfaulting(self.marker)


class _Segfaulting(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (2,))
    action_space = gym.spaces.Discrete(2)

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t == 3:
            open(self.marker, "w").close()
            os.kill(os.getpid(), signal.SIGSEGV)
        return np.full(2, self.t / 10, np.float32), 1.0, False, False, {}


@pytest.mark.timeout(60)
def test_failed_restart_leaves_the_env_reporting_not_wedged(tmp_path):
    fns = [_CrashThenBrokenFactory(str(tmp_path / "m"))] * 2
    with vecenv.ProcessVectorEnv(fns, num_workers=2, context="fork", on_error="restart") as envs:
        envs.reset(seed=0)
        acts = np.zeros(2, dtype=np.int64)
        envs.step(acts)
        envs.step(acts)
        with pytest.raises(vecenv.EnvError, match="cannot rebuild"):
            envs.step(acts)
        with pytest.raises(gym.error.NoAsyncCallError):
            envs.step_wait()  # nothing pending: never the stale results of the failed step
        for _ in range(2):  # the dead worker is reported again, never AlreadyPendingCallError
            with pytest.raises(vecenv.VecEnvError) as info:
                envs.reset(seed=0)
            assert not isinstance(info.value, gym.error.AlreadyPendingCallError)


class _Slow(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (2,))
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        time.sleep(1.0)
        return np.zeros(2, np.float32), 0.0, False, False, {}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("layout", ["process", "thread"])
def test_close_from_another_thread_ends_a_blocked_step(layout):
    envs = vecenv.make(_Slow, 2, **LAYOUTS[layout])
    envs.reset(seed=0)
    closer = threading.Timer(0.2, envs.close)
    closer.start()
    start = time.monotonic()
    try:
        with pytest.raises((gym.error.ClosedEnvironmentError, vecenv.VecEnvError)):
            envs.step(np.zeros(2, dtype=np.int64))
        assert time.monotonic() - start < 10
    finally:
        closer.join()
        envs.close()
    assert envs.closed


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="no signal masks on this platform")
def test_a_handler_raising_as_the_mask_changes_leaves_nothing_blocked(monkeypatch):
    """pthread_sigmask runs pending handlers before it returns, so it can raise after it blocked
    every signal; the section must still restore the caller's mask (else SIGALRM, SIGTERM and
    SIGCHLD stay blocked in this thread and in every process it starts)."""
    from vecenv.transports import signals

    real = signals._sigmask
    before = signal.pthread_sigmask(signal.SIG_BLOCK, ())

    def raising_after_block(how, mask):
        old = real(how, mask)
        if how == signal.SIG_BLOCK and len(mask) > 1:
            raise KeyboardInterrupt  # as a pending handler would, once the mask is changed
        return old

    monkeypatch.setattr(signals, "_sigmask", raising_after_block)
    with pytest.raises(KeyboardInterrupt):
        signals.deferred(pytest.fail, "the section must not run")
    monkeypatch.undo()
    assert signal.pthread_sigmask(signal.SIG_BLOCK, ()) == before
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.timeout(180, method="thread")  # the test owns SIGALRM
@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="no signal masks on this platform")
@pytest.mark.parametrize("section", ["deferred", "quietly_started"])
def test_ten_thousand_signal_landings_leave_the_mask_and_handler_as_they_were(section):
    """A handler that raises lands anywhere in and around sections, ten thousand times: at the
    first bytecode of __exit__ too, where CPython 3.12+ runs due handlers (no line of it has run
    yet). After each landing the mask and SIGINT's handler are the caller's again."""
    from vecenv.transports import signals

    held = {"deferred": signals.deferred,
            "quietly_started": lambda fn: signals.quietly_started(False, fn)}[section]

    def sections():
        for _ in range(200):
            held(int)

    mask = signal.pthread_sigmask(signal.SIG_BLOCK, ())
    handler = signal.getsignal(signal.SIGINT)
    idle = threading.Event()  # a thread that takes the alarm while the main thread blocks it
    other = threading.Thread(target=idle.wait, daemon=True)
    other.start()
    landed = tries = 0
    try:
        with RandomAlarms(1) as alarms:
            while landed < 10_000:
                tries += 1
                assert tries < 100_000, f"only {landed} landings"
                landed += alarms.interrupted(sections, 2e-6, 60e-6)
                now = signal.pthread_sigmask(signal.SIG_BLOCK, ())
                assert now == mask, f"landing {landed}: {sorted(now - mask)} left blocked"
                assert signal.getsignal(signal.SIGINT) is handler, f"landing {landed}: SIGINT left held"
    finally:
        idle.set()
        other.join(5)


@pytest.mark.timeout(30)
@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="no signal masks on this platform")
@pytest.mark.parametrize("section", ["deferred", "quietly_started"])
@pytest.mark.parametrize("receiver", ["main thread", "another thread"])
def test_a_ctrl_c_inside_a_section_is_raised_once_when_it_ends(section, receiver):
    """The kernel gives a process's SIGINT to any thread that does not block it (numpy's BLAS
    threads do not); wherever it lands, the section finishes and the KeyboardInterrupt comes
    after it, neither lost nor cutting the section in two."""
    from vecenv.transports import signals

    held = {"deferred": signals.deferred,
            "quietly_started": lambda fn: signals.quietly_started(True, fn)}[section]
    idle = threading.Event()
    other = threading.Thread(target=idle.wait, daemon=True)
    other.start()
    finished = []

    def section():
        target = threading.main_thread() if receiver == "main thread" else other
        signal.pthread_kill(target.ident, signal.SIGINT)
        time.sleep(0.2)  # the other thread takes it; a handler would run meanwhile
        finished.append(True)

    try:
        with pytest.raises(KeyboardInterrupt):
            held(section)
        assert finished == [True]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, ())
    finally:
        idle.set()
        other.join(5)


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="no signal masks on this platform")
def test_a_handler_raising_as_sigint_is_put_back_still_lets_it_be_put_back(monkeypatch):
    """signal.signal runs due handlers before it changes anything; one that raises as the section
    ends must not leave SIGINT's handler the section's note-taker for good."""
    import types

    from vecenv.transports import signals

    real = signals._native
    calls = []

    def raising_once_on_put_back(signum, handler):
        calls.append(handler)
        if len(calls) == 2:  # the put-back: a due SIGALRM handler raises before the change
            raise TimeoutError("a due handler raised")
        return real.signal(signum, handler)

    monkeypatch.setattr(signals, "_native", types.SimpleNamespace(
        getsignal=real.getsignal, signal=raising_once_on_put_back))
    def section():
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler

    with pytest.raises(TimeoutError, match="a due handler raised"):
        signals.deferred(section)
    assert len(calls) == 3 and signal.getsignal(signal.SIGINT) is signal.default_int_handler


class _CutInYourThread(gym.Wrapper):
    """Raises KeyboardInterrupt once, when armed, in a step that runs in the main thread (as a
    Ctrl-C lands while your thread steps its own group)."""

    armed = False

    def step(self, action):
        if _CutInYourThread.armed and threading.current_thread() is threading.main_thread():
            _CutInYourThread.armed = False
            raise KeyboardInterrupt
        return self.env.step(action)

    @staticmethod
    @contextlib.contextmanager
    def arming(armed=True):
        """Armed inside the block (when ``armed``), never after it."""
        _CutInYourThread.armed = armed
        try:
            yield
        finally:
            _CutInYourThread.armed = False


@pytest.mark.timeout(60)
def test_inline_group_cut_short_in_your_thread_is_healed_by_reset_at_once():
    """A Ctrl-C inside an env of the inline group (it steps in your thread, between posting the
    workers' steps and waiting for them) leaves no command that reset() would wait on: reset()
    returns without waiting out a drop timeout, and the next rollout is serial's."""
    with vecenv.make(_cartpole, 4, **LAYOUTS["inline"], wrappers=[_CutInYourThread]) as envs, \
            vecenv.make(_cartpole, 4, backend="serial") as ref:
        envs.reset(seed=3)
        with _CutInYourThread.arming(), pytest.raises(KeyboardInterrupt):
            envs.step(np.zeros(4, dtype=np.int64))
        assert envs._flight.state is CallState.INTERRUPTED
        started = time.monotonic()
        assert_same(_rollout(envs, 5), _rollout(ref, 5))
        assert time.monotonic() - started < 10  # DROP_TIMEOUT is 30 s
        assert not any(envs._transport.outstanding(w) for w in range(2))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("cut", ["after_queueing", "before_queueing", "inside_your_group"])
@pytest.mark.parametrize("groups", [1, 2, 4])
def test_thread_interrupt_anywhere_in_a_step_is_healed_by_reset(cut, groups):
    """An interruption that lands after the last group's command was queued, before it reached
    the transport, or inside an env your thread steps, must not leave reset() waiting for a
    reply that can never come: reset() settles each group, and the next rollout is serial's."""
    with vecenv.make(_cartpole, 4, backend="thread", num_workers=2, groups=groups,
                     wrappers=[_CutInYourThread]) as envs, \
            vecenv.make(_cartpole, 4, backend="serial") as ref:
        envs.reset(seed=3)
        transport = envs._transport
        if cut != "inside_your_group":
            send = transport.send

            def cut_send(commands):  # the round's commands go out one by one
                for w, command in commands:
                    if w == groups - 1:
                        if cut == "after_queueing":
                            send([(w, command)])
                        raise KeyboardInterrupt
                    send([(w, command)])

            transport.send = cut_send
        try:
            with _CutInYourThread.arming(cut == "inside_your_group"), pytest.raises(KeyboardInterrupt):
                envs.step(np.zeros(4, dtype=np.int64))
        finally:
            transport.__dict__.pop("send", None)
        assert envs._flight.state in (CallState.INTERRUPTED, CallState.WAITING_STEP)
        assert_same(_rollout(envs, 5), _rollout(ref, 5))
        assert not any(transport.outstanding(w) for w in range(groups))


@pytest.mark.timeout(60)
def test_a_wait_resumed_after_the_caller_was_cut_out_of_a_step_says_to_reset():
    """Ctrl-C inside an env the caller was stepping for the thread backend: waiting again
    (instead of reset()) ends at once with an error that says to reset, never hangs."""
    with vecenv.make(_cartpole, 4, backend="thread", num_workers=1) as envs:
        envs.reset(seed=0)
        group = envs._transport.groups[0]
        env = group.envs[1]
        step = env.step

        def interrupted(action):
            raise KeyboardInterrupt

        env.step = interrupted
        envs.step_async(np.zeros(4, dtype=np.int64))
        with pytest.raises(KeyboardInterrupt):
            envs.step_wait()
        env.step = step
        with pytest.raises(vecenv.VecEnvError, match="cut short by KeyboardInterrupt.*call reset"):
            envs.step_wait(timeout=5)
        envs.reset(seed=0)
        assert envs.step(np.zeros(4, dtype=np.int64))[0].shape == (4, 4)


@pytest.mark.timeout(60)
def test_process_reply_cut_after_its_frame_was_read_ends_the_worker_in_bounded_time(monkeypatch):
    """A reply's frame read but not marked taken (a handler that ran in spite of the deferral):
    the next fetch waits for a frame that will never come. It gives up after FRAME_TIMEOUT, ends
    the worker and says so, instead of waiting forever."""
    from vecenv.transports.process import transport as process_transport
    from vecenv.worker.commands import GetAttr

    monkeypatch.setattr(process_transport, "FRAME_TIMEOUT", 0.5)
    with vecenv.make(_cartpole, 4, backend="process", num_workers=2, context="fork") as envs:
        envs.reset(seed=0)
        t = envs._transport
        t.send([(1, GetAttr("spec"))])
        assert t.ready([1], 10) == [1]
        t.peers[1].read_frame(10)  # taken off the socket, never marked taken
        started = time.monotonic()
        with pytest.raises(vecenv.WorkerDiedError, match=r"worker 1 .*reply stalled for 0.5 s"):
            t.fetch(1)
        assert time.monotonic() - started < 5
        t.processes[1].join(5)
        assert t.processes[1].exitcode is not None and not t.outstanding(1)
