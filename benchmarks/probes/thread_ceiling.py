"""What two plain threads reach with gymnasium's envs on this interpreter: the thread backend's ceiling.

    PYTHON_GIL=0 python3.13t benchmarks/probes/thread_ceiling.py      # CartPole-v1, 8 envs
    python benchmarks/probes/thread_ceiling.py --env Acrobot-v1 --rounds 5

No vecenv: 8 envs stepped (with autoreset) by one thread (``serial``); by two threads of 4 that
never wait for each other (``free``: the machine's ceiling for threads); by two threads meeting
after every step through flags they spin on (``lockstep``: a vector env's shape with Python's
cheapest hand-off), with each thread's envs made by that thread (``lockstep-own``: on a
free-threaded Python an object's reference count is cheapest in the thread that made it). The
flags count in small ints (immortal objects). Under the GIL the spinning modes measure the GIL's
switch interval: run it free-threaded.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

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


def _timed(main: Callable[[], None], helper: Callable[[], None] | None = None,
           ready: threading.Event | None = None) -> float:
    """Seconds ``main`` takes in this thread while ``helper`` runs in another (started first,
    and awaited through ``ready`` where given)."""
    thread = threading.Thread(target=helper) if helper else None
    if thread:
        thread.start()
    if ready:
        ready.wait(60)
    start = time.perf_counter()
    main()
    elapsed = time.perf_counter() - start
    if thread:
        thread.join()
    return elapsed


def serial(env_id: str, steps: int) -> float:
    envs = _made(env_id, 8, 0)
    actions = [envs[0].action_space.sample() for _ in envs]
    return _timed(lambda: [_step(envs, actions) for _ in range(steps)])


def free(env_id: str, steps: int) -> float:
    envs = _made(env_id, 8, 0)
    actions = [envs[0].action_space.sample() for _ in range(4)]

    def run(block: list[gym.Env]) -> Callable[[], None]:
        return lambda: [_step(block, actions) for _ in range(steps)]

    start = threading.Event()  # both threads inside the clock: the helper waits for it
    helper = run(envs[4:])
    return _timed(lambda: (start.set(), run(envs[:4])()), lambda: (start.wait(), helper()))


def lockstep(env_id: str, steps: int, own: bool = False) -> float:
    mine = _made(env_id, 4, 0)
    actions = [mine[0].action_space.sample() for _ in range(4)]
    go, done, ready = _Flag(), _Flag(), threading.Event()
    given = [] if own else _made(env_id, 4, 4)

    def helper() -> None:
        block = _made(env_id, 4, 4) if own else given
        ready.set()
        for s in range(1, steps + 1):
            while go.value != s & 0xFF:
                pass
            _step(block, actions)
            done.value = s & 0xFF

    def main() -> None:
        for s in range(1, steps + 1):
            go.value = s & 0xFF
            _step(mine, actions)
            while done.value != s & 0xFF:
                pass

    return _timed(main, helper, ready)


MODES: dict[str, Callable[[str, int], float]] = {
    "serial": serial, "free": free, "lockstep": lockstep, "lockstep-own": partial(lockstep, own=True)}


def interpreter() -> str:
    """This Python's version, and whether the GIL is on."""
    return f"{sys.version.split()[0]} {'GIL' if gil_enabled() else 'free-threaded, GIL off'}"


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from _common import interleave, parser

    p = parser(__doc__, rounds=3)
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--steps", type=int, default=3000, help="8-env steps a mode runs in a round")
    args = p.parse_args(argv)
    print(f"{interpreter()}, {args.env}, 8 envs", flush=True)
    times = interleave(list(MODES), args.rounds, lambda name: MODES[name](args.env, args.steps))
    base = statistics.median(times["serial"])
    for name, values in times.items():
        med = statistics.median(values)
        spread = " ".join(f"{base / v:.2f}" for v in values)
        print(f"{name:15s} {med / args.steps * 1e6:7.1f} µs an 8-env step  {base / med:5.2f}x serial  (rounds: {spread})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
