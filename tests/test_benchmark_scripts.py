"""The scripts in benchmarks/ run as a user runs them, cut down: each writes what it prints.

All of them are ``slow`` (fresh interpreters, real rounds): ``pytest -m "not slow"`` skips them."""

from __future__ import annotations

import importlib.util
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

from helpers import load_benchmark, needs_processes

pytestmark = pytest.mark.slow

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
TINY_BENCH = ["--steps", "8", "--rounds", "1", "--warmup", "1", "-q"]


_load = load_benchmark


@pytest.mark.timeout(60)
@pytest.mark.parametrize("layout", ["serial", "process"])
def test_step_trace_counts_the_vecenv_functions_of_a_step(layout):
    step_trace = _load("step_trace")
    calls, total = step_trace.trace(layout, steps=3, warmup=3)
    assert "vecenv.engine.core:VectorEnv.step" in calls
    assert calls["vecenv.engine.core:VectorEnv.step"] == 3  # only the traced steps count
    assert total >= len(calls) >= 2
    assert all(name.startswith("vecenv.") for name in calls)


@pytest.mark.timeout(120)
def test_process_bench_measures_two_versions_each_in_its_own_interpreter():
    process_bench = _load("process_bench")
    src = str(BENCHMARKS.parent / "src")
    runs = process_bench.main(["--before", src, "--after", src, "--backends", "serial", "--rounds", "1",
                               "--steps", "20", "--envs", "2"])
    assert set(runs) == {("before", "serial"), ("after", "serial")}
    assert all(len(r) == 1 and r[0][0] > 0 and r[0][1] >= 0 for r in runs.values())  # Windows: 15.6 ms ticks


@pytest.mark.timeout(60)
def test_caller_cost_null_env_and_cpu_per_step():
    caller_cost = _load("caller_cost")
    env = caller_cost.NullEnv("17 floats + 4 infos")
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    _, reward, terminated, truncated, infos = env.step(0)
    assert sorted(infos) == sorted(caller_cost.KINDS["17 floats + 4 infos"][1])
    assert (reward, terminated, truncated) == (1.0, False, False)
    builders = [caller_cost._gym_sync]
    if multiprocessing.get_start_method() == "fork":  # spawned workers cannot import the script
        builders.append(caller_cost._vecenv)
    for build in builders:
        cpu = caller_cost.cpu_per_step(build, 4, "4 floats", 2, seconds=0.02)
        assert 0 <= cpu < 0.1  # (Windows' thread clock moves in 15.6 ms ticks)
    names = [row[0] for row in caller_cost.rows(True, 8, 16, peers_too=False)]
    assert "vecenv process, per worker, 17 floats + 4 infos, 64 envs" in names  # issue 63's goals
    assert "vecenv process, per step, 17 floats + 4 infos, 64 envs in 16 workers" in names


@pytest.mark.timeout(60)
@pytest.mark.skipif(sys.platform != "linux", reason="the floor's bell is a Linux futex, its workers forked")
def test_caller_cost_floor_steps_its_workers_and_own_core_gives_every_core_back():
    caller_cost = _load("caller_cost")
    floor = caller_cost.Floor(3)
    try:
        for _ in range(20):
            floor.step(None)
        assert floor.done.tolist() == [20, 20, 20]  # each worker answered each step
        floor.processes[1].kill()
        floor.processes[1].join(5)
        with pytest.raises(RuntimeError, match="a worker process ended"):  # a bounded wait, not a hang
            floor.step(None)
    finally:
        floor.close()
    assert not any(process.is_alive() for process in floor.processes)
    cores = os.sched_getaffinity(0)
    if caller_cost.own_core_possible():
        assert caller_cost.cpu_per_step(caller_cost._own_core(caller_cost._floor), 4, "4 floats", 2, 0.02) > 0
    assert os.sched_getaffinity(0) == cores
    names = [row[0] for row in caller_cost.rows(True, 8, 16, peers_too=False)]
    assert "floor: the handshake alone, per step, 16 workers" in names


@pytest.mark.timeout(120)
@needs_processes
def test_many_core_layouts_measures_each_layout_and_the_ceiling_against_gym_sync(tmp_path):
    import subprocess

    out = subprocess.run(
        [sys.executable, str(BENCHMARKS / "many_core_layouts.py"), "--env", "CartPole-v1", "--num-envs", "4",
         "--rounds", "1", "--seconds", "0.1", "--layouts", "gym-sync,ceiling,process,inline,batch-half",
         "--json", str(tmp_path / "out.json")],
        capture_output=True, text=True, timeout=110, check=True,
    ).stdout
    rounds = json.loads((tmp_path / "out.json").read_text())["envs"]["CartPole-v1"]
    assert list(rounds[0]) == ["gym-sync", "ceiling", "process", "inline", "batch-half"]
    assert all(r["steps_per_s"] > 0 and r["caller_cpu_us"] >= 0 for r in rounds[0].values())
    assert "share" in out.splitlines()[-1]


def _script(name: str, *args: str, timeout: float = 150) -> subprocess.CompletedProcess:
    """Run ``benchmarks/NAME`` as a user would, in a fresh interpreter."""
    return subprocess.run([sys.executable, str(BENCHMARKS / name), *args], capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.timeout(180)
def test_run_default_writes_the_suite_json_and_plot(tmp_path):
    """benchmarks/run_default.py runs the default suite (cut down here) into --out."""
    done = _script("run_default.py", "--out", str(tmp_path), "--num-envs", "2", "--backends", "serial",
                   "--compare", "gym-sync", *TINY_BENCH)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((tmp_path / "default.json").read_text())
    assert data["schema"] == "vecenv-bench/1"
    assert set(data["settings"]["envs"]) == {"CartPole-v1", "vecenv/Busy-v0"}  # the default suite
    assert {(r["env"], r["contender"]) for r in data["results"]} == {
        (e, c) for e in ("CartPole-v1", "vecenv/Busy-v0") for c in ("vecenv/serial", "gym-sync")
    }
    assert all(r["status"] == "ok" and r["steps_per_s"][0] > 0 for r in data["results"])
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "default.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.timeout(180)
def test_run_async_batch_writes_its_json(tmp_path):
    done = _script("run_async_batch.py", "--out", str(tmp_path), "--backends", "serial",
                   "--compare", "none", *TINY_BENCH)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((tmp_path / "async_batch.json").read_text())
    assert {(r["env"], r["num_envs"], r["batch_size"]) for r in data["results"]} == {
        ("vecenv/VariableBusy-v0", 16, None), ("vecenv/VariableBusy-v0", 16, 8)}


@pytest.mark.timeout(180)
def test_run_envpool_writes_its_json_or_names_what_is_missing(tmp_path):
    done = _script("run_envpool.py", "--out", str(tmp_path), "--num-envs", "2", *TINY_BENCH)
    if importlib.util.find_spec("envpool") is None:
        assert done.returncode == 2 and "envpool is not installed (pip install envpool)" in done.stderr
        assert not (tmp_path / "envpool.json").exists()
        return
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((tmp_path / "envpool.json").read_text())
    assert {r["contender"] for r in data["results"]} >= {"envpool", "gym-sync"}


def _check_script_json(path: Path, script: str, done: subprocess.CompletedProcess) -> dict:
    """What every script's --json holds: its settings, the machine, the versions, and each
    table it printed, every round kept, medians and ratios that follow from the rounds."""
    data = json.loads(path.read_text())
    assert data["schema"] == "vecenv-script/1" and data["script"] == script
    assert data["machine"]["usable_cores"] >= 1 and data["versions"]["gymnasium"] == gym.__version__
    assert data["settings"]["json"] == str(path)
    assert data["tables"]
    for table in data["tables"]:
        assert table["rows"]
        for row in table["rows"]:
            assert row["contender"] in done.stdout  # the figures the script printed
            rounds = row["steps_per_s"]
            assert rounds and all(x > 0 for x in rounds)
            median = row["median_steps_per_s"]
            assert median == statistics.median(rounds)
            medians = {r["contender"]: r.get("median_steps_per_s") for r in table["rows"]}
            for base, ratio in row.get("vs", {}).items():
                assert ratio == pytest.approx(median / medians[base])
    return data


@needs_processes
@pytest.mark.timeout(180)
def test_process_bench_writes_every_table_it_prints(tmp_path):
    out = tmp_path / "process_bench.json"
    done = _script("process_bench.py", "--envs", "2", "--steps", "3", "--busy-steps", "2",
                   "--rounds", "2", "--json", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    data = _check_script_json(out, "process_bench.py", done)
    titles = [t["title"] for t in data["tables"]]
    assert len(titles) == 4 and titles[0] == "CartPole-v1, N=2" and "async batches" in titles[-1]
    for title in titles:
        assert f"## {title}" in done.stdout
    rows = {r["contender"]: r for r in data["tables"][0]["rows"]}
    assert set(rows) == {"gym Sync", "gym Async", "vecenv serial", "vecenv process", "vecenv process inline"}
    assert all(len(r["steps_per_s"]) == 2 for r in rows.values())  # every round is kept
    assert rows["gym Sync"]["vs"]["gym Sync"] == 1.0


@pytest.mark.timeout(180)
def test_sb3_bench_writes_every_table_it_prints(tmp_path):
    pytest.importorskip("stable_baselines3")
    out = tmp_path / "sb3.json"
    done = _script("sb3_bench.py", "--envs", "CartPole-v1", "--num-envs", "2", "--rounds", "1",
                   "--seconds", "0.05", "--json", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    data = _check_script_json(out, "sb3_bench.py", done)
    assert [t["env"] for t in data["tables"]] == ["CartPole-v1"]
    assert len(data["tables"][0]["rows"]) == 5


@pytest.mark.timeout(120)
def test_scaling_script_writes_both_results(tmp_path):
    """benchmarks/run_scaling.py runs its benches (cut down here) and writes their JSON."""
    path = BENCHMARKS / "run_scaling.py"
    spec = importlib.util.spec_from_file_location("run_scaling", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    extra = ["--steps", "8", "--rounds", "1", "--warmup", "1", "--backends", "serial", "--compare", "none", "-q"]
    assert script.run(["--out", str(tmp_path), *extra]) == 0
    scaling = json.loads((tmp_path / "scaling.json").read_text())
    cells = {(r["env"], r["num_envs"]) for r in scaling["results"]}
    assert cells == {(e, n) for e in ("CartPole-v1", "vecenv/Busy-v0") for n in (16, 64)}
    for name in ("scaling_async_batch.json", "scaling_async_batch_wait.json"):
        batched = json.loads((tmp_path / name).read_text())
        assert {(r["env"], r["num_envs"], r["batch_size"]) for r in batched["results"]} == {
            ("vecenv/VariableBusy-v0", 48, None),  # every env each step
            ("vecenv/VariableBusy-v0", 48, 16),  # the first 16 ready
        }
        waits = batched["settings"]["env_kwargs"].get("vecenv/VariableBusy-v0", {}).get("wait", False)
        assert waits == name.endswith("_wait.json")


@pytest.mark.timeout(180)
def test_collector_bench_uneven_writes_the_collector_beside_both_loops(tmp_path):
    out = tmp_path / "collector.json"
    done = _script("collector_bench.py", "--uneven", "--num-envs", "4", "--steps", "8", "--rounds", "1",
                   "--seconds", "0.2", "--json", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    data = _check_script_json(out, "collector_bench.py", done)
    assert [r["contender"] for r in data["tables"][0]["rows"]] == ["sync", "async-loop", "collector"]


@pytest.mark.timeout(180)
def test_collector_device_on_the_cpu_measures_pinned_and_pageable():
    pytest.importorskip("torch")
    done = _script("collector_device.py", "--device", "cpu", "--num-envs", "4", "--batch-size", "2",
                   "--steps", "8", "--rollouts", "1", "--rounds", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "pinned / pageable:" in done.stdout


@pytest.mark.timeout(180)
def test_pettingzoo_bench_measures_each_contender_in_game_steps(tmp_path):
    for module in ("supersuit", "mpe2", "pettingzoo.butterfly"):
        pytest.importorskip(module)
    out = tmp_path / "pz.json"
    done = _script("pettingzoo_bench.py", "--envs", "simple_spread", "--contenders", "loop,vecenv-serial,supersuit",
                   "--rounds", "1", "--seconds", "0.1", "--json", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads(out.read_text())["results"]["simple_spread"]
    assert set(runs) == {"loop", "vecenv-serial", "supersuit"}
    assert all(r[0]["game_steps_per_s"] > 0 for r in runs.values())
