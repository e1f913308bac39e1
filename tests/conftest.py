"""Fixtures shared by the whole suite: backends under test, and leak checks."""

from __future__ import annotations

import atexit
import multiprocessing
import os
import select
import shutil
import signal
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(__file__))
# backend="auto" caches this machine's costs: in a directory of the test run's own, unforced
os.environ["VECENV_CACHE_DIR"] = tempfile.mkdtemp(prefix="vecenv-test-cache-")
atexit.register(shutil.rmtree, os.environ["VECENV_CACHE_DIR"], True)
# the runs on this machine that auto counts: the test run's own, not the user's
os.environ["VECENV_RUNS_DIR"] = tempfile.mkdtemp(prefix="vecenv-test-runs-")
atexit.register(shutil.rmtree, os.environ["VECENV_RUNS_DIR"], True)
os.environ.pop("VECENV_BACKEND", None)

from helpers import backends_under_test, use_backend  # noqa: E402
from vecenv.transports.process import unavailable  # noqa: E402

#: why this platform cannot run worker processes (None on Linux)
PROCESSES_UNAVAILABLE = unavailable()

#: the least time a test on Ray gets: every Ray actor is a new process, and beside two CPU hogs
#: on 2 cores one takes about 25 s to start (a test may start four)
RAY_TIMEOUT_S = 180.0


def _uses_ray(item: pytest.Item) -> bool:
    if item.path.name == "test_ray.py" or "ray_local" in getattr(item, "fixturenames", ()):
        return True
    params = getattr(getattr(item, "callspec", None), "params", {})
    return any(isinstance(v, str) and v == "ray" for v in params.values())


#: Windows: tests whose premise is POSIX's, by name (prefix), and why
WINDOWS_DIFFERS = {
    "test_sigkill_while_waiting": "sends SIGKILL, which Windows does not have",
    "test_workers_ignore_sigint": "sends SIGINT to one process; Windows delivers Ctrl-C to a console",
    "test_ctrl_c_while_workers_start_prints_one_traceback":
        "sends SIGINT to a process group (os.killpg); Windows delivers Ctrl-C to a console",
    "test_a_hanging_build_is_ended_after_start_timeout":
        "start_timeout=1 s is shorter than starting a spawned worker takes here",
    "test_a_hanging_rebuild_is_ended_after_start_timeout":
        "start_timeout=1 s is shorter than starting a spawned worker takes here",
    "test_interpreter_exit_without_close_is_an_orderly_close": "its child script lists workers in /proc",
    "test_a_class_the_caller_cannot_rebuild_falls_back_to_the_text":
        "its env_fn holds what cannot be unpickled: only fork starts a worker without pickling it",
    "test_the_probe_builds_one_copy_once_per_env_once_kept":
        "time.thread_time() ticks every 15.6 ms on Windows: a probe this short reads no CPU time",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the tests on Ray last, with their hang guard (pytest-timeout) raised to
    :data:`RAY_TIMEOUT_S`; on Windows, skip the tests whose premise is POSIX's
    (:data:`WINDOWS_DIFFERS`, and a segfault, which ctypes turns into an ``OSError`` there),
    saying why."""
    if os.name == "nt":
        for item in items:
            reason = next((why for name, why in WINDOWS_DIFFERS.items() if item.name.startswith(name)), None)
            if reason is None and "segfault" in item.name:
                reason = "on Windows ctypes turns an access violation into OSError: nothing crashes"
            if reason is not None:
                item.add_marker(pytest.mark.skip(reason=reason))
    # Ray's tests last: once Ray runs in this process, a worker forked from it can crash Ray's
    # daemons ("Invalid Plasma message type ... process forking"), so every fork comes first
    items.sort(key=_uses_ray)
    for item in items:
        if not _uses_ray(item):
            continue
        marker = item.get_closest_marker("timeout")
        current = marker.args[0] if marker is not None and marker.args else config.getini("timeout")
        if float(current or 0) < RAY_TIMEOUT_S:
            item.add_marker(pytest.mark.timeout(RAY_TIMEOUT_S), append=False)


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
    while leaked and time.monotonic() < deadline + 5:  # a dead caller's resource tracker unlinks
        time.sleep(0.05)  # its names once the last of its workers is gone
        leaked = _shm_entries() - before
    assert not leaked, f"test left shared-memory segments behind: {sorted(leaked)}"


def _missing_capability(error: BaseException) -> str | None:
    """What this platform lacks, when ``error`` says a test needed it; None otherwise.

    Where worker processes cannot run (Windows) the process backend refuses with its reason; the
    fork start method is missing there; and a test's own use of a POSIX-only call (signal masks,
    SIGALRM, ``os.killpg``, ``select.poll``) or of ``/proc`` fails. Such a test is skipped with
    what it needed, not failed. Elsewhere none of this happens, and the same errors fail.
    """
    text = str(error)
    if PROCESSES_UNAVAILABLE is not None and PROCESSES_UNAVAILABLE in text:
        return PROCESSES_UNAVAILABLE  # raised, or quoted by a comparison with gymnasium
    for method in ("forkserver", "fork"):
        if f"cannot find context for {method!r}" in text and method not in multiprocessing.get_all_start_methods():
            return f"needs the {method} start method, which this platform lacks"
    if os.name != "nt":
        return None
    if isinstance(error, AttributeError) and getattr(error, "obj", None) in (signal, os, select):
        return f"needs {error.obj.__name__}.{error.name}, which this platform lacks"  # type: ignore[union-attr]
    if isinstance(error, FileNotFoundError) and str(error.filename).startswith(("/proc", "/dev/shm")):
        return f"needs {error.filename}, which this platform lacks"
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if call.excinfo is None or report.outcome != "failed":
        return
    reason = _missing_capability(call.excinfo.value)
    if reason is not None:
        path, line, _ = item.reportinfo()
        report.outcome = "skipped"
        report.longrepr = (str(path), (line or 0) + 1, f"Skipped: {reason}")


@pytest.fixture(params=backends_under_test())
def backend(request) -> str:
    """Each backend; one whose extra is not installed is skipped, with the reason."""
    return use_backend(request, request.param)


@pytest.fixture(params=["process", "ray"])
def worker_backend(request) -> str:
    """The backends whose envs run in worker processes (they survive crashes and hangs)."""
    return use_backend(request, request.param)


@pytest.fixture(scope="session")
def _ray_session():
    """Shut down at the end of the session the local Ray that ``ray_local`` started."""
    yield
    import ray

    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture
def ray_local(_ray_session):
    """A local 2-CPU Ray, started once and shared (so ray tests do not pay ~5 s each)."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    return ray
