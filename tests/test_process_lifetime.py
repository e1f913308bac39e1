"""Process workers live exactly as long as they should: not less (an idle forkserver worker), not
more (a caller that died, a build that hangs), holding nothing of other vector envs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import gymnasium as gym
import numpy as np
import pytest

import vecenv
from helpers import (
    FAST_START,
    PlainEnv,
    exit_without_close,
    needs_processes,
    pid_alive,
    posix_mechanism_only,
)

pytestmark = needs_processes

CONTEXTS = ["fork", "spawn", "forkserver"]


_Base = PlainEnv


class _HangingBuild(_Base):
    def __init__(self):
        time.sleep(3600)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("context", CONTEXTS)
def test_an_idle_worker_outlives_a_pause(context):
    """A pause longer than any watchdog period (a PPO update) does not end the workers."""
    with vecenv.make("CartPole-v1", 2, backend="process", num_workers=2, context=context) as envs:
        envs.reset(seed=0)
        time.sleep(2.5)
        envs.step(np.zeros(2, np.int64))
        assert all(p.is_alive() for p in envs.processes)


@pytest.mark.timeout(60)
def test_a_hanging_build_is_ended_after_start_timeout():
    fns = [_Base, _Base, _HangingBuild, _Base]
    start = time.monotonic()
    with pytest.raises(vecenv.StepTimeoutError, match="start_timeout=1") as info:
        vecenv.ProcessVectorEnv(fns, num_workers=2, context=FAST_START, start_timeout=1.0)
    assert time.monotonic() - start < 15
    assert info.value.env_indices == [2, 3] and info.value.worker == 1


@pytest.mark.timeout(60)
def test_start_timeout_is_validated():
    with pytest.raises(ValueError, match="start_timeout"):
        vecenv.ProcessVectorEnv([_Base], start_timeout=0)


class _CrashThenHangFactory:
    """Builds an env that dies on its 2nd step; building it again hangs (marker file)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __call__(self):
        if os.path.exists(self.marker):
            time.sleep(3600)
        return _DiesOnStep2(self.marker)


class _DiesOnStep2(_Base):
    def __init__(self, marker: str) -> None:
        self.marker, self.t = marker, 0

    def step(self, action):
        self.t += 1
        if self.t == 2:
            open(self.marker, "w").close()
            os._exit(3)
        return super().step(action)


@pytest.mark.timeout(60)
def test_a_hanging_rebuild_is_ended_after_start_timeout(tmp_path):
    fns = [_CrashThenHangFactory(str(tmp_path / "m"))] * 2
    with vecenv.ProcessVectorEnv(fns, num_workers=2, context=FAST_START, on_error="restart",
                                 start_timeout=1.0) as envs:
        envs.reset(seed=0)
        envs.step(np.zeros(2, np.int64))
        start = time.monotonic()
        with pytest.raises(vecenv.StepTimeoutError, match="start_timeout"):
            envs.step(np.zeros(2, np.int64))
        assert time.monotonic() - start < 20
        with pytest.raises(vecenv.VecEnvError):  # the ended worker is reported, not waited on
            envs.reset(seed=0)


def _memfd_mappings(pid: int) -> int:
    with open(f"/proc/{pid}/maps") as f:
        return sum("memfd:vecenv" in line for line in f)


@posix_mechanism_only
@pytest.mark.timeout(60)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_forked_worker_holds_nothing_of_another_vector_env():
    big = lambda: gym.make("CartPole-v1")  # noqa: E731
    closed = vecenv.make(big, 2, backend="process", num_workers=1, context="fork")
    closed.close()  # closed, but its arrays are still alive here (and mapped)
    a = vecenv.make(big, 2, backend="process", num_workers=1, context="fork")
    try:
        with vecenv.make(big, 2, backend="process", num_workers=1, context="fork") as b:
            b.reset(seed=0)
            worker = b.processes[0].pid
            assert _memfd_mappings(worker) == 1  # its own block, not a's
            fds = os.listdir(f"/proc/{worker}/fd")
            links = [os.readlink(f"/proc/{worker}/fd/{fd}") for fd in fds if os.path.exists(f"/proc/{worker}/fd/{fd}")]
            assert not any("memfd:vecenv" in link for link in links)
            caller_ends = {os.readlink(f"/proc/self/fd/{peer.fd}") for e in (a, b) for peer in e._transport.peers}
            assert not caller_ends & set(links)  # no caller's end: a's, or of its own socket
    finally:
        a.close()
    assert closed.closed


_ORPHAN = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    import gymnasium as gym
    import vecenv

    class Hangs(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        action_space = gym.spaces.Discrete(2)
        def reset(self, *, seed=None, options=None):
            return np.zeros(2, np.float32), {}
        def step(self, action):
            time.sleep(3600)

    if __name__ == "__main__":
        envs = vecenv.ProcessVectorEnv([Hangs, Hangs], num_workers=2, context=sys.argv[1])
        envs.reset(seed=0)
        envs.step_async(np.zeros(2, np.int64))
        print(" ".join(str(p.pid) for p in envs.processes), flush=True)
        time.sleep(3600)
    """
)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone before the open, or during the read
        return False


@pytest.mark.timeout(90)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("context", CONTEXTS)
def test_workers_end_with_a_killed_caller_even_inside_a_hung_step(tmp_path, context):
    script = tmp_path / "orphan.py"
    script.write_text(_ORPHAN)
    caller = subprocess.Popen([sys.executable, str(script), context], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in caller.stdout.readline().split()]
        assert len(pids) == 2
        caller.send_signal(signal.SIGKILL)
        caller.wait(10)
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in pids if _alive(p)], "workers outlived their caller"
    finally:
        caller.kill()
        caller.wait(10)


class _BadInfo(_Base):
    def step(self, action):
        return np.zeros(2, np.float32), 0.0, False, False, {"lock": __import__("threading").Lock()}


@pytest.mark.timeout(60)
def test_an_info_that_cannot_be_pickled_names_its_env():
    with vecenv.ProcessVectorEnv([_Base, _BadInfo], num_workers=1, context=FAST_START) as envs:
        envs.reset(seed=0)
        with pytest.raises(vecenv.EnvError, match="info cannot be pickled") as info:
            envs.step(np.zeros(2, np.int64))
        assert info.value.env_index == 1 and info.value.method.startswith("step")


@pytest.mark.timeout(60)
def test_an_env_fn_that_cannot_be_unpickled_in_the_worker_names_its_env():
    def broken():
        raise ValueError("this env_fn cannot be rebuilt here")

    class Unloadable:
        def __call__(self):
            return _Base()

        def __reduce__(self):
            return (broken, ())

    fns = [lambda: _Base(), Unloadable()]
    with pytest.raises(vecenv.EnvError, match="cannot be rebuilt here") as info:
        vecenv.ProcessVectorEnv(fns, num_workers=1, context="spawn")
    assert info.value.env_index == 1 and "unpickling" in info.value.method


_STARTING = textwrap.dedent(
    """
    import sys
    import vecenv

    if __name__ == "__main__":
        print("ready", flush=True)
        while True:  # workers are always starting when the Ctrl-C comes
            with vecenv.make("CartPole-v1", 3, backend="process", num_workers=3, context=sys.argv[1]):
                pass
    """
)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_ctrl_c_while_workers_start_prints_one_traceback(tmp_path, context):
    """Ctrl-C reaches the whole process group; the workers starting up stay quiet."""
    script = tmp_path / "starting.py"
    script.write_text(_STARTING)
    caller = subprocess.Popen([sys.executable, str(script), context], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert caller.stdout.readline().strip() == "ready"
        time.sleep(1.5)  # some workers are importing, some are built
        os.killpg(caller.pid, signal.SIGINT)
        _, err = caller.communicate(timeout=30)
    finally:
        if caller.poll() is None:
            os.killpg(caller.pid, signal.SIGKILL)
            caller.wait(10)
    assert caller.returncode != 0
    assert err.rstrip().endswith("KeyboardInterrupt"), err  # the caller's
    # a worker's frames; the caller's own may pass through multiprocessing/popen_forkserver.py
    for child_frame in ("spawn_main", "multiprocessing/forkserver.py", "_bootstrap", "process/child.py"):
        assert child_frame not in err, err  # and no worker's


class _Exits(_Base):
    def __init__(self, how: str) -> None:
        self.how = how

    def step(self, action):
        if self.how == "exit":
            raise SystemExit(5)
        raise KeyboardInterrupt


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("how", "shown"), [("exit", "SystemExit"), ("interrupt", "KeyboardInterrupt")])
def test_an_env_that_exits_in_a_worker_process_is_reported_as_that_env_failing(how, shown):
    """In a worker process no Ctrl-C lands: an exit raised there is the env's."""
    fns = [_Base, lambda: _Exits(how)]
    with vecenv.make(fns, num_workers=1, backend="process", context=FAST_START) as envs:
        envs.reset(seed=0)
        with pytest.raises(vecenv.EnvError, match=shown) as info:
            envs.step(np.zeros(2, np.int64))
        assert info.value.env_index == 1 and info.value.method == "step"
        envs.reset(seed=0)  # the worker lives on
    with vecenv.make(fns, num_workers=1, on_error="restart", backend="process", context=FAST_START) as envs:
        envs.reset(seed=0)
        _, _, _, truncs, infos = envs.step(np.zeros(2, np.int64))
        assert truncs.tolist() == [False, True] and shown in infos["restart_reason"][1]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("how, exc", [("exit", SystemExit), ("interrupt", KeyboardInterrupt)])
def test_an_env_that_exits_on_a_thread_exits_the_caller_as_serially(threads, how, exc):
    """Threads step envs for the caller, whichever thread takes an env: an exit the env raises
    is the caller's, as on the serial backend (never an env failure to restart), and the vector
    env is usable after it."""
    fns = [_Base, lambda: _Exits(how)]
    for on_error in ("raise", "restart"):
        with vecenv.make(fns, backend="thread", num_workers=threads, on_error=on_error) as envs:
            for _ in range(3):
                envs.reset(seed=0)
                with pytest.raises(exc):
                    envs.step(np.zeros(2, np.int64))
            assert envs.reset(seed=0)[0].shape == (2, 2)


# ---------------------------------------------------------------- interpreter exit without close()
EXIT_CASES = [("fork", "idle"), ("fork", "hung"), *((c, "pending") for c in CONTEXTS)]


@pytest.mark.timeout(120)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize(("context", "state"), EXIT_CASES)
def test_workers_end_at_interpreter_exit_without_close(tmp_path, context, state):
    """docs/errors.md: interpreter exit ends every worker, as close() would (idle, mid-step, hung)."""
    done, pids, _ = exit_without_close(tmp_path, "process", context, state)
    assert len(pids) == 2, done.stderr[-3000:]
    deadline = time.monotonic() + 30  # a generous bound: they end at exit, not on a timer
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if pid_alive(p)], "workers outlived their caller's interpreter"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("state", ["idle", "pending", "hung"])
def test_interpreter_exit_without_close_is_an_orderly_close(tmp_path, state):
    """... and it is close(): the program exits cleanly and every env that is not stuck is
    closed in its worker."""
    done, pids, closed = exit_without_close(tmp_path, "process", "fork", state)
    assert len(pids) == 2
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    assert "Traceback" not in done.stderr and "Fatal" not in done.stderr, done.stderr[-3000:]
    assert closed == (0 if state == "hung" else 4)
