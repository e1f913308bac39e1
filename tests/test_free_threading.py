"""``backend="auto"`` and the thread backend on a free-threaded Python: threads are a candidate
only with the GIL off, are predicted from their measured crossing, and win where they should."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

import vecenv
from helpers import needs_processes
from vecenv import layout as L
from vecenv.bench import envs as bench_envs  # noqa: F401  (registers vecenv/Busy-v0)
from vecenv.layout import EnvProbe, MachineCosts, allowed_layouts, decide
from vecenv.transports.thread import gil_enabled

#: the 2-core VM's costs, with the thread crossing measured on 3.13t with the GIL off
TWO_CORES_FT = MachineCosts(fixed_us=20.0, per_env_us=3.0, process_us=(80.0, 8.0), inline_us=(37.0, 8.0),
                            cores=2, thread_us=(8.0, 10.0))
BUSY = EnvProbe(step_us=100.0)


@pytest.mark.parametrize(
    ("kwargs", "allowed"),
    [
        ({}, ["serial", "thread", "process", "inline"]),
        ({"batch_size": 2}, ["thread", "process"]),
        ({"num_workers": 4}, ["thread", "process", "inline"]),
        ({"step_timeout": 5.0}, ["process"]),
        ({"context": "fork"}, ["process"]),
    ],
)
def test_threads_are_a_candidate_only_without_the_gil(monkeypatch, kwargs, allowed):
    monkeypatch.setattr(L.rule, "processes_unavailable", lambda: False)
    monkeypatch.setattr(L.rule, "gil_enabled", lambda: False)
    assert allowed_layouts(kwargs, 8, 2)[0] == allowed
    monkeypatch.setattr(L.rule, "gil_enabled", lambda: True)
    assert "thread" not in allowed_layouts(kwargs, 8, 2)[0]


def test_an_expensive_env_goes_to_threads_when_they_cost_less_than_processes():
    allowed = ["serial", "thread", "process", "inline"]
    got = decide(BUSY, TWO_CORES_FT, 8, cores=2, allowed=allowed)
    # serial 20 + 8·103 = 844; thread 18 + 8·103·1.05/2 = 451; inline 45 + 4·103 = 457
    assert got.name == "thread" and got.kwargs() == {"num_workers": 2}
    assert "threads of this free-threaded Python" in got.reason
    assert got.predicted_us["thread×2"] < got.predicted_us["inline×2"] < got.predicted_us["serial"]
    # no thread figure measured (a GIL build's calibration): threads are not predicted at all
    assert "thread×2" not in decide(BUSY, replace(TWO_CORES_FT, thread_us=None), 8, cores=2, allowed=allowed).predicted_us


def test_beside_a_busy_process_threads_share_what_is_left_and_win():
    """Three busy threads on two cores: the run's two get 4/3 of a core, with no thread waiting
    for a slower one; processes are predicted at one core and lose to serial's margin."""
    got = decide(BUSY, TWO_CORES_FT, 8, cores=2, allowed=["serial", "thread", "process", "inline"], others=1.0)
    assert got.name == "thread" and "busy on 1.0 of the 2 cores" in got.reason
    assert got.predicted_us["thread×2"] * 1.2 < got.predicted_us["serial"]
    without = decide(BUSY, TWO_CORES_FT, 8, cores=2, allowed=["serial", "process", "inline"], others=1.0)
    assert without.name == "serial"


def test_the_thread_crossing_is_kept_in_the_calibration_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VECENV_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(L.machine, "_COSTS", {})
    fake = replace(TWO_CORES_FT, cores=L.usable_cores())
    monkeypatch.setattr(L.machine, "measure_machine", lambda cores=None: fake)
    monkeypatch.setattr(L.machine, "_verify", lambda path, cores, cached: cached)
    L.machine_costs()
    (path,) = tmp_path.iterdir()
    assert json.loads(path.read_text())["thread_us"] == [8.0, 10.0]
    monkeypatch.setattr(L.machine, "_COSTS", {})
    assert L.machine_costs().thread_us == (8.0, 10.0)


@pytest.mark.timeout(120)
@needs_processes
def test_auto_picking_threads_steps_exactly_as_serial(monkeypatch):
    """Whatever the interpreter, the thread layout auto picks gives the serial backend's data."""
    monkeypatch.setattr(L, "usable_cores", lambda: 2)
    monkeypatch.setattr(L.rule, "gil_enabled", lambda: False)
    monkeypatch.setattr(L, "machine_costs", lambda refresh=False: TWO_CORES_FT)
    monkeypatch.setattr(L, "cached_probe", lambda fn: BUSY)
    monkeypatch.setattr(L, "others_busy", lambda *a, **k: 0.0)
    monkeypatch.setattr(L, "other_runs", lambda: 0)
    with vecenv.make("CartPole-v1", 8) as auto, vecenv.make("CartPole-v1", 8, backend="serial") as ref:
        assert auto.layout.name == "thread" and auto.backend == "thread" and auto.num_threads == 2
        for got, want in zip(auto.reset(seed=5), ref.reset(seed=5), strict=True):
            np.testing.assert_equal(got, want)
        rng = np.random.default_rng(0)
        for _ in range(200):
            actions = rng.integers(0, 2, 8)
            for got, want in zip(auto.step(actions), ref.step(actions), strict=True):
                np.testing.assert_equal(got, want)


@pytest.mark.timeout(300)
@pytest.mark.skipif(gil_enabled(), reason="needs a free-threaded Python with the GIL off (3.13t, 3.14t)")
def test_on_a_free_threaded_python_auto_measures_and_picks_threads(tmp_path, monkeypatch):
    monkeypatch.setenv("VECENV_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(L.machine, "_COSTS", {})
    if L.usable_cores() < 2:
        pytest.skip("needs two usable cores")
    with vecenv.make("vecenv/Busy-v0", 8) as envs:
        assert L.machine_costs().thread_us is not None
        assert envs.layout.name == "thread", envs.layout.reason
        envs.reset(seed=0)
        envs.step(np.zeros(8, np.int64))


@pytest.mark.timeout(300)
@needs_processes
@pytest.mark.skipif(not gil_enabled(), reason="the choice under the GIL")
def test_under_the_gil_auto_never_picks_threads(tmp_path, monkeypatch):
    monkeypatch.setenv("VECENV_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(L.machine, "_COSTS", {})
    with vecenv.make("vecenv/Busy-v0", 8) as envs:
        assert envs.layout.name != "thread" and "thread×2" not in envs.layout.predicted_us
        assert L.machine_costs().thread_us is None
