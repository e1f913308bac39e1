"""The ``vecenv`` command: ``vecenv bench`` (throughput side by side) and ``vecenv check`` (env doctor).

Exit codes: 0 success; 1 ``check`` found problems; 2 bad usage (checked before anything runs;
the message names the option and what was expected); 130 interrupted."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from vecenv import __version__
from vecenv.policy import FailurePolicy

__all__ = ["main"]

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """Bad command-line usage: reported on stderr, exit code 2."""

    def __init__(self, message: str, usage: str | None = None) -> None:
        super().__init__(message)
        self.usage = usage


class Exit(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


class Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises instead of exiting, so ``main`` returns the exit code."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.format_usage())

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            sys.stderr.write(message)
        raise Exit(status)


# ==================================================================== parser
_BENCH_EPILOG = """\
columns of the table:
  steps/s      env steps per second (num_envs per vector step), median over the rounds
  ±            half the spread between the fastest and slowest round, relative to the median
  × gym Sync   the median divided by gymnasium SyncVectorEnv's on the same env and num_envs
  × gym Async  the same against gymnasium AsyncVectorEnv
  workers      processes or threads the vector env used (1 = in the calling process)

examples:
  vecenv bench                                    # the default suite (a few minutes)
  vecenv bench CartPole-v1 --num-envs 4,16 --backends serial,process --compare gym-async
  vecenv bench vecenv/VariableBusy-v0 --num-envs 16 --batch-size 8 --backends process
  vecenv bench mypkg.envs:make_env --seconds 2 --rounds 5 --json out.json --plot out.png
  vecenv bench ALE/Pong-v5 --import ale_py        # or: vecenv bench ale_py:ALE/Pong-v5
"""

_CHECK_EPILOG = """\
checks: the factory pickles and works in a spawned process; every copy has the same spaces;
observations stay inside the observation space; reset(seed) and steps repeat under a seed; info
values keep their types; every backend runs the env and agrees with serial. Then it recommends a
backend from the step cost, the observation size and (with the thread backend) whether threads
run faster than serial, and shows the machine calibration behind that recommendation (its age,
whether it was verified, a warning when it was measured on a busy machine; --recalibrate
measures it again).

exit codes: 0 no problem, 1 problems found, 2 bad usage
"""


_IMPORT_HELP = "import MODULE first, so the env ids it registers resolve (repeatable): --import ale_py"
_RAY_LAST = "(default: every available one but ray, which runs only when named)"


def build_parser() -> argparse.ArgumentParser:
    """The ``vecenv`` argument parser (``bench`` and ``check`` subcommands)."""
    parser = Parser(
        prog="vecenv",
        description="vecenv: step many copies of a Gymnasium environment as one batched environment.",
    )
    # argparse prints the version on stdout and calls parser.exit(0): Exit(0), so main returns 0
    parser.add_argument("--version", action="version", version=f"vecenv {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    _add_bench_parser(sub)
    _add_check_parser(sub)
    return parser


def _add_bench_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    from vecenv.bench.contenders import PEERS
    from vecenv.make import BACKENDS

    bench = sub.add_parser(
        "bench",
        help="measure env steps per second of every backend next to gymnasium, SB3, EnvPool and PufferLib",
        description=(
            "Measure env steps per second of vecenv's backends side by side with gymnasium's "
            "SyncVectorEnv/AsyncVectorEnv, SB3's DummyVecEnv/SubprocVecEnv, EnvPool and "
            "PufferLib's Serial/Multiprocessing (those installed), interleaving the contenders over several rounds and reporting medians. "
            "With no env given, runs the default suite: CartPole-v1 at num_envs 2, 8, 16 and "
            "the busy env (vecenv/Busy-v0: 84x84x4 uint8 frames, 100 µs of CPU per step) at 8."
        ),
        epilog=_BENCH_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench.add_argument(
        "envs", nargs="*", metavar="ENV",
        help="gymnasium env ids (CartPole-v1, vecenv/Busy-v0; module:EnvId imports module first: ale_py:ALE/Pong-v5) or module:callable factories (default: the default suite)",
    )
    bench.add_argument("--import", action="append", default=[], dest="imports", metavar="MODULE",
                       help=_IMPORT_HELP)
    bench.add_argument(
        "--num-envs", metavar="LIST",
        help="comma-separated num_envs to sweep, e.g. 2,8,16 (default: 2,8,16; 8 for the busy env)",
    )
    bench.add_argument(
        "--backends", metavar="LIST",
        help=f"vecenv backends to run, from {', '.join(BACKENDS)}, process+inline (the process "
             "backend with inline=True: the main process steps one env group), process+affinity "
             "(workers pinned to cores), or none " + _RAY_LAST,
    )
    budget = bench.add_mutually_exclusive_group()
    budget.add_argument("--steps", type=int, metavar="N", help="env steps per measurement")
    budget.add_argument("--seconds", type=float, metavar="S", help="seconds per measurement (default 0.75)")
    bench.add_argument(
        "--batch-size", type=int, metavar="B",
        help="also run every vecenv backend in async-batch mode: send() to the B envs the last "
             "recv() returned (B must be below every num_envs)",
    )
    bench.add_argument(
        "--compare", metavar="LIST",
        help=f"peers to compare with, from {', '.join(PEERS)}, or none (default: every installed one)",
    )
    bench.add_argument("--rounds", type=int, default=None, metavar="R", help="rounds per contender; medians reported (default 5)")
    bench.add_argument("--seed", type=int, default=0, help="reset seed (env i gets seed + i) and action seed (default 0)")
    bench.add_argument("--warmup", type=int, default=5, metavar="N", help="vector steps before the clock starts (default 5)")
    bench.add_argument("--env-kwargs", metavar="JSON", help="keyword arguments for every env, as a JSON object")
    bench.add_argument("--json", metavar="PATH", help="write every round, the machine and versions as JSON")
    bench.add_argument("--plot", metavar="PATH", help="write a PNG of steps/s vs num_envs (needs matplotlib: pip install 'vecenv[bench]')")
    bench.add_argument("--quiet", "-q", action="store_true", help="no progress output; print only the table")


def _add_check_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    from vecenv.make import BACKENDS

    check = sub.add_parser(
        "check",
        help="run an env briefly through every backend and report what would go wrong",
        description=(
            "Run ENV briefly through every available backend and report, in plain words, what "
            "would break or silently corrupt a long vectorized run, plus the step cost, the "
            "observation size and the backend to use."
        ),
        epilog=_CHECK_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check.add_argument("env", metavar="ENV", help="a gymnasium env id, module:EnvId (ale_py:ALE/Pong-v5) or module:callable")
    check.add_argument("--import", action="append", default=[], dest="imports", metavar="MODULE",
                       help=_IMPORT_HELP)
    check.add_argument("--num-envs", type=int, default=4, metavar="N", help="copies to build (default 4, at least 2)")
    check.add_argument("--steps", type=int, default=200, metavar="N", help="steps per rollout and per backend (default 200)")
    check.add_argument(
        "--backends", metavar="LIST",
        help=f"vecenv backends to run, from {', '.join(BACKENDS)}, or none " + _RAY_LAST,
    )
    check.add_argument("--seed", type=int, default=0, help="seed for resets and actions (default 0)")
    check.add_argument("--max-episodes-per-env", type=int, metavar="N",
                       help="run the process backend with max_episodes_per_env=N and count the envs recycled")
    check.add_argument("--max-worker-memory", metavar="BYTES",
                       help="run the process backend with max_worker_memory=BYTES ('2GB', '400MB') and "
                            "count the envs recycled")
    check.add_argument("--env-kwargs", metavar="JSON", help="keyword arguments for the env, as a JSON object")
    check.add_argument("--no-spawn", action="store_true", help="skip building the env in a spawned process")
    check.add_argument(
        "--recalibrate", action="store_true",
        help="measure this machine's vecenv costs again before checking (what backend='auto' and "
             "the recommendation use; saved only when the machine is quiet)",
    )
    check.add_argument("--json", metavar="PATH", help="write the findings as JSON")
    check.add_argument("--quiet", "-q", action="store_true", help="print only problems and the verdict")


# ==================================================================== option values
def parse_int_list(option: str, text: str) -> list[int]:
    try:
        values = [int(p.strip()) for p in text.split(",")]
    except ValueError:
        values = []
    if not values or any(v < 1 for v in values):
        raise UsageError(
            f"{option}: expected a comma-separated list of positive integers such as 2,8,16, got {text!r}"
        )
    return sorted(dict.fromkeys(values))


def check_positive(option: str, value: float | int | None, kind: str = "an integer") -> None:
    if value is not None and (not math.isfinite(value) or value <= 0):
        raise UsageError(f"{option}: expected {kind} > 0, got {value!r}")


def parse_env_kwargs(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--env-kwargs: expected a JSON object such as '{{\"step_cost_us\": 500}}' ({exc})") from None
    if not isinstance(value, dict):
        raise UsageError(f"--env-kwargs: expected a JSON object, got {text!r}")
    return value


def output_path(option: str, path: str | None) -> Path | None:
    if path is None:
        return None
    p = Path(path)
    if not p.parent.exists():
        raise UsageError(f"{option}: folder {str(p.parent)!r} does not exist")
    if p.is_dir():
        raise UsageError(f"{option}: {path!r} is a folder, expected a file name")
    return p


def resolve_envs(names: Sequence[str], kwargs: dict[str, Any], imports: Sequence[str]) -> list[Any]:
    from vecenv.bench.envs import EnvArgumentError, import_modules, resolve_env

    option = "--import"
    try:
        import_modules(imports)
        option = "env"
        return [resolve_env(name, kwargs, imports) for name in names]
    except EnvArgumentError as exc:
        raise UsageError(f"{option}: {exc}") from None


def _names(option: str, text: str, expected: str) -> list[str]:
    """The names in a comma-separated ``option``, without duplicates (none for ``none``)."""
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise UsageError(f"{option}: expected a comma-separated list {expected}")
    return [] if names == ["none"] else list(dict.fromkeys(names))


def parse_backends(option: str, text: str | None, variants: bool = False) -> list[str]:
    """The vecenv backends to run: every usable one by default; named ones checked.

    ``variants`` (bench only) also allows and defaults to variants such as ``process+inline``.
    """
    import vecenv
    from vecenv.bench.contenders import VARIANTS, default_backends, missing_backend_dependency
    from vecenv.make import BACKENDS

    if text is None:
        return default_backends(variants)
    available = vecenv.available_backends()
    names = _names(option, text, f"of backends from {', '.join(BACKENDS)}")
    for name in names:
        backend = VARIANTS[name][0] if variants and name in VARIANTS else name
        if variants and backend == "auto":
            continue
        if backend not in BACKENDS:
            raise UsageError(
                f"{option}: unknown backend {backend!r}; expected names from {', '.join(BACKENDS)} "
                f"(available here: {', '.join(available)})"
            )
        if backend not in available:
            raise UsageError(
                f"{option}: backend {backend!r} is not available in this installation of vecenv "
                f"(available: {', '.join(available)})"
            )
        missing = missing_backend_dependency(backend)
        if missing:
            raise UsageError(f"{option}: {missing}")
    return names


def parse_peers(text: str | None) -> list[str]:
    """The peer libraries to compare with: every installed one by default; named ones checked."""
    from vecenv.bench.contenders import PEERS, peer_unavailable

    if text is None:
        return [p for p in PEERS if peer_unavailable(p) is None]
    names = _names("--compare", text, f"from {', '.join(PEERS)}, or none")
    for name in names:
        if name not in PEERS:
            raise UsageError(f"--compare: unknown peer {name!r}; expected names from {', '.join(PEERS)}, or none")
        why = peer_unavailable(name)
        if why:
            raise UsageError(f"--compare: {name} cannot run: {why}")
    return names


# ==================================================================== commands
def _bench(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """``vecenv bench``: the run the options describe, checked, measured, shown and written."""
    from vecenv.bench import report
    from vecenv.bench.contenders import peer_contender, vecenv_contender
    from vecenv.bench.runner import DEFAULT_SUITE, BenchConfig, run_bench

    check_positive("--steps", args.steps)
    check_positive("--seconds", args.seconds, "a number")
    check_positive("--rounds", args.rounds)
    check_positive("--batch-size", args.batch_size)
    if args.warmup < 0:
        raise UsageError(f"--warmup: expected an integer >= 0, got {args.warmup}")
    num_envs = parse_int_list("--num-envs", args.num_envs) if args.num_envs is not None else None
    backends = parse_backends("--backends", args.backends, variants=True)
    peers = parse_peers(args.compare)
    if not backends and not peers:
        raise UsageError("nothing to measure: --backends none and --compare none")
    json_path, plot_path = output_path("--json", args.json), output_path("--plot", args.plot)
    if plot_path is not None:
        try:
            report.require_matplotlib()
        except report.MissingExtraError as exc:
            raise UsageError(str(exc)) from None
    targets = resolve_envs(args.envs or list(DEFAULT_SUITE), parse_env_kwargs(args.env_kwargs), args.imports)
    batches = [None]
    if args.batch_size is not None:
        if not backends:
            raise UsageError("--batch-size: async-batch mode is for vecenv backends, but --backends is none")
        sweeps = num_envs or [n for t in targets for n in DEFAULT_SUITE.get(t.name, [2, 8, 16])]
        if args.batch_size >= min(sweeps):
            raise UsageError(
                f"--batch-size: {args.batch_size} must be smaller than every num_envs "
                f"(smallest is {min(sweeps)}); pass --num-envs with larger values"
            )
        batches.append(args.batch_size)
    contenders = [vecenv_contender(b, batch) for batch in batches for b in backends]
    contenders += [peer_contender(p) for p in peers]
    seconds = args.seconds if args.seconds is not None else (None if args.steps else 0.75)
    config = BenchConfig(envs=targets, contenders=contenders, num_envs=num_envs, steps=args.steps,
                         seconds=seconds, rounds=args.rounds or 5, seed=args.seed, warmup=args.warmup)
    run = run_bench(config, report.make_progress(args.quiet))
    report.print_table(run)
    if not args.quiet:
        ok, failed = sum(r.ok for r in run.results), sum(r.error is not None for r in run.results)
        print(f"\n{ok} measured, {failed} failed, in {run.wall_seconds:.0f} s", file=sys.stderr)
    for path, write in ((json_path, lambda p: report.write_json(run, p, ["vecenv", *argv])),
                        (plot_path, lambda p: report.write_plot(run, p))):
        if path is not None:
            write(path)
            if not args.quiet:
                print(f"wrote {path}", file=sys.stderr)
    if run.interrupted:
        print("vecenv bench: interrupted; the table shows what was measured", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_OK


def _check(args: argparse.Namespace) -> int:
    from vecenv.check import check_env, format_report, report_to_json

    if args.num_envs < 2:
        raise UsageError(f"--num-envs: expected an integer >= 2 (copies are compared), got {args.num_envs}")
    check_positive("--steps", args.steps)
    backends = parse_backends("--backends", args.backends)
    json_path = output_path("--json", args.json)
    recycling = {"max_episodes_per_env": args.max_episodes_per_env, "max_worker_memory": args.max_worker_memory}
    try:
        FailurePolicy(**recycling)
    except ValueError as exc:  # "max_worker_memory: expected ..." -> "--max-worker-memory: expected ..."
        option, _, why = str(exc).partition(":")
        raise UsageError(f"--{option.replace('_', '-')}:{why}") from None
    (target,) = resolve_envs([args.env], parse_env_kwargs(args.env_kwargs), args.imports)
    report = check_env(
        target, num_envs=args.num_envs, steps=args.steps, seed=args.seed,
        backends=backends, spawn=not args.no_spawn, recalibrate=args.recalibrate, **recycling,
    )
    if args.quiet:
        for f in report.problems:
            print(f"PROBLEM  {f.message}")
        print(format_report(report).splitlines()[-1])
    else:
        print(format_report(report))
    if json_path is not None:
        json_path.write_text(json.dumps(report_to_json(report), indent=2) + "\n", encoding="utf-8")
    return EXIT_PROBLEMS if report.problems else EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``vecenv`` command with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        if args.command == "bench":
            return _bench(args, argv)
        return _check(args)
    except Exit as exc:
        return exc.code
    except UsageError as exc:
        command = next((a for a in argv if a in ("bench", "check")), None)
        if exc.usage:
            sys.stderr.write(exc.usage)
        prog = f"vecenv {command}" if command else "vecenv"
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("vecenv: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
