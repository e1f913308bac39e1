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


def test_default_workers_and_groups_live_in_their_threads():
    with vecenv.ThreadVectorEnv([GateEnv] * 5) as envs:
        assert envs.backend == "thread"
        assert envs.num_workers == min(usable_cores(), 5)
    with vecenv.make([GateEnv] * 4, backend="thread", num_workers=2) as envs:
        envs.reset(seed=0)
        envs.step(np.zeros(4, int))
        made = envs.apply(lambda env: env.unwrapped.made_in)
        stepped = envs.apply(lambda env: sorted(env.unwrapped.stepped_in))
        assert made == ["vecenv-thread-0"] * 2 + ["vecenv-thread-1"] * 2
        assert stepped == [[name] for name in made]  # each env is stepped where it was made
    assert not _vecenv_threads()


def test_workers_step_concurrently():
    """Both groups must be inside step() at once, or the barrier times out."""
    barrier = threading.Barrier(2, timeout=10)
    with vecenv.ThreadVectorEnv([lambda: GateEnv(barrier)] * 2, num_workers=2) as envs:
        envs.reset(seed=0)
        for _ in range(3):
            obs, *_ = envs.step(np.zeros(2, int))
        assert obs[:, 0].tolist() == [3.0, 3.0]
        assert not barrier.broken


def test_async_batches_return_the_fastest_envs_first():
    fns = [lambda: GateEnv(delay=0.3), lambda: GateEnv()] * 2  # worker w holds envs 2w, 2w+1
    fns = [fns[0], fns[0], fns[1], fns[1]]  # worker 0: slow envs 0,1; worker 1: fast envs 2,3
    with vecenv.ThreadVectorEnv(fns, num_workers=2, batch_size=2) as envs:
        obs, infos = envs.reset(seed=0)
        ids = infos["env_id"]
        fast_first = 0
        for _ in range(4):
            obs, _, _, _, infos = envs.step(np.zeros(2, int), ids)
            ids = infos["env_id"]
            fast_first += sorted(ids.tolist()) == [2, 3]
        assert fast_first >= 3, "the fast worker's envs must come back while the slow one steps"
        # the slow envs' results arrive later, intact
        envs.send(np.zeros(2, int), ids)
        got = {}
        deadline = time.monotonic() + 10
        while not {0, 1} <= set(got) and time.monotonic() < deadline:
            obs, _, _, _, infos = envs.recv()
            got.update(zip(infos["env_id"].tolist(), obs[:, 0].tolist(), strict=True))
            ids = infos["env_id"]
            if not {0, 1} <= set(got):
                envs.send(np.zeros(2, int), ids)
        assert set(got) >= {0, 1} and got[0] == got[1] >= 1.0


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
        vecenv.ThreadVectorEnv([GateEnv, GateEnv, GateEnv, broken], num_workers=2)
    assert info.value.worker == 1 and "Traceback" in info.value.remote_traceback
    time.sleep(0.05)
    assert not _vecenv_threads()


def test_close_joins_threads_and_closes_envs_in_their_thread():
    closed_in = []

    class Closing(GateEnv):
        def close(self):
            closed_in.append(threading.current_thread().name)

    envs = vecenv.ThreadVectorEnv([Closing] * 3, num_workers=3)
    envs.reset(seed=0)
    envs.close()
    envs.close()
    assert sorted(closed_in) == ["vecenv-thread-0", "vecenv-thread-1", "vecenv-thread-2"]
    assert not _vecenv_threads()
    with pytest.raises(vecenv.ClosedEnvironmentError):
        envs.step(np.zeros(3, int))


def test_close_with_a_hung_env_returns_in_bounded_time():
    gate = threading.Event()
    envs = vecenv.ThreadVectorEnv([lambda: GateEnv(gate), GateEnv], num_workers=2)
    envs.reset(seed=0)
    envs.step_async(np.zeros(2, int))
    t0 = time.monotonic()
    envs.close(timeout=0.3)
    assert time.monotonic() - t0 < 2
    stuck = _vecenv_threads()
    assert [t.name for t in stuck] == ["vecenv-thread-0"] and stuck[0].daemon
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
        assert len(_vecenv_threads()) == 2
