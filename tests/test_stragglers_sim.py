"""benchmarks/stragglers.py: the zero-overhead simulation of each readiness rule, and its cost streams."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import numpy as np
import pytest

from helpers import load_benchmark

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"



stragglers = load_benchmark("stragglers")
RULES = [("sync", None), ("queue", None), ("worker", 8), ("env", 8), ("worker", 4), ("env", 4)]


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("rule", "batch"), RULES)
def test_constant_costs_reach_the_ceiling_under_every_rule(rule, batch):
    units = [np.full(500, 1e-3) for _ in range(16)]
    ceiling = stragglers.simulate("ceiling", units, 4)
    assert ceiling == pytest.approx(4 / 1e-3, rel=0.01)  # 4 workers, one env-step per ms each
    assert stragglers.simulate(rule, units, 4, batch) == pytest.approx(ceiling, rel=0.02)


@pytest.mark.timeout(30)
def test_one_slow_env_holds_a_barrier_and_per_env_readiness_frees_the_rest():
    units = [np.full(2000, 1e-3) for _ in range(16)]
    units[0] = np.full(2000, 1e-2)  # 10x slower, in worker 0's group of 4
    ceiling = stragglers.simulate("ceiling", units, 4)
    sync = stragglers.simulate("sync", units, 4)
    assert sync == pytest.approx(16 / 13e-3, rel=0.02)  # every step waits for group 0: 3 + 10 ms
    # one queue: the slow env holds up only the worker that takes it (10 ms); the rest share 3 workers
    assert stragglers.simulate("queue", units, 4) == pytest.approx(16 / 10e-3, rel=0.02)
    per_worker = stragglers.simulate("worker", units, 4, 8)
    per_env = stragglers.simulate("env", units, 4, 8)
    assert sync < per_worker < per_env <= ceiling * 1.01
    assert per_env > 1.2 * per_worker


@pytest.mark.timeout(30)
def test_cost_streams_are_reproducible_and_follow_the_costs():
    costs = stragglers.Costs(step_us=400, spread=0.25, reset_us=6000, episode=(40, 160))
    a = stragglers.CostStream(costs, 0, 3).units(0.5)
    b = stragglers.CostStream(costs, 0, 3).units(0.5)
    np.testing.assert_array_equal(a, b)
    steps = a[a < 1e-3]
    assert steps.min() >= 300e-6 and steps.max() <= 500e-6
    assert 1 <= np.count_nonzero(a == 6e-3) <= 10  # a reset every 40-160 steps
    assert a.sum() > 0.5
    env = stragglers.WaitEnv(stragglers.Costs(step_us=10, reset_us=10, episode=(2, 2)), 0, 0)
    env.reset()
    assert [env.step(0)[3] for _ in range(2)] == [False, True]


@pytest.mark.timeout(30)
def test_unknown_rule_is_refused():
    with pytest.raises(ValueError, match="unknown rule"):
        stragglers.simulate("lottery", [np.ones(4)] * 4, 2, 2)


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(),
                    reason="spawned processes cannot import the script this test loads by path")
def test_the_script_measures_each_row_against_the_ceiling(tmp_path):
    out = tmp_path / "s.json"
    result = stragglers.main(["--num-envs", "8", "--workers", "2", "--batch-sizes", "4", "--seconds", "0.2",
                              "--rounds", "1", "--step-us", "200", "--reset-us", "1000", "--sim-seconds", "0.5",
                              "--json", str(out)])
    assert set(result["rates"]) == {"ceiling", "sync", "b=4", "gym-async"}
    assert set(result["sim"]) == {"ceiling", "sync", "queue", "worker b=4", "env b=4"}
    assert all(v[0] > 0 for v in result["rates"].values())
    assert result["sim_shares"]["ceiling"] == 1.0 and 0 < result["sim_shares"]["sync"] < 1
    assert out.exists()
