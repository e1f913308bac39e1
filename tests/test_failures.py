"""Surviving failure: sub-env exceptions under on_error='raise' and 'restart', on every backend."""

from __future__ import annotations

import numpy as np
import pytest

import vecenv
from helpers import make_backend
from vecenv.testing import FaultyEnv

pytestmark = pytest.mark.timeout(60)


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
