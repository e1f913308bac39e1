"""``backend="auto"``: the decision on given measurements (nothing timed), its constraints and
override, the caches, and that the chosen layout steps exactly as a fixed backend does."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from functools import partial

import gymnasium as gym
import numpy as np
import pytest

import vecenv
from helpers import FAST_START, needs_processes
from vecenv import layout as L
from vecenv.layout import EnvProbe, Layout, MachineCosts, allowed_layouts, choose, decide
from vecenv.system import gil_enabled

#: about this project's 2-core machine: crossings of 88 µs (process) and 45 µs (inline) at 2 groups
TWO_CORES = MachineCosts(fixed_us=20.0, per_env_us=3.0, process_us=(80.0, 8.0), inline_us=(37.0, 8.0), cores=2)
SIXTEEN_CORES = MachineCosts(fixed_us=20.0, per_env_us=3.0, process_us=(60.0, 4.0), inline_us=(25.0, 4.0), cores=16)


def test_a_cheap_env_on_two_cores_steps_inline_when_the_crossing_pays_off():
    got = decide(EnvProbe(step_us=8.0), TWO_CORES, 8, cores=2)
    # serial 20 + 8·11 = 108; process 88 + 4·11 = 132; inline 45 + 4·11 = 89
    assert (got.backend, got.inline, got.num_workers) == ("process", True, 2)
    assert got.predicted_us["inline×2"] < got.predicted_us["serial"] < got.predicted_us["process×2"]
    assert "a step costs 8.0 µs" in got.reason


def test_a_trivial_env_or_few_envs_stay_serial():
    assert decide(EnvProbe(step_us=1.0), TWO_CORES, 8, cores=2).backend == "serial"  # 52 vs 61
    assert decide(EnvProbe(step_us=8.0), TWO_CORES, 2, cores=2).backend == "serial"  # 42 vs 56


def test_a_slow_env_goes_to_processes_and_isolation_wins_a_near_tie():
    got = decide(EnvProbe(step_us=1000.0), TWO_CORES, 8, cores=2)
    # process 88 + 4·1003 is within TIE of inline 45 + 4·1003: the isolated layout wins
    assert (got.backend, got.inline, got.num_workers) == ("process", False, 2)


def test_groups_follow_the_cores_and_never_exceed_the_envs():
    got = decide(EnvProbe(step_us=500.0), SIXTEEN_CORES, 64, cores=16)
    assert (got.backend, got.num_workers) == ("process", 16)
    assert decide(EnvProbe(step_us=500.0), SIXTEEN_CORES, 4, cores=16).num_workers == 4


def test_on_many_cores_a_group_per_core_steps_one_group_in_the_caller():
    # the process layout leaves the caller a core (15 workers, as an explicit ProcessVectorEnv);
    # inline×16 is 15 workers and the caller stepping the 16th group
    got = decide(EnvProbe(step_us=500.0), SIXTEEN_CORES, 64, cores=16)
    assert got.inline and set(got.predicted_us) == {"serial", "process×15", "inline×16"}
    assert got.predicted_us["process×15"] == pytest.approx(60 + 4 * 14 + 5 * 503)
    assert got.predicted_us["inline×16"] == pytest.approx(25 + 4 * 15 + 4 * 503)
    # 16 worker processes and the caller are 17 processes on 16 cores: no wait can spin, a cost the
    # calibration (at 8 groups) never saw
    given = decide(EnvProbe(step_us=500.0), SIXTEEN_CORES, 64, cores=16, num_workers=16)
    assert given.predicted_us["process×16"] == pytest.approx(60 + 4 * 15 + 2 * L.rule.WAKE_US + 4 * 503)
    # a machine of 8 cores or fewer was calibrated at a group per core: nothing is added
    eight = decide(EnvProbe(step_us=500.0), replace(SIXTEEN_CORES, cores=8), 64, cores=8)
    assert (eight.inline, eight.predicted_us["process×8"]) == (False, pytest.approx(60 + 4 * 7 + 8 * 503))


def test_async_batches_leave_the_caller_a_core_for_its_own_work():
    # the caller computes the next actions while the workers step: one worker fewer than cores
    assert L.rule.default_workers(8, 2, batch_size=4) == 1
    assert L.rule.default_workers(8, 4, batch_size=4) == 3
    assert L.rule.default_workers(8, 2) == L.rule.default_workers(8, 2, batch_size=8) == 2  # a synchronous
    # step's caller waits: a worker per core
    assert L.rule.default_workers(8, 2, caller_steps=True, batch_size=4) == 2  # threads, inline
    assert L.rule.default_workers(8, 1, batch_size=4) == 1
    assert decide(EnvProbe(step_us=500.0), TWO_CORES, 8, cores=2, allowed=["process"], batch_size=4).num_workers == 1
    # auto with batch_size (the process layout is the only one a GIL build allows)
    assert L.fixed("process", 8, None, 4, "", batch_size=4).num_workers == 3
    # an env that waits still gets more workers than cores
    waiting = decide(EnvProbe(step_us=2000.0, cpu_share=0.05), TWO_CORES, 16, cores=2, allowed=["process"],
                     batch_size=4)
    assert waiting.num_workers == 16


@needs_processes
@pytest.mark.timeout(60)
def test_an_explicit_process_backend_with_async_batches_leaves_the_caller_a_core(monkeypatch):
    monkeypatch.setattr(vecenv.backends, "usable_cores", lambda: 3)
    fns = [partial(gym.make, "CartPole-v1")] * 4
    with vecenv.ProcessVectorEnv(fns, batch_size=2, context=FAST_START) as envs:
        assert envs.num_workers == 2
    with vecenv.ProcessVectorEnv(fns, batch_size=4, context=FAST_START) as envs:  # whole batches
        assert envs.num_workers == 3


def test_an_env_that_waits_gets_more_workers_than_cores():
    got = decide(EnvProbe(step_us=2000.0, cpu_share=0.05), TWO_CORES, 16, cores=2)
    assert got.backend == "process" and got.num_workers == 16
    assert "5% of it on a CPU" in got.reason


def test_observations_sent_as_messages_count_against_workers():
    cheap = decide(EnvProbe(step_us=15.0), TWO_CORES, 8, cores=2)
    pickled = decide(EnvProbe(step_us=15.0, pickle_us=30.0), TWO_CORES, 8, cores=2)
    assert cheap.inline and pickled.backend == "serial"


def test_given_num_workers_fixes_the_groups():
    got = decide(EnvProbe(step_us=500.0), SIXTEEN_CORES, 64, cores=16, num_workers=4)
    assert got.num_workers == 4 and set(got.predicted_us) == {"process×4", "inline×4"}


@pytest.mark.parametrize(
    ("kwargs", "cores", "allowed"),
    [
        ({}, 1, ["serial"]),
        ({"context": "spawn"}, 1, ["process"]),
        ({}, 2, ["serial", "process", "inline"]),
        ({"step_timeout": 5.0}, 8, ["process"]),
        ({"batch_size": 2}, 8, ["process"]),
        ({"batch_size": 8}, 8, ["serial", "process", "inline"]),
        ({"inline": True}, 8, ["inline"]),
        ({"inline": False}, 8, ["process"]),
        ({"context": "fork"}, 8, ["process"]),
        ({"num_workers": 4}, 8, ["process", "inline"]),
        ({"copy": False}, 8, ["serial", "process", "inline"]),
    ],
)
@needs_processes
def test_the_arguments_narrow_the_layouts(kwargs, cores, allowed, monkeypatch):
    monkeypatch.setattr(L.rule, "gil_enabled", lambda: True)  # threads are free-threading's (below)
    assert allowed_layouts(kwargs, 8, cores)[0] == allowed


def test_one_core_means_serial_without_measuring(monkeypatch):
    monkeypatch.setattr(L, "usable_cores", lambda: 1)
    monkeypatch.setattr(L, "cached_probe", _must_not_run)
    monkeypatch.setattr(L, "machine_costs", _must_not_run)
    got = choose([_CountingEnv] * 8, {})
    assert got.backend == "serial" and got.reason == "only one core is usable"


def _must_not_run(*args, **kwargs):
    raise AssertionError("nothing should be measured")


def test_vecenv_backend_forces_the_choice(monkeypatch):
    monkeypatch.setattr(L, "cached_probe", _must_not_run)
    monkeypatch.setenv("VECENV_BACKEND", "inline")
    got = choose([_CountingEnv] * 4, {"num_workers": 2})
    assert got == Layout("process", 2, True, "forced by VECENV_BACKEND")
    monkeypatch.setenv("VECENV_BACKEND", "gpu")
    with pytest.raises(ValueError, match=r"VECENV_BACKEND='gpu': expected one of \['serial'"):
        choose([_CountingEnv] * 4, {})


class _CountingEnv(gym.Env):
    """Counts how many copies were built in this process."""

    built = 0
    observation_space = gym.spaces.Box(-10, 10, (3,), np.float32)
    action_space = gym.spaces.Discrete(3)

    def __init__(self):
        type(self).built += 1
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), {"t": self.t}

    def step(self, action):
        self.t += 1
        obs = np.full(3, self.t / 10 + float(action), np.float32)
        return obs, float(self.np_random.random()), self.t % 7 == 0, self.t % 11 == 0, {"t": self.t}


@needs_processes
def test_the_probe_builds_one_copy_once_per_env_once_kept(monkeypatch):
    monkeypatch.setattr(L.machine, "_PROBES", {})
    _CountingEnv.built = 0
    probe = L.machine.cached_probe(_CountingEnv)
    assert _CountingEnv.built == 1 and probe.step_us > 0 and probe.obs_bytes == 12
    assert 0 < probe.cpu_share <= 1 and probe.pickle_us == 0
    assert L.machine.cached_probe(_CountingEnv) is not probe and _CountingEnv.built == 2
    L.machine.keep_probe(_CountingEnv, probe)
    assert L.machine.cached_probe(_CountingEnv) is probe and _CountingEnv.built == 2


@needs_processes
@pytest.mark.parametrize("others, kept", [(0.0, True), (1.0, False)])
def test_choose_keeps_only_a_probe_taken_on_a_quiet_machine(monkeypatch, others, kept):
    monkeypatch.setattr(L.machine, "_PROBES", {})
    monkeypatch.setattr(L, "usable_cores", lambda: 2)
    monkeypatch.setattr(L, "machine_costs", lambda refresh=False: TWO_CORES)
    monkeypatch.setattr(L, "others_busy", lambda duration_s=0.02: others)
    monkeypatch.setattr(L, "other_runs", lambda: 0)
    slow = EnvProbe(step_us=80.0)  # what a probe beside a busy core measures
    monkeypatch.setattr(L, "cached_probe", lambda fn: slow)
    choose([_CountingEnv] * 4, {})
    assert (L.machine._PROBES.get(L.machine.env_key(_CountingEnv)) is slow) is kept


def test_env_keys_name_importable_factories_only():
    assert L.machine.env_key(_CountingEnv) == f"{__name__}._CountingEnv"
    assert L.machine.env_key(partial(gym.make, "CartPole-v1")) == "gymnasium.envs.registration.make(('CartPole-v1',), [])"
    assert L.machine.env_key(lambda: _CountingEnv()) is None
    assert L.machine.env_key(partial(gym.make, lambda: None)) is None


def test_machine_costs_are_cached_on_disk_and_expire(tmp_path, monkeypatch):
    monkeypatch.setenv("VECENV_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(L.machine, "_COSTS", {})
    calls = []
    fake = MachineCosts(1.0, 2.0, (3.0, 4.0), (5.0, 6.0), L.usable_cores())
    monkeypatch.setattr(L.machine, "measure_machine", lambda cores=None: calls.append(cores) or fake)
    # the cheap check of a cached calibration is tests/test_calibration.py's: here it agrees
    monkeypatch.setattr(L.machine, "_verify", lambda path, cores, cached: cached)
    assert L.machine_costs() == fake and len(calls) == 1
    (path,) = tmp_path.iterdir()
    monkeypatch.setattr(L.machine, "_COSTS", {})
    assert replace(L.machine_costs(), source="measured") == fake and len(calls) == 1  # read back from the file
    data = json.loads(path.read_text())
    data["measured_at"] = time.time() - L.machine.COSTS_MAX_AGE_S - 1
    path.write_text(json.dumps(data))
    monkeypatch.setattr(L.machine, "_COSTS", {})
    L.machine_costs()
    assert len(calls) == 2  # too old: measured again
    path.write_text("{not json")
    monkeypatch.setattr(L.machine, "_COSTS", {})
    L.machine_costs()
    assert len(calls) == 3


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("costs", "expected"),
    [
        (TWO_CORES, "inline"),
        (MachineCosts(20.0, 3.0, (1.0, 0.0), (500.0, 0.0), 2), "process"),
        (MachineCosts(20.0, 3.0, (500.0, 0.0), (500.0, 0.0), 2), "serial"),
    ],
    ids=["inline", "process", "serial"],
)
@needs_processes
def test_auto_steps_exactly_as_a_fixed_backend(monkeypatch, costs, expected):
    """Whatever auto picks, seeds, trajectories and infos are those of the serial backend."""
    monkeypatch.setattr(L, "usable_cores", lambda: 2)
    monkeypatch.setattr(L, "machine_costs", lambda refresh=False: costs)
    monkeypatch.setattr(L, "cached_probe", lambda fn: EnvProbe(step_us=8.0))
    monkeypatch.setattr(L, "others_busy", lambda *a, **k: 0.0)  # as on an idle machine
    monkeypatch.setattr(L, "other_runs", lambda: 0)
    with vecenv.make(_CountingEnv, 8) as auto, vecenv.make(_CountingEnv, 8, backend="serial") as ref:
        assert auto.layout.name == expected and auto.backend == auto.layout.backend
        assert f"layout={expected!r} (auto)" in repr(auto)
        assert ref.layout is None
        rng = np.random.default_rng(0)
        for got, want in zip(auto.reset(seed=3), ref.reset(seed=3), strict=True):
            _same(got, want)
        for _ in range(30):
            actions = rng.integers(0, 3, 8)
            for got, want in zip(auto.step(actions), ref.step(actions), strict=True):
                _same(got, want)


def _same(got, want):
    if isinstance(want, dict):
        assert got.keys() == want.keys()
        for k in want:
            _same(got[k], want[k])
    else:
        np.testing.assert_array_equal(got, want)


@needs_processes
@pytest.mark.timeout(120)
def test_auto_measures_a_real_env_and_says_why():
    with vecenv.make("CartPole-v1", 3) as envs:
        assert envs.layout.name in ("serial", "process", "inline", *(() if gil_enabled() else ("thread",)))
        assert "a step costs" in envs.layout.reason and "predicted µs per batched step" in envs.layout.reason
        assert envs.layout.predicted_us
        envs.reset(seed=0)
        envs.step(np.zeros(3, np.int64))


def _broken_env() -> gym.Env:
    raise OSError("no simulator licence")


@needs_processes
@pytest.mark.timeout(60)
def test_an_env_that_fails_to_build_is_reported_by_the_backend_as_the_envs_error(monkeypatch):
    monkeypatch.setattr(L.machine, "_PROBES", {})
    got = choose([_broken_env] * 4, {})
    assert got.backend == "process" and "could not be probed here (OSError: no simulator" in got.reason
    with pytest.raises(OSError, match="^no simulator licence") as caught:
        vecenv.make(_broken_env, 4)
    assert isinstance(caught.value, vecenv.EnvError) and caught.value.method == "env_fn()"


def test_one_env_with_more_workers_asked_is_not_serial(monkeypatch):
    monkeypatch.setattr(L, "usable_cores", lambda: 4)
    monkeypatch.setattr(L, "machine_costs", lambda refresh=False: TWO_CORES)
    monkeypatch.setattr(L, "cached_probe", lambda fn: EnvProbe(step_us=8.0))
    assert choose([_CountingEnv], {}).backend == "serial"
    got = choose([_CountingEnv], {"num_workers": 2})
    assert (got.backend, got.num_workers, got.inline) == ("process", 1, False)


# ==================================================================== a contended machine
def test_beside_a_busy_core_a_cheap_env_stays_serial():
    idle = decide(EnvProbe(step_us=8.0), TWO_CORES, 8, cores=2, others=0.0)
    busy = decide(EnvProbe(step_us=8.0), TWO_CORES, 8, cores=2, others=1.0)
    assert idle.inline and busy.backend == "serial"
    assert "busy on 1.0 of the 2 cores" in busy.reason
    # each worker layout pays two wake-ups and shares the cores with the busy program
    assert busy.predicted_us["inline×2"] > idle.predicted_us["inline×2"] + 2 * L.rule.WAKE_US


def test_beside_a_busy_core_on_two_cores_even_an_expensive_env_stays_serial():
    got = decide(EnvProbe(step_us=400.0), TWO_CORES, 8, cores=2, others=1.0)
    assert got.backend == "serial"
    # the busy program keeps its core: two workers share the other one
    assert got.predicted_us["process×2"] == pytest.approx(80 + 8 + 2 * L.rule.WAKE_US + 4 * 403 * 2)
    assert got.predicted_us["serial"] == pytest.approx(20 + 8 * 403)


def test_beside_a_busy_core_on_sixteen_cores_an_expensive_env_spreads_over_the_rest():
    got = decide(EnvProbe(step_us=500.0), SIXTEEN_CORES, 64, cores=16, others=1.0)
    assert got.backend == "process" and got.num_workers == 16
    # 15 workers and the caller's group share the 15 cores the busy program leaves
    assert got.predicted_us["inline×16"] == pytest.approx(25 + 4 * 15 + 2 * L.rule.WAKE_US + 4 * 503 * 16 / 15)


def test_beside_a_busy_core_workers_must_beat_serial_by_the_margin():
    # 0.6 of a core busy elsewhere on 4 cores: inline×4 is predicted faster than serial,
    # but by less than CONTENDED_MARGIN
    costs = replace(TWO_CORES, process_us=(80.0, 8.0), cores=4)
    got = decide(EnvProbe(step_us=47.0), costs, 8, cores=4, others=0.6)
    best = min(got.predicted_us.values())
    assert best < got.predicted_us["serial"] < best * (1 + L.rule.CONTENDED_MARGIN)
    assert got.backend == "serial"


def test_a_little_other_work_or_none_measured_changes_nothing():
    idle = decide(EnvProbe(step_us=8.0), TWO_CORES, 8, cores=2)
    for others in (0.2, None):
        got = decide(EnvProbe(step_us=8.0), TWO_CORES, 8, cores=2, others=others)
        assert (got.name, got.predicted_us) == (idle.name, idle.predicted_us)


@needs_processes
def test_choose_passes_what_the_machine_is_doing_to_the_rule(monkeypatch):
    monkeypatch.setattr(L, "cached_probe", lambda fn: EnvProbe(step_us=8.0))
    monkeypatch.setattr(L, "machine_costs", lambda: TWO_CORES)
    monkeypatch.setattr(L, "others_busy", lambda *a, **k: 1.0)
    monkeypatch.setattr(L, "other_runs", lambda: 0)
    monkeypatch.setattr(L, "usable_cores", lambda: 2)
    got = choose([partial(gym.make, "CartPole-v1")] * 8, {})
    assert got.backend == "serial" and "busy on 1.0" in got.reason
    monkeypatch.setattr(L, "others_busy", lambda *a, **k: 0.0)
    assert choose([partial(gym.make, "CartPole-v1")] * 8, {}).inline


def test_infos_that_travel_as_messages_favour_the_layout_with_fewer_workers():
    quiet = decide(EnvProbe(step_us=40.0), TWO_CORES, 8, cores=2)
    infos = decide(EnvProbe(step_us=40.0, info_us=20.0), TWO_CORES, 8, cores=2)
    # a message per worker, and the caller unpickles each remote env's infos
    extra = infos.predicted_us["process×2"] - quiet.predicted_us["process×2"]
    assert extra == pytest.approx(2 * (L.rule.MESSAGE_US + 4 * 10.0))
    extra = infos.predicted_us["inline×2"] - quiet.predicted_us["inline×2"]
    assert extra == pytest.approx(L.rule.MESSAGE_US + 4 * 10.0)
    assert infos.inline and infos.predicted_us["serial"] == quiet.predicted_us["serial"]


def test_the_probe_measures_what_a_steps_infos_cost_to_send():
    class InfoEnv(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            return np.zeros(2, np.float32), {}

        def step(self, action):
            return np.zeros(2, np.float32), 0.0, False, False, {"x": np.float64(1.0), "y": 2}

    class ObjectInfoEnv(InfoEnv):
        def step(self, action):
            return np.zeros(2, np.float32), 0.0, False, False, {"x": "text"}

    probe = L.probe_env(InfoEnv)
    assert probe.info_us > 0 and probe.info_shared  # scalars: through shared memory
    probe = L.probe_env(ObjectInfoEnv)
    assert probe.info_us > 0 and not probe.info_shared  # a string: pickled
    assert L.probe_env(partial(gym.make, "CartPole-v1")).info_us == 0.0


def test_infos_in_shared_memory_cost_no_message():
    quiet = decide(EnvProbe(step_us=40.0), TWO_CORES, 8, cores=2)
    infos = decide(EnvProbe(step_us=40.0, info_us=4.0, info_shared=True), TWO_CORES, 8, cores=2)
    extra = infos.predicted_us["process×2"] - quiet.predicted_us["process×2"]
    assert extra == pytest.approx(2 * 4 * 2.0)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("cores", "workers", "inline_groups"), [(2, 2, 2), (8, 8, 8), (9, 8, 9), (16, 15, 16)])
def test_process_vector_env_leaves_the_caller_a_core_on_many_cores(monkeypatch, cores, workers, inline_groups):
    # issue 63: 16 workers and the caller measured 1.07-1.42x slower than 15 on 16 cores
    import vecenv.backends as B

    monkeypatch.setattr(B, "usable_cores", lambda: cores)
    built: list[int] = []
    monkeypatch.setattr(B.VectorEnv, "__init__", lambda self, fns, transport, *, num_workers, **kw: built.append(num_workers))
    B.ProcessVectorEnv([lambda: None] * 64)
    B.ProcessVectorEnv([lambda: None] * 64, inline=True)
    B.ProcessVectorEnv([lambda: None] * 4)  # never more groups than envs
    B.ProcessVectorEnv([lambda: None] * 64, num_workers=16)  # a given count is kept
    assert built == [workers, inline_groups, min(4, workers), 16]
    # auto's fixed process layouts (inline=False, VECENV_BACKEND=process) follow the same rule
    assert L.rule.fixed("process", 64, None, cores, "").num_workers == workers
    assert L.rule.fixed("inline", 64, None, cores, "").num_workers == inline_groups
    monkeypatch.setattr(L.rule, "usable_cores", lambda: cores)
    monkeypatch.setenv(L.FORCE_VAR, "process")
    assert L.forced(64, {}).num_workers == workers
