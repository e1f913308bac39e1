"""Closing the process transport: bounded, idempotent, and finished by a second ``close()``
when a Ctrl-C cut the first one short (each part can be done again without harm)."""

from __future__ import annotations

import contextlib
import multiprocessing
import threading
import time
from typing import Any

from vecenv.engine.transport import Transport
from vecenv.errors import WorkerDiedError
from vecenv.transports.process import lifetime
from vecenv.worker.commands import Close
from vecenv.worker.group import warn_close_failures

__all__ = ["DEFAULT_CLOSE_TIMEOUT", "Closing"]

#: how long ``close()`` waits for workers to finish by themselves when given no timeout
DEFAULT_CLOSE_TIMEOUT = 5.0


class Closing(Transport):
    """The closing half of :class:`~.transport.ProcessTransport` (see the module docstring)."""

    processes: list[Any]
    peers: list[Any]
    watches: list[lifetime.Watch]
    dead: dict[int, int | None]
    _block: Any
    allocated: bool
    _closed: bool
    _closer: int | None
    _every_poller: tuple[Any, dict, bool] | None
    inline_worker: int
    #: the workers asked to close their envs (or waited for once); every worker was ended and released
    _asked: frozenset[int] = frozenset()
    _ended = False

    def close(self, timeout: float | None = None) -> None:
        if self._ended:
            return
        self._closed = True  # a wait in another thread stops
        self._closer = threading.get_ident()
        lifetime.LIVE.discard(self)
        if self.allocated:  # first: no restart can need it now, and a Ctrl-C during
            self._block.release()  # the waits below must not leave a named block behind
        deadline = time.monotonic() + (DEFAULT_CLOSE_TIMEOUT if timeout is None else max(0.0, float(timeout)))
        # once per worker, even when a Ctrl-C cuts it short: let a busy worker finish (by the
        # deadline), send it a Close, and report what its envs raised; a worker that died
        # meanwhile is ended below. A second close() asks the workers the first did not reach.
        if self.allocated:
            asked = []
            for w in range(len(self.processes)):
                if w in self._asked:
                    continue
                with contextlib.suppress(Exception):
                    if self.outstanding(w):
                        self._asked |= {w}  # a worker that did not finish is not waited for again
                        if not self.drop_outstanding(w, max(0.0, deadline - time.monotonic())):
                            continue
                    if w not in self.dead:
                        self.send([(w, Close())])
                        asked.append(w)
                self._asked |= {w}
            for w in asked:
                with contextlib.suppress(Exception):
                    if self.ready([w], max(0.0, deadline - time.monotonic())):
                        warn_close_failures(self.fetch(w))
        for process, peer, watch in zip(self.processes, self.peers, self.watches, strict=True):
            # each worker ends by the deadline, else is ended; then its parts are released
            if not watch.released and watch.join(deadline - time.monotonic()) is None:
                for end in (process.terminate, process.kill):
                    if watch.join(0) is None:
                        end()
                        watch.join(1.0)
            peer.close()
            watch.release()
        self._ended = True

    def disown(self) -> None:
        """In a process forked from the caller (the engine's fork hook): let go of this
        transport's inherited descriptors, and never act on its workers (they are the caller's;
        multiprocessing would end them at this process's exit)."""
        self._closed = self._ended = True
        lifetime.LIVE.discard(self)
        for process in self.processes:
            getattr(multiprocessing.process, "_children", set()).discard(process)
        for peer in self.peers:
            peer.close()
        for watch in self.watches:
            watch.close_fd()
        if self.allocated:
            self._block.release()  # the descriptor; a forked worker drops the mapping too
        self.processes, self.peers, self.watches = [], [], []

    def __del__(self) -> None:
        try:
            self.close(1.0)
        except Exception:
            pass

    # ------------------------------------------------------------ ending one worker
    def terminate(self, worker: int) -> None:
        """Kill ``worker`` (SIGKILL: a hung env may ignore anything gentler). The inline group
        cannot be ended (its reply is always ready, so it is never found overdue)."""
        if worker == self.inline_worker:
            return
        if not self.watches[worker].ended():
            self.processes[worker].kill()
            self.watches[worker].join(2.0)
        self._mark_dead(worker)

    def _mark_dead(self, w: int) -> None:
        self._every_poller = None
        if w not in self.dead:
            self.dead[w] = self.watches[w].join(1.0)

    def _died(self, w: int, detail: str = "") -> WorkerDiedError:
        start, stop = self.partition[w]
        return WorkerDiedError(w, list(range(start, stop)), self.dead.get(w), detail)
