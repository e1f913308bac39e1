"""docs/gymnasium.md: "every ``gymnasium.wrappers.vector.*`` wrapper works on it unchanged".

Each wrapper in ``gymnasium.wrappers.vector.__all__`` wraps each backend, and the same stack on
gymnasium's ``SyncVectorEnv`` runs beside it with the same seeds and actions: observations,
rewards, flags, infos and the wrapper's own state (running statistics, recorded frames, episode
statistics) must match value for value, in every autoreset mode. A wrapper that needs a package
that is not installed (OpenCV, pygame, jax, array-api-compat) is skipped, saying which.
"""

from __future__ import annotations

import copy
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import gymnasium.wrappers.vector as wv
import numpy as np
import pytest
from gymnasium import spaces

from helpers import assert_same, make_backend, use_backend
from vecenv.engine import parse_autoreset_mode
from vecenv.testing import DictTupleEnv

pytestmark = pytest.mark.timeout(120)

NUM_ENVS = 4
STEPS = 40


class ImageEnv(gym.Env):
    """RGB frames (uint8, H x W x 3) as observations and as ``render()``; random episode ends."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}
    observation_space = spaces.Box(0, 255, (6, 8, 3), np.uint8)
    action_space = spaces.Discrete(3)

    def __init__(self, render_mode: str | None = "rgb_array") -> None:
        self.render_mode = render_mode
        self.frame = np.zeros((6, 8, 3), np.uint8)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.frame = self.np_random.integers(0, 256, (6, 8, 3), dtype=np.uint8)
        return self.frame.copy(), {"t": self.t}

    def step(self, action):
        self.t += 1
        noise = self.np_random.integers(0, 9, (6, 8, 3), dtype=np.uint8)
        self.frame = (self.frame + noise + np.uint8(40 * int(action))).astype(np.uint8)
        terminated = bool(self.np_random.random() < 0.1)
        return self.frame.copy(), float(action), terminated, self.t >= 9, {"t": self.t}

    def render(self):
        return self.frame.copy()


class FastImageEnv(ImageEnv):
    """ImageEnv at 1000 frames per second: HumanRendering paces its window to ``render_fps``."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 1000}


ENVS: dict[str, Callable[[], gym.Env]] = {
    "cartpole": lambda: gym.make("CartPole-v1", max_episode_steps=25),
    "pendulum": lambda: gym.make("Pendulum-v1", max_episode_steps=15),  # Box actions
    "image": ImageEnv,
    "fast_image": FastImageEnv,
    "dict": DictTupleEnv,  # Dict observation with a nested Tuple, rich infos
}


def _torch_actions(actions):
    import torch

    return torch.as_tensor(actions)


def _jax_actions(actions):
    import jax.numpy as jnp

    return jnp.asarray(actions)


@dataclass
class Case:
    """One wrapper: the env it wraps, how to build it, and what else to compare."""

    env: str
    wrap: Callable[[Any, Path], Any]
    #: modules the wrapper needs beyond this project's test extras
    needs: tuple[str, ...] = ()
    #: the wrapper's own state, compared after every call
    state: Callable[[Any], Any] | None = None
    #: info keys compared for presence only (wall-clock times)
    ignore: tuple[str, ...] = ()
    #: turn a numpy action into what the wrapper takes
    action: Callable[[Any], Any] = field(default=lambda a: a)


def _rms(rms) -> tuple:
    return (np.asarray(rms.mean), np.asarray(rms.var), float(rms.count))


def _video_state(env) -> tuple:
    return ([f.copy() for f in env.recorded_frames], env.recording, env.episode_id, env.step_id)


CASES: dict[str, Case] = {
    "VectorizeTransformObservation": Case("cartpole", lambda e, _: wv.VectorizeTransformObservation(
        e, wrapper=gym.wrappers.TransformObservation, func=lambda o: o * 2 - 1, observation_space=None)),
    "VectorizeTransformAction": Case("cartpole", lambda e, _: wv.VectorizeTransformAction(
        e, wrapper=gym.wrappers.TransformAction, func=lambda a: 1 - a, action_space=None)),
    "VectorizeTransformReward": Case("cartpole", lambda e, _: wv.VectorizeTransformReward(
        e, wrapper=gym.wrappers.TransformReward, func=lambda r: 3 * r - 1)),
    "DictInfoToList": Case("dict", lambda e, _: wv.DictInfoToList(e)),
    "TransformObservation": Case("cartpole", lambda e, _: wv.TransformObservation(e, lambda o: o + 1)),
    "FilterObservation": Case("dict", lambda e, _: wv.FilterObservation(e, ["pos", "nested"])),
    "FlattenObservation": Case("dict", lambda e, _: wv.FlattenObservation(e)),
    "GrayscaleObservation": Case("image", lambda e, _: wv.GrayscaleObservation(e)),
    "ResizeObservation": Case("image", lambda e, _: wv.ResizeObservation(e, (4, 4)), needs=("cv2",)),
    "ReshapeObservation": Case("image", lambda e, _: wv.ReshapeObservation(e, (12, 12))),
    "RescaleObservation": Case("pendulum", lambda e, _: wv.RescaleObservation(e, 0.0, 1.0)),
    "DtypeObservation": Case("cartpole", lambda e, _: wv.DtypeObservation(e, np.float64)),
    "NormalizeObservation": Case("cartpole", lambda e, _: wv.NormalizeObservation(e),
                                 state=lambda w: _rms(w.obs_rms)),
    "TransformAction": Case("pendulum", lambda e, _: wv.TransformAction(e, lambda a: 0.5 * a)),
    "ClipAction": Case("pendulum", lambda e, _: wv.ClipAction(e)),
    "RescaleAction": Case("pendulum", lambda e, _: wv.RescaleAction(e, -1.0, 1.0)),
    "TransformReward": Case("cartpole", lambda e, _: wv.TransformReward(e, lambda r: 2 * r)),
    "ClipReward": Case("pendulum", lambda e, _: wv.ClipReward(e, -2.0, -0.5)),
    "NormalizeReward": Case("pendulum", lambda e, _: wv.NormalizeReward(e, gamma=0.9),
                            state=lambda w: (_rms(w.return_rms), w.accumulated_reward.copy())),
    "RecordEpisodeStatistics": Case(
        "cartpole", lambda e, _: wv.RecordEpisodeStatistics(e),
        state=lambda w: (list(w.return_queue), list(w.length_queue), w.episode_count,
                         w.episode_returns.copy(), w.episode_lengths.copy()),
        ignore=("t",)),  # wall-clock time of each episode
    "RecordVideo": Case(
        "image", lambda e, folder: wv.RecordVideo(e, str(folder), episode_trigger=lambda i: i in (0, 2)),
        needs=("moviepy",), state=_video_state),
    "HumanRendering": Case("fast_image", lambda e, _: wv.HumanRendering(e), needs=("pygame",)),
    "ArrayConversion": Case(
        "cartpole", lambda e, _: wv.ArrayConversion(e, env_xp=np, target_xp=__import__("torch")),
        needs=("torch", "array_api_compat"), action=_torch_actions),
    "JaxToNumpy": Case("cartpole", lambda e, _: wv.JaxToNumpy(e), needs=("jax", "array_api_compat")),
    "JaxToTorch": Case("cartpole", lambda e, _: wv.JaxToTorch(e), needs=("jax", "torch", "array_api_compat"),
                       action=_torch_actions),
    "NumpyToTorch": Case("cartpole", lambda e, _: wv.NumpyToTorch(e), needs=("torch", "array_api_compat"),
                         action=_torch_actions),
}

MODES = ["next_step", "same_step", "disabled"]
#: every wrapper on these backends in every autoreset mode; ray (seconds to start its actors) runs
#: every wrapper too, one env kind at a time in the default mode (test_wrappers_on_ray)
COMBOS = [(b, m) for b in ("serial", "thread", "process") for m in MODES]


def test_every_gymnasium_vector_wrapper_is_covered():
    assert set(CASES) == set(wv.__all__)


def _plain(x: Any) -> Any:
    """Tensors (torch, jax) as numpy arrays tagged with their type, anything else unchanged."""
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_plain(v) for v in x)
    module = type(x).__module__
    if module.startswith(("torch", "jax", "jaxlib")):
        return (type(x).__name__, np.asarray(x.cpu() if hasattr(x, "cpu") else x))
    return x


def _as_numpy(x: Any) -> np.ndarray:
    return np.asarray(x.cpu() if hasattr(x, "cpu") else x)


def _run_side_by_side(case: Case, ours, ref, mode: str, seed: int = 5) -> tuple[int, Any]:
    """Step both stacks with the same actions; compare every output and the wrappers' state.
    Return the number of episode ends seen, and what both refused (if they did) instead."""

    def same(a, b, where):
        assert_same(_plain(a), _plain(b), where, case.ignore)
        if case.state is not None:
            assert_same(_plain(case.state(ours)), _plain(case.state(ref)), f"{where}: wrapper state")

    same(ours.reset(seed=seed), ref.reset(seed=seed), "reset")
    ref.action_space.seed(seed)
    ends = 0
    for t in range(STEPS):
        actions = ref.action_space.sample()
        out = _outcome(ours.step, case.action(copy.deepcopy(actions)))
        want = _outcome(ref.step, case.action(copy.deepcopy(actions)))
        if isinstance(want, Refused) or isinstance(out, Refused):
            assert out == want, f"step {t}: vecenv gave {out!r}, gymnasium {want!r}"
            return ends, want  # the wrapper fails alike on both stacks: nothing more to step
        same(out, want, f"step {t}")
        ended = np.logical_or(_as_numpy(want[2]), _as_numpy(want[3]))
        ends += int(ended.sum())
        if mode == "disabled" and ended.any():
            got = ours.reset(options={"reset_mask": ended.copy()})
            same(got, ref.reset(options={"reset_mask": ended.copy()}), f"masked reset after step {t}")
    return ends, None


@dataclass(frozen=True)
class Refused:
    """A call that raised: the same class and message on both stacks count as the same result
    (e.g. NumpyToTorch cannot convert same-step autoreset's object array of final observations,
    on gymnasium's own vector envs too)."""

    kind: type
    message: str


def _outcome(call: Callable[..., Any], *args: Any) -> Any:
    try:
        return call(*args)
    except Exception as exc:  # compared with what gymnasium's stack raised
        return Refused(type(exc), str(exc))


def _skip_without(case: Case) -> None:
    missing = [m for m in case.needs if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"this wrapper needs {', '.join(missing)}, which is not installed")


def _params() -> list:
    out = []
    for name in sorted(CASES):
        for backend_name, mode in COMBOS:
            out.append(pytest.param(name, backend_name, mode, id=f"{name}-{backend_name}-{mode}"))
    return out


@pytest.mark.parametrize(("name", "backend_name", "mode"), _params())
def test_wrapper_matches_the_same_stack_on_gymnasium_sync(request, tmp_path, monkeypatch, name, backend_name, mode):
    case = CASES[name]
    _skip_without(case)
    use_backend(request, backend_name)
    if name == "HumanRendering":
        monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")  # a window without a display
    fns = [ENVS[case.env]] * NUM_ENVS
    ref_inner = gym.vector.SyncVectorEnv(fns, autoreset_mode=parse_autoreset_mode(mode))
    inner = make_backend(backend_name, fns, autoreset_mode=mode)
    try:
        try:
            ref = case.wrap(ref_inner, tmp_path / "gymnasium")
        except Exception as refused:  # gymnasium refuses this mode: the same refusal on vecenv
            with pytest.raises(type(refused)) as ours_refused:
                case.wrap(inner, tmp_path / "vecenv")
            assert str(ours_refused.value) == str(refused)
            return
        ours = case.wrap(inner, tmp_path / "vecenv")
        assert ours.observation_space == ref.observation_space
        assert ours.action_space == ref.action_space
        assert ours.single_observation_space == ref.single_observation_space
        assert ours.single_action_space == ref.single_action_space
        assert ours.metadata["autoreset_mode"] == ref.metadata["autoreset_mode"] == parse_autoreset_mode(mode)
        ends, refused = _run_side_by_side(case, ours, ref, mode)
        assert ends > 0 or refused, "the comparison must cover episode ends"
        ours.close()
        ref.close()
        if name == "RecordVideo":  # the same clips, frame for frame (compared above), and names
            written = sorted(os.listdir(tmp_path / "vecenv"))
            assert written == sorted(os.listdir(tmp_path / "gymnasium"))
            assert written and all(f.endswith(".mp4") for f in written)
    finally:
        inner.close()
        ref_inner.close()


def _finish(ours, ref) -> None:
    """End what a wrapper still holds without closing the vector env under it."""
    for env in (ours, ref):
        if getattr(env, "recording", False):  # RecordVideo: write the clip being recorded
            env.stop_recording()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind", sorted(ENVS))
def test_wrappers_on_ray(request, tmp_path, kind):
    """Every wrapper of one env kind in turn over one Ray vector env, each against a fresh
    gymnasium stack (the same comparison as above; one Ray env per kind keeps it quick)."""
    names = [n for n in sorted(CASES) if CASES[n].env == kind
             and all(importlib.util.find_spec(m) is not None for m in CASES[n].needs)]
    if not names:
        pytest.skip(f"the wrappers on {kind} need packages that are not installed")
    use_backend(request, "ray")
    fns = [ENVS[kind]] * NUM_ENVS
    # every wrapper is kept until the Ray env is closed: gymnasium before 1.3 closes the vector
    # env under a wrapper when the wrapper is collected
    wrapped = []
    with make_backend("ray", fns) as inner:
        for name in names:
            case = CASES[name]
            ref_inner = gym.vector.SyncVectorEnv(fns)
            try:
                ref = case.wrap(ref_inner, tmp_path / name / "gymnasium")
                ours = case.wrap(inner, tmp_path / name / "vecenv")
                wrapped.append(ours)
                assert ours.observation_space == ref.observation_space, name
                assert ours.action_space == ref.action_space, name
                try:
                    ends, refused = _run_side_by_side(case, ours, ref, "next_step")
                except AssertionError as exc:
                    raise AssertionError(f"{name}: {exc}") from exc
                assert ends > 0 or refused, name
                _finish(ours, ref)
            finally:
                ref_inner.close()
            if name == "RecordVideo":
                written = sorted(os.listdir(tmp_path / name / "vecenv"))
                assert written and written == sorted(os.listdir(tmp_path / name / "gymnasium"))


def test_the_comparison_sees_a_difference(tmp_path):
    """The runner is not blind: a stack whose wrapper differs from the reference's fails it."""
    case = CASES["TransformReward"]
    fns = [ENVS[case.env]] * 2
    ref = case.wrap(gym.vector.SyncVectorEnv(fns), tmp_path)
    with make_backend("serial", fns) as inner:
        ours = wv.TransformReward(inner, lambda r: 2 * r + 1e-9)
        with pytest.raises(AssertionError, match="step 0"):
            _run_side_by_side(case, ours, ref, "next_step")
        raising = wv.TransformReward(inner, lambda r: r / 0 if r.dtype == object else 1 // 0)
        with pytest.raises(AssertionError, match="step 0: vecenv gave Refused"):
            _run_side_by_side(case, raising, ref, "next_step")
    ref.close()
