"""The engine: one gymnasium-API vector env core that every backend shares.

:class:`VectorEnv` checks every input before anything reaches a worker, keeps the autoreset and
in-flight bookkeeping, batches infos, and hands each worker's env group its work through a
:class:`~vecenv.transports.Transport`. Backends (serial, threads, processes, Ray) differ only in
the transport they pass in.
"""

from __future__ import annotations

import copy
import multiprocessing
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.spaces.utils import is_space_dtype_shape_equiv
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_differing_spaces, batch_space

from vecenv.engine.infos import batch_infos
from vecenv.engine.modes import parse_autoreset_mode
from vecenv.errors import (
    AlreadyPendingCallError,
    ClosedEnvironmentError,
    NoAsyncCallError,
    StepTimeoutError,
    VecEnvError,
    WorkerDiedError,
)
from vecenv.transports.base import Transport, split_envs
from vecenv.worker import EnvDescription, InfoEntry
from vecenv.worker.restarts import RestartBudget

__all__ = ["SpaceMismatchError", "VectorEnv"]


_NO_IDS = np.empty(0, dtype=np.int64)


class _Overdue(Exception):
    """Internal: these workers overran ``step_timeout``."""

    def __init__(self, workers: list[int]) -> None:
        self.workers = workers


class SpaceMismatchError(ValueError, RuntimeError):
    """The env_fns built envs whose spaces cannot be batched together.

    A ``RuntimeError`` too, as gymnasium raises one for the same mistake.
    """


class VectorEnv(gym.vector.VectorEnv):
    """A batch of ``num_envs`` sub-environments behind gymnasium's vector API.

    Subclasses choose the transport; see :class:`vecenv.SerialVectorEnv` and the others.

    Beyond gymnasium's API it offers async batches (``batch_size < num_envs`` with
    :meth:`send` / :meth:`recv`), per-env calls (:meth:`call_at`, :meth:`get_attr_at`,
    :meth:`set_attr_at`, :meth:`apply`), and the raw per-env reports the SB3 layer reads.
    """

    #: the transport's name, e.g. ``"serial"``
    backend: str

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        transport: Transport,
        *,
        num_workers: int = 1,
        batch_size: int | None = None,
        copy: bool = True,
        observation_mode: str | tuple[spaces.Space, spaces.Space] = "same",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        on_error: str = "raise",
        max_restarts: int = 3,
        restart_window: float = 60.0,
        step_timeout: float | None = None,
    ) -> None:
        self.closed = True  # until started, so that __del__ and close() have nothing to do
        self._transport = transport
        self.env_fns = _check_env_fns(env_fns)
        self.num_envs = n = len(self.env_fns)
        self.autoreset_mode = parse_autoreset_mode(autoreset_mode)
        _check_observation_mode(observation_mode)
        self.observation_mode = observation_mode
        self.copy = bool(copy)
        self.batch_size = n if batch_size is None else _check_count("batch_size", batch_size, n)
        self.num_workers = min(_check_count("num_workers", num_workers, None), n)
        self.backend = transport.name
        if on_error not in ("raise", "restart"):
            raise ValueError(f"on_error: expected 'raise' or 'restart', got {on_error!r}")
        if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
            raise ValueError(f"max_restarts: expected an int >= 0, got {max_restarts!r}")
        if not isinstance(restart_window, (int, float)) or restart_window <= 0:
            raise ValueError(f"restart_window: expected seconds > 0, got {restart_window!r}")
        if step_timeout is not None:
            if isinstance(step_timeout, bool) or not isinstance(step_timeout, (int, float)) or step_timeout <= 0:
                raise ValueError(f"step_timeout: expected seconds > 0 or None, got {step_timeout!r}")
            if not transport.can_end_workers:
                raise ValueError(
                    f"step_timeout needs a backend that can end a stuck worker (process, ray); "
                    f"the {transport.name} backend cannot"
                )
        self.on_error = on_error
        self.max_restarts = max_restarts
        self.restart_window = float(restart_window)
        self.step_timeout = None if step_timeout is None else float(step_timeout)
        self._worker_budget = RestartBudget(max_restarts, self.restart_window)
        self._sent_at: dict[int, float] = {}

        self._partition = split_envs(n, self.num_workers)
        self._whole_groups = [
            (w, None, np.arange(start, stop)) for w, (start, stop) in enumerate(self._partition)
        ]
        self._worker_of = [w for w, (start, stop) in enumerate(self._partition) for _ in range(start, stop)]
        self._in_flight: dict[int, tuple[str, np.ndarray]] = {}  # worker -> (command, env ids)
        self._pending: str | None = None  # "reset" | "step" | "call", gymnasium's async state
        self._call_results: dict[int, Any] = {}  # replies of the pending call so far, per worker
        self._call_error: BaseException | None = None
        descriptions = transport.start(self.env_fns, self._partition, self.autoreset_mode)
        self.closed = False
        try:
            self._setup_spaces(descriptions, observation_mode)
            self._buffers = transport.allocate(
                self.single_observation_space, self.single_action_space, n
            )
            transport.attach(self._buffers)
            if on_error != "raise":
                for w in range(self.num_workers):
                    self._submit(w, "configure", (on_error, max_restarts, self.restart_window), _NO_IDS)
                self._wait_calls(None, "configure")
        except BaseException:
            self.close()
            raise

        self._has_reset = False
        self._needs_reset = np.zeros(n, dtype=np.bool_)  # DISABLED mode: ended, not yet reset
        self._busy = np.zeros(n, dtype=np.bool_)  # in flight, or ready but not yet returned
        self._deferred: dict[int, list[int]] = {}  # worker -> env ids to step once it is free
        self._ready: deque[int] = deque()
        self._held: dict[int, InfoEntry] = {}
        # async batches: envs whose worker was restarted while they were not in flight. Their next
        # send returns a truncation instead of stepping (value: the restart report, and for
        # SAME_STEP the new env's reset observation and info)
        self._cut: dict[int, tuple[dict, Any, dict]] = {}

    # ================================================================ setup
    def _setup_spaces(self, descriptions: list[EnvDescription], observation_mode: Any) -> None:
        first = descriptions[0]
        self.metadata = dict(first.metadata)
        self.metadata["autoreset_mode"] = self.autoreset_mode
        self.render_mode = first.render_mode
        self.single_action_space = first.action_space
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        if isinstance(observation_mode, tuple):
            self.observation_space, self.single_observation_space = observation_mode
        elif observation_mode == "same":
            self.single_observation_space = first.observation_space
            self.observation_space = batch_space(first.observation_space, self.num_envs)
        else:
            self.single_observation_space = first.observation_space
            self.observation_space = batch_differing_spaces(
                [d.observation_space for d in descriptions]
            )
        for i, d in enumerate(descriptions):
            if observation_mode == "same":
                if d.observation_space != self.single_observation_space:
                    raise SpaceMismatchError(
                        f"env {i}'s observation space {d.observation_space} differs from env 0's "
                        f"{self.single_observation_space}; with observation_mode='same' every env "
                        "must have the same observation space (use observation_mode='different' "
                        "when only the bounds differ)"
                    )
            elif not is_space_dtype_shape_equiv(d.observation_space, self.single_observation_space):
                raise SpaceMismatchError(
                    f"env {i}'s observation space {d.observation_space} does not share the shape "
                    f"and dtype of {self.single_observation_space}, so they cannot be batched"
                )
            if d.action_space != self.single_action_space:
                raise SpaceMismatchError(
                    f"env {i}'s action space {d.action_space} differs from env 0's "
                    f"{self.single_action_space}; every env must have the same action space"
                )

    # ================================================================ reset
    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the envs; env ``i`` gets ``seed + i`` (or ``seed[i]`` from a list).

        ``options={"reset_mask": mask}`` resets only the envs where ``mask`` is True (the others
        keep their observation). In async-batch mode every env is reset and the first
        ``batch_size`` to finish are returned, with ``infos["env_id"]``.
        """
        self.reset_async(seed=seed, options=options)
        return self.reset_wait()

    def reset_async(
        self,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        """Send the reset to the workers without waiting (see :meth:`reset`)."""
        self._check_open()
        self._check_idle("reset_async")
        n = self.num_envs
        if seed is None:
            seeds: list[int | None] = [None] * n
        elif isinstance(seed, (int, np.integer)):
            seeds = [int(seed) + i for i in range(n)]
        elif isinstance(seed, (list, tuple, np.ndarray)):
            seeds = list(seed)
            if len(seeds) != n:
                raise ValueError(
                    f"reset(seed=...): a list of seeds must have one per env (num_envs={n}), "
                    f"got {len(seeds)}"
                )
        else:
            raise TypeError(f"reset(seed=...): expected None, an int or a list of {n} ints, got {seed!r}")

        mask = None
        if options is not None and "reset_mask" in options:
            options = dict(options)
            mask = options.pop("reset_mask")
            _check_reset_mask(mask, n)
            if self.batch_size < n:
                raise ValueError("reset(options={'reset_mask': ...}) is not supported with batch_size < num_envs")
        ids = np.arange(n) if mask is None else np.flatnonzero(mask)
        if self.batch_size < n:
            self._ready.clear()
            self._held.clear()
            self._cut.clear()  # every env starts a new episode
        for w, local, gids in self._by_worker(ids):
            local_seeds = seeds[self._partition[w][0] : self._partition[w][1]]
            self._submit(w, "reset", (local_seeds, options, local), gids)
        self._needs_reset[ids] = False
        self._busy[ids] = True
        self._pending = "reset"

    def reset_wait(self, timeout: float | None = None) -> tuple[Any, dict[str, Any]]:
        """Wait for :meth:`reset_async`'s results: ``(observations, infos)``."""
        self._check_open()
        if self._pending != "reset":
            raise NoAsyncCallError("Calling `reset_wait` without any prior call to `reset_async`.", "reset_async")
        obs, _, _, _, infos = self._results(timeout, "reset_wait")
        self._has_reset = True
        return obs, infos

    # ================================================================ step
    def step(
        self, actions: Any, env_ids: Sequence[int] | np.ndarray | None = None
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every env (or, in async-batch mode, send to ``env_ids`` and receive a batch)."""
        self.send(actions, env_ids)
        return self.recv()

    def step_async(self, actions: Any) -> None:
        """gymnasium's AsyncVectorEnv name for :meth:`send` to every env."""
        self.send(actions)

    def step_wait(self, timeout: float | None = None) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """gymnasium's AsyncVectorEnv name for :meth:`recv`."""
        return self.recv(timeout)

    def send(self, actions: Any, env_ids: Sequence[int] | np.ndarray | None = None) -> None:
        """Hand ``actions`` to the envs ``env_ids`` (all envs when ``None``) without waiting.

        In async-batch mode (``batch_size < num_envs``) ``env_ids`` names the envs the actions are
        for, normally the ``infos["env_id"]`` of the last :meth:`recv`.
        """
        self._check_open()
        n = self.num_envs
        if self._pending not in (None, "step") or (self._pending == "step" and self.batch_size == n):
            raise AlreadyPendingCallError(
                f"Calling `step_async` while waiting for a pending call to `{self._pending}` to complete.",
                str(self._pending),
            )
        if not self._has_reset:
            raise gym.error.ResetNeeded("step() was called before reset(): call reset() first")
        if env_ids is None:
            if self.batch_size < n:
                raise ValueError(
                    f"send(actions, env_ids): env_ids is required when batch_size ({self.batch_size}) "
                    f"< num_envs ({n}); pass the infos['env_id'] of the last recv()"
                )
            self._buffers.actions.assign(actions, None, "actions")
            if self.autoreset_mode is AutoresetMode.DISABLED and self._needs_reset.any():
                self._refuse_ended(np.flatnonzero(self._needs_reset))
            ids = None
        else:
            ids = self._check_env_ids(env_ids)
            busy = ids[self._busy[ids]]
            if busy.size:
                raise ValueError(
                    f"send(actions, env_ids): envs {busy.tolist()} are still stepping or waiting to be "
                    "received; send actions only to envs returned by recv()"
                )
            if self.autoreset_mode is AutoresetMode.DISABLED and self._needs_reset[ids].any():
                self._refuse_ended(ids[self._needs_reset[ids]])
            self._buffers.actions.assign(actions, ids, "actions")
        cut = [i for i in ids.tolist() if i in self._cut] if self._cut and ids is not None else []
        stepping = ids if not cut else ids[~np.isin(ids, cut)]
        if stepping is None or stepping.size:
            for w, local, gids in self._by_worker(stepping):
                if w in self._in_flight:
                    self._deferred.setdefault(w, []).extend(gids.tolist())
                else:
                    self._submit(w, "step", (local,), gids)
        if ids is None:
            self._busy[:] = True
        else:
            self._busy[ids] = True
        self._pending = "step"
        if cut:
            self._truncate_cut(cut)

    def recv(self, timeout: float | None = None) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """Wait for the results of :meth:`send`: all envs, or the first ``batch_size`` ready."""
        self._check_open()
        if self._pending != "step":
            raise NoAsyncCallError("Calling `step_wait` without any prior call to `step_async`.", "step_async")
        return self._results(timeout, "step_wait")

    # The SB3 layer reads each env's report as it came (exact Python types, no batching).
    def _step_entries(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, list[InfoEntry]]:
        """:meth:`step` returning the per-env :class:`InfoEntry` list instead of batched infos."""
        self._require_full_batches("_step_entries")
        self.send(actions)
        return self._results(None, "step_wait", raw=True)

    def _reset_entries(
        self, seed: int | Sequence[int | None] | None = None, options: dict | None = None
    ) -> tuple[Any, list[InfoEntry]]:
        """:meth:`reset` returning the per-env :class:`InfoEntry` list instead of batched infos."""
        self._require_full_batches("_reset_entries")
        self.reset_async(seed=seed, options=options)
        obs, _, _, _, entries = self._results(None, "reset_wait", raw=True)
        self._has_reset = True
        return obs, entries

    def _require_full_batches(self, method: str) -> None:
        if self.batch_size < self.num_envs:
            raise ValueError(f"{method} needs batch_size == num_envs")

    def _refuse_ended(self, ended: np.ndarray) -> None:
        raise ValueError(
            f"envs {ended.tolist()} finished their episodes and autoreset_mode is DISABLED: reset them "
            "first with reset(options={'reset_mask': mask})"
        )

    # ================================================================ results
    def _results(self, timeout: float | None, method: str, raw: bool = False) -> tuple:
        n, bs = self.num_envs, self.batch_size
        self._gather(bs if bs < n else None, timeout, method)
        b = self._buffers
        if bs == n:
            self._ready.clear()
            entries = [self._held[i] for i in sorted(self._held)] if self._held else []
            self._held.clear()
            self._busy[:] = False
            self._pending = None
            if self.autoreset_mode is AutoresetMode.DISABLED:
                self._needs_reset = np.logical_or(b.terminations, b.truncations)
            return (
                b.observations.read(self.copy),
                b.rewards.copy(),
                b.terminations.copy(),
                b.truncations.copy(),
                entries if raw else batch_infos(entries, n),
            )
        take = np.array([self._ready.popleft() for _ in range(bs)], dtype=np.int64)
        rows = {int(i): r for r, i in enumerate(take)}
        entries = [self._held.pop(i) for i in rows if i in self._held]
        infos = batch_infos(entries, bs, rows)
        infos["env_id"] = take
        infos["_env_id"] = np.ones(bs, dtype=np.bool_)
        self._busy[take] = False
        if self.autoreset_mode is AutoresetMode.DISABLED:
            self._needs_reset[take] = b.terminations[take] | b.truncations[take]
        if not self._in_flight and not self._ready:
            self._pending = None
        elif self._pending == "reset":
            self._pending = "step"  # the rest of the reset arrives through recv()
        return (
            b.observations.read_rows(take),
            b.rewards[take],
            b.terminations[take],
            b.truncations[take],
            infos,
        )

    def _gather(self, count: int | None, timeout: float | None, method: str) -> None:
        """Collect replies until ``count`` envs are ready (every reply when ``None``).

        A worker that died or overran ``step_timeout`` is restarted under
        ``on_error="restart"``; otherwise every other worker's reply is drained and the error
        raised.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._in_flight if count is None else len(self._ready) < count:
            if not self._in_flight:
                raise NoAsyncCallError(f"Calling `{method}` with no envs in flight.", method)
            try:
                ready = self._wait_ready(deadline, timeout, method)
            except _Overdue as late:
                for w in late.workers:
                    _, gids = self._in_flight.pop(w)
                    err = StepTimeoutError(gids.tolist(), w, self.step_timeout, method.removesuffix("_wait"))
                    self._worker_failed(w, gids, err)
                continue
            for w in ready:
                self._take_reply(w)

    def _wait_ready(self, deadline: float | None, timeout: float | None, method: str) -> list[int]:
        """Workers with a reply, waiting until one has, the caller's deadline, or a step deadline."""
        workers = list(self._in_flight)
        if deadline is None and self.step_timeout is None:  # the common case: wait as long as it takes
            return self._transport.ready(workers, None)
        now = time.monotonic()
        left = None if deadline is None else max(0.0, deadline - now)
        if self.step_timeout is not None:
            due = min(self._sent_at[w] for w in workers) + self.step_timeout
            left = max(0.0, due - now) if left is None else min(left, max(0.0, due - now))
        ready = self._transport.ready(workers, left)
        now = time.monotonic()
        if self.step_timeout is not None:  # also when others are ready: async batches never wait on all
            late = [w for w in workers if w not in ready and now - self._sent_at[w] >= self.step_timeout]
            if late:
                raise _Overdue(late)
        if ready:
            return ready
        if deadline is not None and now >= deadline:
            raise multiprocessing.TimeoutError(
                f"The call to `{method}` has timed out after {timeout} second(s)."
            )
        return []

    def _take_reply(self, w: int) -> None:
        command, gids = self._in_flight.pop(w)
        try:
            entries, objects = self._transport.fetch(w)
        except WorkerDiedError as exc:
            self._worker_failed(w, gids, exc)
            return
        except BaseException:
            self._drain()
            raise
        self._accept(w, gids, entries, objects)

    def _accept(self, w: int, gids: np.ndarray, entries: list[InfoEntry], objects: Any) -> None:
        """Take a worker's results for ``gids``: they are ready to be returned."""
        self._buffers.observations.set_objects(objects, gids)
        for entry in entries:
            self._held[entry.index] = entry
        if self.batch_size < self.num_envs:  # full batches wait for every reply, not a count
            self._ready.extend(gids.tolist())
        deferred = self._deferred.pop(w, None)
        if deferred:
            ids = np.array(sorted(deferred), dtype=np.int64)
            self._submit(w, "step", (ids - self._partition[w][0],), ids)

    def _worker_failed(self, w: int, gids: np.ndarray, error: VecEnvError) -> None:
        """A worker died or hung while running a step or reset for ``gids``."""
        if self.on_error == "restart" and self._worker_budget.spend(w, f"worker {w}", error):
            self._restart_worker(w, gids, error)
            return
        if isinstance(error, StepTimeoutError):
            self._transport.terminate(w)
        self._drain()
        raise error

    def _restart_worker(self, w: int, gids: np.ndarray, error: VecEnvError) -> None:
        """Replace worker ``w`` with a fresh one and end the episodes of ``gids`` as truncations.

        The rows keep the last observation the old worker wrote. SAME_STEP resets the new envs
        at once (that observation becomes ``final_obs``); NEXT_STEP resets them on their next
        step; DISABLED leaves the reset to the caller, as after any episode end.
        """
        b = self._buffers
        same_step = self.autoreset_mode is AutoresetMode.SAME_STEP
        start, stop = self._partition[w]
        # Async batches: the worker's other envs (idle, or ready and not yet returned) lose their
        # episodes too. Their next result is a truncation (see _truncate_cut); an env whose last
        # result already ended its episode needs none, except in SAME_STEP, where the new env's
        # first observation is not the one the caller holds.
        in_flight = set(gids.tolist())
        others = [i for i in range(start, stop) if i not in in_flight]
        cut = [i for i in others if same_step or not (b.terminations[i] or b.truncations[i])]
        kept = {i: (copy.deepcopy(b.observations.item(i)), b.rewards[i], b.terminations[i], b.truncations[i])
                for i in others} if same_step else {}
        finals = {int(i): copy.deepcopy(b.observations.item(int(i))) for i in gids} if same_step else {}
        self._transport.restart(w)
        if self.on_error != "raise":
            self._transport.submit(w, "configure", (self.on_error, self.max_restarts, self.restart_window))
            self._fetch_now(w)
        report = {"restarted": True, "restart_reason": f"{type(error).__name__}: {error.args[0]}"}
        if same_step:
            self._transport.submit(w, "reset", (None, None, None))
            entries, objects = self._fetch_now(w)
            b.observations.set_objects(objects, np.arange(start, stop))
            infos = {e.index: e.info for e in entries}
            made = [InfoEntry(i, {**infos.get(i, {}), **report}, True, finals[i], dict(report)) for i in finals]
            for i in cut:
                self._cut[i] = (report, copy.deepcopy(b.observations.item(i)), infos.get(i, {}))
            for i, (obs, reward, terminated, truncated) in kept.items():  # what the caller holds or will get
                b.observations.write(i, obs)
                b.rewards[i], b.terminations[i], b.truncations[i] = reward, terminated, truncated
        else:
            made = [InfoEntry(int(i), dict(report)) for i in gids]
            self._cut.update((i, (report, None, {})) for i in cut)
        b.rewards[gids] = 0.0  # after the reset above, which clears the flags of its rows
        b.terminations[gids] = False
        b.truncations[gids] = True
        deferred = self._deferred.pop(w, [])  # sent while the old worker was busy
        now = [i for i in deferred if i in self._cut]
        if len(now) < len(deferred):
            self._deferred[w] = [i for i in deferred if i not in self._cut]
        self._accept(w, gids, made, None)
        if now:
            self._truncate_cut(now)

    def _truncate_cut(self, ids: list[int]) -> None:
        """Return the envs ``ids``, whose worker was restarted while they waited, as truncated.

        The observation is the last one the caller got (NEXT_STEP, DISABLED) or the new env's
        first one with that last one as ``final_obs`` (SAME_STEP); the infos say restarted.
        """
        b = self._buffers
        for i in ids:
            report, reset_obs, reset_info = self._cut.pop(i)
            b.rewards[i] = 0.0
            b.terminations[i] = False
            b.truncations[i] = True
            if reset_obs is None:
                entry = InfoEntry(i, dict(report))
            else:
                final_obs = copy.deepcopy(b.observations.item(i))
                b.observations.write(i, reset_obs)
                entry = InfoEntry(i, {**reset_info, **report}, True, final_obs, dict(report))
            self._held[i] = entry
            self._ready.append(i)

    def _fetch_now(self, w: int) -> Any:
        """Wait for ``w``'s reply to a command sent outside the in-flight bookkeeping."""
        if not self._transport.ready([w], self.step_timeout):
            self._transport.terminate(w)
            raise StepTimeoutError(list(range(*self._partition[w])), w, self.step_timeout, "restart")
        return self._transport.fetch(w)

    def _drain(self) -> None:
        """After a failure: wait out every other worker's reply, so none arrives a step late.

        A worker that does not answer within ``step_timeout`` is ended.
        """
        for w in list(self._in_flight):
            self._in_flight.pop(w)
            try:
                if self._transport.ready([w], self.step_timeout):
                    self._transport.fetch(w)
                else:
                    self._transport.terminate(w)
            except BaseException:
                pass
        self._deferred.clear()
        self._ready.clear()
        self._held.clear()
        self._busy[:] = False
        self._pending = None

    def _submit(self, w: int, command: str, payload: tuple, gids: np.ndarray) -> None:
        self._transport.submit(w, command, payload)
        self._in_flight[w] = (command, gids)
        self._sent_at[w] = time.monotonic()

    # ================================================================ calls
    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` of every env (or get its value if not callable), as gymnasium does."""
        self.call_async(name, *args, **kwargs)
        return self.call_wait()

    def call_async(self, name: str, *args: Any, **kwargs: Any) -> None:
        """Start :meth:`call` without waiting."""
        self._check_open()
        self._check_idle("call_async")
        _check_name(name)
        for w in range(self.num_workers):
            self._submit(w, "call", (name, args, kwargs, None), _NO_IDS)
        self._pending = "call"

    def call_wait(self, timeout: float | None = None) -> tuple[Any, ...]:
        """Wait for :meth:`call_async`'s results, one per env."""
        self._check_open()
        if self._pending != "call":
            raise NoAsyncCallError("Calling `call_wait` without any prior call to `call_async`.", "call_async")
        results = self._wait_calls(timeout, "call_wait")
        return tuple(x for w in range(self.num_workers) for x in results[w])

    def _wait_calls(self, timeout: float | None, method: str) -> dict[int, Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        results = self._call_results  # kept across a timed-out wait: the call stays pending
        while self._in_flight:
            try:
                ready = self._wait_ready(deadline, timeout, method)
            except _Overdue as late:
                for w in late.workers:
                    self._in_flight.pop(w)
                    self._transport.terminate(w)
                    self._call_error = self._call_error or StepTimeoutError(
                        list(range(*self._partition[w])), w, self.step_timeout, method.removesuffix("_wait")
                    )
                continue
            for w in ready:
                self._in_flight.pop(w)
                try:
                    results[w] = self._transport.fetch(w)
                except BaseException as exc:
                    self._call_error = self._call_error or exc
        self._pending = None
        self._call_results = {}
        error, self._call_error = self._call_error, None
        if error is not None:
            raise error
        return results

    def _run_at(self, command: str, indices: Sequence[int] | None, payload: Callable) -> list:
        """Run a group command on the envs ``indices``; results in the order of ``indices``."""
        self._check_open()
        self._check_idle(command)
        ids = np.arange(self.num_envs) if indices is None else self._check_env_ids(indices)
        order = np.argsort(ids, kind="stable")
        for w, local, gids in self._by_worker(ids[order]):
            self._submit(w, command, payload(local, gids), _NO_IDS)
        self._pending = "call"
        results = self._wait_calls(None, command)
        if command == "set_attr":
            return []
        flat = [x for w in sorted(results) for x in results[w]]
        out: list = [None] * len(ids)
        for pos, value in zip(order, flat, strict=True):
            out[pos] = value
        return out

    def call_at(self, indices: Sequence[int] | None, name: str, *args: Any, **kwargs: Any) -> list:
        """Like :meth:`call`, on the envs ``indices`` only (all when ``None``)."""
        _check_name(name)
        return self._run_at("call", indices, lambda local, _: (name, args, kwargs, local))

    def get_attr_at(self, indices: Sequence[int] | None, name: str) -> list:
        """The attribute ``name`` of the envs ``indices``, never called (SB3's ``get_attr``)."""
        _check_name(name)
        return self._run_at("get_attr", indices, lambda local, _: (name, local))

    def set_attr_at(self, indices: Sequence[int] | None, name: str, values: Sequence[Any]) -> None:
        """Set ``name`` on the envs ``indices``, env ``indices[k]`` to ``values[k]``."""
        _check_name(name)
        ids = np.arange(self.num_envs) if indices is None else self._check_env_ids(indices)
        values = list(values)
        if len(values) != len(ids):
            raise ValueError(f"set_attr_at: got {len(values)} values for {len(ids)} envs")
        by_env = dict(zip(ids.tolist(), values, strict=True))
        self._run_at(
            "set_attr", indices,
            lambda local, gids: (name, [by_env[j] for j in gids.tolist()], local),
        )

    def apply(self, fn: Callable[..., Any], *args: Any, indices: Sequence[int] | None = None) -> list:
        """Run ``fn(env, *args)`` on each env (in its worker) and return the results."""
        if not callable(fn):
            raise TypeError(f"apply(fn, ...): fn must be callable, got {fn!r}")
        return self._run_at("apply", indices, lambda local, _: (fn, args, local))

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """gymnasium's ``get_attr``: ``call(name)`` on every env."""
        return self.call(name)

    def set_attr(self, name: str, values: Any) -> None:
        """Set ``name`` on every env: one value for all, or a list/tuple with one per env."""
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(
                "Values must be a list or tuple with length equal to the number of environments. "
                f"Got `{len(values)}` values for {self.num_envs} environments."
            )
        self.set_attr_at(None, name, values)

    def render(self) -> tuple[Any, ...]:
        """Each env's rendered frame (``render_mode`` is set when the envs are made)."""
        return tuple(self._run_at("render", None, lambda local, _: (local,)))

    @property
    def envs(self) -> list[gym.Env]:
        """The sub-env objects (serial backend only: other backends keep them in workers)."""
        return self._transport.envs

    @property
    def np_random_seed(self) -> tuple[int, ...]:
        """Each env's ``np_random_seed``."""
        return self.get_attr("np_random_seed")

    @property
    def np_random(self) -> tuple[np.random.Generator, ...]:
        """Each env's ``np_random`` generator."""
        return self.get_attr("np_random")

    # ================================================================ closing
    def close_extras(self, timeout: float | None = None, terminate: bool = False, **kwargs: Any) -> None:
        """Close every env and end every worker, in bounded time."""
        self._in_flight = {}
        self._pending = None
        self._transport.close(timeout)

    def close(self, **kwargs: Any) -> None:
        """Close the envs and release every worker and buffer; calling it again does nothing."""
        if getattr(self, "closed", True):
            return
        try:
            self.close_extras(**kwargs)
        finally:
            self.closed = True

    def __enter__(self) -> VectorEnv:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if not getattr(self, "closed", True):
                self.close(terminate=True)
        except Exception:
            pass

    # ================================================================ helpers
    def _check_open(self) -> None:
        if self.closed:
            raise ClosedEnvironmentError(
                f"Trying to operate on `{type(self).__name__}`, after a call to `close()`."
            )

    def _check_idle(self, method: str) -> None:
        if self._pending is not None or self._in_flight:
            state = self._pending or "step"
            raise AlreadyPendingCallError(
                f"Calling `{method}` while waiting for a pending call to `{state}` to complete.",
                state,
            )

    def _check_env_ids(self, env_ids: Any, unique: bool = True) -> np.ndarray:
        ids = np.asarray(env_ids)
        if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
            raise TypeError(f"env_ids: expected a 1-D sequence of env indices, got {env_ids!r}")
        ids = ids.astype(np.int64, copy=False)
        bad = ids[(ids < 0) | (ids >= self.num_envs)]
        if bad.size:
            raise ValueError(f"env_ids: {bad.tolist()} out of range for num_envs={self.num_envs}")
        if unique and len(set(ids.tolist())) != ids.size:
            raise ValueError(f"env_ids: each env may appear once, got {ids.tolist()}")
        return ids

    def _by_worker(self, ids: np.ndarray | None):
        """Yield ``(worker, local ids or None for the whole group, global ids)`` for sorted ``ids``."""
        if ids is None or ids.size == self.num_envs:
            yield from self._whole_groups
            return
        # plain Python: batches are small, and numpy's per-call cost dominates at this size
        worker_of = self._worker_of
        groups: dict[int, list[int]] = {}
        for i in sorted(ids.tolist()):
            groups.setdefault(worker_of[i], []).append(i)
        for w in sorted(groups):
            gids = np.array(groups[w], dtype=np.int64)
            start, stop = self._partition[w]
            local = None if gids.size == stop - start else gids - start
            yield w, local, gids

    def __repr__(self) -> str:
        name = type(self).__name__
        spec = f"{self.spec.id}, " if self.spec is not None else ""
        return f"{name}({spec}num_envs={self.num_envs})"


# ==================================================================== argument checks
def _check_env_fns(env_fns: Any) -> list[Callable[[], gym.Env]]:
    if callable(env_fns) or isinstance(env_fns, (str, bytes)):
        raise TypeError("env_fns: expected a list of callables that each return an env, got a single "
                        f"{type(env_fns).__name__}; use vecenv.make(env, num_envs) for one env id or factory")
    try:
        fns = list(env_fns)
    except TypeError:
        raise TypeError(f"env_fns: expected a list of callables, got {type(env_fns).__name__}") from None
    if not fns:
        raise ValueError("env_fns: need at least one env (num_envs must be >= 1), got an empty list")
    for i, fn in enumerate(fns):
        if not callable(fn):
            raise TypeError(f"env_fns[{i}]: expected a callable that returns an env, got {fn!r}")
    return fns


def _check_count(name: str, value: Any, upper: int | None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
    if upper is not None and value > upper:
        raise ValueError(f"{name}: expected at most num_envs={upper}, got {value}")
    return int(value)


def _check_observation_mode(mode: Any) -> None:
    if isinstance(mode, tuple):
        if len(mode) != 2 or not all(isinstance(s, spaces.Space) for s in mode):
            raise TypeError(
                "observation_mode: a tuple must be (batched observation space, single observation space)"
            )
    elif mode not in ("same", "different"):
        raise ValueError(
            f"observation_mode: expected 'same', 'different' or a (batched, single) tuple of spaces, got {mode!r}"
        )


def _check_reset_mask(mask: Any, n: int) -> None:
    if not isinstance(mask, np.ndarray):
        raise TypeError(f"`options['reset_mask']` must be a numpy array, got {type(mask)}")
    if mask.shape != (n,):
        raise ValueError(f"`options['reset_mask']` must have shape `({n},)`, got {mask.shape}")
    if mask.dtype != np.bool_:
        raise TypeError(f"`options['reset_mask']` must have `dtype=np.bool_`, got {mask.dtype}")
    if not mask.any():
        raise ValueError(
            f"`options['reset_mask']` must contain a boolean array with at least one True value, got reset_mask={mask}"
        )


def _check_name(name: Any) -> None:
    if not isinstance(name, str):
        raise TypeError(f"expected an attribute or method name (str), got {name!r}")
