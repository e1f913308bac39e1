"""A machine that is not idle: every backend, and auto, give gymnasium's values with a busy
process beside them, and auto's choice there is serial (2 cores) or says what it saw."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from functools import partial

import gymnasium as gym
import numpy as np
import pytest

import vecenv
from helpers import assert_same, backends_under_test, make_backend, needs_processes, use_backend
from vecenv import layout as L
from vecenv import system
from vecenv.system import gil_enabled

#: an episode ends within the run, so the autoreset path is compared too
ENV = partial(gym.make, "CartPole-v1", max_episode_steps=40)


@pytest.fixture
def busy_process():
    """A CPU-bound process beside the test, ended however the test ends."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    time.sleep(0.2)  # running, not importing
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(10)


def _rollout(envs, steps=120):
    rng = np.random.default_rng(0)
    out = [envs.reset(seed=7)]
    for _ in range(steps):
        out.append(envs.step(rng.integers(0, 2, envs.num_envs)))
    return out


def _reference(n):
    ref = gym.vector.SyncVectorEnv([ENV] * n)
    try:
        return _rollout(ref)
    finally:
        ref.close()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("backend", [*backends_under_test(), "inline"])
def test_every_backend_gives_gymnasiums_values_beside_a_busy_process(request, busy_process, backend):
    kwargs = {}
    if backend == "inline":
        backend, kwargs = "process", {"inline": True}
    use_backend(request, backend)
    with make_backend(backend, [ENV] * 4, **kwargs) as envs:
        got = _rollout(envs)
    for step, (mine, theirs) in enumerate(zip(got, _reference(4), strict=True)):
        assert_same(mine, theirs, f"step {step}")


@pytest.mark.timeout(120)
def test_auto_beside_a_busy_process_says_what_it_saw_and_steps_as_gymnasium(busy_process, monkeypatch):
    monkeypatch.setattr(L, "usable_cores", lambda: 2)  # the busy process takes one of two
    with vecenv.make(ENV, 4) as envs:
        seen = L.others_busy()
        if seen is not None and L.contended(2, seen):
            # under the GIL only serial pays off there; without it threads share what is left
            assert envs.layout.backend in ("serial", *(() if gil_enabled() else ("thread",))), envs.layout
            assert "busy on" in envs.layout.reason
        got = _rollout(envs)
    for step, (mine, theirs) in enumerate(zip(got, _reference(4), strict=True)):
        assert_same(mine, theirs, f"step {step}")


# ==================================================================== other runs on the machine
def test_a_process_counts_as_a_run_while_it_has_a_live_auto_vector_env(tmp_path, monkeypatch):
    """A vector env built by backend="auto" counts while it lives; one built with an explicit
    backend writes no file of vecenv's."""
    from vecenv import runs

    monkeypatch.setenv("VECENV_RUNS_DIR", str(tmp_path))
    monkeypatch.setenv("VECENV_BACKEND", "serial")  # auto, with its measurement forced
    mine = tmp_path / str(os.getpid())
    with vecenv.SerialVectorEnv([ENV]), vecenv.make(ENV, 1, backend="serial"):
        assert not mine.exists()
    with vecenv.make(ENV, 1) as a:
        assert a.layout is not None and mine.exists()
        with vecenv.make(ENV, 1):
            pass
        assert mine.exists() and not a.closed  # the other one is still open
    assert not mine.exists()
    assert runs.other_runs() == 0  # its own file never counts


def test_stale_run_files_are_removed_and_live_ones_counted(tmp_path, monkeypatch):
    from vecenv import runs

    monkeypatch.setenv("VECENV_RUNS_DIR", str(tmp_path))
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / str(sleeper.pid)).write_text(system.process_start_time(sleeper.pid))
        (tmp_path / "999999999").write_text("1")  # no such process
        (tmp_path / str(os.getppid())).write_text("12345")  # a pid that is another process now
        (tmp_path / "notes.txt").write_text("not a run")
        assert runs.other_runs() == 1
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([str(sleeper.pid), "notes.txt"])
    finally:
        sleeper.kill()
        sleeper.wait(10)
    assert runs.other_runs() == 0


@needs_processes
@pytest.mark.timeout(120)
def test_auto_counts_another_process_with_a_live_vector_env(tmp_path, monkeypatch):
    monkeypatch.setenv("VECENV_RUNS_DIR", str(tmp_path))
    monkeypatch.setattr(L, "usable_cores", lambda: 2)
    monkeypatch.setattr(L, "others_busy", lambda *a, **k: 0.0)  # the other run is between steps
    monkeypatch.setattr(L, "cached_probe", lambda fn: L.EnvProbe(step_us=8.0))
    costs = L.MachineCosts(fixed_us=20.0, per_env_us=3.0, process_us=(80.0, 8.0), inline_us=(37.0, 8.0), cores=2)
    monkeypatch.setattr(L, "machine_costs", lambda: costs)
    other = subprocess.Popen(
        [sys.executable, "-c", "import os, vecenv, sys\n"
         "os.environ['VECENV_BACKEND'] = 'serial'\n"
         "e = vecenv.make('CartPole-v1', 1)\n"
         "print('ready', flush=True); sys.stdin.readline(); e.close()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert other.stdout.readline().strip() == "ready"
        chosen = L.choose([ENV] * 8, {})
        assert chosen.backend == "serial"
        assert "1 other vecenv run(s) on this machine" in chosen.reason
    finally:
        other.communicate("\n", timeout=60)
    assert not list(tmp_path.iterdir())  # it removed its file when its vector env closed
    assert L.choose([ENV] * 8, {}).backend != "serial"


def test_without_proc_a_run_is_alive_while_its_pid_is(tmp_path, monkeypatch):
    from vecenv import runs

    monkeypatch.setenv("VECENV_RUNS_DIR", str(tmp_path))
    monkeypatch.setattr(system, "HAS_PROC", False)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / str(sleeper.pid)).write_text("")
        (tmp_path / "999999999").write_text("")
        assert runs.other_runs() == 1
        assert [p.name for p in tmp_path.iterdir()] == [str(sleeper.pid)]
    finally:
        sleeper.kill()
        sleeper.wait(10)
    assert runs.other_runs() == 0


def _unbuildable() -> gym.Env:
    raise RuntimeError("this env cannot be built")


@pytest.mark.timeout(120)
def test_a_run_counts_while_it_chooses_its_layout_and_a_failed_build_leaves_no_file(tmp_path, monkeypatch):
    from vecenv import runs

    monkeypatch.setenv("VECENV_RUNS_DIR", str(tmp_path))
    other = subprocess.Popen(
        [sys.executable, "-c", "import importlib, sys, vecenv\n"
         "from vecenv.layout import Layout\n"
         "M = importlib.import_module('vecenv.make')\n"
         "def choose(env_fns, kwargs):  # held here while the test looks\n"
         "    print('choosing', flush=True); sys.stdin.readline()\n"
         "    return Layout('serial', 1, False, 'test')\n"
         "M.choose = choose\n"
         "e = vecenv.make('CartPole-v1', 2)\n"
         "print('built', flush=True); sys.stdin.readline(); e.close()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert other.stdout.readline().strip() == "choosing"
        assert runs.other_runs() == 1  # seen before its vector env exists
        other.stdin.write("\n")
        other.stdin.flush()
        assert other.stdout.readline().strip() == "built"
        assert runs.other_runs() == 1
    finally:
        other.communicate("\n", timeout=60)
    assert runs.other_runs() == 0
    with pytest.raises(Exception, match="cannot be built"):
        vecenv.make(_unbuildable, 2, backend="serial")
    assert not list(tmp_path.iterdir())  # a failed build leaves no run behind
