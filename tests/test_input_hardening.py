"""The caller's input, refused before anything reaches a worker, with an error that says why:
action values that would wrap around in their buffer, reset options that are not a dict,
numpy integers as counts, step_timeout where no worker can be ended, and a second thread
calling into a vector env that is already busy (one caller at a time)."""

from __future__ import annotations

import threading
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import vecenv
from helpers import RandomAlarms, make_backend
from vecenv.spaces import BatchBuffer
from vecenv.testing import CountingEnv, FaultyEnv

LOCAL_BACKENDS = ["serial", "thread", "process"]


# ---------------------------------------------------------------- action values that do not fit
@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend_name", LOCAL_BACKENDS)
def test_action_values_that_do_not_fit_the_buffer_dtype_are_refused(backend_name):
    """MultiBinary(3) actions live in int8: 300 would be stored as 44."""
    with make_backend(backend_name, [CountingEnv] * 2) as envs:
        envs.reset(seed=0)
        actions = np.array([[0, 1, 300], [1, 0, 1]])
        with pytest.raises(ValueError, match=r"^actions: value 300 does not fit MultiBinary\(3\), whose values "
                                             r"are stored as int8 \(-128\.\.127\)"):
            envs.step(actions)
        with pytest.raises(ValueError, match=r"value -129 does not fit"):
            envs.step(-129 * np.ones((2, 3), np.int64))
        assert envs.get_attr("t") == (0, 0), "nothing was sent to the envs"
        envs.step(np.ones((2, 3), np.int64))  # values that fit, in a wider dtype, are taken
        assert envs.get_attr("t") == (1, 1)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "space, bad, shown",
    [
        (spaces.MultiDiscrete([3, 4], dtype=np.int8), np.array([[1, 200], [0, 0]]), "200"),
        (spaces.Discrete(4, dtype=np.int32), np.array([2**40, 1]), str(2**40)),
        (spaces.MultiDiscrete([3, 4], dtype=np.uint8), np.array([[-1, 0], [0, 0]]), "-1"),
        (spaces.MultiBinary(2), np.array([[0, 2**63]], np.uint64).repeat(2, 0), str(2**63)),
    ],
)
def test_every_integer_leaf_refuses_values_outside_its_dtype(space, bad, shown):
    buf = BatchBuffer(spaces.Dict({"a": space}), 2)
    with pytest.raises(ValueError, match=rf"^acts\['a'\]: value {shown} does not fit "):
        buf.assign({"a": bad}, what="acts")
    assert not buf.read()["a"].any(), "a refused batch writes nothing"
    single = BatchBuffer(space, 2)
    with pytest.raises(ValueError, match=rf"^actions: value {shown} does not fit "):
        single.assign(bad)  # the one-leaf fast path checks as well
    single.assign(np.zeros_like(bad))


# ---------------------------------------------------------------- reset options
@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend_name", LOCAL_BACKENDS)
def test_reset_options_must_be_a_dict(backend_name):
    with make_backend(backend_name, [FaultyEnv] * 2) as envs:
        envs.reset(seed=0)
        for options, name in ((5, "int"), (["reset_mask"], "list"), ("abc", "str")):
            with pytest.raises(TypeError, match=rf"^reset\(options=...\): options must be a dict or None, got {name}"):
                envs.reset(seed=1, options=options)
        assert envs.get_attr("resets") == (1, 1), "nothing was sent to the envs"
        envs.reset(seed=1, options={"anything": 1})
        envs.step(np.zeros(2, int))


# ---------------------------------------------------------------- counts
@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend_name", LOCAL_BACKENDS)
def test_num_envs_may_be_any_integral_number(backend_name):
    with make_backend(backend_name, FaultyEnv, num_envs=np.int64(2)) as envs:
        assert envs.num_envs == 2 and type(envs.num_envs) is int
        envs.reset(seed=0)
        assert envs.step(np.zeros(2, int))[0].shape == (2, 2)
    with make_backend(backend_name, [FaultyEnv] * 2, num_envs=np.int32(2)) as envs:
        assert envs.num_envs == 2
    for bad in (True, 2.0, np.float64(2.0), 0, -1, np.int64(0), "2"):
        with pytest.raises(ValueError, match=r"^num_envs: expected an int >= 1, got "):
            vecenv.make(FaultyEnv, bad, backend=backend_name)


# ---------------------------------------------------------------- step_timeout without workers to end
@pytest.mark.timeout(30)
def test_step_timeout_on_in_process_backends_says_why_it_is_refused():
    said = r"step_timeout needs a backend that can end a stuck worker: backend='process' or 'ray'"
    with pytest.raises(ValueError, match=said + r".*threads of your process.*cannot be interrupted"):
        vecenv.make(FaultyEnv, 2, backend="thread", step_timeout=1.0)
    with pytest.raises(ValueError, match=said + r".*threads of your process"):
        vecenv.ThreadVectorEnv([FaultyEnv] * 2, num_workers=2, step_timeout=1.0)
    with pytest.raises(ValueError, match=said + r".*The serial backend runs its envs in your process"):
        vecenv.SerialVectorEnv([FaultyEnv], step_timeout=1.0)


# ---------------------------------------------------------------- one caller at a time
def _start_slow_step(envs, n: int):
    """Step ``envs`` in a thread of its own (each step takes a while); its result or error."""
    out: dict = {}

    def run():
        try:
            out["result"] = envs.step(np.zeros(n, int))
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    thread = threading.Thread(target=run, name="stepper")
    thread.start()
    deadline = time.monotonic() + 5
    while envs._guard.holder is None and time.monotonic() < deadline:
        time.sleep(0.005)
    return thread, out


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend_name", LOCAL_BACKENDS)
def test_a_second_thread_is_refused_while_a_step_runs(backend_name):
    slow = [lambda: FaultyEnv("slow", at=1, sleep=0.4)] * 2
    with make_backend(backend_name, slow) as envs:
        envs.reset(seed=0)
        thread, out = _start_slow_step(envs, 2)
        refused = r"^one caller at a time: {}\(\) was called from thread 'MainThread' while thread " \
                  r"'stepper' is already running step\(\) on this vector env"
        t0 = time.monotonic()
        with pytest.raises(RuntimeError, match=refused.format("step")):
            envs.step(np.zeros(2, int))
        with pytest.raises(RuntimeError, match=refused.format("reset")):
            envs.reset(seed=0)
        with pytest.raises(RuntimeError, match=refused.format("recv")):
            envs.recv()
        with pytest.raises(RuntimeError, match=refused.format("call")):
            envs.get_attr("steps")
        assert time.monotonic() - t0 < 0.3, "refused at once, never waiting"
        thread.join(10)
        assert not thread.is_alive() and "error" not in out, out
        assert out["result"][0].shape == (2, 2)  # the first caller's step was not disturbed
        assert envs.get_attr("steps") == (1, 1)
        envs.step(np.zeros(2, int))  # and the env serves the next caller, from any thread
        assert envs.get_attr("steps") == (2, 2)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend_name", ["serial", "thread"])
def test_threads_racing_on_one_env_get_steps_or_a_refusal_never_a_hang(backend_name):
    with make_backend(backend_name, [FaultyEnv] * 4) as envs:
        envs.reset(seed=0)
        counts = {"ok": 0, "refused": 0}
        others: list = []
        lock = threading.Lock()

        def hammer():
            for _ in range(300):
                try:
                    envs.step(np.zeros(4, int))
                    key = "ok"
                except RuntimeError as exc:
                    if "one caller at a time" not in str(exc):
                        raise
                    key = "refused"
                except BaseException as exc:  # noqa: BLE001 - any other error fails the test
                    others.append(repr(exc))
                    return
                with lock:
                    counts[key] += 1

        threads = [threading.Thread(target=hammer) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not any(t.is_alive() for t in threads) and not others, others
        assert counts["ok"] + counts["refused"] == 1200 and counts["ok"] > 0
        with vecenv.SerialVectorEnv([FaultyEnv] * 4) as ref:  # every step taken was one whole step
            ref.reset(seed=0)
            for _ in range(counts["ok"]):
                ref.step(np.zeros(4, int))
            assert envs.get_attr("steps") == ref.get_attr("steps")


@pytest.mark.timeout(120, method="thread")  # the test owns SIGALRM
@pytest.mark.parametrize("backend_name", ["serial", "thread"])
def test_interrupts_never_leave_the_caller_guard_held(backend_name):
    """KeyboardInterrupts land at random points of steps; afterwards another thread gets in."""
    interrupts = 0
    with RandomAlarms(1) as alarms, \
            make_backend(backend_name, lambda: gym.make("CartPole-v1"), num_envs=2) as envs:
        envs.reset(seed=0)
        steps = lambda: [envs.step(np.zeros(2, np.int64)) for _ in range(20)]  # noqa: E731
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            try:
                interrupts += alarms.interrupted(steps, 5e-6, 200e-6)
            except (gym.error.AlreadyPendingCallError, vecenv.VecEnvError):
                envs.reset(seed=0)  # the env says what to do: do it
            assert envs._guard.holder is None
        done: list = []
        other = threading.Thread(target=lambda: done.append(envs.reset(seed=0)))
        other.start()
        other.join(10)
        assert done, "another thread could not get in after the interrupts"
    assert interrupts >= 50


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend_name", ["serial", "process"])
def test_a_bool_or_a_string_is_not_a_timeout(backend_name):
    """recv(False) reads as a flag; every wait refuses it before touching the pending call."""
    with make_backend(backend_name, [FaultyEnv] * 2) as envs:
        envs.reset_async(seed=0)
        with pytest.raises(TypeError, match=r"reset_wait\(timeout=...\): expected a number of seconds or None, got False"):
            envs.reset_wait(False)
        envs.reset_wait(5)  # the reset was still pending: nothing was lost
        envs.send(np.zeros(2, int))
        for bad in (True, "1"):
            with pytest.raises(TypeError, match=r"recv\(timeout=...\)"):
                envs.recv(bad)
        with pytest.raises(TypeError, match=r"recv\(timeout=...\)"):
            envs.step_wait(timeout=False)
        assert len(envs.recv(5.0)) == 5
        envs.call_async("reset")
        with pytest.raises(TypeError, match=r"call_wait\(timeout=...\)"):
            envs.call_wait(True)
        assert len(envs.call_wait(np.float64(5.0))) == 2
        with pytest.raises(TypeError, match=r"close\(timeout=...\)"):
            envs.close(timeout=True)
        assert not envs.closed
