"""``vecenv check``: run an env briefly through every backend and say what would go wrong.

Each finding is ``ok``, ``info``, ``warning`` or ``problem``; problems are what break or silently
corrupt a long vectorized run: a factory that cannot reach a spawned worker, copies with
different spaces, observations outside the declared space, resets or steps that do not repeat
under a seed, info values whose type changes, a backend that fails or disagrees with serial.

:func:`check_env` runs the checks in order; the checks themselves live in
:mod:`~vecenv.check.probe` (pickling and the spawned process),
:mod:`~vecenv.check.rollout` (copies, spaces and a seeded rollout),
:mod:`~vecenv.check.backends` (every backend),
:mod:`~vecenv.check.calibration` (the machine calibration the recommendation uses) and
:mod:`~vecenv.check.recommend` (the recommended backend), on top of :mod:`~vecenv.check.values`
(observation and info inspection); the report and its output formats are in
:mod:`~vecenv.check.report`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import gymnasium as gym

from vecenv.bench.contenders import default_backends
from vecenv.bench.envs import EnvTarget, named_factory, resolve_env
from vecenv.check.backends import check_backends
from vecenv.check.calibration import check_calibration
from vecenv.check.probe import check_pickle
from vecenv.check.recommend import recommend_backend
from vecenv.check.report import CheckReport, Finding, format_report, report_to_json
from vecenv.check.rollout import build_copies, check_rollout, check_spaces

__all__ = ["CheckReport", "Finding", "check_env", "format_report", "report_to_json"]


def check_env(env: str | EnvTarget | Callable[[], gym.Env], *, num_envs: int = 4, steps: int = 200,
              seed: int = 0, backends: Sequence[str] | None = None,
              env_kwargs: dict[str, Any] | None = None, spawn: bool = True,
              recalibrate: bool = False) -> CheckReport:
    """Check ``env`` (an id, ``module:callable``, :class:`EnvTarget` or a factory).

    Args:
        num_envs: copies to build (at least 2, so that copies can be compared).
        steps: steps per rollout and per backend.
        backends: vecenv backends to run (default: every available one but ray).
        env_kwargs: keyword arguments for ``gym.make`` or the factory.
        spawn: also build the env in a spawned process (catches factories that only work in the
            parent: unpicklable, or relying on state a fresh interpreter does not have).
        recalibrate: measure this machine's vecenv costs again (what the recommendation and
            ``backend="auto"`` use) before checking; saved only when the machine is quiet.
    """
    num_envs = max(2, int(num_envs))
    steps = max(1, int(steps))
    env_fn, name = _env_fn(env, env_kwargs)
    report = CheckReport(name, num_envs, steps)

    check_calibration(report, refresh=recalibrate)
    check_pickle(report, env_fn, spawn)
    envs = build_copies(report, env_fn, num_envs)
    if envs is None:
        return report
    try:
        same_spaces = check_spaces(report, envs)
        check_rollout(report, envs[0], envs[1] if same_spaces else None, steps, seed)
    finally:
        _close_all(envs)
    if not same_spaces:
        return report
    names = list(backends) if backends is not None else default_backends()
    check_backends(report, env_fn, names, num_envs, steps, seed)
    recommend_backend(report)
    return report


def _close_all(envs: list[gym.Env]) -> None:
    """Close every env, ignoring errors."""
    for e in envs:
        try:
            e.close()
        except Exception:
            pass


def _env_fn(env: Any, env_kwargs: dict[str, Any] | None) -> tuple[Callable[[], gym.Env], str]:
    """The factory a user would hand to ``vecenv.make`` for ``env``, and its label."""
    if isinstance(env, str):
        env = resolve_env(env, env_kwargs)
    if isinstance(env, EnvTarget):
        if env.kind == "factory":
            factory = named_factory(env.name)
            if env.kwargs:
                return partial(factory, **env.kwargs), env.name  # type: ignore[misc, arg-type]
            return factory, env.name  # type: ignore[return-value]
        return env.env_fn, env.name
    if callable(env):
        label = getattr(env, "__qualname__", None) or type(env).__name__
        module = getattr(env, "__module__", None)
        if env_kwargs:
            env = partial(env, **env_kwargs)
        return env, f"{module}:{label}" if module else label
    raise TypeError(f"expected an env id, module:callable or a callable returning an env, got {env!r}")
