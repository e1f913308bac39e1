"""``vecenv check``: run an env briefly through every backend and say what would go wrong.

Each finding is ``ok``, ``info``, ``warning`` or ``problem``; problems are what break or silently
corrupt a long vectorized run. :func:`check_env` runs the checks in order: those of one process
in :mod:`~vecenv.check.rollout`; here, the report and those that run the env elsewhere (a
spawned process, every backend), the machine calibration and the recommended backend.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import pickle
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import cloudpickle
import gymnasium as gym

import vecenv
from vecenv.bench.contenders import action_pool, default_backends, first_line
from vecenv.bench.envs import EnvTarget, named_factory, resolve_env
from vecenv.check import rollout
from vecenv.check.rollout import digest, size_text
from vecenv.layout import EnvProbe, decide, describe_costs, machine_costs
from vecenv.make import usable_cores
from vecenv.policy import FailurePolicy

__all__ = ["CheckReport", "Finding", "check_env", "format_report", "report_to_json"]

JSON_SCHEMA = "vecenv-check/1"
#: seconds the spawned-process probe may take
SPAWN_TIMEOUT = 60.0
#: seconds one backend may spend stepping in a check
BACKEND_SECONDS = 3.0
#: a threaded run this much faster than serial means the step releases the GIL
THREAD_SPEEDUP = 1.3
#: a measured backend this much faster than the rule's choice overrides the rule
MEASURED_LEAD = 1.5


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
              recalibrate: bool = False, max_episodes_per_env: int | None = None,
              max_worker_memory: int | str | None = None) -> CheckReport:
    """Check ``env`` (an id, ``module:callable``, :class:`EnvTarget` or a factory): ``num_envs``
    copies (at least 2, to compare them), ``steps`` per rollout and per backend, ``backends``
    (default: every available one but ray); ``spawn`` also builds the env in a spawned process;
    ``recalibrate`` measures the machine's vecenv costs again first (saved only when quiet).
    ``max_episodes_per_env`` and ``max_worker_memory`` are given to the process backend's run,
    whose report counts the envs recycled (``infos["recycled"]``)."""
    recycling = {k: v for k, v in (("max_episodes_per_env", max_episodes_per_env),
                                   ("max_worker_memory", max_worker_memory)) if v is not None}
    FailurePolicy(max_episodes_per_env=max_episodes_per_env, max_worker_memory=max_worker_memory)  # refused up front
    env_fn, name = _env_fn(env, env_kwargs)
    report = CheckReport(name, max(2, int(num_envs)), max(1, int(steps)))
    check_calibration(report, refresh=recalibrate)
    check_pickle(report, env_fn, spawn)
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
    check_backends(report, env_fn, names, report.num_envs, report.steps, seed, recycling)
    recommend_backend(report)
    return report


def _env_fn(env: Any, env_kwargs: dict[str, Any] | None) -> tuple[Callable[[], gym.Env], str]:
    """The factory a user would hand to ``vecenv.make`` for ``env``, and its label."""
    if isinstance(env, str):
        env = resolve_env(env, env_kwargs)
    if isinstance(env, EnvTarget):
        if env.kind != "factory":
            return env.env_fn, env.name
        factory: Any = named_factory(env.name)
        return (partial(factory, **env.kwargs) if env.kwargs else factory), env.name
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


# ==================================================================== a spawned process
def _spawn_probe(payload: bytes, conn: Any) -> None:
    """Run in a spawned process: rebuild the factory, make the env, reset it, report back."""
    try:
        env = cloudpickle.loads(payload)()
        try:
            env.reset(seed=0)
            conn.send(("ok", str(env.observation_space)))
        finally:
            env.close()
    except BaseException as exc:  # report anything, including SystemExit from the env
        conn.send(("error", first_line(exc)))
    finally:
        conn.close()


def spawn_probe(env_fn: Callable[[], gym.Env], timeout: float = SPAWN_TIMEOUT) -> str | None:
    """Build and reset the env in a freshly spawned process; the error in words, or None."""
    payload = cloudpickle.dumps(env_fn)
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_spawn_probe, args=(payload, child), daemon=True, name="vecenv-check-spawn")
    try:
        proc.start()
        child.close()
        if not parent.poll(timeout):
            return f"the spawned process gave no answer within {timeout:g} s"
        try:
            status, detail = parent.recv()
        except EOFError:
            proc.join(5)
            return f"the spawned process died (exit code {proc.exitcode})"
        return None if status == "ok" else detail
    finally:
        parent.close()
        proc.join(5)
        if proc.is_alive():
            proc.kill()
            proc.join(5)


def check_pickle(report: CheckReport, env_fn: Callable, spawn: bool) -> None:
    """Add the ``pickle`` findings: the factory pickles, and (with ``spawn``) works when spawned."""
    plain_error = cloud_error = None
    try:
        pickle.dumps(env_fn)
    except Exception as exc:
        plain_error = first_line(exc)
    try:
        cloudpickle.dumps(env_fn)
    except Exception as exc:
        cloud_error = first_line(exc)
    if cloud_error is not None:
        report.add(
            "problem", "pickle",
            f"the env factory cannot be pickled, so it cannot reach spawned or forkserver worker "
            "processes (the default start method on macOS and Windows, and on Linux from Python 3.14) "
            f"(pickle: {plain_error}; cloudpickle: {cloud_error}). Make it a module-level function "
            "or class that holds no locks, open files, sockets or live envs.",
        )
        return
    if plain_error is not None:
        report.add(
            "warning", "pickle",
            f"the env factory pickles only with cloudpickle (pickle: {plain_error}); vecenv and "
            "gymnasium use cloudpickle, but code passing it to multiprocessing directly will fail",
        )
    if not spawn:
        report.add("ok", "pickle", "the env factory pickles" + (" with cloudpickle" if plain_error else ""))
        return
    error = spawn_probe(env_fn)
    if error is not None:
        report.add(
            "problem", "pickle",
            f"the env factory pickles but fails in a freshly spawned process: {error}. Spawned "
            "workers (the default on macOS and Windows) start from a clean interpreter: register "
            "the env and import what it needs at module level of an importable module.",
        )
    else:
        report.add("ok", "pickle", "the env factory pickles and builds the env in a spawned process")


# ==================================================================== backends
def check_backends(report: CheckReport, env_fn: Callable, names: Sequence[str], n: int, steps: int,
                   seed: int, recycling: dict[str, Any] | None = None) -> None:
    """Run ``n`` copies through each backend in ``names``, filling ``report.backends``;
    ``recycling`` (the recycling options) on the process backend only."""
    reference: list[bytes] | None = None
    reference_name = ""
    for backend in names:
        entry: dict[str, Any] = {"steps_per_s": None, "num_workers": None, "error": None}
        report.backends[backend] = entry
        try:
            done, digests = _run_backend(entry, env_fn, backend, n, steps, seed,
                                         recycling if backend == "process" else None)
        except Exception as exc:
            entry["error"] = first_line(exc)
            report.add("problem", f"backend:{backend}", f"backend {backend!r} failed: {entry['error']}")
            continue
        workers = entry["num_workers"]
        report.add(
            "ok", f"backend:{backend}",
            f"backend {backend!r} ran {done} steps of {n} envs: {entry['steps_per_s']:,.0f} env steps/s"
            + (f" ({workers} workers)" if workers and workers > 1 else "")
            + (f"; {entry['recycled']} env(s) recycled" if "recycled" in entry else ""),
        )
        if recycling and backend == "process":
            continue  # a rebuilt env's seed is its own: not compared with the others
        if reference is None:
            reference, reference_name = digests, backend
            continue
        pairs = enumerate(zip(reference, digests, strict=False))
        mismatch = next((i for i, (a, b) in pairs if a != b), None)
        if mismatch is not None:
            when = "after reset" if mismatch == 0 else f"at step {mismatch - 1}"
            report.add(
                "problem", f"backend:{backend}",
                f"backend {backend!r} gave different observations from {reference_name!r} {when} "
                "under the same seed and actions: the env's results depend on where it runs",
            )


def _run_backend(entry: dict[str, Any], env_fn: Callable, backend: str, n: int, steps: int,
                 seed: int, recycling: dict[str, Any] | None = None) -> tuple[int, list[bytes]]:
    """Reset and step ``n`` copies on ``backend`` (within :data:`BACKEND_SECONDS`), filling
    ``entry`` (with ``recycling``: also how many envs were recycled); the vector steps done and
    the digests of the observations after reset and steps."""
    digests: list[bytes] = []
    envs = vecenv.make(env_fn, n, backend=backend, **(recycling or {}))
    if recycling:
        entry["recycled"] = 0
    try:
        entry["num_workers"] = getattr(envs, "num_workers", None)
        obs, _ = envs.reset(seed=seed)
        digests.append(digest(obs).digest())
        batched = action_pool(envs.single_action_space, n, seed, size=steps)
        done, t0 = 0, time.perf_counter()
        for t in range(steps):
            obs, _, _, _, infos = envs.step(batched[t])
            digests.append(digest(obs).digest())
            if recycling and "_recycled" in infos:
                entry["recycled"] += int(infos["_recycled"].sum())
            done += 1
            if time.perf_counter() - t0 > BACKEND_SECONDS:
                break
        elapsed = time.perf_counter() - t0
        entry["steps_per_s"] = done * n / elapsed if elapsed > 0 else math.inf
        return done, digests
    finally:
        with contextlib.suppress(Exception):
            envs.close()


# ==================================================================== calibration and recommendation
def check_calibration(report: CheckReport, refresh: bool = False) -> None:
    """Add the calibration as an ``info`` finding (a ``warning`` too when it is contended);
    ``refresh`` measures the machine again first (``vecenv check --recalibrate``)."""
    try:
        costs = machine_costs(refresh=refresh)
    except Exception as exc:  # the check goes on; the recommendation reports its own failure
        report.add("warning", "calibration", f"the machine could not be calibrated ({type(exc).__name__}: {exc})")
        return
    report.add(
        "info", "calibration",
        f"machine calibration: crossing {costs.process_us[0]:.1f} µs (process), "
        f"{costs.inline_us[0]:.1f} µs (inline, 2 groups); {describe_costs(costs)}",
    )
    if costs.contended:
        report.add(
            "warning", "calibration",
            "the machine calibration was measured while other work ran or its trials disagreed, "
            "so its crossings may read slow and the recommendation lean to serial; it is not saved: "
            "the next run measures again (or run with --recalibrate on a quiet machine)",
        )


def recommend_backend(report: CheckReport) -> None:
    """Set ``report.recommendation`` and ``report.reason`` from the step cost and the backends."""
    ran = {b: e["steps_per_s"] for b, e in report.backends.items() if e["steps_per_s"]}
    if not ran:
        report.recommendation, report.reason = None, "no backend ran the env"
        return
    measured = " (measured here: " + ", ".join(f"{b} {r:,.0f}" for b, r in ran.items()) + " env steps/s)"
    best = max(ran, key=ran.__getitem__)
    serial, thread = ran.get("serial"), ran.get("thread")
    if serial and thread and thread > THREAD_SPEEDUP * serial:
        report.recommendation = "thread"
        report.reason = (
            f"threads ran {thread / serial:.1f}× faster than serial, so the step releases the "
            f"GIL; threads share the cores without copying observations between processes{measured}"
        )
        return
    if report.step_us is None:
        report.recommendation, report.reason = best, f"it ran fastest here{measured}"
        return
    probe = EnvProbe(report.step_us, 1.0, report.obs_bytes or 0)
    layout = decide(probe, machine_costs(), report.num_envs, usable_cores())
    choice = layout.backend
    if choice in ran and best != choice and ran[best] > MEASURED_LEAD * ran[choice]:
        report.recommendation = best
        report.reason = (
            f"the rule picks {layout.name} ({layout.reason}), but {best} ran "
            f"{ran[best] / ran[choice]:.1f}× faster here{measured}"
        )
        return
    report.recommendation = choice
    options = ", ".join(f"{k}={v!r}" for k, v in layout.kwargs().items())
    how = f"backend={choice!r}" + (f", {options}" if options else "")
    obs = size_text(report.obs_bytes or 0)
    report.reason = f"{how} — {layout.reason}; observation {obs}; the rule vecenv.make's backend='auto' follows{measured}"
