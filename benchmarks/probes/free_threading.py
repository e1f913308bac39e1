"""The thread backend against serial and processes on one interpreter, free-threaded or not.

    PYTHON_GIL=0 python3.13t benchmarks/probes/free_threading.py   # every scenario (~20 min, 2 cores)
    python benchmarks/probes/free_threading.py --scenario idle --envs CartPole-v1 --rounds 3

Every figure is against ``serial`` on the same interpreter. Scenarios: ``idle``; ``busy`` (a busy
process beside, in this run's autogroup); ``busy-setsid`` (in its own); ``policy`` (a numpy MLP
in the loop, async batches of 4: ``thread-b4``, ``process-b4``). Beside the contenders each round
runs thread_ceiling.py's plain threads (not in ``policy``); ``idle`` says what share of their
gain the thread backend reached. See docs/performance.md#free-threaded-python.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

for _blas in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # before numpy loads
    os.environ.setdefault(_blas, "1")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import thread_ceiling  # noqa: E402
from _common import interleave, parser  # noqa: E402
from shared_bench.load import busy_process  # noqa: E402

import vecenv  # noqa: E402
from vecenv.bench import envs as _registers_busy  # noqa: E402, F401  (vecenv/Busy-v0)
from vecenv.system import gil_enabled  # noqa: E402

N = 8
SERIAL, THREAD, PROCESS = dict(backend="serial"), dict(backend="thread"), dict(backend="process")
B4 = {"thread-b4": dict(backend="thread", batch_size=4), "process-b4": dict(backend="process", batch_size=4)}
IDLE = {"serial": SERIAL, "thread": THREAD, "process": PROCESS,
        "inline": dict(backend="process", inline=True, num_workers=2)}
#: scenario -> contenders (beside a busy process and with a policy: async batches too)
TABLES = {"idle": IDLE, "busy": {**IDLE, **B4}, "busy-setsid": {**IDLE, **B4},
          "policy": {"serial": SERIAL, "thread": THREAD, "thread-b4": B4["thread-b4"], "process": PROCESS,
                     "process-b4": B4["process-b4"]}}
DEFAULT_ENVS = ("CartPole-v1", "vecenv/Busy-v0", "Pendulum-v1", "Acrobot-v1", "HalfCheetah-v5")
#: the plain-thread ceiling's modes, run beside the contenders in every scenario but ``policy``
CEILING = {"plain-serial": thread_ceiling.serial, "plain-free": thread_ceiling.free,
           "plain-lockstep": thread_ceiling.MODES["lockstep-own"]}


class Policy:
    """A two-layer MLP in numpy, repeated to cost about ``us`` µs for 8 observations."""

    def __init__(self, obs_size: int, n_actions: int, us: float) -> None:
        rng = np.random.default_rng(0)
        self.n_actions, self.repeat = max(n_actions, 1), 1
        self.w1 = rng.standard_normal((obs_size, 64)).astype(np.float32)
        self.w2 = rng.standard_normal((64, self.n_actions)).astype(np.float32)
        x, start = np.zeros((N, obs_size), np.float32), time.perf_counter()
        for _ in range(200):
            self(x)
        self.repeat = max(1, round(us / max((time.perf_counter() - start) / 200 * 1e6, 1e-3)))

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        x = obs.reshape(len(obs), -1).astype(np.float32)
        for _ in range(self.repeat):
            out = np.maximum(x @ self.w1, 0.0) @ self.w2
        return np.argmax(out, axis=1) % self.n_actions


def measure(env_id: str, kwargs: dict, seconds: float, warmup: int, policy_us: float | None) -> tuple[float, float]:
    """Env steps per second of one contender, and the cores this process's threads used meanwhile."""
    rng = np.random.default_rng(0)
    with vecenv.make(env_id, N, **kwargs) as envs:
        obs, infos = envs.reset(seed=0)
        space = envs.single_action_space
        discrete = isinstance(space, gym.spaces.Discrete)
        policy = None if policy_us is None else Policy(
            int(np.prod(envs.single_observation_space.shape)), int(getattr(space, "n", 0)), policy_us)
        # random actions drawn before the clock (a draw costs ~9 µs on 3.13t), used in turn
        drawn = {rows: itertools.cycle([rng.integers(0, space.n, rows) if discrete else rng.uniform(
            space.low, space.high, (rows, *space.shape)).astype(space.dtype) for _ in range(16)])
            for rows in {N, kwargs.get("batch_size") or N}}

        def act(o: np.ndarray, rows: int) -> Any:
            chosen = policy(o) if policy is not None else None
            return chosen if chosen is not None and discrete else next(drawn[rows])

        ids = infos.get("env_id")
        if kwargs.get("batch_size"):  # EnvPool's loop: send to the envs the last recv returned
            rest = envs.recv()[-1]["env_id"]
            envs.send(act(obs, len(ids)), ids)
            ids = rest  # the rest of the reset: act on it next

        def one() -> int:
            nonlocal ids, obs
            if not kwargs.get("batch_size"):
                obs = envs.step(act(obs, N))[0]
                return N
            envs.send(act(obs, len(ids)), ids)
            obs, _, _, _, info = envs.recv()
            ids = info["env_id"]
            return len(ids)

        for _ in range(warmup):
            one()
        steps, start, cpu = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - start < seconds:
            steps += one()
        wall = time.perf_counter() - start
        return steps / wall, (time.process_time() - cpu) / wall


def ceiling_rate(mode: str, env_id: str, seconds: float) -> tuple[float, float]:
    """Env steps per second of a plain-thread mode run for about ``seconds``, and the cores used."""
    run, steps = CEILING[mode], 50
    steps = max(steps, int(steps * seconds / max(run(env_id, steps), 1e-6)))
    start, cpu = time.perf_counter(), time.process_time()
    rate = N * steps / run(env_id, steps)
    return rate, (time.process_time() - cpu) / (time.perf_counter() - start)


def one_round(scenario: str, env_id: str, name: str, args: Any) -> tuple[float, float]:
    """One measurement of ``name``, beside a busy process (killed after it) in the busy scenarios."""
    busy = busy_process(scenario == "busy-setsid") if scenario.startswith("busy") else contextlib.nullcontext()
    with busy:
        if name in CEILING:
            return ceiling_rate(name, env_id, args.seconds)
        return measure(env_id, TABLES[scenario][name], args.seconds, args.warmup,
                       args.policy_us if scenario == "policy" else None)


def run(args: Any) -> dict:
    results: dict[str, Any] = {
        "python": sys.version, "gil": gil_enabled(), "machine": platform.node(), "cores": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": [],
    }
    for scenario in args.scenario:
        for env_id in args.envs:
            try:
                gym.make(env_id).close()
            except Exception as exc:  # e.g. no MuJoCo wheel for this interpreter
                print(f"{scenario:17s} {env_id:15s} skipped: {type(exc).__name__}: {exc}", flush=True)
                continue
            names = list(TABLES[scenario]) + (list(CEILING) if scenario != "policy" else [])
            got = interleave(names, args.rounds, lambda name, s=scenario, e=env_id: one_round(s, e, name, args))
            per = {k: [rate for rate, _ in v] for k, v in got.items()}
            base = statistics.median(per["serial"])
            for name in names:
                med, cores = statistics.median(per[name]), [used for _, used in got[name]]
                row = {"scenario": scenario, "env": env_id, "contender": name, "steps_per_s": med,
                       "x_serial": med / base, "us_per_env_step": 1e6 / med, "rounds": per[name],
                       "cores": statistics.median(cores), "cores_rounds": cores}
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
    p = parser(__doc__, rounds=5, seconds=1.0, json_name="free_threading.json")
    p.add_argument("--scenario", default=",".join(TABLES), type=lambda s: s.split(","))
    p.add_argument("--envs", default=",".join(DEFAULT_ENVS), type=lambda s: s.split(","))
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--policy-us", type=float, default=100.0, help="µs the policy takes for 8 observations")
    args = p.parse_args(argv)
    unknown = [s for s in args.scenario if s not in TABLES]
    if unknown:
        p.error(f"--scenario: unknown {unknown}, expected some of {list(TABLES)}")
    print(f"{thread_ceiling.interpreter()}, {os.cpu_count()} cores, N={N}", flush=True)
    results = run(args)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
