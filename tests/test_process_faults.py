"""Worker processes against envs that fork, hold the GIL or install signal handlers: a worker's
death is always seen, an env's forked copy never speaks for the worker, workers end with their
caller whatever thread built them, and Ctrl-C is the caller's whatever the env installs."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import vecenv
from helpers import PlainEnv, needs_processes, pid_alive

pytestmark = [needs_processes, pytest.mark.skipif(not hasattr(os, "fork"), reason="envs that fork need os.fork")]


_Base = PlainEnv


class ForksHelper(_Base):
    """Forks a helper in ``__init__`` (a simulator server: fork without exec), which inherits
    every descriptor of the worker; segfaults on its second step."""

    def __init__(self, pidfile: str) -> None:
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        with open(pidfile, "a") as f:
            f.write(f"{pid}\n")
        self.t = 0

    def step(self, action):
        self.t += 1
        if self.t == 2:
            ctypes.string_at(0)  # segfault
        return super().step(action)


def _kill_helpers(pidfile) -> None:
    if pidfile.exists():
        for pid in pidfile.read_text().split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass


MAKERS = {
    "fork": lambda fns: vecenv.ProcessVectorEnv(fns, num_workers=2, context="fork"),
    "spawn": lambda fns: vecenv.ProcessVectorEnv(fns, num_workers=2, context="spawn"),
    "inline": lambda fns: vecenv.ProcessVectorEnv([*fns, _Base], num_workers=3, context="fork", inline=True),
    "timeout": lambda fns: vecenv.ProcessVectorEnv(fns, num_workers=2, context="fork", step_timeout=20),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", list(MAKERS))
def test_a_death_is_seen_while_a_forked_helper_holds_the_workers_descriptors(tmp_path, how):
    pidfile = tmp_path / "helpers"
    fns = [ForkingFactory(str(pidfile))] * 2
    try:
        envs = MAKERS[how](fns)
        try:
            envs.reset(seed=0)
            envs.step(np.zeros(envs.num_envs, np.int64))
            start = time.monotonic()
            with pytest.raises(vecenv.WorkerDiedError, match="SIGSEGV"):
                envs.step(np.zeros(envs.num_envs, np.int64))
            assert time.monotonic() - start < 5
        finally:
            start = time.monotonic()
            envs.close()
            assert time.monotonic() - start < 3, "close() waited for a death it had seen"
    finally:
        _kill_helpers(pidfile)


@pytest.mark.timeout(60)
def test_the_sb3_layer_sees_the_death_too(tmp_path):
    from vecenv.sb3 import SubprocVecEnv

    pidfile = tmp_path / "helpers"
    try:
        venv = SubprocVecEnv([ForkingFactory(str(pidfile))] * 2, start_method="fork")
        try:
            venv.reset()
            venv.step(np.zeros(2, np.int64))
            with pytest.raises(vecenv.WorkerDiedError, match="SIGSEGV"):
                venv.step(np.zeros(2, np.int64))
        finally:
            venv.close()
    finally:
        _kill_helpers(pidfile)


class ForkingFactory:
    """A picklable env_fn for :class:`ForksHelper` (spawn)."""

    def __init__(self, pidfile: str) -> None:
        self.pidfile = pidfile

    def __call__(self):
        return ForksHelper(self.pidfile)


# ---------------------------------------------------------------- an env's forked copy
class ForksAndExits(_Base):
    """Each step forks; the child (a copy of the worker) exits with ``sys.exit(0)``."""

    def step(self, action):
        pid = os.fork()
        if pid == 0:
            sys.exit(0)
        _, status = os.waitpid(pid, 0)
        return np.ones(2, np.float32), 1.0, False, False, {"child": os.waitstatus_to_exitcode(status)}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_an_envs_forked_copy_never_speaks_for_the_worker(context):
    with vecenv.ProcessVectorEnv([ForksAndExits] * 2, num_workers=2, context=context) as envs:
        envs.reset(seed=0)
        for _ in range(5):
            obs, rewards, _, _, infos = envs.step(np.zeros(2, np.int64))
            assert rewards.tolist() == [1.0, 1.0] and obs.tolist() == [[1, 1], [1, 1]]
            assert infos["child"].tolist() == [0, 0]  # the copy ended with its own exit status
        start = time.monotonic()
    assert time.monotonic() - start < 3, "close() needed its timeout"


# ---------------------------------------------------------------- the env's own SIGINT handler
def _exits_on_sigint(signum, frame):
    sys.exit(0)  # what a middleware's handler does (rclpy shuts down)


class InstallsSigint(_Base):
    def __init__(self) -> None:
        signal.signal(signal.SIGINT, _exits_on_sigint)


@pytest.mark.timeout(60)
@pytest.mark.skipif(os.name == "nt", reason="sends SIGINT to one process")
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_workers_ignore_sigint_whatever_handler_the_env_installs(context):
    with vecenv.ProcessVectorEnv([InstallsSigint] * 2, num_workers=2, context=context) as envs:
        envs.reset(seed=0)
        for p in envs.processes:
            os.kill(p.pid, signal.SIGINT)
        time.sleep(0.3)
        envs.step(np.zeros(2, np.int64))
        assert all(p.is_alive() for p in envs.processes)


# ---------------------------------------------------------------- an orphan holding the GIL
_ORPHAN_IN_NATIVE_CODE = textwrap.dedent(
    """
    import itertools, sys, threading
    import numpy as np
    import gymnasium as gym
    import vecenv

    class HoldsTheGil(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        action_space = gym.spaces.Discrete(2)
        def reset(self, *, seed=None, options=None):
            return np.zeros(2, np.float32), {}
        def step(self, action):
            sum(itertools.repeat(1))  # C code that never gives the GIL back

    if __name__ == "__main__":
        made = []
        builder = threading.Thread(target=lambda: made.append(
            vecenv.ProcessVectorEnv([HoldsTheGil] * 2, num_workers=2, context=sys.argv[1])))
        builder.start()
        builder.join()
        envs = made[0]
        envs.reset(seed=0)
        envs.step_async(np.zeros(2, np.int64))
        print(" ".join(str(p.pid) for p in envs.processes), flush=True)
        threading.Event().wait()
    """
)


@pytest.mark.timeout(90)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("context", ["fork", "spawn", "forkserver"])
def test_workers_built_on_a_thread_end_with_a_killed_caller_while_holding_the_gil(tmp_path, context):
    script = tmp_path / "orphan.py"
    script.write_text(_ORPHAN_IN_NATIVE_CODE)
    caller = subprocess.Popen([sys.executable, str(script), context], stdout=subprocess.PIPE, text=True)
    pids: list[int] = []
    try:
        pids = [int(p) for p in caller.stdout.readline().split()]
        assert len(pids) == 2
        time.sleep(0.3)  # the steps are inside the native loop
        caller.send_signal(signal.SIGKILL)
        caller.wait(10)
        deadline = time.monotonic() + 10
        while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in pids if pid_alive(p)], "workers outlived their caller"
    finally:
        caller.kill()
        caller.wait(10)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
