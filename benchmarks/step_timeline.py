"""A step's life on the process backend (issue 63), from timestamps every process writes into
one shared array (``time.monotonic``): docs/bench.md#many-cores-16-and-64-envs says what it prints.

    python benchmarks/step_timeline.py                      # the busy env, 64 envs
    python benchmarks/step_timeline.py --env cheetah --workers 16 --json cheetah.json
    python benchmarks/step_timeline.py --env stragglers --workers 16 --batch-size 32
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import multiprocessing
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import gymnasium as gym
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import parser, write_json  # noqa: E402

import vecenv  # noqa: E402
from vecenv.bench.contenders import action_pool
from vecenv.engine.partition import split_envs
from vecenv.system import usable_cores
from vecenv.transports.process import default_workers
from vecenv.transports.process.transport import ProcessTransport

#: fork where there is one: the workers run this file's env wrapper without importing it again
CONTEXT = "fork" if "fork" in multiprocessing.get_all_start_methods() else None

#: the caller's stamps of each step
CALL, SEND, SENT, WAIT, WOKE, RETURNED = range(6)
#: each env's stamps of each step
START, END, CPU, RESET = range(4)
ENVS = {"busy": "vecenv/Busy-v0", "cheetah": "HalfCheetah-v5", "pong": "ALE/Pong-v5", "cartpole": "CartPole-v1"}


class Timeline:
    """The shared array (a memory-mapped file): the caller's stamps (step or batch, 6); each env's
    (call, env, 4), row ``i`` for its ``i``-th call (the first reset is 0); each worker's run delay
    in µs at its first env's calls (call, worker). The last row takes what is not measured."""

    def __init__(self, path: str, rows: int, num_envs: int, workers: int, create: bool = False) -> None:
        sizes = [rows * 6, rows * num_envs * 4, rows * workers]
        self.args, self.last = (path, rows, num_envs, workers), rows - 1
        self.mem = np.memmap(path, np.float64, "w+" if create else "r+", shape=(sum(sizes),))
        cut = np.cumsum([0, *sizes])
        self.caller = self.mem[cut[0]:cut[1]].reshape(rows, 6)
        self.envs = self.mem[cut[1]:cut[2]].reshape(rows, num_envs, 4)
        self.delay = self.mem[cut[2]:cut[3]].reshape(rows, workers)
        self.k = self.last  # the caller's step or batch being stamped (in the caller's process)
        if create:
            self.delay[:] = np.nan


def run_delay_us() -> float:
    """µs this thread has waited runnable for a core, or NaN where the kernel does not tell."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            return int(f.read().split()[1]) / 1e3
    except (OSError, IndexError, ValueError):
        return float("nan")


class Stamped(gym.Wrapper):
    """Stamps each step and reset of the env it wraps into the :class:`Timeline` (in the worker)."""

    def __init__(self, env: gym.Env, timeline: Timeline, index: int, worker: int, first: bool) -> None:
        super().__init__(env)
        self.tl, self.index, self.worker, self.first, self.calls = timeline, index, worker, first, 0

    def _timed(self, call, reset: bool, *args, **kwargs):
        k, self.calls = min(self.calls, self.tl.last), self.calls + 1
        if self.first:
            self.tl.delay[k, self.worker] = run_delay_us()
        row, cpu = self.tl.envs[k, self.index], time.thread_time()
        row[START] = time.monotonic()
        out = call(*args, **kwargs)
        row[END], row[CPU], row[RESET] = time.monotonic(), time.thread_time() - cpu, reset
        return out

    def step(self, action):
        return self._timed(self.env.step, False, action)

    def reset(self, **kwargs):
        return self._timed(self.env.reset, True, **kwargs)


def make_env(name: str, busy_us: float, timeline_args: tuple, index: int, worker: int, first: bool) -> gym.Env:
    if name == "stragglers":  # issue 63's waiting envs (benchmarks/stragglers.py's defaults)
        from stragglers import Costs, WaitEnv

        env = WaitEnv(Costs(), 0, index)
    else:  # the modules that register the busy env and Pong
        importlib.import_module({"busy": "vecenv.bench.envs", "pong": "ale_py"}.get(name, "gymnasium"))
        env = gym.make(ENVS.get(name, name), **({"step_cost_us": busy_us} if name == "busy" else {}))
    return Stamped(env, Timeline(*timeline_args), index, worker, first)


@contextlib.contextmanager
def instrumented(tl: Timeline) -> Iterator[None]:
    """Wrap the process transport's ``send`` and ``ready`` (in this process, until the block
    ends) to stamp the post, the ring, the wait and the wake of the step being taken."""
    send, ready = ProcessTransport.send, ProcessTransport.ready

    def stamped_send(self, commands):
        k = tl.k
        tl.caller[k, SEND] = time.monotonic()
        send(self, commands)
        tl.caller[k, SENT] = time.monotonic()

    def stamped_ready(self, workers, timeout=None, every=False, wanted=None):
        k = tl.k
        if tl.caller[k, WAIT] == 0:
            tl.caller[k, WAIT] = time.monotonic()
        done = ready(self, workers, timeout, every, wanted)
        tl.caller[k, WOKE] = time.monotonic()
        return done

    with mock.patch.object(ProcessTransport, "send", stamped_send), mock.patch.object(ProcessTransport, "ready", stamped_ready):
        yield


def steal_jiffies() -> tuple[int, int] | None:
    """(steal, all) jiffies of the machine since boot (``/proc/stat``), or None."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        return fields[7], sum(fields[:8])
    except (OSError, IndexError, ValueError):
        return None


# ==================================================================== summary
def _stats(values: np.ndarray) -> dict[str, float]:
    values = values[np.isfinite(values)]
    if not len(values):
        return {"median_us": float("nan"), "p90_us": float("nan")}
    return {"median_us": float(np.median(values) * 1e6), "p90_us": float(np.percentile(values, 90) * 1e6)}


def summarize(caller: np.ndarray, envs: np.ndarray, groups: list[tuple[int, int]]) -> dict:
    """The gaps of each measured step (caller: (steps, 6); envs: (steps, env, 4), seconds) per
    group of envs (``groups``: [start, stop) per worker)."""
    first = np.stack([envs[:, a:b, START].min(axis=1) for a, b in groups], axis=1)  # (step, worker)
    last = np.stack([envs[:, a:b, END].max(axis=1) for a, b in groups], axis=1)
    work = np.stack([(envs[:, a:b, END] - envs[:, a:b, START]).sum(axis=1) for a, b in groups], axis=1)
    cpu = np.stack([envs[:, a:b, CPU].sum(axis=1) for a, b in groups], axis=1)
    resets = np.stack([envs[:, a:b, RESET].max(axis=1) for a, b in groups], axis=1) > 0
    step = caller[:, RETURNED] - caller[:, CALL]
    slowest = work.max(axis=1)
    finisher = last.argmax(axis=1)
    gaps = {
        "step called -> post starts (engine)": caller[:, SEND] - caller[:, CALL],
        "post + ring (send)": caller[:, SENT] - caller[:, SEND],
        "post starts -> a worker's first env starts": (first - caller[:, SEND, None]).ravel(),
        "post starts -> the last worker's first env starts": first.max(axis=1) - caller[:, SEND],
        "a worker's group: first start -> last end": (last - first).ravel(),
        "a worker's group: its envs' own time (work)": work.ravel(),
        "a worker's group: its envs' CPU (thread_time)": cpu.ravel(),
        "the slowest group's work": slowest,
        "send done -> wait starts (caller's own)": caller[:, WAIT] - caller[:, SENT],
        "the last worker's last env ends -> caller wakes": caller[:, WOKE] - last.max(axis=1),
        "caller wakes -> step returns (collect)": caller[:, RETURNED] - caller[:, WOKE],
        "the whole step (called -> returned)": step,
    }
    return {
        "gaps": {name: _stats(v) for name, v in gaps.items()},
        "workers_busy_share": float(work.sum() / (len(groups) * (caller[-1, RETURNED] - caller[0, CALL]))),
        "barrier_efficiency": float(np.median(work.mean(axis=1) / slowest)),
        "step_over_slowest_group": float(np.median(step / slowest)),
        "last_finisher": {int(w): int(c) for w, c in sorted(Counter(finisher.tolist()).items())},
        "last_finisher_had_reset": float(resets[np.arange(len(finisher)), finisher].mean()),
        "steps_with_a_reset": float(resets.any(axis=1).mean()),
    }


def summarize_batches(caller: np.ndarray, envs: np.ndarray, batches: list[tuple], groups: list[tuple[int, int]]) -> dict:
    """The gaps of async batches: ``batches[k]`` is (ids returned by recv ``k``, each one's row in
    ``envs``, the batch that sent it, -1 before the measurement)."""
    worker_of = np.concatenate([np.full(b - a, w) for w, (a, b) in enumerate(groups)])
    started, woke, spread, work, sources, resets = [], [], [], [], [], 0
    for k, (ids, rows, sent) in enumerate(batches):
        stamps = envs[rows, ids]
        known = sent >= 0
        started.append(stamps[known, START] - caller[sent[known], SEND])
        woke.append(caller[k, WOKE] - stamps[:, END])
        work.append(stamps[:, END] - stamps[:, START])
        spread.append(stamps[:, END].max() - stamps[:, END].min())
        sources.append(len(set(worker_of[ids].tolist())))
        resets += int(stamps[:, RESET].sum())
    elapsed = caller[len(batches) - 1, RETURNED] - caller[0, CALL]
    gaps = {
        "send called -> post starts (engine)": caller[:, SEND] - caller[:, CALL],
        "post + ring (send)": caller[:, SENT] - caller[:, SEND],
        "post starts -> a sent env's step starts (queued)": np.concatenate(started),
        "a returned env's own step": np.concatenate(work),
        "a returned env's step ends -> caller wakes": np.concatenate(woke),
        "a batch: its first env's end -> its last env's": np.array(spread),
        "recv: wait starts -> caller wakes": caller[:, WOKE] - caller[:, WAIT],
        "caller wakes -> recv returns": caller[:, RETURNED] - caller[:, WOKE],
        "send + recv (called -> returned)": caller[:, RETURNED] - caller[:, CALL],
    }
    return {
        "gaps": {name: _stats(v) for name, v in gaps.items()},
        "workers_busy_share": float(np.concatenate(work).sum() / (len(groups) * elapsed)),
        "workers_per_batch": float(np.median(sources)),
        "recvs_that_waited": float(np.mean(caller[:, WOKE] > caller[:, WAIT])),
        "returned_resets": resets / sum(len(b[0]) for b in batches),
    }


# ==================================================================== the run
def run(env: str, num_envs: int, workers: int | None, steps: int, warmup: int, busy_us: float,
        batch: int | None = None) -> dict:
    """Take ``warmup`` then ``steps`` synchronous steps (or send/recv rounds of ``batch`` envs)
    with every process stamping the timeline."""
    n_workers = workers or default_workers(num_envs, usable_cores())
    groups = split_envs(num_envs, n_workers)
    fd, path = tempfile.mkstemp(prefix="vecenv-timeline-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    os.close(fd)
    try:
        tl = Timeline(path, warmup + steps + 2, num_envs, n_workers, create=True)
        fns = [functools.partial(make_env, env, busy_us, tl.args, i, w, i == a)
               for w, (a, b) in enumerate(groups) for i in range(a, b)]
        with instrumented(tl), vecenv.ProcessVectorEnv(fns, num_workers=n_workers, batch_size=batch,
                                                       context=CONTEXT) as envs:
            ids = envs.reset(seed=0)[1].get("env_id")
            actions = action_pool(envs.single_action_space, batch or num_envs, 0, 1)[0]
            calls, sent_by = np.ones(num_envs, int), np.full(num_envs, -1)  # the reset was call 0
            batches = []
            for i in range(warmup + steps):
                if i == warmup:
                    caller_delay, steal, caller_cpu = run_delay_us(), steal_jiffies(), time.thread_time()
                tl.k = k = i - warmup if i >= warmup else tl.last
                tl.caller[k, CALL] = time.monotonic()
                if batch is None:
                    envs.step(actions)
                else:
                    envs.send(actions, ids)
                    calls[ids] += 1
                    sent_by[ids] = i - warmup if i >= warmup else -1
                    asked = time.monotonic()
                    ids = envs.recv()[4]["env_id"]
                    if tl.caller[k, WOKE] == 0:  # the batch was there already: recv never waited
                        tl.caller[k, WAIT] = tl.caller[k, WOKE] = asked
                    if i >= warmup:
                        batches.append((ids, calls[ids] - 1, sent_by[ids]))
                tl.caller[k, RETURNED] = time.monotonic()
            tl.k = tl.last
            caller_cpu = (time.thread_time() - caller_cpu) / steps
            caller_delay, steal_after = run_delay_us() - caller_delay, steal_jiffies()
            caller = np.array(tl.caller[:steps])
            if batch is None:
                result = summarize(caller, np.array(tl.envs[1 + warmup:1 + warmup + steps]), groups)
            else:
                result = summarize_batches(caller, np.array(tl.envs), batches, groups)
            delays = np.diff(np.array(tl.delay[1 + warmup:tl.last]), axis=0)
            delays = delays[(delays >= 0) & np.isfinite(delays)]
    finally:
        os.unlink(path)
    result["caller_cpu_us_per_step"] = caller_cpu * 1e6  # stamping included
    worker = _stats(delays * 1e-6)  # the delays are µs already
    result["run_delay_us_per_step"] = {"caller": caller_delay / steps, "worker_median": worker["median_us"],
                                       "worker_p90": worker["p90_us"]}
    if steal and steal_after and steal_after[1] > steal[1]:
        result["steal_share"] = (steal_after[0] - steal[0]) / (steal_after[1] - steal[1])
    result["layout"] = {"env": env, "num_envs": num_envs, "workers": n_workers, "steps": steps,
                        "batch_size": batch, "usable_cores": usable_cores()}
    return result


def report(result: dict) -> str:
    lay, delay = result["layout"], result["run_delay_us_per_step"]
    what = f"async batches of {lay['batch_size']}" if lay["batch_size"] else "synchronous steps"
    lines = [f"{lay['env']}: {lay['num_envs']} envs in {lay['workers']} workers on {lay['usable_cores']} usable "
             f"cores, {lay['steps']} {what}", "", f"{'gap':<52} {'median µs':>10} {'p90 µs':>10}"]
    lines += [f"{name:<52} {s['median_us']:>10.1f} {s['p90_us']:>10.1f}" for name, s in result["gaps"].items()]
    lines.append("")
    for label, key, fmt in (("the workers' busy share (their envs' own time / elapsed)", "workers_busy_share", ".2f"),
                            ("workers a batch came from, median", "workers_per_batch", ".0f"),
                            ("recvs that had to wait", "recvs_that_waited", ".1%"),
                            ("returned envs that had reset", "returned_resets", ".1%"),
                            ("barrier efficiency (mean / max group work), median", "barrier_efficiency", ".2f"),
                            ("step / slowest group's work, median", "step_over_slowest_group", ".2f"),
                            ("last to finish (worker: steps)", "last_finisher", ""),
                            ("steps with a reset", "steps_with_a_reset", ".1%"),
                            ("the last finisher had one", "last_finisher_had_reset", ".1%")):
        if key in result:  # async batches have the first four, synchronous steps the others
            lines.append(f"{label}: {result[key]:{fmt}}")
    lines += [
        f"caller's CPU per step (thread_time, stamping included): {result['caller_cpu_us_per_step']:.1f} µs",
        f"run delay per step (µs): caller {delay['caller']:.1f}, worker median {delay['worker_median']:.1f}, "
        f"p90 {delay['worker_p90']:.1f}",
    ]
    if "steal_share" in result:
        lines.append(f"steal time: {result['steal_share']:.2%} of the machine's CPU time")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    p = parser(__doc__, json_name="")
    p.add_argument("--env", default="busy", help=f"one of {sorted([*ENVS, 'stragglers'])} or a registered id")
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--workers", type=int, default=None, help="default: ProcessVectorEnv's")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--busy-us", type=float, default=100.0, help="the busy env's step cost")
    p.add_argument("--batch-size", type=int, default=None, help="async batches of this many envs")
    a = p.parse_args(argv)
    result = run(a.env, a.num_envs, a.workers, a.steps, a.warmup, a.busy_us, a.batch_size)
    print(report(result))
    if a.json:
        write_json(a.json, "step_timeline.py", vars(a), [result])
    return result


if __name__ == "__main__":
    main()
