"""The single-process checks of ``vecenv check``: copies build and share spaces, and a seeded
rollout of two copies in lockstep stays in the observation space, repeats, and keeps each info
value's type; with what they use to hash, size and describe observations and infos."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from vecenv.bench.contenders import first_line
from vecenv.infos import why_not_shared

if TYPE_CHECKING:
    from vecenv.check import CheckReport


def digest(value: Any, h: Any = None) -> Any:
    """A hash of a (nested) observation: dtype, shape and bytes of every leaf."""
    h = h or hashlib.blake2b(digest_size=16)
    if isinstance(value, dict):
        for k in sorted(value, key=str):
            h.update(repr(k).encode())
            digest(value[k], h)
    elif isinstance(value, (tuple, list)):
        h.update(b"(")
        for v in value:
            digest(v, h)
        h.update(b")")
    else:
        a = np.asarray(value)
        if a.dtype == object:
            h.update(repr(value).encode())
        else:
            h.update(f"{a.dtype}{a.shape}".encode())
            h.update(np.ascontiguousarray(a).tobytes())
    return h


def same(a: Any, b: Any) -> bool:
    """Whether two (nested) observations have the same dtypes, shapes and bytes."""
    return digest(a).digest() == digest(b).digest()


def nbytes(value: Any) -> int:
    """The bytes of array data in a (nested) observation; object arrays count as 0."""
    if isinstance(value, dict):
        return sum(nbytes(v) for v in value.values())
    if isinstance(value, (tuple, list)):
        return sum(nbytes(v) for v in value)
    a = np.asarray(value)
    return int(a.nbytes) if a.dtype != object else 0


def describe(value: Any) -> str:
    """The structure of a (nested) observation in words, e.g. ``uint8 array (84, 84)``."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {describe(v)}" for k, v in value.items()) + "}"
    if isinstance(value, tuple):
        return "(" + ", ".join(describe(v) for v in value) + ")"
    if isinstance(value, np.ndarray):
        return f"{value.dtype} array {value.shape}"
    return type(value).__name__


def size_text(n: int) -> str:
    """A byte count in B, KB or MB."""
    if n < 1024:
        return f"{n:.0f} B"
    return f"{n / 1024:.1f} KB" if n < 1024**2 else f"{n / 1024**2:.1f} MB"


def why_outside(space: gym.Space, obs: Any, path: str = "observation") -> str:
    """In plain words, why ``obs`` is not in ``space``."""
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(obs, dict):
            return f"{path} is a {type(obs).__name__}, the space is a Dict"
        if set(obs) != set(space.spaces):
            return f"{path} has keys {sorted(obs)}, the space has {sorted(space.spaces)}"
        for k, sub in space.spaces.items():
            if not sub.contains(obs[k]):
                return why_outside(sub, obs[k], f"{path}[{k!r}]")
    if isinstance(space, gym.spaces.Tuple):
        if not isinstance(obs, tuple) or len(obs) != len(space.spaces):
            return f"{path} is {describe(obs)}, the space is a Tuple of {len(space.spaces)}"
        for i, sub in enumerate(space.spaces):
            if not sub.contains(obs[i]):
                return why_outside(sub, obs[i], f"{path}[{i}]")
    if isinstance(space, gym.spaces.Box):
        why = _why_outside_box(space, obs, path)
        if why is not None:
            return why
    if isinstance(space, gym.spaces.Discrete):
        return f"{path} = {obs!r} ({type(obs).__name__}) is not an integer in [{space.start}, {space.start + space.n})"
    return f"{path} = {describe(obs)} is not in {space}"


def _why_outside_box(space: gym.spaces.Box, obs: Any, path: str) -> str | None:
    """Why ``obs`` is not in the Box ``space``, or None when no reason is found."""
    if not isinstance(obs, np.ndarray):
        return f"{path} is a {type(obs).__name__}, not a numpy array of {space.dtype}"
    if obs.shape != space.shape:
        return f"{path} has shape {obs.shape}, the space {space.shape}"
    if not np.can_cast(obs.dtype, space.dtype):
        return f"{path} has dtype {obs.dtype}, the space {space.dtype} (cast it in the env)"
    out = (obs < space.low) | (obs > space.high)
    if out.any():
        i = tuple(int(x) for x in np.argwhere(out)[0])
        return (
            f"{path}{list(i)} = {obs[i].item()!r} is outside "
            f"[{space.low[i].item()!r}, {space.high[i].item()!r}] "
            f"({int(out.sum())} values out of bounds)"
        )
    if obs.dtype.kind == "f" and np.isnan(obs).any():
        return f"{path} contains NaN"
    return None


def _signature(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"ndarray[{value.dtype}, shape {value.shape}]"
    if isinstance(value, np.generic):
        return f"numpy {value.dtype}"
    return type(value).__name__


class InfoTypes:
    """Remembers the first type seen for each info key (nested dicts by path)."""

    def __init__(self) -> None:
        self.first: dict[str, tuple[str, str]] = {}
        self.changes: dict[str, tuple[str, str, str, str]] = {}
        #: info key path -> why its info travels pickled rather than in shared memory
        self.unshared: dict[str, str] = {}
        self.seen_any = False

    def see(self, info: dict[str, Any], when: str, prefix: str = "") -> None:
        if not prefix and info:
            self.seen_any = True
            for path, why in why_not_shared(info).items():
                self.unshared.setdefault(path, why)
        for key, value in info.items():
            path = f"{prefix}[{key!r}]"
            if isinstance(value, dict):
                self.see(value, when, path)
                continue
            sig = _signature(value)
            seen = self.first.setdefault(path, (sig, when))
            if seen[0] != sig and path not in self.changes:
                self.changes[path] = (seen[0], seen[1], sig, when)


def build_copies(report: CheckReport, env_fn: Callable, n: int) -> list[gym.Env] | None:
    """``n`` copies of the env, or None (with a ``make`` problem) when one fails to build."""
    envs: list[gym.Env] = []
    try:
        for _ in range(n):
            envs.append(env_fn())
    except Exception as exc:
        report.add("problem", "make", f"building copy {len(envs)} of the env failed: {first_line(exc)}")
        for e in envs:
            e.close()
        return None
    return envs


def check_spaces(report: CheckReport, envs: list[gym.Env]) -> bool:
    """Compare every copy's spaces with copy 0's; True when they all match."""
    first = envs[0]
    differ = []
    for i, e in enumerate(envs[1:], 1):
        for kind in ("observation", "action"):
            mine, theirs = getattr(e, f"{kind}_space"), getattr(first, f"{kind}_space")
            if mine != theirs:
                differ.append(f"copy {i}'s {kind} space is {mine}, copy 0's {theirs}")
    if differ:
        report.add(
            "problem", "spaces",
            "copies of the env have different spaces, so they cannot be batched: " + "; ".join(differ[:3])
            + ("" if len(differ) <= 3 else f" (and {len(differ) - 3} more)"),
        )
        return False
    report.add(
        "ok", "spaces",
        f"all {len(envs)} copies have the same spaces: observation {first.observation_space}, "
        f"action {first.action_space}",
    )
    return True


@dataclass
class _Rollout:
    """What a seeded rollout saw: the first observation, whether resets repeated, and so on."""

    first_obs: Any
    reset_same: bool
    copies_same: bool
    #: where and why an observation first fell outside the space
    outside: str | None = None
    #: the first step at which the two copies differed
    diverged: int | None = None
    infos: InfoTypes = field(default_factory=InfoTypes)
    step_times: list[float] = field(default_factory=list)

    def note_obs(self, space: gym.Space, obs: Any, when: str) -> None:
        """Remember the first observation outside ``space``."""
        if self.outside is None and not space.contains(obs):
            self.outside = f"{when}: {why_outside(space, obs)}"


def check_rollout(report: CheckReport, a: gym.Env, b: gym.Env | None, steps: int, seed: int) -> None:
    """Reset twice under one seed, then step two copies in lockstep with the same actions.

    Without ``b`` (copies that cannot be compared), only ``a`` is checked.
    """
    run = _reset_twice(report, a, b, seed)
    if run is None:
        return
    _step_lockstep(report, run, a, b, steps, seed)
    if run.outside is not None:
        report.add(
            "problem", "observation",
            f"an observation is outside the declared observation space {run.outside}. Batch buffers "
            "are built from the space, so values get cast or clipped silently, and SB3 and "
            "gymnasium's checks reject it.",
        )
    else:
        report.add("ok", "observation", f"observations stay inside the observation space (reset and {steps} steps)")
    if run.diverged is not None:
        report.add(
            "problem", "determinism",
            f"two copies seeded alike and given the same actions diverged at step {run.diverged}: "
            "transitions depend on something other than the seed and the actions, so runs "
            "cannot be reproduced",
        )
    elif run.reset_same and run.copies_same:
        both = ", and two copies given the same seed and actions stay identical"
        report.add("ok", "determinism", f"reset(seed={seed}) repeats" + (both if b is not None else ""))
    _report_infos(report, run.infos)
    if run.step_times:  # the median: robust to the odd preemption on a busy machine
        report.step_us = float(np.median(run.step_times)) * 1e6
        report.add(
            "info", "cost",
            f"a step costs {report.step_us:,.1f} µs (median); an observation is "
            f"{size_text(report.obs_bytes or 0)} ({describe(run.first_obs)})",
        )


def _reset_twice(report: CheckReport, a: gym.Env, b: gym.Env | None, seed: int) -> _Rollout | None:
    """Reset ``a`` twice and ``b`` once under ``seed``; None (with a problem) if a reset raised."""
    try:
        obs_a, info_a = a.reset(seed=seed)
        again, _ = a.reset(seed=seed)
        obs_b, _ = b.reset(seed=seed) if b is not None else (obs_a, None)
    except Exception as exc:
        report.add("problem", "reset", f"reset(seed={seed}) raised {first_line(exc)}")
        return None
    run = _Rollout(obs_a, reset_same=same(obs_a, again), copies_same=same(obs_a, obs_b))
    run.note_obs(a.observation_space, obs_a, "after reset")
    if not run.reset_same:
        report.add(
            "problem", "determinism",
            f"two reset(seed={seed}) calls gave different observations: the reset does not draw "
            "only from self.np_random (call super().reset(seed=seed) and use self.np_random)",
        )
    elif not run.copies_same:
        report.add(
            "problem", "determinism",
            f"two copies reset with seed={seed} gave different observations: they share or read "
            "state outside self.np_random",
        )
    run.infos.see(info_a, "reset")
    report.obs_bytes = nbytes(obs_a)
    return run


def _step_lockstep(report: CheckReport, run: _Rollout, a: gym.Env, b: gym.Env | None, steps: int,
                   seed: int) -> None:
    """Step ``a`` and ``b`` with the same seeded actions, noting into ``run`` what they do."""
    space = a.observation_space
    actions = a.action_space
    actions.seed(seed)
    for t in range(steps):
        action = actions.sample()
        try:
            t0 = time.perf_counter()
            obs_a, r_a, term_a, trunc_a, info_a = a.step(action)
            run.step_times.append(time.perf_counter() - t0)
            obs_b, r_b, term_b, trunc_b, _ = (
                b.step(action) if b is not None else (obs_a, r_a, term_a, trunc_a, None)
            )
        except Exception as exc:
            report.add("problem", "step", f"step {t} raised {first_line(exc)}")
            break
        run.infos.see(info_a, f"step {t}")
        run.note_obs(space, obs_a, f"after step {t}")
        if run.diverged is None and run.reset_same and run.copies_same and not (
            same(obs_a, obs_b) and r_a == r_b and term_a == term_b and trunc_a == trunc_b
        ):
            run.diverged = t
        if term_a or trunc_a:
            obs_a, info_a = a.reset()
            if b is not None:
                b.reset()
            run.infos.see(info_a, f"reset after step {t}")
            run.note_obs(space, obs_a, f"after an autoreset at step {t}")


def _report_infos(report: CheckReport, infos: InfoTypes) -> None:
    if infos.changes:
        parts = [
            f"info{path} is {first} at {when_first} but {later} at {when}"
            for path, (first, when_first, later, when) in list(infos.changes.items())[:3]
        ]
        report.add(
            "problem", "infos",
            "info values change type: " + "; ".join(parts) + ". Vector envs batch each info key "
            "into an array of the first value's type, so later values are silently cast (0.5 "
            "becomes 0) or turned into objects; give each key one type.",
        )
    else:
        keys = ", ".join(sorted(p.strip("[]'") for p in infos.first)) or "none"
        report.add("ok", "infos", f"info values keep their types (keys: {keys})")
    if infos.unshared:
        parts = [f"info{path}: {why}" if path else why for path, why in list(infos.unshared.items())[:4]]
        report.add("info", "infos",
                   "on the process backend, infos holding these travel pickled, a message per step "
                   "(slower, never wrong): " + "; ".join(parts))
    elif infos.seen_any:
        report.add("ok", "infos", "the infos stay in shared memory on the process backend (no "
                   "message per step)")
