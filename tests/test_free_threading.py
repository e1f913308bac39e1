"""``backend="auto"`` and the thread backend on a free-threaded Python: threads are a candidate
only with the GIL off, are predicted from their measured crossing, and win where they should."""

from __future__ import annotations

import json
from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest

import vecenv
from helpers import needs_processes
from vecenv import layout as L
from vecenv.bench.envs import BusyEnv
from vecenv.layout import EnvProbe, MachineCosts, allowed_layouts, decide
from vecenv.system import gil_enabled

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
    # serial 20 + 8·103 = 844; thread 18 + 8·103/2 = 430; inline 45 + 4·103 = 457
    assert got.name == "thread" and got.kwargs() == {"num_workers": 2}
    assert "threads of this free-threaded Python" in got.reason
    assert got.predicted_us["thread×2"] < got.predicted_us["inline×2"] < got.predicted_us["serial"]
    # no thread figure measured (a GIL build's calibration): threads are not predicted at all
    assert "thread×2" not in decide(BUSY, replace(TWO_CORES_FT, thread_us=None), 8, cores=2, allowed=allowed).predicted_us


def test_beside_a_busy_process_threads_get_what_it_leaves_and_serial_stands():
    """On two cores beside a busy process the run's threads share one core (as measured: 1.01x
    serial), so they never clear serial's margin there; on sixteen cores they spread over the
    fifteen left."""
    allowed = ["serial", "thread", "process", "inline"]
    got = decide(BUSY, TWO_CORES_FT, 8, cores=2, allowed=allowed, others=1.0)
    assert got.name == "serial" and "busy on 1.0 of the 2 cores" in got.reason
    assert got.predicted_us["thread×2"] > got.predicted_us["serial"] / 1.2
    wide = replace(TWO_CORES_FT, cores=16)
    got = decide(BUSY, wide, 64, cores=16, allowed=allowed, others=1.0)
    assert got.name == "thread" and got.num_workers == 16


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
    """The real calibration and probe, with the machine read as idle (other suites may run
    beside this one; the busy case is the rule's test above)."""
    monkeypatch.setenv("VECENV_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(L.machine, "_COSTS", {})
    monkeypatch.setattr(L, "others_busy", lambda *a, **k: 0.0)
    monkeypatch.setattr(L, "other_runs", lambda: 0)
    if L.usable_cores() < 2:
        pytest.skip("needs two usable cores")
    with vecenv.make(BusyEnv, 8) as envs:
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
    with vecenv.make(BusyEnv, 8) as envs:
        assert envs.layout.name != "thread" and "thread×2" not in envs.layout.predicted_us
        assert L.machine_costs().thread_us is None


class _Flaky(gym.Env):
    """Fails on a schedule fixed by its state since its last seeded reset (a rebuilt copy starts
    from the same state), with sparse infos and episodes that end both ways."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float64)
    action_space = gym.spaces.Discrete(3)

    def __init__(self) -> None:
        self.t, self.base, self.episodes = 0, 1, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is None:
            self.episodes += 1
        else:
            self.base, self.episodes = seed % 7 + 1, 0
        self.t = 0
        return self._obs(0), {"base": self.base}

    def step(self, action):
        self.t += 1
        if (31 * self.base + 17 * self.t + 7 * self.episodes) % 23 == 0:
            raise ValueError(f"flaky at {self.t}")
        info = {"t": self.t} if self.t % 5 == 0 else {}
        return self._obs(int(action)), float(action) + self.t, self.t % 29 == 0, self.t >= 40, info

    def _obs(self, action: int) -> np.ndarray:
        return np.array([self.t, self.base, action], np.float64)


_RESTART = dict(on_error="restart", max_restarts=10**6)


@pytest.mark.timeout(180, method="thread")  # RandomAlarms owns SIGALRM
@pytest.mark.parametrize("threads", [2, 3])
def test_thread_stress_with_failures_restarts_and_interrupts(threads):
    """Thousands of steps of envs that fail on a schedule (restarted), shared by ``threads``
    threads: exactly the serial backend's data; then interrupts landing anywhere, each healed by
    reset(), with the data still the serial backend's afterwards. Run on 3.13t with the GIL
    off by .ci/pythons, where the threads really step at once."""
    from helpers import RandomAlarms

    rng = np.random.default_rng(1)
    with vecenv.make(_Flaky, 8, backend="thread", num_workers=threads, **_RESTART) as envs, \
            vecenv.make(_Flaky, 8, backend="serial", **_RESTART) as ref:
        for got, want in zip(envs.reset(seed=3), ref.reset(seed=3), strict=True):
            np.testing.assert_equal(got, want)
        restarts = 0
        for _ in range(2000):
            actions = rng.integers(0, 3, 8)
            got, want = envs.step(actions), ref.step(actions)
            for a, b in zip(got, want, strict=True):
                np.testing.assert_equal(a, b)
            restarts += int(np.sum(got[4].get("restarted", np.zeros(8, bool))))
        assert restarts >= 20
        interrupts = 0
        with RandomAlarms(threads) as alarms:
            for _ in range(150):
                steps = lambda: [envs.step(rng.integers(0, 3, 8)) for _ in range(20)]  # noqa: E731
                interrupts += alarms.interrupted(steps, 5e-6, 300e-6)
                seed = int(rng.integers(100))
                for got, want in zip(envs.reset(seed=seed), ref.reset(seed=seed), strict=True):
                    np.testing.assert_equal(got, want)
        assert interrupts >= 50
        for _ in range(100):  # whatever the interrupts cut, the data is the serial backend's again
            actions = rng.integers(0, 3, 8)
            for a, b in zip(envs.step(actions), ref.step(actions), strict=True):
                np.testing.assert_equal(a, b)
        assert envs._guard.holder is None
