"""vecenv.bench: the benchmark envs, the runner, the report and the env doctor's API."""

from __future__ import annotations

import itertools
import pickle
import time

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import vecenv
from vecenv.bench import (
    BUSY_ID,
    VARIABLE_BUSY_ID,
    BenchConfig,
    BusyEnv,
    VariableBusyEnv,
    check_env,
    peer_contender,
    resolve_env,
    run_bench,
    vecenv_contender,
)
from vecenv.bench.contenders import Contender, action_pool
from vecenv.bench.envs import EnvArgumentError
from vecenv.bench.report import format_table, run_to_json, table_rows
from vecenv.bench.runner import DEFAULT_SUITE, measure


# ==================================================================== the busy envs
def test_busy_env_spaces_and_truncation():
    env = BusyEnv(step_cost_us=0, episode_length=5)
    assert env.observation_space == spaces.Box(0, 255, (84, 84, 4), np.uint8)
    assert env.action_space == spaces.Discrete(4)
    obs, info = env.reset(seed=1)
    assert env.observation_space.contains(obs) and info == {}
    for t in range(5):
        obs, reward, term, trunc, _ = env.step(t % 4)
        assert env.observation_space.contains(obs) and reward in (0.0, 1.0) and not term
        assert trunc == (t == 4)


def test_busy_env_is_deterministic_under_seed():
    def rollout(seed):
        env = BusyEnv(step_cost_us=0, episode_length=20, obs_shape=(8, 8))
        obs, _ = env.reset(seed=seed)
        out = [obs]
        for t in range(10):
            obs, r, *_ = env.step(t % 4)
            out += [obs, r]
        return out

    a, b, c = rollout(3), rollout(3), rollout(4)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


def test_busy_env_burns_at_least_its_step_cost():
    env = BusyEnv(step_cost_us=2000, obs_shape=(2,))
    env.reset(seed=0)
    t0 = time.perf_counter()
    env.step(0)
    assert time.perf_counter() - t0 >= 0.002  # a lower bound: spinning never ends early


def test_busy_envs_are_registered_pass_kwargs_and_pickle():
    env = gym.make(BUSY_ID, step_cost_us=0, episode_length=3, obs_shape=(4,))
    assert env.observation_space.shape == (4,)
    assert env.unwrapped.episode_length == 3
    env.close()
    var = gym.make(VARIABLE_BUSY_ID, min_cost_us=0, max_cost_us=1)
    assert isinstance(var.unwrapped, VariableBusyEnv)
    var.close()
    clone = pickle.loads(pickle.dumps(BusyEnv(step_cost_us=7)))
    assert clone.step_cost_us == 7
    fn = resolve_env(BUSY_ID, {"obs_shape": (2,)}).env_fn
    assert pickle.loads(pickle.dumps(fn))().observation_space.shape == (2,)


def test_variable_busy_costs_are_seeded():
    def costs(seed):
        env = VariableBusyEnv(min_cost_us=50, max_cost_us=500, obs_shape=(2,))
        env.reset(seed=seed)
        return [env._cost_rng.uniform(50, 500) for _ in range(5)]

    assert costs(1) == costs(1) and costs(1) != costs(2)
    assert all(50 <= c <= 500 for c in costs(1))
    with pytest.raises(ValueError, match="min_cost_us <= max_cost_us"):
        VariableBusyEnv(min_cost_us=10, max_cost_us=5)


def test_variable_busy_wait_sleeps_instead_of_burning_cpu():
    env = gym.make(VARIABLE_BUSY_ID, min_cost_us=20_000, max_cost_us=20_000, obs_shape=(2,), wait=True)
    env.reset(seed=0)
    wall, cpu = time.perf_counter(), time.process_time()
    env.step(0)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert wall >= 0.02 and cpu < 0.01, (wall, cpu)  # waited its cost without spending it
    env.close()


def make_small_busy() -> gym.Env:
    return BusyEnv(step_cost_us=0, obs_shape=(3,))


def test_resolve_env_ids_and_factories():
    assert resolve_env("CartPole-v1").kind == "id"
    target = resolve_env(f"{__name__}:make_small_busy")
    assert target.kind == "factory" and target.gym_id is None
    assert target.env_fn().observation_space.shape == (3,)
    with pytest.raises(EnvArgumentError, match="unknown env id"):
        resolve_env("CartPol-v1")
    with pytest.raises(EnvArgumentError, match="has no attribute"):
        resolve_env(f"{__name__}:nope")
    with pytest.raises(EnvArgumentError, match="not callable"):
        resolve_env(f"{__name__}:BUSY_ID")


def test_action_pool_is_reproducible():
    a = action_pool(spaces.Discrete(3), 4, seed=5, size=3)
    b = action_pool(spaces.Discrete(3), 4, seed=5, size=3)
    assert len(a) == 3 and a[0].shape == (4,)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


# ==================================================================== the runner
class _Broken(Contender):
    def build(self, target, num_envs, seed):
        raise RuntimeError("backend exploded\nsecond line")


@pytest.mark.timeout(60)
def test_a_failing_contender_is_reported_and_the_rest_continue():
    broken = _Broken("vecenv/broken", "vecenv", "broken")
    config = BenchConfig(
        envs=[resolve_env("CartPole-v1")],
        contenders=[vecenv_contender("serial"), broken, peer_contender("gym-sync")],
        num_envs=[2],
        steps=40,
        rounds=2,
    )
    run = run_bench(config)
    by_name = {r.contender.name: r for r in run.results}
    assert by_name["vecenv/broken"].error == "RuntimeError: backend exploded"
    assert not by_name["vecenv/broken"].rounds and by_name["vecenv/broken"].median is None
    for name in ("vecenv/serial", "gym-sync"):
        assert by_name[name].ok and len(by_name[name].rounds) == 2 and by_name[name].median > 0
    table = format_table(run)
    assert "failed" in table and "RuntimeError: backend exploded" in table
    data = run_to_json(run)
    broken_json = next(r for r in data["results"] if r["contender"] == "vecenv/broken")
    assert broken_json["status"] == "failed" and broken_json["steps_per_s"] == []


@pytest.mark.timeout(60)
def test_measure_counts_env_steps_and_closes():
    closed = []

    class Spy(Contender):
        def build(self, target, num_envs, seed):
            driver = super().build(target, num_envs, seed)
            original = driver.close
            driver.close = lambda: (closed.append(True), original())
            return driver

    spy = Spy("gym-sync", "peer", "gym-sync")
    round_, workers = measure(spy, resolve_env("CartPole-v1"), 3, steps=10, seconds=None)
    assert round_.env_steps == 12  # 4 vector steps of 3 envs: at least 10 env steps
    assert round_.seconds > 0 and round_.steps_per_s > 0 and workers == 1
    assert closed == [True]


@pytest.mark.timeout(60)
def test_batch_contender_skipped_when_batch_not_smaller():
    config = BenchConfig(
        envs=[resolve_env("CartPole-v1")],
        contenders=[vecenv_contender("serial", batch_size=2)],
        num_envs=[2, 4],
        steps=20,
        rounds=1,
    )
    run = run_bench(config)
    small, big = run.results
    assert small.skipped and "batch size 2" in small.skipped
    assert big.ok and big.rounds[0].env_steps == 20
    assert [cells[4] for cells, _ in table_rows(run)] == ["skipped", f"{big.median:,.0f}"]


@pytest.mark.timeout(60)
def test_envpool_peer_runs_its_own_ids_and_declines_others():
    """Runs where EnvPool is installed (it is not a vecenv dependency; CI skips this)."""
    pytest.importorskip("envpool", reason="envpool is not installed (pip install envpool)")
    from vecenv.bench import peer_contender

    pool = peer_contender("envpool")
    assert pool.supports(resolve_env("CartPole-v1")) is None
    assert pool.supports(resolve_env(BUSY_ID)) == f"envpool has no {BUSY_ID}"
    assert "own registered ids" in pool.supports(resolve_env(f"{__name__}:make_small_busy"))
    round_, _ = measure(pool, resolve_env("CartPole-v1"), 4, steps=40, seconds=None)
    assert round_.env_steps == 40 and round_.steps_per_s > 0


def test_default_suite_covers_both_regimes():
    assert DEFAULT_SUITE == {"CartPole-v1": [2, 8, 16], BUSY_ID: [8]}
    assert BenchConfig(envs=[], contenders=[]).budget() == (None, 1.0)


# ==================================================================== the env doctor's API
_counter = itertools.count()


def make_growing_env() -> gym.Env:
    """Every copy has a different observation shape."""
    return BusyEnv(step_cost_us=0, obs_shape=(2 + next(_counter),))


class _StatefulEnv(gym.Env):
    """Transitions read a class-level counter: copies seeded alike still diverge."""

    observation_space = spaces.Box(-np.inf, np.inf, (1,), np.float64)
    action_space = spaces.Discrete(2)
    shared = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1), {}

    def step(self, action):
        type(self).shared += 1
        return np.array([float(type(self).shared)]), 0.0, False, False, {}


class _WrongDtypeEnv(_StatefulEnv):
    observation_space = spaces.Box(-1.0, 1.0, (1,), np.float32)

    def step(self, action):
        return np.zeros(1, dtype=np.float64), 0.0, False, False, {}


def test_check_spaces_that_differ_across_copies():
    report = check_env(make_growing_env, backends=[], spawn=False, steps=5)
    assert [f.topic for f in report.problems] == ["spaces"]
    assert "different spaces" in report.problems[0].message


def test_check_steps_that_diverge_under_one_seed():
    report = check_env(_StatefulEnv, backends=[], spawn=False, steps=5)
    assert any("diverged at step 0" in f.message for f in report.problems)


def test_check_explains_a_dtype_mismatch():
    report = check_env(_WrongDtypeEnv, backends=[], spawn=False, steps=3)
    assert any("dtype float64, the space float32" in f.message for f in report.problems)


@pytest.mark.timeout(60)
def test_check_cartpole_clean_with_recommendation():
    report = check_env("CartPole-v1", backends=["serial"], spawn=False, steps=30)
    assert report.problems == []
    assert report.step_us and report.step_us > 0 and report.obs_bytes == 16
    assert report.recommendation == "serial" and report.backends["serial"]["steps_per_s"] > 0


def test_unpicklable_factory_with_cloudpickle_only_is_a_warning():
    factory = lambda: BusyEnv(step_cost_us=0, obs_shape=(2,))  # noqa: E731
    with pytest.raises((pickle.PicklingError, AttributeError)):
        pickle.dumps(factory)
    cloudpickle.dumps(factory)
    report = check_env(factory, backends=[], spawn=False, steps=3)
    assert report.problems == []
    assert any(f.level == "warning" and f.topic == "pickle" for f in report.findings)


def test_available_backends_are_picked_up_dynamically():
    from vecenv.bench.contenders import default_backends

    names = default_backends()
    assert "serial" in names and "ray" not in names
    assert set(names) <= set(vecenv.available_backends())


@pytest.mark.timeout(60)
def test_process_inline_variant_builds_an_inline_process_env():
    from vecenv.bench.contenders import default_backends, vecenv_contender

    assert "process+inline" in default_backends(variants=True)
    assert "process+inline" not in default_backends()
    c = vecenv_contender("process+inline")
    assert c.name == "vecenv/process+inline" and c.backend == "process" and dict(c.options) == {"inline": True}
    target = resolve_env("CartPole-v1")
    driver = c.build(target, 4, seed=0)
    try:
        assert len(driver.envs.processes) == 1  # one worker process + the main process's group
        driver.reset(0)
        assert driver.run(3, time.perf_counter() + 5) == 3  # vector steps of 4 envs each
    finally:
        driver.close()
