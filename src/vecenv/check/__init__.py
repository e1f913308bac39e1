"""``vecenv check``: run an env briefly through every backend and say what would go wrong.

Each finding is ``ok``, ``info``, ``warning`` or ``problem``; problems are what break or silently
corrupt a long vectorized run. :func:`check_env` runs the checks in order: those of one process
in :mod:`~vecenv.check.rollout`, those that run the env elsewhere in :mod:`~vecenv.check.backends`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import gymnasium as gym

from vecenv.bench.contenders import default_backends
from vecenv.bench.envs import EnvTarget, named_factory, resolve_env

__all__ = ["CheckReport", "Finding", "check_env", "format_report", "report_to_json"]

JSON_SCHEMA = "vecenv-check/1"


@dataclass
class Finding:
    """One line of the report."""

    level: str  # "ok" | "info" | "warning" | "problem"
    topic: str
    message: str


@dataclass
class CheckReport:
    """Everything ``vecenv check`` found about one env."""

    env: str
    num_envs: int
    steps: int
    findings: list[Finding] = field(default_factory=list)
    step_us: float | None = None
    obs_bytes: int | None = None
    #: backend -> {"steps_per_s": float | None, "num_workers": int | None, "error": str | None}
    backends: dict[str, dict[str, Any]] = field(default_factory=dict)
    recommendation: str | None = None
    reason: str = ""

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "problem"]

    def add(self, level: str, topic: str, message: str) -> None:
        self.findings.append(Finding(level, topic, message))


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
    from vecenv.check import backends as runs
    from vecenv.check import rollout

    env_fn, name = _env_fn(env, env_kwargs)
    report = CheckReport(name, max(2, int(num_envs)), max(1, int(steps)))
    runs.check_calibration(report, refresh=recalibrate)
    runs.check_pickle(report, env_fn, spawn)
    envs = rollout.build_copies(report, env_fn, report.num_envs)
    if envs is None:
        return report
    try:
        same_spaces = rollout.check_spaces(report, envs)
        rollout.check_rollout(report, envs[0], envs[1] if same_spaces else None, report.steps, seed)
    finally:
        for e in envs:
            with contextlib.suppress(Exception):
                e.close()
    if not same_spaces:
        return report
    names = list(backends) if backends is not None else default_backends()
    runs.check_backends(report, env_fn, names, report.num_envs, report.steps, seed)
    runs.recommend_backend(report)
    return report


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


_MARK = {"ok": "ok", "info": "info", "warning": "WARNING", "problem": "PROBLEM"}


def format_report(report: CheckReport) -> str:
    """The report in plain words."""
    lines = [f"vecenv check {report.env} — {report.num_envs} copies, {report.steps} steps"]
    lines += [f"  {_MARK[f.level]:<8} {f.message}" for f in report.findings]
    if report.recommendation:
        lines.append(f"recommended backend: {report.recommendation} — {report.reason}")
    n = len(report.problems)
    lines.append("no problems found" if n == 0 else f"{n} problem{'s' if n > 1 else ''} found")
    return "\n".join(lines)


def report_to_json(report: CheckReport) -> dict[str, Any]:
    """The report as JSON-ready data."""
    from vecenv.bench.report import machine_info, versions

    return {
        "schema": JSON_SCHEMA,
        "env": report.env,
        "num_envs": report.num_envs,
        "steps": report.steps,
        "problems": len(report.problems),
        "findings": [f.__dict__ for f in report.findings],
        "step_us": report.step_us,
        "obs_bytes": report.obs_bytes,
        "backends": report.backends,
        "recommendation": {"backend": report.recommendation, "reason": report.reason},
        "machine": machine_info(),
        "versions": versions(),
    }
