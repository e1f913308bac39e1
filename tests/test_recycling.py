"""Long runs: ``max_episodes_per_env`` rebuilds an env between episodes, ``max_worker_memory``
replaces a worker past its memory limit between steps; both seeded so that runs repeat, reported
in ``infos["recycled"]``, refused where they cannot act."""

from __future__ import annotations

import multiprocessing
import os
import sys

import gymnasium as gym
import numpy as np
import pytest

import vecenv
from helpers import FAST_START, needs_processes
from vecenv.policy import FailurePolicy, parse_bytes, recycled_seed
from vecenv.system import resident_bytes

EPISODE = 4  # steps


class Counted(gym.Env):
    """Observation: a random draw of the env's generator, how many envs this process built
    before this one, and the step within the episode; episodes of EPISODE steps."""

    observation_space = gym.spaces.Box(-1e9, 1e9, (3,), np.float64)
    action_space = gym.spaces.Discrete(2)
    built = 0

    def __init__(self):
        self.number = Counted.built
        Counted.built += 1
        self.t = 0

    def _obs(self):
        return np.array([self.np_random.random(), self.number, self.t])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), 1.0, self.t >= EPISODE, False, {}


def _run(mode: str, steps: int, **kwargs):
    """``(observations, truncations, recycled mask)`` of the reset (seed 3) and of each step; in
    DISABLED mode the envs that ended are reset before the next step."""
    envs = vecenv.ProcessVectorEnv([Counted] * 4, num_workers=2, context=FAST_START, autoreset_mode=mode,
                                   **kwargs)
    none = np.zeros(4, bool)
    try:
        obs, infos = envs.reset(seed=3)
        rows = [(obs.copy(), none, infos.get("_recycled", none).copy())]
        ended = none
        for _ in range(steps):
            if ended.any():
                obs, infos = envs.reset(options={"reset_mask": ended})
                rows.append((obs.copy(), none, infos.get("_recycled", none).copy()))
            obs, _, terminated, truncated, infos = envs.step(np.zeros(4, np.int64))
            rows.append((obs.copy(), truncated.copy(), infos.get("_recycled", none).copy()))
            ended = terminated | truncated if mode == "disabled" else none
        return rows
    finally:
        envs.close()


@needs_processes
@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
def test_every_nth_episode_rebuilds_the_env_between_episodes_and_repeats_exactly(mode):
    every = 2
    first = _run(mode, 6 * EPISODE, max_episodes_per_env=every)
    second = _run(mode, 6 * EPISODE, max_episodes_per_env=every)
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a[0], b[0])  # same seeds, same run
    recycled = np.array([r[2] for r in first])
    assert recycled.any(axis=0).all(), "every env was rebuilt"
    assert not any(r[1].any() for r in first), "no episode was cut"
    # an env's build number goes up exactly where it is reported recycled
    numbers = np.array([r[0][:, 1] for r in first])
    went_up = np.vstack([np.zeros((1, 4), bool), numbers[1:] != numbers[:-1]])
    np.testing.assert_array_equal(went_up, recycled)
    # and only at the first observation of an episode: step 0 of the new env
    assert (np.array([r[0][:, 2] for r in first])[recycled] == 0).all()


def test_the_rebuilt_envs_seed_follows_the_documented_formula():
    expected = int(np.random.SeedSequence([7, 1, 2]).generate_state(1)[0])
    assert recycled_seed(7, 1, 2) == expected
    assert recycled_seed(7, 0, 1) != recycled_seed(8, 0, 1) != recycled_seed(7, 0, 2)
    assert recycled_seed(None, 0, 1) is None


class Leaky(Counted):
    """Counted, with ``LEAK`` more bytes held (and touched) at every reset."""

    hoard: list = []
    LEAK = 3_000_000

    def reset(self, *, seed=None, options=None):
        Leaky.hoard.append(np.ones(self.LEAK // 8))
        return super().reset(seed=seed, options=options)


@needs_processes
@pytest.mark.timeout(60)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_worker_past_its_memory_limit_is_replaced_between_steps():
    # one episode of each of a worker's two envs, and the interpreter's own (which varies by
    # CPython version: a few MB)
    growth = 2 * Leaky.LEAK + 4_000_000
    # workers that do not start as a copy of this process: a forked one is as large as the test
    # run happens to be when it starts, which would set each new worker's size, not its leak
    context = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    envs = vecenv.ProcessVectorEnv([Leaky] * 4, num_workers=2, context=context, max_worker_memory="1TB")
    try:
        envs.reset(seed=0)
        # the limit from these workers' own size
        limit = max(resident_bytes(p.pid) for p in envs.processes) + 8 * Leaky.LEAK
        envs._flight.memory.limit = limit
        pids, peak, recycled = {p.pid for p in envs.processes}, 0, 0
        for _ in range(16 * EPISODE):
            _, _, _, truncated, infos = envs.step(np.zeros(4, np.int64))
            cut = infos.get("_recycled", np.zeros(4, bool))
            np.testing.assert_array_equal(truncated, cut)  # cut only where recycled says so
            recycled += cut.sum()
            if cut.any():
                assert all("max_worker_memory" in reason for reason in infos["recycle_reason"][cut])
            pids |= {p.pid for p in envs.processes}
            peak = max(peak, *(resident_bytes(p.pid) or 0 for p in envs.processes))
        assert recycled >= 4 and len(pids) >= 4, (recycled, pids)
        assert peak <= limit + growth, (peak, limit)
    finally:
        envs.close()
    assert not [pid for pid in pids if os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().split()[2] != "Z"]


# ---------------------------------------------------------------- options, checked up front
@pytest.mark.parametrize("backend", ["serial", "thread"])
@pytest.mark.parametrize("option", [{"max_episodes_per_env": 10}, {"max_worker_memory": "2GB"}])
def test_serial_and_thread_refuse_recycling_saying_why_and_what_to_use(backend, option):
    name = next(iter(option))
    with pytest.raises(ValueError, match=name) as caught:
        vecenv.make("CartPole-v1", 2, backend=backend, **option)
    message = str(caught.value)
    assert f"The {backend} backend" in message and "backend='process'" in message
    assert "no worker process to replace" in message


@pytest.mark.parametrize(("option", "value"), [
    ("max_episodes_per_env", 0), ("max_episodes_per_env", 1.5), ("max_episodes_per_env", True),
    ("max_worker_memory", "lots"), ("max_worker_memory", -1), ("max_worker_memory", "0MB"),
])
def test_bad_recycling_values_are_refused_naming_the_option(option, value):
    with pytest.raises(ValueError, match=option):
        FailurePolicy(**{option: value})


def test_memory_limits_read_as_bytes():
    assert parse_bytes("m", "2GB") == 2 * 10**9
    assert parse_bytes("m", "400 MB") == 400 * 10**6
    assert parse_bytes("m", "1GiB") == 2**30
    assert parse_bytes("m", 12345) == 12345
    assert FailurePolicy(max_worker_memory="400MB").max_worker_memory == 400 * 10**6


@needs_processes
@pytest.mark.timeout(60)
def test_auto_with_a_recycling_option_is_the_process_backend():
    envs = vecenv.make(Counted, 2, max_episodes_per_env=3, num_workers=2, context=FAST_START)
    try:
        assert envs.backend == "process" and envs.policy.max_episodes_per_env == 3
    finally:
        envs.close()


@needs_processes
@pytest.mark.timeout(60)
def test_vecenv_check_counts_the_envs_the_process_backend_recycled():
    from vecenv.check import CheckReport, check_backends

    report = CheckReport("counted", 2, 3 * EPISODE)
    check_backends(report, Counted, ["serial", "process"], 2, 3 * EPISODE, 0, {"max_episodes_per_env": 1})
    assert "recycled" not in report.backends["serial"]
    assert report.backends["process"]["recycled"] == 2 * 2  # episodes 2 and 3 of each env
    assert "4 env(s) recycled" in report.findings[-1].message
    assert not report.problems, report.problems


@needs_processes
@pytest.mark.timeout(60)
def test_sb3_and_envpool_apis_take_the_options():
    from vecenv.envpool import make as envpool_make
    from vecenv.sb3 import SubprocVecEnv

    venv = SubprocVecEnv([Counted] * 2, start_method=FAST_START, num_workers=2, max_episodes_per_env=1)
    try:
        venv.reset()
        reports = []
        for _ in range(2 * EPISODE):
            _, _, dones, _ = venv.step(np.zeros(2, np.int64))
            reports += [info.get("recycled", False) for info, done in zip(venv.reset_infos, dones, strict=True) if done]
        assert reports and all(reports)  # SB3 resets at once: the new episode's reset info says so
    finally:
        venv.close()
    if sys.platform.startswith("linux"):  # a worker's memory is read from /proc
        pool = envpool_make("CartPole-v1", num_envs=2, backend="process",
                            backend_kwargs={"max_worker_memory": "64GB", "context": FAST_START})
        try:
            assert pool.vector_env.policy.max_worker_memory == 64 * 10**9
        finally:
            pool.close()
    else:
        with pytest.raises(ValueError, match="/proc"):
            envpool_make("CartPole-v1", num_envs=2, backend="process", backend_kwargs={"max_worker_memory": "64GB"})
    with pytest.raises(ValueError, match="max_episodes_per_env"):
        envpool_make("CartPole-v1", num_envs=2, backend="thread", backend_kwargs={"max_episodes_per_env": 3})


@needs_processes
@pytest.mark.timeout(60)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_async_batches_replace_only_a_worker_with_nothing_in_flight():
    envs = vecenv.ProcessVectorEnv([Leaky] * 4, num_workers=2, context=FAST_START, batch_size=2,
                                   max_worker_memory=1)  # every worker is past it at once
    try:
        _, infos = envs.reset(seed=0)
        recycled = 0
        for _ in range(40):
            envs.send(np.zeros(2, np.int64), infos["env_id"])
            _, _, _, truncated, infos = envs.recv()
            cut = infos.get("_recycled", np.zeros(2, bool))
            np.testing.assert_array_equal(truncated, cut)
            recycled += cut.sum()
        assert recycled >= 4
    finally:
        envs.close()


@needs_processes
@pytest.mark.timeout(60)
def test_pettingzoo_games_rebuild_their_env_every_n_games_and_repeat():
    pytest.importorskip("pettingzoo")
    import vecenv.pettingzoo as vpz
    from pz_envs import DyingEnv

    def run():
        trace, recycled = [], 0
        with vpz.make(DyingEnv, 2, backend="process", num_workers=2, context=FAST_START,
                      max_episodes_per_env=2) as envs:
            obs, _ = envs.reset(seed=0)
            trace.append(obs.copy())
            for _ in range(60):
                obs, _, _, _, infos = envs.step(np.zeros(envs.num_envs, np.int64))
                trace.append(obs.copy())
                recycled += int(infos.get("_recycled", np.zeros(1, bool)).any())
        return recycled, np.array(trace)

    (first, a), (second, b) = run(), run()
    assert first > 0 and first == second
    np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="max_episodes_per_env=2 needs env groups in worker processes"):
        vpz.make(DyingEnv, 2, backend="thread", max_episodes_per_env=2)
    with pytest.raises(ValueError, match="max_worker_memory"):
        vpz.make(DyingEnv, 2, backend="process", max_worker_memory="1GB")


def test_vecenv_check_refuses_a_bad_recycling_option_before_running(capsys):
    from vecenv.cli import EXIT_USAGE, main

    assert main(["check", "CartPole-v1", "--max-worker-memory", "lots"]) == EXIT_USAGE
    assert "--max-worker-memory: expected bytes" in capsys.readouterr().err
    assert main(["check", "CartPole-v1", "--max-episodes-per-env", "0"]) == EXIT_USAGE
    assert "--max-episodes-per-env: expected an int >= 1" in capsys.readouterr().err
