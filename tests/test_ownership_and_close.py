"""Nothing of a vector env acts outside the process that made it; close() finishes whatever an
interrupted close() began; memory shared by name is checked before use; an env's failing
close() is reported."""

from __future__ import annotations

import gc
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from helpers import PlainEnv, make_backend, needs_processes, pid_alive

pytestmark = needs_processes

_FORKED_CALLER = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    import vecenv

    if __name__ == "__main__":
        backend, context = sys.argv[1], sys.argv[2]
        kwargs = {"context": context, "inline": backend == "inline"} if backend in ("process", "inline") else {}
        backend = "process" if backend == "inline" else backend
        if backend != "serial":
            kwargs["num_workers"] = 2
        envs = vecenv.make("CartPole-v1", 4, backend=backend, **kwargs)
        envs.reset(seed=0)
        pid = os.fork()
        if pid == 0:  # the child: using the parent's env is a clear error; then a normal exit
            try:
                envs.step(np.zeros(4, np.int64))
                code = 3
            except vecenv.VecEnvError as exc:
                code = 0 if "fork" in str(exc) and str(os.getppid()) in str(exc) else 4
            sys.exit(code)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status), flush=True)
        for _ in range(3):
            envs.step(np.zeros(4, np.int64))
        print("alive", all(p.is_alive() for p in getattr(envs, "processes", [])), flush=True)
        envs.close()
        print("closed", flush=True)
    """
)


@pytest.mark.timeout(60)
@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks the caller")
@pytest.mark.parametrize(("backend", "context"), [("process", "fork"), ("process", "spawn"), ("inline", "fork"),
                                                  ("thread", "-"), ("serial", "-")])
def test_a_forked_callers_child_leaves_the_parents_vector_env_alone(tmp_path, backend, context):
    script = tmp_path / "forked_caller.py"
    script.write_text(_FORKED_CALLER)
    done = subprocess.run([sys.executable, str(script), backend, context], capture_output=True, text=True, timeout=50)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:3] == ["child 0", "alive True", "closed"], (done.stdout, done.stderr[-3000:])


# ---------------------------------------------------------------- an interrupted close()
class SlowClose(PlainEnv):
    def close(self):
        time.sleep(1.0)


class _Plain(SlowClose):
    def close(self):
        pass


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.timeout(60, method="thread")  # the test owns SIGALRM
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts /proc/self/fd")
@pytest.mark.parametrize("backend", ["process", "inline", "thread"])
def test_a_second_close_finishes_what_an_interrupted_one_began(backend):
    inline = {"inline": True} if backend == "inline" else {}
    make_backend("process" if inline else backend, [_Plain] * 2, **inline).close()  # what lasts (a resource tracker)
    before = _fds()
    envs = make_backend("process" if inline else backend, [SlowClose] * 4, **inline)
    envs.reset(seed=0)
    pids = [p.pid for p in getattr(envs, "processes", [])]

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(KeyboardInterrupt):
            envs.close()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    envs.close()
    assert not [p for p in pids if pid_alive(p)]
    del envs  # the portable mechanism's mapping holds a descriptor while its arrays live
    gc.collect()
    assert _fds() <= before, "descriptors leaked"


# ---------------------------------------------------------------- /dev/shm nearly full
_SHM_FULL = textwrap.dedent(
    """
    import numpy as np
    import gymnasium as gym
    import vecenv

    class Big(gym.Env):
        observation_space = gym.spaces.Box(0, 255, (256, 256, 4), np.uint8)
        action_space = gym.spaces.Discrete(2)
        def reset(self, *, seed=None, options=None):
            return np.full((256, 256, 4), 7, np.uint8), {}
        def step(self, action):
            return np.full((256, 256, 4), 7, np.uint8), 0.0, False, False, {}

    if __name__ == "__main__":
        try:
            envs = vecenv.ProcessVectorEnv([Big] * 4, num_workers=2, context="fork", mechanism="portable")
        except OSError as exc:
            print("refused:", exc, flush=True)
        else:
            envs.reset(seed=0)
            print("ran", flush=True)
            envs.close()
    """
)


def _can_unshare() -> bool:
    if shutil.which("unshare") is None or not sys.platform.startswith("linux"):
        return False
    return subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0


@pytest.mark.timeout(60)
@pytest.mark.skipif(not _can_unshare(), reason="needs `unshare -m` (a mount namespace) to shrink /dev/shm")
def test_a_nearly_full_dev_shm_is_a_clear_error_not_sigbus(tmp_path):
    script = tmp_path / "shm_full.py"
    script.write_text(_SHM_FULL)
    shell = f"mount -t tmpfs -o size=1m tmpfs /dev/shm && exec {sys.executable} {script}"
    done = subprocess.run(["unshare", "-m", "sh", "-c", shell], capture_output=True, text=True, timeout=50,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-3000:])
    assert "refused:" in done.stdout and "/dev/shm" in done.stdout, done.stdout
    assert "bytes" in done.stdout, done.stdout


# ---------------------------------------------------------------- an env's close() that raises
class BadClose(SlowClose):
    def close(self):
        raise ValueError("the simulator would not quit")


@pytest.mark.timeout(60)
def test_an_envs_failing_close_is_reported_as_a_warning_naming_it(backend):
    envs = make_backend(backend, [SlowClose, BadClose])
    envs.reset(seed=0)
    with pytest.warns(RuntimeWarning, match=r"env 1 .*BadClose.*ValueError: the simulator would not quit"):
        envs.close()

