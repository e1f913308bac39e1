"""The measurement scripts in benchmarks/ that other figures rest on run, cut down."""

from __future__ import annotations

import importlib.util
import json
import multiprocessing
import sys
from pathlib import Path

import pytest

from helpers import needs_processes

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


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
def test_before_after_measures_each_version_in_its_own_interpreter():
    before_after = _load("before_after")
    src = str(BENCHMARKS.parent / "src")
    runs = before_after.main(["--before", src, "--after", src, "--backends", "serial", "--rounds", "1",
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
        cpu = caller_cost.cpu_per_step(build, 4, "4 floats", 2, steps=20)
        assert 0 <= cpu < 0.1  # (Windows' thread clock moves in 15.6 ms ticks)
    names = [row[0] for row in caller_cost.rows(True, 8, 16, peers_too=False)]
    assert "vecenv process, per worker, 17 floats + 4 infos, 64 envs" in names  # issue 63's goals
    assert "vecenv process, per step, 17 floats + 4 infos, 64 envs in 16 workers" in names


@pytest.mark.timeout(120)
def test_core_ceiling_sums_processes_that_never_communicate():
    import subprocess

    out = subprocess.run(
        [sys.executable, str(BENCHMARKS / "core_ceiling.py"), "--env", "CartPole-v1", "--processes", "2",
         "--envs-per-process", "1", "--seconds", "0.2"],
        capture_output=True, text=True, timeout=110, check=True,
    ).stdout
    row = next(line for line in out.splitlines() if line.startswith("CartPole-v1"))
    one, together = (float(x.replace(",", "")) for x in row.split()[1:3])
    assert one > 0 and together > 0
    assert "x of 2x one" in row


@pytest.mark.timeout(120)
@needs_processes
def test_many_core_layouts_measures_each_layout_against_gym_sync(tmp_path):
    import subprocess

    out = subprocess.run(
        [sys.executable, str(BENCHMARKS / "many_core_layouts.py"), "--env", "CartPole-v1", "--num-envs", "4",
         "--rounds", "1", "--seconds", "0.1", "--layouts", "gym-sync,process,inline,batch-half",
         "--json", str(tmp_path / "out.json")],
        capture_output=True, text=True, timeout=110, check=True,
    ).stdout
    rounds = json.loads((tmp_path / "out.json").read_text())["envs"]["CartPole-v1"]
    assert list(rounds[0]) == ["gym-sync", "process", "inline", "batch-half"]
    assert all(r["steps_per_s"] > 0 and r["caller_cpu_us"] >= 0 for r in rounds[0].values())
    assert "share" in out.splitlines()[-1]
