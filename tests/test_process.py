"""The process backend: differential tests against serial/gymnasium, async batches, failures."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

import vecenv
from helpers import FAST_START, assert_same, needs_processes, posix_mechanism_only
from vecenv.errors import (
    AlreadyPendingCallError,
    ClosedEnvironmentError,
    EnvError,
    NoAsyncCallError,
    WorkerDiedError,
)
from vecenv.transports.process import EnvFnPicklingError

pytestmark = needs_processes

MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]


# ==================================================================== leak check
def _child_pids() -> set[int]:
    """Live processes whose parent is this process (forkserver/resource tracker excluded)."""
    me = os.getpid()
    helpers = set()
    for mod, attr in (("forkserver", "_forkserver"), ("resource_tracker", "_resource_tracker")):
        obj = getattr(getattr(multiprocessing, mod, None), attr, None)
        pid = getattr(obj, "_forkserver_pid", None) or getattr(obj, "_pid", None)
        if pid:
            helpers.add(pid)
    out: set[int] = set()
    if not os.path.isdir("/proc"):  # Windows: multiprocessing's own children are checked below
        return out
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[1]) == me and int(name) not in helpers:
            out.add(int(name))
    return out


@pytest.fixture(autouse=True)
def no_stray_processes():
    """No worker (multiprocessing-managed or not) outlives a test (shared memory: conftest)."""
    children_before = _child_pids()  # e.g. a session-wide local Ray's processes
    yield
    deadline = time.monotonic() + 5
    while (_child_pids() - children_before or multiprocessing.active_children()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _child_pids() - children_before, "a worker process outlived its test"
    assert not multiprocessing.active_children()


# ==================================================================== test envs
class StructEnv(gym.Env):
    """Deterministic given its seed; observation of any kind; sparse infos; varied episode lengths."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, kind: str = "box", index: int = 0, render_mode: str | None = "rgb_array"):
        self.kind = kind
        self.index = index
        self.render_mode = render_mode
        box = spaces.Box(-10, 10, (3,), np.float32)
        self.observation_space = {
            "box": box,
            "discrete": spaces.Discrete(50),
            "dict": spaces.Dict({"pos": box, "count": spaces.Discrete(100), "flags": spaces.MultiBinary(2)}),
            "tuple": spaces.Tuple((box, spaces.Tuple((spaces.Discrete(7), spaces.MultiDiscrete([3, 4]))))),
            "text": spaces.Tuple((spaces.Text(8), box)),
        }[kind]
        self.action_space = spaces.Discrete(3)
        self.t = 0
        self.length = 5

    def _obs(self):
        r = self.np_random
        pos = r.uniform(-1, 1, 3).astype(np.float32) + self.t
        return {
            "box": pos,
            "discrete": int(r.integers(50)),
            "dict": {"pos": pos, "count": self.t % 100, "flags": r.integers(0, 2, 2).astype(np.int8)},
            "tuple": (pos, (int(r.integers(7)), r.integers(0, [3, 4]).astype(np.int64))),
            "text": ("ab" * (self.t % 4 + 1), pos),
        }[self.kind]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.length = int(self.np_random.integers(3, 9))
        info = {"start": self.index} if self.index % 2 == 0 else {}
        return self._obs(), info

    def step(self, action):
        self.t += 1
        reward = float(action) + self.np_random.uniform()
        terminated = self.t >= self.length and action == 1
        truncated = self.t >= self.length + 3
        info = {"t": self.t} if self.t % 3 == 0 else {}
        if self.t % 4 == 0:
            info["odd"] = np.arange(2) + self.index
        return self._obs(), reward, terminated, truncated, info

    def render(self):
        return np.full((2, 2, 3), self.t, dtype=np.uint8)


class SlowEnv(gym.Env):
    """Sleeps ``delay`` seconds per step (without burning CPU); observation = its index."""

    observation_space = spaces.Box(0, 1000, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, index: int = 0, delay: float = 0.0, fail_at: int | None = None):
        self.index = index
        self.delay = delay
        self.fail_at = fail_at
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.index], np.float32), {}

    def step(self, action):
        self.t += 1
        if self.fail_at is not None and self.t == self.fail_at:
            raise ValueError(f"env {self.index} fails on purpose")
        if self.delay:
            time.sleep(self.delay)
        return np.array([self.index], np.float32), 1.0, False, False, {}


class _Unloadable(Exception):
    def __init__(self, a, b):  # pickles, but cannot be rebuilt from its args
        super().__init__(f"{a}{b}")


class RaisingEnv(SlowEnv):
    def step(self, action):
        if self.fail_at == -1:
            raise _Unloadable(1, 2)
        if self.fail_at == -2:
            lock = threading.Lock()
            exc = RuntimeError("with an unpicklable attribute")
            exc.lock = lock
            raise exc
        return super().step(action)


def fns(kind: str, n: int):
    return [lambda i=i: StructEnv(kind, i) for i in range(n)]


def process(env_fns, **kwargs):
    kwargs.setdefault("context", FAST_START)
    kwargs.setdefault("num_workers", 2)
    return vecenv.ProcessVectorEnv(env_fns, **kwargs)


def rollout(envs, steps: int, seed: int = 3) -> tuple:
    rng = np.random.default_rng(seed)
    out = [envs.reset(seed=seed)]
    ended = np.zeros(envs.num_envs, dtype=bool)
    for _ in range(steps):
        actions = rng.integers(0, envs.single_action_space.n, envs.num_envs)
        if envs.autoreset_mode is AutoresetMode.DISABLED and ended.any():
            out.append(envs.reset(options={"reset_mask": ended}))
            ended[:] = False
            continue
        out.append(envs.step(actions))
        ended = np.logical_or(out[-1][2], out[-1][3])
    return tuple(out)


# ==================================================================== differential
@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("kind", ["box", "discrete", "dict", "tuple", "text"])
def test_same_trajectories_as_serial_and_gymnasium(kind, mode):
    env_fns = fns(kind, 5)
    with process(env_fns, autoreset_mode=mode) as ours, vecenv.SerialVectorEnv(
        env_fns, autoreset_mode=mode
    ) as serial:
        got = rollout(ours, 25)
        assert_same(got, rollout(serial, 25))
    if kind != "text":  # gymnasium's SyncVectorEnv cannot batch a Text leaf into a Tuple
        ref = gym.vector.SyncVectorEnv(env_fns, autoreset_mode=mode)
        try:
            assert_same(got, rollout(ref, 25))
        finally:
            ref.close()


@pytest.mark.timeout(60)
def test_make_backend_process_cartpole_matches_gymnasium():
    with vecenv.make("CartPole-v1", 4, backend="process", context=FAST_START) as ours:
        ref = gym.make_vec("CartPole-v1", 4, vectorization_mode="sync")
        try:
            assert_same(rollout(ours, 60), rollout(ref, 60))
        finally:
            ref.close()
        assert ours.num_workers == min(4, len(os.sched_getaffinity(0)))


@pytest.mark.timeout(60)
def test_async_batches_follow_each_envs_serial_trajectory():
    """In async-batch mode each env still follows its own seeded trajectory (with autoreset)."""
    env_fns = fns("dict", 6)
    per_env: dict[int, list] = {i: [] for i in range(6)}
    with process(env_fns, batch_size=2, num_workers=3) as ours:
        obs, info = ours.reset(seed=5)
        for _ in range(40):
            ids = info["env_id"]
            for row, i in enumerate(ids.tolist()):
                per_env[i].append((obs["pos"][row], obs["count"][row]))
            ours.send(np.ones(len(ids), dtype=np.int64), ids)
            obs, _, _, _, info = ours.recv()
    with vecenv.SerialVectorEnv(env_fns) as ref:
        obs, _ = ref.reset(seed=5)
        serial = {i: [(obs["pos"][i], obs["count"][i])] for i in range(6)}
        for _ in range(40):
            obs, *_ = ref.step(np.ones(6, dtype=np.int64))
            for i in range(6):
                serial[i].append((obs["pos"][i], obs["count"][i]))
    assert sum(len(v) for v in per_env.values()) == 80
    for i in range(6):
        assert_same(tuple(per_env[i]), tuple(serial[i][: len(per_env[i])]), f"env {i}")


@pytest.mark.timeout(60)
def test_custom_action_space_objects_travel():
    class TextAction(StructEnv):
        def __init__(self):
            super().__init__("box")
            self.action_space = spaces.Text(5)

        def step(self, action):
            obs, _, term, trunc, info = super().step(1)
            return obs, float(len(action)), term, trunc, info

    with process([TextAction] * 3) as envs:
        envs.reset(seed=0)
        _, reward, *_ = envs.step(("a", "bbb", "cc"))
        assert reward.tolist() == [1.0, 3.0, 2.0]


@pytest.mark.timeout(60)
def test_call_get_set_attr_render_apply():
    env_fns = fns("box", 4)
    with process(env_fns, num_workers=3) as envs:
        envs.reset(seed=1)
        assert envs.get_attr("index") == (0, 1, 2, 3)
        envs.set_attr("index", [10, 11, 12, 13])
        assert envs.call("__getattribute__", "index") == (10, 11, 12, 13)
        envs.set_attr("index", 7)
        assert envs.get_attr_at([3, 0], "index") == [7, 7]
        assert envs.np_random_seed == (1, 2, 3, 4)
        envs.step(np.zeros(4, dtype=np.int64))
        frames = envs.render()
        assert len(frames) == 4 and all(f.shape == (2, 2, 3) and f[0, 0, 0] == 1 for f in frames)
        assert envs.apply(lambda env, k: env.t + k, 5, indices=[2, 1]) == [6, 6]
        with pytest.raises(AttributeError, match="keeps its envs in workers"):
            _ = envs.envs


@pytest.mark.timeout(60)
def test_copy_false_returns_views_valid_until_next_step():
    with process(fns("box", 4), copy=False) as envs:
        obs0, _ = envs.reset(seed=0)
        kept = obs0.copy()
        obs1, *_ = envs.step(np.zeros(4, dtype=np.int64))
        assert obs1 is obs0 or np.shares_memory(obs1, obs0)  # the same shared rows, rewritten
        assert not np.array_equal(obs0, kept)
    with process(fns("box", 4), copy=True) as envs:
        obs0, _ = envs.reset(seed=0)
        kept = obs0.copy()
        envs.step(np.zeros(4, dtype=np.int64))
        assert np.array_equal(obs0, kept)


# ==================================================================== start methods
@pytest.mark.timeout(90)
@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_spawn_and_forkserver(context):
    with vecenv.make("CartPole-v1", 3, backend="process", context=context, num_workers=2) as ours:
        ref = gym.make_vec("CartPole-v1", 3, vectorization_mode="sync")
        try:
            assert_same(rollout(ours, 20), rollout(ref, 20))
        finally:
            ref.close()
        assert ours.apply(lambda env: env.spec.id) == ["CartPole-v1"] * 3  # cloudpickled lambda


@pytest.mark.timeout(30)
def test_unpicklable_env_fn_is_named_before_any_worker_starts():
    lock = threading.Lock()
    good = [lambda: gym.make("CartPole-v1")] * 2

    def bad():
        with lock:
            return gym.make("CartPole-v1")

    with pytest.raises(EnvFnPicklingError, match=r"env_fns\[2\].*'spawn'.*lock") as info:
        vecenv.ProcessVectorEnv([*good, bad], context="spawn")
    assert isinstance(info.value, TypeError)
    assert not multiprocessing.active_children()
    with vecenv.ProcessVectorEnv([*good, bad], context="fork") as envs:  # fork needs no pickling
        envs.reset(seed=0)


# ==================================================================== async batches
class GatedEnv(SlowEnv):
    """Steps only once its gate (a file) exists: an env that stays busy until the test says, so
    that what the batches hold is decided by the test, not by how the OS schedules workers."""

    def __init__(self, index: int, gate: str) -> None:
        super().__init__(index)
        self.gate = gate

    def step(self, action):
        while not os.path.exists(self.gate):
            time.sleep(0.002)
        return super().step(action)


def _open(gate) -> None:
    open(gate, "w").close()


@pytest.mark.timeout(60)
def test_async_batches_slow_env_does_not_hold_back_fast_ones(tmp_path):
    gate = str(tmp_path / "gate")
    env_fns = [lambda i=i: GatedEnv(i, gate) if i == 0 else SlowEnv(i) for i in range(4)]
    with process(env_fns, batch_size=2, num_workers=4) as envs:
        try:
            obs, info = envs.reset(seed=0)
            ids = info["env_id"]
            assert ids.shape == (2,) and info["_env_id"].all()
            order: list[int] = []
            for _ in range(5000):  # the EnvPool loop; a bound on batches, never on time
                assert obs[:, 0].tolist() == ids.tolist()  # each row is its env's observation
                order.extend(ids.tolist())
                # env 0 comes back once (its reset) and then never while its step cannot end
                assert order.count(0) <= 1, order
                if order.count(0) == 1 and min(order.count(i) for i in (1, 2, 3)) >= 5:
                    break
                envs.send(np.zeros(len(ids), dtype=np.int64), ids)
                obs, _, _, _, info = envs.recv()
                ids = info["env_id"]
            assert order.count(0) == 1 and min(order.count(i) for i in (1, 2, 3)) >= 5, order
            _open(gate)  # env 0's step can end now: it is not starved, it comes back
            for _ in range(5000):
                envs.send(np.zeros(len(ids), dtype=np.int64), ids)
                obs, _, _, _, info = envs.recv()
                ids = info["env_id"]
                if 0 in ids:
                    break
            assert 0 in ids and obs[ids.tolist().index(0), 0] == 0
        finally:
            _open(gate)


@pytest.mark.timeout(60)
def test_async_batches_return_the_ready_envs_and_every_env(tmp_path):
    """recv() returns envs whose step has ended, never one still stepping; every env returns."""
    gates = [str(tmp_path / f"gate{i}") for i in range(6)]
    env_fns = [lambda i=i: GatedEnv(i, gates[i]) for i in range(6)]
    with process(env_fns, batch_size=3, num_workers=6) as envs:
        try:
            _, info = envs.reset(seed=0)
            first = info["env_id"].tolist()
            envs.send(np.zeros(3, dtype=np.int64), first)  # these 3 now wait on their gates
            _, _, _, _, info = envs.recv()  # so this batch is the other 3 resets
            second = info["env_id"].tolist()
            assert sorted(first + second) == list(range(6))
            envs.send(np.zeros(3, dtype=np.int64), second)  # all 6 wait on their gates
            for group in ([4, 1, 5], [0, 3, 2]):  # open 3 gates: exactly those 3 come back
                # (the first 3 are not sent new actions yet, so they cannot come back again)
                for i in group:
                    _open(gates[i])
                obs, reward, _, _, info = envs.recv()
                assert sorted(info["env_id"].tolist()) == sorted(group)
                assert obs[:, 0].tolist() == info["env_id"].tolist() and reward.tolist() == [1.0] * 3
            for group in ([4, 1, 5], [0, 3, 2]):  # step them all again, now ungated
                envs.send(np.zeros(3, dtype=np.int64), group)
            counts = np.zeros(6, dtype=int)
            for _ in range(5000):  # every gate open: every env keeps coming back (bounded)
                _, _, _, _, info = envs.recv()
                ids = info["env_id"]
                assert len(set(ids.tolist())) == 3
                counts[ids] += 1
                if (counts >= 3).all():
                    break
                envs.send(np.zeros(3, dtype=np.int64), ids)
            assert (counts >= 3).all(), counts
        finally:
            for gate in gates:
                _open(gate)


# ==================================================================== gymnasium async API
@pytest.mark.timeout(60)
def test_async_vector_env_drop_in_and_timeouts():
    env_fns = [lambda i=i: SlowEnv(i, 0.4 if i == 1 else 0.0) for i in range(3)]
    envs = vecenv.AsyncVectorEnv(env_fns, context=FAST_START)
    try:
        assert len(envs.processes) == 3  # gymnasium's layout: one env per worker
        with pytest.raises(NoAsyncCallError):
            envs.step_wait()
        with pytest.raises(NoAsyncCallError):
            envs.reset_wait()
        with pytest.raises(NoAsyncCallError):
            envs.call_wait()
        envs.reset_async(seed=0)
        with pytest.raises(AlreadyPendingCallError):
            envs.step_async(np.zeros(3, dtype=np.int64))
        envs.reset_wait()
        envs.step_async(np.zeros(3, dtype=np.int64))
        with pytest.raises(multiprocessing.TimeoutError):
            envs.step_wait(timeout=0.05)
        with pytest.raises(AlreadyPendingCallError):  # the step is still pending
            envs.reset_async()
        with pytest.raises(AlreadyPendingCallError):
            envs.call_async("index")
        obs, reward, *_ = envs.step_wait()
        assert obs[:, 0].tolist() == [0, 1, 2] and reward.tolist() == [1, 1, 1]
        envs.call_async("index")
        assert envs.call_wait(timeout=5) == (0, 1, 2)
        envs.call_async("step", 0)  # slow call on env 1
        with pytest.raises(multiprocessing.TimeoutError):
            envs.call_wait(timeout=0.05)
        assert len(envs.call_wait()) == 3
    finally:
        envs.close()
    with pytest.raises(ClosedEnvironmentError):
        envs.step(np.zeros(3, dtype=np.int64))
    envs.close()  # idempotent


@pytest.mark.timeout(30)
def test_async_vector_env_num_workers_and_worker_arg():
    with vecenv.AsyncVectorEnv([lambda: SlowEnv()] * 4, context=FAST_START, num_workers=2) as envs:
        assert len(envs.processes) == 2
    with pytest.raises(NotImplementedError):
        vecenv.AsyncVectorEnv([lambda: SlowEnv()], worker=lambda *a: None)


# ==================================================================== failures
@pytest.mark.timeout(60)
def test_env_exception_names_env_and_keeps_workers_consistent():
    env_fns = [lambda i=i: SlowEnv(i, fail_at=2 if i == 3 else None) for i in range(4)]
    with process(env_fns) as envs:
        envs.reset(seed=0)
        envs.step(np.zeros(4, dtype=np.int64))
        with pytest.raises(EnvError) as info:
            envs.step(np.zeros(4, dtype=np.int64))
        err = info.value
        assert err.env_index == 3 and err.worker == 1 and err.method == "step"
        assert isinstance(err.original, ValueError)
        assert "fails on purpose" in str(err) and "in step" in err.remote_traceback
        obs, _ = envs.reset(seed=0)  # every worker answers again
        obs, reward, *_ = envs.step(np.zeros(4, dtype=np.int64))
        assert obs[:, 0].tolist() == [0, 1, 2, 3] and reward.tolist() == [1.0] * 4


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", [-1, -2], ids=["unloadable", "unpicklable"])
def test_env_exception_that_cannot_travel(how):
    with process([lambda: RaisingEnv(0, fail_at=how), lambda: SlowEnv(1)]) as envs:
        envs.reset()
        with pytest.raises(EnvError) as info:
            envs.step(np.zeros(2, dtype=np.int64))
        assert info.value.env_index == 0 and info.value.original is None
        assert "Traceback" in info.value.remote_traceback


@pytest.mark.timeout(30)
def test_env_fn_error_and_worker_death_during_start():
    def broken():
        raise OSError("no such simulator")

    with pytest.raises(OSError, match="^no such simulator\n\\(vecenv\\) env 2 ") as info:
        process([SlowEnv, SlowEnv, broken, SlowEnv])
    assert info.value.method == "env_fn()"
    with pytest.raises(WorkerDiedError) as info:
        process([SlowEnv, lambda: os._exit(3)])
    assert info.value.worker == 1 and info.value.exitcode == 3


@pytest.mark.timeout(30)
def test_sigkill_while_waiting_raises_worker_died_error():
    env_fns = [lambda i=i: SlowEnv(i, 5.0 if i >= 2 else 0.0) for i in range(4)]
    envs = process(env_fns)
    try:
        envs.reset(seed=0)
        envs.step_async(np.zeros(4, dtype=np.int64))
        victim = envs.processes[1]
        threading.Timer(0.2, os.kill, (victim.pid, signal.SIGKILL)).start()
        t = time.monotonic()
        with pytest.raises(WorkerDiedError) as info:
            envs.step_wait()
        assert time.monotonic() - t < 3
        assert info.value.worker == 1 and info.value.env_indices == [2, 3]
        assert info.value.exitcode == -signal.SIGKILL and "SIGKILL" in str(info.value)
        with pytest.raises(WorkerDiedError):  # still dead on the next step
            envs.step(np.zeros(4, dtype=np.int64))
    finally:
        t = time.monotonic()
        envs.close()
        assert time.monotonic() - t < 5


@pytest.mark.timeout(30)
def test_close_is_bounded_with_a_hung_worker_and_frees_everything():
    envs = process([lambda: SlowEnv(0, 60.0), lambda: SlowEnv(1)])
    envs.reset()
    envs.step_async(np.zeros(2, dtype=np.int64))
    pids = [p.pid for p in envs.processes]
    t = time.monotonic()
    envs.close(timeout=0.5)
    assert time.monotonic() - t < 4
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"


@pytest.mark.timeout(30)
def test_close_after_error_and_on_garbage_collection():
    envs = process([lambda: SlowEnv(0, fail_at=1), SlowEnv])
    envs.reset()
    with pytest.raises(EnvError):
        envs.step(np.zeros(2, dtype=np.int64))
    envs.close()
    envs = process([SlowEnv, SlowEnv])
    envs.reset()
    pids = [p.pid for p in envs.processes]
    del envs  # garbage collection closes it
    import gc

    gc.collect()
    deadline = time.monotonic() + 5
    while any(pid in _child_pids() for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(pid in _child_pids() for pid in pids)


@pytest.mark.timeout(30)
def test_workers_ignore_sigint():
    with process([lambda: SlowEnv(0), lambda: SlowEnv(1)]) as envs:
        envs.reset()
        for p in envs.processes:
            os.kill(p.pid, signal.SIGINT)
        time.sleep(0.1)
        obs, *_ = envs.step(np.zeros(2, dtype=np.int64))
        assert obs[:, 0].tolist() == [0, 1]


@posix_mechanism_only
@pytest.mark.timeout(30)
def test_no_shared_memory_segment_is_named():
    before = set(os.listdir("/dev/shm"))
    with process([SlowEnv] * 2) as envs:
        envs.reset()
        assert set(os.listdir("/dev/shm")) == before


# ==================================================================== inline group
@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("kind", ["box", "dict", "text"])
def test_inline_group_same_trajectories_as_serial(kind, mode):
    env_fns = fns(kind, 5)
    with process(env_fns, autoreset_mode=mode, inline=True) as ours, vecenv.SerialVectorEnv(
        env_fns, autoreset_mode=mode
    ) as serial:
        assert len(ours.processes) == 1  # num_workers=2 counts the inline group
        assert_same(rollout(ours, 25), rollout(serial, 25))


@pytest.mark.timeout(60)
def test_inline_group_async_batches_and_calls():
    env_fns = [lambda i=i: SlowEnv(i) for i in range(4)]
    with process(env_fns, inline=True, batch_size=2) as envs:
        obs, infos = envs.reset(seed=0)
        seen = set(infos["env_id"].tolist())
        deadline = time.monotonic() + 10  # the inline envs are ready first; the others follow
        while seen != {0, 1, 2, 3} and time.monotonic() < deadline:
            envs.send(np.zeros(2, dtype=np.int64), infos["env_id"])
            obs, _, _, _, infos = envs.recv()
            assert obs[:, 0].tolist() == infos["env_id"].tolist()
            seen |= set(infos["env_id"].tolist())
        assert seen == {0, 1, 2, 3}
    with process(env_fns, inline=True) as envs:
        envs.reset()
        assert envs.get_attr("index") == (0, 1, 2, 3)
        assert envs.apply(lambda env: os.getpid())[2:] == [os.getpid()] * 2


@pytest.mark.timeout(60)
def test_inline_group_env_error_names_the_env():
    env_fns = [lambda i=i: SlowEnv(i, fail_at=2 if i == 3 else None) for i in range(4)]
    with process(env_fns, inline=True) as envs:
        envs.reset(seed=0)
        envs.step(np.zeros(4, dtype=np.int64))
        with pytest.raises(EnvError) as info:
            envs.step(np.zeros(4, dtype=np.int64))
        assert info.value.env_index == 3 and info.value.worker == 1 and "fails on purpose" in str(info.value)
        envs.reset(seed=0)  # the remote worker was drained: everything answers again
        obs, reward, *_ = envs.step(np.zeros(4, dtype=np.int64))
        assert obs[:, 0].tolist() == [0, 1, 2, 3] and reward.tolist() == [1.0] * 4


class _ClosedFlagEnv(SlowEnv):
    closed_in: list = []

    def close(self):
        type(self).closed_in.append((self.index, os.getpid()))


@pytest.mark.timeout(30)
def test_inline_group_close_closes_inline_envs_and_workers():
    _ClosedFlagEnv.closed_in.clear()
    envs = process([lambda i=i: _ClosedFlagEnv(i) for i in range(4)], inline=True)
    envs.reset()
    pids = [p.pid for p in envs.processes]
    envs.close()
    envs.close()  # idempotent
    assert sorted(_ClosedFlagEnv.closed_in) == [(2, os.getpid()), (3, os.getpid())]
    assert not any(pid in _child_pids() for pid in pids)


@pytest.mark.timeout(60)
def test_inline_group_restart_of_a_dead_remote_worker():
    env_fns = [lambda i=i: SlowEnv(i) for i in range(4)]
    with process(env_fns, inline=True, on_error="restart") as envs:
        envs.reset(seed=0)
        envs.step(np.zeros(4, dtype=np.int64))
        old = envs.processes[0].pid
        os.kill(old, signal.SIGKILL)
        obs, _, _, trunc, infos = envs.step(np.zeros(4, dtype=np.int64))
        assert infos["_restarted"].tolist() == [True, True, False, False]
        assert trunc.tolist() == [True, True, False, False]
        assert envs.processes[0].pid != old
        obs, reward, *_ = envs.step(np.zeros(4, dtype=np.int64))  # NEXT_STEP: 0 and 1 reset now
        assert obs[:, 0].tolist() == [0, 1, 2, 3] and reward.tolist() == [0.0, 0.0, 1.0, 1.0]
    with process(env_fns, inline=True) as envs:  # on_error="raise": WorkerDiedError, at once
        envs.reset()
        os.kill(envs.processes[0].pid, signal.SIGKILL)
        t = time.monotonic()
        with pytest.raises(WorkerDiedError):
            envs.step(np.zeros(4, dtype=np.int64))
        assert time.monotonic() - t < 5
