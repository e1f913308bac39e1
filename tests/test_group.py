"""The env group on its own (no transport): stepping, autoreset, failures and per-env calls.

Groups are built from env_fns, given their rows of one :class:`StepBuffers`, and compared value
for value with gymnasium's ``SyncVectorEnv`` run on the same env_fns, seeds and actions.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from helpers import assert_same
from vecenv.errors import EnvError
from vecenv.infos import InfoEntry, batch_infos
from vecenv.spaces import StepBuffers
from vecenv.testing import DictTupleEnv, FaultyEnv, TextEnv
from vecenv.worker import EnvDescription, EnvGroup, commands, restarts

pytestmark = pytest.mark.timeout(30)

NEXT, SAME, DISABLED = AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED
MODES = [NEXT, SAME, DISABLED]


def cartpole():
    return gym.make("CartPole-v1", max_episode_steps=16)


ENVS = {"cartpole": cartpole, "dict_tuple": DictTupleEnv, "text": TextEnv}


def fault_at(fault: str, at: int):
    def fn():
        return FaultyEnv(fault, at=at)

    return fn


class TrackedEnv(FaultyEnv):
    """A FaultyEnv that records being closed (and can fail to close)."""

    def __init__(self, fault=None, at=3, close_raises=False, **kwargs) -> None:
        super().__init__(fault, at, **kwargs)
        self.closed = False
        self.close_raises = close_raises

    def close(self):
        self.closed = True
        if self.close_raises:
            raise OSError("planted close failure")


def make_groups(fns, mode, bounds=None, n=None, ship_objects=False, worker=0):
    """Groups over ``fns`` split at ``bounds`` (worker ``worker + w`` holds envs
    bounds[w]:bounds[w+1]), each attached to its rows of one StepBuffers of ``n`` rows."""
    bounds = bounds or [0, len(fns)]
    groups = [
        EnvGroup(fns[a - bounds[0] : b - bounds[0]], a, worker + w, mode)
        for w, (a, b) in enumerate(zip(bounds[:-1], bounds[1:], strict=True))
    ]
    env = groups[0].envs[0]
    buffers = StepBuffers(env.observation_space, env.action_space, n or bounds[-1])
    for g in groups:
        g.attach(buffers.rows(g.start, g.start + len(g.envs)), ship_objects)
    return groups, buffers


def make_group(fns, mode=NEXT, start=0, worker=0, n=None, ship_objects=False):
    groups, buffers = make_groups(fns, mode, [start, start + len(fns)], n, ship_objects, worker)
    return groups[0], buffers


class Batched:
    """Groups and their buffers driven like a vector env (what the engine does, minus transport)."""

    def __init__(self, groups, buffers) -> None:
        self.groups, self.buffers = groups, buffers

    def reset(self, seed: int | None = None, mask: np.ndarray | None = None):
        entries = []
        for g in self.groups:
            local = range(len(g.envs))
            seeds = None if seed is None else [seed + g.start + j for j in local]
            ids = None if mask is None else [j for j in local if mask[g.start + j]]
            if ids == []:
                continue
            entries += g.reset(seeds, None, ids)[0]
        return self.buffers.observations.read(), batch_infos(entries, self.buffers.n)

    def step(self, actions):
        b = self.buffers
        b.actions.assign(actions)
        entries = [e for g in self.groups for e in g.step()[0]]
        infos = batch_infos(entries, b.n)
        return b.observations.read(), b.rewards.copy(), b.terminations.copy(), b.truncations.copy(), infos


def run_side_by_side(ours: Batched, ref, steps: int, seed: int, mask_at: dict | None = None) -> dict:
    """Step both with the same actions; reset ended envs by mask in DISABLED mode (and the
    envs in ``mask_at[t]`` after step t in any mode). Returns counts of what was covered."""
    assert_same(ours.reset(seed=seed), ref.reset(seed=seed), "reset")
    ref.action_space.seed(seed)
    seen = {"terminated": 0, "truncated": 0, "final_obs": 0, "masked": 0}
    for t in range(steps):
        actions = ref.action_space.sample()
        want = ref.step(actions)
        assert_same(ours.step(actions), want, f"step {t}")
        seen["terminated"] += int(want[2].sum())
        seen["truncated"] += int(want[3].sum())
        seen["final_obs"] += int(want[4].get("_final_obs", np.zeros(1, bool)).sum())
        mask = np.logical_or(want[2], want[3]) if ref.autoreset_mode is DISABLED else np.zeros(ref.num_envs, bool)
        if mask_at and t in mask_at:
            mask = mask | mask_at[t]
        if mask.any():
            seen["masked"] += 1
            got = ours.reset(mask=mask)
            flags = ours.buffers.terminations | ours.buffers.truncations
            assert not flags[mask].any(), "a reset clears the episode flags of its envs"
            assert_same(got, ref.reset(options={"reset_mask": mask.copy()}), f"masked reset after step {t}")
    return seen


# ============================================================================ against gymnasium
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
@pytest.mark.parametrize("env_name", list(ENVS))
def test_groups_match_gymnasium_sync_vector_env(env_name, mode):
    fns = [ENVS[env_name]] * 5
    ref = gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)
    groups, buffers = make_groups(fns, mode, bounds=[0, 2, 5])  # two workers: envs 0-1 and 2-4
    seen = run_side_by_side(Batched(groups, buffers), ref, steps=60, seed=3)
    assert seen["terminated"] > 0 and seen["truncated"] > 0, f"episode ends not covered: {seen}"
    if mode is SAME:
        assert seen["final_obs"] > 0
    if mode is DISABLED:
        assert seen["masked"] > 0
    for g in groups:
        g.close()
    ref.close()


@pytest.mark.parametrize("mode", [NEXT, SAME], ids=lambda m: m.value)
def test_reset_of_some_envs_matches_gymnasium_reset_mask(mode):
    fns = [DictTupleEnv] * 4
    ref = gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)
    groups, buffers = make_groups(fns, mode, bounds=[0, 1, 4])
    mask_at = {t: np.array([t % 2 == 0, False, True, t % 3 == 0]) for t in (2, 5, 9, 14, 20)}
    seen = run_side_by_side(Batched(groups, buffers), ref, steps=30, seed=8, mask_at=mask_at)
    assert seen["masked"] == 5 and seen["terminated"] + seen["truncated"] > 0
    ref.close()


def test_next_step_fresh_group_resets_on_its_first_step():
    group, buffers = make_group([TrackedEnv, TrackedEnv], NEXT)
    buffers.rewards[:] = 5.0
    buffers.truncations[:] = True
    entries, _ = group.step()
    assert not entries
    assert [(e.resets, e.steps) for e in group.envs] == [(1, 0), (1, 0)]
    assert buffers.rewards.tolist() == [0.0, 0.0] and not buffers.truncations.any()
    group.step()
    assert [(e.resets, e.steps) for e in group.envs] == [(1, 1), (1, 1)]
    assert buffers.rewards.tolist() == [1.0, 1.0]


def test_reset_and_step_of_selected_ids():
    group, buffers = make_group([TrackedEnv] * 3, NEXT, start=2, n=6)
    rows = buffers.rows(2, 5)
    group.reset(seeds=[10, 11, 12])
    rows.terminations[:] = True
    rows.truncations[:] = True
    group.reset(seeds=[20, 21, 22], ids=[2])  # env 2 of the group gets seeds[2]
    assert [e.resets for e in group.envs] == [1, 1, 2]
    assert rows.terminations.tolist() == [True, True, False], "a reset clears its env's flags only"
    assert rows.truncations.tolist() == [True, True, False]
    assert np.array_equal(rows.observations.item(2), FaultyEnv().reset(seed=22)[0])
    assert np.array_equal(rows.observations.item(0), FaultyEnv().reset(seed=10)[0])
    group.step(ids=[1])  # only env 1 steps: the other rows stay as they were
    assert [e.steps for e in group.envs] == [0, 1, 0]
    assert rows.rewards.tolist() == [0.0, 1.0, 0.0]
    assert rows.terminations.tolist() == [True, False, False]
    assert rows.truncations.tolist() == [True, False, False]
    assert buffers.rewards.tolist() == [0, 0, 0, 1.0, 0, 0]


# ============================================================================ info entries
def test_entries_name_global_indices_and_same_step_finished_episode():
    group, buffers = make_group([lambda: DictTupleEnv(max_steps=2, p_terminate=0.0)] * 2, SAME, start=5, n=7)
    rows = buffers.rows(5, 7)
    entries, _ = group.reset(seeds=[0, 1])
    assert all(e.index in (5, 6) and not e.ended for e in entries)
    rows.actions.assign((np.array([0, 1]), np.zeros((2, 2), np.float32)))
    group.step()
    entries, _ = group.step()  # both truncate at max_steps=2 and are reset at once
    assert rows.truncations.all() and not rows.terminations.any()
    assert [(e.index, e.ended) for e in entries] == [(5, True), (6, True)]
    for j, entry in enumerate(entries):
        assert entry.final_obs["count"] == 2  # the finished episode's last observation
        assert entry.final_info is not None
        assert rows.observations.item(j)["count"] == 0  # the row holds the new episode's first one
        assert entry.final_obs is not rows.observations.item(j)


def test_ship_objects_returns_object_rows_of_the_group():
    group, buffers = make_group([TextEnv] * 3, NEXT, start=1, n=4, ship_objects=True)
    _, objects = group.reset(seeds=[0, 1, 2])
    assert len(objects) == 1 and objects[0].dtype == object
    assert objects[0].tolist() == list(buffers.observations.read()[1:])
    _, objects = group.reset(seeds=[0, 1, 2], ids=[2, 0])
    assert objects[0].tolist() == [buffers.observations.read()[3], buffers.observations.read()[1]]
    buffers.actions.assign(np.ones(4, int))
    _, objects = group.step(ids=[1])
    assert objects[0].tolist() == [buffers.observations.read()[2]]
    plain, _ = make_group([cartpole], NEXT, ship_objects=True)
    assert plain.reset(seeds=[0])[1] is None, "nothing to ship when every leaf is fixed"
    unshipped, _ = make_group([TextEnv], NEXT)
    assert unshipped.reset(seeds=[0])[1] is None


# ============================================================================ errors
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
def test_step_error_names_global_env_worker_and_method(mode):
    group, buffers = make_group([FaultyEnv, fault_at("step_raise", 2), FaultyEnv], mode, start=4, worker=2, n=7)
    group.reset(seeds=[0, 1, 2])
    buffers.actions.assign(np.zeros(7, int))
    group.step()
    with pytest.raises(EnvError) as caught:
        group.step()
    err = caught.value
    assert (err.env_index, err.worker, err.method) == (5, 2, "step")
    assert err.exc_type == "ValueError" and err.exc_message == "planted step failure at step 2"
    assert isinstance(err.__cause__, ValueError) and err.original is err.__cause__
    assert isinstance(err, ValueError) and err.args == ("planted step failure at step 2",)
    assert str(err).startswith("planted step failure at step 2\n(vecenv) env 5 (worker 2) raised ValueError in step")
    assert "Traceback" in err.remote_traceback and "planted step failure" in err.remote_traceback


def test_reset_error_names_reset():
    group, _ = make_group([FaultyEnv, fault_at("reset_raise", 2)], SAME, start=1, worker=3, n=3)
    group.reset(seeds=[0, 1])
    with pytest.raises(RuntimeError, match=r"^planted reset failure on reset 2\n\(vecenv\) env 2 \(worker 3\) "
                       r"raised RuntimeError in reset") as caught:
        group.reset(ids=[1])
    assert isinstance(caught.value, EnvError)
    assert (caught.value.env_index, caught.value.method) == (2, "reset")


def test_env_fn_error_closes_the_envs_already_built():
    built = []

    def tracked():
        built.append(TrackedEnv())
        return built[-1]

    def broken():
        raise ImportError("no such env")

    with pytest.raises(EnvError) as caught:
        EnvGroup([tracked, tracked, broken, tracked], 6, 1, NEXT)
    err = caught.value
    assert (err.env_index, err.worker, err.method, err.exc_type) == (8, 1, "env_fn()", "ImportError")
    assert len(built) == 2 and all(env.closed for env in built)


def test_raise_policy_is_the_default_and_can_be_set_explicitly():
    for configure in (False, True):
        group, buffers = make_group([fault_at("step_raise", 1)], SAME)
        if configure:
            group.configure("raise", 5, 60.0)
        group.reset(seeds=[0])
        with pytest.raises(EnvError, match="planted step failure at step 1") as caught:
            group.step()
        assert "already restarted" not in str(caught.value)


class ExitingEnv(FaultyEnv):
    """Raises ``exc`` (a SystemExit or KeyboardInterrupt) in ``step`` and ``planted``."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__()
        self.exc = exc

    def step(self, action):
        raise self.exc

    def planted(self, x: int = 1) -> int:
        raise self.exc


@pytest.mark.parametrize("exc, text", [(SystemExit(5), "SystemExit: 5"), (KeyboardInterrupt(), "KeyboardInterrupt")])
def test_contain_exits_makes_an_exit_in_env_code_that_envs_failure(exc, text):
    def exiting():
        return ExitingEnv(exc)

    # default: an exit or Ctrl-C in the caller's process gets through, as it is
    group, _ = make_group([FaultyEnv, exiting], NEXT, start=2, worker=1, n=4)
    group.reset(seeds=[0, 1])
    with pytest.raises(type(exc)):
        group.step()
    # contained: env 3's failure, named with its method, whatever the env code was
    group = EnvGroup([FaultyEnv, exiting], 2, 1, NEXT, contain_exits=True)
    group.attach(StepBuffers(group.envs[0].observation_space, group.envs[0].action_space, 4).rows(2, 4))
    group.reset(seeds=[0, 1])
    with pytest.raises(EnvError) as caught:
        group.step()
    err = caught.value
    assert (err.env_index, err.worker, err.method) == (3, 1, "step")
    assert err.exc_type == type(exc).__name__ and text in str(err)
    with pytest.raises(EnvError, match=r"raised .*(SystemExit|KeyboardInterrupt) in call\('planted'\)"):
        group.call("planted", (), {})

    def exit_in_env_fn():
        raise exc

    with pytest.raises(EnvError, match=r"\(vecenv\) env 1 \(worker 0\) raised .* in env_fn\(\)") as caught:
        EnvGroup([FaultyEnv, exit_in_env_fn], 0, 0, NEXT, contain_exits=True)
    assert text in str(caught.value)
    # and under on_error="restart" the env is rebuilt like one that raised
    group.configure("restart", 2, 60.0)
    entries, _ = group.step()
    assert [e.index for e in entries] == [3] and entries[0].info["restarted"]
    assert entries[0].info["restart_reason"].startswith(type(exc).__name__)
    assert group.buffers.truncations.tolist() == [False, True]


# ============================================================================ restarts
REPORT = {"restarted": True, "restart_reason": "ValueError: planted step failure at step 2"}


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
def test_restart_rebuilds_an_env_that_raised_in_step(mode):
    built = []

    def flaky():
        built.append(TrackedEnv("step_raise", at=2))
        return built[-1]

    group, buffers = make_group([TrackedEnv, flaky], mode, start=3, worker=1, n=5)
    rows = buffers.rows(3, 5)
    group.configure("restart", 2, 60.0)
    group.reset(seeds=[0, 1])
    rows.actions.assign(np.zeros(2, int))
    group.step()
    last_good = rows.observations.item(1).copy()
    entries, _ = group.step()  # env 4 (local 1) raises at its second step
    assert len(built) == 2 and group.envs[1] is built[1] and built[0].closed
    assert rows.rewards.tolist() == [1.0, 0.0]
    assert rows.truncations.tolist() == [False, True] and not rows.terminations.any()
    assert [e.index for e in entries] == [4]
    entry = entries[0]
    if mode is SAME:  # the rebuilt env is reset at once; the last good observation is final_obs
        assert entry.ended and entry.final_info == REPORT and entry.info == REPORT
        assert np.array_equal(entry.final_obs, last_good)
        assert (built[1].resets, built[1].steps) == (1, 0)
        infos = batch_infos(entries, 5)
        assert infos["_restarted"].tolist() == [False, False, False, False, True]
        assert infos["final_info"]["restart_reason"][4] == REPORT["restart_reason"]
    else:  # the row keeps the last good observation; the new env is not reset yet
        assert entry == InfoEntry(4, REPORT)
        assert np.array_equal(rows.observations.item(1), last_good)
        assert built[1].resets == 0
        if mode is DISABLED:
            group.reset(ids=[1])
        entries, _ = group.step()
        assert built[1].resets == 1 and not entries
        assert not rows.truncations.any()
        if mode is NEXT:  # the autoreset step of the rebuilt env
            assert built[1].steps == 0 and rows.rewards.tolist() == [1.0, 0.0]
        else:
            assert built[1].steps == 1 and rows.rewards.tolist() == [1.0, 1.0]
    assert group.envs[0].steps == 2 + (mode is not SAME), "the other env is untouched by the restart"


def test_restart_budget_exhausted_raises_with_a_note():
    group, _ = make_group([FaultyEnv, fault_at("step_raise", 1)], SAME, start=0, worker=4)
    group.configure("restart", 2, 60.0)
    group.reset(seeds=[0, 1])
    for _ in range(2):
        entries, _ = group.step()
        assert [e.index for e in entries] == [1] and entries[0].info["restarted"]
    with pytest.raises(EnvError) as caught:
        group.step()
    err = caught.value
    assert (err.env_index, err.worker, err.method) == (1, 4, "step")
    assert "planted step failure at step 1" in str(err)
    assert "env 1 was already restarted 2 times in 60 s" in str(err)


def test_restart_budget_counts_within_its_window(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(restarts, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    group, _ = make_group([fault_at("step_raise", 1), fault_at("step_raise", 1)], SAME)
    group.configure("restart", 1, 10.0)
    group.reset(seeds=[0, 1])
    group.step(ids=[0])  # restart 1 of env 0 at t=100
    group.step(ids=[1])  # env 1 has a budget of its own
    clock[0] = 111.0
    entries, _ = group.step(ids=[0])  # the restart at t=100 is out of the window
    assert entries[0].info["restarted"]
    clock[0] = 115.0
    with pytest.raises(EnvError, match=r"already restarted 1 times in 10 s") as caught:
        group.step(ids=[0])
    assert caught.value.env_index == 0


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
def test_restart_on_reset_failure_reports_it_in_the_reset_info(mode):
    built = {"n": 0}

    def flaky():  # only the first env built fails to reset
        built["n"] += 1
        return FaultyEnv("reset_raise" if built["n"] == 1 else None, at=1)

    group, buffers = make_group([FaultyEnv, flaky], mode, start=2, n=4)
    group.configure("restart", 3, 60.0)
    entries, _ = group.reset(seeds=[0, 1])
    assert built["n"] == 2
    assert entries == [
        InfoEntry(3, {"restarted": True, "restart_reason": "RuntimeError: planted reset failure on reset 1"})
    ]
    # the rebuilt env was reset with the same seed
    assert np.array_equal(buffers.observations.item(3), FaultyEnv().reset(seed=1)[0])
    assert not buffers.truncations.any()


def test_restart_that_cannot_reset_or_rebuild_raises():
    group, _ = make_group([fault_at("reset_raise", 1)], NEXT, start=3, worker=1, n=4)
    group.configure("restart", 3, 60.0)
    with pytest.raises(EnvError) as caught:
        group.reset(seeds=[0])
    assert (caught.value.env_index, caught.value.method) == (3, "reset after a restart")

    calls = {"n": 0}

    def once():
        calls["n"] += 1
        if calls["n"] > 1:
            raise OSError("cannot build twice")
        return FaultyEnv("step_raise", at=1)

    group, _ = make_group([once], SAME, start=0, worker=2)
    group.configure("restart", 3, 60.0)
    group.reset(seeds=[0])
    with pytest.raises(EnvError) as caught:
        group.step()
    err = caught.value
    assert (err.env_index, err.worker, err.method) == (0, 2, "env_fn() while restarting")
    assert err.exc_type == "OSError" and isinstance(err.__cause__, OSError)


# ============================================================================ threads
def in_thread(fn, *args):
    """``fn(*args)`` run in a thread of its own; what it returned."""
    out = []
    thread = threading.Thread(target=lambda: out.append(fn(*args)))
    thread.start()
    thread.join(10)
    assert out, f"{fn} did not finish in its thread"
    return out[0]


def test_a_rebuilt_env_is_the_one_the_next_step_steps_from_any_thread():
    """Steps of one group from two threads write into the group's rows; an env rebuilt after it
    raised (in the other thread) is the one the next step steps (its NEXT_STEP reset)."""
    built = []

    def env(fault=None):
        def fn():
            built.append(TrackedEnv(fault, at=2))
            return built[-1]
        return fn

    group, buffers = make_group([env(), env(), env(), env("step_raise")])
    group.configure("restart", 2, 60.0)
    group.reset(seeds=[0, 1, 2, 3])
    buffers.actions.assign(np.zeros(4, int))
    group.step(ids=[0, 1])
    in_thread(group.step, [2, 3])  # env 3 steps once
    assert buffers.rewards.tolist() == [1.0] * 4, "both threads wrote into the group's rows"
    entries, _ = in_thread(group.step, [3])  # env 3 raises at its second step and is rebuilt
    assert entries[0].info["restarted"] and group.envs[3] is built[4] and built[3].closed
    group.step(ids=[2, 3])  # this thread steps the new env 3 (its NEXT_STEP reset)
    assert (built[4].resets, built[3].steps) == (1, 2)


# ============================================================================ other calls
def render_env(sleep: float):
    def fn():
        return FaultyEnv(sleep=sleep, render_mode="rgb_array")

    return fn


def test_call_get_set_attr_apply_render_on_selected_ids():
    group, _ = make_group([render_env(0.1), render_env(0.2), render_env(0.3)], NEXT, start=10, worker=3, n=13)
    group.reset(seeds=[0, 1, 2])
    assert group.call("planted", (4,), {}, [2, 0]) == [8, 8]
    assert group.call("planted", (), {"x": 5}, [1]) == [10]
    assert group.call("sleep", (), {}) == [0.1, 0.2, 0.3]  # not callable: returned as is
    assert group.get_attr("sleep", [2, 1]) == [0.3, 0.2]
    (method,) = group.get_attr("planted", [1])  # get_attr never calls
    assert callable(method) and method.__self__ is group.envs[1]
    group.set_attr("sleep", [7.0, 8.0], [2, 0])
    assert group.get_attr("sleep") == [8.0, 0.2, 7.0]
    assert group.apply(lambda env, k: env.sleep + k, (1,), [1, 0]) == [1.2, 9.0]
    assert group.apply(lambda env: id(env), ()) == [id(e) for e in group.envs]
    group.step(ids=[1])
    group.step(ids=[1])
    frames = group.render([1, 0])
    assert [f.shape for f in frames] == [(4, 4, 3), (4, 4, 3)]
    assert frames[0].max() == 2 and frames[1].max() == 0
    assert [int(f.max()) for f in group.render()] == [0, 2, 0]


def test_attributes_go_through_wrappers():
    group, _ = make_group([cartpole, cartpole], NEXT)
    assert isinstance(group.envs[0], gym.Wrapper)
    assert group.get_attr("gravity") == [9.8, 9.8]
    group.set_attr("gravity", [1.5], [1])
    assert group.envs[1].unwrapped.gravity == 1.5 and group.envs[0].unwrapped.gravity == 9.8
    assert group.call("gravity", (), {}, [1]) == [1.5]
    assert group.get_attr("_max_episode_steps") == [16, 16]  # an attribute of a wrapper


def test_call_errors_name_env_worker_and_method():
    fns = [FaultyEnv, lambda: FaultyEnv("call_raise")]
    group, _ = make_group(fns, NEXT, start=5, worker=2, n=7)
    assert group.call("planted", (), {}, [0]) == [2]
    with pytest.raises(EnvError) as caught:
        group.call("planted", (3,), {}, [0, 1])
    err = caught.value
    assert (err.env_index, err.worker, err.method, err.exc_type) == (6, 2, "call('planted')", "KeyError")
    assert "planted call failure with x=3" in err.exc_message
    with pytest.raises(EnvError) as caught:
        group.get_attr("no_such_attribute", [1])
    assert (caught.value.env_index, caught.value.method) == (6, "get_attr('no_such_attribute')")
    assert caught.value.exc_type == "AttributeError"

    def explode(env):
        raise RuntimeError("apply failed")

    with pytest.raises(EnvError) as caught:
        group.apply(explode, (), [1, 0])
    assert (caught.value.env_index, caught.value.method) == (6, "apply('explode')")


def test_describe_and_close():
    fns = [lambda: TrackedEnv(render_mode="rgb_array"), lambda: TrackedEnv(close_raises=True), TrackedEnv]
    group, _ = make_group(fns, NEXT)
    envs = list(group.envs)
    description = group.describe()
    assert len(description) == 3 and all(isinstance(d, EnvDescription) for d in description)
    assert description[0].observation_space == envs[0].observation_space
    assert description[0].action_space == envs[0].action_space
    assert description[0].metadata == FaultyEnv.metadata and description[0].metadata is not FaultyEnv.metadata
    assert [d.render_mode for d in description] == ["rgb_array", None, None]
    group.close()  # env 1 fails to close: the others are closed all the same
    assert all(env.closed for env in envs) and group.envs == []


def test_run_dispatches_commands():
    group, buffers = make_group([FaultyEnv, FaultyEnv], NEXT, start=0, worker=7)
    reply = group.run(commands.Reset(seeds=[0, 1]))
    assert not reply.entries and reply.objects is None and reply.empty
    buffers.actions.assign(np.array([1, 0]))
    group.run(commands.Step(ids=[0]))
    assert [e.steps for e in group.envs] == [1, 0]
    assert group.run(commands.Call("planted", (2,), None, [1])) == [4]
    assert group.run(commands.GetAttr("steps")) == [1, 0]
    group.run(commands.SetAttr("sleep", [0.5], [1]))
    assert group.envs[1].sleep == 0.5
    assert group.run(commands.Apply(lambda env: env.steps + 1)) == [2, 1]
    with pytest.raises(TypeError, match=r"^worker 7: not an env-group command"):
        group.run(("step", ()))
