"""Stragglers on many workers (issue 63): vecenv's sync step and async batches against the
free-running ceiling and a zero-overhead simulation of each readiness rule on the same cost
streams (docs/bench.md, "Stragglers", says what each row is).

    python benchmarks/stragglers.py                       # 5 rounds of 2 s per row
    python benchmarks/stragglers.py --seconds 1 --rounds 3 --json out.json
    python benchmarks/stragglers.py --dist lognormal --spread 0.5 --reset-us 0
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import heapq
import multiprocessing
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np

import vecenv

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import drive, free_running, interleave, parser, spread, write_json  # noqa: E402

#: fork where there is one: every process runs this file's envs without importing it again (a
#: forkserver, Python 3.14's default on Linux, could not import it when it was loaded by path)
CONTEXT = "fork" if "fork" in multiprocessing.get_all_start_methods() else None


# ==================================================================== env costs
@dataclass(frozen=True)
class Costs:
    """What an env's units of work cost: steps (µs, mean), their spread, resets, episode lengths."""

    step_us: float = 400.0
    spread: float = 0.25  # uniform: ± this share; lognormal: sigma
    reset_us: float = 6000.0
    episode: tuple[int, int] = (40, 160)
    dist: str = "uniform"


class CostStream:
    """One env's costs in order (seconds), drawn from ``(seed, index)``: the real env and the
    simulation read the same stream."""

    def __init__(self, costs: Costs, seed: int, index: int) -> None:
        self.costs, self.left = costs, 0
        self.rng = np.random.default_rng([seed, index])

    def reset(self) -> float:
        self.left = int(self.rng.integers(self.costs.episode[0], self.costs.episode[1] + 1))
        return self.costs.reset_us * 1e-6

    def step(self) -> tuple[float, bool]:
        """A step's cost, and whether it ends the episode (then a reset comes next)."""
        c, self.left = self.costs, self.left - 1
        if c.dist == "lognormal":
            factor = float(np.exp(c.spread * self.rng.standard_normal() - c.spread ** 2 / 2))
        else:
            factor = 1.0 + c.spread * float(self.rng.uniform(-1.0, 1.0))
        return c.step_us * 1e-6 * factor, self.left <= 0

    def units(self, horizon_s: float) -> np.ndarray:
        """The costs of the units after the first reset, until they add up to ``horizon_s``
        (the autoreset of ``gymnasium``'s NEXT_STEP mode: a step after an episode's end resets)."""
        out: list[float] = []
        total, self.left = 0.0, 0
        self.reset()
        while total <= horizon_s:
            cost, last = self.step()
            out.append(cost)
            if last:
                out.append(self.reset())
            total += cost + (out[-1] if last else 0.0)
        return np.array(out)


def wait(seconds: float, spin_s: float) -> None:
    """Sleep ``seconds``, the last ``spin_s`` of them busy-waiting (precision)."""
    end = time.perf_counter() + seconds
    if seconds > spin_s:
        time.sleep(seconds - spin_s)
    while time.perf_counter() < end:
        pass


class WaitEnv(gym.Env):
    """An env whose steps and resets wait for the costs of its :class:`CostStream`."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, costs: Costs, seed: int, index: int, spin_us: float = 0.0) -> None:
        # Linux sleeps overshoot by the timer slack (50 µs): 1 ns makes a 400 µs sleep ~400 µs
        if sys.platform.startswith("linux"):
            with contextlib.suppress(OSError, AttributeError):
                ctypes.CDLL(None).prctl(29, 1, 0, 0, 0)  # PR_SET_TIMERSLACK
        self.stream, self.spin_s = CostStream(costs, seed, index), spin_us * 1e-6
        self.obs = np.zeros(4, np.float32)

    def reset(self, *, seed=None, options=None):
        wait(self.stream.reset(), self.spin_s)
        return self.obs, {}

    def step(self, action):
        cost, last = self.stream.step()
        wait(cost, self.spin_s)
        return self.obs, 1.0, False, last, {}


# ==================================================================== zero-overhead simulation
def simulate(rule: str, units: list[np.ndarray], workers: int, batch_size: int | None = None) -> float:
    """Env steps per second that readiness ``rule`` allows with zero overhead, over the units
    (seconds, in order) of each env, envs split into ``workers`` contiguous groups:

    - ``ceiling``: every group steps its envs in turn, never waiting for another;
    - ``sync``: each step every group steps its envs in turn; the step ends with the slowest;
    - ``queue``: each step the workers take envs from one queue, as EnvPool's threads do (a
      slow env holds up only the worker that has it); the step ends with the last env;
    - ``worker``: async batches of whole replies: a worker steps all envs it holds, and they are
      ready together when the last is done; envs sent while it is busy wait until it is free;
    - ``env``: async batches, per-env readiness: a worker steps its queue one env at a time, each
      ready when its own step is done; envs sent while it is busy join its queue.

    The caller takes the first ``batch_size`` ready envs and sends them back at once."""
    groups = np.array_split(np.arange(len(units)), workers)
    k = min(len(u) for u in units)
    table = np.stack([u[:k] for u in units], axis=1)  # (unit, env)
    horizon = float(table.sum(axis=0).min())  # every env has work left until then
    if rule == "ceiling":
        done = 0
        for g in groups:
            done += int(np.searchsorted(np.cumsum(table[:, g].ravel()), horizon, side="right"))
        return done / horizon
    if rule == "sync":
        step = np.max([table[:, g].sum(axis=1) for g in groups], axis=0)
        t = np.cumsum(step)
        steps = int(np.searchsorted(t, horizon, side="right"))
        return steps * len(units) / float(t[steps - 1])
    if rule == "queue":
        t, steps = 0.0, 0
        for costs in table:
            free = [t] * workers
            for cost in costs:  # the worker free first takes the next env
                heapq.heapreplace(free, free[0] + cost)
            if max(free) > horizon:
                break
            t, steps = max(free), steps + 1
        return steps * len(units) / t
    if rule not in ("worker", "env"):
        raise ValueError(f"unknown rule {rule!r}")
    batch = batch_size or len(units)
    worker_of = np.empty(len(units), int)
    for w, g in enumerate(groups):
        worker_of[g] = w
    nxt = [0] * len(units)
    queue: list[list[int]] = [[] for _ in groups]
    busy = [False] * len(groups)
    events: list[tuple[float, int, int]] = []  # (time, worker, env or -1 for a whole job)
    jobs: dict[int, list[int]] = {}

    def start(w: int, now: float) -> None:
        if rule == "env":
            e = queue[w].pop(0)
            heapq.heappush(events, (now + table[nxt[e], e], w, e))
            nxt[e] += 1
        else:
            job, queue[w] = queue[w], []
            end = now + sum(table[nxt[e], e] for e in job)
            for e in job:
                nxt[e] += 1
            jobs[w] = job
            heapq.heappush(events, (end, w, -1))
        busy[w] = True

    ready, now, returned = list(range(len(units))), 0.0, 0
    while True:
        while len(ready) >= batch:
            sent, ready = ready[:batch], ready[batch:]
            returned += batch
            for e in sent:
                if nxt[e] >= k:
                    return returned / now
                queue[worker_of[e]].append(e)
            for w in sorted({int(worker_of[e]) for e in sent}):
                if not busy[w]:
                    start(w, now)
        now, w, e = heapq.heappop(events)
        if now > horizon:
            return returned / now
        ready.extend(jobs.pop(w) if e < 0 else [e])
        busy[w] = False
        if queue[w]:
            start(w, now)


# ==================================================================== measured
def measured(name: str, fns: list, workers: int, seconds: float) -> float:
    """Env steps/s of one vector env: ``sync``, ``b=N`` (async batches of N) or ``gym-async``."""
    if name == "gym-async":
        return drive(gym.vector.AsyncVectorEnv(fns, context=CONTEXT), seconds, 0.2)[0]
    batch = int(name[2:]) if name.startswith("b=") else None
    return drive(vecenv.ProcessVectorEnv(fns, num_workers=workers, batch_size=batch, context=CONTEXT), seconds, 0.2)[0]


# ==================================================================== the run
def main(argv: list[str] | None = None) -> dict:
    p = parser(__doc__, rounds=5, seconds=2.0, json_name="")
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--batch-sizes", default="32,16", help="comma-separated async batch sizes")
    p.add_argument("--step-us", type=float, default=400.0)
    p.add_argument("--spread", type=float, default=0.25)
    p.add_argument("--reset-us", type=float, default=6000.0)
    p.add_argument("--episode", default="40:160", help="LOW:HIGH steps")
    p.add_argument("--dist", choices=["uniform", "lognormal"], default="uniform")
    p.add_argument("--spin-us", type=float, default=0.0, help="busy-wait tail of each wait")
    p.add_argument("--sim-seconds", type=float, default=10.0, help="simulated time per rule")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-gym", action="store_true", help="skip gymnasium's AsyncVectorEnv")
    a = p.parse_args(argv)
    low, high = (int(x) for x in a.episode.split(":"))
    costs = Costs(a.step_us, a.spread, a.reset_us, (low, high), a.dist)
    batches = [int(b) for b in a.batch_sizes.split(",") if b]
    fns = [functools.partial(WaitEnv, costs, a.seed, i, a.spin_us) for i in range(a.num_envs)]
    groups = [[fns[i] for i in g] for g in np.array_split(np.arange(a.num_envs), a.workers)]  # the ceiling's

    units = [CostStream(costs, a.seed, i).units(a.sim_seconds) for i in range(a.num_envs)]
    sim = {rule: simulate(rule, units, a.workers) for rule in ("ceiling", "sync", "queue")}
    for b in batches:
        for rule in ("worker", "env"):
            sim[f"{rule} b={b}"] = simulate(rule, units, a.workers, b)

    rows = ["sync"] + [f"b={b}" for b in batches] + ([] if a.no_gym else ["gym-async"])

    def one(row: str) -> float:
        return free_running(groups, a.seconds, CONTEXT) if row == "ceiling" else measured(row, fns, a.workers, a.seconds)

    rates = interleave(["ceiling", *rows], a.rounds, one,
                       lambda r, row, v: print(f"round {r + 1}: {row} {v:,.0f} steps/s", file=sys.stderr, flush=True))
    shares = {row: [v / c for v, c in zip(rates[row], rates["ceiling"], strict=True)] for row in rows}

    print(f"\n{a.num_envs} envs, {a.workers} workers; {costs}; medians of {a.rounds} rounds [min-max]\n")
    # vecenv's rules: a barrier for the synchronous step, per-env readiness for async batches
    # (the process backend publishes each env as its step ends)
    print("| | env steps/s | share of ceiling | ideal: barrier / whole worker replies (sim) "
          "| ideal: one queue / per env (sim) | measured / ideal of vecenv's rule |\n"
          "|---|---:|---:|---:|---:|---:|")
    print(f"| ceiling, {a.workers} free-running processes | {spread(rates['ceiling'])} | 1.00 | "
          f"{sim['ceiling']:,.0f} steps/s | | |")
    names = {"sync": f"vecenv synchronous, {a.workers} workers", "gym-async": f"gym AsyncVectorEnv ({a.num_envs})"}
    for row in rows:
        cells = ["", "", ""]
        if row != "gym-async":
            whole = sim["sync" if row == "sync" else f"worker {row}"] / sim["ceiling"]
            each = sim["queue" if row == "sync" else f"env {row}"] / sim["ceiling"]
            ours = whole if row == "sync" else each
            cells = [f"{whole:.2f}", f"{each:.2f}", f"{statistics.median(shares[row]) / ours:.2f}"]
        print(f"| {names.get(row, f'vecenv async {row}')} | {spread(rates[row])} | {spread(shares[row], ',.2f')} "
              f"| {' | '.join(cells)} |")
    result = {"costs": asdict(costs), "rates": rates, "shares": shares,
              "sim": sim, "sim_shares": {k: v / sim["ceiling"] for k, v in sim.items()}}
    if a.json:
        write_json(a.json, "stragglers.py", vars(a), [result])
    return result


if __name__ == "__main__":
    main()
