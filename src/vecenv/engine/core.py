"""The engine: one gymnasium-API vector env core that every backend shares.

:class:`VectorEnv` checks every input before anything reaches a worker (:mod:`.checks`), keeps
the autoreset and in-flight bookkeeping (:mod:`.flight`), replaces failed workers
(:mod:`.recovery`), runs calls on the sub-envs (:mod:`.calls`), batches infos, and hands each
worker's env group its commands through a :class:`~vecenv.engine.transport.Transport`. Backends
(serial, threads, processes, Ray) differ only in the transport they pass in.
"""

from __future__ import annotations

import contextlib
import multiprocessing
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_differing_spaces, batch_space
from typing_extensions import Unpack

from vecenv.engine import runs
from vecenv.engine.calls import _NO_IDS, Calls
from vecenv.engine.checks import (
    SpaceMismatchError,
    check_count,
    check_env_fns,
    check_env_ids,
    check_observation_mode,
    check_options,
    check_policy,
    check_reset_mask,
    check_seeds,
    check_spaces,
    check_timeout,
)
from vecenv.engine.flight import Dispatcher, one_caller
from vecenv.engine.infos import batch_infos
from vecenv.engine.modes import parse_autoreset_mode
from vecenv.engine.partition import Partition
from vecenv.engine.recovery import Recovery
from vecenv.engine.state import CallState
from vecenv.engine.transport import Transport
from vecenv.errors import (
    AlreadyPendingCallError,
    ClosedEnvironmentError,
    NoAsyncCallError,
    VecEnvError,
)
from vecenv.policy import FailureOptions
from vecenv.worker import EnvDescription, InfoEntry
from vecenv.worker.commands import Configure, Reset, Step
from vecenv.worker.restarts import RestartBudget

__all__ = ["SpaceMismatchError", "VectorEnv"]

StepResult = tuple[Any, np.ndarray, np.ndarray, np.ndarray, Any]


class VectorEnv(Dispatcher, Recovery, Calls, gym.vector.VectorEnv):  # type: ignore[misc]  # np_random: one per env
    """A batch of ``num_envs`` sub-environments behind gymnasium's vector API.

    Subclasses choose the transport; see :class:`vecenv.SerialVectorEnv` and the others.

    Beyond gymnasium's API it offers async batches (``batch_size < num_envs`` with
    :meth:`send` / :meth:`recv`), per-env calls (:meth:`call_at`, :meth:`get_attr_at`,
    :meth:`set_attr_at`, :meth:`apply`), the per-env reports the SB3 layer reads
    (:meth:`step_entries`, :meth:`reset_entries`) and a failure policy (``on_error``,
    ``max_restarts``, ``restart_window``, ``step_timeout``: see :class:`vecenv.FailurePolicy`).
    """

    #: the transport's name, e.g. ``"serial"``
    backend: str
    #: what ``backend="auto"`` chose and why (a :class:`vecenv.layout.Layout`); None otherwise
    layout: Any = None
    #: False lets step() come before the first reset() (SB3's API leaves that to the envs)
    require_reset: bool = True

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
        **failure: Unpack[FailureOptions],
    ) -> None:
        self.closed = True  # until started, so that __del__ and close() have nothing to do
        self._transport = transport
        self.env_fns = check_env_fns(env_fns)
        self.num_envs = n = len(self.env_fns)
        self.autoreset_mode = parse_autoreset_mode(autoreset_mode)
        check_observation_mode(observation_mode)
        self.observation_mode = observation_mode
        self.copy = bool(copy)
        self.batch_size = n if batch_size is None else check_count("batch_size", batch_size, n)
        self._async_batches = self.batch_size < n  # recv() returns the first batch_size envs ready
        self.num_workers = min(check_count("num_workers", num_workers, None), n)
        self.backend = transport.name
        self.policy = check_policy(failure, transport.name, transport.can_end_workers)
        self._worker_budget = RestartBudget(self.policy.max_restarts, self.policy.restart_window)
        self._partition = Partition(n, self.num_workers)
        self._init_flight(n)
        self._init_recovery()
        self._call_results: dict[int, Any] = {}  # replies of the pending call so far, per worker
        self._call_error: BaseException | None = None
        self._has_reset = False
        self._needs_reset = np.zeros(n, dtype=np.bool_)  # DISABLED mode: ended, not yet reset
        descriptions = transport.start(self.env_fns, self._partition, self.autoreset_mode)
        self.closed = False
        runs.opened()  # other processes' backend="auto" now counts this one as a run
        try:
            self._setup_spaces(descriptions, observation_mode)
            self._buffers = transport.allocate(self.single_observation_space, self.single_action_space, n)
            transport.attach(self._buffers)
            if self.policy.restarts:
                with self._dispatching(CallState.WAITING_CALL):
                    for w in range(self.num_workers):
                        self._submit(w, Configure(self.policy), _NO_IDS)
                self._wait_calls(None, "configure")
        except BaseException:
            self.close()
            raise

    # the policy's fields, readable on the vector env as gymnasium-style attributes
    on_error = property(lambda self: self.policy.on_error)
    max_restarts = property(lambda self: self.policy.max_restarts)
    restart_window = property(lambda self: self.policy.restart_window)
    step_timeout = property(lambda self: self.policy.step_timeout)

    def _setup_spaces(self, descriptions: list[EnvDescription], observation_mode: Any) -> None:
        first = descriptions[0]
        self.metadata = dict(first.metadata)
        self.metadata["autoreset_mode"] = self.autoreset_mode
        self.render_mode = first.render_mode
        self.single_action_space = first.action_space
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.single_observation_space = first.observation_space
        if isinstance(observation_mode, tuple):
            self.observation_space, self.single_observation_space = observation_mode
        elif observation_mode == "same":
            self.observation_space = batch_space(first.observation_space, self.num_envs)
        else:
            self.observation_space = batch_differing_spaces([d.observation_space for d in descriptions])
        check_spaces(descriptions, observation_mode, self.single_observation_space, self.single_action_space,
                     type(self))

    # ================================================================ reset
    @one_caller
    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the envs; env ``i`` gets ``seed + i`` (or ``seed[i]`` from a list).

        ``options={"reset_mask": mask}`` resets only the envs where ``mask`` is True (the others
        keep their observation). In async-batch mode every env is reset and the first
        ``batch_size`` to finish are returned, with ``infos["env_id"]``. After an interrupted
        call, every worker is first let finish what it was given.
        """
        with self._one_call():
            self.reset_async(seed=seed, options=options)
            return self.reset_wait()

    @one_caller
    def reset_async(
        self,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        """Send the reset to the workers without waiting (see :meth:`reset`)."""
        self._check_open()
        check_options(options)
        mask = None
        if options is not None and "reset_mask" in options:
            mask = options["reset_mask"]
            check_reset_mask(mask, self.num_envs)
        self._start_reset(seed, options, mask)

    def _start_reset(self, seed: Any, options: dict[str, Any] | None, mask: np.ndarray | None) -> None:
        """Reset the envs where ``mask`` is True (all when None), each with ``options`` as given
        (a ``reset_mask`` in it popped, as gymnasium's vector envs do)."""
        n = self.num_envs
        seeds = check_seeds(seed, n)
        if mask is not None and self.batch_size < n:
            raise ValueError("reset(options={'reset_mask': ...}) is not supported with batch_size < num_envs")
        if self._state is CallState.INTERRUPTED or self._wait_interrupted:
            self._settle()
        self._check_idle("reset_async")
        if options is not None:
            options.pop("reset_mask", None)  # from the caller's dict, as gymnasium's vector envs do
        ids = np.arange(n) if mask is None else np.flatnonzero(mask)
        with self._dispatching(CallState.WAITING_RESET):
            if self.batch_size < n:
                self._ready.clear()
                self._held.clear()
                self._cut.clear()  # every env starts a new episode
            self._needs_reset[ids] = False
            if self._async_batches:
                self._busy[ids] = True
            for w, local, gids in self._partition.by_worker(ids):
                a, b = self._partition[w]
                self._submit(w, Reset(seeds[a:b], options, local), gids)

    @one_caller
    def reset_wait(self, timeout: float | None = None) -> tuple[Any, dict[str, Any]]:
        """Wait for :meth:`reset_async`'s results: ``(observations, infos)``."""
        check_timeout(timeout, "reset_wait")
        self._check_open()
        if self._state is not CallState.WAITING_RESET:
            raise NoAsyncCallError("Calling `reset_wait` without any prior call to `reset_async`.", "reset")
        obs, _, _, _, infos = self._results(timeout, "reset_wait")
        self._has_reset = True
        return obs, infos

    # ================================================================ step
    @one_caller
    def step(self, actions: Any, env_ids: Sequence[int] | np.ndarray | None = None) -> StepResult:
        """Step every env (or, in async-batch mode, send to ``env_ids`` and receive a batch)."""
        try:
            self._send(actions, env_ids)
            return self._recv(None)
        except BaseException:
            self._cut_call()
            raise

    def step_async(self, actions: Any) -> None:
        """gymnasium's AsyncVectorEnv name for :meth:`send` to every env."""
        self.send(actions)

    def step_wait(self, timeout: float | None = None) -> StepResult:
        """gymnasium's AsyncVectorEnv name for :meth:`recv`."""
        return self.recv(timeout)

    @one_caller
    def send(self, actions: Any, env_ids: Sequence[int] | np.ndarray | None = None) -> None:
        """Hand ``actions`` to the envs ``env_ids`` (all envs when ``None``) without waiting.

        In async-batch mode (``batch_size < num_envs``) ``env_ids`` names the envs the actions are
        for, normally the ``infos["env_id"]`` of the last :meth:`recv`.
        """
        self._send(actions, env_ids)

    def _send(self, actions: Any, env_ids: Sequence[int] | np.ndarray | None) -> None:
        if self.closed:
            self._check_open()
        state = self._state
        if state is not CallState.DEFAULT and not (state is CallState.WAITING_STEP and self._async_batches):
            self._check_idle("step_async")
        if not self._has_reset and self.require_reset:
            raise gym.error.ResetNeeded("step() was called before reset(): call reset() first")
        ids = self._check_send(actions, env_ids)
        cut = [i for i in ids.tolist() if i in self._cut] if self._cut and ids is not None else None
        self._state = CallState.WAITING_STEP
        try:  # what _dispatching does, inline on the step path
            if ids is None:
                commands = self._partition.whole_steps
            else:
                if self._async_batches:
                    self._busy[ids] = True
                stepping = ids[~np.isin(ids, cut)] if cut else ids
                commands = [(w, Step(local), gids) for w, local, gids in self._partition.by_worker(stepping)]
            for w, command, gids in commands:
                if w in self._in_flight:
                    self._deferred.setdefault(w, []).extend(gids.tolist())
                else:
                    self._submit(w, command, gids)
            if cut:
                self._truncate_cut(cut)
        except BaseException:
            self._cut_dispatch(state)
            raise

    def _check_send(self, actions: Any, env_ids: Any) -> np.ndarray | None:
        """Check ``env_ids`` and write ``actions`` into the action buffer; the ids (None: all)."""
        n, disabled = self.num_envs, self.autoreset_mode is AutoresetMode.DISABLED
        if env_ids is None:
            if self.batch_size < n:
                raise ValueError(
                    f"send(actions, env_ids): env_ids is required when batch_size ({self.batch_size}) "
                    f"< num_envs ({n}); pass the infos['env_id'] of the last recv()"
                )
            self._buffers.actions.assign(actions, None, "actions")
            if disabled and self._needs_reset.any():
                self._refuse_ended(np.flatnonzero(self._needs_reset))
            return None
        ids = check_env_ids(env_ids, n)
        busy = ids[self._busy[ids]]
        if busy.size:
            raise ValueError(
                f"send(actions, env_ids): envs {busy.tolist()} are still stepping or waiting to be "
                "received; send actions only to envs returned by recv()"
            )
        if disabled and self._needs_reset[ids].any():
            self._refuse_ended(ids[self._needs_reset[ids]])
        self._buffers.actions.assign(actions, ids, "actions")
        return ids

    @one_caller
    def recv(self, timeout: float | None = None) -> StepResult:
        """Wait for the results of :meth:`send`: all envs, or the first ``batch_size`` ready."""
        check_timeout(timeout, "recv")
        return self._recv(timeout)

    def _recv(self, timeout: float | None) -> StepResult:
        self._check_open()
        if self._state is not CallState.WAITING_STEP:
            raise NoAsyncCallError("Calling `step_wait` without any prior call to `step_async`.", "step")
        return self._results(timeout, "step_wait")

    # The SB3 layer reads each env's report as it came (exact Python types, no batching).
    @one_caller
    def step_entries(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, list[InfoEntry]]:
        """:meth:`step` returning the per-env :class:`~vecenv.worker.InfoEntry` list instead of
        batched infos (full batches only)."""
        self._require_full_batches("step_entries")
        self._send(actions, None)
        return self._results(None, "step_wait", raw=True)

    @one_caller
    def reset_entries(
        self, seed: int | Sequence[int | None] | None = None, options: dict | None = None,
        env_ids: Sequence[int] | np.ndarray | None = None,
    ) -> tuple[Any, list[InfoEntry]]:
        """:meth:`reset` returning the per-env :class:`~vecenv.worker.InfoEntry` list instead of
        batched infos (full batches only). ``env_ids`` resets only those envs, each getting
        ``options`` exactly as given (``None`` stays ``None``, as SB3 passes it)."""
        self._require_full_batches("reset_entries")
        if env_ids is None:
            self.reset_async(seed=seed, options=options)
        else:
            check_options(options)
            mask = np.zeros(self.num_envs, dtype=np.bool_)
            mask[check_env_ids(env_ids, self.num_envs)] = True
            self._start_reset(seed, options, mask)
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
        try:  # what _collecting does, inline on the step path
            if self._async_batches:
                self._gather(self.batch_size, timeout, method)
                return self._async_batch()
            self._gather(None, timeout, method)
            return self._full_batch(raw)
        except multiprocessing.TimeoutError:
            raise
        except BaseException:
            self._cut_collect()
            raise

    def _full_batch(self, raw: bool) -> tuple:
        b, n = self._buffers, self.num_envs
        columns = self._columns_batch(raw) if self._columns else None
        entries = [self._held[i] for i in sorted(self._held)] if self._held else []
        self._clear_flight()
        if self.autoreset_mode is AutoresetMode.DISABLED:
            self._needs_reset = np.logical_or(b.terminations, b.truncations)
        infos = columns if columns is not None else entries if raw else batch_infos(entries, n) if entries else {}
        return b.observations.read(self.copy), b.rewards.copy(), b.terminations.copy(), b.truncations.copy(), infos

    def _async_batch(self) -> tuple:
        b, bs = self._buffers, self.batch_size
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
            self._state = CallState.DEFAULT
        elif self._state is CallState.WAITING_RESET:
            self._state = CallState.WAITING_STEP  # the rest of the reset arrives through recv()
        return b.observations.read_rows(take), b.rewards[take], b.terminations[take], b.truncations[take], infos

    # ================================================================ closing
    def close_extras(self, timeout: float | None = None, terminate: bool = False, **kwargs: Any) -> None:
        """Close every env and end every worker, in bounded time (``terminate``: at once)."""
        self._in_flight = {}
        self._state = CallState.DEFAULT
        self._transport.close(0.0 if terminate else timeout)

    def close(self, **kwargs: Any) -> None:
        """Close the envs and release every worker and buffer; calling it again does nothing."""
        if getattr(self, "closed", True):
            return
        check_timeout(kwargs.get("timeout"), "close")
        self.closed = True  # first: a call blocked in another thread sees it and stops
        runs.closed()
        self.close_extras(**kwargs)

    def __enter__(self) -> VectorEnv:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            if not getattr(self, "closed", True):
                self.close(terminate=True)

    # ================================================================ helpers
    def _check_open(self) -> None:
        if self.closed:
            raise ClosedEnvironmentError(f"Trying to operate on `{type(self).__name__}`, after a call to `close()`.")

    def _check_idle(self, method: str) -> None:
        self._check_open()
        if self._state is CallState.INTERRUPTED:
            raise VecEnvError(
                f"Calling `{method}` after a call was interrupted part-way: call reset() (which lets "
                "every worker finish first) or close()"
            )
        if self._state is not CallState.DEFAULT or self._in_flight:
            state = self._state.value
            hint = "; call reset() to drop it" if self._wait_interrupted else ""
            raise AlreadyPendingCallError(
                f"Calling `{method}` while waiting for a pending call to `{state}` to complete{hint}.", state
            )

    def __repr__(self) -> str:
        spec = f"{self.spec.id}, " if self.spec is not None else ""
        chosen = f", layout={self.layout.name!r} (auto)" if self.layout is not None else ""
        return f"{type(self).__name__}({spec}num_envs={self.num_envs}{chosen})"

