"""vecenv on a machine that is not idle, beside gymnasium's SyncVectorEnv (1.00×) and EnvPool.

    python benchmarks/run_shared.py                          # every scenario, N=8 (~10 min, 2 cores)
    python benchmarks/run_shared.py --scenario busy,two-runs --envs CartPole-v1
    python benchmarks/run_shared.py --quick                  # a smoke test

Scenarios, targets, contenders, the rounds and the JSON (default results/shared.json):
docs/bench.md#on-a-shared-machine-benchmarksrun_sharedpy.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import interleave, parser, table, write_json  # noqa: E402
from shared_bench import contenders, load  # noqa: E402
from shared_bench.contenders import PolicyLoop, Target, first_line  # noqa: E402

SCENARIOS = {
    "idle": "nothing else running (the baseline)",
    "busy": "a busy process (`while True: pass`) beside, started before the contender is built",
    "two-runs": "two copies of the contender run at once in two processes; steps/s is their sum",
    "policy": "CleanRL's Atari CNN on one torch thread picks every action (async contenders: "
              "the policy computes on one batch while the other steps)",
    "after-busy": "a fresh process with no calibration cache builds the contender once beside a "
                  "busy process, which then ends; the next build is measured on the quiet machine",
}
BASELINE = "gym-sync"
#: the JSON's versions beyond vecenv.bench's
PACKAGES = ("ale-py", "mujoco", "opencv-python", "opencv-python-headless", "psutil")


def _list(values: list[str] | None) -> list[str]:
    """Repeatable, comma-separated options as one list, in order, without repeats."""
    return list(dict.fromkeys(v.strip() for value in values or [] for v in value.split(",") if v.strip()))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = parser(__doc__, json_name="shared.json")
    p.add_argument("--scenario", action="append", metavar="{" + ",".join([*SCENARIOS, "all"]) + "}",
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
    p.add_argument("--quick", action="store_true", help="a smoke test: 1 round of 0.3 s, 3 warmup steps (unless given)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--after-busy", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--parent-pid", type=int, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    for key, normal, quick in (("rounds", 3, 1), ("seconds", 2.0, 0.3), ("warmup", 20, 3)):
        if getattr(a, key) is None:
            setattr(a, key, quick if a.quick else normal)
    # refuse bad options before anything runs (exit code 2, naming the option)
    scenarios = _list(a.scenario) or ["all"]
    unknown = [s for s in scenarios if s not in (*SCENARIOS, "all")]
    if unknown:
        p.error(f"--scenario: unknown {unknown}, expected some of {[*SCENARIOS, 'all']}")
    a.scenarios = [s for s in SCENARIOS if s in scenarios or "all" in scenarios]
    a.contender_names = _list(a.contenders)
    try:
        a.targets = [contenders.target(name) for name in _list(a.envs)]
        for name in a.contender_names:
            contenders.parse(name)
    except ValueError as exc:
        p.error(str(exc))
    if a.num_envs < 1 or a.rounds < 1 or a.seconds <= 0 or a.warmup < 0:
        p.error("--num-envs and --rounds must be >= 1, --seconds > 0, --warmup >= 0")
    return a


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# ==================================================================== one measurement
def built(envs: Any) -> dict[str, str]:
    """What the JSON records of a built vector env (``layout``: what backend="auto" chose, and why)."""
    layout = getattr(envs, "layout", None)
    return {"built": repr(envs), **({"layout": str(layout)} if layout is not None else {})}


def measure(name: str, t: Target, a: argparse.Namespace, policy: bool = False, before_clock: Any = None) -> dict:
    """Build contender ``name``, reset it with seed ``a.seed``, step ``a.warmup`` times, then
    count env steps for ``a.seconds``; always closes it. Actions are random from a pool
    pre-generated from the seed, or sampled by the policy from the observations."""
    driver = contenders.build(name, t, a.num_envs, a.seed)
    info = built(driver.envs)
    try:
        if policy:
            loop = PolicyLoop(driver.envs, contenders.make_policy(contenders.action_count(t.name), a.seed))
            driver.envs = driver.actions = loop  # type: ignore[assignment]
        driver.reset(a.seed)
        driver.run(a.warmup, math.inf)
        if before_clock is not None:
            before_clock()
        start = time.perf_counter()
        steps = driver.run(2**62, start + a.seconds) * driver.per_iteration
        elapsed = time.perf_counter() - start
    finally:
        driver.close()
    return {"steps_per_s": steps / elapsed, "steps": steps, "seconds": elapsed, **info}


def measure_in(scenario: str, name: str, t: Target, a: argparse.Namespace) -> dict[str, Any]:
    """One measurement of ``name`` on ``t`` in ``scenario``: two-runs measures in two children
    (``run_shared.py --child``) over the same interval (the sum counts), after-busy in one."""
    if scenario == "busy":
        with load.busy_process():
            return measure(name, t, a)
    if scenario not in ("two-runs", "after-busy"):
        return measure(name, t, a, policy=scenario == "policy")
    argv = [sys.executable, str(Path(__file__).resolve()), "--child", "--envs", t.name, "--contenders", name,
            "--num-envs", str(a.num_envs), "--seconds", repr(a.seconds), "--warmup", str(a.warmup),
            "--seed", str(a.seed), "--parent-pid", str(os.getpid())]
    if scenario == "after-busy":
        return load.run_children([[*argv, "--after-busy"]], build_timeout=600.0, seconds=a.seconds)[0]
    parts = load.run_children([argv] * 2, build_timeout=600.0, seconds=a.seconds)
    return {"steps_per_s": sum(p["steps_per_s"] for p in parts), "parts": [p["steps_per_s"] for p in parts],
            "children": parts}


def target_skip(scenario: str, t: Target) -> str | None:
    """Why ``scenario`` does not run target ``t`` here (None when it does)."""
    reason = contenders.target_missing(t)
    if reason is None and scenario == "policy":
        if not t.image:
            return "the policy's CNN takes stacked 84x84 frames (Pong)"
        if not contenders.installed("torch"):
            return "torch is not installed (pip install torch)"
    return reason


def run_target(scenario: str, t: Target, names: list[str], a: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Interleaved rounds of every contender on ``t``: ``{name: {"skipped": ..., "rounds": [...]}}``."""
    skipped = {name: contenders.unavailable(name, t, a.num_envs) for name in names}
    for name in names:
        if skipped[name]:
            log(f"[{scenario} {t.name}] {name}: skipped ({skipped[name]})")

    def one(name: str) -> dict[str, Any]:
        try:
            return measure_in(scenario, name, t, a)
        except Exception as exc:
            return {"error": first_line(exc)}

    def said(r: int, name: str, record: dict[str, Any]) -> None:
        what = f"failed: {record['error']}" if "error" in record else f"{record['steps_per_s']:,.0f} steps/s"
        log(f"[{scenario} {t.name} round {r + 1}/{a.rounds}] {name}: {what}")

    got = interleave([n for n in names if not skipped[n]], a.rounds, one, said)
    return {name: {"skipped": skipped[name], "rounds": [{"round": r, **x} for r, x in enumerate(got.get(name, []))]}
            for name in names}


# ==================================================================== tables and JSON
def make_table(scenario: str, t: Target, rows: dict[str, dict[str, Any]], n: int, skipped: str | None) -> dict:
    """The JSON table of one scenario and target: every round, medians and ratios to gym-sync;
    ``layouts``: what vecenv-default built in each round (each child's, for two-runs)."""
    rates = {name: [r["steps_per_s"] for r in row["rounds"] if "steps_per_s" in r] for name, row in rows.items()}
    tab = table(f"{scenario}: {t.name}, N={n}", rates, [BASELINE], scenario=scenario, env=t.name, num_envs=n,
                skipped=skipped)
    for out, row in zip(tab["rows"], rows.values(), strict=True):
        out.update(row, errors=[r["error"] for r in row["rounds"] if "error" in r],
                   layouts=[b["layout"] for r in row["rounds"] for b in r.get("children", [r]) if b.get("layout")])
    return tab


def print_table(tab: dict[str, Any], idle: dict[str, float]) -> None:
    """One markdown table: contender, median steps/s, × gym-sync (and × the idle run), notes."""
    print(f"\n### {tab['title']}")
    if tab["skipped"]:
        return print(f"skipped: {tab['skipped']}")
    with_idle = bool(idle) and tab["scenario"] != "idle"
    print("| contender | steps/s | × gym-sync |" + " × idle |" * with_idle + " note |\n|---|---:|---:|"
          + "---:|" * with_idle + "---|")
    for row in tab["rows"]:
        med, ratio, base = row["median_steps_per_s"], row["vs"].get(BASELINE), idle.get(row["contender"])
        cells = [row["contender"], "–" if med is None else f"{med:,.0f}", "–" if ratio is None else f"{ratio:.2f}×"]
        cells += [f"{med / base:.2f}×" if med is not None and base else "–"] * with_idle
        parts = ", ".join(f"{p:,.0f}" for r in row["rounds"] for p in r.get("parts", []))
        notes = [f"skipped: {row['skipped']}" if row["skipped"] else f"failed: {row['errors'][0]}" if row["errors"] else "",
                 "layout: " + " / ".join(dict.fromkeys(x.split(":", 1)[0] for x in row["layouts"])) if row["layouts"] else "",
                 f"parts: {parts}" if parts else ""]  # a layout's words before the colon: "inline, 2 groups"
        print("| " + " | ".join([*cells, " ".join(n for n in notes if n)]) + " |")


def idle_medians(tables: list[dict[str, Any]], env: str) -> dict[str, float]:
    """The idle scenario's median of each contender on ``env`` (empty when idle did not run)."""
    return next(({r["contender"]: r["median_steps_per_s"] for r in tab["rows"] if r["median_steps_per_s"]}
                 for tab in tables if tab["scenario"] == "idle" and tab["env"] == env), {})


# ==================================================================== the run
def _raise_exit(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def child_main(a: argparse.Namespace) -> int:
    """A two-runs or after-busy child: (after-busy: with an empty calibration cache, a first
    build beside a busy process,) build, warm up, wait for the parent's start, measure, print the result."""
    load.die_with_parent()
    signal.signal(signal.SIGTERM, _raise_exit)
    name, t, first = a.contender_names[0], a.targets[0], {}
    try:
        with tempfile.TemporaryDirectory(prefix="run_shared-cache-") as cache:
            if a.after_busy:
                os.environ["VECENV_CACHE_DIR"] = cache
                with load.busy_process():
                    driver = contenders.build(name, t, a.num_envs, a.seed)
                    first = {f"beside_busy_{k}": v for k, v in built(driver.envs).items()}
                    driver.close()
            result = measure(name, t, a, before_clock=load.wait_for_start)
    except KeyboardInterrupt:  # Ctrl-C reached the whole process group; the parent reports it
        return 130
    except Exception as exc:
        print(load.ERROR + first_line(exc), flush=True)
        return 1
    print(load.RESULT + json.dumps({**result, **first}), flush=True)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # measured: the parent may end us while we exit
    return 0


def run(a: argparse.Namespace) -> tuple[list[dict[str, Any]], bool]:
    """Every scenario and target; returns the JSON tables and whether Ctrl-C cut the run short."""
    tables: list[dict[str, Any]] = []
    try:
        for scenario in a.scenarios:
            print(f"\n## {scenario}: {SCENARIOS[scenario]}")
            policy = scenario == "policy"
            names = a.contender_names or list(contenders.DEFAULT_POLICY if policy else contenders.DEFAULT)
            for t in a.targets or [contenders.target(e) for e in (["Pong"] if policy else contenders.DEFAULT_TARGETS)]:
                skipped = target_skip(scenario, t)
                tables.append(make_table(scenario, t, {} if skipped else run_target(scenario, t, names, a),
                                         a.num_envs, skipped))
                print_table(tables[-1], idle_medians(tables, t.name))
    except KeyboardInterrupt:
        print("\ninterrupted: writing what was measured", file=sys.stderr)
        return tables, True
    return tables, False


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.child:
        return child_main(a)
    signal.signal(signal.SIGTERM, _raise_exit)
    try:
        tables, interrupted = run(a)
    finally:
        load.stop_all()
    from vecenv.bench.report import versions

    settings = {
        "scenarios": a.scenarios, "envs": [t.name for t in a.targets] or "default",
        "contenders": a.contender_names or "default",
        **{k: getattr(a, k) for k in ("num_envs", "rounds", "seconds", "warmup", "seed", "quick")},
        "interrupted": interrupted, "busy_command": "python -c 'while True: pass'",
        "scenario_descriptions": {k: SCENARIOS[k] for k in a.scenarios},
    }
    write_json(a.json, "run_shared.py", settings, tables, {"packages": versions(*PACKAGES)})
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
