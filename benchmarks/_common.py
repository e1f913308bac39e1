"""What the scripts here share: their options, interleaved rounds, medians with their spread, the
markdown table and the JSON file (schema ``vecenv-script/1``).

Imported as ``_common``: a script run as ``python benchmarks/NAME.py`` has this folder on its path.
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def parser(doc: str, rounds: int | None = None, seconds: float | None = None,
           json_name: str | None = None) -> argparse.ArgumentParser:
    """A parser described by ``doc``'s first line, with ``--rounds``, ``--seconds`` and ``--json``
    (default ``results/JSON_NAME``; "" for none) where their default is given."""
    p = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    if rounds is not None:
        p.add_argument("--rounds", type=int, default=rounds, help="interleaved rounds; medians reported")
    if seconds is not None:
        p.add_argument("--seconds", type=float, default=seconds, help="seconds a measurement steps")
    if json_name is not None:
        p.add_argument("--json", type=Path, default=RESULTS / json_name if json_name else None,
                       help="where every round goes" + (f" (default results/{json_name})" if json_name else ""))
    return p


def interleave(names: Sequence[str], rounds: int, measure: Callable[[str], Any],
               log: Callable[[int, str, Any], None] | None = None) -> dict[str, list[Any]]:
    """``measure(name)`` of every name once a round, the order rotating between rounds, so that
    drift on a shared machine hits every name alike: each name's results, round by round."""
    out: dict[str, list[Any]] = {name: [] for name in names}
    for r in range(rounds):
        k = r % len(names) if names else 0
        for name in [*names[k:], *names[:k]]:
            out[name].append(measure(name))
            if log is not None:
                log(r, name, out[name][-1])
    return out


def spread(values: Sequence[float], fmt: str = ",.0f") -> str:
    """``median [min-max]``."""
    return f"{statistics.median(values):{fmt}} [{min(values):{fmt}}-{max(values):{fmt}}]"


def rate(once: Callable[[], int], seconds: float, warmup: int = 0) -> float:
    """Env steps per second of calling ``once()`` (it returns the env steps it made) for at least
    ``seconds``, after ``warmup`` calls."""
    for _ in range(warmup):
        once()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        steps += once()
    return steps / (time.perf_counter() - start)


def drive(envs: Any, seconds: float, warmup_s: float = 0.3, before_clock: Callable[[], Any] | None = None
          ) -> tuple[float, float]:
    """Env steps/s of stepping ``envs`` with random actions for ``seconds`` after ``warmup_s``
    (in async batches where its ``batch_size`` is below ``num_envs``), by vecenv.bench's drivers,
    and the caller thread's CPU µs per vector step; closes ``envs``."""
    from vecenv.bench.contenders import BatchDriver, Driver, action_pool

    rows = getattr(envs, "batch_size", None) or envs.num_envs
    try:
        driver = (BatchDriver if rows < envs.num_envs else Driver)(envs, action_pool(envs.single_action_space, rows, 0),
                                                                  rows, None)
        driver.reset(0)
        driver.run(2**62, time.perf_counter() + warmup_s)
        if before_clock is not None:
            before_clock()
        cpu, start = time.thread_time(), time.perf_counter()
        calls = driver.run(2**62, start + seconds)
        return calls * rows / (time.perf_counter() - start), (time.thread_time() - cpu) / calls * 1e6
    finally:
        envs.close()


def table(title: str, rounds: dict[str, list[float]], baselines: Sequence[str] = (), **extra: Any) -> dict[str, Any]:
    """A JSON table: every contender's rounds of steps/s, median (None without rounds) and ratios
    to ``baselines``."""
    med = {name: statistics.median(r) if r else None for name, r in rounds.items()}
    rows = [{"contender": name, "steps_per_s": r, "median_steps_per_s": med[name],
             "vs": {b: med[name] / med[b] for b in baselines if med.get(b) and med[name] is not None}}
            for name, r in rounds.items()]
    return {"title": title, **extra, "unit": "steps/s", "baselines": list(baselines), "rows": rows}


def print_table(tab: dict[str, Any]) -> None:
    """``tab`` as markdown: median, spread and the ratio to each baseline."""
    base = tab["baselines"]
    print(f"\n## {tab['title']}\n| contender | {tab['unit']}: median [min-max] |"
          + "".join(f" × {b} |" for b in base) + "\n|---|---:|" + "---:|" * len(base))
    for row in tab["rows"]:
        print(f"| {row['contender']} | {spread(row['steps_per_s'])} |"
              + "".join(f" {row['vs'][b]:.2f}× |" if b in row["vs"] else " – |" for b in base))


def _free_run(fns: list[Callable[[], Any]], seconds: float, start: Any, out: Any) -> None:
    import gymnasium as gym

    out.put(drive(gym.vector.SyncVectorEnv(fns), seconds, 0.1, before_clock=start.wait)[0])


def free_running(groups: Sequence[list[Callable[[], Any]]], seconds: float, context: str | None = None) -> float:
    """Summed env steps/s of one process per group of env factories, started together, each
    stepping a gymnasium SyncVectorEnv of its group and never waiting for another: what the
    cores allow, which no vector env that gathers each step in one caller beats."""
    ctx = multiprocessing.get_context(context)
    start, out = ctx.Barrier(len(groups) + 1), ctx.Queue()
    procs = [ctx.Process(target=_free_run, args=(g, seconds, start, out), daemon=True) for g in groups]
    for p in procs:
        p.start()
    start.wait(timeout=300)
    total = sum(out.get(timeout=seconds + 300) for _ in procs)
    for p in procs:
        p.join(30)
    return total


def write_json(path: Path, script: str, settings: dict[str, Any], tables: list[dict],
               machine: dict[str, Any] | None = None) -> None:
    """A script's run: every round of every table, its settings, the machine and the versions."""
    from vecenv.bench.report import machine_info, versions

    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "schema": "vecenv-script/1", "script": script,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": sys.argv[1:],
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in settings.items()},
        "machine": {**machine_info(), **(machine or {})}, "versions": versions(), "tables": tables,
    }
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(f"\nwrote {path}")


def bench(argv: list[str], runs: dict[str, list[str]], plot: str | None = None) -> int:
    """``vecenv bench ARGS`` for each ``NAME: ARGS`` of ``runs``, writing ``NAME.json`` (and the
    plot of run ``plot`` where matplotlib is installed) into ``--out`` (default ``results/``);
    the other options in ``argv`` go to every run."""
    import importlib.util

    from vecenv.cli import main

    p = argparse.ArgumentParser(description="vecenv bench runs, written into --out")
    p.add_argument("--out", type=Path, default=RESULTS, help="folder for the results (default results/)")
    known, extra = p.parse_known_args(argv)
    known.out.mkdir(parents=True, exist_ok=True)
    if plot and importlib.util.find_spec("matplotlib") is None:
        print("matplotlib not installed: no plot (pip install 'vecenv[bench]')", file=sys.stderr)
        plot = None
    status = 0
    for name, args in runs.items():
        png = ["--plot", str(known.out / f"{name}.png")] if name == plot else []
        status = main(["bench", *args, "--json", str(known.out / f"{name}.json"), *png, *extra]) or status
    return status
