"""vecenv.Collector against a plain synchronous loop on gymnasium's SyncVectorEnv over the same
seeds: sync and async vector envs, serial/thread/process backends, the three autoreset modes,
envs of uneven cost; and recv()'s smaller last batches that the collector relies on."""

from __future__ import annotations

import random
import sys
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import vecenv
from vecenv.errors import NoAsyncCallError

N, T, ROLLOUTS, SEED = 4, 24, 3, 7
MODES = {"next_step": AutoresetMode.NEXT_STEP, "same_step": AutoresetMode.SAME_STEP,
         "disabled": AutoresetMode.DISABLED}


class Counted(gym.Wrapper):
    """Reports its episode's step count in the infos; with ``uneven``, sleeps a random 0-2 ms per step
    (from a generator of its own, so the trajectory does not depend on it)."""

    def __init__(self, env: gym.Env, uneven: bool = False) -> None:
        super().__init__(env)
        self.uneven, self.count, self.sleeper = uneven, 0, random.Random()

    def reset(self, **kwargs):
        self.count = 0
        return self.env.reset(**kwargs)

    def step(self, action):
        if self.uneven:
            time.sleep(self.sleeper.uniform(0.0, 0.002))
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.count += 1
        return obs, reward, terminated, truncated, {**info, "count": self.count}


def make_env(uneven: bool = False) -> gym.Env:
    # short time limit: episodes end by termination and by truncation within a rollout
    return Counted(gym.make("CartPole-v1", max_episode_steps=15), uneven)


def make_uneven() -> gym.Env:
    return make_env(True)


def policy(obs, env_ids):
    """Deterministic, a function of each observation only (so any batching gives the same actions)."""
    actions = (np.floor(np.abs(obs[:, 1]) * 1e4) % 2).astype(np.int64)
    return actions, {"value": obs[:, 0] * 2.0}


def reference(mode: AutoresetMode, rollouts: int = ROLLOUTS, steps: int = T) -> list[dict]:
    """What a plain loop over gymnasium's SyncVectorEnv records (DISABLED: reset before the next step)."""
    envs = gym.vector.SyncVectorEnv([make_env] * N, autoreset_mode=mode)
    obs, _ = envs.reset(seed=SEED)
    needs = np.zeros(N, dtype=bool)
    out = []
    for _ in range(rollouts):
        rec: dict = {k: [] for k in ("observations", "actions", "rewards", "terminations", "truncations",
                                      "value", "infos")}
        for _ in range(steps):
            if mode is AutoresetMode.DISABLED and needs.any():
                obs, _ = envs.reset(options={"reset_mask": needs})
            rec["observations"].append(obs.copy())
            actions, extras = policy(obs, np.arange(N))
            rec["actions"].append(actions)
            rec["value"].append(extras["value"])
            obs, rewards, terms, truncs, infos = envs.step(actions)
            for k, v in (("rewards", rewards), ("terminations", terms), ("truncations", truncs), ("infos", infos)):
                rec[k].append(v)
            needs = terms | truncs
        out.append({**{k: np.stack(v) for k, v in rec.items() if k != "infos"}, "infos": rec["infos"],
                    "next_observations": obs.copy()})
    envs.close()
    return out


def check(rollout: vecenv.Rollout, ref: dict, mode: AutoresetMode) -> None:
    np.testing.assert_array_equal(rollout.observations, ref["observations"])
    np.testing.assert_array_equal(rollout.actions, ref["actions"])
    np.testing.assert_array_equal(rollout.rewards, ref["rewards"].astype(np.float32))
    np.testing.assert_array_equal(rollout.terminations, ref["terminations"])
    np.testing.assert_array_equal(rollout.truncations, ref["truncations"])
    np.testing.assert_array_equal(rollout.extras["value"], ref["value"])
    np.testing.assert_array_equal(rollout.next_observations, ref["next_observations"])
    for t, (got, want) in enumerate(zip(rollout.infos, ref["infos"], strict=True)):
        mask = want.get("_count", np.zeros(N, bool))
        np.testing.assert_array_equal(got.get("_count", np.zeros(N, bool)), mask, err_msg=f"step {t}")
        np.testing.assert_array_equal(np.asarray(got["count"])[mask] if mask.any() else [],
                                      want["count"][mask] if mask.any() else [], err_msg=f"step {t}")
        if mode is AutoresetMode.SAME_STEP and "_final_obs" in want:
            ended = want["_final_obs"]
            np.testing.assert_array_equal(got["_final_obs"], ended)
            for i in np.flatnonzero(ended):
                np.testing.assert_array_equal(got["final_obs"][i], want["final_obs"][i])


_REFS: dict = {}


def cached_reference(mode: AutoresetMode) -> list[dict]:
    if mode not in _REFS:
        _REFS[mode] = reference(mode)
    return _REFS[mode]


LAYOUTS = {
    "serial": ("serial", {}),
    "thread": ("thread", {"num_workers": 2}),
    "process": ("process", {"num_workers": 2}),
    "process-per-env": ("process", {"num_workers": N}),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("batch_size", [None, 2], ids=["sync", "async"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("mode", sorted(MODES))
def test_collect_equals_a_synchronous_loop(mode, layout, batch_size):
    backend, kwargs = LAYOUTS[layout]
    if batch_size is None and layout == "process-per-env":
        pytest.skip("same as process for whole batches")
    with vecenv.make(make_env, N, backend=backend, autoreset_mode=mode, batch_size=batch_size, **kwargs) as envs:
        collector = vecenv.Collector(envs, policy, steps=T, seed=SEED)
        for ref in cached_reference(MODES[mode]):
            check(collector.collect(), ref, MODES[mode])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", ["thread", "process"])
@pytest.mark.parametrize("mode", sorted(MODES))
def test_uneven_envs_in_async_batches(mode, backend):
    """Envs that take a random 0-2 ms per step come back in any order; the rows do not change."""
    with vecenv.make(make_uneven, N, backend=backend, num_workers=N, autoreset_mode=mode, batch_size=2) as envs:
        collector = vecenv.Collector(envs, policy, steps=T, seed=SEED)
        for ref in cached_reference(MODES[mode])[:2]:
            check(collector.collect(), ref, MODES[mode])


def test_gymnasium_vector_envs_work_too():
    envs = gym.vector.SyncVectorEnv([make_env] * N)
    collector = vecenv.Collector(envs, policy, steps=T, seed=SEED)
    for ref in cached_reference(AutoresetMode.NEXT_STEP):
        check(collector.collect(), ref, AutoresetMode.NEXT_STEP)
    envs.close()


def episodes_of(ref_rollouts: list[dict], mode: AutoresetMode) -> list[tuple[int, float, int]]:
    """(env, return, length) of every episode that ended, from the reference's rows."""
    ret, length, after = np.zeros(N), np.zeros(N, int), np.zeros(N, bool)
    found = []
    for ref in ref_rollouts:
        for t in range(len(ref["rewards"])):
            for i in range(N):
                if mode is AutoresetMode.NEXT_STEP and after[i]:
                    after[i] = False
                    continue
                ret[i] += ref["rewards"][t, i]
                length[i] += 1
                if ref["terminations"][t, i] or ref["truncations"][t, i]:
                    found.append((i, ret[i], length[i]))
                    ret[i], length[i], after[i] = 0.0, 0, True
    return found


@pytest.mark.parametrize("mode", sorted(MODES))
def test_episode_returns_and_lengths(mode):
    with vecenv.make(make_env, N, backend="serial", autoreset_mode=mode, batch_size=2) as envs:
        collector = vecenv.Collector(envs, policy, steps=T, seed=SEED)
        got = []
        for _ in range(ROLLOUTS):
            r = collector.collect()
            got += list(zip(r.episode_env_ids.tolist(), r.episode_returns.tolist(), r.episode_lengths.tolist(),
                            strict=True))
    want = episodes_of(cached_reference(MODES[mode]), MODES[mode])
    assert sorted(got) == sorted((i, float(r), int(n)) for i, r, n in want)
    assert len(got) > N  # episodes ended, and some spanned two rollouts (15-step limit, 24-step rollouts)
    assert all(1 <= n <= 15 for _, _, n in got)


def test_policy_called_once_per_batch_and_buffers_reused():
    calls = []

    def counting(obs, ids):
        calls.append(len(ids))
        return policy(obs, ids)

    with vecenv.make(make_env, N, backend="serial", batch_size=2) as envs:
        collector = vecenv.Collector(envs, counting, steps=T, seed=SEED)
        first = collector.collect()
        kept = first.copy()
        assert sum(calls) == N * T and max(calls) <= 2
        second = collector.collect()
        assert second.observations is first.observations  # the same buffers, overwritten
        assert not np.array_equal(kept.observations, second.observations)
        np.testing.assert_array_equal(kept.observations[0], cached_reference(AutoresetMode.NEXT_STEP)[0]["observations"][0])


def test_bad_policy_output_is_refused_before_sending():
    cases = [
        (lambda obs, ids: np.zeros(3, np.int64), ValueError, r"returned 3 actions for a batch of 2 observations"),
        (lambda obs, ids: (np.zeros(len(ids), np.int64), [1]), TypeError, "extras must be a dict"),
        (lambda obs, ids: (np.zeros(len(ids), np.int64), {"v": np.zeros(1)}), ValueError, r"extras\['v'\] has shape"),
    ]
    for bad, error, match in cases:
        with vecenv.make(make_env, N, backend="serial", batch_size=2) as envs:
            with pytest.raises(error, match=match):
                vecenv.Collector(envs, bad).collect()
    with pytest.raises(ValueError, match="steps"):
        vecenv.Collector(gym.vector.SyncVectorEnv([make_env]), policy, steps=0)
    with pytest.raises(TypeError, match="policy must be callable"):
        vecenv.Collector(gym.vector.SyncVectorEnv([make_env]), None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="gymnasium vector env"):
        vecenv.Collector(make_env(), policy)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("backend", ["serial", "process"])
def test_a_collect_cut_short_makes_the_next_one_reset(backend):
    calls = []

    def flaky(obs, ids):
        calls.append(1)
        if len(calls) == 7:
            raise RuntimeError("policy failed")
        return policy(obs, ids)

    workers = {} if backend == "serial" else {"num_workers": 2}
    with vecenv.make(make_env, N, backend=backend, batch_size=2, **workers) as envs:
        collector = vecenv.Collector(envs, flaky, steps=T, seed=SEED)
        with pytest.raises(RuntimeError, match="policy failed"):
            collector.collect()
        check(collector.collect(), cached_reference(AutoresetMode.NEXT_STEP)[0], AutoresetMode.NEXT_STEP)


def test_torch_device_cpu_returns_tensors():
    torch = pytest.importorskip("torch")
    with vecenv.make(make_env, N, backend="serial", batch_size=2) as envs:
        rollout = vecenv.Collector(envs, policy, steps=T, seed=SEED, device="cpu").collect()
    ref = cached_reference(AutoresetMode.NEXT_STEP)[0]
    assert isinstance(rollout.observations, torch.Tensor) and isinstance(rollout.extras["value"], torch.Tensor)
    np.testing.assert_array_equal(rollout.observations.numpy(), ref["observations"])
    np.testing.assert_array_equal(rollout.terminations.numpy(), ref["terminations"])
    assert rollout.copy().observations.data_ptr() != rollout.observations.data_ptr()


def test_a_bad_device_is_refused_clearly():
    torch = pytest.importorskip("torch")
    envs = gym.vector.SyncVectorEnv([make_env])
    with pytest.raises(ValueError, match="expected a torch device"):
        vecenv.Collector(envs, policy, device="nowhere")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            vecenv.Collector(envs, policy, device="cuda")
    envs.close()


def test_missing_torch_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ImportError, match=r"torch.*vecenv\[sb3\]"):
        vecenv.Collector(gym.vector.SyncVectorEnv([make_env]), policy, device="cpu")


@pytest.mark.timeout(60)
def test_pettingzoo_agents_as_rows():
    pytest.importorskip("pettingzoo")
    import vecenv.pettingzoo as vpz
    from pz_envs import DyingEnv

    def pz_policy(obs, ids):
        return (np.floor(obs[:, 1] * 1e4) % 3).astype(np.int64)

    with vpz.make(DyingEnv, 2, backend="serial") as envs:
        rollout = vecenv.Collector(envs, pz_policy, steps=10, seed=3).collect()
    with vpz.make(DyingEnv, 2, backend="serial") as envs:
        obs, _ = envs.reset(seed=3)
        for t in range(10):
            np.testing.assert_array_equal(rollout.observations[t], obs)
            obs, rewards, _, _, _ = envs.step(pz_policy(obs, None))
            np.testing.assert_array_equal(rollout.rewards[t], rewards.astype(np.float32))
        np.testing.assert_array_equal(rollout.next_observations, obs)
    assert rollout.observations.shape[1] == 6  # 2 games x 3 agents


# ---------------------------------------------------------------- the engine: smaller last batches
@pytest.mark.timeout(30)
@pytest.mark.parametrize("backend", ["serial", "process"])
def test_recv_returns_the_envs_outstanding_when_fewer_than_batch_size(backend):
    with vecenv.make(make_env, 4, backend=backend, batch_size=3) as envs:
        obs, infos = envs.reset(seed=0)
        assert len(infos["env_id"]) == 3
        _, _, _, _, infos = envs.recv()  # the one env of the reset still out
        assert len(infos["env_id"]) == 1
        envs.send(np.zeros(2, np.int64), [0, 1])  # two sent: a batch of two, not a wait for three
        _, rewards, _, _, infos = envs.recv()
        assert sorted(infos["env_id"].tolist()) == [0, 1] and rewards.shape == (2,)
        with pytest.raises(NoAsyncCallError):
            envs.recv()


@pytest.mark.timeout(30)
def test_reset_mask_with_async_batches():
    with vecenv.make(make_env, 4, backend="serial", batch_size=2, autoreset_mode="disabled") as envs:
        envs.reset(seed=0)
        envs.recv()
        mask = np.array([False, True, True, True])
        obs, infos = envs.reset(options={"reset_mask": mask})
        assert len(infos["env_id"]) == 2
        _, _, _, _, rest = envs.recv()
        assert sorted([*infos["env_id"].tolist(), *rest["env_id"].tolist()]) == [1, 2, 3]
