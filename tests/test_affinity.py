"""``affinity=``: worker processes pinned to cores (Linux), bad input refused before any worker starts."""

from __future__ import annotations

import multiprocessing
import os
import re
import signal

import gymnasium as gym
import numpy as np
import pytest

import vecenv

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="pinning needs os.sched_setaffinity (Linux)"),
]

USABLE = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def cartpoles(n: int) -> list:
    return [lambda: gym.make("CartPole-v1")] * n


def pinned(envs: vecenv.ProcessVectorEnv) -> list[set[int]]:
    return [os.sched_getaffinity(p.pid) for p in envs.processes]


def test_true_spreads_the_workers_over_the_usable_cores_in_order():
    with vecenv.ProcessVectorEnv(cartpoles(6), num_workers=3, affinity=True) as envs:
        assert pinned(envs) == [{USABLE[i % len(USABLE)]} for i in range(3)]
        assert os.sched_getaffinity(0) == set(USABLE)  # the caller stays where it was


@pytest.mark.parametrize("inline", [False, True])
def test_a_sequence_pins_worker_i_to_its_item_and_steps_as_gymnasium_does(inline):
    core = USABLE[-1]
    actions = np.array([0, 1, 1, 0])
    ref = gym.vector.SyncVectorEnv(cartpoles(4))
    with vecenv.ProcessVectorEnv(cartpoles(4), num_workers=2, affinity=[core], inline=inline) as envs:
        assert pinned(envs) == [{core}] * len(envs.processes)
        want, got = ref.reset(seed=3)[0], envs.reset(seed=3)[0]
        for _ in range(20):
            np.testing.assert_array_equal(got, want)
            want, got = ref.step(actions)[0], envs.step(actions)[0]
    ref.close()


def test_a_restarted_worker_is_pinned_again():
    core = USABLE[0]
    with vecenv.ProcessVectorEnv(cartpoles(2), num_workers=2, affinity=[core], on_error="restart") as envs:
        envs.reset(seed=0)
        first = envs.processes[0].pid
        os.kill(first, signal.SIGKILL)
        envs.processes[0].join(5)
        envs.step(np.zeros(2, dtype=np.int64))
        assert envs.processes[0].pid != first
        assert pinned(envs) == [{core}, {core}]


@pytest.mark.parametrize("affinity, expected", [
    ([10_000], "core(s) [10000] are not among the cores this process may run on"),
    ([], "expected a non-empty sequence of core ids"),
    ([0.5], "expected a non-empty sequence of core ids"),
    ("0", "expected True, False or a sequence of core ids"),
    (3, "expected True, False or a sequence of core ids"),
])
def test_bad_affinity_is_refused_before_any_worker_starts(affinity, expected):
    with pytest.raises(ValueError, match=re.escape(expected)):
        vecenv.ProcessVectorEnv(cartpoles(2), num_workers=2, affinity=affinity)
    assert not multiprocessing.active_children()


def test_make_passes_affinity_to_the_process_backend_and_refuses_it_elsewhere():
    with vecenv.make("CartPole-v1", num_envs=2, backend="process", num_workers=2, affinity=True) as envs:
        assert pinned(envs) == [{USABLE[i % len(USABLE)]} for i in range(2)]
    with pytest.raises(TypeError, match="'affinity' is a keyword of the process backend"):
        vecenv.make("CartPole-v1", num_envs=2, backend="thread", affinity=True)
