"""vecenv on a machine that is not idle, beside gymnasium's SyncVectorEnv (1.00×) and EnvPool.

    python benchmarks/run_shared.py                          # every scenario, N=8 (~10 min, 2 cores)
    python benchmarks/run_shared.py --scenario busy,two-runs --envs CartPole-v1
    python benchmarks/run_shared.py --quick                  # a smoke test

Scenarios (idle, busy, two-runs, after-busy, policy), targets, contenders, the rounds and the
JSON (default results/shared.json): docs/bench.md#on-a-shared-machine-benchmarksrun_sharedpy.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import RESULTS, interleave, write_json  # noqa: E402
from shared_bench import contenders, load  # noqa: E402
from shared_bench.contenders import PolicyLoop, Target, first_line  # noqa: E402

DESCRIPTIONS = {
    "idle": "nothing else running (the baseline)",
    "busy": "a busy process (`while True: pass`) beside, started before the contender is built",
    "two-runs": "two copies of the contender run at once in two processes; steps/s is their sum",
    "policy": "CleanRL's Atari CNN on one torch thread picks every action (async contenders: "
              "the policy computes on one batch while the other steps)",
    "after-busy": "a fresh process with no calibration cache builds the contender once beside a "
                  "busy process, which then ends; the next build is measured on the quiet machine",
}
SCENARIOS = tuple(DESCRIPTIONS)
#: a few words per scenario, for the table titles
SHORT = {"idle": "idle machine", "busy": "a busy process beside",
         "two-runs": "two runs at once, steps/s summed", "policy": "CNN policy in the loop",
         "after-busy": "quiet, after a first build beside a busy process"}
QUICK = {"rounds": 1, "seconds": 0.3, "warmup": 3}
BASELINE = "gym-sync"
PACKAGES = ("vecenv", "gymnasium", "numpy", "envpool", "ale-py", "mujoco", "torch", "stable-baselines3",
            "opencv-python", "opencv-python-headless", "pufferlib-core", "psutil")


@dataclass(frozen=True)
class Settings:
    num_envs: int = 8
    rounds: int = 3
    seconds: float = 2.0
    #: loop iterations before the clock starts
    warmup: int = 20
    seed: int = 0


def _list(values: list[str] | None) -> list[str]:
    """Repeatable, comma-separated options as one list, in order, without repeats."""
    out = [v.strip() for value in values or [] for v in value.split(",") if v.strip()]
    return list(dict.fromkeys(out))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", action="append", metavar="{idle,busy,two-runs,policy,after-busy,all}",
                   help="scenarios to run, repeatable or comma-separated (default: all)")
    p.add_argument("--envs", action="append", help="targets, comma-separated (default: "
                   "CartPole-v1,HalfCheetah-v5,Pong; the policy scenario: Pong)")
    p.add_argument("--contenders", action="append",
                   help=f"contenders, comma-separated (default: {','.join(contenders.DEFAULT)}; "
                   f"policy adds {','.join(contenders.DEFAULT_POLICY[len(contenders.DEFAULT):])})")
    p.add_argument("--num-envs", type=int, default=8, help="envs per vector env (default 8)")
    p.add_argument("--rounds", type=int, help="interleaved rounds, medians reported (default 3)")
    p.add_argument("--seconds", type=float, help="seconds per measurement (default 2.0)")
    p.add_argument("--warmup", type=int, help="steps before the clock (default 20)")
    p.add_argument("--seed", type=int, default=0, help="reset and action seed (default 0)")
    p.add_argument("--json", type=Path, default=RESULTS / "shared.json",
                   help="where every round goes (default benchmarks/results/shared.json)")
    p.add_argument("--quick", action="store_true",
                   help="a smoke test: 1 round of 0.3 s, 3 warmup steps (unless given)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--parent-pid", type=int, help=argparse.SUPPRESS)
    p.add_argument("--after-busy", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for key, value in (QUICK if args.quick else {"rounds": 3, "seconds": 2.0, "warmup": 20}).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    # refuse bad options before anything runs (exit code 2, naming the option)
    scenarios = _list(args.scenario) or ["all"]
    unknown = [s for s in scenarios if s not in (*SCENARIOS, "all")]
    if unknown:
        p.error(f"--scenario: unknown {unknown}, expected some of {[*SCENARIOS, 'all']}")
    args.scenarios = [s for s in SCENARIOS if s in scenarios or "all" in scenarios]
    args.contender_names = _list(args.contenders)
    try:
        args.targets = [contenders.target(name) for name in _list(args.envs)]
        for name in args.contender_names:
            contenders.parse(name)
    except ValueError as exc:
        p.error(str(exc))
    if args.num_envs < 1 or args.rounds < 1 or args.seconds <= 0 or args.warmup < 0:
        p.error("--num-envs and --rounds must be >= 1, --seconds > 0, --warmup >= 0")
    return args


# ==================================================================== one measurement
def built(envs: Any) -> dict[str, str]:
    """What the JSON records of a built vector env (``layout``: what backend="auto" chose, and why)."""
    layout = getattr(envs, "layout", None)
    return {"built": repr(envs), **({"layout": str(layout)} if layout is not None else {})}


def measure(name: str, t: Target, s: Settings, policy: bool = False,
            before_clock: Callable[[], None] | None = None) -> dict[str, Any]:
    """Build contender ``name``, reset it with seed ``s.seed``, step ``s.warmup`` times, then
    count env steps for ``s.seconds``; always closes it. Actions are random from a pool
    pre-generated from the seed, or sampled by the policy from the observations."""
    driver = contenders.build(name, t, s.num_envs, s.seed)
    info = built(driver.envs)
    try:
        if policy:
            loop = PolicyLoop(driver.envs, contenders.make_policy(contenders.action_count(t.name), s.seed))
            driver.envs = driver.actions = loop  # type: ignore[assignment]
        driver.reset(s.seed)
        driver.run(s.warmup, math.inf)
        if before_clock is not None:
            before_clock()
        start = time.perf_counter()
        steps = driver.run(2**62, start + s.seconds) * driver.per_iteration
        elapsed = time.perf_counter() - start
    finally:
        driver.close()
    return {"steps_per_s": steps / elapsed, "steps": steps, "seconds": elapsed, **info}


def child_argv(name: str, t: Target, s: Settings, *extra: str) -> list[str]:
    """The command of one child (``run_shared.py --child``)."""
    return [sys.executable, str(Path(__file__).resolve()), "--child", "--envs", t.name, "--contenders", name,
            "--num-envs", str(s.num_envs), "--seconds", repr(s.seconds), "--warmup", str(s.warmup),
            "--seed", str(s.seed), "--parent-pid", str(os.getpid()), *extra]


def measure_in(scenario: str, name: str, t: Target, s: Settings) -> dict[str, Any]:
    """One measurement of ``name`` on ``t`` in ``scenario``: two-runs measures in two children
    over the same interval (the sum counts), after-busy in one (``--after-busy``)."""
    if scenario == "busy":
        with load.busy_process():
            return measure(name, t, s)
    if scenario == "two-runs":
        parts = load.run_children([child_argv(name, t, s)] * 2, build_timeout=600.0, seconds=s.seconds)
        return {"steps_per_s": sum(p["steps_per_s"] for p in parts),
                "parts": [p["steps_per_s"] for p in parts], "children": parts}
    if scenario == "after-busy":
        (part,) = load.run_children([child_argv(name, t, s, "--after-busy")], build_timeout=600.0,
                                    seconds=s.seconds)
        return part
    return measure(name, t, s, policy=scenario == "policy")


def target_skip(scenario: str, t: Target) -> str | None:
    """Why ``scenario`` does not run target ``t`` here (None when it does)."""
    reason = contenders.target_missing(t)
    if reason is None and scenario == "policy":
        if not t.image:
            return "the policy's CNN takes stacked 84x84 frames (Pong)"
        if not contenders.installed("torch"):
            return "torch is not installed (pip install torch)"
    return reason


def run_target(scenario: str, t: Target, names: list[str], s: Settings,
               log: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    """Interleaved rounds of every contender on ``t``: ``{name: {"rounds": [...], "skipped": ...}}``."""
    rows: dict[str, dict[str, Any]] = {}
    for name in names:
        reason = contenders.unavailable(name, t, s.num_envs)
        rows[name] = {"contender": name, "skipped": reason, "rounds": []}
        if reason:
            log(f"[{scenario} {t.name}] {name}: skipped ({reason})")

    def one(name: str) -> dict[str, Any]:
        record: dict[str, Any] = {"round": len(rows[name]["rounds"])}
        try:
            record.update(measure_in(scenario, name, t, s))
        except Exception as exc:
            record["error"] = first_line(exc)
        rows[name]["rounds"].append(record)
        return record

    def said(r: int, name: str, record: dict[str, Any]) -> None:
        what = f"failed: {record['error']}" if "error" in record else f"{record['steps_per_s']:,.0f} steps/s"
        log(f"[{scenario} {t.name} round {r + 1}/{s.rounds}] {name}: {what}")

    interleave([n for n in names if rows[n]["skipped"] is None], s.rounds, one, said)
    return rows


# ==================================================================== tables and JSON
def table(scenario: str, t: Target, rows: dict[str, dict[str, Any]], num_envs: int,
          skipped: str | None = None) -> dict[str, Any]:
    """The JSON table of one scenario and target: every round, medians and ratios to gym-sync;
    ``layouts``: what vecenv-default built in each round (each child's, for two-runs)."""
    out_rows = []
    for row in rows.values():
        rates = [r["steps_per_s"] for r in row["rounds"] if "steps_per_s" in r]
        out_rows.append({**row, "steps_per_s": rates, "median_steps_per_s": statistics.median(rates) if rates else None,
                         "layouts": [b["layout"] for r in row["rounds"] for b in r.get("children", [r]) if b.get("layout")],
                         "errors": [r["error"] for r in row["rounds"] if "error" in r]})
    base = next((r["median_steps_per_s"] for r in out_rows if r["contender"] == BASELINE), None)
    for row in out_rows:
        med = row["median_steps_per_s"]
        row["vs"] = {BASELINE: med / base} if med is not None and base else {}
    return {"title": f"{scenario}: {t.name}, N={num_envs}", "scenario": scenario, "env": t.name,
            "num_envs": num_envs, "unit": "env steps/s", "baselines": [BASELINE],
            "skipped": skipped, "rows": out_rows}


def print_table(tab: dict[str, Any], description: str, idle: dict[str, float]) -> None:
    """One markdown table: contender, median steps/s, x gym-sync (and x the idle run)."""
    print(f"\n### {tab['title']} ({description})")
    if tab["skipped"]:
        print(f"skipped: {tab['skipped']}")
        return
    with_idle = bool(idle) and tab["scenario"] != "idle"
    head = "| contender | steps/s | × gym-sync |" + (" × idle |" if with_idle else "") + " note |"
    print(head + "\n|---|---:|---:|" + ("---:|" if with_idle else "") + "---|")
    for row in tab["rows"]:
        med, ratio = row["median_steps_per_s"], row["vs"].get(BASELINE)
        cells = [row["contender"], "–" if med is None else f"{med:,.0f}", "–" if ratio is None else f"{ratio:.2f}×"]
        if with_idle:
            base = idle.get(row["contender"])
            cells.append(f"{med / base:.2f}×" if med is not None and base else "–")
        notes = [f"skipped: {row['skipped']}" if row["skipped"] else "",
                 f"failed: {row['errors'][0]}" if row["errors"] and not row["skipped"] else ""]
        if row["layouts"]:  # the words before the colon: "inline, 2 groups"
            notes.append("layout: " + " / ".join(dict.fromkeys(lay.split(":", 1)[0] for lay in row["layouts"])))
        parts = [f"{p:,.0f}" for r in row["rounds"] for p in r.get("parts", [])]
        notes.append("parts: " + ", ".join(parts) if parts else "")
        print("| " + " | ".join([*cells, " ".join(n for n in notes if n)]) + " |")


def idle_medians(tables: list[dict[str, Any]], env: str) -> dict[str, float]:
    """The idle scenario's median of each contender on ``env`` (empty when idle did not run)."""
    for tab in tables:
        if tab["scenario"] == "idle" and tab["env"] == env:
            return {r["contender"]: r["median_steps_per_s"] for r in tab["rows"] if r["median_steps_per_s"]}
    return {}


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


# ==================================================================== the run
def _raise_exit(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def child_main(args: argparse.Namespace) -> int:
    """A two-runs or after-busy child: (after-busy: with an empty calibration cache, a first
    build beside a busy process,) build, warm up, wait for the parent's start, measure, print the result."""
    load.die_with_parent()
    signal.signal(signal.SIGTERM, _raise_exit)
    s, name, t = Settings(args.num_envs, 1, args.seconds, args.warmup, args.seed), args.contender_names[0], args.targets[0]
    first: dict[str, Any] = {}
    cache = tempfile.TemporaryDirectory(prefix="run_shared-cache-") if args.after_busy else None
    try:
        if cache is not None:
            os.environ["VECENV_CACHE_DIR"] = cache.name
            with load.busy_process():
                driver = contenders.build(name, t, s.num_envs, s.seed)
                first = {f"beside_busy_{k}": v for k, v in built(driver.envs).items()}
                driver.close()
        result = measure(name, t, s, before_clock=load.wait_for_start)
    except KeyboardInterrupt:  # Ctrl-C reached the whole process group; the parent reports it
        return 130
    except Exception as exc:
        print(load.ERROR + first_line(exc), flush=True)
        return 1
    finally:
        if cache is not None:
            cache.cleanup()
    print(load.RESULT + json.dumps({**result, **first}), flush=True)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # measured: the parent may end us while we exit
    return 0


def run(args: argparse.Namespace) -> tuple[list[dict[str, Any]], bool]:
    """Every scenario and target; returns the JSON tables and whether Ctrl-C cut the run short."""
    s = Settings(args.num_envs, args.rounds, args.seconds, args.warmup, args.seed)
    tables: list[dict[str, Any]] = []
    try:
        for scenario in args.scenarios:
            print(f"\n## {scenario}: {DESCRIPTIONS[scenario]}")
            policy = scenario == "policy"
            names = args.contender_names or list(contenders.DEFAULT_POLICY if policy else contenders.DEFAULT)
            for t in args.targets or [contenders.target(e) for e in (["Pong"] if policy else contenders.DEFAULT_TARGETS)]:
                skipped = target_skip(scenario, t)
                rows = {} if skipped else run_target(scenario, t, names, s, lambda line: print(line, file=sys.stderr, flush=True))
                tables.append(table(scenario, t, rows, s.num_envs, skipped))
                print_table(tables[-1], SHORT[scenario], idle_medians(tables, t.name))
    except KeyboardInterrupt:
        print("\ninterrupted: writing what was measured", file=sys.stderr)
        return tables, True
    return tables, False


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return child_main(args)
    signal.signal(signal.SIGTERM, _raise_exit)
    try:
        tables, interrupted = run(args)
    finally:
        load.stop_all()
    from vecenv.make import usable_cores

    settings = {
        "scenarios": args.scenarios, "envs": [t.name for t in args.targets] or "default",
        "contenders": args.contender_names or "default", "num_envs": args.num_envs,
        "rounds": args.rounds, "seconds": args.seconds, "warmup": args.warmup,
        "seed": args.seed, "quick": args.quick, "interrupted": interrupted,
        "busy_command": "python -c 'while True: pass'",
        "scenario_descriptions": {k: DESCRIPTIONS[k] for k in args.scenarios},
    }
    write_json(args.json, "run_shared.py", settings, tables,
               {"cores": usable_cores(), "packages": {d: _version(d) for d in PACKAGES}})
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
