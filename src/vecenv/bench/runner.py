"""Measuring: build each contender, step it for a budget, and keep every round; contenders are
interleaved round-robin (the first rotating) and summarised by their median, as machines are noisy."""

from __future__ import annotations

import math
import re
import statistics
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from warnings import WarningMessage

from vecenv.bench.contenders import Contender, first_line, iterations_for
from vecenv.bench.envs import BUSY_ID, EnvTarget

#: env -> num_envs sweep of the default suite (sized to finish in a few minutes on 2 cores)
DEFAULT_SUITE: dict[str, list[int]] = {"CartPole-v1": [2, 8, 16], BUSY_ID: [8]}
#: sweep for an env named on the command line without ``--num-envs``
DEFAULT_SWEEP: list[int] = [2, 8, 16]
#: terminal colour codes (gymnasium colours its warnings)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Round:
    """One measurement."""

    env_steps: int
    seconds: float
    setup_seconds: float

    @property
    def steps_per_s(self) -> float:
        return self.env_steps / self.seconds if self.seconds > 0 else math.inf


@dataclass
class Result:
    """Every round of one contender on one env at one ``num_envs``."""

    env: str
    num_envs: int
    contender: Contender
    num_workers: int | None = None
    rounds: list[Round] = field(default_factory=list)
    #: why it failed (``Type: message``); its finished rounds are kept
    error: str | None = None
    #: why it was not run at all
    skipped: str | None = None
    vs_gym_sync: float | None = None
    vs_gym_async: float | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.skipped is None and bool(self.rounds)

    @property
    def median(self) -> float | None:
        """Median env steps per second over the rounds (None when it failed)."""
        return statistics.median(r.steps_per_s for r in self.rounds) if self.ok else None


@dataclass
class BenchConfig:
    """What to measure and for how long."""

    envs: list[EnvTarget]
    contenders: list[Contender]
    #: num_envs sweep for every env; None gives :data:`DEFAULT_SUITE`'s (or :data:`DEFAULT_SWEEP`)
    num_envs: list[int] | None = None
    #: env steps per measurement (rounded up to whole vector steps) ...
    steps: int | None = None
    #: ... or seconds per measurement (the default, 1 s, when neither is given)
    seconds: float | None = None
    rounds: int = 3
    seed: int = 0
    #: vector steps before the clock starts
    warmup: int = 5

    def sweep(self, target: EnvTarget) -> list[int]:
        """The ``num_envs`` values to measure ``target`` at."""
        return list(self.num_envs or DEFAULT_SUITE.get(target.name, DEFAULT_SWEEP))

    def budget(self) -> tuple[int | None, float | None]:
        """``(env_steps, seconds)``: exactly one is set."""
        if self.steps is None and self.seconds is None:
            return None, 1.0
        return self.steps, self.seconds


@dataclass
class CaughtWarning:
    """A Python warning raised while contenders were built and stepped (kept out of the table
    and reported once after it)."""

    category: str
    message: str
    #: times it was raised (once per code location and measurement, Python's default filter)
    count: int = 0
    #: the contenders whose measurements raised it, in order of first appearance
    contenders: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.category}: {self.message}"


@dataclass
class BenchRun:
    """All results of a run, in table order, plus how the run went."""

    config: BenchConfig
    results: list[Result]
    wall_seconds: float = 0.0
    interrupted: bool = False
    #: warnings raised while measuring, one entry per distinct category and message
    warnings: list[CaughtWarning] = field(default_factory=list)

    def add_warnings(self, contender: str, caught: Sequence[WarningMessage]) -> None:
        """Count ``caught`` (raised while measuring ``contender``) into :attr:`warnings`."""
        for w in caught:
            category = getattr(w.category, "__name__", str(w.category))
            message = _ANSI.sub("", str(w.message)).strip()
            entry = next((e for e in self.warnings if (e.category, e.message) == (category, message)), None)
            if entry is None:
                entry = CaughtWarning(category, message)
                self.warnings.append(entry)
            entry.count += 1
            if contender not in entry.contenders:
                entry.contenders.append(contender)


class Progress:
    """What :func:`run_bench` reports to while it runs; this one shows nothing."""

    def start(self, total: int) -> None: ...
    def update(self, description: str) -> None: ...
    def advance(self, result: Result, round_: Round | None) -> None: ...
    def stop(self) -> None: ...


def measure(contender: Contender, target: EnvTarget, num_envs: int, *, steps: int | None = None,
            seconds: float | None = 1.0, seed: int = 0,
            warmup: int = 5) -> tuple[Round, int | None]:
    """Build, reset(seed), warm up, then time stepping with pre-generated actions; always close.
    Returns the round and the number of workers the vector env used."""
    t_build = time.perf_counter()
    driver = contender.build(target, num_envs, seed)
    try:
        driver.reset(seed)
        if warmup > 0:
            driver.run(warmup, math.inf)
        setup = time.perf_counter() - t_build
        iterations = iterations_for(steps, driver.per_iteration)
        t0 = time.perf_counter()
        done = driver.run(iterations, t0 + seconds if seconds else math.inf)
        elapsed = time.perf_counter() - t0
    finally:
        driver.close()
    return Round(done * driver.per_iteration, elapsed, setup), driver.num_workers


def run_bench(config: BenchConfig, progress: Progress | None = None) -> BenchRun:
    """Measure every contender on every env and ``num_envs`` of ``config``.

    A contender that raises is marked failed (with the reason) and skipped for the remaining
    rounds of that cell; the others go on. Ctrl-C stops the run and returns what was measured.
    """
    progress = progress if progress is not None else Progress()
    cells = _cells(config)
    run = BenchRun(config, [r for _, row in cells for r in row])
    progress.start(sum(config.rounds for _, row in cells for r in row if r.skipped is None))
    t_start = time.perf_counter()
    stop_ray = _start_ray(config.contenders)
    try:
        for target, row in cells:
            for k in range(config.rounds):
                start = k % max(1, len(row))  # the contender measured first rotates
                _run_round(run, target, row[start:] + row[:start], k, progress)
    except KeyboardInterrupt:
        run.interrupted = True
    finally:
        if stop_ray:
            import ray

            ray.shutdown()
        progress.stop()
    run.wall_seconds = time.perf_counter() - t_start
    add_ratios(run.results)
    return run


def _cells(config: BenchConfig) -> list[tuple[EnvTarget, list[Result]]]:
    """Every env and ``num_envs`` of ``config`` with a result per contender, in table order; a
    contender that cannot run there is marked skipped, with the reason."""
    cells = []
    for target in config.envs:
        for n in config.sweep(target):
            row = [Result(target.name, n, c) for c in config.contenders]
            for result in row:
                c = result.contender
                if c.kind == "vecenv" and c.batch_size and c.batch_size >= n:
                    result.skipped = f"batch size {c.batch_size} >= num_envs {n}"
                    continue
                try:
                    result.skipped = c.supports(target, n)
                except Exception as exc:  # e.g. the peer's own import fails
                    result.skipped = first_line(exc)
            cells.append((target, row))
    return cells


def _run_round(run: BenchRun, target: EnvTarget, row: list[Result], k: int, progress: Progress) -> None:
    """Round ``k`` of one cell: each contender of ``row`` measured once, in that order (one that
    failed in an earlier round only counts as done); the warnings a measurement raises go to
    ``run.warnings`` rather than into the progress and the table."""
    config = run.config
    steps, seconds = config.budget()
    for result in row:
        if result.skipped is not None:
            continue
        if result.error is not None:
            progress.advance(result, None)
            continue
        name = result.contender.name
        progress.update(f"{target.name} n={result.num_envs} {name} (round {k + 1}/{config.rounds})")
        round_ = None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")  # once per location and round, as Python shows them
            try:
                round_, result.num_workers = measure(
                    result.contender, target, result.num_envs,
                    steps=steps, seconds=seconds, seed=config.seed, warmup=config.warmup,
                )
                result.rounds.append(round_)
            except Exception as exc:
                result.error = first_line(exc)
            finally:
                run.add_warnings(name, caught)
        progress.advance(result, round_)


def _start_ray(contenders: Sequence[Contender]) -> bool:
    """Start Ray once for the whole run when a ray contender is measured (True if we started it),
    rather than a local Ray instance per measurement (seconds each)."""
    if not any(c.kind == "vecenv" and c.backend == "ray" for c in contenders):
        return False
    try:
        import ray
    except ImportError:
        return False  # each ray measurement then fails with the backend's own message
    if ray.is_initialized():
        return False
    ray.init(include_dashboard=False, log_to_driver=False)
    return True


def add_ratios(results: Sequence[Result]) -> None:
    """Set each result's ``vs_gym_sync`` / ``vs_gym_async`` from the medians of its cell."""
    base = {(r.env, r.num_envs, r.contender.backend): r.median for r in results
            if r.contender.kind == "peer" and r.contender.backend in ("gym-sync", "gym-async")}
    for r in results:
        m = r.median
        sync, asyn = (base.get((r.env, r.num_envs, peer)) for peer in ("gym-sync", "gym-async"))
        r.vs_gym_sync = m / sync if m is not None and sync else None
        r.vs_gym_async = m / asyn if m is not None and asyn else None
