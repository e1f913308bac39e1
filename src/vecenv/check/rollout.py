"""The single-env checks of ``vecenv check``: copies build and share spaces, and a seeded
rollout of two copies in lockstep stays in the observation space, repeats, and keeps each info
value's type."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from vecenv.bench.contenders import first_line
from vecenv.check import CheckReport
from vecenv.check.values import InfoTypes, describe, nbytes, same, size_text, why_outside


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
        if e.observation_space != first.observation_space:
            differ.append(f"copy {i}'s observation space is {e.observation_space}, copy 0's {first.observation_space}")
        if e.action_space != first.action_space:
            differ.append(f"copy {i}'s action space is {e.action_space}, copy 0's {first.action_space}")
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
    space = a.observation_space
    try:
        obs_a, info_a = a.reset(seed=seed)
        again, _ = a.reset(seed=seed)
        obs_b, _ = b.reset(seed=seed) if b is not None else (obs_a, None)
    except Exception as exc:
        report.add("problem", "reset", f"reset(seed={seed}) raised {first_line(exc)}")
        return None
    outside = None if space.contains(obs_a) else f"after reset: {why_outside(space, obs_a)}"
    run = _Rollout(obs_a, reset_same=same(obs_a, again), copies_same=same(obs_a, obs_b), outside=outside)
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
