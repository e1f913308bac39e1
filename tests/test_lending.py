"""Observations lent as views (vecenv.spaces.slots): with ``copy=True`` a batch of large
observations comes back without a copy, and no batch the user still holds is ever overwritten."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import vecenv
from helpers import make_backend, use_backend
from vecenv.spaces import slots
from vecenv.spaces.buffers import slots_for

N = 8  # 8 envs of 64x64x4 bytes: 128 KiB a batch, above LEND_MIN_BYTES
LOCAL_BACKENDS = ["serial", "thread", "process", "inline"]


FAILED: list[int] = []


class Frames(gym.Env):
    """Frames whose every byte tells the env and its step: ``(17 * env + step) % 256``; episodes
    of 7 steps; the env ``fail_env`` raises once (in its process) on reaching step ``fail_at``."""

    def __init__(self, index: int, fail_env: int = -1, fail_at: int = -1) -> None:
        self.observation_space = gym.spaces.Dict({
            "frame": gym.spaces.Box(0, 255, (64, 64, 4), np.uint8),
            "t": gym.spaces.Box(0, 1000, (1,), np.int64),
        })
        self.action_space = gym.spaces.Discrete(3)
        self.index, self.fail_env, self.fail_at = index, fail_env, fail_at
        self.t, self.episodes = 0, 0

    def _obs(self) -> dict:
        value = (17 * self.index + self.t + 50 * self.episodes) % 256
        return {"frame": np.full((64, 64, 4), value, np.uint8), "t": np.array([self.t], np.int64)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.episodes += 1
        return self._obs(), {}

    def step(self, action):
        self.t += int(action) + 1
        if self.index == self.fail_env and self.t >= self.fail_at and not FAILED:
            FAILED.append(self.index)  # once per worker process: the rebuilt env goes on
            raise RuntimeError("frames failed")
        return self._obs(), float(self.t), False, self.t >= 7, {}


def frame_fns(**kwargs) -> list:
    return [lambda i=i: Frames(i, **kwargs) for i in range(N)]


def lent(obs: dict) -> bool:
    return not obs["frame"].flags.owndata


def test_large_fixed_observations_get_slots_and_small_or_object_ones_do_not():
    frames = Frames(0).observation_space
    assert slots_for(frames, N) == slots.SLOTS
    assert slots_for(gym.spaces.Box(0, 1, (4,), np.float32), N) == 1
    text = gym.spaces.Dict({"frame": frames["frame"], "name": gym.spaces.Text(5)})
    assert slots_for(text, N) == 1


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", LOCAL_BACKENDS)
def test_ten_kept_batches_are_never_overwritten_and_match_gymnasium(request, name):
    backend = "process" if name == "inline" else name
    use_backend(request, backend)
    extra = {"inline": True} if name == "inline" else {}
    ours = make_backend(backend, frame_fns(), **extra)
    ref = gym.vector.SyncVectorEnv(frame_fns())
    rng = np.random.default_rng(1)
    kept, expected, lent_count = [], [], 0
    try:
        o1, _ = ours.reset(seed=0)
        o2, _ = ref.reset(seed=0)
        np.testing.assert_array_equal(o1["frame"], o2["frame"])
        del o1
        for t in range(30):
            actions = rng.integers(0, 3, N)
            obs, *_ = ours.step(actions)
            want, *_ = ref.step(actions)
            np.testing.assert_array_equal(obs["frame"], want["frame"])
            lent_count += lent(obs)
            if t % 3 == 0 and len(kept) < 10:
                kept.append(obs)
                expected.append({k: v.copy() for k, v in obs.items()})
        for got, want in zip(kept, expected, strict=True):
            np.testing.assert_array_equal(got["frame"], want["frame"])
            np.testing.assert_array_equal(got["t"], want["t"])
        assert lent_count >= 2  # until two kept batches held both lent slots
        kept.clear()
        obs = None
        for _ in range(10):  # a loop that holds each batch only while it steps the next
            obs, *_ = ours.step(rng.integers(0, 3, N))
            lent_count += lent(obs)
        assert lent(obs) and lent_count >= 11
    finally:
        ours.close()
        ref.close()


@pytest.mark.timeout(60)
def test_a_memoryview_of_a_lent_batch_holds_it_and_all_held_falls_back_to_copies():
    with vecenv.make(frame_fns(), backend="serial") as envs:
        envs.reset(seed=0)
        first = memoryview(envs.step(np.zeros(N, np.int64))[0]["frame"])  # only a view of a view
        before = np.asarray(first).copy()
        second, *_ = envs.step(np.zeros(N, np.int64))
        third, *_ = envs.step(np.zeros(N, np.int64))
        assert lent(second) and not lent(third)  # both lent slots held: a copy
        np.testing.assert_array_equal(np.asarray(first), before)
        del first, second
        assert lent(envs.step(np.zeros(N, np.int64))[0])


@pytest.mark.timeout(120)
def test_copy_false_and_async_batches_do_not_lend():
    with vecenv.make(frame_fns(), backend="serial", copy=False) as envs:
        envs.reset(seed=0)
        a = envs.step(np.zeros(N, np.int64))[0]["frame"]
        b = envs.step(np.zeros(N, np.int64))[0]["frame"]
        assert np.shares_memory(a, b)  # copy=False: one buffer, overwritten, as documented
    with vecenv.make(frame_fns(), backend="thread", num_workers=2, batch_size=4) as envs:
        obs, infos = envs.reset(seed=0)
        assert obs["frame"].flags.owndata
        envs.send(np.zeros(4, np.int64), env_ids=infos["env_id"])
        obs, *_ = envs.recv()
        assert obs["frame"].flags.owndata


def _run(monkeypatch, lend: bool, kill: bool, **kwargs) -> list:
    monkeypatch.setattr(slots, "LEND_MIN_BYTES", 0 if lend else 1 << 60)
    out, restarted = [], 0
    with vecenv.make(frame_fns(**kwargs), backend="process", num_workers=2, on_error="restart") as envs:
        obs, _ = envs.reset(seed=0)
        held = obs  # the user holds each batch while the next one is stepped
        for t in range(12):
            if kill and t == 5:
                victim = envs.processes[1]
                victim.kill()  # SIGKILL; TerminateProcess on Windows
                victim.join(5)
            obs, rew, term, trunc, infos = envs.step(np.ones(N, np.int64))
            out.append(({k: v.copy() for k, v in obs.items()}, rew, term, trunc))
            restarted += int(np.sum(infos.get("_restarted", 0)))
            assert held is not obs
            held = obs
    assert restarted > 0
    return out


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", ["env raises", "worker killed"])
def test_restarts_return_the_same_observations_lent_or_copied(monkeypatch, case):
    kwargs = {"fail_env": 5, "fail_at": 4} if case == "env raises" else {}
    kill = case == "worker killed"
    plain, lending = _run(monkeypatch, False, kill, **kwargs), _run(monkeypatch, True, kill, **kwargs)
    for t, (a, b) in enumerate(zip(plain, lending, strict=True)):
        for x, y in zip(a[1:], b[1:], strict=True):
            np.testing.assert_array_equal(x, y, err_msg=f"step {t}")
        np.testing.assert_array_equal(a[0]["frame"], b[0]["frame"], err_msg=f"step {t}")
        np.testing.assert_array_equal(a[0]["t"], b[0]["t"], err_msg=f"step {t}")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_lent_batches_match_gymnasium_with_every_start_method(context):
    if context not in __import__("multiprocessing").get_all_start_methods():
        pytest.skip(f"no {context} start method here")
    ref = gym.vector.SyncVectorEnv(frame_fns())
    kept, lent_before_keeping = [], []
    with vecenv.make(frame_fns(), backend="process", num_workers=2, context=context) as envs:
        envs.reset(seed=0)
        ref.reset(seed=0)
        for t in range(12):
            actions = np.full(N, t % 3)
            obs, *_ = envs.step(actions)
            want, *_ = ref.step(actions)
            np.testing.assert_array_equal(obs["frame"], want["frame"])
            if t < 2:
                lent_before_keeping.append(lent(obs))
            if t in (2, 5):  # two kept batches hold both lent slots: later ones are copies
                kept.append((obs, want["frame"].copy()))
    ref.close()
    assert all(lent_before_keeping)
    for got, want in kept:
        np.testing.assert_array_equal(got["frame"], want)
