"""What two threads that use one object at once cost each other, on a free-threaded Python.

    PYTHON_GIL=0 python3.13t benchmarks/shared_objects.py
    python benchmarks/shared_objects.py --iterations 50000 --repeats 3

Each case is a loop of one small piece of work, timed in your thread alone and then in your
thread and a helper thread at once (the best of ``--repeats``), as ns per iteration. Without the
GIL, using an object counts a reference to it: in a field of its own for the thread that made it
(the owner), in a shared, atomic one for every other thread, both in the object's first cache
line. When the owner and another thread use the object at once, that line moves between their
cores on every use; a view or copy that the other thread makes itself is its own object, and
costs nothing of the kind. ``EnvGroup.step`` gives each thread its own (``_Lane`` in
``vecenv/worker/group.py``); the cases here show why, and what stays out of reach (numpy's
ufuncs, which env code calls). Under the GIL the two threads take turns and the figures say only
that.
"""

from __future__ import annotations

import argparse
import enum
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import thread_ceiling  # noqa: E402


class _Mode(enum.Enum):
    NEXT = 1
    SAME = 2


_NEXT = _Mode.NEXT
#: made by your thread (the one that imports this script): the owner of each
_ROWS = np.zeros(8)
_ITEMS = [object() for _ in range(8)]
_SHAPE = (4,)


def _rows_shared(k: int, n: int) -> None:
    rows = _ROWS
    for i in range(n):
        rows[4 * k + (i & 3)] = 1.0


def _rows_own(k: int, n: int) -> None:
    rows = _ROWS[:]  # a view made by this thread: the same memory, an object of its own
    for i in range(n):
        rows[4 * k + (i & 3)] = 1.0


def _list_shared(k: int, n: int) -> None:
    items = _ITEMS
    for _ in range(n):
        items[k]


def _list_own(k: int, n: int) -> None:
    items = list(_ITEMS)
    for _ in range(n):
        items[k]


def _enum_shared(k: int, n: int) -> None:
    mode = _NEXT
    for _ in range(n):
        mode is _NEXT  # noqa: B015


def _enum_own(k: int, n: int) -> None:
    is_next = _NEXT is _Mode.NEXT  # a bool: immortal, no count to keep
    for _ in range(n):
        is_next  # noqa: B018


def _shape_shared(k: int, n: int) -> None:
    shape, obs = _SHAPE, np.zeros(4)
    for _ in range(n):
        obs.shape == shape  # noqa: B015


def _shape_own(k: int, n: int) -> None:
    shape, obs = tuple(list(_SHAPE)), np.zeros(4)
    for _ in range(n):
        obs.shape == shape  # noqa: B015


def _ufunc(k: int, n: int) -> None:
    cos = np.cos
    for _ in range(n):
        cos(0.5)


#: (name, loop): each loop's first argument is the thread's index (0: yours, 1: the helper)
CASES: list[tuple[str, Callable[[int, int], None]]] = [
    ("numpy rows, shared", _rows_shared), ("numpy rows, own view", _rows_own),
    ("list item, shared", _list_shared), ("list item, own copy", _list_own),
    ("enum member, shared", _enum_shared), ("enum member, own bool", _enum_own),
    ("shape tuple, shared", _shape_shared), ("shape tuple, own copy", _shape_own),
    ("np.cos call (env code)", _ufunc),
]


def per_iteration(loop: Callable[[int, int], None], threads: int, n: int) -> float:
    """ns per iteration of ``loop`` run by your thread and ``threads - 1`` helpers at once (the slowest)."""
    barrier = threading.Barrier(threads)
    times: list[float] = []

    def body(k: int) -> None:
        barrier.wait()
        start = time.perf_counter()
        loop(k, n)
        times.append(time.perf_counter() - start)

    helpers = [threading.Thread(target=body, args=(k,)) for k in range(1, threads)]
    for t in helpers:
        t.start()
    body(0)
    for t in helpers:
        t.join()
    return max(times) / n * 1e9


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=200_000, help="iterations of each loop per run")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each; the best counts")
    args = parser.parse_args(argv)
    print(f"{thread_ceiling.interpreter()}: ns an iteration, your thread alone and beside a helper doing the same")
    for name, loop in CASES:
        alone = min(per_iteration(loop, 1, args.iterations) for _ in range(args.repeats))
        both = min(per_iteration(loop, 2, args.iterations) for _ in range(args.repeats))
        print(f"{name:24s} alone {alone:7.1f}   two threads {both:7.1f}   ({both - alone:+6.1f} ns, {both / alone:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
