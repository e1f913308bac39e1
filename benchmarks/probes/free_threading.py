"""The thread backend against serial and processes on one interpreter, free-threaded or not.

    python benchmarks/probes/free_threading.py                      # every scenario (~20 min on 2 cores)
    python benchmarks/probes/free_threading.py --scenario idle --envs CartPole-v1 --rounds 3

Run it on a free-threaded Python with the GIL off (``PYTHON_GIL=0 python3.13t ...``; the
platform harness in ../shared/platforms/pythons/ builds one) and on a GIL build, and compare each
table's ratios: every figure is against ``serial`` *on the same interpreter*, so the slower
single-thread speed of a build without PGO cancels out (the table states it as µs per env step).

Scenarios (``--scenario``, a comma list): ``idle`` (nothing else runs); ``busy`` (a busy
Python process started by this script runs beside, in this run's autogroup; each row says how
many cores this process's threads used); ``busy-setsid`` (the same busy process in an autogroup
of its own: the bound is 1.0x serial); ``policy`` (a numpy two-layer MLP on the observations in
the loop, with async batches of 4 of the 8 envs: ``thread-b4``, ``process-b4``). numpy's BLAS
runs on one thread here (``OPENBLAS_NUM_THREADS`` and the like default to 1).

Contenders: ``serial``, ``thread``, ``process``, ``inline``. In ``idle``, ``busy`` and
``busy-setsid`` each round also runs the plain-thread ceiling of ``thread_ceiling.py`` (no vecenv:
``plain-serial``, ``plain-free``, ``plain-lockstep``), and in ``idle`` the table says what share
of the lockstep ceiling's gain the thread backend reached in the same rounds: what two threads
of one process gain on a VM changes from one moment to the next, and only a ceiling measured
beside the contenders says which moment a row comes from. Each scenario runs ``--rounds``
interleaved rounds (the order rotating); a measurement builds the vector env, resets it (seed 0),
steps ``--warmup`` times, counts env steps for ``--seconds``, and closes it. Medians go to the
table; every round to ``--json``. Figures and what they showed:
docs/performance.md#free-threaded-python and the notes it links.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

for _blas in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # before numpy loads
    os.environ.setdefault(_blas, "1")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import thread_ceiling  # noqa: E402

import vecenv  # noqa: E402
from vecenv.bench import envs as _registers_busy  # noqa: E402, F401  (vecenv/Busy-v0)
from vecenv.system import gil_enabled  # noqa: E402

N = 8
CONTENDERS = {
    "serial": dict(backend="serial"),
    "thread": dict(backend="thread"),
    "process": dict(backend="process"),
    "inline": dict(backend="process", inline=True, num_workers=2),
}
#: beside a busy process: async batches too (work that need not wait for every env each step)
BUSY_CONTENDERS = {**CONTENDERS, "thread-b4": dict(backend="thread", batch_size=4),
                   "process-b4": dict(backend="process", batch_size=4)}
POLICY_CONTENDERS = {
    "serial": dict(backend="serial"),
    "thread": dict(backend="thread"),
    "thread-b4": dict(backend="thread", batch_size=4),
    "process": dict(backend="process"),
    "process-b4": dict(backend="process", batch_size=4),
}
SCENARIOS = ("idle", "busy", "busy-setsid", "policy")
DEFAULT_ENVS = ("CartPole-v1", "vecenv/Busy-v0", "Pendulum-v1", "Acrobot-v1", "HalfCheetah-v5")


class Policy:
    """A two-layer MLP in numpy, sized to cost about ``us`` µs for 8 observations."""

    def __init__(self, obs_size: int, n_actions: int, us: float) -> None:
        rng = np.random.default_rng(0)
        self.n_actions = n_actions
        hidden = 64
        self.w1 = rng.standard_normal((obs_size, hidden)).astype(np.float32)
        self.w2 = rng.standard_normal((hidden, max(n_actions, 1))).astype(np.float32)
        self.repeat = 1
        x = np.zeros((N, obs_size), np.float32)
        start = time.perf_counter()
        for _ in range(200):
            self(x)
        once = (time.perf_counter() - start) / 200 * 1e6
        self.repeat = max(1, round(us / max(once, 1e-3)))

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        x = obs.reshape(len(obs), -1).astype(np.float32)
        for _ in range(self.repeat):
            h = np.maximum(x @ self.w1, 0.0)
            out = h @ self.w2
        return np.argmax(out, axis=1) % max(self.n_actions, 1)


def _actions(envs: Any, rows: int, rng: np.random.Generator) -> Any:
    space = envs.single_action_space
    if isinstance(space, gym.spaces.Discrete):
        return rng.integers(0, space.n, rows)
    return rng.uniform(space.low, space.high, (rows, *space.shape)).astype(space.dtype)


def measure(env_id: str, kwargs: dict, seconds: float, warmup: int, policy_us: float | None) -> tuple[float, float]:
    """Env steps per second of one contender, and the cores this process's threads used meanwhile."""
    rng = np.random.default_rng(0)
    batch = kwargs.get("batch_size")
    with vecenv.make(env_id, N, **kwargs) as envs:
        obs, infos = envs.reset(seed=0)
        space = envs.single_action_space
        policy = None
        if policy_us is not None:
            policy = Policy(int(np.prod(envs.single_observation_space.shape)),
                            int(getattr(space, "n", 0)), policy_us)

        # random actions drawn before the clock starts (one draw costs ~9 µs on 3.13t, time the
        # plain-thread modes, whose actions are fixed, never spend), used in turn
        drawn: dict[int, Iterator[Any]] = {}

        def act(o: np.ndarray, rows: int) -> Any:
            if policy is None or not isinstance(space, gym.spaces.Discrete):
                if policy is not None:
                    policy(o)
                if rows not in drawn:
                    drawn[rows] = itertools.cycle([_actions(envs, rows, rng) for _ in range(16)])
                return next(drawn[rows])
            return policy(o)

        if batch:  # EnvPool's loop: send to the envs the last recv returned, recv the next ones
            ids = infos["env_id"]
            rest = envs.recv()[-1]["env_id"]
            envs.send(act(obs, len(ids)), ids)
            ids, obs = rest, obs  # the rest of the reset: act on it next

            def one() -> int:
                nonlocal ids, obs
                envs.send(act(obs, len(ids)), ids)
                obs, _, _, _, info = envs.recv()
                ids = info["env_id"]
                return len(ids)
        else:
            def one() -> int:
                nonlocal obs
                obs = envs.step(act(obs, N))[0]
                return N

        for _ in range(warmup):
            one()
        steps, start, cpu = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - start < seconds:
            steps += one()
        wall = time.perf_counter() - start
        return steps / wall, (time.process_time() - cpu) / wall


#: the plain-thread ceiling's modes, run beside the contenders in every scenario but ``policy``
CEILING = {"plain-serial": thread_ceiling.serial, "plain-free": thread_ceiling.free,
           "plain-lockstep": thread_ceiling.lockstep_own}


def ceiling_rate(mode: str, env_id: str, seconds: float) -> tuple[float, float]:
    """Env steps per second of a plain-thread ceiling mode, run for about ``seconds``, and the
    cores its threads used."""
    run, steps = CEILING[mode], 50
    elapsed = run(env_id, steps)
    steps = max(steps, int(steps * seconds / max(elapsed, 1e-6)))
    start, cpu = time.perf_counter(), time.process_time()
    rate = N * steps / run(env_id, steps)
    return rate, (time.process_time() - cpu) / (time.perf_counter() - start)


def _busy(setsid: bool) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=setsid)


def run(args: argparse.Namespace) -> dict:
    results: dict[str, Any] = {
        "python": sys.version, "gil": gil_enabled(), "machine": platform.node(), "cores": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": [],
    }
    for scenario in args.scenario:
        table = {"policy": POLICY_CONTENDERS, "idle": CONTENDERS}.get(scenario, BUSY_CONTENDERS)
        for env_id in args.envs:
            try:
                gym.make(env_id).close()
            except Exception as exc:  # e.g. no MuJoCo wheel for this interpreter
                print(f"{scenario:17s} {env_id:15s} skipped: {type(exc).__name__}: {exc}", flush=True)
                continue
            names = list(table) + (list(CEILING) if scenario != "policy" else [])
            per: dict[str, list[float]] = {k: [] for k in names}
            cores: dict[str, list[float]] = {k: [] for k in names}
            for r in range(args.rounds):
                order = names[r % len(names):] + names[:r % len(names)]
                for name in order:
                    busy = _busy(scenario == "busy-setsid") if scenario.startswith("busy") else None
                    try:
                        if busy is not None:
                            time.sleep(0.2)
                        if name in CEILING:
                            rate, used = ceiling_rate(name, env_id, args.seconds)
                        else:
                            rate, used = measure(env_id, table[name], args.seconds, args.warmup,
                                                 args.policy_us if scenario == "policy" else None)
                        per[name].append(rate)
                        cores[name].append(used)
                    finally:
                        if busy is not None:
                            busy.send_signal(signal.SIGKILL)
                            busy.wait()
            base = statistics.median(per["serial"])
            for name in names:
                med = statistics.median(per[name])
                row = {"scenario": scenario, "env": env_id, "contender": name, "steps_per_s": med,
                       "x_serial": med / base, "us_per_env_step": 1e6 / med, "rounds": per[name],
                       "cores": statistics.median(cores[name]), "cores_rounds": cores[name]}
                results["rows"].append(row)
                print(f"{scenario:17s} {env_id:15s} {name:14s} {med:10,.0f} steps/s  {med / base:5.2f}x serial"
                      f"  ({1e6 / med:7.1f} µs an env step, {row['cores']:.2f} cores here)", flush=True)
            if scenario == "idle":
                ceiling = _reached(per)
                results["rows"].append({"scenario": scenario, "env": env_id, "contender": "ceiling", **ceiling})
                print(f"{scenario:17s} {env_id:15s} ceiling: plain threads {ceiling['ceiling_x']:.2f}x plain serial; "
                      f"the thread backend reached {ceiling['share']:.0%} of that gain "
                      f"(per round: {' '.join(f'{s:.0%}' for s in ceiling['rounds'])})", flush=True)
    return results


def _reached(per: dict[str, list[float]]) -> dict[str, Any]:
    """The plain-thread ceiling's gain over plain serial, and the share of it the thread backend
    got over vecenv's serial, round by round (``(x - 1) / (ceiling - 1)``) and as a median."""
    rounds = []
    for thread, serial, lock, plain in zip(per["thread"], per["serial"], per["plain-lockstep"],
                                           per["plain-serial"], strict=True):
        gain = lock / plain - 1
        rounds.append((thread / serial - 1) / gain if gain > 0.05 else float("nan"))
    ceiling_x = statistics.median(per["plain-lockstep"]) / statistics.median(per["plain-serial"])
    known = [r for r in rounds if r == r]
    return {"ceiling_x": ceiling_x, "share": statistics.median(known) if known else float("nan"),
            "rounds": rounds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenario", default=",".join(SCENARIOS), type=lambda s: s.split(","))
    parser.add_argument("--envs", default=",".join(DEFAULT_ENVS), type=lambda s: s.split(","))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--policy-us", type=float, default=100.0,
                        help="µs the policy takes for a batch of 8 observations")
    parser.add_argument("--json", default=str(Path(__file__).resolve().parents[1] / "results" / "free_threading.json"))
    args = parser.parse_args(argv)
    unknown = [s for s in args.scenario if s not in SCENARIOS]
    if unknown:
        parser.error(f"--scenario: unknown {unknown}, expected some of {list(SCENARIOS)}")
    print(f"{thread_ceiling.interpreter()}, {os.cpu_count()} cores, N={N}", flush=True)
    results = run(args)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
