"""``vecenv check``: run an env briefly through every backend and say what would go wrong.

Each finding is ``ok``, ``info``, ``warning`` or ``problem``; problems are what break or silently
corrupt a long vectorized run: a factory that cannot reach a spawned worker, copies with
different spaces, observations outside the declared space, resets or steps that do not repeat
under a seed, info values whose type changes, a backend that fails or disagrees with serial.
"""

from __future__ import annotations

import hashlib
import math
import multiprocessing
import pickle
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np

import vecenv
from vecenv.bench.contenders import action_pool, default_backends, first_line
from vecenv.bench.envs import EnvTarget, _factory, resolve_env
from vecenv.make import usable_cores

__all__ = ["CheckReport", "Finding", "check_env", "format_report", "report_to_json"]

JSON_SCHEMA = "vecenv-check/1"

#: below this many µs per env step, crossing a process boundary costs more than it saves
CHEAP_STEP_US = 20.0
#: a threaded run this much faster than serial means the step releases the GIL
THREAD_SPEEDUP = 1.3
#: seconds one backend may spend stepping in a check
BACKEND_SECONDS = 3.0
#: seconds the spawned-process probe may take
SPAWN_TIMEOUT = 60.0


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


# ==================================================================== helpers
def _digest(value: Any, h: Any = None) -> Any:
    """A hash of a (nested) observation: dtype, shape and bytes of every leaf."""
    h = h or hashlib.blake2b(digest_size=16)
    if isinstance(value, dict):
        for k in sorted(value, key=str):
            h.update(repr(k).encode())
            _digest(value[k], h)
    elif isinstance(value, (tuple, list)):
        h.update(b"(")
        for v in value:
            _digest(v, h)
        h.update(b")")
    else:
        a = np.asarray(value)
        if a.dtype == object:
            h.update(repr(value).encode())
        else:
            h.update(f"{a.dtype}{a.shape}".encode())
            h.update(np.ascontiguousarray(a).tobytes())
    return h


def _same(a: Any, b: Any) -> bool:
    return _digest(a).digest() == _digest(b).digest()


def _nbytes(value: Any) -> int:
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    if isinstance(value, (tuple, list)):
        return sum(_nbytes(v) for v in value)
    a = np.asarray(value)
    return int(a.nbytes) if a.dtype != object else 0


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_describe(v)}" for k, v in value.items()) + "}"
    if isinstance(value, tuple):
        return "(" + ", ".join(_describe(v) for v in value) + ")"
    if isinstance(value, np.ndarray):
        return f"{value.dtype} array {value.shape}"
    return type(value).__name__


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB"):
        if n < 1024 or unit == "MB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


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
            return f"{path} is {_describe(obs)}, the space is a Tuple of {len(space.spaces)}"
        for i, sub in enumerate(space.spaces):
            if not sub.contains(obs[i]):
                return why_outside(sub, obs[i], f"{path}[{i}]")
    if isinstance(space, gym.spaces.Box):
        if not isinstance(obs, np.ndarray):
            return f"{path} is a {type(obs).__name__}, not a numpy array of {space.dtype}"
        if obs.shape != space.shape:
            return f"{path} has shape {obs.shape}, the space {space.shape}"
        if not np.can_cast(obs.dtype, space.dtype):
            return f"{path} has dtype {obs.dtype}, the space {space.dtype} (cast it in the env)"
        low = obs < space.low
        high = obs > space.high
        if low.any() or high.any():
            idx = np.argwhere(low | high)[0]
            i = tuple(int(x) for x in idx)
            return (
                f"{path}{list(i)} = {obs[i].item()!r} is outside "
                f"[{space.low[i].item()!r}, {space.high[i].item()!r}] "
                f"({int((low | high).sum())} values out of bounds)"
            )
        if np.isnan(obs).any() if obs.dtype.kind == "f" else False:
            return f"{path} contains NaN"
    if isinstance(space, gym.spaces.Discrete):
        return f"{path} = {obs!r} ({type(obs).__name__}) is not an integer in [{space.start}, {space.start + space.n})"
    return f"{path} = {_describe(obs)} is not in {space}"


def _signature(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"ndarray[{value.dtype}, shape {value.shape}]"
    if isinstance(value, np.generic):
        return f"numpy {value.dtype}"
    return type(value).__name__


class _InfoTypes:
    """Remembers the first type seen for each info key (nested dicts by path)."""

    def __init__(self) -> None:
        self.first: dict[str, tuple[str, str]] = {}
        self.changes: dict[str, tuple[str, str, str, str]] = {}

    def see(self, info: dict[str, Any], when: str, prefix: str = "") -> None:
        for key, value in info.items():
            path = f"{prefix}[{key!r}]"
            if isinstance(value, dict):
                self.see(value, when, path)
                continue
            sig = _signature(value)
            seen = self.first.setdefault(path, (sig, when))
            if seen[0] != sig and path not in self.changes:
                self.changes[path] = (seen[0], seen[1], sig, when)


# ==================================================================== spawn probe
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


# ==================================================================== the check
def check_env(
    env: str | EnvTarget | Callable[[], gym.Env],
    *,
    num_envs: int = 4,
    steps: int = 200,
    seed: int = 0,
    backends: Sequence[str] | None = None,
    env_kwargs: dict[str, Any] | None = None,
    spawn: bool = True,
) -> CheckReport:
    """Check ``env`` (an id, ``module:callable``, :class:`EnvTarget` or a factory).

    Args:
        num_envs: copies to build (at least 2, so that copies can be compared).
        steps: steps per rollout and per backend.
        backends: vecenv backends to run (default: every available one but ray).
        env_kwargs: keyword arguments for ``gym.make`` or the factory.
        spawn: also build the env in a spawned process (catches factories that only work in the
            parent: unpicklable, or relying on state a fresh interpreter does not have).
    """
    num_envs = max(2, int(num_envs))
    steps = max(1, int(steps))
    env_fn, name = _env_fn(env, env_kwargs)
    report = CheckReport(name, num_envs, steps)

    _check_pickle(report, env_fn, spawn)
    envs = _build_copies(report, env_fn, num_envs)
    if envs is None:
        return report
    try:
        same_spaces = _check_spaces(report, envs)
        _check_rollout(report, envs[0], envs[1] if same_spaces else None, steps, seed)
    finally:
        for e in envs:
            try:
                e.close()
            except Exception:
                pass
    if not same_spaces:
        return report
    names = list(backends) if backends is not None else default_backends()
    _check_backends(report, env_fn, names, num_envs, steps, seed)
    _recommend(report)
    return report


def _env_fn(env: Any, env_kwargs: dict[str, Any] | None) -> tuple[Callable[[], gym.Env], str]:
    """The factory a user would hand to ``vecenv.make`` for ``env``, and its label."""
    if isinstance(env, str):
        env = resolve_env(env, env_kwargs)
    if isinstance(env, EnvTarget):
        if env.kind == "factory":
            factory = _factory(env.name)
            if env.kwargs:
                from functools import partial

                return partial(factory, **env.kwargs), env.name
            return factory, env.name
        return env.env_fn, env.name
    if callable(env):
        label = getattr(env, "__qualname__", None) or type(env).__name__
        module = getattr(env, "__module__", None)
        if env_kwargs:
            from functools import partial

            env = partial(env, **env_kwargs)
        return env, f"{module}:{label}" if module else label
    raise TypeError(f"expected an env id, module:callable or a callable returning an env, got {env!r}")


def _check_pickle(report: CheckReport, env_fn: Callable, spawn: bool) -> None:
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


def _build_copies(report: CheckReport, env_fn: Callable, n: int) -> list[gym.Env] | None:
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


def _check_spaces(report: CheckReport, envs: list[gym.Env]) -> bool:
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


def _check_rollout(report: CheckReport, a: gym.Env, b: gym.Env | None, steps: int, seed: int) -> None:
    """Reset twice under one seed, then step two copies in lockstep with the same actions.

    Without ``b`` (copies that cannot be compared), only ``a`` is checked.
    """
    space = a.observation_space
    outside: str | None = None
    infos = _InfoTypes()
    try:
        obs_a, info_a = a.reset(seed=seed)
        again, _ = a.reset(seed=seed)
        obs_b, _ = b.reset(seed=seed) if b is not None else (obs_a, None)
    except Exception as exc:
        report.add("problem", "reset", f"reset(seed={seed}) raised {first_line(exc)}")
        return
    if not space.contains(obs_a):
        outside = f"after reset: {why_outside(space, obs_a)}"
    reset_same = _same(obs_a, again)
    copies_same = _same(obs_a, obs_b)
    if not reset_same:
        report.add(
            "problem", "determinism",
            f"two reset(seed={seed}) calls gave different observations: the reset does not draw "
            "only from self.np_random (call super().reset(seed=seed) and use self.np_random)",
        )
    elif not copies_same:
        report.add(
            "problem", "determinism",
            f"two copies reset with seed={seed} gave different observations: they share or read "
            "state outside self.np_random",
        )
    infos.see(info_a, "reset")
    obs_report = obs_a
    report.obs_bytes = _nbytes(obs_a)

    actions = a.action_space
    actions.seed(seed)
    step_times: list[float] = []
    diverged = None
    for t in range(steps):
        action = actions.sample()
        try:
            t0 = time.perf_counter()
            obs_a, r_a, term_a, trunc_a, info_a = a.step(action)
            step_times.append(time.perf_counter() - t0)
            obs_b, r_b, term_b, trunc_b, _ = (
                b.step(action) if b is not None else (obs_a, r_a, term_a, trunc_a, None)
            )
        except Exception as exc:
            report.add("problem", "step", f"step {t} raised {first_line(exc)}")
            break
        infos.see(info_a, f"step {t}")
        if outside is None and not space.contains(obs_a):
            outside = f"after step {t}: {why_outside(space, obs_a)}"
        if diverged is None and reset_same and copies_same and not (
            _same(obs_a, obs_b) and r_a == r_b and term_a == term_b and trunc_a == trunc_b
        ):
            diverged = t
        if term_a or trunc_a:
            obs_a, info_a = a.reset()
            if b is not None:
                b.reset()
            infos.see(info_a, f"reset after step {t}")
            if outside is None and not space.contains(obs_a):
                outside = f"after an autoreset at step {t}: {why_outside(space, obs_a)}"
    if step_times:  # the median: robust to the odd preemption on a busy machine
        report.step_us = float(np.median(step_times)) * 1e6

    if outside is not None:
        report.add(
            "problem", "observation",
            f"an observation is outside the declared observation space {outside}. Batch buffers "
            "are built from the space, so values get cast or clipped silently, and SB3 and "
            "gymnasium's checks reject it.",
        )
    else:
        report.add("ok", "observation", f"observations stay inside the observation space (reset and {steps} steps)")
    if diverged is not None:
        report.add(
            "problem", "determinism",
            f"two copies seeded alike and given the same actions diverged at step {diverged}: "
            "transitions depend on something other than the seed and the actions, so runs "
            "cannot be reproduced",
        )
    elif reset_same and copies_same:
        report.add(
            "ok", "determinism",
            f"reset(seed={seed}) repeats" + (
                ", and two copies given the same seed and actions stay identical" if b is not None else ""
            ),
        )
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
    if report.step_us is not None:
        report.add(
            "info", "cost",
            f"a step costs {report.step_us:,.1f} µs (median); an observation is {_size(report.obs_bytes or 0)} "
            f"({_describe(obs_report)})",
        )


def _check_backends(
    report: CheckReport, env_fn: Callable, names: Sequence[str], n: int, steps: int, seed: int
) -> None:
    reference: list[bytes] | None = None
    for backend in names:
        entry: dict[str, Any] = {"steps_per_s": None, "num_workers": None, "error": None}
        report.backends[backend] = entry
        digests: list[bytes] = []
        envs = None
        try:
            envs = vecenv.make(env_fn, n, backend=backend)
            entry["num_workers"] = getattr(envs, "num_workers", None)
            obs, _ = envs.reset(seed=seed)
            digests.append(_digest(obs).digest())
            batched = action_pool(envs.single_action_space, n, seed, size=steps)
            done, t0 = 0, time.perf_counter()
            for t in range(steps):
                obs, *_ = envs.step(batched[t])
                digests.append(_digest(obs).digest())
                done += 1
                if time.perf_counter() - t0 > BACKEND_SECONDS:
                    break
            elapsed = time.perf_counter() - t0
            entry["steps_per_s"] = done * n / elapsed if elapsed > 0 else math.inf
        except Exception as exc:
            entry["error"] = first_line(exc)
            report.add("problem", f"backend:{backend}", f"backend {backend!r} failed: {entry['error']}")
            continue
        finally:
            if envs is not None:
                try:
                    envs.close()
                except Exception:
                    pass
        workers = entry["num_workers"]
        report.add(
            "ok", f"backend:{backend}",
            f"backend {backend!r} ran {done} steps of {n} envs: {entry['steps_per_s']:,.0f} env steps/s"
            + (f" ({workers} workers)" if workers and workers > 1 else ""),
        )
        if reference is None:
            reference = digests
            reference_name = backend
        else:
            k = min(len(reference), len(digests))
            mismatch = next((i for i in range(k) if reference[i] != digests[i]), None)
            if mismatch is not None:
                when = "after reset" if mismatch == 0 else f"at step {mismatch - 1}"
                report.add(
                    "problem", f"backend:{backend}",
                    f"backend {backend!r} gave different observations from {reference_name!r} {when} "
                    "under the same seed and actions: the env's results depend on where it runs",
                )


def _recommend(report: CheckReport) -> None:
    """Rule of thumb from the step cost, cross-checked with what the backends measured."""
    ran = {b: e["steps_per_s"] for b, e in report.backends.items() if e["steps_per_s"]}
    if not ran:
        report.recommendation, report.reason = None, "no backend ran the env"
        return
    step_us = report.step_us
    obs = _size(report.obs_bytes or 0)
    cores = usable_cores()
    measured = " (measured here: " + ", ".join(f"{b} {r:,.0f}" for b, r in ran.items()) + " env steps/s)"
    serial = ran.get("serial")
    thread = ran.get("thread")
    process = ran.get("process")
    best = max(ran, key=ran.__getitem__)
    if step_us is not None and step_us < CHEAP_STEP_US and serial:
        if best != "serial" and ran[best] > 1.5 * serial:
            report.recommendation = best
            report.reason = (
                f"a step costs only {step_us:.1f} µs, but {best} ran {ran[best] / serial:.1f}× "
                f"faster than serial here{measured}"
            )
            return
        report.recommendation = "serial"
        report.reason = (
            f"a step costs only {step_us:.1f} µs (observation {obs}), less than a round trip to "
            f"a worker, so stepping every env in the calling process is fastest{measured}"
        )
        return
    if serial and thread and thread > THREAD_SPEEDUP * serial:
        report.recommendation = "thread"
        report.reason = (
            f"threads ran {thread / serial:.1f}× faster than serial, so the step releases the "
            f"GIL; threads share the cores without copying observations between processes{measured}"
        )
        return
    cost = f"{step_us:,.0f} µs" if step_us is not None else "the step"
    if process and cores > 1:
        if serial and process < 0.9 * serial:
            report.recommendation = "serial"
            report.reason = (
                f"a step costs {cost}, enough for worker processes to pay off on {cores} idle "
                f"cores, but process ran slower than serial here (are the cores busy?){measured}"
            )
            return
        report.recommendation = "process"
        report.reason = (
            f"a step costs {cost} of CPU and holds the GIL, so worker processes on the {cores} "
            f"usable cores pay off; the {obs} observation travels through shared memory{measured}"
        )
        return
    report.recommendation = "serial" if serial else best
    why = "only one core is usable" if cores <= 1 else "the process backend did not run"
    report.reason = f"{why}{measured}"


# ==================================================================== output
_MARK = {"ok": "ok", "info": "info", "warning": "WARNING", "problem": "PROBLEM"}


def format_report(report: CheckReport) -> str:
    """The report in plain words."""
    lines = [f"vecenv check {report.env} — {report.num_envs} copies, {report.steps} steps"]
    for f in report.findings:
        lines.append(f"  {_MARK[f.level]:<8} {f.message}")
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
