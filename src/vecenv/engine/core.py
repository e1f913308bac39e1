"""The engine: one gymnasium-API vector env core that every backend shares.

:class:`VectorEnv` checks every input before anything reaches a worker (:mod:`.checks`), sends
the commands through its :class:`~.flight.InFlight` (each worker's env group gets them through
a :class:`~vecenv.engine.transport.Transport`) and collects the results through the flight's
:class:`~.collect.Collect` strategy: ``step`` reads check, send, collect (the whole step, to a
worker and back, is drawn in :mod:`vecenv.transports.process`). The flight fires the
call state's events (:mod:`.state`), its :class:`~.recovery.Recovery` plans the restart of
failed workers, and :class:`~.calls.Calls` runs calls on the sub-envs. Backends (serial,
threads, processes, Ray) differ only in the transport they pass in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from typing_extensions import Unpack

from vecenv import runs
from vecenv.engine import owner
from vecenv.engine.caller import CallerGuard, one_caller
from vecenv.engine.calls import Calls, in_order
from vecenv.engine.checks import (
    SpaceMismatchError,
    batched_spaces,
    check_count,
    check_env_fns,
    check_env_ids,
    check_name,
    check_observation_mode,
    check_options,
    check_policy,
    check_reset_mask,
    check_seeds,
    check_timeout,
    check_values,
)
from vecenv.engine.flight import InFlight
from vecenv.engine.modes import parse_autoreset_mode
from vecenv.engine.partition import Partition
from vecenv.engine.state import CallState, Event
from vecenv.engine.transport import Transport
from vecenv.errors import ClosedEnvironmentError, NoAsyncCallError
from vecenv.infos import InfoParts
from vecenv.policy import FailureOptions
from vecenv.worker.commands import Apply, Call, Command, Configure, GetAttr, Render, SetAttr

__all__ = ["SpaceMismatchError", "VectorEnv"]

StepResult = tuple[Any, np.ndarray, np.ndarray, np.ndarray, Any]


class VectorEnv(gym.vector.VectorEnv):  # type: ignore[misc]  # np_random: one per env
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
    #: what ``backend="auto"`` chose and why (a :class:`vecenv.layout.Layout`); None otherwise.
    #: An env that auto built counts as a run on this machine until it closes (:mod:`vecenv.runs`)
    layout: Any = None
    #: False lets step() come before the first reset() (SB3's API leaves that to the envs)
    require_reset: bool = True
    #: log an env's error before raising it, as gymnasium's AsyncVectorEnv does
    _log_env_errors: bool = False

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
        self._transport = transport
        self.env_fns = check_env_fns(env_fns)
        self.num_envs = n = len(self.env_fns)
        self.autoreset_mode = parse_autoreset_mode(autoreset_mode)
        check_observation_mode(observation_mode)
        self.observation_mode = observation_mode
        self.copy = bool(copy)
        self.batch_size = n if batch_size is None else check_count("batch_size", batch_size, n)
        self.num_workers = min(check_count("num_workers", num_workers, None), n)
        self.backend = transport.name
        self.policy = check_policy(failure, transport.name, transport.can_end_workers)
        self._guard = CallerGuard()
        self._has_reset = False
        partition = Partition(n, self.num_workers)
        self._flight = flight = InFlight(transport, partition, self.policy, self.batch_size,
                                         self.autoreset_mode, self.copy, self._log_env_errors)
        self._calls = Calls(flight, partition, flight.lifecycle)
        self._owner = owner.adopt(self)  # before any worker starts: a forked one inherits it
        descriptions = transport.start(self.env_fns, partition, self.autoreset_mode)
        self.closed = False
        self._open = True  # the transport is not closed yet (closed: close() was called)
        try:
            first = descriptions[0]
            self.metadata = {**first.metadata, "autoreset_mode": self.autoreset_mode}
            self.render_mode = first.render_mode
            (self.single_observation_space, self.observation_space, self.single_action_space,
             self.action_space) = batched_spaces(descriptions, observation_mode, type(self))
            self._buffers = flight.allocate(self.single_observation_space, self.single_action_space)
            transport.attach(self._buffers)
            if self.policy.restarts or self.policy.recycles:
                self._calls.send(Configure(self.policy))
                self._calls.collect(None, "configure")
        except BaseException:
            self.close()
            raise

    # the policy's fields, readable on the vector env as gymnasium-style attributes
    on_error = property(lambda self: self.policy.on_error)
    max_restarts = property(lambda self: self.policy.max_restarts)
    restart_window = property(lambda self: self.policy.restart_window)
    step_timeout = property(lambda self: self.policy.step_timeout)

    @property
    def closed(self) -> bool:  # type: ignore[override]
        """Whether :meth:`close` was called (or the env never started)."""
        return self._flight.closed

    @closed.setter
    def closed(self, value: bool) -> None:
        self._flight.closed = value

    # ================================================================ reset
    @one_caller
    def reset(self, *, seed: int | Sequence[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset the envs; env ``i`` gets ``seed + i`` (or ``seed[i]`` from a list).

        ``options={"reset_mask": mask}`` resets only the envs where ``mask`` is True (the others
        keep their observation). In async-batch mode every env (or those of ``reset_mask``) is
        reset and the first ``batch_size`` to finish are returned, with ``infos["env_id"]``.
        After an interrupted call, every worker is first let finish what it was given.
        """
        try:
            mask = self._check_reset(options)
            self._send_reset(seed, options, mask)
            obs, _, _, _, infos = self._flight.batches.collect(None, "reset_wait")
        except BaseException:
            self._flight.interrupted_call()  # what the reset left pending is the next reset()'s to drop
            raise
        self._has_reset = True
        return obs, infos

    @one_caller
    def reset_async(self, seed: int | Sequence[int | None] | None = None,
                    options: dict[str, Any] | None = None) -> None:
        """Send the reset to the workers without waiting (see :meth:`reset`)."""
        self._send_reset(seed, options, self._check_reset(options))

    def _check_reset(self, options: dict[str, Any] | None) -> np.ndarray | None:
        """Check a reset's ``options``; its ``reset_mask`` (None: every env)."""
        self._check_open()
        check_options(options)
        if options is None or "reset_mask" not in options:
            return None
        check_reset_mask(options["reset_mask"], self.num_envs)
        return options["reset_mask"]

    def _send_reset(self, seed: Any, options: dict[str, Any] | None, mask: np.ndarray | None) -> None:
        """Reset the envs where ``mask`` is True (all when None), each with ``options`` as given."""
        n, flight = self.num_envs, self._flight
        seeds = check_seeds(seed, n)
        if flight.state is CallState.INTERRUPTED or flight.lifecycle.droppable:
            flight.drop_all()
        self._check_idle("reset_async")
        if options is not None:
            options.pop("reset_mask", None)  # from the caller's dict, as gymnasium's vector envs do
        flight.send_reset(np.arange(n) if mask is None else np.flatnonzero(mask), seeds, options)

    @one_caller
    def reset_wait(self, timeout: float | None = None) -> tuple[Any, dict[str, Any]]:
        """Wait for :meth:`reset_async`'s results: ``(observations, infos)``."""
        self._check_wait(timeout, "reset_wait", CallState.WAITING_RESET)
        obs, _, _, _, infos = self._flight.batches.collect(timeout, "reset_wait")
        self._has_reset = True
        return obs, infos

    # ================================================================ step
    @one_caller
    def step(self, actions: Any, env_ids: Sequence[int] | np.ndarray | None = None) -> StepResult:
        """Step every env (or, in async-batch mode, send to ``env_ids`` and receive a batch)."""
        flight = self._flight
        if flight.closed or flight.lifecycle.state not in flight.batches.step_states or not self._has_reset:
            self._check_step()  # says what refuses the step, if anything does
        try:
            ids = flight.check_and_write_actions(actions, env_ids)  # into the action buffer
            flight.send_steps(ids)  # a command to each worker
            return flight.batches.collect(None, "step_wait")  # every env's results, or the first ready
        except BaseException:
            flight.interrupted_call()  # what the step left pending is the next reset()'s to drop
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
        flight = self._flight
        self._check_step()
        flight.send_steps(flight.check_and_write_actions(actions, env_ids))

    @one_caller
    def recv(self, timeout: float | None = None) -> StepResult:
        """Wait for the results of :meth:`send`: all envs, or the first ``batch_size`` ready (all
        the envs still out when fewer than ``batch_size`` are)."""
        self._check_wait(timeout, "recv", CallState.WAITING_STEP)
        return self._flight.batches.collect(timeout, "step_wait")

    def _check_step(self) -> None:
        """Refuse a step that cannot be sent now (closed, another call pending, no reset yet)."""
        flight = self._flight
        if flight.closed:
            self._check_open()
        if flight.lifecycle.state not in flight.batches.step_states:
            self._check_idle("step_async")
        if not self._has_reset and self.require_reset:
            raise gym.error.ResetNeeded("step() was called before reset(): call reset() first")

    # The SB3 layer reads each env's report as it came (exact Python types, no batching).
    @one_caller
    def step_entries(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, InfoParts]:
        """:meth:`step` returning the envs' info reports as they came (``InfoParts``: entries and
        column chunks, each naming its envs, in no set order) instead of batched infos (full
        batches only)."""
        self._require_full_batches("step_entries")
        flight = self._flight
        self._check_step()
        try:
            flight.send_steps(flight.check_and_write_actions(actions, None))
            return flight.batches.collect(None, "step_wait", raw=True)
        except BaseException:
            flight.interrupted_call()
            raise

    @one_caller
    def reset_entries(
        self, seed: int | Sequence[int | None] | None = None, options: dict | None = None,
        env_ids: Sequence[int] | np.ndarray | None = None,
    ) -> tuple[Any, InfoParts]:
        """:meth:`reset` returning the envs' info reports as they came (as :meth:`step_entries`)
        instead of batched infos (full batches only). ``env_ids`` resets only those envs, each getting
        ``options`` exactly as given (``None`` stays ``None``, as SB3 passes it)."""
        self._require_full_batches("reset_entries")
        if env_ids is None:
            mask = self._check_reset(options)
        else:
            check_options(options)
            mask = np.zeros(self.num_envs, dtype=np.bool_)
            mask[check_env_ids(env_ids, self.num_envs)] = True
        self._send_reset(seed, options, mask)
        obs, _, _, _, entries = self._flight.batches.collect(None, "reset_wait", raw=True)
        self._has_reset = True
        return obs, entries

    def _require_full_batches(self, method: str) -> None:
        if self.batch_size < self.num_envs:
            raise ValueError(f"{method} needs batch_size == num_envs")

    # ================================================================ calls on the sub-envs
    @one_caller
    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` of every env (or get its value if not callable), as gymnasium does."""
        try:
            self.call_async(name, *args, **kwargs)
            return self.call_wait()
        except BaseException:
            self._flight.interrupted_call()
            raise

    @one_caller
    def call_async(self, name: str, *args: Any, **kwargs: Any) -> None:
        """Start :meth:`call` without waiting."""
        self._check_idle("call_async")
        check_name(name)
        self._calls.send(Call(name, args, kwargs))

    @one_caller
    def call_wait(self, timeout: float | None = None) -> tuple[Any, ...]:
        """Wait for :meth:`call_async`'s results, one per env."""
        self._check_wait(timeout, "call_wait", CallState.WAITING_CALL)
        results = self._calls.collect(timeout, "call_wait")
        return tuple(x for w in range(self.num_workers) for x in results[w])

    def _run_at(self, method: str, indices: Sequence[int] | None, command: Callable[..., Command]) -> list:
        """Run ``command(local ids, global ids)`` on the envs ``indices``; results in their order."""
        self._check_idle(method)
        ids = np.arange(self.num_envs) if indices is None else check_env_ids(indices, self.num_envs)
        order = self._calls.send_at(ids, command)
        return in_order(self._calls.collect(None, method), order)

    @one_caller
    def call_at(self, indices: Sequence[int] | None, name: str, *args: Any, **kwargs: Any) -> list:
        """Like :meth:`call`, on the envs ``indices`` only (all when ``None``)."""
        check_name(name)
        return self._run_at("call", indices, lambda local, _: Call(name, args, kwargs, local))

    @one_caller
    def get_attr_at(self, indices: Sequence[int] | None, name: str) -> list:
        """The attribute ``name`` of the envs ``indices``, never called (SB3's ``get_attr``)."""
        check_name(name)
        return self._run_at("get_attr", indices, lambda local, _: GetAttr(name, local))

    @one_caller
    def set_attr_at(self, indices: Sequence[int] | None, name: str, values: Sequence[Any]) -> None:
        """Set ``name`` on the envs ``indices``, env ``indices[k]`` to ``values[k]``."""
        check_name(name)
        ids = np.arange(self.num_envs) if indices is None else check_env_ids(indices, self.num_envs)
        by_env = dict(zip(ids.tolist(), check_values(values, len(ids)), strict=True))
        self._run_at("set_attr", indices, lambda local, envs: SetAttr(name, [by_env[j] for j in envs.tolist()], local))

    @one_caller
    def apply(self, fn: Callable[..., Any], *args: Any, indices: Sequence[int] | None = None) -> list:
        """Run ``fn(env, *args)`` on each env (in its worker) and return the results."""
        if not callable(fn):
            raise TypeError(f"apply(fn, ...): fn must be callable, got {fn!r}")
        return self._run_at("apply", indices, lambda local, _: Apply(fn, args, local))

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

    @one_caller
    def render(self) -> tuple[Any, ...]:
        """Each env's rendered frame (``render_mode`` is set when the envs are made)."""
        self._check_idle("call_async")  # refused in gymnasium's words: it renders through call()
        return tuple(self._run_at("render", None, lambda local, _: Render(local)))

    @one_caller
    def observation_rows(self, env_ids: Sequence[int] | np.ndarray) -> Any:
        """The last observations of the envs ``env_ids``, in that order (a copy, batched as
        gymnasium batches them): what a reset of some envs hands back for just those envs."""
        self._check_idle("observation_rows")
        return self._buffers.observations.read_rows(check_env_ids(env_ids, self.num_envs))

    @property
    def envs(self) -> list[gym.Env]:
        """The sub-env objects (serial backend only: other backends keep them in workers)."""
        return self._transport.envs

    @property
    def np_random_seed(self) -> tuple[int, ...]:  # type: ignore[override]  # one per env
        """Each env's ``np_random_seed``."""
        return self.get_attr("np_random_seed")

    @property  # type: ignore[misc]
    def np_random(self) -> tuple[np.random.Generator, ...]:  # type: ignore[override]  # one per env
        """Each env's ``np_random`` generator."""
        return self.get_attr("np_random")

    # ================================================================ closing
    def close_extras(self, timeout: float | None = None, terminate: bool = False, **kwargs: Any) -> None:
        """Close every env and end every worker, in bounded time (``terminate``: at once)."""
        self._flight.in_flight = {}
        self._flight.lifecycle.fire(Event.CLOSED)
        self._transport.close(0.0 if terminate else timeout)

    def close(self, **kwargs: Any) -> None:
        """Close the envs, release every worker and buffer; again: finish what was cut short."""
        if not getattr(self, "_open", False):
            return
        check_timeout(kwargs.get("timeout"), "close")
        if not self.closed:
            self.closed = True  # first: a call blocked in another thread sees it and stops
            if self.layout is not None:
                runs.closed()
        self.close_extras(**kwargs)
        self._open = False
        owner.release(self)

    def __enter__(self) -> VectorEnv:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        # no module global here: one collected as the interpreter shuts down may find them gone
        if getattr(self, "_open", False):
            try:
                self.close(terminate=True)
            except Exception:
                pass

    # ================================================================ helpers
    def _check_open(self) -> None:
        if self.closed:
            owner.refuse_if_foreign(self, self._owner)
            raise ClosedEnvironmentError(f"Trying to operate on `{type(self).__name__}`, after a call to `close()`.")

    def _check_wait(self, timeout: Any, method: str, pending: CallState) -> None:
        """Refuse a wait (``method``) for a ``pending`` call that was not sent, as gymnasium words it."""
        check_timeout(timeout, method)
        self._check_open()
        if self._flight.state is not pending:
            kind = pending.value  # "reset", "step" or "call"
            raise NoAsyncCallError(f"Calling `{kind}_wait` without any prior call to `{kind}_async`.", kind)

    def _check_idle(self, method: str) -> None:
        self._check_open()
        self._flight.check_idle(method)

    def __repr__(self) -> str:
        spec = f"{self.spec.id}, " if self.spec is not None else ""
        chosen = f", layout={self.layout.name!r} (auto)" if self.layout is not None else ""
        return f"{type(self).__name__}({spec}num_envs={self.num_envs}{chosen})"
