"""benchmarks/step_timeline.py: the gaps of a step from its stamps, and a short run."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import numpy as np
import pytest

from helpers import load_benchmark

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"



timeline = load_benchmark("step_timeline")


@pytest.mark.timeout(30)
def test_summary_reads_gaps_barrier_efficiency_and_the_last_finisher():
    t = timeline
    caller = np.zeros((2, 6))
    caller[:] = [0.0, 10e-6, 12e-6, 14e-6, 0.0, 0.0]
    envs = np.zeros((2, 4, 4))  # 2 steps, 4 envs in 2 groups of 2
    for k in range(2):
        slow = 1 if k == 0 else 0  # group 1 is slowest in step 0, group 0 in step 1
        for w in range(2):
            each = 300e-6 if w == slow else 100e-6
            start = 20e-6
            for i in range(2):
                envs[k, 2 * w + i, t.START] = start
                envs[k, 2 * w + i, t.END] = start + each
                envs[k, 2 * w + i, t.CPU] = each
                start += each
        caller[k, t.WOKE] = 620e-6 + 5e-6
        caller[k, t.RETURNED] = caller[k, t.WOKE] + 10e-6
    envs[1, 0, t.RESET] = 1
    got = timeline.summarize(caller, envs, [(0, 2), (2, 4)])
    assert got["barrier_efficiency"] == pytest.approx(400 / 600)
    assert got["last_finisher"] == {0: 1, 1: 1}
    assert got["last_finisher_had_reset"] == 0.5 and got["steps_with_a_reset"] == 0.5
    gaps = got["gaps"]
    assert gaps["post starts -> a worker's first env starts"]["median_us"] == pytest.approx(10)
    assert gaps["the slowest group's work"]["median_us"] == pytest.approx(600)
    assert gaps["the last worker's last env ends -> caller wakes"]["median_us"] == pytest.approx(5)
    assert gaps["the whole step (called -> returned)"]["median_us"] == pytest.approx(635)


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="spawned workers cannot import the script")
def test_a_short_run_stamps_every_step(tmp_path):
    from vecenv.transports.process.transport import ProcessTransport

    send = ProcessTransport.send
    result = timeline.main(["--env", "cartpole", "--num-envs", "4", "--workers", "2", "--steps", "50",
                            "--warmup", "5", "--json", str(tmp_path / "t.json")])
    assert sum(result["last_finisher"].values()) == 50
    assert all(np.isfinite(s["median_us"]) for s in result["gaps"].values())
    assert 0 < result["barrier_efficiency"] <= 1
    assert (tmp_path / "t.json").exists()
    assert ProcessTransport.send is send  # the wrapping ends with the run


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="spawned workers cannot import the script")
def test_a_short_run_of_async_batches_stamps_every_returned_env():
    result = timeline.run("cartpole", 4, 2, steps=40, warmup=5, busy_us=0.0, batch=2)
    gaps = result["gaps"]
    assert all(np.isfinite(s["median_us"]) for s in gaps.values())
    assert gaps["a returned env's step ends -> caller wakes"]["median_us"] >= 0
    assert gaps["post starts -> a sent env's step starts (queued)"]["median_us"] >= 0
    assert 1 <= result["workers_per_batch"] <= 2 and 0 < result["workers_busy_share"] <= 1
    assert "async batches of 2" in timeline.report(result)
