"""A Ctrl-C anywhere in ``close()``, then ``close()`` again: every worker ends and the caller holds
no descriptor and no shared-memory name more than before, on both process mechanisms.

CPython runs a signal's handler where a call returns, so the sweep lands a real SIGINT (raised in
the caller's main thread, held back by vecenv's signal sections like any other) after every C
call that ``close()`` makes, one cycle each; the random test is the user's case, a Ctrl-C 0.1-8 ms
into ``close()``."""

from __future__ import annotations

import gc
import os
import random
import signal
import sys
import threading

import numpy as np
import pytest

import vecenv
from helpers import PlainEnv, needs_processes, pid_alive

pytestmark = [
    needs_processes,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts /proc/self/fd and /dev/shm"),
]

MECHANISMS = ["posix", "portable"]


@pytest.fixture(autouse=True)
def _young_heap():
    """Collections in these tests look only at objects made during the test: the heap a test
    run has built (torch, Ray) is frozen, so a ``gc.collect()`` per iteration stays quick."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _shm() -> set[str]:
    """The shared-memory names this process made (the portable mechanism's start with its pid)."""
    mine = f"ve{os.getpid():x}"
    return {name for name in os.listdir("/dev/shm") if name.startswith(mine)} if os.path.isdir("/dev/shm") else set()


def _make(mechanism: str):
    envs = vecenv.ProcessVectorEnv([PlainEnv], num_workers=1, context="fork", mechanism=mechanism)
    envs.reset(seed=0)
    envs.step(np.zeros(1, np.int64))
    return envs


def _c_returns_in_close(mechanism: str) -> int:
    envs = _make(mechanism)
    count = 0

    def profile(frame, event, arg):
        nonlocal count
        count += event == "c_return"

    sys.setprofile(profile)
    try:
        envs.close()
    finally:
        sys.setprofile(None)
    return count


def _close_cut_after(envs, n: int) -> bool:
    """``envs.close()`` with a SIGINT raised where its ``n``-th C call returns; whether a
    KeyboardInterrupt came out of it."""
    seen = 0

    def profile(frame, event, arg):
        nonlocal seen
        if event == "c_return":
            seen += 1
            if seen == n:
                sys.setprofile(None)
                signal.raise_signal(signal.SIGINT)

    sys.setprofile(profile)
    try:
        envs.close()
    except KeyboardInterrupt:
        return True
    finally:
        sys.setprofile(None)
    return False


def _closed_twice_leaves_nothing(mechanism, cut, fds_before, shm_before) -> bool:
    """Make an env, ``cut(envs)`` (a close() a Ctrl-C may cut short; whether one came out),
    close() again; then no worker runs and nothing more is open or named than before."""
    envs = _make(mechanism)
    pids = [p.pid for p in envs.processes]
    try:
        landed = cut(envs)
    finally:
        for _ in range(3):  # a Ctrl-C still pending may cut the second close() too
            try:
                envs.close()
                break
            except KeyboardInterrupt:
                continue
    assert not [p for p in pids if pid_alive(p)], "a worker outlived close()"
    del envs  # the portable mechanism's mapping holds a descriptor while the env lives
    if _fds() - fds_before:
        gc.collect()  # only when something may wait for it
    leaked = _fds() - fds_before
    assert not leaked, {fd: os.readlink(f"/proc/self/fd/{fd}") for fd in leaked if os.path.exists(f"/proc/self/fd/{fd}")}
    assert not (_shm() - shm_before), "a shared-memory name was left behind"
    return landed


@pytest.mark.timeout(60, method="thread")  # signals are the subject
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # a Ctrl-C in a weakref callback
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_ctrl_c_after_any_c_call_in_close_leaks_nothing_once_closed_again(mechanism):
    _make(mechanism).close()  # what lasts (the resource tracker)
    total = _c_returns_in_close(mechanism)
    assert total > 50, total
    fds, shm = _fds(), _shm()
    landed = 0
    for n in range(1, total + 1):
        landed += _closed_twice_leaves_nothing(mechanism, lambda envs, n=n: _close_cut_after(envs, n), fds, shm)
    assert landed > total // 2, f"only {landed} of {total} interrupts came out of close()"


@pytest.mark.timeout(60, method="thread")
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_ctrl_c_at_a_random_moment_in_close_leaks_nothing_once_closed_again(mechanism):
    _make(mechanism).close()
    fds, shm = _fds(), _shm()
    rng = random.Random(64)
    main = threading.main_thread().ident

    def cut(envs) -> bool:
        timer = threading.Timer(rng.uniform(0.0001, 0.008), signal.pthread_kill, (main, signal.SIGINT))
        try:
            timer.start()
            envs.close()
            timer.join()  # the Ctrl-C may come after close() returned
        except KeyboardInterrupt:
            timer.join()
            return True
        return False

    landed = sum(_closed_twice_leaves_nothing(mechanism, cut, fds, shm) for _ in range(30))
    assert landed, "no Ctrl-C came out of close()"
