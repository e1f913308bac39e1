"""Load beside the contender: a busy process, or a second run of the same contender. Every
process started here ends with the measurement, at exit (``atexit``), or with its parent
(``PR_SET_PDEATHSIG``), so even a SIGKILLed benchmark leaves nothing spinning.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence

#: argv marker of the busy process (with this process's pid after it), for finding leftovers
BUSY_MARK = "run_shared-busy"
#: the busy process: one core spinning in pure Python, started before the contender is built;
#: it writes one byte once it spins, and ends with its parent
BUSY_CODE = (
    "import ctypes, os, sys\n"
    "try:\n    ctypes.CDLL(None).prctl(1, 9)\nexcept Exception:\n    pass\n"
    "if os.getppid() != int(sys.argv[2]):\n    sys.exit()\n"
    "sys.stdout.write('.')\nsys.stdout.flush()\n"
    "while True: pass\n"
)
#: line prefixes a two-runs child writes on stdout
READY, RESULT, ERROR = "@@ready ", "@@result ", "@@error "

_live: set[subprocess.Popen] = set()


def stop(proc: subprocess.Popen, grace: float = 0.0) -> None:
    """End ``proc``: SIGTERM and ``grace`` seconds to close its envs (SIGKILL when 0 or late)."""
    try:
        if proc.poll() is None and grace > 0:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(grace)
        if proc.poll() is None:
            proc.kill()
        proc.wait(5)
    except (OSError, subprocess.TimeoutExpired):
        pass
    finally:
        _live.discard(proc)


def stop_all() -> None:
    """End every process this module started that is still running."""
    for proc in list(_live):
        stop(proc, grace=1.0)


atexit.register(stop_all)


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent ends (Linux; else no-op)."""
    parent = os.getppid()
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).prctl(1, int(sig))  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent ended before the request
        os.kill(os.getpid(), sig)


@contextlib.contextmanager
def busy_process() -> Iterator[subprocess.Popen]:
    """A process spinning on one core for the duration of the ``with`` block."""
    proc = subprocess.Popen([sys.executable, "-c", BUSY_CODE, BUSY_MARK, str(os.getpid())],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    _live.add(proc)
    try:
        assert proc.stdout is not None
        if proc.stdout.read(1) != b".":
            raise RuntimeError(f"the busy process ended at once (exit code {proc.wait()})")
        proc.stdout.close()
        yield proc
    finally:
        stop(proc)


# ==================================================================== two runs at once
class ChildError(RuntimeError):
    """A two-runs child failed or did not answer in time."""


def _expect(proc: subprocess.Popen, prefix: str, deadline: float) -> dict:
    """The JSON after ``prefix`` on the child's next marked line (other lines are passed on); a
    child still silent at ``deadline`` (``time.monotonic``) is killed."""
    late = threading.Event()
    timer = threading.Timer(max(0.0, deadline - time.monotonic()), lambda: (late.set(), proc.kill()))
    timer.start()
    try:
        for line in proc.stdout or ():
            if line.startswith(ERROR):
                raise ChildError(f"child {proc.pid}: {line[len(ERROR):].strip()}")
            if line.startswith(prefix):
                return json.loads(line[len(prefix):])
            sys.stdout.write(line)
    finally:
        timer.cancel()
    said = "said nothing in time" if late.is_set() else f"ended (exit code {proc.wait()})"
    raise ChildError(f"child {proc.pid} {said} (waiting for {prefix.strip()})")


def run_children(argvs: Sequence[Sequence[str]], build_timeout: float, seconds: float) -> list[dict]:
    """Start one child per argv at once; when all are built, give them one shared start time;
    return each child's result. Every child is ended before this returns."""
    procs: list[subprocess.Popen] = []
    try:
        for argv in argvs:
            procs.append(subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                          bufsize=1))
            _live.add(procs[-1])
        deadline = time.monotonic() + build_timeout
        for proc in procs:
            _expect(proc, READY, deadline)
        start_at = time.time() + 0.2
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(f"{start_at!r}\n")
            proc.stdin.flush()
        deadline = time.monotonic() + seconds + 60.0
        return [_expect(proc, RESULT, deadline) for proc in procs]
    finally:
        for proc in procs:
            stop(proc, grace=5.0)


def wait_for_start() -> None:
    """In a child: say it is ready, then sleep until the start time the parent sends."""
    print(READY + "{}", flush=True)
    line = sys.stdin.readline()
    if not line:
        raise SystemExit("the parent ended before the start")
    delay = float(line) - time.time()
    if delay > 0:
        time.sleep(delay)

