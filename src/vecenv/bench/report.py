"""Reporting a bench run: progress while it runs, then a table, a JSON file and a plot (rich and
matplotlib are optional: ``pip install 'vecenv[bench]'``, imported only when used)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import importlib.metadata
import json
import os
import platform
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from vecenv.bench.runner import BenchRun, Progress, Result, Round
from vecenv.make import usable_cores

BENCH_EXTRA = "pip install 'vecenv[bench]'"
JSON_SCHEMA = "vecenv-bench/1"

COLUMNS = ("env", "num_envs", "contender", "workers", "steps/s", "±", "× gym Sync", "× gym Async")
_RIGHT = {1, 3, 4, 5, 6, 7}  # right-aligned columns


class MissingExtraError(ImportError):
    """An optional dependency of ``vecenv bench`` is not installed."""


# ==================================================================== machine and versions
def _cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown"


def machine_info() -> dict[str, Any]:
    """The machine the numbers come from."""
    return {
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "usable_cores": usable_cores(),
        "machine": platform.machine(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
    }


def versions(*extra: str) -> dict[str, str | None]:
    """Versions of vecenv, of the libraries it is compared with and of the distributions
    ``extra`` (None when not installed)."""
    out: dict[str, str | None] = {}
    for dist in ("vecenv", "gymnasium", "numpy", "stable-baselines3", "torch", "envpool", "pufferlib-core",
                 "ray", *extra):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    return out


# ==================================================================== progress
class PlainProgress(Progress):
    """One line per measurement on ``stream`` (stderr by default)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream
        self.total = self.done = 0
        self._current = ""

    def start(self, total: int) -> None:
        self.total, self.done = total, 0
        print(f"vecenv bench: {total} measurements", file=self.stream or sys.stderr, flush=True)

    def update(self, description: str) -> None:
        self._current = description

    def advance(self, result: Result, round_: Round | None) -> None:
        self.done += 1
        what = f"{round_.steps_per_s:,.0f} steps/s" if round_ is not None else f"failed: {result.error}"
        print(f"[{self.done:>{len(str(self.total))}}/{self.total}] {self._current}: {what}",
              file=self.stream or sys.stderr, flush=True)


class _RichProgress(Progress):
    """A rich progress bar on stderr."""

    def __init__(self) -> None:
        from rich import progress as rp
        from rich.console import Console

        self._progress = rp.Progress(
            rp.TextColumn("[bold]bench[/]"), rp.BarColumn(), rp.MofNCompleteColumn(),
            rp.TimeElapsedColumn(), rp.TextColumn("eta"), rp.TimeRemainingColumn(),
            rp.TextColumn("{task.description}"), console=Console(stderr=True),
        )
        self._task: Any = None

    def start(self, total: int) -> None:
        self._progress.start()
        self._task = self._progress.add_task("", total=total)

    def update(self, description: str) -> None:
        self._progress.update(self._task, description=description)

    def advance(self, result: Result, round_: Round | None) -> None:
        self._progress.advance(self._task)

    def stop(self) -> None:
        self._progress.stop()


def make_progress(quiet: bool = False) -> Any:
    """A rich bar when stderr is a terminal and rich is installed; plain lines otherwise."""
    if quiet:
        return Progress()
    if sys.stderr.isatty():
        with contextlib.suppress(ImportError):
            return _RichProgress()
    return PlainProgress()


# ==================================================================== table
def table_rows(run: BenchRun) -> list[tuple[list[str], str]]:
    """Each result as table cells, plus a note (failure or skip reason; '' when none)."""
    rows = []
    for r in run.results:
        if r.skipped is not None:
            rate, note = "skipped", r.skipped
        elif r.error is not None:
            rate, note = "failed", r.error
        elif not r.rounds:
            rate, note = "not run", "interrupted"
        else:
            rate, note = f"{r.median:,.0f}" if r.median is not None else "", ""
        rates, m = [x.steps_per_s for x in r.rounds], r.median
        spread = f"±{(max(rates) - min(rates)) / 2 / m:.0%}" if m and len(rates) > 1 else ""
        workers = "" if r.num_workers is None else str(r.num_workers)
        ratios = ("" if x is None else f"{x:.2f}×" for x in (r.vs_gym_sync, r.vs_gym_async))
        cells = [r.env, str(r.num_envs), r.contender.name, workers, rate, spread, *ratios]
        rows.append((cells, note))
    return rows


def _section_ends(run: BenchRun) -> list[bool]:
    """For each result, whether it is the last of its env and num_envs."""
    keys = [(r.env, r.num_envs) for r in run.results]
    return [i + 1 == len(keys) or keys[i] != keys[i + 1] for i in range(len(keys))]


def format_table(run: BenchRun) -> str:
    """The results as an aligned plain-text table (a blank line between env/num_envs cells)."""
    rows = table_rows(run)
    widths = [max(len(c) for c in column) for column in zip(COLUMNS, *(cells for cells, _ in rows), strict=True)]

    def line(cells: Sequence[str]) -> str:
        parts = [c.rjust(w) if i in _RIGHT else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return "  ".join(parts).rstrip()

    out = [line(COLUMNS), line(["-" * w for w in widths])]
    for (cells, note), end in zip(rows, _section_ends(run), strict=True):
        out.append(line(cells) + (f"  {note}" if note else ""))
        if end:
            out.append("")
    return "\n".join(out).rstrip("\n")


def print_table(run: BenchRun, stream: TextIO | None = None) -> None:
    """Print the table (with rich on a terminal wide enough for it, plain text otherwise), then
    the warnings the contenders raised while measuring, once each (:func:`print_warnings`)."""
    stream = stream or sys.stdout
    plain = format_table(run)
    if not (stream.isatty() and _print_rich(run, stream, plain)):
        print(_title(run), file=stream)
        print(plain, file=stream)
    print_warnings(run)


def print_warnings(run: BenchRun, stream: TextIO | None = None) -> None:
    """Each distinct warning raised while measuring, once, with its count and who raised it
    (default: on stderr, where Python prints warnings)."""
    if not run.warnings:
        return
    stream = stream or sys.stderr
    print(f"\nwarnings raised while measuring ({len(run.warnings)} distinct):", file=stream)
    for w in run.warnings:
        times = f"{w.count}×" if w.count > 1 else "once"
        print(f"  {w} ({times}; {', '.join(w.contenders)})", file=stream)


def _print_rich(run: BenchRun, stream: TextIO, plain: str) -> bool:
    """Print the table with rich; False when rich is missing or the terminal is too narrow."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        return False
    console = Console(file=stream)
    if console.width < max(len(line) for line in plain.splitlines()) + 3 * len(COLUMNS):
        return False
    rows = table_rows(run)
    notes = any(note for _, note in rows)
    table = Table(title=_title(run), title_justify="left")
    for i, name in enumerate(COLUMNS):
        table.add_column(name, justify="right" if i in _RIGHT else "left", no_wrap=i != 0)
    if notes:
        table.add_column("note", style="red")
    for (cells, note), end in zip(rows, _section_ends(run), strict=True):
        table.add_row(*cells, *([note] if notes else []), end_section=end)
    console.print(table)
    return True


def _title(run: BenchRun) -> str:
    m = machine_info()
    steps, seconds = run.config.budget()
    budget = f"{steps} env steps" if steps is not None else f"{seconds:g} s"
    return (
        f"vecenv bench — env steps per second, median of {run.config.rounds} rounds of {budget}; "
        f"{m['cpu_model']}, {m['usable_cores']} usable cores, Python {m['python']}"
    )


# ==================================================================== JSON
def _result_json(r: Result) -> dict[str, Any]:
    c = r.contender
    status = "skipped" if r.skipped is not None else "failed" if r.error is not None else "ok"
    return {
        "env": r.env,
        "num_envs": r.num_envs,
        "contender": c.name,
        "kind": c.kind,
        "backend": c.backend if c.kind == "vecenv" else None,
        "peer": c.backend if c.kind == "peer" else None,
        "batch_size": c.batch_size,
        "num_workers": r.num_workers,
        "status": status,
        "error": r.error or r.skipped,
        **{key: [getattr(x, key) for x in r.rounds]
           for key in ("steps_per_s", "env_steps", "seconds", "setup_seconds")},
        "median_steps_per_s": r.median,
        "vs_gym_sync": r.vs_gym_sync,
        "vs_gym_async": r.vs_gym_async,
    }


def run_to_json(run: BenchRun, argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The machine-readable record of a run (every round kept)."""
    cfg = run.config
    steps, seconds = cfg.budget()
    return {
        "schema": JSON_SCHEMA,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": list(argv) if argv is not None else None,
        "settings": {
            "envs": [t.name for t in cfg.envs],
            "env_kwargs": {t.name: t.kwargs for t in cfg.envs if t.kwargs},
            "contenders": [c.name for c in cfg.contenders],
            "num_envs": {t.name: cfg.sweep(t) for t in cfg.envs},
            "steps": steps,
            "seconds": seconds,
            "rounds": cfg.rounds,
            "seed": cfg.seed,
            "warmup": cfg.warmup,
        },
        "machine": machine_info(),
        "versions": versions(),
        "wall_seconds": run.wall_seconds,
        "interrupted": run.interrupted,
        "results": [_result_json(r) for r in run.results],
        **({"warnings": [dataclasses.asdict(w) for w in run.warnings]} if run.warnings else {}),
    }


def write_json(run: BenchRun, path: str | os.PathLike, argv: Sequence[str] | None = None) -> Path:
    """Write :func:`run_to_json` to ``path``."""
    path = Path(path)
    path.write_text(json.dumps(run_to_json(run, argv), indent=2) + "\n", encoding="utf-8")
    return path


# ==================================================================== plot
def require_matplotlib() -> None:
    """Raise :class:`MissingExtraError` naming the extra when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise MissingExtraError(f"--plot needs matplotlib: {BENCH_EXTRA}") from None


def write_plot(run: BenchRun, path: str | os.PathLike) -> Path:
    """Throughput vs num_envs, one panel per env, one line per contender, usable cores marked (a
    bar per contender for an env measured at one num_envs)."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    envs = list(dict.fromkeys(r.env for r in run.results))
    fig = Figure(figsize=(6.5 * len(envs), 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(envs), squeeze=False)[0]
    cores = usable_cores()
    for ax, env in zip(axes, envs, strict=True):
        results = [r for r in run.results if r.env == env and r.median]
        ns = sorted({r.num_envs for r in run.results if r.env == env})
        names = list(dict.fromkeys(r.contender.name for r in results))
        if len(ns) == 1:
            rates = [r.median for r in results]
            colors = ["tab:blue" if name.startswith("vecenv/") else "tab:grey" for name in names]
            ax.barh(names, rates, color=colors)
            ax.invert_yaxis()
            for y, rate in enumerate(rates):
                ax.annotate(f"{rate:,.0f}", (rate, y), xytext=(3, 0), textcoords="offset points",
                            va="center", fontsize=8)
            ax.set(xlabel="env steps / s (median)", title=f"{env}, num_envs={ns[0]} ({cores} usable cores)")
            ax.grid(True, axis="x", alpha=0.3)
            ax.margins(x=0.15)
            continue
        for name in names:
            pts = sorted((r.num_envs, r.median) for r in results if r.contender.name == name)
            style = "-" if name.startswith("vecenv/") else "--"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", label=name)
        ax.axvline(cores, color="grey", linestyle=":", linewidth=1)
        ax.annotate(
            f"{cores} usable cores", (cores, 1), xycoords=("data", "axes fraction"),
            xytext=(3, -12), textcoords="offset points", color="grey", fontsize=8,
        )
        ticks = sorted({*ns, cores})
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(n) for n in ticks])
        ax.set(xlabel="num_envs", ylabel="env steps / s (median)", title=env)
        ax.grid(True, which="both", alpha=0.3)
        if results:
            ax.set_yscale("log")
            ax.legend(fontsize=8)
    m = machine_info()
    fig.suptitle(f"vecenv bench — {m['cpu_model']}, {cores} usable cores, Python {m['python']}", fontsize=10)
    path = Path(path)
    fig.savefig(path, format="png", dpi=110)
    return path
