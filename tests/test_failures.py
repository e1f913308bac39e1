"""Surviving failure: sub-env exceptions under on_error='raise' and 'restart', on every backend."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest

import vecenv
from helpers import make_backend
from vecenv.testing import FaultyEnv

pytestmark = pytest.mark.timeout(60)


def step_timeout_for(fault: str | None) -> float:
    """A ``step_timeout`` that tells the planted fault apart from the others.

    1 s notices a hang quickly. A worker that crashes gets 10 s: before it is gone, a crashing
    process runs the crash handlers it inherited (pytest's faulthandler, Ray's), which beside two
    CPU hogs can take over a second, and a timeout that fires first is rightly reported as a
    StepTimeoutError instead of the death this test looks for.
    """
    return 1.0 if fault == "hang" else 10.0


def fault_at(fault: str, at: int):
    def fn():
        return FaultyEnv(fault, at=at)

    return fn


@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
def test_restart_truncates_failed_env_and_leaves_others_untouched(backend, mode):
    fns = [FaultyEnv, fault_at("step_raise", 3), FaultyEnv]
    ref = vecenv.SerialVectorEnv([FaultyEnv] * 3, autoreset_mode=mode)
    with make_backend(backend, fns, autoreset_mode=mode, on_error="restart") as envs:
        obs, _ = envs.reset(seed=0)
        ref_obs, _ = ref.reset(seed=0)
        acts = np.zeros(3, int)
        for _ in range(2):
            envs.step(acts)
            ref.step(acts)
        last_good = envs.step(acts)  # step 3 fails in env 1 (steps count from 1)
        ref_out = ref.step(acts)
        obs, rew, term, trunc, infos = last_good
        assert trunc.tolist() == [False, True, False] and not term.any()
        assert rew[1] == 0.0
        assert infos["_restarted"].tolist() == [False, True, False]
        assert "ValueError: planted step failure at step 3" in infos["restart_reason"][1]
        # the other envs' trajectories are exactly those of a run without the fault
        for i in (0, 2):
            assert np.array_equal(obs[i], ref_out[0][i]) and rew[i] == ref_out[1][i]
        if mode == "same_step":
            assert infos["_final_obs"].tolist() == [False, True, False]
            assert infos["final_info"]["restarted"][1]
        if mode == "disabled":
            with pytest.raises(ValueError, match=r"envs \[1\] finished"):
                envs.step(acts)
            envs.reset(options={"reset_mask": np.array([False, True, False])})
        out = envs.step(acts)  # the run goes on
        assert not out[3][1]
        if mode == "next_step":
            assert out[1][1] == 0.0  # the autoreset step of the rebuilt env
        assert envs.get_attr("steps")[0] == 4
    ref.close()


def test_crash_loop_turns_into_an_error(backend):
    fns = [FaultyEnv, fault_at("step_raise", 1)]
    with make_backend(backend, fns, on_error="restart", max_restarts=2, autoreset_mode="same_step") as envs:
        envs.reset(seed=0)
        acts = np.zeros(2, int)
        envs.step(acts)
        envs.step(acts)
        with pytest.raises(vecenv.EnvError, match=r"env 1 .*already restarted 2 times"):
            envs.step(acts)


def test_reset_failure_is_restarted_and_reported(backend):
    fns = [FaultyEnv, fault_at("reset_raise", 1)]

    built = {"n": 0}

    def flaky():  # fails on the first env built only, so the rebuilt env resets fine
        built["n"] += 1
        return FaultyEnv("reset_raise" if built["n"] == 1 else None, at=1)

    with make_backend(backend, [FaultyEnv, flaky], on_error="restart") as envs:
        obs, infos = envs.reset(seed=0)
        assert infos["_restarted"].tolist() == [False, True]
        assert "planted reset failure" in infos["restart_reason"][1]
    with pytest.raises(vecenv.EnvError, match="reset after a restart"):
        with make_backend(backend, fns, on_error="restart") as envs:
            envs.reset(seed=0)


def test_policy_arguments_are_checked():
    with pytest.raises(ValueError, match="on_error: expected 'raise' or 'restart', got 'ignore'"):
        vecenv.SerialVectorEnv([FaultyEnv], on_error="ignore")
    with pytest.raises(ValueError, match="max_restarts"):
        vecenv.SerialVectorEnv([FaultyEnv], on_error="restart", max_restarts=-1)


# ---------------------------------------------------------------- workers that die or hang
class OnceFaulty:
    """env_fn whose first env (across processes: a marker file) has ``fault``; later ones are fine."""

    def __init__(self, marker, fault: str, at: int = 3) -> None:
        self.marker = str(marker)
        self.fault = fault
        self.at = at

    def __call__(self) -> FaultyEnv:
        import os

        try:
            fd = os.open(self.marker, os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            return FaultyEnv()
        os.close(fd)
        return FaultyEnv(self.fault, at=self.at)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fault", ["exit", "segfault"])
def test_dead_worker_is_reported_with_its_envs(worker_backend, fault):
    fns = [FaultyEnv, FaultyEnv, fault_at(fault, 2), FaultyEnv]
    with make_backend(worker_backend, fns, num_workers=2) as envs:
        envs.reset(seed=0)
        envs.step(np.zeros(4, int))
        t0 = time.monotonic()
        with pytest.raises(vecenv.WorkerDiedError) as info:
            envs.step(np.zeros(4, int))
        assert time.monotonic() - t0 < 5
        err = info.value
        assert err.worker == 1 and err.env_indices == [2, 3]
        if worker_backend == "process":  # Ray does not report its actors' exit status
            expected = "exit code 3" if fault == "exit" else "killed by SIGSEGV"
            assert expected in str(err)
        with pytest.raises(vecenv.WorkerDiedError):  # and keeps saying so
            envs.step(np.zeros(4, int))


@pytest.mark.timeout(60)
def test_step_timeout_raises_naming_the_stuck_envs(worker_backend):
    fns = [FaultyEnv, fault_at("hang", 2)]
    with make_backend(worker_backend, fns, num_workers=2, step_timeout=0.5) as envs:
        envs.reset(seed=0)
        envs.step(np.zeros(2, int))
        t0 = time.monotonic()
        with pytest.raises(vecenv.StepTimeoutError, match=r"envs \[1\] \(worker 1\) did not finish step within 0.5 s") as info:
            envs.step(np.zeros(2, int))
        assert isinstance(info.value, TimeoutError)
        assert 0.4 < time.monotonic() - t0 < 5
        with pytest.raises(vecenv.WorkerDiedError, match="worker 1"):  # the stuck worker was ended
            envs.step(np.zeros(2, int))


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
@pytest.mark.parametrize(  # SIGKILL from outside needs a pid: the process backend's workers have one
    "worker_backend, fault",
    [(b, f) for b in ("process", "ray") for f in ("segfault", "hang")] + [("process", "sigkill")],
    indirect=["worker_backend"],
)
def test_restart_replaces_a_dead_or_hung_worker(worker_backend, tmp_path, fault, mode):
    import os
    import signal

    flaky = OnceFaulty(tmp_path / "marker", "hang" if fault == "hang" else "segfault" if fault == "segfault" else None, at=3)
    fns = [FaultyEnv, FaultyEnv, flaky, FaultyEnv]
    ref = vecenv.SerialVectorEnv([FaultyEnv] * 4, autoreset_mode=mode)
    with make_backend(worker_backend, fns, num_workers=2, on_error="restart",
                      step_timeout=step_timeout_for(fault), autoreset_mode=mode) as envs:
        envs.reset(seed=0)
        ref.reset(seed=0)
        acts = np.zeros(4, int)
        for _ in range(2):
            envs.step(acts)
            ref.step(acts)
        if fault == "sigkill":
            os.kill(envs.processes[1].pid, signal.SIGKILL)
        obs, rew, term, trunc, infos = envs.step(acts)
        want = ref.step(acts)
        assert trunc.tolist() == [False, False, True, True]
        assert infos["_restarted"].tolist() == [False, False, True, True]
        reason = infos["restart_reason"][2]
        assert ("StepTimeoutError" if fault == "hang" else "WorkerDiedError") in reason
        assert np.array_equal(obs[:2], want[0][:2]) and rew[:2].tolist() == want[1][:2].tolist()
        if mode == "same_step":
            assert infos["_final_obs"].tolist() == [False, False, True, True]
        if mode == "disabled":
            envs.reset(options={"reset_mask": np.array([False, False, True, True])})
        for _ in range(3):  # the run goes on
            out = envs.step(acts)
        assert not out[3].any()
        assert envs.get_attr("steps")[:2] == (6, 6)
    ref.close()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", ["next_step", "same_step"])
@pytest.mark.parametrize("fault", ["segfault", "hang"])
def test_restart_in_async_batches_truncates_the_workers_other_envs(worker_backend, tmp_path, mode, fault):
    """Worker 1 (envs 2 and 3) dies or hangs while only env 2 is in flight and the other workers
    keep the batches full: it is still noticed, and env 3's episode ends too.

    The 20 s bound is on noticing the fault, not on rebuilding the worker: the step that restarts
    it also starts a new worker (a new Ray actor takes tens of seconds beside two CPU hogs), which
    ``start_timeout`` bounds, so that step's time is given back to the deadline."""
    fns = [FaultyEnv, FaultyEnv, OnceFaulty(tmp_path / "marker", fault, at=3), FaultyEnv]
    with make_backend(worker_backend, fns, num_workers=2, batch_size=1, on_error="restart",
                      autoreset_mode=mode, step_timeout=step_timeout_for(fault)) as envs:
        obs, infos = envs.reset(seed=0)
        trunc = np.zeros(1, dtype=bool)
        history: dict[int, list] = {i: [] for i in range(4)}  # per env: (obs, truncated, infos row)
        deadline = time.monotonic() + 20  # the death is noticed within a bounded time, not steps
        while time.monotonic() < deadline:
            i = int(infos["env_id"][0])
            row = {k: infos[k][0] for k in ("restarted", "restart_reason", "final_obs") if k in infos and infos[f"_{k}"][0]}
            history[i].append((obs[0].copy(), bool(trunc[0]), row))
            if all(any(r.get("restarted") for _, _, r in history[j][:-1]) for j in (2, 3)):
                break
            started = time.monotonic()
            obs, _, _, trunc, infos = envs.step(np.zeros(1, int), infos["env_id"])
            if "_restarted" in infos and infos["_restarted"][0]:
                deadline += time.monotonic() - started
        for j in (0, 1):
            assert not any(r.get("restarted") for _, _, r in history[j])
        for j in (2, 3):  # exactly one truncation, reported as a restart, then the run goes on
            cut = [k for k, (_, t, r) in enumerate(history[j]) if r.get("restarted")]
            assert len(cut) == 1, (j, history[j])
            k = cut[0]
            obs_k, truncated, row = history[j][k]
            expected = "WorkerDiedError" if fault == "segfault" else "StepTimeoutError"
            assert truncated and expected in row["restart_reason"]
            held = history[j][k - 1][0]  # the last observation the caller had for env j
            if mode == "next_step":
                assert np.array_equal(obs_k, held)  # the episode ends where the caller saw it
                assert not history[j][k + 1][1]  # and the next result is the new episode's reset
            else:
                assert np.array_equal(row["final_obs"], held) and not np.array_equal(obs_k, held)
                assert not history[j][k + 1][1]


@pytest.mark.timeout(60)
def test_worker_crash_loop_becomes_an_error(worker_backend):
    fns = [FaultyEnv, fault_at("exit", 1)]
    with make_backend(worker_backend, fns, num_workers=2, on_error="restart", max_restarts=1,
                      autoreset_mode="same_step") as envs:
        envs.reset(seed=0)
        envs.step(np.zeros(2, int))  # worker 1 dies; restarted (1 of 1)
        with pytest.raises(vecenv.WorkerDiedError, match="already restarted 1 times"):
            envs.step(np.zeros(2, int))


# ---------------------------------------------------------------- restart_window
def test_restart_budget_forgets_restarts_older_than_the_window(monkeypatch):
    """At most ``max_restarts`` per key within any ``window`` seconds (a fake clock)."""
    from vecenv.worker import restarts

    now = [100.0]
    monkeypatch.setattr(restarts, "time", SimpleNamespace(monotonic=lambda: now[0]))
    budget = restarts.RestartBudget(max_restarts=2, window=10.0)
    error = vecenv.errors.VecEnvError("boom")
    assert budget.spend("env 1", "env 1", error) and budget.spend("env 1", "env 1", error)
    now[0] = 105.0
    assert not budget.spend("env 1", "env 1", error)  # 2 restarts in the last 10 s: spent
    assert "env 1 was already restarted 2 times in 10 s" in error.args[0]
    assert budget.spend("env 2", "env 2", vecenv.errors.VecEnvError("other"))  # per key
    now[0] = 110.0  # the first two are exactly 10 s old: still inside the window
    assert not budget.spend("env 1", "env 1", vecenv.errors.VecEnvError("boom"))
    now[0] = 110.5  # now older than the window: they stop counting
    assert budget.spend("env 1", "env 1", vecenv.errors.VecEnvError("boom"))
    assert budget.spend("env 1", "env 1", vecenv.errors.VecEnvError("boom"))
    assert not budget.spend("env 1", "env 1", vecenv.errors.VecEnvError("boom"))


@pytest.mark.parametrize(("window", "survives"), [(0.3, True), (60.0, False)])
def test_env_restarts_older_than_restart_window_stop_counting(backend, window, survives):
    """max_restarts=1: a second failure 0.4 s after the first is restarted when the window is
    0.3 s (the first restart no longer counts) and raised when it is 60 s."""
    fns = [FaultyEnv, fault_at("step_raise", 1)]  # env 1 (and each rebuild) fails on its 1st step
    with make_backend(backend, fns, on_error="restart", max_restarts=1, restart_window=window,
                      autoreset_mode="same_step") as envs:
        assert envs.restart_window == window
        envs.reset(seed=0)
        acts = np.zeros(2, int)
        _, _, _, trunc, infos = envs.step(acts)
        assert trunc.tolist() == [False, True] and infos["_restarted"].tolist() == [False, True]
        time.sleep(0.4)  # at least 0.4 s pass: longer than the short window, whatever the load
        if survives:
            _, _, _, trunc, infos = envs.step(acts)
            assert trunc.tolist() == [False, True] and infos["_restarted"].tolist() == [False, True]
            with pytest.raises(vecenv.EnvError, match=r"already restarted 1 times in 0.3 s"):
                envs.step(acts)  # at once: the restart just made is inside the window
        else:
            with pytest.raises(vecenv.EnvError, match=r"env 1 .*already restarted 1 times in 60 s"):
                envs.step(acts)


@pytest.mark.timeout(90)
@pytest.mark.parametrize(("window", "survives"), [(0.5, True), (60.0, False)])
def test_worker_restarts_older_than_restart_window_stop_counting(worker_backend, window, survives):
    fns = [FaultyEnv, fault_at("exit", 1)]  # worker 1 (and each rebuild) dies on its 1st step
    with make_backend(worker_backend, fns, num_workers=2, on_error="restart", max_restarts=1,
                      restart_window=window, autoreset_mode="same_step") as envs:
        envs.reset(seed=0)
        acts = np.zeros(2, int)
        _, _, _, trunc, infos = envs.step(acts)
        assert trunc.tolist() == [False, True] and "WorkerDiedError" in infos["restart_reason"][1]
        time.sleep(0.6)
        if survives:
            _, _, _, trunc, infos = envs.step(acts)
            assert trunc.tolist() == [False, True] and "WorkerDiedError" in infos["restart_reason"][1]
        else:
            with pytest.raises(vecenv.WorkerDiedError, match="already restarted 1 times in 60 s"):
                envs.step(acts)
