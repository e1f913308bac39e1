"""Spaces batch as gymnasium batches them, and exact float actions pass for integer leaves.

Item A (issue 22): a subclass of one of gymnasium's space classes batches as its base class (a
Dict subclass gives a dict of arrays, not a tuple of dicts), a type a user registered with
gymnasium's vector utilities batches through the user's functions, and only what gymnasium
treats as custom comes back as a tuple. Each is checked against gymnasium's SyncVectorEnv and
AsyncVectorEnv on vecenv's serial, thread and process backends, and vecenv.sb3's DummyVecEnv and
SubprocVecEnv against SB3's DummyVecEnv.

Item B: an action batch of floats whose values an integer leaf holds exactly is accepted (the
envs get the values cast to the leaf's dtype); lossy ones (0.5, 300.0 for uint8, NaN) are
refused with the message integer leaves always gave, before anything reaches a worker.
"""

from __future__ import annotations

import importlib.util
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array

import vecenv
import vecenv.sb3 as vsb3
from helpers import FAST_START, assert_same, make_backend
from vecenv.spaces import is_fixed_leaf
from vecenv.spaces.buffers import batching

BACKENDS = ["serial", "thread", "process"]
N = 3
HAS_SB3 = importlib.util.find_spec("stable_baselines3") is not None


class MyDict(spaces.Dict):
    """A Dict subclass, as SB3's ``test_vecenv_dict_spaces`` uses."""


class MyTuple(spaces.Tuple):
    pass


class MyBox(spaces.Box):
    pass


class MyDiscrete(spaces.Discrete):
    pass


class Pair(spaces.Space):
    """A space of its own that the tests register with gymnasium's vector utilities."""

    def __init__(self) -> None:
        super().__init__(None, None)

    def sample(self, mask: Any = None, probability: Any = None) -> tuple[int, int]:
        return (int(self.np_random.integers(10)), int(self.np_random.integers(10)))

    def contains(self, x: Any) -> bool:
        return isinstance(x, tuple) and len(x) == 2

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Pair)


class Plain(spaces.Space):
    """A space no gymnasium utility knows: batched as a tuple of items."""

    def __init__(self) -> None:
        super().__init__(None, None)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Plain)


@batch_space.register(Pair)
def _batch_pair(space: Pair, n: int = 1) -> spaces.Box:
    return spaces.Box(0, 9, (n, 2), np.int64)


@concatenate.register(Pair)
def _concatenate_pair(space: Pair, items: Any, out: np.ndarray) -> np.ndarray:
    for i, item in enumerate(items):
        out[i] = item
    return out


@create_empty_array.register(Pair)
def _empty_pair(space: Pair, n: int = 1, fn: Any = np.zeros) -> np.ndarray:
    return fn((n, 2), dtype=np.int64)


def dict_box_space() -> spaces.Space:
    return MyDict({"pos": MyBox(-1.0, 1.0, (3,), np.float32), "count": MyDiscrete(5)})


SPACES = {
    "dict_subclass": dict_box_space,
    "box_subclass": lambda: MyBox(0, 255, (2, 2), np.uint8),
    "tuple_subclass": lambda: MyTuple((MyBox(-1.0, 1.0, (2,), np.float64), spaces.Discrete(4))),
    "nested": lambda: spaces.Dict({"inner": dict_box_space(), "text": spaces.Text(4)}),
    "registered": Pair,
    "custom": Plain,
}


def _sample(space: spaces.Space, rng: np.random.Generator) -> Any:
    """An item of ``space`` drawn from the env's own generator (so seeds decide it)."""
    if isinstance(space, spaces.Dict):
        return {k: _sample(s, rng) for k, s in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_sample(s, rng) for s in space.spaces)
    if isinstance(space, spaces.Discrete):
        return np.int64(rng.integers(space.n))
    if isinstance(space, spaces.Box):
        return rng.uniform(space.low, space.high).astype(space.dtype)
    if isinstance(space, spaces.Text):
        return "".join(rng.choice(list("abcd"), size=int(rng.integers(1, 4))))
    if isinstance(space, Pair):
        return (int(rng.integers(10)), int(rng.integers(10)))
    return str(rng.integers(100))


class SpaceEnv(gym.Env):
    """Observations of the given space, drawn from the env's seeded generator; episodes end
    (truncated) after 3 steps, and the reward echoes the sum of the action it got."""

    def __init__(self, kind: str = "dict_subclass", action_space: spaces.Space | None = None) -> None:
        self.observation_space = SPACES[kind]()
        self.action_space = action_space if action_space is not None else MyBox(-1.0, 1.0, (2,), np.float32)
        self.t = 0
        self.actions: list[Any] = []

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.t = 0
        return _sample(self.observation_space, self.np_random), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.t += 1
        self.actions.append(action)
        reward = float(np.sum(action)) if isinstance(action, np.ndarray) else 0.0
        return _sample(self.observation_space, self.np_random), reward, False, self.t >= 3, {}


def rollout(envs: Any, steps: int = 5) -> list[Any]:
    """What a short rollout returns: reset, then ``steps`` steps of fixed actions."""
    out: list[Any] = [envs.reset(seed=7)]
    for t in range(steps):
        actions = np.full((N, 2), 0.25 * (t % 3), np.float32)
        out.append(envs.step(actions))
    return out


# ================================================================== A: how spaces batch
def test_batching_follows_gymnasium_dispatch():
    assert batching(MyDict({"a": spaces.Discrete(2)})) == "dict"
    assert batching(MyTuple((spaces.Discrete(2),))) == "tuple"
    assert batching(MyBox(0, 1, (2,))) == "fixed" and is_fixed_leaf(MyDiscrete(3))
    assert batching(spaces.Text(3)) == "custom" and batching(Plain()) == "custom"
    assert batching(Pair()) == "own" and not is_fixed_leaf(Pair())


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", list(SPACES))
@pytest.mark.parametrize("backend", BACKENDS)
def test_spaces_batch_as_gymnasium_sync_batches_them(backend, kind):
    fns = [partial(SpaceEnv, kind)] * N
    theirs = gym.vector.SyncVectorEnv(fns)
    try:
        ref = rollout(theirs)
    finally:
        theirs.close()
    with make_backend(backend, fns) as ours:
        assert ours.observation_space == theirs.observation_space
        assert_same(rollout(ours), ref)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["dict_subclass", "box_subclass", "tuple_subclass", "nested"])
@pytest.mark.parametrize("shared_memory", [True, False])
def test_spaces_batch_as_gymnasium_async_batches_them(kind, shared_memory):
    fns = [partial(SpaceEnv, kind)] * N
    if kind == "nested" and shared_memory:  # gymnasium's shared memory refuses Text in a Dict
        shared_memory = False
    theirs = gym.vector.AsyncVectorEnv(fns, shared_memory=shared_memory, context=FAST_START)
    try:
        ref = rollout(theirs)
    finally:
        theirs.close()
    with vecenv.AsyncVectorEnv(fns, shared_memory=shared_memory, context=FAST_START) as ours:
        assert_same(rollout(ours), ref)


def test_dict_subclass_gives_a_dict_of_arrays():
    with vecenv.SyncVectorEnv([SpaceEnv] * 2) as envs:
        obs, _ = envs.reset(seed=0)
    assert isinstance(obs, dict) and set(obs) == {"pos", "count"}
    assert obs["pos"].shape == (2, 3) and obs["pos"].dtype == np.float32
    assert obs["count"].shape == (2,) and obs["count"].dtype == np.int64


# ================================================================== A: through vecenv.sb3
def sb3_rollout(venv: Any, steps: int = 5) -> list[Any]:
    venv.seed(7)
    out: list[Any] = [venv.reset(), venv.reset_infos]
    for t in range(steps):
        out.append(venv.step(np.full((N, 2), 0.25 * (t % 3), np.float32)))
    return out


@pytest.mark.skipif(not HAS_SB3, reason="stable_baselines3 is not installed")
@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["dict_subclass", "box_subclass", "tuple_subclass"])
@pytest.mark.parametrize("cls", ["DummyVecEnv", "SubprocVecEnv"])
def test_sb3_vec_envs_give_what_sb3_dummy_gives(cls, kind):
    from stable_baselines3.common.vec_env import DummyVecEnv

    fns = [partial(SpaceEnv, kind)] * N
    theirs = DummyVecEnv(fns)
    try:
        ref = sb3_rollout(theirs)
    finally:
        theirs.close()
    ours = vsb3.DummyVecEnv(fns) if cls == "DummyVecEnv" else vsb3.SubprocVecEnv(fns, start_method="fork")
    try:
        assert ours.observation_space == theirs.observation_space
        assert_same(sb3_rollout(ours), ref)
    finally:
        ours.close()


# ================================================================== B: exact float actions
class EchoEnv(gym.Env):
    """Observes the action it got last (stored as the leaf's dtype) and the action's type."""

    def __init__(self, action_space: spaces.Space) -> None:
        self.action_space = action_space
        self.observation_space = spaces.Box(-1000, 1000, (int(np.prod(action_space.shape)) or 1,), np.float64)
        self.received: list[Any] = []

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        return np.zeros(self.observation_space.shape), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        assert self.action_space.contains(action), f"an env got {action!r}"
        value = np.asarray(action, np.float64).reshape(self.observation_space.shape)
        return value, float(value.sum()), False, False, {"dtype": str(np.asarray(action).dtype)}


INT_SPACES = {
    "discrete": (spaces.Discrete(4), np.array([3, 0, 2])),
    "multidiscrete": (spaces.MultiDiscrete([3, 5]), np.array([[2, 4], [0, 1], [1, 0]])),
    "multibinary": (spaces.MultiBinary(3), np.array([[1, 0, 1], [0, 0, 0], [1, 1, 1]], np.int8)),
    "uint8_box": (spaces.Box(0, 255, (2, 2), np.uint8), np.array([[[255, 0], [7, 1]]] * 3, np.uint8)),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", list(INT_SPACES))
@pytest.mark.parametrize("backend", BACKENDS)
def test_exact_float_actions_step_as_the_integer_actions(backend, name):
    space, actions = INT_SPACES[name]
    with make_backend(backend, [partial(EchoEnv, space)] * N) as envs:
        envs.reset(seed=0)
        expected = envs.step(actions)
        for floats in (actions.astype(np.float64), actions.astype(np.float32), actions.astype(float).tolist()):
            envs.reset(seed=0)
            assert_same(envs.step(floats), expected)
            assert envs.step(floats)[4]["dtype"].tolist() == [str(space.dtype)] * N


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
def test_lossy_float_actions_are_refused_before_any_env_steps(backend):
    cases = [
        (spaces.Discrete(4), np.array([0.5, 1.0, 2.0]), r"expected integer values for Discrete\(4\) \(dtype int64\), got dtype float64$"),
        (spaces.Discrete(4), np.array([np.nan, 1.0, 2.0]), r"expected integer values .*got dtype float64$"),
        (spaces.Discrete(4), np.array([np.inf, 1.0, 2.0]), r"expected integer values .*got dtype float64$"),
        (spaces.Box(0, 255, (2,), np.uint8), np.full((3, 2), 300.0), r"expected integer values for Box\(0, 255, \(2,\), uint8\) \(dtype uint8\), got dtype float64$"),
        (spaces.Box(0, 255, (2,), np.uint8), np.full((3, 2), -1.0), r"expected integer values .*\(dtype uint8\), got dtype float64$"),
        (spaces.MultiBinary(2), np.full((3, 2), 0.5), r"expected integer values for MultiBinary\(2\)"),
    ]
    for space, actions, pattern in cases:
        with make_backend(backend, [partial(EchoEnv, space)] * N) as envs:
            first, _ = envs.reset(seed=0)
            with pytest.raises(TypeError, match=r"^actions: " + pattern):
                envs.step(actions)
            good = np.zeros(actions.shape, space.dtype)
            obs = envs.step(good)[0]  # the refused batch reached no env: they step on as if never sent
            assert_same(obs, np.zeros_like(first))
    with make_backend(backend, [partial(EchoEnv, spaces.Box(0, 255, (2,), np.uint8))] * N) as envs:
        envs.reset(seed=0)
        with pytest.raises(ValueError, match=r"value 300 does not fit .*uint8 \(0\.\.255\)"):
            envs.step(np.full((3, 2), 300))


def test_exact_float_actions_in_a_dict_and_the_sb3_api():
    space = spaces.Dict({
        "move": spaces.Discrete(3),
        "image": spaces.Box(0, 255, (2, 2, 1), np.uint8),
        "aim": spaces.Box(-1.0, 1.0, (2,), np.float32),
    })
    image = np.zeros((2, 2, 1), np.uint8)
    with vecenv.SyncVectorEnv([partial(SpaceEnv, "box_subclass", space)] * 2) as envs:
        envs.reset(seed=0)
        envs.step({"move": np.array([2.0, 1.0]), "image": np.zeros((2, 2, 2, 1)), "aim": np.zeros((2, 2), np.float32)})
        got = [actions[-1] for actions in envs.get_attr("actions")]
        assert_same(got[1], {"move": np.int64(1), "image": image, "aim": np.zeros(2, np.float32)})
        # a float64 batch for the float32 leaf reaches the envs as float64 (as gymnasium hands
        # it), while the exactly cast leaves still reach them as integers
        envs.step({"move": [2.0, 0.0], "image": np.zeros((2, 2, 2, 1)), "aim": np.zeros((2, 2))})
        got = [actions[-1] for actions in envs.get_attr("actions")]
        assert_same(got[1], {"move": np.int64(0), "image": image, "aim": np.zeros(2)})
    image = spaces.Box(0, 255, (4, 4, 1), np.uint8)  # SB3's test_framestack_vecenv steps with float64 zeros
    venv = vsb3.DummyVecEnv([partial(EchoEnv, image)] * 2)
    try:
        venv.reset()
        obs, rewards, _, infos = venv.step(np.zeros((2, *image.shape)))
        assert rewards.tolist() == [0.0, 0.0] and infos[0]["dtype"] == "uint8"
        with pytest.raises(TypeError, match=r"expected integer values"):
            venv.step(np.full((2, *image.shape), 0.5))
    finally:
        venv.close()
