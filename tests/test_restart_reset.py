"""A worker restarted during ``reset()`` gives its envs that reset's seeds and options: the
observations are the fresh ones gymnasium's SyncVectorEnv returns, never the dead worker's last."""

from __future__ import annotations

import os
import signal
import time

import gymnasium as gym
import numpy as np
import pytest

import vecenv
from helpers import make_backend, needs_processes

pytestmark = [needs_processes, pytest.mark.timeout(60)]


class FaultOnReset(gym.Wrapper):
    """CartPole whose first reset in any process (a marker file) segfaults or hangs."""

    def __init__(self, marker: str, fault: str) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.marker, self.fault = marker, fault

    def reset(self, **kwargs):
        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return self.env.reset(**kwargs)
        if self.fault == "hang":
            time.sleep(3600)
        os.kill(os.getpid(), signal.SIGKILL)


class Faulty:
    def __init__(self, marker: str, fault: str) -> None:
        self.marker, self.fault = marker, fault

    def __call__(self):
        return FaultOnReset(self.marker, self.fault)


def cartpole():
    return gym.make("CartPole-v1")


def _reference(n: int, seed: int, steps: int, options=None):
    ref = gym.vector.SyncVectorEnv([cartpole] * n)
    try:
        out = [ref.reset(seed=seed, options=options)[0]]
        for _ in range(steps):
            out.append(ref.step(np.ones(n, np.int64))[0])
        return out
    finally:
        ref.close()


def _run(envs, seed: int, steps: int, options=None):
    out = [envs.reset(seed=seed, options=options)[0]]
    for _ in range(steps):
        out.append(envs.step(np.ones(envs.num_envs, np.int64))[0])
    return out


CASES = [("fork", False), ("spawn", False), ("fork", True)]


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
@pytest.mark.parametrize(("context", "inline"), CASES)
def test_a_worker_that_died_idle_is_reset_with_the_resets_seeds(context, inline, mode):
    n = 6 if inline else 4
    with vecenv.ProcessVectorEnv([cartpole] * n, num_workers=3 if inline else 2, context=context, inline=inline,
                                 on_error="restart", autoreset_mode=mode) as envs:
        envs.reset(seed=123)
        for _ in range(5):
            envs.step(np.zeros(n, np.int64))
        victim = envs.processes[-1]
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(5)
        got = _run(envs, 7, 3)
    for t, (a, b) in enumerate(zip(got, _reference(n, 7, 3), strict=True)):
        assert np.array_equal(a, b), f"step {t}: {a} != {b}"


@pytest.mark.parametrize("fault", ["kill", "hang"])
def test_a_worker_that_dies_or_hangs_during_reset_is_reset_with_its_seeds(worker_backend, tmp_path, fault):
    fns = [cartpole, cartpole, Faulty(str(tmp_path / "marker"), fault), cartpole]
    with make_backend(worker_backend, fns, on_error="restart", step_timeout=2.0 if fault == "hang" else 30) as envs:
        obs, infos = envs.reset(seed=5)
        assert infos["_restarted"].tolist() == [False, False, True, True]
        got = [obs] + [envs.step(np.ones(4, np.int64))[0] for _ in range(3)]
    for t, (a, b) in enumerate(zip(got, _reference(4, 5, 3), strict=True)):
        assert np.array_equal(a, b), f"step {t}: {a} != {b}"


def test_a_restart_in_an_async_reset_returns_fresh_observations():
    with vecenv.ProcessVectorEnv([cartpole] * 4, num_workers=4, batch_size=2, context="fork",
                                 on_error="restart") as envs:
        envs.reset(seed=1)
        envs.recv()  # the rest of that reset
        os.kill(envs.processes[3].pid, signal.SIGKILL)
        envs.processes[3].join(5)
        obs, infos = envs.reset(seed=9)
        seen = dict(zip(infos["env_id"].tolist(), obs, strict=True))
        while len(seen) < 4:
            obs, _, _, _, infos = envs.recv()
            seen.update(zip(infos["env_id"].tolist(), obs, strict=True))
    want = _reference(4, 9, 0)[0]
    for i in range(4):
        assert np.array_equal(seen[i], want[i]), i


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
def test_a_call_that_finds_a_worker_dead_restarts_it_and_runs(mode):
    """A worker that died idle, found by a call (SB3's wrappers call between steps): replaced,
    the call answered by the new envs, and their episodes end as a truncation at the next step."""
    with vecenv.ProcessVectorEnv([cartpole] * 4, num_workers=2, context="fork", on_error="restart",
                                 autoreset_mode=mode) as envs:
        envs.reset(seed=3)
        envs.step(np.zeros(4, np.int64))
        os.kill(envs.processes[1].pid, signal.SIGKILL)
        envs.processes[1].join(5)
        assert len(envs.get_attr("spec")) == 4
        _, _, _, truncs, infos = envs.step(np.zeros(4, np.int64))
        assert truncs.tolist() == [False, False, True, True]
        assert infos["_restarted"].tolist() == [False, False, True, True]
        for _ in range(3):
            _, _, terms, truncs, _ = envs.step(np.zeros(4, np.int64))
        assert not truncs.any()


def test_a_reset_after_a_call_restarted_a_worker_starts_clean_episodes():
    """The restart a call found is reported by the next step, unless a reset comes first: the
    reset starts those envs' episodes anew, so the step after it is an ordinary one."""
    with vecenv.ProcessVectorEnv([cartpole] * 4, num_workers=2, context="fork", on_error="restart") as envs:
        envs.reset(seed=3)
        os.kill(envs.processes[1].pid, signal.SIGKILL)
        envs.processes[1].join(5)
        assert len(envs.get_attr("spec")) == 4  # finds the worker dead and restarts it
        obs, _ = envs.reset(seed=9)
        assert np.array_equal(obs, _reference(4, 9, 0)[0])
        _, _, _, truncs, infos = envs.step(np.ones(4, np.int64))
        assert not truncs.any() and "restarted" not in infos
