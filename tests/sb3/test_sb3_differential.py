"""Differential tests of the SB3 API: the same script on SB3's classes and on vecenv.sb3's.

Every script runs twice, once with SB3's ``stable_baselines3.common.vec_env`` (plus
``make_vec_env``, ``Monitor``) and once with ``vecenv.sb3``, on ``DummyVecEnv`` (vecenv's
serial backend) and on ``SubprocVecEnv`` (vecenv's process backend, two workers). The two runs
must end alike:

* the same exception class (vecenv's may be a subclass: where SB3 asserts, vecenv raises an
  ``AssertionError`` that is also a ``ValueError``/``TypeError``) and, where SB3 words the
  message itself, a message that starts with SB3's words;
* the same warnings (class and start of the message);
* the same values (observations, rewards, dones, infos, attributes, seeds...).

SB3's ``SubprocVecEnv`` lets an exception in an env kill its worker (the caller gets an
``EOFError``) and does not refuse nested observation spaces; for those scripts vecenv's
``SubprocVecEnv`` is held to SB3's ``DummyVecEnv``, the behaviour the issue asks for. The
remaining, deliberate differences are tested at the end of the module, one test each.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import os
import warnings
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.wrappers import TimeLimit
from sb3_testenvs import assert_same

import vecenv.sb3 as vsb3

pytestmark = pytest.mark.timeout(120)

sv = pytest.importorskip("stable_baselines3.common.vec_env")


# ============================================================================ test envs
def plain(action: Any, space: spaces.Space) -> Any:
    """The action as plain Python values in the space's dtype, whatever container it came in."""
    if isinstance(space, spaces.Dict):
        return {key: plain(action[key], sub) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(plain(action[i], sub) for i, sub in enumerate(space.spaces))
    return np.asarray(action, dtype=space.dtype).tolist()


def fill(space: spaces.Space, t: int, noise: float) -> Any:
    """A deterministic observation of ``space`` for step ``t``."""
    if isinstance(space, spaces.Dict):
        return {key: fill(sub, t + i, noise) for i, (key, sub) in enumerate(space.spaces.items())}
    if isinstance(space, spaces.Tuple):
        return tuple(fill(sub, t + i, noise) for i, sub in enumerate(space.spaces))
    if isinstance(space, spaces.Discrete):
        return np.int64(space.start + t % space.n)
    if isinstance(space, spaces.MultiBinary):
        return np.full(space.shape, t % 2, dtype=space.dtype)
    if isinstance(space, spaces.MultiDiscrete):
        return (np.full(space.shape, t) % space.nvec).astype(space.dtype)
    if np.issubdtype(space.dtype, np.integer):
        return np.full(space.shape, (t * 7 + int(noise * 100)) % 256, dtype=space.dtype)
    return np.full(space.shape, t + noise, dtype=space.dtype)


class EchoEnv(gym.Env):
    """Observations count the steps (plus a part drawn at each seeded reset); the step info
    echoes the action the env received; episodes terminate after ``episode`` steps (truncate
    after ``truncate`` steps). A raw env: nothing refuses a step before reset."""

    metadata = {"render_modes": ["rgb_array", "ansi"], "render_fps": 7}

    def __init__(
        self,
        action_space: spaces.Space | None = None,
        observation_space: spaces.Space | None = None,
        render_mode: str | None = None,
        episode: int = 3,
        truncate: int = 100,
        fail_at: int | None = None,
    ) -> None:
        # copies: SB3's VecNormalize edits a Dict observation space in place
        self.action_space = (
            copy.deepcopy(action_space) if action_space is not None else spaces.Discrete(3)
        )
        self.observation_space = (
            copy.deepcopy(observation_space)
            if observation_space is not None
            else spaces.Box(-100, 100, (2,), np.float32)
        )
        self.render_mode = render_mode
        self.episode, self.truncate, self.fail_at = episode, truncate, fail_at
        self.t = 0
        self.noise = 0.0
        self.scale = 1.0
        self.renders = 0
        self.value = 5

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.t = 0
        # drawn only once seeded, so that unseeded runs stay comparable
        self.noise = float(self.np_random.random()) if self._np_random is not None else 0.0
        return fill(self.observation_space, 0, self.noise), {"seed": seed, "options": options}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.t += 1
        if self.t == self.fail_at:
            raise ValueError(f"boom at step {self.t}")
        obs = fill(self.observation_space, self.t, self.noise)
        info = {"action": plain(action, self.action_space), "t": self.t}
        return obs, self.scale * self.t, self.t >= self.episode, self.t >= self.truncate, info

    def render(self) -> Any:
        self.renders += 1
        if self.render_mode == "rgb_array":
            return np.full((4, 5, 3), (self.t * 10) % 256, dtype=np.uint8)
        return None

    def add(self, x: float, y: float = 0.0) -> float:
        self.scale += x + y
        return self.scale


def echo(n: int = 2, **kwargs: Any) -> list[Callable[[], gym.Env]]:
    return [lambda: EchoEnv(**kwargs) for _ in range(n)]


def cartpole(n: int = 2, **kwargs: Any) -> list[Callable[[], gym.Env]]:
    return [lambda: gym.make("CartPole-v1", **kwargs) for _ in range(n)]


BOX = spaces.Box(-1.0, 1.0, (2,), np.float32)
IMAGE = spaces.Box(0, 255, (6, 7, 3), np.uint8)
DICT_OBS = spaces.Dict({"vec": BOX, "img": IMAGE})
DICT_ACTION = spaces.Dict(
    {
        "move": spaces.Discrete(3),
        "force": spaces.Box(-1.0, 1.0, (2,), np.float32),
        "inner": spaces.Tuple((spaces.Discrete(2), spaces.MultiBinary(2))),
    }
)
TUPLE_ACTION = spaces.Tuple((spaces.Discrete(3), spaces.Box(-1.0, 1.0, (2,), np.float32)))


# ============================================================================ the harness
def _api(name: str) -> SimpleNamespace:
    if name == "vecenv":
        return SimpleNamespace(name=name, **{key: getattr(vsb3, key) for key in vsb3.__all__})
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.monitor import Monitor

    names = {key: getattr(sv, key) for key in sv.__all__}
    return SimpleNamespace(name=name, make_vec_env=make_vec_env, Monitor=Monitor, **names)


class Ctx:
    """What a script sees: the API under test and the kind of vector env it builds."""

    def __init__(self, api: SimpleNamespace, kind: str, tmp: str) -> None:
        self.api, self.kind, self.tmp = api, kind, tmp
        self.made: list[Any] = []

    def _cls_kwargs(self, n: int) -> tuple[Any, dict]:
        if self.kind == "dummy":
            return self.api.DummyVecEnv, {}
        extra = {"num_workers": min(2, n)} if self.api.name == "vecenv" else {}
        return self.api.SubprocVecEnv, {"start_method": "fork", **extra}

    def venv(self, env_fns: list[Callable[[], gym.Env]]) -> Any:
        """The vector env under test over ``env_fns`` (closed after the script)."""
        cls, kwargs = self._cls_kwargs(len(env_fns))
        venv = cls(env_fns, **kwargs)
        self.made.append(venv)
        return venv

    def make_vec_env(self, env_id: Any, n_envs: int = 2, **kwargs: Any) -> Any:
        cls, vec_kwargs = self._cls_kwargs(n_envs)
        venv = self.api.make_vec_env(
            env_id, n_envs=n_envs, vec_env_cls=cls, vec_env_kwargs=vec_kwargs, **kwargs
        )
        self.made.append(venv)
        return venv

    def close(self) -> None:
        for venv in reversed(self.made):
            try:
                venv.close()
            except Exception:  # noqa: BLE001 - a script may have closed it already
                pass


def step(venv: Any, actions: Any) -> tuple:
    """``venv.step`` with rewards as float32 and infos as a list (see the last tests)."""
    obs, rewards, dones, infos = venv.step(actions)
    return obs, np.asarray(rewards, dtype=np.float32), dones, list(infos)


@dataclasses.dataclass
class Outcome:
    value: Any = None
    error: BaseException | None = None
    warnings: list[tuple[type, str]] = dataclasses.field(default_factory=list)


def _ours(message: str) -> bool:
    """Warnings of the vector-env layer, not gymnasium's env checker (which runs in the envs,
    so in worker processes for SubprocVecEnv) nor deprecation notices."""
    return "WARN:" not in message


def run(script: Callable[[Ctx], Any], api: SimpleNamespace, kind: str, tmp: str) -> Outcome:
    ctx = Ctx(api, kind, os.path.join(tmp, api.name))
    os.makedirs(ctx.tmp, exist_ok=True)
    outcome = Outcome()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            outcome.value = script(ctx)
        except Exception as exc:  # noqa: BLE001 - the outcome under comparison
            outcome.error = exc
            if api.name == "sb3":  # free SB3's half-built objects now, within this test
                exc.__traceback__ = None
        finally:
            ctx.close()
    outcome.warnings = [
        (w.category, str(w.message))
        for w in caught
        if not issubclass(
            w.category, (DeprecationWarning, PendingDeprecationWarning, ResourceWarning)
        )
        and _ours(str(w.message))
    ]
    return outcome


def _start(message: str) -> str:
    return message.split("\n")[0][:70]


def assert_same_outcome(ours: Outcome, theirs: Outcome, sb3_words: bool, rtol: float) -> None:
    if theirs.error is not None:
        assert ours.error is not None, (
            f"SB3 raised {theirs.error!r}; vecenv returned {ours.value!r}"
        )
        assert isinstance(ours.error, type(theirs.error)), (
            f"SB3 raised {type(theirs.error).__name__}: {theirs.error}; vecenv raised "
            f"{type(ours.error).__name__}: {ours.error}"
        )
        if sb3_words:
            assert str(ours.error).startswith(_start(str(theirs.error))), (
                f"message differs:\n  SB3:    {theirs.error}\n  vecenv: {ours.error}"
            )
    else:
        if ours.error is not None:
            raise AssertionError(f"SB3 returned {theirs.value!r}; vecenv raised") from ours.error
        assert_same(ours.value, theirs.value, "value", rtol)
    assert [(c, _start(m)[:50]) for c, m in ours.warnings] == [
        (c, _start(m)[:50]) for c, m in theirs.warnings
    ], f"warnings differ:\n  SB3:    {theirs.warnings}\n  vecenv: {ours.warnings}"


@dataclasses.dataclass
class Case:
    script: Callable[[Ctx], Any]
    kinds: tuple[str, ...]
    sb3_words: bool  # SB3 words its error message itself (else: only the class is compared)
    subproc_as_dummy: bool  # hold vecenv's SubprocVecEnv to SB3's DummyVecEnv (see the docstring)
    rtol: float
    xfail: str | None  # a known difference that vecenv.sb3 cannot remove by itself: why


CASES: dict[str, Case] = {}


def case(
    kinds: tuple[str, ...] = ("dummy", "subproc"),
    sb3_words: bool = True,
    subproc_as_dummy: bool = False,
    rtol: float = 0.0,
    xfail: str | None = None,
) -> Callable:
    def register(script: Callable[[Ctx], Any]) -> Callable[[Ctx], Any]:
        CASES[script.__name__] = Case(script, kinds, sb3_words, subproc_as_dummy, rtol, xfail)
        return script

    return register


# ======================================================================= step(): accepted actions
def _episode(ctx: Ctx, env_fns: list, actions: list, seed: int = 0) -> list:
    venv = ctx.venv(env_fns)
    assert venv.seed(seed) == [seed + i for i in range(len(env_fns))]
    out = [venv.reset(), list(venv.reset_infos)]
    for action in actions:
        out.append(step(venv, action))
        out.append(list(venv.reset_infos))
    return out


@case()
def step_numpy_batch_discrete(ctx: Ctx) -> Any:
    return _episode(ctx, echo(3), [np.array([0, 1, 2]), np.array([2, 2, 2], dtype=np.int32)] * 2)


@case()
def step_list_of_ints(ctx: Ctx) -> Any:
    return _episode(ctx, echo(3), [[0, 1, 2], [np.int64(2), 1, 0], (1, 1, 1), [2, 0, 1]])


@case()
def step_box_batch_list_of_arrays_and_nested_lists(ctx: Ctx) -> Any:
    actions = [
        np.array([[0.5, -0.5], [0.25, 1.0]], dtype=np.float32),
        [np.array([0.5, 0.5], dtype=np.float32), np.array([-1.0, 0.0], dtype=np.float32)],
        [[0.5, 0.25], [0.125, -0.75]],
        ((1.0, 1.0), (0.0, 0.0)),
    ]
    return _episode(ctx, echo(2, action_space=BOX), actions)


@case()
def step_multi_discrete_and_multi_binary(ctx: Ctx) -> Any:
    md = _episode(
        ctx,
        echo(2, action_space=spaces.MultiDiscrete([3, 4])),
        [[[0, 3], [2, 1]], np.array([[1, 1], [0, 0]])],
    )
    mb = _episode(
        ctx,
        echo(2, action_space=spaces.MultiBinary(3)),
        [[[0, 1, 1], [1, 0, 0]], np.ones((2, 3), np.int8)],
    )
    return md, mb


@case()
def step_dict_actions_as_list_of_dicts(ctx: Ctx) -> Any:
    actions = [
        [
            {
                "move": 2,
                "force": np.array([0.5, -0.5], np.float32),
                "inner": (1, np.array([1, 0], np.int8)),
            },
            {
                "move": 0,
                "force": np.array([0.0, 1.0], np.float32),
                "inner": (0, np.array([0, 0], np.int8)),
            },
        ],
        [
            {"move": np.int64(1), "force": [0.25, 0.25], "inner": [1, [1, 1]]},
            {"move": 2, "force": [1.0, -1.0], "inner": (0, [0, 1])},
        ],
    ]
    actions.append(np.array(actions[0], dtype=object))  # an object array of dicts
    return _episode(ctx, echo(2, action_space=DICT_ACTION), actions)


@case()
def step_tuple_actions_as_list_of_tuples(ctx: Ctx) -> Any:
    actions = [
        [(2, np.array([0.5, -0.5], np.float32)), (0, np.array([1.0, 1.0], np.float32))],
        [[1, [0.25, 0.0]], [2, [-1.0, 0.5]]],
        ((0, (0.0, 0.0)), (1, (0.5, 0.5))),
    ]
    return _episode(ctx, echo(2, action_space=TUPLE_ACTION), actions)


@case()
def step_tuple_and_dict_observations(ctx: Ctx) -> Any:
    tuple_obs = spaces.Tuple((BOX, spaces.Discrete(4)))
    a = _episode(ctx, echo(2, observation_space=tuple_obs), [[0, 1]] * 4)
    b = _episode(ctx, echo(2, observation_space=DICT_OBS), [[1, 2]] * 4)
    return a, b


@case()
def step_async_then_step_wait(ctx: Ctx) -> Any:
    venv = ctx.venv(echo(2))
    venv.seed(4)
    out = [venv.reset()]
    for actions in ([0, 1], [1, 1], [2, 0], [0, 0]):
        venv.step_async(np.array(actions))
        obs, rewards, dones, infos = venv.step_wait()
        out.append(
            (obs, np.asarray(rewards, np.float32), dones, list(infos), list(venv.reset_infos))
        )
    return out


@case()
def step_with_truncation_sets_time_limit_truncated(ctx: Ctx) -> Any:
    fns = [lambda: TimeLimit(EchoEnv(episode=5), max_episode_steps=2), lambda: EchoEnv(episode=2)]
    return _episode(ctx, fns, [[0, 1]] * 5)


@case(sb3_words=False)
def step_fewer_actions_than_envs(ctx: Ctx) -> Any:
    venv = ctx.venv(echo(3))
    venv.reset()
    return venv.step(np.array([0, 1]))


@case(sb3_words=False)
def step_fewer_actions_as_list(ctx: Ctx) -> Any:
    venv = ctx.venv(echo(3))
    venv.reset()
    return venv.step([0, 1])


@case(kinds=("subproc",), sb3_words=False)
def step_more_actions_than_envs(ctx: Ctx) -> Any:
    # SB3's DummyVecEnv ignores the extra actions: see test_dummy_refuses_extra_actions
    venv = ctx.venv(echo(2))
    venv.reset()
    return venv.step(np.array([0, 1, 2]))


@case(sb3_words=False)
def step_with_a_single_int(ctx: Ctx) -> Any:
    venv = ctx.venv(echo(1))
    venv.reset()
    return venv.step(1)


# ============================================================================ step() before reset()
@case()
def step_before_reset_is_left_to_the_env(ctx: Ctx) -> Any:
    venv = ctx.venv(echo(2))
    out = [step(venv, [1, 2]), step(venv, [0, 0]), step(venv, [2, 1])]  # the 3rd ends the episodes
    venv.seed(1)
    out.append(venv.reset())
    out.append(step(venv, [1, 1]))
    return out


@case(subproc_as_dummy=True)
def step_before_reset_on_an_env_that_refuses_it(ctx: Ctx) -> Any:
    venv = ctx.venv(cartpole(2))
    return venv.step(np.array([0, 1]))


@case(subproc_as_dummy=True)
def step_before_reset_refused_then_reset_and_step(ctx: Ctx) -> Any:
    venv = ctx.venv(cartpole(2))
    with pytest.raises(gym.error.ResetNeeded, match="before calling env.reset"):
        venv.step(np.array([0, 1]))
    venv.seed(3)
    return [venv.reset(), step(venv, np.array([1, 0])), step(venv, [0, 0])]


@case(subproc_as_dummy=True)
def step_before_reset_through_make_vec_env_monitor(ctx: Ctx) -> Any:
    venv = ctx.make_vec_env("CartPole-v1", n_envs=2, seed=0)
    return venv.step(np.array([0, 1]))


# ============================================================================ observation spaces
NESTED = {
    "dict_in_dict": spaces.Dict({"a": spaces.Dict({"b": BOX}), "c": BOX}),
    "tuple_in_dict": spaces.Dict({"a": spaces.Tuple((BOX, BOX))}),
    "dict_in_tuple": spaces.Tuple((spaces.Dict({"b": BOX}), BOX)),
}


def _nested(name: str) -> Callable[[Ctx], Any]:
    def script(ctx: Ctx) -> Any:
        venv = ctx.venv(echo(2, observation_space=NESTED[name]))
        return venv.reset()

    script.__name__ = f"nested_observation_space_{name}"
    return script


for _name in NESTED:
    case(subproc_as_dummy=True)(_nested(_name))


# ============================================================================ constructors
@case(kinds=("dummy",))
def dummy_same_instance_twice(ctx: Ctx) -> Any:
    env = EchoEnv()
    return ctx.venv([lambda: env, lambda: env])


@case(sb3_words=False)
def no_env_fns(ctx: Ctx) -> Any:
    return ctx.venv([])


@case(kinds=("subproc",))
def subproc_unknown_start_method(ctx: Ctx) -> Any:
    cls = ctx.api.SubprocVecEnv
    return cls(echo(2), start_method="threads")


@case(subproc_as_dummy=True)
def env_fn_raises(ctx: Ctx) -> Any:
    return ctx.venv([lambda: gym.make("NoSuchEnvAnywhere-v0")] * 2)


@case(subproc_as_dummy=True)
def env_fn_returns_something_else(ctx: Ctx) -> Any:
    return ctx.venv([lambda: "not an env"] * 2)


@case(subproc_as_dummy=True)
def render_modes_differ(ctx: Ctx) -> Any:
    return ctx.venv([lambda: EchoEnv(render_mode="rgb_array"), lambda: EchoEnv()])


@case()
def metadata_and_render_mode(ctx: Ctx) -> Any:
    plain_venv = ctx.venv(echo(2))
    rgb = ctx.venv(echo(2, render_mode="rgb_array"))
    ansi = ctx.venv(echo(2, render_mode="ansi"))
    return [
        (v.render_mode, v.metadata, v.num_envs, v.observation_space, v.action_space)
        for v in (plain_venv, rgb, ansi)
    ]


# ========================================================================= seeds, options, resets
@case()
def seed_values(ctx: Ctx) -> Any:
    venv = ctx.venv(echo(3))
    out = [venv.seed(7), venv.seed(np.int64(2)), list(venv.seed(0))]
    drawn = venv.seed()
    out.append([s - drawn[0] for s in drawn])
    out.append(all(isinstance(s, int) for s in drawn))
    return out


@case()
def seeds_and_options_are_used_once(ctx: Ctx) -> Any:
    venv = ctx.venv(echo(3))
    venv.seed(5)
    venv.set_options({"level": 2})
    out = [venv.reset(), list(venv.reset_infos)]
    out += [venv.reset(), list(venv.reset_infos)]
    venv.set_options([{"level": 1}, {"level": 2}, {"level": 1}])
    out += [venv.reset(), list(venv.reset_infos)]
    venv.set_options(None)
    out += [venv.reset(), list(venv.reset_infos)]
    return out


@case()
def per_env_options_on_the_first_reset(ctx: Ctx) -> Any:
    venv = ctx.venv(echo(3))
    venv.seed(2)
    venv.set_options([{"a": 1}, {"b": 2}, {"a": 1}])
    return venv.reset(), list(venv.reset_infos), step(venv, [0, 1, 2])


# ========================================================================= attributes and methods
@case()
def get_attr_index_forms(ctx: Ctx) -> Any:
    venv = ctx.venv([lambda i=i: EchoEnv(episode=10 + i) for i in range(3)])
    forms = [None, 1, -1, [2, 0], (0,), range(1, 3), np.array([1, 2]), [], [0, 0], [True]]
    return [venv.get_attr("episode", indices) for indices in forms]


@case()
def get_attr_index_out_of_range(ctx: Ctx) -> Any:
    return ctx.venv(echo(3)).get_attr("episode", [1, 5])


@case()
def get_attr_index_not_an_int(ctx: Ctx) -> Any:
    return ctx.venv(echo(3)).get_attr("episode", "a")


@case(subproc_as_dummy=True)
def get_attr_missing(ctx: Ctx) -> Any:
    return ctx.venv(echo(2)).get_attr("no_such_attribute")


@case()
def has_attr(ctx: Ctx) -> Any:
    venv = ctx.venv(echo(2))
    return venv.has_attr("scale"), venv.has_attr("no_such_attribute"), venv.has_attr("add")


@case()
def set_attr_then_get_attr(ctx: Ctx) -> Any:
    venv = ctx.venv(echo(3))
    venv.set_attr("scale", 2.0)
    venv.set_attr("scale", 3.0, indices=1)
    venv.set_attr("fresh", "new", indices=[0, 2])
    venv.reset()
    return venv.get_attr("scale"), venv.get_attr("fresh", [2, 0]), step(venv, [0, 0, 0])[1]


@case()
def env_method_args_kwargs_and_indices(ctx: Ctx) -> Any:
    venv = ctx.venv(echo(3))
    out = [venv.env_method("add", 1.0), venv.env_method("add", 1.0, y=2.0, indices=[2])]
    out.append(venv.env_method("add", 0.5, indices=[0, 0]))  # env 0 twice, in order
    out.append(venv.env_method("add", 0.0, indices=-1))
    out.append(venv.get_attr("scale"))
    return out


@case(subproc_as_dummy=True)
def env_method_on_a_value(ctx: Ctx) -> Any:
    return ctx.venv(echo(2)).env_method("value")


@case(subproc_as_dummy=True)
def env_method_raises_in_the_env(ctx: Ctx) -> Any:
    return ctx.venv(echo(2)).env_method("add", "not a number", indices=[1])


@case(subproc_as_dummy=True)
def env_raises_in_step(ctx: Ctx) -> Any:
    venv = ctx.venv(echo(2, fail_at=2))
    venv.reset()
    venv.step([0, 0])
    return venv.step([0, 0])


@case()
def env_is_wrapped(ctx: Ctx) -> Any:
    venv = ctx.venv(
        [lambda: TimeLimit(EchoEnv(), 5), lambda: EchoEnv(), lambda: TimeLimit(EchoEnv(), 5)]
    )
    return (
        venv.env_is_wrapped(TimeLimit),
        venv.env_is_wrapped(TimeLimit, indices=[1, 2]),
        venv.env_is_wrapped(gym.wrappers.RecordEpisodeStatistics),
    )


@case()
def env_is_wrapped_with_monitor_from_make_vec_env(ctx: Ctx) -> Any:
    venv = ctx.make_vec_env(lambda: EchoEnv(), n_envs=2)
    return venv.env_is_wrapped(ctx.api.Monitor), venv.env_is_wrapped(TimeLimit)


@case()
def close_with_a_step_pending(ctx: Ctx) -> Any:
    venv = ctx.venv(echo(2))
    venv.reset()
    venv.step_async([0, 1])
    venv.close()
    return venv.num_envs


@case(kinds=("dummy",))
def step_async_twice_steps_with_the_last_actions(ctx: Ctx) -> Any:
    venv = ctx.venv(echo(2))
    venv.reset()
    venv.step_async([0, 1])
    venv.step_async([2, 2])
    return venv.step_wait()[3]


@case(kinds=("dummy",), sb3_words=False)
def set_options_with_too_few_dicts(ctx: Ctx) -> Any:
    venv = ctx.venv(echo(3))
    venv.set_options([{"level": 1}, {"level": 2}])
    return venv.reset()


@case(kinds=("dummy",))
def dummy_envs_are_the_sub_envs(ctx: Ctx) -> Any:
    venv = ctx.venv(echo(2))
    venv.seed(0)
    venv.reset()
    step(venv, [1, 2])
    return (
        [type(env).__name__ for env in venv.envs],
        [env.t for env in venv.envs],
        venv.envs[1].noise,
    )


@case()
def monitor_methods_through_env_method(ctx: Ctx) -> Any:
    venv = ctx.make_vec_env(lambda: EchoEnv(), n_envs=2, seed=1)
    venv.reset()
    for _ in range(7):
        step(venv, [0, 1])
    return [
        venv.env_method(name)
        for name in ("get_total_steps", "get_episode_rewards", "get_episode_lengths")
    ]


@case()
def close_twice(ctx: Ctx) -> Any:
    venv = ctx.venv(echo(2))
    venv.reset()
    venv.close()
    venv.close()
    return True


@case()
def unwrapped_and_wrapper_fall_through(ctx: Ctx) -> Any:
    venv = ctx.venv(echo(2))
    wrapped = ctx.api.VecMonitor(
        ctx.api.VecExtractDictObs(ctx.venv(echo(2, observation_space=DICT_OBS)), "vec")
    )
    return (
        venv.unwrapped is venv,
        wrapped.unwrapped is wrapped.venv.venv,
        wrapped.key,  # VecExtractDictObs's, found through VecMonitor
        wrapped.getattr_depth_check("key", already_found=False),
        wrapped.num_envs,
    )


@case()
def ambiguous_wrapper_attribute(ctx: Ctx) -> Any:
    base = ctx.api.VecEnvWrapper

    class Inner(base):
        shared = 1

        def reset(self) -> Any:
            return self.venv.reset()

        def step_wait(self) -> Any:
            return self.venv.step_wait()

    class Middle(Inner):
        pass

    class Outer(base):
        def reset(self) -> Any:
            return self.venv.reset()

        def step_wait(self) -> Any:
            return self.venv.step_wait()

    Middle.shared = 2
    inner = Inner(ctx.venv(echo(2)))
    middle = Middle(inner)
    assert middle.shared == 2
    return Outer(middle).shared


@case()
def wrappers_forward_seed_options_and_attributes(ctx: Ctx) -> Any:
    base = ctx.venv(echo(2, render_mode="rgb_array"))
    venv = ctx.api.VecMonitor(ctx.api.VecFrameStack(base, 2))
    out = [venv.seed(4)]
    venv.set_options({"level": 3})
    out += [venv.reset(), list(venv.reset_infos), venv.render_mode, venv.render().shape]
    out += [len(venv.get_images()), venv.get_attr("t"), venv.env_method("add", 1.0, indices=1)]
    venv.set_attr("t", 7, indices=0)
    out += [venv.has_attr("t"), venv.env_is_wrapped(TimeLimit), venv.get_attr("t", 0)]
    out += [venv.n_stack if hasattr(venv, "n_stack") else None, venv.stacked_obs.n_stack]
    api = ctx.api
    out += [
        api.is_vecenv_wrapped(venv, api.VecFrameStack),
        api.is_vecenv_wrapped(venv, api.VecNormalize),
    ]
    out += [
        api.unwrap_vec_normalize(venv) is None,
        api.unwrap_vec_wrapper(venv, api.VecFrameStack).n_stack,
    ]
    return out


class Scaled(gym.Wrapper):
    """A wrapper with its own ``scale``, hiding the env's."""

    scale = 99.0


@case()
def get_attr_finds_the_outermost_definition(ctx: Ctx) -> Any:
    venv = ctx.venv([lambda: Scaled(EchoEnv()), lambda: EchoEnv()])
    return venv.get_attr("scale"), venv.get_attr("t"), venv.env_method("add", 1.0)


# ============================================================================ render and images
@case()
def get_images_without_rgb_array(ctx: Ctx) -> Any:
    return ctx.venv(echo(2)).get_images()


@case()
def render_without_render_mode(ctx: Ctx) -> Any:
    venv = ctx.venv(echo(2))
    return venv.render(), venv.render("human"), venv.render("rgb_array")


@case()
def render_rgb_array_tiles_frames(ctx: Ctx) -> Any:
    venv = ctx.venv(echo(3, render_mode="rgb_array"))
    venv.reset()
    step(venv, [0, 1, 2])
    return venv.render(), venv.render("rgb_array"), venv.get_images(), venv.render("ansi")


@case(sb3_words=False)
def render_human_over_rgb_array_needs_opencv(ctx: Ctx) -> Any:
    if importlib.util.find_spec("cv2") is not None:
        return "cv2 installed: a window would open"
    venv = ctx.venv(echo(2, render_mode="rgb_array"))
    venv.reset()
    return venv.render("human")


@case()
def render_mode_rendered_by_the_envs(ctx: Ctx) -> Any:
    out = []
    for mode in ("ansi", "human"):
        venv = ctx.venv(echo(2, render_mode=mode))
        venv.reset()
        out += [
            venv.render(),
            venv.render(mode),
            venv.render("rgb_array"),
            venv.get_attr("renders"),
        ]
    return out


class NoRenderModeEnv(EchoEnv):
    """An env without a ``render_mode`` attribute (SB3 warns and uses None)."""

    @property
    def render_mode(self) -> Any:
        raise AttributeError("render_mode")

    @render_mode.setter
    def render_mode(self, value: Any) -> None:
        pass


@case(subproc_as_dummy=True)
def envs_without_render_mode(ctx: Ctx) -> Any:
    venv = ctx.venv([NoRenderModeEnv, NoRenderModeEnv])
    # (metadata differs between SB3's Dummy and Subproc classes; what matters is the env builds)
    return venv.render_mode, venv.num_envs


# ============================================================================ VecNormalize
@case()
def normalize_discrete_observations(ctx: Ctx) -> Any:
    return ctx.api.VecNormalize(ctx.venv(echo(2, observation_space=spaces.Discrete(4))))


@case()
def normalize_box_with_norm_obs_keys(ctx: Ctx) -> Any:
    return ctx.api.VecNormalize(ctx.venv(echo(2)), norm_obs_keys=["vec"])


@case()
def normalize_dict_with_a_discrete_key(ctx: Ctx) -> Any:
    space = spaces.Dict({"vec": BOX, "id": spaces.Discrete(3)})
    return ctx.api.VecNormalize(ctx.venv(echo(2, observation_space=space)))


@case(sb3_words=False)
def normalize_unknown_key(ctx: Ctx) -> Any:
    return ctx.api.VecNormalize(
        ctx.venv(echo(2, observation_space=DICT_OBS)), norm_obs_keys=["nope"]
    )


@case()
def normalize_off_on_discrete_observations(ctx: Ctx) -> Any:
    venv = ctx.api.VecNormalize(
        ctx.venv(echo(2, observation_space=spaces.Discrete(4))), norm_obs=False
    )
    venv.seed(0)
    return hasattr(venv, "obs_rms"), venv.reset(), step(venv, [0, 1]), step(venv, [1, 1])


@case(rtol=1e-6)
def normalize_values(ctx: Ctx) -> Any:
    space = spaces.Dict(
        {"vec": BOX, "big": spaces.Box(0, 9, (3,), np.float64), "id": spaces.Discrete(3)}
    )
    dct = ctx.api.VecNormalize(
        ctx.venv(echo(2, observation_space=space)), norm_obs_keys=["vec", "big"], gamma=0.9
    )
    img = ctx.api.VecNormalize(
        ctx.venv(echo(2, observation_space=IMAGE)), norm_reward=False, clip_obs=2.0
    )
    out = []
    for venv in (dct, img):
        venv.seed(3)
        out += [venv.observation_space, venv.reset()]
        for _ in range(5):
            out.append(step(venv, [0, 2]))
        out += [
            venv.get_original_obs(),
            np.asarray(venv.get_original_reward(), np.float32),
            venv.ret_rms.var,
        ]
    out += [dct.obs_rms["vec"].mean, dct.obs_rms["big"].var, img.obs_rms.mean]
    return out


@case(rtol=1e-6)
def normalize_training_off_and_inverses(ctx: Ctx) -> Any:
    venv = ctx.api.VecNormalize(ctx.venv(echo(2)), clip_reward=1.5, epsilon=1e-4)
    venv.seed(1)
    venv.reset()
    for _ in range(4):
        step(venv, [0, 1])
    venv.training = False
    mean = venv.obs_rms.mean.copy()
    obs = venv.reset()
    out = [step(venv, [1, 1]), np.array_equal(mean, venv.obs_rms.mean), venv.unnormalize_obs(obs)]
    rewards = np.array([1.0, 30.0])
    out += [
        venv.normalize_reward(rewards),
        venv.unnormalize_reward(rewards),
        venv.normalize_obs(obs * 0),
    ]
    return out


@case()
def normalize_set_venv_twice(ctx: Ctx) -> Any:
    venv = ctx.api.VecNormalize(ctx.venv(echo(2)))
    venv.set_venv(venv.venv)


@case()
def normalize_load_onto_other_shapes(ctx: Ctx) -> Any:
    path = os.path.join(ctx.tmp, "stats.pkl")
    ctx.api.VecNormalize(ctx.venv(echo(2))).save(path)
    return ctx.api.VecNormalize.load(
        path, ctx.venv(echo(2, observation_space=spaces.Box(-1, 1, (3,), np.float32)))
    )


@case()
def normalize_load_onto_a_dict_space(ctx: Ctx) -> Any:
    path = os.path.join(ctx.tmp, "stats.pkl")
    ctx.api.VecNormalize(ctx.venv(echo(2, observation_space=DICT_OBS))).save(path)
    other = spaces.Dict({"vec": BOX, "other": IMAGE})
    return ctx.api.VecNormalize.load(path, ctx.venv(echo(2, observation_space=other)))


@case()
def sync_normalization_of_differently_wrapped_envs(ctx: Ctx) -> Any:
    train = ctx.api.VecNormalize(ctx.venv(echo(2)))
    ctx.api.sync_envs_normalization(train, ctx.venv(echo(2)))


@case()
def sync_normalization_without_vec_normalize(ctx: Ctx) -> Any:
    train = ctx.api.VecNormalize(ctx.venv(echo(2)))
    ctx.api.sync_envs_normalization(train, ctx.api.VecMonitor(ctx.venv(echo(2))))


# ============================================================================ VecFrameStack
@case()
def frame_stack_on_discrete_observations(ctx: Ctx) -> Any:
    return ctx.api.VecFrameStack(ctx.venv(echo(2, observation_space=spaces.Discrete(3))), 2)


@case()
def frame_stack_bad_channels_order(ctx: Ctx) -> Any:
    return ctx.api.VecFrameStack(ctx.venv(echo(2)), 2, channels_order="middle")


@case()
def frame_stack_dict_channels_order_on_box(ctx: Ctx) -> Any:
    return ctx.api.VecFrameStack(ctx.venv(echo(2)), 2, channels_order={"vec": "last"})


@case(sb3_words=False)
def frame_stack_channels_order_missing_a_key(ctx: Ctx) -> Any:
    return ctx.api.VecFrameStack(ctx.venv(echo(2, observation_space=DICT_OBS)), 2, {"vec": "last"})


@case()
def frame_stack_image_with_the_middle_axis_smallest(ctx: Ctx) -> Any:
    space = spaces.Box(0, 255, (6, 2, 7), np.uint8)
    venv = ctx.api.VecFrameStack(ctx.venv(echo(2, observation_space=space)), 2)
    venv.seed(0)
    return venv.observation_space, venv.reset(), step(venv, [0, 1])


@case()
def stacked_observations_on_discrete(ctx: Ctx) -> Any:
    return ctx.api.StackedObservations(2, 2, spaces.Discrete(3))


@case()
def frame_stack_values(ctx: Ctx) -> Any:
    box = ctx.api.VecFrameStack(ctx.venv(echo(2)), 3)
    dct = ctx.api.VecFrameStack(
        ctx.venv(echo(2, observation_space=DICT_OBS)), 2, {"vec": "last", "img": None}
    )
    out = []
    for venv in (box, dct):
        venv.seed(1)
        out += [venv.observation_space, venv.reset()]
        for _ in range(4):
            out.append(step(venv, [1, 2]))
    return out


@case(kinds=("dummy",))
def stacked_observations_values(ctx: Ctx) -> Any:
    stacked = ctx.api.StackedObservations(2, 3, spaces.Box(0, 255, (2, 4, 4), np.uint8), "first")
    first = np.arange(64, dtype=np.uint8).reshape(2, 2, 4, 4)
    out = [stacked.stacked_observation_space, stacked.reset(first).copy()]
    infos = [{}, {"terminal_observation": np.full((2, 4, 4), 9, np.uint8)}]
    obs, infos = stacked.update(first + 1, np.array([False, True]), infos)
    out += [obs.copy(), infos]
    channels = ctx.api.StackedObservations(1, 2, spaces.Box(-1, 1, (3,), np.float32))
    out += [
        channels.channels_first,
        channels.stack_dimension,
        channels.stacked_shape,
        channels.repeat_axis,
    ]
    return out


@case()
def frame_stack_without_terminal_observation(ctx: Ctx) -> Any:
    class Strip(ctx.api.VecEnvWrapper):
        def reset(self) -> Any:
            return self.venv.reset()

        def step_wait(self) -> Any:
            obs, rewards, dones, infos = self.venv.step_wait()
            for info in infos:
                info.pop("terminal_observation", None)
            return obs, rewards, dones, infos

    venv = ctx.api.VecFrameStack(Strip(ctx.venv(echo(2, episode=1))), 2)
    venv.reset()
    return step(venv, [0, 0])


# ============================================================================ VecTransposeImage
@case()
def transpose_non_image(ctx: Ctx) -> Any:
    return ctx.api.VecTransposeImage(ctx.venv(echo(2)))


@case()
def transpose_channels_first_image(ctx: Ctx) -> Any:
    return ctx.api.VecTransposeImage(
        ctx.venv(echo(2, observation_space=spaces.Box(0, 255, (3, 6, 7), np.uint8)))
    )


@case()
def transpose_space_of_a_non_image(ctx: Ctx) -> Any:
    return ctx.api.VecTransposeImage.transpose_space(BOX)


@case()
def transpose_values(ctx: Ctx) -> Any:
    img = ctx.api.VecTransposeImage(ctx.venv(echo(2, observation_space=IMAGE)))
    dct = ctx.api.VecTransposeImage(ctx.venv(echo(2, observation_space=DICT_OBS)))
    skip = ctx.api.VecTransposeImage(ctx.venv(echo(2, observation_space=IMAGE)), skip=True)
    out = []
    for venv in (img, dct, skip):
        venv.seed(2)
        out += [
            venv.observation_space,
            venv.reset(),
            step(venv, [0, 1]),
            step(venv, [0, 1]),
            step(venv, [0, 1]),
        ]
    return out


# ============================================================================ VecCheckNan
NAN_ACTIONS = spaces.Box(-np.inf, np.inf, (2,), np.float32)


@case()
def check_nan_dict_actions(ctx: Ctx) -> Any:
    return ctx.api.VecCheckNan(ctx.venv(echo(2, action_space=DICT_ACTION)))


@case()
def check_nan_raises_on_nan_actions(ctx: Ctx) -> Any:
    venv = ctx.api.VecCheckNan(ctx.venv(echo(2, action_space=NAN_ACTIONS)), raise_exception=True)
    venv.reset()
    return venv.step(np.array([[0.0, np.nan], [0.0, 0.0]], np.float32))[:3]


@case()
def check_nan_raises_on_inf_observations(ctx: Ctx) -> Any:
    space = spaces.Box(-np.inf, np.inf, (2,), np.float32)

    class Inf(ctx.api.VecEnvWrapper):
        def reset(self) -> Any:
            return self.venv.reset()

        def step_wait(self) -> Any:
            obs, rewards, dones, infos = self.venv.step_wait()
            obs[0, 1] = np.inf
            return obs, rewards, dones, infos

    venv = ctx.api.VecCheckNan(
        Inf(ctx.venv(echo(2, observation_space=space))), raise_exception=True
    )
    venv.reset()
    return venv.step([0, 0])


@case()
def check_nan_warns_once(ctx: Ctx) -> Any:
    venv = ctx.api.VecCheckNan(ctx.venv(echo(2, action_space=NAN_ACTIONS)))
    venv.seed(0)
    venv.reset()
    out = [step(venv, np.array([[np.nan, 0.0], [0.0, 0.0]], np.float32))[:3]]
    out.append(step(venv, np.array([[np.nan, np.inf], [0.0, 0.0]], np.float32))[:3])
    return out  # (the infos echo the NaN actions, and NaN != NaN)


@case()
def check_nan_warns_every_time_with_inf_ignored(ctx: Ctx) -> Any:
    venv = ctx.api.VecCheckNan(
        ctx.venv(echo(2, action_space=NAN_ACTIONS)), warn_once=False, check_inf=False
    )
    venv.seed(0)
    venv.reset()
    out = [step(venv, np.array([[np.inf, 0.0], [0.0, 0.0]], np.float32))]
    out.append(step(venv, np.array([[np.nan, 0.0], [0.0, 0.0]], np.float32))[:3])
    out.append(step(venv, np.array([[0.0, 0.0], [np.nan, 0.0]], np.float32))[:3])
    return out


# ================================================================== VecExtractDictObs, VecMonitor
@case()
def extract_dict_obs_on_box(ctx: Ctx) -> Any:
    return ctx.api.VecExtractDictObs(ctx.venv(echo(2)), "vec")


@case()
def check_nan_on_tuple_observations(ctx: Ctx) -> Any:
    space = spaces.Tuple((spaces.Box(-np.inf, np.inf, (2,), np.float32), spaces.Discrete(3)))

    class Nan(ctx.api.VecEnvWrapper):
        def reset(self) -> Any:
            obs = self.venv.reset()
            obs[0][1, 0] = np.nan
            return obs

        def step_wait(self) -> Any:
            return self.venv.step_wait()

    venv = ctx.api.VecCheckNan(Nan(ctx.venv(echo(2, observation_space=space))))
    venv.seed(0)
    return venv.reset(), step(venv, [0, 1])


@case(sb3_words=False)
def monitor_info_keyword_missing(ctx: Ctx) -> Any:
    venv = ctx.api.VecMonitor(ctx.venv(echo(2, episode=1)), info_keywords=("missing",))
    venv.reset()
    return venv.step([0, 0])


@case()
def extract_dict_obs_values(ctx: Ctx) -> Any:
    venv = ctx.api.VecExtractDictObs(ctx.venv(echo(2, observation_space=DICT_OBS)), "img")
    venv.seed(0)
    return (
        venv.observation_space,
        venv.reset(),
        step(venv, [0, 1]),
        step(venv, [0, 1]),
        step(venv, [0, 1]),
    )


def _no_time(result: tuple) -> tuple:
    for info in result[3]:
        if "episode" in info:
            assert info["episode"].pop("t") >= 0
    return result


@case()
def monitor_over_monitored_envs(ctx: Ctx) -> Any:
    venv = ctx.api.VecMonitor(ctx.make_vec_env(lambda: EchoEnv(), n_envs=2, seed=0))
    venv.reset()
    return [_no_time(step(venv, [0, 1])) for _ in range(4)]


@case()
def monitor_values_and_csv(ctx: Ctx) -> Any:
    path = os.path.join(ctx.tmp, "log")
    venv = ctx.api.VecMonitor(ctx.venv(echo(2)), filename=path, info_keywords=("action",))
    venv.seed(0)
    out = [venv.reset()] + [_no_time(step(venv, [0, 1])) for _ in range(4)]
    venv.close()
    with open(path + ".monitor.csv") as file:
        lines = file.read().splitlines()
    out.append([line.split(",")[:2] + line.split(",")[3:] for line in lines[1:]])  # no times
    return out


@case()
def make_vec_env_values(ctx: Ctx) -> Any:
    folder = os.path.join(ctx.tmp, "monitor")
    venv = ctx.make_vec_env(
        "CartPole-v1",
        n_envs=2,
        seed=0,
        start_index=3,
        monitor_dir=folder,
        wrapper_class=TimeLimit,
        wrapper_kwargs={"max_episode_steps": 5},
    )
    out = [venv.reset(), venv.get_attr("render_mode"), venv.env_is_wrapped(TimeLimit)]
    out += [_no_time(step(venv, np.array([0, 1]))) for _ in range(7)]
    venv.close()
    with open(os.path.join(folder, "3.monitor.csv")) as file:
        rows = file.read().splitlines()[1:]
    return out, sorted(os.listdir(folder)), [row.split(",")[:2] for row in rows]


@case(subproc_as_dummy=True)
def make_vec_env_with_something_else(ctx: Ctx) -> Any:
    return ctx.make_vec_env(lambda: "not an env", n_envs=1)


def _monitor_script(allow_early_resets: bool, reset_keywords: tuple) -> Any:
    def script(ctx: Ctx) -> Any:
        env = ctx.api.Monitor(
            EchoEnv(), allow_early_resets=allow_early_resets, reset_keywords=reset_keywords
        )
        try:
            out = [env.reset(seed=0)]
            out.append(env.reset())
            return out
        finally:
            env.close()

    return script


@case(kinds=("dummy",))
def monitor_early_reset_refused(ctx: Ctx) -> Any:
    return _monitor_script(False, ())(ctx)


@case(kinds=("dummy",))
def monitor_reset_keyword_missing(ctx: Ctx) -> Any:
    return _monitor_script(True, ("level",))(ctx)


@case(kinds=("dummy",))
def monitor_step_needs_reset(ctx: Ctx) -> Any:
    env = ctx.api.Monitor(EchoEnv())
    return env.step(0)


# ============================================================================ VecVideoRecorder
@case()
def video_recorder_needs_rgb_array(ctx: Ctx) -> Any:
    return ctx.api.VecVideoRecorder(ctx.venv(echo(2)), ctx.tmp, lambda step: True)


@case(kinds=("dummy",))
def video_recorder_writes_the_same_clips(ctx: Ctx) -> Any:
    pytest.importorskip("moviepy")
    pytest.importorskip("imageio_ffmpeg")
    folder = os.path.join(ctx.tmp, "videos")
    venv = ctx.api.VecVideoRecorder(
        ctx.venv(echo(2, render_mode="rgb_array")),
        folder,
        lambda step: step % 4 == 0,
        video_length=2,
        name_prefix="clip",
    )
    venv.reset()
    for _ in range(6):
        venv.step([0, 1])
    venv.close()
    return sorted(os.listdir(folder))


# ============================================================================ the differential test
PAIRS = [
    pytest.param(
        name,
        kind,
        id=f"{name}-{kind}",
        marks=[pytest.mark.xfail(reason=c.xfail, strict=True)] if c.xfail else [],
    )
    for name, c in CASES.items()
    for kind in c.kinds
]


# SB3's VecVideoRecorder.__del__ fails on an instance whose __init__ raised (no recorded_frames)
@pytest.mark.filterwarnings("ignore:Exception ignored in.*VecVideoRecorder.__del__")
@pytest.mark.parametrize(("name", "kind"), PAIRS)
def test_same_behaviour_as_sb3(name: str, kind: str, tmp_path: Any) -> None:
    c = CASES[name]
    reference = "dummy" if (kind == "subproc" and c.subproc_as_dummy) else kind
    theirs = run(c.script, _api("sb3"), reference, str(tmp_path))
    ours = run(c.script, _api("vecenv"), kind, str(tmp_path))
    assert_same_outcome(ours, theirs, c.sb3_words, c.rtol)


def test_cases_cover_both_outcomes() -> None:
    """The scripts exercise SB3's documented errors and warnings, not only the happy path."""
    assert len(PAIRS) >= 100
    names = " ".join(CASES)
    for topic in (
        "step_before_reset",
        "nested",
        "normalize",
        "frame_stack",
        "transpose",
        "check_nan",
        "extract_dict_obs",
        "monitor",
        "video",
        "render",
        "get_attr",
        "env_method",
        "seed",
    ):
        assert topic in names, topic


# ========================================================================= deliberate differences
# Each test shows SB3's behaviour, then vecenv's; docs/sb3.md's "What differs from SB3" lists them.
def test_env_exception_in_subproc_is_the_envs_own_and_the_env_survives() -> None:
    """SB3's SubprocVecEnv loses the worker (the caller gets EOFError); vecenv raises the env's
    exception, as SB3's DummyVecEnv does, noting the env, and keeps every env usable."""
    venv = vsb3.SubprocVecEnv(echo(3, fail_at=2), start_method="fork", num_workers=2)
    try:
        venv.seed(0)
        venv.reset()
        venv.step([0, 0, 0])
        with pytest.raises(ValueError, match="boom at step 2") as info:
            venv.step([0, 0, 0])
        assert any(note.startswith("(vecenv) raised by env") for note in info.value.__notes__)
        with pytest.raises(AttributeError, match="no_such_attribute"):
            venv.get_attr("no_such_attribute")
        assert venv.get_attr("t", 0) == [2]
        venv.set_attr("fail_at", None)
        venv.reset()
        assert step(venv, [1, 1, 1])[1].tolist() == [1.0, 1.0, 1.0]
    finally:
        venv.close()


def test_dummy_refuses_extra_actions() -> None:
    """SB3's DummyVecEnv steps with the first num_envs actions and drops the rest; vecenv raises
    (a ValueError and IndexError), like SB3's SubprocVecEnv."""
    theirs = sv.DummyVecEnv(echo(2))
    theirs.reset()
    assert theirs.step(np.array([0, 1, 2]))[1].tolist() == [1.0, 1.0]
    ours = vsb3.DummyVecEnv(echo(2))
    ours.reset()
    with pytest.raises(ValueError, match="3 actions for 2 envs") as info:
        ours.step(np.array([0, 1, 2]))
    assert isinstance(info.value, IndexError)
    ours.close()
    theirs.close()


def test_actions_that_do_not_fit_the_action_space_are_refused() -> None:
    """SB3 hands any action to the env; vecenv stores actions in the action space's dtype and
    shape, so floats for a Discrete space or a wrong shape are refused before any env steps."""
    theirs = sv.DummyVecEnv(echo(2))
    theirs.reset()
    assert theirs.step([0.5, 1.5])[3][0]["action"] == 0  # the env got 0.5
    ours = vsb3.DummyVecEnv(echo(2, action_space=BOX))
    ours.reset()
    with pytest.raises(ValueError, match=r"shape \(2, 2\)"):
        ours.step(np.zeros((2, 3), np.float32))
    ours.close()
    ours = vsb3.DummyVecEnv(echo(2))
    ours.reset()
    with pytest.raises(TypeError, match="integer"):
        ours.step([0.5, 1.5])
    assert ours.get_attr("t") == [0, 0]
    ours.close()
    theirs.close()


def test_spaces_that_differ_across_env_fns_are_refused() -> None:
    """SB3's DummyVecEnv takes env 0's spaces for all; vecenv refuses envs that differ."""
    fns = [lambda: EchoEnv(), lambda: EchoEnv(action_space=spaces.Discrete(5))]
    sv.DummyVecEnv(fns).close()
    with pytest.raises(ValueError, match="action space"):
        vsb3.DummyVecEnv(fns)


def test_set_attr_sets_where_the_wrapper_chain_defines_it() -> None:
    """SB3 sets the attribute on the outermost wrapper, so the env never sees it; vecenv sets it
    where it is defined (gymnasium's set_wrapper_attr). get_attr answers the same on both."""
    fns = [lambda: TimeLimit(EchoEnv(), 50)] * 2
    results = []
    for module in (sv, vsb3):
        venv = module.DummyVecEnv(fns)
        venv.reset()
        venv.set_attr("scale", 10.0)
        assert venv.get_attr("scale") == [10.0, 10.0]
        results.append(step(venv, [0, 0])[1].tolist())
        venv.close()
    assert results == [[1.0, 1.0], [10.0, 10.0]]


def test_subproc_rewards_are_float32_and_infos_a_list() -> None:
    """SB3's SubprocVecEnv stacks what the envs return (float64 rewards here) into a tuple of
    infos; vecenv's SubprocVecEnv returns float32 rewards and a list, as SB3's DummyVecEnv."""
    theirs = sv.SubprocVecEnv(echo(2), start_method="fork")
    ours = vsb3.SubprocVecEnv(echo(2), start_method="fork")
    try:
        theirs.reset()
        ours.reset()
        _, r_theirs, _, i_theirs = theirs.step([0, 0])
        _, r_ours, _, i_ours = ours.step([0, 0])
        assert r_theirs.dtype == np.float64 and isinstance(i_theirs, tuple)
        assert r_ours.dtype == np.float32 and isinstance(i_ours, list)
        assert r_ours.tolist() == r_theirs.tolist() and list(i_theirs) == i_ours
    finally:
        theirs.close()
        ours.close()


def test_calls_after_close_raise() -> None:
    """SB3's DummyVecEnv keeps stepping closed envs (its SubprocVecEnv raises OSError); vecenv
    raises gymnasium's ClosedEnvironmentError."""
    theirs = sv.DummyVecEnv(echo(2))
    theirs.reset()
    theirs.close()
    theirs.step([0, 0])
    ours = vsb3.DummyVecEnv(echo(2))
    ours.reset()
    ours.close()
    with pytest.raises(gym.error.ClosedEnvironmentError):
        ours.step([0, 0])


def test_step_wait_without_step_async_raises() -> None:
    """SB3's DummyVecEnv steps again with the last actions (its SubprocVecEnv waits forever);
    vecenv raises RuntimeError."""
    theirs = sv.DummyVecEnv(echo(2))
    theirs.reset()
    theirs.step([1, 1])
    assert theirs.step_wait()[3][0]["t"] == 2
    ours = vsb3.DummyVecEnv(echo(2))
    ours.reset()
    ours.step([1, 1])
    with pytest.raises(RuntimeError, match="step_async"):
        ours.step_wait()
    ours.close()
    theirs.close()


def test_normalize_leaves_the_wrapped_observation_space_alone() -> None:
    """SB3's VecNormalize edits the wrapped venv's Dict observation space in place (image keys
    become float Boxes there too); vecenv's edits a copy."""
    theirs = sv.VecNormalize(sv.DummyVecEnv(echo(1, observation_space=spaces.Dict({"img": IMAGE}))))
    ours = vsb3.VecNormalize(
        vsb3.DummyVecEnv(echo(1, observation_space=spaces.Dict({"img": IMAGE})))
    )
    assert theirs.venv.observation_space["img"].dtype == np.float32
    assert ours.venv.observation_space["img"].dtype == np.uint8
    assert ours.observation_space == theirs.observation_space
    ours.close()
    theirs.close()


def test_subproc_refuses_nested_observation_spaces_like_dummy() -> None:
    """SB3's SubprocVecEnv does not check; vecenv's refuses them as SB3's DummyVecEnv does."""
    fns = echo(2, observation_space=NESTED["dict_in_dict"])
    with pytest.raises(NotImplementedError, match="Nested observation spaces"):
        vsb3.SubprocVecEnv(fns, start_method="fork")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("cls", ["DummyVecEnv", "SubprocVecEnv"])
def test_per_env_options_that_are_empty_reach_the_env_as_none(cls: str) -> None:
    """With options that differ per env, an env whose options are empty is reset with
    ``options=None``, as SB3 passes it; the others get their own dict, each env reset once."""
    seen = []
    for module in (sv, vsb3):
        kwargs = {"start_method": "fork"} if cls == "SubprocVecEnv" else {}
        venv = getattr(module, cls)(echo(3), **kwargs)
        venv.set_options([{"level": 1}, {}, {"level": 2}])
        venv.reset()
        seen.append([info["options"] for info in venv.reset_infos])
        venv.set_options([{}, {"level": 3}, {}])
        venv.reset()
        seen.append([info["options"] for info in venv.reset_infos])
        venv.close()
    assert seen[0] == [{"level": 1}, None, {"level": 2}]
    assert seen[1] == [None, {"level": 3}, None]
    assert seen[2:] == seen[:2]


def test_every_backend_takes_sb3_actions_and_steps_before_reset(backend: str) -> None:
    """On each of vecenv's backends (through ``from_vector_env``), per-env dict actions and a
    step before the first reset behave as on SB3's DummyVecEnv."""
    import cloudpickle

    import vecenv

    module = __import__(__name__)
    cloudpickle.register_pickle_by_value(module)  # ray workers cannot import this test module
    try:
        kwargs = {"num_workers": 2} if backend != "serial" else {}
        envs = vecenv.make(
            lambda: EchoEnv(action_space=DICT_ACTION),
            num_envs=3,
            backend=backend,
            autoreset_mode="same_step",
            **kwargs,
        )
    finally:
        cloudpickle.unregister_pickle_by_value(module)
    ours = vsb3.from_vector_env(envs)
    theirs = sv.DummyVecEnv(echo(3, action_space=DICT_ACTION))
    try:
        actions = [
            {"move": i % 3, "force": [0.5, -0.5 * i], "inner": (i % 2, [1, i % 2])}
            for i in range(3)
        ]
        results = []
        for venv in (ours, theirs):
            out = [step(venv, actions), step(venv, actions)]
            venv.seed(5)
            out += [venv.reset(), step(venv, actions), step(venv, actions)]
            results.append(out)
        assert_same(*results)
    finally:
        ours.close()
        theirs.close()


def test_the_gymnasium_api_keeps_its_own_rules() -> None:
    """Only the SB3 API steps before reset and refuses nested observation spaces; vecenv's
    gymnasium API still raises ResetNeeded and batches nested spaces."""
    import vecenv

    envs = vecenv.make(lambda: EchoEnv(observation_space=NESTED["dict_in_dict"]), num_envs=2)
    try:
        with pytest.raises(gym.error.ResetNeeded):
            envs.step(np.array([0, 1]))
        obs, _ = envs.reset(seed=0)
        assert obs["a"]["b"].shape == (2, 2)
    finally:
        envs.close()


def test_dict_observations_come_in_the_container_sb3_uses() -> None:
    """SB3's DummyVecEnv hands Dict observations out as an OrderedDict (SB3's own tests check
    it), its SubprocVecEnv as a plain dict; vecenv's classes do the same."""
    pairs = [
        (sv.DummyVecEnv(echo(2, observation_space=DICT_OBS)), vsb3.DummyVecEnv(echo(2, observation_space=DICT_OBS))),
        (
            sv.SubprocVecEnv(echo(2, observation_space=DICT_OBS), start_method="fork"),
            vsb3.SubprocVecEnv(echo(2, observation_space=DICT_OBS), start_method="fork"),
        ),
    ]
    try:
        for theirs, ours in pairs:
            got = [type(ours.reset()), type(step(ours, [0, 0])[0])]
            want = [type(theirs.reset()), type(step(theirs, [0, 0])[0])]
            assert got == want, f"{type(ours).__name__}: {got} != {want}"
    finally:
        for pair in pairs:
            for venv in pair:
                venv.close()
