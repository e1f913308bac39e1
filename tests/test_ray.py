"""What is specific to the Ray backend: errors from actors, async batches, closing, Ray's lifecycle.

They share one local 2-CPU Ray (the ``ray_local`` fixture in conftest.py), started once and shut
down at the end of the session; one test runs in a fresh interpreter to check that vecenv starts
and stops a Ray of its own.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import subprocess
import sys
import textwrap
import threading
import time

import gymnasium as gym
import numpy as np
import pytest

import vecenv
from helpers import exit_without_close, missing_extra, pid_alive
from vecenv.testing import FaultyEnv

pytestmark = pytest.mark.timeout(90)

NO_RAY = missing_extra("ray")
needs_ray = pytest.mark.skipif(NO_RAY is not None, reason=NO_RAY or "")


def cartpole():  # module-level: the actors import it from this test module (driver's sys.path)
    return gym.make("CartPole-v1")


def test_without_ray_the_constructor_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` fail
    assert "ray" in vecenv.available_backends()
    with pytest.raises(ImportError, match=r"pip install 'vecenv\[ray\]'"):
        vecenv.RayVectorEnv([cartpole] * 2)
    with pytest.raises(ImportError, match=r"pip install 'vecenv\[ray\]'"):
        vecenv.make("CartPole-v1", 2, backend="ray")


@needs_ray
def test_external_ray_is_left_running_and_actors_are_killed(ray_local):
    ray = ray_local
    envs = vecenv.make(cartpole, 4, backend="ray", address="auto")
    assert envs.num_workers == 2  # default: as many 1-CPU actors as the 2-CPU cluster fits
    assert envs.backend == "ray" and repr(envs).startswith("RayVectorEnv(")
    obs, _ = envs.reset(seed=1)
    assert obs.shape == (4, 4)
    actors = list(envs._transport.actors)
    envs.close()
    assert ray.is_initialized(), "vecenv must not shut down a Ray it did not start"
    for actor in actors:  # ray.kill is asynchronous: a call may still slip in just before
        deadline = time.monotonic() + 30
        with pytest.raises(ray.exceptions.RayActorError):
            while time.monotonic() < deadline:
                ray.get(actor.close.remote(), timeout=10)
                time.sleep(0.1)


@needs_ray
def test_errors_carry_env_index_worker_and_remote_traceback(ray_local):
    class Unpicklable(Exception):
        def __init__(self):
            super().__init__("holds a lock")
            self.lock = threading.Lock()

    class BadStep(FaultyEnv):
        def step(self, action):
            raise Unpicklable()

    fns = [FaultyEnv, FaultyEnv, lambda: FaultyEnv("step_raise", at=1), BadStep]
    with vecenv.RayVectorEnv(fns, num_workers=2) as envs:
        envs.reset(seed=0)
        with pytest.raises(vecenv.EnvError) as info:
            envs.step(np.zeros(4, int))
        err = info.value
        assert (err.env_index, err.worker, err.method, err.exc_type) == (2, 1, "step", "ValueError")
        assert "planted step failure" in str(err) and "testing.py" in err.remote_traceback
        assert isinstance(err.original, ValueError)
        # the env stays usable, and an exception that cannot be pickled still arrives, as text
        assert envs.get_attr("steps")[:2] == (1, 1)
        with pytest.raises(vecenv.EnvError, match=r"(?s)env 3 .*Unpicklable.*holds a lock") as info:
            envs.call_at([3], "step", 0)
        assert info.value.original is None and "Traceback" in info.value.remote_traceback


@needs_ray
def test_env_fn_error_and_dead_actor_are_reported(ray_local):
    def broken():
        raise OSError("no simulator on this node")

    with pytest.raises(OSError, match=r"^no simulator on this node\n\(vecenv\) env 2 .*OSError in env_fn\(\)") as info:
        vecenv.RayVectorEnv([cartpole, cartpole, broken], num_workers=2)
    assert isinstance(info.value, vecenv.EnvError)
    with vecenv.RayVectorEnv([FaultyEnv, lambda: FaultyEnv("exit", at=2)], num_workers=2) as envs:
        envs.reset(seed=0)
        envs.step(np.zeros(2, int))
        with pytest.raises(vecenv.WorkerDiedError, match=r"worker 1 holding envs \[1\] died"):
            envs.step(np.zeros(2, int))


@needs_ray
def test_async_batches_hide_a_slow_actor(ray_local):
    fns = [lambda: FaultyEnv("slow", at=1, sleep=1.0)] * 2 + [FaultyEnv] * 2  # worker 0 is slow
    with vecenv.RayVectorEnv(fns, num_workers=2, batch_size=2) as envs:
        _, infos = envs.reset(seed=0)
        ids = infos["env_id"]
        fast = 0
        for _ in range(5):
            _, _, _, _, infos = envs.step(np.zeros(2, int), ids)
            ids = infos["env_id"]
            fast += sorted(ids.tolist()) == [2, 3]
        assert fast >= 4, "the fast actor's envs must come back while the slow one steps"
        t0 = time.monotonic()
        with pytest.raises(multiprocessing.TimeoutError, match="timed out"):
            envs.recv(timeout=0.05)  # only the slow actor is in flight
        assert time.monotonic() - t0 < 1
        envs.send(np.zeros(2, int), ids)
        _, _, _, _, infos = envs.recv()
        assert sorted(infos["env_id"].tolist()) in ([0, 1], [2, 3])


@needs_ray
def test_same_trajectories_as_serial_with_fractional_cpus(ray_local):
    fns = [cartpole] * 5
    with vecenv.make(fns, backend="serial") as ref, \
            vecenv.make(fns, backend="ray", num_workers=4, num_cpus_per_worker=0.5) as ours:
        assert ours.num_workers == 4
        a, b = ours.reset(seed=9), ref.reset(seed=9)
        assert np.array_equal(a[0], b[0])
        rng = np.random.default_rng(0)
        for _ in range(40):
            act = rng.integers(0, 2, 5)
            x, y = ours.step(act), ref.step(act)
            for u, v in zip(x[:4], y[:4], strict=True):
                assert np.array_equal(u, v)


@needs_ray
def test_actors_the_cluster_cannot_place_time_out_instead_of_hanging(ray_local):
    with pytest.raises(ValueError, match="start_timeout: expected a number of seconds > 0 or None"):
        vecenv.RayVectorEnv([cartpole] * 3, num_workers=3, start_timeout=0)
    t0 = time.monotonic()
    with pytest.warns(RuntimeWarning, match="need 3 CPUs but the Ray cluster has 2"):
        # 2 actors fit; the third can never be placed (how many of the 2 have started by the
        # deadline depends on how fast Ray starts its worker processes)
        with pytest.raises(vecenv.StepTimeoutError, match=r"did not finish start within 3 s: [123] of 3 Ray actors") as info:
            vecenv.RayVectorEnv([cartpole] * 3, num_workers=3, start_timeout=3.0)
    assert time.monotonic() - t0 < 40
    assert "need 3 CPUs and the cluster has 2" in str(info.value)
    assert "lower num_workers or num_cpus_per_worker" in str(info.value)
    assert 1 <= len(info.value.env_indices) <= 3 and info.value.method == "start"
    copy = pickle.loads(pickle.dumps(info.value))  # errors keep their whole text across processes
    assert str(copy) == str(info.value) and copy.env_indices == info.value.env_indices
    # the actors were killed: the cluster's 2 CPUs are free again for a vector env that fits
    with vecenv.RayVectorEnv([cartpole] * 2, num_workers=2) as envs:
        obs, _ = envs.reset(seed=0)
        assert obs.shape == (2, 4)


@needs_ray
def test_close_with_a_hung_env_returns_in_bounded_time(ray_local):
    envs = vecenv.RayVectorEnv([FaultyEnv, lambda: FaultyEnv("hang", at=1)], num_workers=2)
    envs.reset(seed=0)
    envs.step_async(np.zeros(2, int))
    t0 = time.monotonic()
    envs.close(timeout=0.5)
    assert time.monotonic() - t0 < 10
    assert envs.closed and ray_local.is_initialized()


@needs_ray
def test_hung_actor_times_out_and_dead_actor_is_restarted(ray_local):
    fns = [FaultyEnv, lambda: FaultyEnv("hang", at=2)]
    with vecenv.RayVectorEnv(fns, num_workers=2, step_timeout=1.0) as envs:
        envs.reset(seed=0)
        envs.step(np.zeros(2, int))
        with pytest.raises(vecenv.StepTimeoutError, match=r"envs \[1\]"):
            envs.step(np.zeros(2, int))
    fns = [FaultyEnv, lambda: FaultyEnv("exit", at=2)]
    with vecenv.RayVectorEnv(fns, num_workers=2, on_error="restart") as envs:
        envs.reset(seed=0)
        envs.step(np.zeros(2, int))
        _, _, _, trunc, infos = envs.step(np.zeros(2, int))  # actor 1 dies; a new one replaces it
        assert trunc.tolist() == [False, True] and infos["_restarted"].tolist() == [False, True]
        envs.step(np.zeros(2, int))
        assert envs.get_attr("steps") == (3, 0)  # the rebuilt env autoresets on its next step


@needs_ray
def test_vecenv_starts_and_stops_its_own_ray():
    """In a fresh interpreter: no Ray running, so vecenv starts one and shuts it down."""
    code = textwrap.dedent(
        """
        import os, numpy as np, ray, vecenv
        shm = set(os.listdir("/dev/shm"))
        assert not ray.is_initialized()
        kw = {"ray_init_kwargs": {"num_cpus": 1, "log_to_driver": False}}
        a = vecenv.make("CartPole-v1", 2, backend="ray", **kw)
        assert ray.is_initialized() and a.num_workers == 1
        b = vecenv.make("CartPole-v1", 2, backend="ray", num_cpus_per_worker=0)
        a.reset(seed=0); b.reset(seed=0); a.step(np.zeros(2, int))
        a.close()
        assert ray.is_initialized(), "b still uses the Ray vecenv started"
        b.close()
        assert not ray.is_initialized(), "the last user shuts down the Ray vecenv started"
        print("leftover shm:", sorted(set(os.listdir("/dev/shm")) - shm))
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=80, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "leftover shm: []" in out.stdout


@needs_ray
@pytest.mark.timeout(120)
def test_actors_end_at_interpreter_exit_without_close(tmp_path):
    """In a fresh interpreter that leaves a step in flight and never calls close(): it exits
    cleanly and every actor process ends with it."""
    done, pids, _ = exit_without_close(tmp_path, "ray", "-", "pending")
    assert done.returncode == 0 and len(pids) == 2, done.stderr[-3000:]
    deadline = time.monotonic() + 30  # a generous bound: they end at exit, not on a timer
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if pid_alive(p)], "actors outlived their driver's interpreter"
