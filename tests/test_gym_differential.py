"""Differential tests: the same script on gymnasium's vector env and on vecenv's drop-in.

Each script records what every call returned or raised; the two records must agree: the same
values (type, dtype and all), the same exception classes (vecenv may raise a subclass), and,
where gymnasium's wording is part of the contract (argument checks, space checks, calls out of
order, warnings, logged errors), vecenv's message opens with gymnasium's. One part runs
gymnasium's ``SyncVectorEnv`` against vecenv's serial, thread and process backends, the other
gymnasium's ``AsyncVectorEnv`` against ``vecenv.AsyncVectorEnv`` (and the backends' async API).
"""

from __future__ import annotations

import copy
import gc
import inspect
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.error import (
    AlreadyPendingCallError,
    CustomSpaceError,
    NoAsyncCallError,
)
from gymnasium.vector import AutoresetMode

import vecenv
from helpers import FAST_START, assert_same

pytestmark = pytest.mark.timeout(120)

BACKENDS = ["serial", "thread", "process"]
#: gymnasium before 1.3 (RLlib pins 1.2.2) checks input with assert where newer ones raise
#: TypeError / ValueError, and its AsyncVectorEnv has no max_concurrency
OLD_ASSERTS = "max_concurrency" not in inspect.signature(gym.vector.AsyncVectorEnv).parameters
needs_max_concurrency = pytest.mark.skipif(
    OLD_ASSERTS, reason=f"gymnasium {gym.__version__}'s AsyncVectorEnv has no max_concurrency (1.3+)")
N = 3  # envs per vector env


# ==================================================================== the env
class Probe(gym.Env):
    """Reports in its info how each action reached it (type, dtype, repr); episodes of ``episode``
    steps; optionally sleeps for its action (``time.sleep(action)``), fails at a step, or takes
    ``delay`` seconds a step (recording when it ran)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(
        self,
        index: int = 0,
        action_space: spaces.Space | None = None,
        observation_space: spaces.Space | None = None,
        episode: int = 3,
        sleep_action: bool = False,
        fail_at: int | None = None,
        delay: float = 0.0,
        render_mode: str | None = None,
    ) -> None:
        self.index = index
        self.action_space = action_space if action_space is not None else spaces.Discrete(3)
        self.observation_space = (
            observation_space if observation_space is not None else spaces.Box(-100, 100, (2,), np.float32)
        )
        self.episode = episode
        self.sleep_action = sleep_action
        self.fail_at = fail_at
        self.delay = delay
        self.render_mode = render_mode
        self.label = f"probe-{index}"
        self.t = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.index, self.t], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        info = {"draw": float(self.np_random.random()), "option": (options or {}).get("k", 0)}
        return self._obs(), info

    def step(self, action: Any):
        started = time.monotonic()
        if self.delay:
            time.sleep(self.delay)
        if self.sleep_action:
            time.sleep(action)  # a TypeError for a numpy.float32, as for any non-float
        if self.fail_at is not None and self.t == self.fail_at:
            raise ValueError(f"probe {self.index} fails at step {self.t}")
        self.t += 1
        info = {
            "type": type(action).__name__,
            "dtype": str(getattr(action, "dtype", "-")),
            "repr": repr(action),
            "started": started,
            "ended": time.monotonic(),
        }
        terminated = self.t % self.episode == 0
        return self._obs(), float(self.t + self.index), terminated, False, info

    def scaled(self, factor: int, offset: int = 0) -> int:
        return self.index * factor + offset

    def render(self) -> np.ndarray:
        return np.full((2, 2, 3), self.t + 10 * self.index, dtype=np.uint8)


def probes(n: int = N, **kwargs: Any) -> list[Callable[[], Probe]]:
    return [partial(Probe, i, **kwargs) for i in range(n)]


TIMES = ("started", "ended")  # wall-clock info keys: compared for presence only


# ==================================================================== recording and comparing
@dataclass
class Outcome:
    """What one call gave: a value or an exception; ``wording``: vecenv's message must open with
    gymnasium's."""

    value: Any = None
    error: BaseException | None = None
    wording: bool = False


def _untraced(exc: BaseException) -> BaseException:
    """``exc`` without tracebacks (so a half-built vector env is not kept alive by them)."""
    seen = exc
    while seen is not None:
        seen.__traceback__ = None
        seen = seen.__context__
    return exc


def attempt(fn: Callable[[], Any], wording: bool = False) -> Outcome:
    """Run ``fn``; its value is deep-copied (with ``copy=False`` it may be a view of memory that
    the next call, or ``close``, reuses)."""
    try:
        return Outcome(copy.deepcopy(fn()), None, wording)
    except Exception as exc:
        return Outcome(None, _untraced(exc), wording)


def compare(ref: list[Outcome], ours: list[Outcome], rename: tuple[str, str] | None = None) -> None:
    """Every outcome of vecenv's run against gymnasium's, in order."""
    assert len(ours) == len(ref)
    for i, (r, o) in enumerate(zip(ref, ours, strict=True)):
        if r.error is None:
            assert o.error is None, f"call {i}: gymnasium returned {r.value!r:.200}, vecenv raised {o.error!r}"
            assert_same(o.value, r.value, f"call {i}", ignore=TIMES)
            continue
        assert o.error is not None, f"call {i}: gymnasium raised {r.error!r}, vecenv returned {o.value!r:.200}"
        if type(r.error) is AssertionError and OLD_ASSERTS and isinstance(o.error, (TypeError, ValueError)):
            continue  # gymnasium before 1.3 checked these inputs with assert; vecenv raises as 1.3+ does
        assert isinstance(o.error, type(r.error)), f"call {i}: gymnasium raised {r.error!r}, vecenv {o.error!r}"
        if r.wording:
            said = str(o.error) if rename is None else str(o.error).replace(*rename)
            assert said.startswith(str(r.error)), f"call {i}: {said!r} does not open with {str(r.error)!r}"


def closing_after(make: Callable[..., Any], script: Callable[[Any], list[Outcome]], *args: Any,
                  **kwargs: Any) -> list[Outcome]:
    """``script(envs)`` on ``make(*args, **kwargs)``, closing the vector env whatever happens."""
    envs = make(*args, **kwargs)
    try:
        return script(envs)
    finally:
        envs.close()


def built(make: Callable[..., Any], *args: Any, wording: bool = True, **kwargs: Any) -> Outcome:
    """Build a vector env (closing it again at once); the outcome is its spaces and settings."""
    def build():
        envs = make(*args, **kwargs)
        try:
            return (envs.num_envs, str(envs.single_observation_space), str(envs.observation_space),
                    str(envs.single_action_space), str(envs.action_space), envs.metadata, envs.render_mode)
        finally:
            envs.close()

    out = attempt(build, wording)
    gc.collect()  # a vector env whose constructor raised ends its workers when collected
    return out


def vec_sync(backend: str) -> Callable[..., Any]:
    """vecenv's stand-in for gymnasium's SyncVectorEnv on ``backend``."""
    return {
        "serial": vecenv.SyncVectorEnv,
        "thread": partial(vecenv.ThreadVectorEnv, num_workers=2),
        "process": partial(vecenv.ProcessVectorEnv, num_workers=2, context=FAST_START),
    }[backend]


def vec_name(backend: str) -> str:
    return {"serial": "SyncVectorEnv", "thread": "ThreadVectorEnv", "process": "ProcessVectorEnv"}[backend]


def run_sync(backend: str, script: Callable[..., list[Outcome]], *args: Any, **kwargs: Any) -> None:
    """``script(make, ...)`` with gymnasium's SyncVectorEnv, then with vecenv's on ``backend``."""
    ref = script(gym.vector.SyncVectorEnv, *args, **kwargs)
    ours = script(vec_sync(backend), *args, **kwargs)
    compare(ref, ours, rename=(vec_name(backend), "SyncVectorEnv"))


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


# ==================================================================== SyncVectorEnv
def test_constructor_arguments_and_attributes(backend):
    def script(make):
        out = []
        for kwargs in ({}, {"copy": False, "observation_mode": "same", "autoreset_mode": "SameStep"},
                       {"autoreset_mode": AutoresetMode.DISABLED}):
            def attrs(kwargs=kwargs):
                envs = make(probes(), **kwargs)
                try:
                    return (envs.num_envs, envs.copy, envs.autoreset_mode, envs.observation_mode,
                            envs.metadata, envs.render_mode, envs.single_observation_space,
                            envs.observation_space, envs.single_action_space, envs.action_space,
                            repr(envs).replace(type(envs).__name__, "SyncVectorEnv"), envs.closed)
                finally:
                    envs.close()
            out.append(attempt(attrs))
        return out

    run_sync(backend, script)
    # gymnasium's positional order: env_fns, copy, observation_mode, autoreset_mode
    with vecenv.SyncVectorEnv(probes(2), False, "same", "SameStep") as envs:
        assert (envs.copy, envs.observation_mode, envs.autoreset_mode) == (False, "same", AutoresetMode.SAME_STEP)
        assert repr(envs) == repr(gym.vector.SyncVectorEnv(probes(2))) == "SyncVectorEnv(num_envs=2)"


def test_observation_mode_and_autoreset_mode_checks(backend):
    box = spaces.Box(-100, 100, (2,), np.float32)
    wider = spaces.Box(-200, 200, (2,), np.float32)
    differing = [partial(Probe, 0), partial(Probe, 1, observation_space=wider)]

    def script(make):
        return [
            built(make, differing, observation_mode="different"),
            built(make, probes(2), observation_mode=(spaces.Box(-100, 100, (2, 2), np.float32), box)),
            built(make, probes(2), observation_mode="similar"),
            built(make, probes(2), observation_mode=("same",)),
            built(make, probes(2), observation_mode=(box, box, box)),
            built(make, probes(2), observation_mode=(box, "same")),
            built(make, probes(2), observation_mode=5),
            built(make, probes(2), autoreset_mode="sometimes"),
            built(make, probes(2), autoreset_mode="NextStep"),
        ]

    run_sync(backend, script)


def test_sub_environments_whose_spaces_differ(backend):
    other_obs = partial(Probe, 1, observation_space=spaces.Box(-100, 100, (3,), np.float32))
    other_bounds = partial(Probe, 1, observation_space=spaces.Box(-1, 1, (2,), np.float32))
    other_act = partial(Probe, 2, action_space=spaces.Discrete(4))
    custom = (spaces.Box(-1, 1, (2, 3), np.float32), spaces.Box(-1, 1, (3,), np.float32))

    def script(make):
        return [
            built(make, [partial(Probe, 0), other_bounds]),  # 'same': the spaces must be equal
            built(make, [partial(Probe, 0), partial(Probe, 1), other_act]),
            built(make, [partial(Probe, 0), other_obs], observation_mode="different"),  # batching fails
            built(make, probes(2), observation_mode=custom),  # the envs' shape is not the custom one
            built(make, [partial(Probe, 0), other_bounds], observation_mode="different"),
        ]

    run_sync(backend, script)


BOX = spaces.Box(-1, 1, (2,), np.float32)
SCALAR_BOX = spaces.Box(0, 0.01, (), np.float32)
DICT = spaces.Dict({"move": spaces.Discrete(3), "aim": BOX})
TUPLE = spaces.Tuple((spaces.Discrete(3), spaces.MultiBinary(2)))

#: (action space, a batch of N actions as a user may pass it)
ACTION_BATCHES = [
    (spaces.Discrete(3), np.array([0, 1, 2])),  # the space's dtype: the common path
    (spaces.Discrete(3), [0, 1, 2]),  # Python ints reach the envs as Python ints
    (spaces.Discrete(3), (2, 1, 0)),
    (spaces.Discrete(3), np.array([0, 1, 2], dtype=np.int32)),
    (spaces.Discrete(3), np.array([0, 1, 2], dtype=np.uint8)),
    (BOX, np.zeros((N, 2), np.float32)),
    (BOX, np.full((N, 2), 0.5)),  # float64 for a float32 Box: float64 rows
    (BOX, [[0.1, 0.2]] * N),  # lists stay lists
    (BOX, np.full((N, 2), 0.5)[:, ::-1]),  # a strided float64 view
    (SCALAR_BOX, np.full(N, 0.001)),  # numpy.float64 scalars
    (SCALAR_BOX, np.full(N, 0.001, np.float32)),
    (spaces.MultiDiscrete([2, 3]), np.array([[1, 2]] * N)),
    (spaces.MultiDiscrete([2, 3]), [[1, 2]] * N),
    (spaces.MultiBinary(2), np.ones((N, 2), np.int8)),
    (spaces.MultiBinary(2), np.ones((N, 2), np.int64)),
    (spaces.MultiBinary(2), [[0, 1]] * N),
    (DICT, {"move": np.array([0, 1, 2]), "aim": np.zeros((N, 2), np.float32)}),  # exact
    (DICT, {"move": [0, 1, 2], "aim": np.zeros((N, 2), np.float32)}),  # one leaf as a list
    (DICT, {"aim": np.ones((N, 2)), "move": np.array([2, 1, 0])}),  # float64 leaf, other key order
    (TUPLE, (np.array([0, 1, 2]), np.ones((N, 2), np.int8))),
    (TUPLE, [np.array([0, 1, 2]), np.ones((N, 2), np.int8)]),
    (TUPLE, ([0, 1, 2], np.ones((N, 2), np.int8))),
    (spaces.Text(4), ("a", "bc", "def")),
    (spaces.Text(4), ["a", "bc", "def"]),
]


def _step_script(make, space: spaces.Space, batches: list[Any], **kwargs: Any) -> list[Outcome]:
    def script(envs):
        out = [attempt(lambda: envs.reset(seed=1))]
        for batch in batches:
            out.append(attempt(lambda batch=batch: envs.step(batch)))
        return out

    return closing_after(make, script, probes(action_space=space), **kwargs)


@pytest.mark.parametrize("space, batch", ACTION_BATCHES, ids=lambda v: type(v).__name__)
def test_envs_receive_actions_as_gymnasium_iterates_them(backend, space, batch):
    """The envs get what ``iterate(action_space, actions)`` yields, whatever the batch's dtype
    or container; an exact batch after one that was not reaches them from the buffer again."""
    run_sync(backend, _step_script, space, [batch, batch])
    exact = isinstance(batch, np.ndarray) and batch.dtype == space.dtype
    if not exact and isinstance(space, (spaces.Discrete, spaces.Box)):
        typed = np.asarray(batch, dtype=space.dtype)
        run_sync(backend, _step_script, space, [batch, typed, batch, typed])


def test_an_env_that_sleeps_for_its_action(backend):
    """The issue's example: ``time.sleep(action)`` works with a float64 batch for a float32 Box,
    as in gymnasium; a float32 batch does whatever ``time.sleep(numpy.float32)`` does on this
    interpreter, as in gymnasium (before 3.15 it refuses: numpy.float32 is not a float)."""
    def script(make):
        def steps(envs):
            return [attempt(lambda: envs.reset(seed=0)),
                    attempt(lambda: envs.step(np.full(N, 0.001))),
                    attempt(lambda: envs.step(np.full(N, 0.001).tolist())),
                    attempt(lambda: envs.step(np.full(N, 0.001, np.float32)))]
        return closing_after(make, steps, probes(action_space=SCALAR_BOX, sleep_action=True))

    run_sync(backend, script)
    try:
        time.sleep(np.float32(0.0))
    except TypeError:
        with vecenv.make(probes(action_space=SCALAR_BOX, sleep_action=True), backend=backend) as envs:
            envs.reset(seed=0)
            with pytest.raises(TypeError, match="float32"):  # the env's own error, as in gymnasium
                envs.step(np.full(N, 0.001, np.float32))


#: (action space, a batch that does not fit, wording: vecenv's message opens with gymnasium's)
BAD_BATCHES = [
    (spaces.Discrete(3), np.array([0, 1]), False),  # too few: ValueError
    (spaces.Discrete(3), [0, 1, 2, 0], False),  # too many: ValueError
    (spaces.Discrete(3), 1, True),  # a scalar: TypeError, "Unable to iterate over ..."
    (spaces.Discrete(3), np.int64(1), True),
    (spaces.Discrete(3), np.array(1), True),
    (BOX, 0.5, True),
    (BOX, np.zeros((N + 1, 2), np.float32), False),
    (DICT, {"move": np.array([0, 1, 2])}, False),  # a missing key: KeyError
    (DICT, {"move": np.array([0, 1]), "aim": np.zeros((2, 2))}, False),  # too few: ValueError
    (DICT, 3, False),  # not a dict: TypeError
    (TUPLE, (np.array([0, 1, 2]),), False),  # too few parts: IndexError
    (TUPLE, (np.array([0, 1]), np.ones((2, 2), np.int8)), False),
    (TUPLE, 3, False),  # TypeError
    (spaces.Text(4), ("a", "b"), False),  # ValueError
    (spaces.Text(4), 7, False),  # not iterable: CustomSpaceError
]


@pytest.mark.parametrize("space, batch, wording", BAD_BATCHES, ids=lambda v: type(v).__name__)
def test_batches_that_do_not_fit_raise_gymnasium_s_exceptions(backend, space, batch, wording):
    def script(make):
        def steps(envs):
            return [attempt(lambda: envs.reset(seed=0)), attempt(lambda: envs.step(batch), wording)]
        return closing_after(make, steps, probes(action_space=space))

    run_sync(backend, script)
    with vecenv.make(probes(action_space=space), backend=backend) as envs:  # and it stays usable
        envs.reset(seed=0)
        with pytest.raises((ValueError, TypeError, LookupError, CustomSpaceError)):
            envs.step(batch)
        envs.step(envs.action_space.sample())


def test_reset_seeds_options_and_masks(backend):
    def script(make):
        def calls(envs):
            return [
                attempt(lambda: envs.reset(seed=3)),
                attempt(lambda: envs.reset(seed=[5, None, 7])),
                attempt(lambda: envs.reset(seed=[1, 2]), wording=True),
                attempt(lambda: envs.reset(seed=0, options={"k": 4})),
                attempt(lambda: envs.step(np.array([0, 1, 2]))),
                attempt(lambda: envs.reset(options={"reset_mask": np.array([True, False, True])})),
                attempt(lambda: envs.reset(options={"reset_mask": [True, False, True]}), wording=True),
                attempt(lambda: envs.reset(options={"reset_mask": np.array([True, False])}), wording=True),
                attempt(lambda: envs.reset(options={"reset_mask": np.array([1, 0, 1])}), wording=True),
                attempt(lambda: envs.reset(options={"reset_mask": np.zeros(N, bool)}), wording=True),
                attempt(lambda: envs.step(np.array([2, 2, 2]))),
                attempt(lambda: envs.np_random_seed),
            ]
        return closing_after(make, calls, probes())

    run_sync(backend, script)


@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
@pytest.mark.parametrize("copy", [True, False])
def test_rollout_values_in_every_autoreset_mode(backend, mode, copy):
    def script(make):
        def rollout(envs):
            out = [attempt(lambda: envs.reset(seed=11))]
            for t in range(7):
                if mode == "Disabled" and t and t % 3 == 0:
                    out.append(attempt(lambda: envs.reset(options={"reset_mask": np.ones(N, bool)})))
                out.append(attempt(lambda t=t: envs.step(np.array([t % 3, 1, 2]))))
            return out
        return closing_after(make, rollout, probes(), autoreset_mode=mode, copy=copy)

    run_sync(backend, script)


def test_copy_false_returns_memory_the_next_step_overwrites(backend):
    def script(make):
        def steps(envs):
            first, _ = envs.reset(seed=0)
            second = envs.step(np.array([0, 0, 0]))[0]
            return [Outcome(first.copy()), Outcome(second.copy()), Outcome(np.array_equal(first, second))]
        return closing_after(make, steps, probes(), copy=False)

    run_sync(backend, script)


def test_call_get_attr_set_attr_and_render(backend):
    def script(make):
        def calls(envs):
            return [
                attempt(lambda: envs.reset(seed=0)),
                attempt(lambda: envs.call("scaled", 10, offset=1)),
                attempt(lambda: envs.get_attr("label")),
                attempt(lambda: envs.set_attr("label", "same")),
                attempt(lambda: envs.get_attr("label")),
                attempt(lambda: envs.set_attr("label", ["a", "b", "c"])),
                attempt(lambda: envs.get_attr("label")),
                attempt(lambda: envs.set_attr("label", ["a", "b"]), wording=True),
                attempt(lambda: envs.call("index")),
                attempt(lambda: envs.render()),
                attempt(lambda: envs.step(np.array([1, 1, 1]))),
                attempt(lambda: envs.render()),
            ]
        return closing_after(make, calls, probes(render_mode="rgb_array"))

    run_sync(backend, script)


def test_vector_wrappers_see_the_same_env(backend):
    def script(make):
        def wrapped(envs):
            envs = gym.wrappers.vector.RecordEpisodeStatistics(envs)
            out = [attempt(lambda: envs.reset(seed=2))]
            for _ in range(4):
                out.append(attempt(lambda: envs.step(np.array([1, 2, 0]))[:4]))
            return out
        return closing_after(make, wrapped, probes())

    run_sync(backend, script)


# ==================================================================== AsyncVectorEnv
def vec_async(backend: str) -> Callable[..., Any]:
    """vecenv's stand-in for gymnasium's AsyncVectorEnv: the drop-in itself on ``process``;
    the backend's class (the same async methods) on the others."""
    return {
        "serial": vecenv.SyncVectorEnv,
        "thread": partial(vecenv.ThreadVectorEnv, num_workers=2),
        "process": partial(vecenv.AsyncVectorEnv, context=FAST_START),
    }[backend]


def gym_async(*args: Any, **kwargs: Any) -> gym.vector.AsyncVectorEnv:
    return gym.vector.AsyncVectorEnv(*args, **{"context": "fork", **kwargs})


def run_async(backend: str, script: Callable[..., list[Outcome]], *args: Any, **kwargs: Any) -> None:
    ref = script(gym_async, *args, **kwargs)
    ours = script(vec_async(backend), *args, **kwargs)
    compare(ref, ours)


def test_async_calls_out_of_order(backend):
    def script(make):
        def calls(envs):
            return [
                attempt(envs.step_wait, wording=True),
                attempt(envs.reset_wait, wording=True),
                attempt(envs.call_wait, wording=True),
                attempt(lambda: envs.reset_async(seed=0)),
                attempt(lambda: envs.step_async(np.array([0, 1, 2])), wording=True),
                attempt(lambda: envs.reset_async(), wording=True),
                attempt(lambda: envs.call_async("label"), wording=True),
                attempt(lambda: envs.set_attr("label", "x"), wording=True),
                attempt(lambda: envs.get_attr("label"), wording=True),
                attempt(lambda: envs.render(), wording=True),
                attempt(envs.reset_wait),
                attempt(lambda: envs.step_async(np.array([0, 1, 2]))),
                attempt(lambda: envs.step_async(np.array([0, 1, 2])), wording=True),
                attempt(envs.reset_wait, wording=True),
                attempt(envs.step_wait),
                attempt(lambda: envs.call_async("scaled", 2)),
                attempt(lambda: envs.step(np.array([0, 1, 2])), wording=True),
                attempt(envs.call_wait),
                attempt(lambda: envs.step(np.array([0, 1, 2]))),
            ]
        return closing_after(make, calls, probes(render_mode="rgb_array"))

    ref = script(gym_async)
    ours = script(vec_async(backend))
    compare(ref, ours)
    for r, o in zip(ref, ours, strict=True):
        if isinstance(r.error, (NoAsyncCallError, AlreadyPendingCallError)):
            assert o.error.name == r.error.name, (o.error, o.error.name, r.error.name)


def test_async_actions_reach_envs_as_gymnasium_iterates_them(backend):
    for space, batch in ACTION_BATCHES[:10] + ACTION_BATCHES[16:19]:
        run_async(backend, _step_script, space, [batch, batch])


def test_async_closed_env_refuses_every_call():
    def script(make):
        envs = make(probes())
        envs.close()
        out = [attempt(envs.close)]  # idempotent
        for call in (lambda: envs.reset(), lambda: envs.step(np.zeros(N, int)), lambda: envs.step_wait(),
                     lambda: envs.call("label"), lambda: envs.set_attr("label", 1)):
            out.append(attempt(call, wording=True))
        return out

    compare(script(gym_async), script(vec_async("process")))


@needs_max_concurrency
def test_async_constructor_arguments_and_max_concurrency():
    for args in [(True, True, "fork", True, None, "same", "NextStep", None),
                 (False, False, "fork", False, None, "same", AutoresetMode.SAME_STEP, 2)]:
        def script(make, args=args):
            def attrs():
                envs = make(probes(), *args)
                try:
                    return (envs.shared_memory, envs.copy, envs.context, envs.daemon, envs.worker,
                            envs.observation_mode, envs.autoreset_mode, envs.max_concurrency,
                            envs.metadata, envs.single_action_space, envs.observation_space, repr(envs))
                finally:
                    envs.close()
            return [attempt(attrs)]

        compare(script(gym.vector.AsyncVectorEnv), script(vecenv.AsyncVectorEnv))

    def script(make):
        return [built(make, probes(), max_concurrency=bad) for bad in ("2", 1.5, 0, -1)] + [
            built(make, probes(), max_concurrency=np.int64(2)),
        ]

    compare(script(gym_async), script(vec_async("process")))
    with pytest.raises(ValueError, match="max_concurrency=2 with num_workers=3"):
        vecenv.AsyncVectorEnv(probes(), max_concurrency=2, num_workers=3)
    with vecenv.AsyncVectorEnv(probes(4), max_concurrency=2, context=FAST_START) as envs:
        assert len(envs.processes) == 2 and envs.max_concurrency == 2


@needs_max_concurrency
@pytest.mark.parametrize("limit", [1, 2])
def test_max_concurrency_bounds_the_envs_stepping_at_once(limit):
    """Four envs whose steps take 50 ms, at most ``limit`` stepping at any time, in both."""
    def overlap(infos) -> int:
        spans = sorted(zip(infos["started"].tolist(), infos["ended"].tolist(), strict=True))
        return max(sum(1 for s, e in spans if s <= start < e) for start, _ in spans)

    for make in (gym_async, vec_async("process")):
        envs = make(probes(4, delay=0.05), max_concurrency=limit)
        try:
            envs.reset(seed=0)
            for _ in range(2):
                infos = envs.step(np.zeros(4, int))[4]
                assert overlap(infos) <= limit, (make, infos)
        finally:
            envs.close()


def test_async_custom_worker_is_refused_clearly():
    with pytest.raises(NotImplementedError, match=r"AsyncVectorEnv\(worker=\.\.\.\): custom worker functions"):
        vecenv.AsyncVectorEnv(probes(), worker=lambda *args: None)


def test_async_space_checks_speak_gymnasium_s_words():
    other_bounds = partial(Probe, 1, observation_space=spaces.Box(-1, 1, (2,), np.float32))
    other_act = partial(Probe, 2, action_space=spaces.Discrete(4))
    custom = (spaces.Box(-1, 1, (2, 3), np.float32), spaces.Box(-1, 1, (3,), np.float32))

    def script(make):
        return [
            built(make, [partial(Probe, 0), other_bounds]),
            built(make, [partial(Probe, 0), partial(Probe, 1), other_act]),
            built(make, [partial(Probe, 0), other_act, other_bounds]),  # observations are checked first
            built(make, probes(2), observation_mode=custom),
            built(make, [partial(Probe, 0), other_bounds], observation_mode="different"),
            built(make, probes(2), observation_mode="similar"),
        ]

    compare(script(gym_async), script(vec_async("process")))


def _warnings_of(fn: Callable[[], Any]) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


def _start(envs: Any, pending: str) -> None:
    if pending == "step":
        envs.step_async(np.zeros(N, int))
    elif pending == "reset":
        envs.reset_async()
    else:
        envs.call_async("label")


def test_async_close_with_a_pending_call_warns_as_gymnasium():
    for pending in ("step", "reset", "call"):
        said = []
        for make in (gym_async, vec_async("process")):
            envs = make(probes())
            envs.reset(seed=0)
            _start(envs, pending)
            said.append(_warnings_of(envs.close))
        assert said[1] == said[0] and len(said[0]) == 1, said
        assert f"Calling `close` while waiting for a pending call to `{pending}` to complete." in said[0][0]
    for make in (gym_async, vec_async("process")):  # nothing pending: no warning
        envs = make(probes())
        envs.reset(seed=0)
        assert _warnings_of(envs.close) == []


def test_async_env_errors_are_logged_through_gymnasium_s_logger():
    said, raised = [], []
    for make in (gym_async, vec_async("process")):
        envs = make([partial(Probe, 0), partial(Probe, 1, fail_at=1), partial(Probe, 2)])
        try:
            envs.reset(seed=0)
            envs.step(np.zeros(N, int))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                with pytest.raises(Exception) as info:
                    envs.step(np.zeros(N, int))
            said.append([str(w.message) for w in caught])
            raised.append(info.value)
        finally:
            envs.close()
    (ref, ours) = said
    assert len(ours) == len(ref) == 3, said
    assert "ERROR: Received the following error from Worker-1 - " in ref[0]
    assert ours[0].startswith(ref[0].split(" - ")[0] + " - ")  # then vecenv's own detail
    assert "ValueError: probe 1 fails at step 1" in ref[1] and "ValueError: probe 1 fails at step 1" in ours[1]
    assert ours[2] == ref[2] and "Raising the last exception back to the main process." in ref[2]
    assert isinstance(raised[1], type(raised[0])), raised  # the env's ValueError, in both
    assert str(raised[1]).startswith(str(raised[0])), raised


def test_async_wait_timeouts_raise_gymnasium_s_error():
    def script(make):
        def calls(envs):
            envs.reset(seed=0)
            envs.step_async(np.zeros(N, int))
            return [attempt(lambda: envs.step_wait(timeout=0.01), wording=True)]
        return closing_after(make, calls, probes(delay=0.5))

    ref = script(gym_async)
    with pytest.warns(UserWarning, match="pending call to `step`"):  # vecenv keeps the step pending
        ours = script(vec_async("process"))
    compare(ref, ours)


def test_async_copy_false_and_masks():
    def script(make):
        def calls(envs):
            first, _ = envs.reset(seed=0)
            kept = first.copy()
            second = envs.step(np.array([1, 1, 1]))[0]
            return [Outcome(kept), Outcome(second.copy()), Outcome(np.array_equal(first, second)),
                    attempt(lambda: envs.reset(options={"reset_mask": np.array([False, True, False])})),
                    attempt(lambda: envs.reset(options={"reset_mask": np.array([1, 0, 1])}), wording=True)]
        return closing_after(make, calls, probes(), copy=False)

    compare(script(gym_async), script(vec_async("process")))


# ==================================================================== step_timeout where it cannot work
def test_step_timeout_on_threads_is_refused_naming_the_backend_and_alternatives():
    said = r"step_timeout needs a backend that can end a stuck worker: backend='process' or 'ray'\. The thread"
    with pytest.raises(ValueError, match=said):
        vecenv.ThreadVectorEnv(probes(2), step_timeout=1.0)
    with pytest.raises(ValueError, match=said):
        vecenv.make(probes(2), backend="thread", step_timeout=1.0)


def test_step_timeout_with_inline_is_refused_naming_both():
    said = r"step_timeout=1\.0 cannot be combined with inline=True: the inline env group steps in your own thread"
    for build in (
        lambda: vecenv.ProcessVectorEnv(probes(2), num_workers=2, inline=True, step_timeout=1.0),
        lambda: vecenv.make(probes(2), backend="process", inline=True, step_timeout=1.0),
        lambda: vecenv.AsyncVectorEnv(probes(2), inline=True, step_timeout=1.0),
    ):
        with pytest.raises(ValueError, match=said):
            build()
    for kwargs in ({"inline": True}, {"step_timeout": 5.0}):  # each alone is fine
        with vecenv.ProcessVectorEnv(probes(2), num_workers=2, context=FAST_START, **kwargs) as envs:
            envs.reset(seed=0)
            assert envs.step(np.zeros(2, int))[1].tolist() == [1.0, 2.0]
