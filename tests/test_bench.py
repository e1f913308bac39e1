"""vecenv.bench: the benchmark envs, the runner, the report and the env doctor's API."""

from __future__ import annotations

import itertools
import os
import pickle
import time
from types import SimpleNamespace

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
    peer_contender,
    resolve_env,
    run_bench,
    vecenv_contender,
)
from vecenv.bench.contenders import Contender, action_pool
from vecenv.bench.envs import EnvArgumentError
from vecenv.bench.report import format_table, run_to_json, table_rows
from vecenv.bench.runner import DEFAULT_SUITE, measure
from vecenv.check import check_env


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


@pytest.mark.parametrize("wait", [True, False])
def test_variable_busy_wait_sleeps_instead_of_burning_cpu(monkeypatch, wait):
    """wait=True sleeps for each step's cost (an env waiting on something outside it), wait=False
    burns it; either way the cost is the seeded draw."""
    from vecenv.bench import envs as bench_envs

    slept, spun = [], []
    monkeypatch.setattr(bench_envs, "time", SimpleNamespace(sleep=slept.append, perf_counter=time.perf_counter))
    monkeypatch.setattr(bench_envs, "spin", spun.append)
    env = gym.make(VARIABLE_BUSY_ID, min_cost_us=200, max_cost_us=900, obs_shape=(2,), wait=wait)
    env.reset(seed=3)
    for _ in range(5):
        env.step(0)
    env.close()
    spent, unused = (slept, spun) if wait else (spun, slept)
    assert unused == [] and len(spent) == 5
    assert all(200e-6 <= s <= 900e-6 for s in spent) and len(set(spent)) == 5
    twin = VariableBusyEnv(min_cost_us=200, max_cost_us=900, obs_shape=(2,), wait=wait)
    twin.reset(seed=3)
    assert spent == [twin._step_cost() for _ in range(5)]  # the seeded draws, in order


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
    assert report.backends["serial"]["steps_per_s"] > 0
    # the rule backend="auto" follows, on the step cost the check measured and this machine
    from vecenv.layout import EnvProbe, decide, machine_costs, usable_cores

    rule = decide(EnvProbe(report.step_us, 1.0, 16), machine_costs(), report.num_envs, usable_cores())
    assert report.recommendation == rule.backend and rule.reason in report.reason


# what vecenv check recommends, branch by branch: the rule (vecenv.layout.decide, stubbed here with
# a fixed choice) against the throughput each backend reached
def _checked(step_us, **rates):
    from vecenv.check import CheckReport

    report = CheckReport("env", num_envs=8, steps=10, step_us=step_us, obs_bytes=64)
    report.backends = {b: {"steps_per_s": r, "num_workers": None, "error": None} for b, r in rates.items()}
    return report


@pytest.fixture
def rule(monkeypatch):
    """Stub the layout rule: ``rule["layout"]`` is what it picks; the probe it saw is recorded."""
    import vecenv.check as check_recommend

    seen: dict = {}

    def decide(probe, costs, num_envs, cores, **kwargs):
        seen.update(probe=probe, num_envs=num_envs)
        return seen["layout"]

    monkeypatch.setattr(check_recommend, "decide", decide)
    monkeypatch.setattr(check_recommend, "machine_costs", lambda: None)
    return seen


def _recommend(report):
    from vecenv.check import recommend_backend

    recommend_backend(report)
    return report.recommendation, report.reason


def test_recommendation_follows_the_rule_when_the_measurements_agree(rule):
    from vecenv.layout import Layout

    rule["layout"] = Layout("process", num_workers=2, reason="steps cost more than a crossing")
    backend, reason = _recommend(_checked(300.0, serial=3000.0, thread=3100.0, process=5500.0))
    assert backend == "process"
    assert "backend='process', num_workers=2, inline=False" in reason and "steps cost more" in reason
    assert rule["probe"].step_us == 300.0 and rule["probe"].obs_bytes == 64 and rule["num_envs"] == 8
    rule["layout"] = Layout("process", num_workers=1, inline=True, reason="cheap steps, few cores")
    backend, reason = _recommend(_checked(5.0, serial=60000.0, process=70000.0))
    assert backend == "process" and "inline=True" in reason
    rule["layout"] = Layout("serial", reason="a step costs less than a crossing")
    backend, reason = _recommend(_checked(5.0, serial=60000.0, process=85000.0))  # < 1.5x: the rule
    assert backend == "serial" and "backend='serial'" in reason


def test_a_backend_measured_much_faster_than_the_rules_choice_wins(rule):
    from vecenv.layout import Layout

    rule["layout"] = Layout("process", num_workers=2, reason="predicted faster")
    backend, reason = _recommend(_checked(300.0, serial=9200.0, process=4000.0))  # cores were busy
    assert backend == "serial" and "2.3× faster here" in reason
    rule["layout"] = Layout("serial", reason="predicted faster")
    backend, _ = _recommend(_checked(5.0, serial=10000.0, process=16000.0))
    assert backend == "process"
    rule["layout"] = Layout("process", num_workers=2, reason="predicted faster")
    backend, _ = _recommend(_checked(300.0, serial=9000.0))  # the rule's choice did not run
    assert backend == "process"


def test_threads_that_beat_serial_mean_the_step_releases_the_gil(rule):
    from vecenv.layout import Layout

    rule["layout"] = Layout("process", num_workers=2, reason="predicted faster")
    backend, reason = _recommend(_checked(2000.0, serial=1000.0, thread=1500.0, process=1700.0))
    assert backend == "thread" and "threads ran 1.5× faster than serial" in reason
    backend, _ = _recommend(_checked(2000.0, serial=1000.0, thread=1250.0, process=1700.0))  # < 1.3x
    assert backend == "process"


def test_recommendation_without_a_step_cost_or_without_any_run(rule):
    rule["layout"] = None  # never asked
    backend, reason = _recommend(_checked(None, serial=1000.0, process=3000.0))
    assert backend == "process" and "ran fastest here" in reason
    backend, reason = _recommend(_checked(40.0, serial=None, process=None))
    assert backend is None and reason == "no backend ran the env"


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


# ==================================================================== warnings kept out of the table
def make_warning_busy() -> gym.Env:
    """A small busy env whose constructor warns, as EnvPool's Box spaces do."""
    import warnings

    warnings.warn("\x1b[33mWARN: precision lowered by the peer\x1b[0m", UserWarning, stacklevel=2)
    return BusyEnv(step_cost_us=0, episode_length=50, obs_shape=(2,))


@pytest.mark.timeout(60)
def test_bench_reports_warnings_once_after_the_table(capsys):
    from vecenv.cli import main

    code = main([
        "bench", f"{__name__}:make_warning_busy", "--num-envs", "2", "--steps", "20", "--rounds", "2",
        "--backends", "serial", "--compare", "gym-sync", "--quiet", "--json", os.devnull,
    ])
    assert code == 0
    out, err = capsys.readouterr()
    assert "precision lowered" not in out  # the table (stdout) has none
    lines = [line for line in err.splitlines() if "precision lowered" in line]
    assert len(lines) == 1, err  # one line; counted once per code location and round:
    assert "UserWarning: WARN: precision lowered by the peer (4×; " in lines[0]  # 2 contenders x 2
    assert "vecenv/serial" in lines[0] and "gym-sync" in lines[0] and "\x1b" not in lines[0]
    assert err.index("warnings raised while measuring") < err.index(lines[0])


def test_bench_json_lists_warnings_only_when_there_were_some():
    config = BenchConfig(
        envs=[resolve_env(f"{__name__}:make_warning_busy")], contenders=[vecenv_contender("serial")],
        num_envs=[2], steps=10, rounds=1,
    )
    run = run_bench(config)
    assert [(w.category, w.message, w.count, w.contenders) for w in run.warnings] == [
        ("UserWarning", "WARN: precision lowered by the peer", 1, ["vecenv/serial"])
    ]
    record = run_to_json(run)
    assert record["warnings"] == [{"category": "UserWarning", "message": "WARN: precision lowered by the peer",
                                   "count": 1, "contenders": ["vecenv/serial"]}]
    assert run.results[0].ok and "precision" not in format_table(run)
    quiet = run_bench(BenchConfig(envs=[resolve_env("CartPole-v1")], contenders=[vecenv_contender("serial")],
                                  num_envs=[2], steps=10, rounds=1))
    assert quiet.warnings == [] and "warnings" not in run_to_json(quiet)


# ==================================================================== PufferLib as a peer
def _pufferlib():
    """Skip unless pufferlib.vector imports (pip install --no-deps pufferlib-core psutil)."""
    from vecenv.bench import puffer

    try:
        puffer.import_pufferlib()
    except ImportError as exc:
        pytest.skip(f"PufferLib is not usable here: {exc}")
    return puffer


@pytest.mark.parametrize(
    ("peer", "cores", "num_envs", "batch", "expected"),
    [
        ("pufferlib-serial", 2, 8, None, (1, None)),
        ("pufferlib-mp", 2, 8, None, (2, None)),
        ("pufferlib-mp", 16, 64, None, (16, None)),
        ("pufferlib-mp", 16, 8, None, (8, None)),
        ("pufferlib-mp", 4, 6, None, (3, None)),
        ("pufferlib-async", 2, 8, None, (2, 4)),
        ("pufferlib-async", 16, 16, None, (16, 8)),
        ("pufferlib-async", 16, 64, None, (16, 32)),
        ("pufferlib-async", 4, 8, 2, (4, 2)),
    ],
)
def test_pufferlib_layout_is_one_pufferlib_accepts(monkeypatch, peer, cores, num_envs, batch, expected):
    """Workers: at most the physical cores (PufferLib refuses more), dividing num_envs and, for
    the async pool, the batch into whole workers (num_envs // 2 by default, PufferLib's "auto")."""
    from vecenv.bench import puffer

    monkeypatch.setattr(puffer, "physical_cores", lambda: cores)
    assert puffer.puffer_layout(peer, num_envs, batch) == expected


def test_pufferlib_layouts_it_would_refuse_are_skipped_with_the_reason(monkeypatch):
    from vecenv.bench import puffer

    monkeypatch.setattr(puffer, "physical_cores", lambda: 1)
    with pytest.raises(ValueError, match="2 workers or more"):
        puffer.puffer_layout("pufferlib-async", 8)
    with pytest.raises(ValueError, match="refuses 4 workers on 1 physical cores"):
        puffer.puffer_layout("pufferlib-mp", 8, num_workers=4)
    monkeypatch.setattr(puffer, "physical_cores", lambda: 4)
    with pytest.raises(ValueError, match="divisible by batch_size"):
        puffer.puffer_layout("pufferlib-async", 8, 3)
    with pytest.raises(ValueError, match="between 1 and num_envs - 1"):
        puffer.puffer_layout("pufferlib-async", 8, 8)
    with pytest.raises(ValueError, match="takes no batch_size"):
        peer_contender("pufferlib-serial", batch_size=2)
    assert peer_contender("pufferlib-mp", num_workers=1).name == "pufferlib-mp[w=1]"
    assert peer_contender("pufferlib-async", batch_size=2).name == "pufferlib-async[b=2]"


def test_pufferlib_not_installed_says_how_to_install(monkeypatch):
    from vecenv.bench import contenders

    monkeypatch.setattr(contenders, "_installed", lambda module: module != "pufferlib")
    why = contenders.peer_unavailable("pufferlib-mp")
    assert why == ("pufferlib is not installed (pip install --no-deps pufferlib-core psutil "
                   "(see docs/bench.md#pufferlib))")
    assert contenders.peer_unavailable("gym-sync") is None


@pytest.mark.timeout(120)
def test_bench_prints_pufferlib_rows_beside_the_others(tmp_path, capsys):
    """Where PufferLib is installed, `vecenv bench` measures its Serial, Multiprocessing and async
    pool beside gymnasium's and vecenv's, with positive figures and ratios."""
    import json

    from vecenv.cli import main

    _pufferlib()
    out_json = tmp_path / "bench.json"
    code = main([
        "bench", "CartPole-v1", "--num-envs", "4", "--seconds", "0.2", "--rounds", "1",
        "--backends", "serial", "--compare", "gym-sync,pufferlib-serial,pufferlib-mp,pufferlib-async",
        "--quiet", "--json", str(out_json),
    ])
    assert code == 0
    out = capsys.readouterr().out
    for name in ("pufferlib-serial", "pufferlib-mp", "pufferlib-async"):
        assert name in out
    results = {r["contender"]: r for r in json.loads(out_json.read_text())["results"]}
    for name in ("pufferlib-serial", "pufferlib-mp", "pufferlib-async"):
        r = results[name]
        assert r["status"] == "ok", r
        assert r["median_steps_per_s"] > 0 and r["vs_gym_sync"] > 0
    assert results["pufferlib-serial"]["num_workers"] == 1
    assert results["pufferlib-mp"]["num_workers"] >= 1
    assert json.loads(out_json.read_text())["versions"]["pufferlib-core"]


@pytest.mark.timeout(120)
def test_bench_lists_pufferlib_by_default_when_installed():
    """No --compare: every installed peer, PufferLib's three among them."""
    from vecenv.cli import parse_peers

    _pufferlib()
    assert {"pufferlib-serial", "pufferlib-mp", "pufferlib-async"} <= set(parse_peers(None))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("peer", ["pufferlib-serial", "pufferlib-mp", "pufferlib-async"])
def test_pufferlib_driver_steps_the_env_and_leaves_no_process(peer):
    _pufferlib()
    contender = peer_contender(peer)
    round_, workers = measure(contender, resolve_env(f"{__name__}:make_small_busy"), 4, steps=40, seconds=None)
    rows = 2 if peer == "pufferlib-async" else 4
    assert round_.env_steps == 40 and round_.steps_per_s > 0 and workers >= 1
    assert round_.env_steps % rows == 0


@pytest.mark.timeout(60)
def test_pufferlib_dead_worker_is_an_error_not_a_hang():
    """PufferLib's recv spins forever on a dead worker; the driver's watchdog ends the spin and
    the run fails naming the worker, within a bounded time, and closes every process."""
    import os
    import signal

    from vecenv.bench.puffer import PufferLibFailure

    _pufferlib()
    driver = peer_contender("pufferlib-mp").build(resolve_env(f"{__name__}:make_small_busy"), 4, 0)
    try:
        driver.reset(0)
        assert driver.run(5, float("inf")) == 5
        os.kill(driver.envs.processes[0].pid, signal.SIGKILL)
        t0 = time.perf_counter()
        with pytest.raises(PufferLibFailure, match=r"worker 0 \(pid \d+\) exited with code -9"):
            driver.run(10**9, float("inf"))
        assert time.perf_counter() - t0 < 10
    finally:
        driver.close()
    assert all(p.exitcode is not None for p in driver.envs.processes)


@pytest.mark.timeout(60)
def test_pufferlib_stalled_worker_is_an_error_not_a_hang(monkeypatch):
    import os
    import signal

    from vecenv.bench import puffer

    _pufferlib()
    driver = peer_contender("pufferlib-mp").build(resolve_env(f"{__name__}:make_small_busy"), 4, 0)
    stopped = driver.envs.processes[-1].pid
    try:
        driver.reset(0)
        monkeypatch.setattr(puffer, "STALL_SECONDS", 0.5)  # after the workers' start, however slow
        os.kill(stopped, signal.SIGSTOP)
        with pytest.raises(puffer.PufferLibFailure, match="returned no step for 0.5 s"):
            driver.run(10**9, float("inf"))
    finally:
        os.kill(stopped, signal.SIGCONT)
        driver.close()
    assert all(p.exitcode is not None for p in driver.envs.processes)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_run_real_measures_pufferlib_in_process_and_in_two_runs_children(tmp_path):
    """benchmarks/run_real.py knows PufferLib's contenders, in its own process (idle) and in the
    two-runs children it starts (which run run_real.py too), and writes their rounds."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    _pufferlib()
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "run_real.py"
    out = tmp_path / "real.json"
    proc = subprocess.run(
        [sys.executable, str(script), "--quick", "--envs", "CartPole-v1", "--scenario", "idle,two-runs",
         "--contenders", "gym-sync,pufferlib-serial,pufferlib-mp,pufferlib-async,pufferlib-mp-w1",
         "--json", str(out)],
        capture_output=True, text=True, timeout=280,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["machine"]["packages"]["pufferlib-core"]
    for table in doc["tables"]:
        rows = {r["contender"]: r for r in table["rows"]}
        for name in ("pufferlib-serial", "pufferlib-mp", "pufferlib-async", "pufferlib-mp-w1"):
            assert rows[name]["skipped"] is None and rows[name]["errors"] == [], (table["title"], rows[name])
            assert rows[name]["median_steps_per_s"] > 0
    idle = {r["contender"]: r for r in doc["tables"][0]["rows"]}
    assert "batch_size=4)" in idle["pufferlib-async"]["rounds"][0]["built"]  # N // 2 of N=8
    assert "num_workers=1," in idle["pufferlib-mp-w1"]["rounds"][0]["built"]


@pytest.mark.timeout(60)
def test_pufferlib_caller_pausing_between_steps_is_no_stall(monkeypatch):
    """Only a command a worker holds unanswered counts towards a stall: a caller that waits
    between steps (a two-runs child waiting for its start) is not declared hung."""
    from vecenv.bench import puffer

    _pufferlib()
    driver = peer_contender("pufferlib-mp").build(resolve_env(f"{__name__}:make_small_busy"), 4, 0)
    try:
        driver.reset(0)
        monkeypatch.setattr(puffer, "STALL_SECONDS", 0.3)
        time.sleep(1.0)  # the watchdog looks 10 times, every worker idle
        assert driver.watch.failed is None
        assert driver.run(20, float("inf")) == 20
    finally:
        driver.close()
