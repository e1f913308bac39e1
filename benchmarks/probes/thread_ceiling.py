"""What two plain threads can do with gymnasium's envs on this interpreter: the thread backend's ceiling.

    PYTHON_GIL=0 python3.13t benchmarks/probes/thread_ceiling.py                 # CartPole-v1, 8 envs
    python benchmarks/probes/thread_ceiling.py --env Acrobot-v1 --rounds 5

No vecenv here: 8 envs made with ``gymnasium.make`` are stepped (with autoreset) by

- ``serial``: one thread, all 8;
- ``free``: two threads, 4 each, never waiting for each other (the machine's ceiling for
  threads: what a vector env could reach if a step needed no hand-off at all);
- ``lockstep``: two threads, 4 each, meeting after every step (your thread tells the helper
  through a flag the helper spins on, and waits for the helper's flag): a vector env's shape, with
  the cheapest hand-off Python has;
- ``lockstep-own``: the same, with each thread's envs made by that thread (on a free-threaded
  Python an object's reference count is cheapest in the thread that made it);
- ``lockstep-event``: the same hand-off through ``threading.Event`` (a lock each way).

The flags count in small ints (the interpreter's shared, immortal objects): a flag holding a
fresh int object would make the spinning thread count references to the other thread's object.
Each mode builds its envs afresh in each of ``--rounds`` interleaved rounds; medians of µs per
8-env step and the ratio to ``serial`` are printed. Under the GIL the spinning modes measure only
the GIL's switch interval (a spinning thread holds it): run it on a free-threaded Python.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable

import gymnasium as gym

from vecenv.system import gil_enabled


class _Flag:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


def _made(env_id: str, n: int, seed: int) -> list[gym.Env]:
    envs = [gym.make(env_id) for _ in range(n)]
    for i, env in enumerate(envs):
        env.reset(seed=seed + i)
    return envs


def _step(envs: list[gym.Env], actions: list) -> None:
    for env, action in zip(envs, actions, strict=True):
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()


def serial(env_id: str, steps: int) -> float:
    envs = _made(env_id, 8, 0)
    actions = [envs[0].action_space.sample() for _ in envs]
    start = time.perf_counter()
    for _ in range(steps):
        _step(envs, actions)
    return time.perf_counter() - start


def free(env_id: str, steps: int) -> float:
    envs = _made(env_id, 8, 0)
    actions = [envs[0].action_space.sample() for _ in range(4)]

    def run(block: list[gym.Env]) -> None:
        for _ in range(steps):
            _step(block, actions)

    threads = [threading.Thread(target=run, args=(envs[k * 4:(k + 1) * 4],)) for k in range(2)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start


def _lockstep(env_id: str, steps: int, own: bool) -> float:
    mine = _made(env_id, 4, 0)
    actions = [mine[0].action_space.sample() for _ in range(4)]
    go, done, ready = _Flag(), _Flag(), threading.Event()
    given = [] if own else _made(env_id, 4, 4)

    def helper(go: _Flag, done: _Flag) -> None:
        block = _made(env_id, 4, 4) if own else given
        ready.set()
        for s in range(1, steps + 1):
            s &= 0xFF
            while go.value != s:
                pass
            _step(block, actions)
            done.value = s

    thread = threading.Thread(target=helper, args=(go, done))
    thread.start()
    ready.wait(60)
    start = time.perf_counter()
    for s in range(1, steps + 1):
        s &= 0xFF
        go.value = s
        _step(mine, actions)
        while done.value != s:
            pass
    elapsed = time.perf_counter() - start
    thread.join()
    return elapsed


def lockstep(env_id: str, steps: int) -> float:
    return _lockstep(env_id, steps, own=False)


def lockstep_own(env_id: str, steps: int) -> float:
    return _lockstep(env_id, steps, own=True)


def lockstep_event(env_id: str, steps: int) -> float:
    envs = _made(env_id, 8, 0)
    actions = [envs[0].action_space.sample() for _ in range(4)]
    go, done = threading.Event(), threading.Event()

    def helper(block: list[gym.Env]) -> None:
        for _ in range(steps):
            go.wait()
            go.clear()
            _step(block, actions)
            done.set()

    thread = threading.Thread(target=helper, args=(envs[4:],))
    thread.start()
    start = time.perf_counter()
    for _ in range(steps):
        go.set()
        _step(envs[:4], actions)
        done.wait()
        done.clear()
    elapsed = time.perf_counter() - start
    thread.join()
    return elapsed


MODES: dict[str, Callable[[str, int], float]] = {
    "serial": serial, "free": free, "lockstep": lockstep, "lockstep-own": lockstep_own,
    "lockstep-event": lockstep_event,
}


def arguments(argv: list[str] | None, description: str, steps: int, rounds: int,
              what: str) -> argparse.Namespace:
    """``--env``, ``--steps`` (8-env steps ``what`` runs in a round) and ``--rounds``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--steps", type=int, default=steps, help=f"8-env steps {what} runs in a round")
    parser.add_argument("--rounds", type=int, default=rounds)
    return parser.parse_args(argv)


def interpreter() -> str:
    """This Python's version, and whether the GIL is on."""
    return f"{sys.version.split()[0]} {'GIL' if gil_enabled() else 'free-threaded, GIL off'}"


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv, __doc__.split("\n")[0], 3000, 3, "a mode")
    print(f"{interpreter()}, {args.env}, 8 envs", flush=True)
    times: dict[str, list[float]] = {name: [] for name in MODES}
    for _ in range(args.rounds):
        for name, mode in MODES.items():
            times[name].append(mode(args.env, args.steps))
    base = statistics.median(times["serial"])
    for name, values in times.items():
        med = statistics.median(values)
        spread = " ".join(f"{base / v:.2f}" for v in values)
        print(f"{name:15s} {med / args.steps * 1e6:7.1f} µs an 8-env step  {base / med:5.2f}x serial  (rounds: {spread})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
