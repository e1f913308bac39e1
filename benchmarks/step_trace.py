"""How many vecenv functions, in how many modules, ``steps`` CartPole steps (4 envs, 2 workers)
pass through in your thread (``sys.setprofile``), per layout; ``--list`` names them.

    python benchmarks/step_trace.py                 # process, inline, thread
    python benchmarks/step_trace.py --list thread
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import numpy as np

import vecenv

sys.path.insert(0, str(Path(__file__).resolve().parent))
from process_bench import BACKENDS as LAYOUTS  # noqa: E402  (vecenv.make's arguments per layout)

PACKAGE_DIR = str(Path(vecenv.__file__).parent)


def trace(layout: str, steps: int = 10, warmup: int = 50) -> tuple[Counter, int]:
    """Every vecenv function (``module:qualname``) called by ``steps`` steps, and the call count."""
    calls: Counter = Counter()

    def profile(frame, event, _arg) -> None:
        if event != "call":
            return
        code = frame.f_code
        if code.co_filename.startswith(PACKAGE_DIR):
            module = frame.f_globals.get("__name__", code.co_filename)
            calls[f"{module}:{getattr(code, 'co_qualname', code.co_name)}"] += 1

    envs = vecenv.make("CartPole-v1", 4, **LAYOUTS[layout])
    try:
        envs.reset(seed=0)
        actions = np.zeros(4, dtype=np.int64)
        for _ in range(warmup):
            envs.step(actions)
        sys.setprofile(profile)
        try:
            for _ in range(steps):
                envs.step(actions)
        finally:
            sys.setprofile(None)
    finally:
        envs.close()
    return calls, sum(calls.values())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("layouts", nargs="*", help=f"any of {', '.join(LAYOUTS)} (default: process inline thread)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--list", action="store_true", help="name every function traced")
    args = parser.parse_args(argv)
    layouts = args.layouts or ["process", "inline", "thread"]
    unknown = sorted(set(layouts) - set(LAYOUTS))
    if unknown:
        parser.error(f"unknown layout(s) {unknown}; expected some of {list(LAYOUTS)}")
    print(f"{'layout':<8} {'functions':>9} {'modules':>7} {'calls/step':>10}")
    for layout in layouts:
        calls, total = trace(layout, args.steps)
        modules = {name.split(":")[0] for name in calls}
        print(f"{layout:<8} {len(calls):>9} {len(modules):>7} {total / args.steps:>10.1f}")
        if args.list:
            for name, count in sorted(calls.items()):
                print(f"    {count / args.steps:6.1f}  {name}")


if __name__ == "__main__":
    main()
