"""Only backend="auto" reads or writes vecenv's files (its calibration cache and its registry of
live runs): a vector env built with an explicit backend, and every drop-in class, opens and
creates no file (shared memory on Linux is anonymous: memfd)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from helpers import needs_processes

SCRIPT = textwrap.dedent(
    """
    import os, sys
    import gymnasium as gym, numpy as np
    import vecenv, vecenv.sb3, vecenv.envpool

    def build_and_step(make):
        envs = make()
        envs.reset()
        envs.step(np.zeros(envs.num_envs, dtype=np.int64))
        envs.close()

    cartpole = lambda: gym.make("CartPole-v1")
    builders = {
        "SyncVectorEnv": lambda: vecenv.SyncVectorEnv([cartpole] * 2),
        "AsyncVectorEnv": lambda: vecenv.AsyncVectorEnv([cartpole] * 2),
        "make(process)": lambda: vecenv.make("CartPole-v1", 2, backend="process", num_workers=2),
        "make(thread)": lambda: vecenv.make("CartPole-v1", 2, backend="thread"),
        "sb3.SubprocVecEnv": lambda: vecenv.sb3.SubprocVecEnv([cartpole] * 2),
        "envpool.make(process)": lambda: vecenv.envpool.make(
            "CartPole-v1", env_type="gymnasium", num_envs=2, backend="process"),
    }
    for build in builders.values():  # every module each one imports is imported now
        build_and_step(build)

    seen = []
    def hook(event, args):
        if event == "open":
            path, mode, flags = args
            if isinstance(path, (str, bytes)) and not str(path).startswith("/proc/"):
                seen.append((event, str(path), mode, flags))
        elif event in ("os.mkdir", "os.rename", "os.remove", "shutil.rmtree", "os.listdir"):
            seen.append((event, str(args[0]), None, None))
    sys.addaudithook(hook)
    for name, build in builders.items():
        del seen[:]
        build_and_step(build)
        print(name, repr(seen))
    """
)


@needs_processes
@pytest.mark.skipif(sys.platform != "linux", reason="the script forks its workers (Linux's start method)")
@pytest.mark.timeout(120)
def test_explicit_backends_and_drop_ins_touch_no_file(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "VECENV_RUNS_DIR": str(tmp_path / "runs"),
           "VECENV_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": ":".join(sys.path)}
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=100,
                         env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 6, out.stdout
    for line in lines:
        name, seen = line.split(" ", 1)
        assert seen == "[]", f"{name} touched files: {seen}"
    assert not list(tmp_path.iterdir()), "no directory of vecenv's was made"
