"""Fixtures shared by the whole suite: backends under test, and leak checks."""

from __future__ import annotations

import multiprocessing
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from helpers import backends_under_test  # noqa: E402


def _shm_entries() -> set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except FileNotFoundError:
        return set()


@pytest.fixture(autouse=True)
def no_leaks():
    """Every test must leave no child process and no shared-memory segment behind."""
    before = _shm_entries()
    yield
    import time

    deadline = time.monotonic() + 5
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.02)
    children = multiprocessing.active_children()
    assert not children, f"test left child processes behind: {children}"
    leaked = _shm_entries() - before
    assert not leaked, f"test left shared-memory segments behind: {sorted(leaked)}"


@pytest.fixture(params=backends_under_test())
def backend(request) -> str:
    """Each backend this installation can build."""
    return request.param
