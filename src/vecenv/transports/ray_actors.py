"""Ray transport: each env group in a Ray actor (:class:`DetachedGroup`), on this machine or
across a cluster; a command carries the action rows it reads, its reply the rows it wrote (see
docs/ray.md). Named ``ray_actors`` so it never shadows ``ray``, imported only when needed."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import warnings
from collections.abc import Callable, Collection, Sequence
from typing import Any

import cloudpickle
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from vecenv.engine.transport import DEFAULT_START_TIMEOUT, Transport
from vecenv.errors import EnvError, StepTimeoutError, VecEnvError, WorkerDiedError, portable_error
from vecenv.spaces import StepBuffers
from vecenv.worker.commands import Command, GivenStep, Reset, Step
from vecenv.worker.group import EnvDescription, EnvGroup, warn_close_failures

__all__ = ["DEFAULT_START_TIMEOUT", "DetachedGroup", "RayTransport", "import_ray"]


def import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ImportError(
            "the 'ray' backend needs Ray: pip install 'vecenv[ray]' (or pip install 'ray>=2.9')"
        ) from exc
    return ray


# Ray is shut down by the last vecenv env that relies on a Ray that vecenv itself started; a Ray
# the user started (ray.init, or a cluster joined before vecenv) is never shut down by vecenv.
_lock = threading.Lock()
_generation = 0  # counts the Rays vecenv started; 0 while none of ours is running
_users = 0


def _selected(command: Reset | Step | GivenStep) -> Any:
    """The local env rows a command touches: an index array, or ``slice(None)`` for all."""
    return slice(None) if command.ids is None else np.asarray(command.ids, dtype=np.intp)


class DetachedGroup:
    """The body of one Ray actor: an :class:`EnvGroup` over buffers of its own; a command brings
    the action rows it reads, its reply the rows the group wrote. Replies are ``(ok, value)``;
    an error is delivered by ``fetch``, as every transport's errors are."""

    def __init__(self) -> None:
        self.group: EnvGroup | None = None

    def start(self, fns_blob: bytes, start: int, worker: int, mode: AutoresetMode,
              driver_path: list[str]) -> tuple[bool, Any]:
        # Let env_fns that refer to the driver's modules (by reference) unpickle here too.
        for entry in reversed(driver_path):
            if entry and entry not in sys.path and os.path.isdir(entry):
                sys.path.insert(0, entry)
        try:
            env_fns = cloudpickle.loads(fns_blob)
        except Exception as exc:
            error = EnvError.from_exception(exc, start, worker, "unpickling env_fns on the Ray worker")
            return False, error.without_original()
        try:
            self.group = EnvGroup(env_fns, start, worker, mode, contain_exits=True)
            return True, self.group.describe()
        except BaseException as exc:
            return False, portable_error(exc)

    def attach(self, observation_space: spaces.Space, action_space: spaces.Space) -> None:
        """Allocate the group's own rows (object leaves travel in the replies like the rest)."""
        group: Any = self.group
        group.attach(StepBuffers(observation_space, action_space, len(group.envs)))

    def run(self, command: Command, inputs: list[np.ndarray] | None) -> tuple[bool, Any]:
        """``(True, (reply, outputs))``: ``outputs`` the rows it wrote (None for other commands)."""
        group: Any = self.group
        try:
            if not isinstance(command, (Reset, Step, GivenStep)):
                return True, (group.run(command), None)
            b = group.buffers
            if b is None:
                raise VecEnvError(f"worker {group.worker}: the detached group has no buffers (attach() has not run)")
            sel = _selected(command)
            if inputs is not None:
                for leaf, values in zip(b.actions.leaves, inputs, strict=True):
                    leaf.array[sel] = values
            reply = group.run(command)
            copied = isinstance(sel, np.ndarray)
            leaves = [leaf.array[sel] if copied else leaf.array.copy() for leaf in b.observations.leaves]
            outputs = (leaves, b.rewards[sel].copy(), b.terminations[sel].copy(), b.truncations[sel].copy())
            return True, (reply, outputs)
        except BaseException as exc:
            return False, portable_error(exc)

    def close(self) -> list[str]:
        group, self.group = self.group, None
        return [] if group is None else group.close()


_actor_class: Any = None  # DetachedGroup as a Ray actor class, made once


class RayTransport(Transport):
    """Runs each env group in a Ray actor; replies are copied into the caller's buffer rows."""

    name = "ray"
    can_end_workers = True
    lends_observations = False  # the caller writes the rows each reply carries, not every row

    def __init__(
        self,
        num_cpus_per_worker: float = 1,
        address: str | None = None,
        ray_init_kwargs: dict[str, Any] | None = None,
        start_timeout: float | None = DEFAULT_START_TIMEOUT,
    ) -> None:
        self.num_cpus_per_worker = num_cpus_per_worker
        self.start_timeout = start_timeout
        self.address = address
        self.ray_init_kwargs = dict(ray_init_kwargs or {})
        self.ray: Any = None
        self.actors: list[Any] = []
        self._our_ray = 0  # generation of the vecenv-started Ray this env uses, or 0
        self._calls: dict[int, tuple[Any, Command]] = {}  # worker -> (ref, command)
        self._finished: dict[int, None] = {}  # workers whose call is done, in finishing order
        self._rows: list[StepBuffers] = []
        self._blobs: list[bytes] = []
        self._spaces: tuple[spaces.Space, spaces.Space] | None = None

    def connect(self) -> Any:
        """Initialise Ray if it is not running (joining ``address`` when given); return ``ray``."""
        global _generation, _users
        if self.ray is None:
            ray = import_ray()
            with _lock:
                ours = not ray.is_initialized()
                if ours:
                    ray.init(address=self.address, **{"include_dashboard": False, **self.ray_init_kwargs})
                    _generation, _users = _generation + 1, 0
                # else someone else's Ray (or ours, shut down by hand): never ours to stop
                if ours or _users:
                    _users += 1
                    self._our_ray = _generation
            self.ray = ray
        return self.ray

    def cluster_cpus(self) -> float:
        return float(self.connect().cluster_resources().get("CPU", 1.0))

    def launch(self) -> list[EnvDescription]:
        self.connect()
        try:
            self._blobs = [cloudpickle.dumps(self.group_fns(w)) for w in range(self.num_workers)]
        except Exception as exc:
            raise TypeError(f"env_fns cannot be pickled to send them to Ray actors: {exc}") from exc
        needed = self.num_workers * self.num_cpus_per_worker
        available = self.cluster_cpus()
        if needed > available:
            warnings.warn(
                f"RayVectorEnv: {self.num_workers} workers x {self.num_cpus_per_worker} CPUs need "
                f"{needed:g} CPUs but the Ray cluster has {available:g}; the actors will wait for "
                "resources (lower num_workers or num_cpus_per_worker)",
                RuntimeWarning,
                stacklevel=4,
            )
        self.actors = [None] * self.num_workers
        return self._start(list(range(self.num_workers)))

    def _start(self, workers: list[int]) -> list[EnvDescription]:
        """New actors for ``workers``; their envs' descriptions, once built within
        ``start_timeout`` (an actor Ray cannot place would otherwise wait forever)."""
        global _actor_class
        if _actor_class is None:
            _actor_class = self.ray.remote(DetachedGroup)
        refs = []
        for w in workers:
            self.actors[w] = _actor_class.options(num_cpus=self.num_cpus_per_worker).remote()
            start = self.actors[w].start
            refs.append(start.remote(self._blobs[w], self.partition[w][0], w, self.autoreset_mode, list(sys.path)))
        if self.start_timeout is not None:
            done, _ = self.ray.wait(refs, num_returns=len(refs), timeout=self.start_timeout)
            if len(done) < len(refs):
                late = [w for w, ref in zip(workers, refs, strict=True) if ref not in set(done)]
                raise StepTimeoutError(
                    [i for w in late for i in range(*self.partition[w])],
                    late[0],
                    self.start_timeout,
                    "start",
                    f"{len(late)} of {len(refs)} Ray actors did not start; {self.num_workers} actors x "
                    f"{self.num_cpus_per_worker:g} CPUs need {self.num_workers * self.num_cpus_per_worker:g} "
                    f"CPUs and the cluster has {self.cluster_cpus():g} (lower num_workers or "
                    "num_cpus_per_worker, or pass start_timeout=None to wait for an autoscaler or for slow env_fns)",
                )
        replies = [self._get(ref, w) for w, ref in zip(workers, refs, strict=True)]
        for ok, value in replies:
            if not ok:
                raise value
        return [d for _, value in replies for d in value]

    def attach(self, buffers: StepBuffers) -> None:
        self._rows = [buffers.rows(a, b) for a, b in self.partition]
        self._spaces = (buffers.observations.space, buffers.actions.space)
        self.ray.get([a.attach.remote(*self._spaces) for a in self.actors])

    def terminate(self, worker: int) -> None:
        """Kill ``worker``'s actor now (a hung env); later commands to it fail."""
        self._calls.pop(worker, None)
        self._finished.pop(worker, None)
        with contextlib.suppress(Exception):
            self.ray.kill(self.actors[worker], no_restart=True)

    def restart(self, worker: int) -> None:
        """Replace ``worker``'s actor with a fresh one built from the same env_fns."""
        self.terminate(worker)
        self._start([worker])
        self.ray.get(self.actors[worker].attach.remote(*self._spaces))  # type: ignore[misc]

    def send(self, commands: Sequence[tuple[int, Command]]) -> None:
        for worker, command in commands:
            inputs = None  # the action rows a step reads, one array per action leaf
            if isinstance(command, (Step, GivenStep)):
                sel = _selected(command)
                inputs = [leaf.array[sel] for leaf in self._rows[worker].actions.leaves]
            ref = self.actors[worker].run.remote(command, inputs)
            self._calls[worker] = (ref, command)

    def outstanding(self, worker: int) -> bool:
        return worker in self._calls

    def ready(self, workers: Collection[int], timeout: float | None = None, every: bool = False,
              wanted: Callable[[], int] | None = None) -> list[int]:
        sent = [w for w in workers if w in self._calls]
        waiting = {self._calls[w][0]: w for w in sent if w not in self._finished}
        if waiting and not any(w in self._finished for w in sent):
            done, _ = self.ray.wait(list(waiting), num_returns=1, timeout=timeout)
            for ref in done:
                self._finished[waiting.pop(ref)] = None
        if waiting:  # take every other reply that is already in, without waiting
            done, _ = self.ray.wait(list(waiting), num_returns=len(waiting), timeout=0)
            for ref in done:
                self._finished[waiting[ref]] = None
        return [w for w in self._finished if w in sent]

    def fetch(self, worker: int) -> Any:
        self._finished.pop(worker, None)
        ref, command = self._calls.pop(worker)
        ok, value = self._get(ref, worker)
        if not ok:
            raise value
        reply, outputs = value
        if outputs is not None:  # the rows a reset or step wrote, into the caller's rows
            rows, sel = self._rows[worker], _selected(command)  # type: ignore[arg-type]
            leaves, rows.rewards[sel], rows.terminations[sel], rows.truncations[sel] = outputs
            for leaf, values in zip(rows.observations.leaves, leaves, strict=True):
                leaf.array[sel] = values
        return reply

    def _get(self, ref: Any, worker: int) -> Any:
        """``ray.get`` that turns Ray's failures into vecenv's errors."""
        ray = self.ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayActorError as exc:
            start, stop = self.partition[worker]
            raise WorkerDiedError(worker, list(range(start, stop)), None, f"Ray actor died: {exc}") from exc
        except ray.exceptions.RayTaskError as exc:  # failed outside the group: unwrap the cause
            cause = getattr(exc, "cause", None)
            if isinstance(cause, BaseException):
                raise cause from exc
            raise

    def close(self, timeout: float | None = None) -> None:
        global _users
        actors, self.actors = self.actors, []
        self._calls.clear()
        self._finished.clear()
        ray = self.ray
        if ray is None:
            return
        try:
            if actors and ray.is_initialized():
                limit = 5.0 if timeout is None else timeout
                refs = [a.close.remote() for a in actors]
                closed, _ = ray.wait(refs, num_returns=len(refs), timeout=limit)  # let envs close cleanly
                for ref in closed:
                    with contextlib.suppress(Exception):  # an actor that died meanwhile
                        warn_close_failures(ray.get(ref))
                for a in actors:
                    with contextlib.suppress(Exception):
                        ray.kill(a, no_restart=True)
        finally:
            if self._our_ray:  # the last env that used vecenv's Ray shuts it down
                generation, self._our_ray = self._our_ray, 0
                with _lock:
                    if generation == _generation and _users > 0:
                        _users -= 1
                        if _users == 0 and ray.is_initialized():
                            ray.shutdown()
