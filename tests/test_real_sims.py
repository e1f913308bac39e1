"""Conformance on real simulators: MuJoCo ``HalfCheetah-v5`` and ALE Pong (gymnasium's
AtariPreprocessing and 4 stacked frames) give exactly what gymnasium's SyncVectorEnv gives —
observations, rewards, flags, and infos with their keys, order, dtypes and masks — on every
backend, in NEXT_STEP and SAME_STEP mode. Their infos come every step, so on the process backend
they travel through shared memory. Skipped without the simulators (``pip install 'vecenv[sims]'``).
"""

from __future__ import annotations

import importlib.util
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from helpers import assert_same_runs, backends_under_test, make_backend, use_backend

pytestmark = pytest.mark.timeout(300)

N, STEPS = 3, 24


def _needs(module: str) -> Any:
    return pytest.mark.skipif(importlib.util.find_spec(module) is None,
                              reason=f"{module} is not installed (pip install 'vecenv[sims]')")


SIMS = {
    "HalfCheetah-v5": (partial(gym.make, "HalfCheetah-v5", max_episode_steps=10), [], "mujoco"),
    "Pong": (
        partial(gym.make, "ale_py:ALE/Pong-v5", frameskip=1, max_episode_steps=60),
        [partial(gym.wrappers.AtariPreprocessing, frame_skip=4, noop_max=30, screen_size=84),
         partial(gym.wrappers.FrameStackObservation, stack_size=4)],
        "ale_py",
    ),
}


def _wrapped(make: Any, wrappers: list) -> gym.Env:
    env = make()
    for wrapper in wrappers:
        env = wrapper(env)
    return env


def _rollout(venv: Any) -> list:
    venv.action_space.seed(5)
    actions = [venv.action_space.sample() for _ in range(STEPS)]
    out = [venv.reset(seed=list(range(10, 10 + N)))]
    for action in actions:
        out.append(venv.step(action))
    return out


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
@pytest.mark.parametrize("backend", backends_under_test())
@pytest.mark.parametrize("sim", [pytest.param(name, marks=_needs(SIMS[name][2])) for name in SIMS])
def test_real_simulator_matches_gymnasium(request: Any, sim: str, backend: str, mode: AutoresetMode) -> None:
    use_backend(request, backend)
    make, wrappers, _ = SIMS[sim]
    ref = gym.vector.SyncVectorEnv([partial(_wrapped, make, wrappers)] * N, autoreset_mode=mode)
    kwargs = {"num_workers": 2} if backend != "serial" else {}
    ours = make_backend(backend, [make] * N, autoreset_mode=mode, wrappers=wrappers, **kwargs)
    try:
        expected, got = _rollout(ref), _rollout(ours)
    finally:
        ref.close()
        ours.close()
    ended = 0
    assert_same_runs(got, expected, f"{sim} ")
    for t, theirs in enumerate(expected):
        if len(theirs) == 5:
            ended += int(np.sum(theirs[2] | theirs[3]))
        assert theirs[-1], f"{sim} returns infos at step {t}"  # what this test is about
    if sim == "HalfCheetah-v5":
        assert ended >= N, "episodes ended, so autoreset and final observations were compared"
