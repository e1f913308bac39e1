"""Where a step of the thread backend spends its time, against serial and two plain threads.

    PYTHON_GIL=0 python3.13t benchmarks/thread_step_breakdown.py          # CartPole-v1, 8 envs
    python benchmarks/thread_step_breakdown.py --env Acrobot-v1 --rounds 5

Each of ``--rounds`` rounds builds a ``serial`` and a ``thread`` vector env (8 envs, two threads)
afresh and times ``--steps`` steps of each, then runs thread_ceiling.py's ``serial`` and
``lockstep-own`` (two plain threads of 4 envs meeting after every step: no vecenv at all).
Every run of ``EnvGroup.step`` (the loop that steps envs and writes their rows into the batch) is
stamped in the thread that runs it, with the number of envs it stepped, so a step splits into:

- ``before``: from ``step()`` being called until your thread starts stepping envs (the actions
  checked and stored, the step handed out);
- ``yours`` and ``helper``: each thread's part, with its µs per env;
- ``after``: from the later part's end until ``step()`` returns (the parts joined, the batch
  copied out, the infos built).

A serial step splits into its 8 envs and the rest. ``per-env slowdown`` is the thread backend's
µs per env in a part over serial's: what stepping two envs at once on two cores costs each of
them (on a free-threaded Python, shared caches and reference counts). Medians over every step of
every round; the stamps cost the same little in both backends. Run it on a free-threaded Python
with the GIL off; under the GIL the parts take turns and the split says only that.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import thread_ceiling  # noqa: E402

import vecenv  # noqa: E402
from vecenv.bench import envs as _registers_busy  # noqa: E402, F401  (vecenv/Busy-v0)
from vecenv.worker.group import EnvGroup  # noqa: E402

#: (thread, start ns, end ns, envs stepped) of every EnvGroup.step while stamping is on
_STAMPS: list[tuple[int, int, int, int]] = []
_clock = time.perf_counter_ns


def _stamp_group_steps() -> None:
    """Wrap ``EnvGroup.step`` so that each run records its thread, span and envs."""
    step = EnvGroup.step

    def stamped(self: EnvGroup, ids: Any = None, given: Any = None) -> Any:
        count = [0]

        def counted(source: Any) -> Any:
            for j in source:
                count[0] += 1
                yield j

        start = _clock()
        try:
            return step(self, counted(self._ids(ids)), given)
        finally:
            _STAMPS.append((threading.get_ident(), start, _clock(), count[0]))

    EnvGroup.step = stamped  # type: ignore[method-assign]


def _timed_steps(backend: str, env_id: str, steps: int) -> list[tuple[int, int]]:
    """The (start, end) of each of ``steps`` steps, after a warm-up; stamps from those only."""
    kwargs = {"num_workers": 2} if backend == "thread" else {}
    envs = vecenv.make(env_id, 8, backend=backend, **kwargs)
    try:
        envs.reset(seed=0)
        actions = np.array([envs.single_action_space.sample() for _ in range(8)])
        for _ in range(200):
            envs.step(actions)
        _STAMPS.clear()
        spans = []
        for _ in range(steps):
            start = _clock()
            envs.step(actions)
            spans.append((start, _clock()))
        return spans
    finally:
        envs.close()


def _split(spans: list[tuple[int, int]], caller: int) -> dict[str, list[float]]:
    """Per step (µs): before, each thread's part and µs per env, after. A step your thread
    stepped alone counts as a serial one (before, envs, after); one it took no env of counts
    only in ``total``."""
    stamps = sorted(_STAMPS, key=lambda s: s[1])
    out: dict[str, list[float]] = {k: [] for k in ("total", "before", "yours", "yours_env", "helper",
                                                   "helper_env", "after", "envs", "envs_env",
                                                   "helper_began", "last")}
    k = 0
    for start, end in spans:
        out["total"].append((end - start) / 1e3)
        mine = theirs = None
        while k < len(stamps) and stamps[k][1] < end:
            stamp = stamps[k]
            k += 1
            if stamp[1] >= start and stamp[3]:
                if stamp[0] == caller:
                    mine = mine or stamp
                else:
                    theirs = theirs or stamp
        if mine is None:
            continue
        if theirs is None:  # serial: one part, all the envs
            out["before"].append((mine[1] - start) / 1e3)
            out["envs"].append((mine[2] - mine[1]) / 1e3)
            out["envs_env"].append((mine[2] - mine[1]) / 1e3 / mine[3])
            out["after"].append((end - mine[2]) / 1e3)
            continue
        out["before"].append((mine[1] - start) / 1e3)
        for name, part in (("yours", mine), ("helper", theirs)):
            out[name].append((part[2] - part[1]) / 1e3)
            out[name + "_env"].append((part[2] - part[1]) / 1e3 / part[3])
        out["helper_began"].append((theirs[1] - start) / 1e3)
        out["last"].append((theirs[2] - mine[2]) / 1e3)
        out["after"].append((end - max(mine[2], theirs[2])) / 1e3)
    return out


def main(argv: list[str] | None = None) -> int:
    args = thread_ceiling.arguments(argv, __doc__.split("\n")[0], 2000, 5, "a contender")
    print(f"{thread_ceiling.interpreter()}, {args.env}, 8 envs, {args.rounds} rounds of {args.steps} steps",
          flush=True)
    _stamp_group_steps()
    caller = threading.get_ident()
    merged: dict[str, dict[str, list[float]]] = {"serial": {}, "thread": {}}
    plain: dict[str, list[float]] = {"serial": [], "lockstep-own": []}
    for _ in range(args.rounds):
        for backend, into in merged.items():
            for key, values in _split(_timed_steps(backend, args.env, args.steps), caller).items():
                into.setdefault(key, []).extend(values)
        plain["serial"].append(thread_ceiling.serial(args.env, args.steps) / args.steps * 1e6)
        plain["lockstep-own"].append(thread_ceiling.lockstep_own(args.env, args.steps) / args.steps * 1e6)

    def med(backend: str, key: str) -> float:
        values = merged[backend][key]
        return statistics.median(values) if values else float("nan")

    serial, thread = med("serial", "total"), med("thread", "total")
    print(f"serial        {serial:6.1f} µs a step: before {med('serial', 'before'):.1f}, envs "
          f"{med('serial', 'envs'):.1f} ({med('serial', 'envs_env'):.2f} an env), after {med('serial', 'after'):.1f}")
    print(f"thread        {thread:6.1f} µs a step ({serial / thread:.2f}x serial): "
          f"before {med('thread', 'before'):.1f}, yours {med('thread', 'yours'):.1f} "
          f"({med('thread', 'yours_env'):.2f} an env), helper {med('thread', 'helper'):.1f} "
          f"({med('thread', 'helper_env'):.2f} an env), after {med('thread', 'after'):.1f}")
    shared = len(merged["thread"]["yours"])
    print(f"              the helper began {med('thread', 'helper_began'):.1f} µs into the step and ended "
          f"{med('thread', 'last'):+.1f} µs after yours; {shared} of {len(merged['thread']['total'])} steps "
          "had both threads stepping envs")
    if shared:  # under the GIL the helper may take none of a step's envs
        per_env = statistics.median(merged["thread"]["yours_env"] + merged["thread"]["helper_env"])
        print(f"per-env slowdown with two threads stepping: {per_env / med('serial', 'envs_env'):.2f}x")
    p_serial, p_lock = statistics.median(plain["serial"]), statistics.median(plain["lockstep-own"])
    print(f"plain threads (no vecenv): serial {p_serial:.1f} µs a step, lockstep-own {p_lock:.1f} "
          f"({p_serial / p_lock:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
