"""Calls on the sub-envs: gymnasium's ``call``/``get_attr``/``set_attr``/``render``, the
per-env forms (``call_at``, ``get_attr_at``, ``set_attr_at``, ``apply``) the SB3 layer uses, and
``observation_rows``, some envs' last observations, which the EnvPool layer returns.

:class:`Calls` is a mixin of :class:`~vecenv.engine.VectorEnv`; each call is one command per
worker whose envs it names, sent through the same in-flight bookkeeping as steps.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from vecenv.engine.checks import check_env_ids, check_name, check_timeout, check_values
from vecenv.engine.flight import Overdue, one_caller
from vecenv.engine.state import CallState
from vecenv.errors import NoAsyncCallError, StepTimeoutError
from vecenv.worker.commands import Apply, Call, Command, GetAttr, Render, SetAttr

__all__ = ["Calls"]

_NO_IDS = np.empty(0, dtype=np.int64)


class Calls:
    """Attribute and method calls on the sub-envs (a mixin of VectorEnv)."""

    @one_caller
    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` of every env (or get its value if not callable), as gymnasium does."""
        with self._one_call():
            self.call_async(name, *args, **kwargs)
            return self.call_wait()

    @one_caller
    def call_async(self, name: str, *args: Any, **kwargs: Any) -> None:
        """Start :meth:`call` without waiting."""
        self._check_idle("call_async")
        check_name(name)
        with self._dispatching(CallState.WAITING_CALL):
            for w in range(self.num_workers):
                self._submit(w, Call(name, args, kwargs), _NO_IDS)

    @one_caller
    def call_wait(self, timeout: float | None = None) -> tuple[Any, ...]:
        """Wait for :meth:`call_async`'s results, one per env."""
        check_timeout(timeout, "call_wait")
        self._check_open()
        if self._state is not CallState.WAITING_CALL:
            raise NoAsyncCallError("Calling `call_wait` without any prior call to `call_async`.", "call")
        with self._collecting():
            results = self._wait_calls(timeout, "call_wait")
        return tuple(x for w in range(self.num_workers) for x in results[w])

    def _wait_calls(self, timeout: float | None, method: str) -> dict[int, Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        results = self._call_results  # kept across a timed-out wait: the call stays pending
        while self._in_flight:
            try:
                ready = self._wait_ready(deadline, timeout, method)
            except Overdue as late:
                for w in late.workers:
                    self._in_flight.pop(w)
                    self._transport.terminate(w)
                    self._call_error = self._call_error or StepTimeoutError(
                        self._partition.envs_of(w), w, self.policy.step_timeout, method.removesuffix("_wait")
                    )
                continue
            for w in ready:
                self._in_flight.pop(w)
                try:
                    results[w] = self._transport.fetch(w)
                except BaseException as exc:
                    self._call_error = self._call_error or exc
        self._state = CallState.DEFAULT
        self._call_results = {}
        error, self._call_error = self._call_error, None
        if error is not None:
            raise error
        return results

    def _run_at(self, method: str, indices: Sequence[int] | None, command: Callable[..., Command]) -> list:
        """Run ``command(local ids, global ids)`` on the envs ``indices``; results in their order."""
        self._check_idle(method)
        ids = np.arange(self.num_envs) if indices is None else check_env_ids(indices, self.num_envs)
        order = np.argsort(ids, kind="stable")
        with self._dispatching(CallState.WAITING_CALL):
            for w, local, gids in self._partition.by_worker(ids[order]):
                self._submit(w, command(local, gids), _NO_IDS)
        with self._collecting():
            results = self._wait_calls(None, method)
        flat = [x for w in sorted(results) for x in (results[w] or [])]
        if not flat:
            return []
        out: list = [None] * len(ids)
        for pos, value in zip(order, flat, strict=True):
            out[pos] = value
        return out

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
        self._run_at("set_attr", indices, lambda local, gids: SetAttr(name, [by_env[j] for j in gids.tolist()], local))

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
    def np_random_seed(self) -> tuple[int, ...]:
        """Each env's ``np_random_seed``."""
        return self.get_attr("np_random_seed")

    @property
    def np_random(self) -> tuple[np.random.Generator, ...]:
        """Each env's ``np_random`` generator."""
        return self.get_attr("np_random")
