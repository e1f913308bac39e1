"""PufferLib (``pufferlib-core``'s ``pufferlib.vector``) as peers of ``vecenv bench``:
``pufferlib-serial``, ``pufferlib-mp`` and ``pufferlib-async`` over ``GymnasiumPufferEnv``
(docs/bench.md). PufferLib's Multiprocessing ``recv`` spins forever on a dead worker, so a
watchdog thread ends the spin when a worker exits or holds a command for :data:`STALL_SECONDS`
with no step done, and the driver raises :class:`PufferLibFailure` naming it; ``close`` ends
every worker within a bounded time.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing.connection
import threading
import time
from functools import partial
from typing import Any

from vecenv.bench.envs import EnvTarget
from vecenv.make import usable_cores

#: peer name -> what it is
PUFFER_PEERS: dict[str, str] = {
    "pufferlib-serial": "pufferlib.vector.Serial (pufferlib-core)",
    "pufferlib-mp": "pufferlib.vector.Multiprocessing, one worker per core",
    "pufferlib-async": "pufferlib.vector.Multiprocessing, batch_size = num_envs // 2",
}
#: how to install what the peers need
INSTALL = "pip install --no-deps pufferlib-core psutil (see docs/bench.md#pufferlib)"
#: seconds without a completed step after which a Multiprocessing run is declared hung
STALL_SECONDS = 60.0
#: how often the watchdog looks (seconds)
WATCH_INTERVAL = 0.1
#: seconds ``close`` waits for a terminated worker before killing it
JOIN_SECONDS = 5.0
#: PufferLib's worker flags (``pufferlib.vector``): at or above MAIN a worker's results are ready
_MAIN = 5


class PufferLibFailure(RuntimeError):
    """A PufferLib worker died or stopped answering; the message names it."""


def import_pufferlib() -> tuple[Any, Any]:
    """``(pufferlib.vector, pufferlib.emulation)``, or an ImportError that says how to install them."""
    try:
        vector = importlib.import_module("pufferlib.vector")
        emulation = importlib.import_module("pufferlib.emulation")
    except ImportError as exc:
        raise ImportError(f"pufferlib.vector cannot be imported ({exc}); {INSTALL}") from exc
    return vector, emulation


def physical_cores() -> int:
    """The cores PufferLib counts (``psutil.cpu_count(logical=False)``), at most the usable ones."""
    psutil = importlib.import_module("psutil")  # PufferLib's own dependency
    return max(1, min(psutil.cpu_count(logical=False) or 1, usable_cores()))


def puffer_layout(peer: str, num_envs: int, batch_size: int | None = None,
                  num_workers: int | None = None) -> tuple[int, int | None]:
    """``(workers, batch_size)`` for ``peer`` at ``num_envs``, or a ValueError saying why PufferLib
    would refuse it. Workers: ``num_workers`` or the most PufferLib accepts here (at most the
    physical cores, dividing ``num_envs`` and, async, the batch into whole workers)."""
    if peer == "pufferlib-serial":
        return 1, None
    if peer == "pufferlib-async" and batch_size is None:
        batch_size = num_envs // 2
    if batch_size is not None and not 1 <= batch_size < num_envs:
        raise ValueError(f"batch size {batch_size} must be between 1 and num_envs - 1")
    if batch_size is not None and num_envs % batch_size:
        raise ValueError(f"PufferLib needs num_envs ({num_envs}) divisible by batch_size ({batch_size})")
    cores = physical_cores()
    candidates = [num_workers] if num_workers else range(min(cores, num_envs), 0, -1)
    for w in candidates:
        if w > cores:
            raise ValueError(f"PufferLib refuses {w} workers on {cores} physical cores")
        if num_envs % w:
            continue
        if batch_size is not None and (w < 2 or batch_size % (num_envs // w)):
            continue
        return w, batch_size
    need = "num_envs divisible by the workers"
    if batch_size is not None:
        need += ", 2 workers or more, and the batch a whole number of workers"
    raise ValueError(f"no worker count PufferLib accepts here ({cores} physical cores; it needs {need})")


class _Watchdog(threading.Thread):
    """Ends a Multiprocessing run whose worker died or stalled (see the module's docstring)."""

    def __init__(self, envs: Any) -> None:
        super().__init__(name="vecenv-bench-pufferlib-watchdog", daemon=True)
        self.envs = envs
        self.failed: str | None = None
        #: steps completed; the driver counts them, the watchdog sees whether the count moves
        self.beat = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        last, since = -1, time.monotonic()
        while not self._stop_event.wait(WATCH_INTERVAL):
            if self.failed is None:
                self.failed = self._dead_worker()
                # a stall: a worker holding a command, and no step completed, for STALL_SECONDS
                # (a caller that only pauses between steps leaves no command outstanding)
                if self.beat != last or not self._outstanding():
                    last, since = self.beat, time.monotonic()
                elif self.failed is None and time.monotonic() - since > STALL_SECONDS:
                    self.failed = f"PufferLib's workers returned no step for {STALL_SECONDS:g} s"
            if self.failed is not None:
                self._release()

    def _dead_worker(self) -> str | None:
        for i, p in enumerate(self.envs.processes):
            if p.exitcode is not None:
                return f"PufferLib worker {i} (pid {p.pid}) exited with code {p.exitcode}"
        return None

    def _outstanding(self) -> bool:
        """Whether a worker holds a command it has not answered (its flag below MAIN)."""
        try:
            return bool((self.envs.buf["semaphores"] < _MAIN).any())
        except Exception:
            return True

    def _release(self) -> None:
        """End ``recv``'s spin: every worker 'ready'; a ``recv`` blocked on a dead worker's info
        pipe gets an empty message through the worker's end, which this process also holds."""
        with contextlib.suppress(Exception):
            self.envs.buf["semaphores"][:] = _MAIN
            for p in self.envs.processes:
                if p.exitcode is not None and not getattr(p, "_vecenv_woken", False):
                    p._vecenv_woken = True
                    ends = [a for a in getattr(p, "_args", ()) if
                            isinstance(a, multiprocessing.connection.Connection)]
                    if ends:
                        ends[0].send([])  # the worker's result pipe (its first connection argument)

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive() and self is not threading.current_thread():
            self.join(timeout=5)


def build_puffer(peer: str, target: EnvTarget, num_envs: int, seed: int,
                 batch_size: int | None = None, num_workers: int | None = None,
                 ) -> tuple[Any, int, int, _Watchdog | None]:
    """Build ``peer``'s vector env: ``(envs, rows a step returns, workers, watchdog or None)``.

    The caller closes it with :func:`puffer_close`.
    """
    vector, emulation = import_pufferlib()
    workers, batch = puffer_layout(peer, num_envs, batch_size, num_workers)
    creator = partial(emulation.GymnasiumPufferEnv, env_creator=target.env_fn)
    if peer == "pufferlib-serial":
        return vector.make(creator, backend=vector.Serial, num_envs=num_envs, seed=seed), num_envs, 1, None
    envs = vector.make(creator, backend=vector.Multiprocessing, num_envs=num_envs, seed=seed,
                       num_workers=workers, batch_size=batch or num_envs)
    watch = _Watchdog(envs)
    watch.start()
    return envs, batch or num_envs, workers, watch


def puffer_close(envs: Any, watch: _Watchdog | None) -> None:
    """Close the envs; for Multiprocessing, wait for every worker (killing one that lingers)."""
    if watch is not None:
        watch.stop()  # first: workers it sees ending now are not failures
    try:
        envs.close()
    finally:
        if watch is not None:
            for p in getattr(envs, "processes", ()):
                p.join(JOIN_SECONDS)
                if p.exitcode is None:
                    p.kill()
                    p.join(JOIN_SECONDS)
