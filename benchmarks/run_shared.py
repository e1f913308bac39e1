"""vecenv on a machine that is not idle, beside gymnasium's SyncVectorEnv (1.00×) and EnvPool.

    python benchmarks/run_shared.py                          # every scenario, N=8 (~10 min, 2 cores)
    python benchmarks/run_shared.py --scenario busy,two-runs --envs CartPole-v1
    python benchmarks/run_shared.py --quick                  # a smoke test

Scenarios (idle, busy, two-runs, after-busy, policy), targets, contenders, the rounds and the
JSON (default results/shared.json): docs/bench.md#on-a-shared-machine-benchmarksrun_sharedpy.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from shared_bench import contenders, load, report, targets  # noqa: E402
from shared_bench.scenarios import (  # noqa: E402
    DESCRIPTIONS,
    SCENARIOS,
    SHORT,
    Settings,
    build_beside_busy,
    first_line,
    measure,
    run_target,
    target_skip,
)

RESULTS = Path(__file__).resolve().parent / "results"
QUICK = {"rounds": 1, "seconds": 0.3, "warmup": 3}


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
    defaults = QUICK if args.quick else {"rounds": 3, "seconds": 2.0, "warmup": 20}
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return check_args(p, args)


def check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """Refuse bad options before anything runs (exit code 2, naming the option)."""
    scenarios = _list(args.scenario) or ["all"]
    if "all" in scenarios:
        scenarios = list(SCENARIOS)
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        p.error(f"--scenario: unknown {unknown}, expected some of {[*SCENARIOS, 'all']}")
    args.scenarios = [s for s in SCENARIOS if s in scenarios]
    args.contender_names = _list(args.contenders)
    try:
        args.targets = [targets.target(name) for name in _list(args.envs)]
        for name in args.contender_names:
            contenders.parse(name)
    except ValueError as exc:
        p.error(str(exc))
    if args.num_envs < 1 or args.rounds < 1 or args.seconds <= 0 or args.warmup < 0:
        p.error("--num-envs and --rounds must be >= 1, --seconds > 0, --warmup >= 0")
    return args


def _raise_exit(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def child_main(args: argparse.Namespace) -> int:
    """Two-runs or after-busy child: (after-busy: a first build beside a busy process,) build,
    warm up, wait for the parent's start, measure, print the result."""
    load.die_with_parent()
    signal.signal(signal.SIGTERM, _raise_exit)
    s = Settings(args.num_envs, 1, args.seconds, args.warmup, args.seed)
    first: dict[str, Any] = {}
    cache = tempfile.TemporaryDirectory(prefix="run_shared-cache-") if args.after_busy else None
    try:
        if cache is not None:
            first = build_beside_busy(args.contender_names[0], args.targets[0], s, cache.name)
        result = measure(args.contender_names[0], args.targets[0], s,
                         before_clock=load.wait_for_start)
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

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        for scenario in args.scenarios:
            print(f"\n## {scenario}: {DESCRIPTIONS[scenario]}")
            default_envs = ["Pong"] if scenario == "policy" else list(targets.DEFAULT_TARGETS)
            default_names = contenders.DEFAULT_POLICY if scenario == "policy" else contenders.DEFAULT
            names = args.contender_names or list(default_names)
            for t in args.targets or [targets.target(e) for e in default_envs]:
                skipped = target_skip(scenario, t)
                rows = {} if skipped else run_target(scenario, t, names, s, log)
                tables.append(report.table(scenario, t, rows, s.num_envs, skipped))
                report.print_table(tables[-1], SHORT[scenario], report.idle_medians(tables, t.name))
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
    settings = {
        "scenarios": args.scenarios, "envs": [t.name for t in args.targets] or "default",
        "contenders": args.contender_names or "default", "num_envs": args.num_envs,
        "rounds": args.rounds, "seconds": args.seconds, "warmup": args.warmup,
        "seed": args.seed, "quick": args.quick, "interrupted": interrupted,
        "busy_command": "python -c 'while True: pass'",
        "scenario_descriptions": {k: DESCRIPTIONS[k] for k in args.scenarios},
    }
    report.write(args.json, settings, tables)
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
