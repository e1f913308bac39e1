"""One measurement, interleaved rounds, and the scenarios of run_shared.py."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared_bench import contenders, load, targets
from shared_bench.policy import make_policy, torch_missing
from shared_bench.targets import Target

SCENARIOS = ("idle", "busy", "two-runs", "policy", "after-busy")
DESCRIPTIONS = {
    "idle": "nothing else running (the baseline)",
    "busy": "a busy process (`while True: pass`) beside, started before the contender is built",
    "two-runs": "two copies of the contender run at once in two processes; steps/s is their sum",
    "policy": "CleanRL's Atari CNN on one torch thread picks every action (async contenders: "
              "the policy computes on one batch while the other steps)",
    "after-busy": "a fresh process with no calibration cache builds the contender once beside a "
                  "busy process, which then ends; the next build is measured on the quiet machine",
}
#: a few words per scenario, for the table titles
SHORT = {"idle": "idle machine", "busy": "a busy process beside",
         "two-runs": "two runs at once, steps/s summed", "policy": "CNN policy in the loop",
         "after-busy": "quiet, after a first build beside a busy process"}
SCRIPT = Path(__file__).resolve().parents[1] / "run_shared.py"


@dataclass(frozen=True)
class Settings:
    num_envs: int = 8
    rounds: int = 3
    seconds: float = 2.0
    #: loop iterations before the clock starts
    warmup: int = 20
    seed: int = 0


def first_line(exc: BaseException) -> str:
    """``Type: first line of the message``."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def measure(name: str, t: Target, s: Settings, policy: bool = False,
            before_clock: Callable[[], None] | None = None) -> dict[str, Any]:
    """Build contender ``name``, reset it with seed ``s.seed``, step ``s.warmup`` times, then
    count env steps for ``s.seconds``; always closes it. Actions are random from a pool
    pre-generated from the seed, or sampled by the policy from the observations."""
    runner = contenders.build(name, t, s.num_envs, s.seed)
    try:
        if policy:
            act = make_policy(int(runner.action_space.nvec[0]), s.seed)

            def choose(obs: Any, i: int) -> Any:
                return act(obs)
        else:
            pool = contenders.random_actions(runner, s.seed)

            def choose(obs: Any, i: int) -> Any:
                return pool[i % len(pool)]

        obs = runner.start()
        for i in range(s.warmup):
            obs = runner.step(choose(obs, i))
        if before_clock is not None:
            before_clock()
        step, now, i = runner.step, time.perf_counter, 0
        start = now()
        end = start + s.seconds
        while True:
            obs = step(choose(obs, i))
            i += 1
            if now() >= end:
                break
        elapsed = now() - start
    finally:
        runner.close()
    return {"steps_per_s": i * runner.rows / elapsed, "steps": i * runner.rows,
            "seconds": elapsed, **runner.info}


def child_argv(name: str, t: Target, s: Settings) -> list[str]:
    """The command of one two-runs child (``run_shared.py --child``)."""
    return [sys.executable, str(SCRIPT), "--child", "--envs", t.name, "--contenders", name,
            "--num-envs", str(s.num_envs), "--seconds", repr(s.seconds),
            "--warmup", str(s.warmup), "--seed", str(s.seed), "--parent-pid", str(os.getpid())]


def after_busy(name: str, t: Target, s: Settings) -> dict[str, Any]:
    """One child (``--after-busy``): a first build beside a busy process, then a measured one."""
    (part,) = load.run_children([[*child_argv(name, t, s), "--after-busy"]], build_timeout=600.0,
                                seconds=s.seconds)
    return part


def build_beside_busy(name: str, t: Target, s: Settings, cache_dir: str) -> dict[str, Any]:
    """In an after-busy child: with ``cache_dir`` (empty) as vecenv's calibration cache, build
    and close the contender beside a busy process, as a first ``make`` during a busy moment does."""
    os.environ["VECENV_CACHE_DIR"] = cache_dir
    with load.busy_process():
        runner = contenders.build(name, t, s.num_envs, s.seed)
        runner.close()
    return {f"beside_busy_{k}": v for k, v in runner.info.items()}


def two_runs(name: str, t: Target, s: Settings) -> dict[str, Any]:
    """Two children measure the same contender over the same interval; the total is the sum."""
    argv = child_argv(name, t, s)
    parts = load.run_children([argv, argv], build_timeout=600.0, seconds=s.seconds)
    return {"steps_per_s": sum(p["steps_per_s"] for p in parts),
            "parts": [p["steps_per_s"] for p in parts], "children": parts}


def measure_in(scenario: str, name: str, t: Target, s: Settings) -> dict[str, Any]:
    """One measurement of ``name`` on ``t`` in ``scenario``."""
    if scenario == "busy":
        with load.busy_process():
            return measure(name, t, s)
    if scenario == "two-runs":
        return two_runs(name, t, s)
    if scenario == "after-busy":
        return after_busy(name, t, s)
    return measure(name, t, s, policy=scenario == "policy")


def target_skip(scenario: str, t: Target) -> str | None:
    """Why ``scenario`` does not run target ``t`` here (None when it does)."""
    reason = targets.unavailable(t)
    if reason is None and scenario == "policy":
        if not t.image:
            reason = "the policy's CNN takes stacked 84x84 frames (Pong)"
        else:
            reason = torch_missing()
    return reason


def rotate(names: list[str], r: int) -> list[str]:
    """Round ``r``'s order: the list rotated by ``r``."""
    k = r % len(names) if names else 0
    return names[k:] + names[:k]


def run_target(scenario: str, t: Target, names: list[str], s: Settings,
               log: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    """Interleaved rounds of every contender on ``t``: ``{name: {"rounds": [...], "skipped": ...}}``."""
    rows: dict[str, dict[str, Any]] = {}
    for name in names:
        reason = contenders.unavailable(name, t, s.num_envs)
        rows[name] = {"contender": name, "skipped": reason, "rounds": []}
        if reason:
            log(f"[{scenario} {t.name}] {name}: skipped ({reason})")
    active = [n for n in names if rows[n]["skipped"] is None]
    for r in range(s.rounds):
        for position, name in enumerate(rotate(active, r)):
            record: dict[str, Any] = {"round": r, "position": position}
            try:
                record.update(measure_in(scenario, name, t, s))
                what = f"{record['steps_per_s']:,.0f} steps/s"
            except contenders.Skip as exc:
                record["error"] = what = f"skipped: {exc}"
            except Exception as exc:
                record["error"] = first_line(exc)
                what = f"failed: {record['error']}"
            rows[name]["rounds"].append(record)
            log(f"[{scenario} {t.name} round {r + 1}/{s.rounds}] {name}: {what}")
    return rows
