"""The env group: k sub-environments stepped in a loop, writing results straight into buffers.

Every transport runs the same :class:`EnvGroup` (in the caller's process, in a thread, in a worker
process or in a Ray actor); a transport only delivers commands to it and carries its small replies
back. Stepping, autoreset and info collection therefore live here and nowhere else.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from vecenv.errors import EnvError, VecEnvError
from vecenv.infos import NO_REPLY, InfoEntry, StepReply
from vecenv.spaces import StepBuffers
from vecenv.worker.commands import Command, EnvIds
from vecenv.worker.restarts import (
    Recycling,
    RestartBudget,
    restart_report,
    restarted_entry,
    truncate_rows,
)
from vecenv.worker.view import StepView

__all__ = ["EnvDescription", "EnvGroup", "close_envs", "warn_close_failures"]

_NEXT = AutoresetMode.NEXT_STEP
_SAME = AutoresetMode.SAME_STEP


class EnvDescription(NamedTuple):
    """The facts about one sub-env the engine needs to build the batched spaces."""

    observation_space: Any
    action_space: Any
    metadata: dict
    render_mode: str | None


def _get_attr(env: Any, name: str) -> Any:
    getter = getattr(env, "get_wrapper_attr", None)
    return getter(name) if getter is not None else getattr(env, name)


def _built(env: Any) -> Any:
    """``env`` when it is a gymnasium Env, else a TypeError saying what the env_fn returned."""
    if not isinstance(env, gym.Env):
        got = "None" if env is None else f"an object of type {type(env).__qualname__} ({_short(env)})"
        raise TypeError(f"env_fn returned {got}, expected a gymnasium.Env")
    return env


def close_envs(
    envs: Iterable[Any], catch: type[BaseException] | tuple[type[BaseException], ...] = Exception, start: int = 0,
) -> list[str]:
    """Close every env (``start``: the index of the first), even when one of them fails to
    close; what each failure raised, one line naming its env (for :func:`warn_close_failures`)."""
    failures = []
    for i, env in enumerate(envs, start):
        try:
            env.close()
        except catch as exc:  # noqa: PERF203 - every env is closed
            failures.append(f"env {i} ({type(env).__qualname__}) raised in close(): {type(exc).__name__}: {exc}")
    return failures


def warn_close_failures(failures: Any) -> None:
    """In the caller's process: a ``RuntimeWarning`` for each env that failed to close (the
    lines :meth:`EnvGroup.close` returned, wherever the group ran)."""
    for line in failures if isinstance(failures, list) else ():
        warnings.warn(line, RuntimeWarning, stacklevel=3)


def _check_info(info: Any) -> None:
    if not isinstance(info, dict):
        raise TypeError(f"info must be a dict, got {type(info).__qualname__} ({_short(info)})")


def _short(value: Any) -> str:
    try:
        return f"{value!r:.60}"
    except Exception:
        return "unprintable"


def _given_or_row(given: Mapping[int, Any], row: Callable[[int], Any], j: int) -> Any:
    return given[j] if j in given else row(j)


class EnvGroup:
    """Holds envs ``start .. start+k-1`` of a vector env and runs commands on them.

    Args:
        env_fns: one callable per env, each returning a fresh gymnasium ``Env``.
        start: global index of the first env (errors and infos name global indices).
        worker: index of the worker that runs this group (named in errors).
        autoreset_mode: NEXT_STEP, SAME_STEP or DISABLED, as gymnasium defines them.
        contain_exits: treat a ``SystemExit`` or ``KeyboardInterrupt`` raised by env code as that
            env's failure (an :class:`EnvError`, restarted under ``on_error="restart"``) instead
            of letting it end the caller. For worker processes, which ignore SIGINT: there, such
            an exception is the env's own. In the caller's process a Ctrl-C must get through.

    Whatever an env does wrong is its failure, reported as an :class:`EnvError` naming the env
    and the method: an exception, an env_fn that returns something other than an Env, an
    observation whose shape does not fit the observation space (nothing is broadcast), an info
    that is not a dict.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], Any]],
        start: int,
        worker: int,
        autoreset_mode: AutoresetMode,
        contain_exits: bool = False,
    ) -> None:
        self._catch: type[BaseException] | tuple[type[BaseException], ...] = Exception
        self.contain_exits(contain_exits)
        self.start = start
        self.worker = worker
        self.autoreset_mode = autoreset_mode
        self.env_fns = list(env_fns)
        self.on_error = "raise"
        self._budget = RestartBudget()
        self.envs: list[Any] = []
        for j, env_fn in enumerate(self.env_fns):  # a failed env_fn closes every env made
            try:
                self.envs.append(_built(env_fn()))
            except self._catch as exc:
                self.close()
                raise self._error(j, "env_fn()", exc) from exc
        self.buffers: StepBuffers | None = None
        self.ship_objects = False
        #: where a step's infos go first, written in place like observations: ``sink(j, info)``
        #: packs env ``j``'s info into shared memory, or returns False (then it is an entry)
        self.info_sink: Callable[[int, dict], bool] | None = None
        # fresh envs need a reset before their first step (NEXT_STEP does it by itself; this is
        # what a restarted worker relies on, as the engine always resets a new vector env first)
        self._needs_reset = np.ones(len(self.envs), dtype=np.bool_)
        self.recycling = Recycling(len(self.envs))  # max_episodes_per_env (the Configure command)
        self._view: StepView | None = None  # made at the first step after the buffers or an env change
        self._views: dict[int, StepView] = {}  # the view of each observation slot used so far
        self._moves = 0  # the slot cell's count of moves at this group's last command

    # ----------------------------------------------------------------- setup
    def contain_exits(self, contain: bool) -> None:
        """Whether an exit raised by env code is that env's failure (see ``contain_exits``)."""
        # what counts as an env's failure (an ``except`` clause evaluates this only on an error)
        self._catch = (Exception, SystemExit, KeyboardInterrupt) if contain else Exception

    def describe(self) -> list[EnvDescription]:
        """Spaces, metadata and render mode of each env, for the engine's checks."""
        return [
            EnvDescription(e.observation_space, e.action_space, dict(e.metadata), getattr(e, "render_mode", None))
            for e in self.envs
        ]

    def attach(self, buffers: StepBuffers, ship_objects: bool = False) -> None:
        """Give the group its rows of the batch buffers.

        ``ship_objects``: return the contents of object (custom-space) leaves with each reply,
        for transports whose buffers are not the caller's own memory.
        """
        self.buffers = buffers
        self._forget_views()
        self._moves = int(buffers.slot_cell[2])
        self.ship_objects = ship_objects and buffers.observations.has_objects

    @property
    def _attached(self) -> StepBuffers:
        """The group's buffers (off the step path; a clear error before :meth:`attach`)."""
        buffers = self.buffers
        if buffers is None:
            raise VecEnvError(f"worker {self.worker}: the env group has no buffers (attach() has not run)")
        return buffers

    def configure(self, on_error: str, max_restarts: int, restart_window: float) -> None:
        """Set the failure policy: ``"raise"``, or ``"restart"`` a failed env from its env_fn
        (at most ``max_restarts`` times per env within ``restart_window`` seconds)."""
        self.on_error = on_error
        self._budget = RestartBudget(max_restarts, restart_window)

    def _begin_episode(self, j: int, seed: int | None) -> tuple[int | None, dict | None]:
        """Before env ``j``'s reset: rebuild it when it has run its ``max_episodes_per_env``;
        the seed the reset takes (``seed``, else a rebuilt env's recycled seed) and the report
        of a rebuild (None when there was none)."""
        recycling, report = self.recycling, None
        if recycling.due(j):
            self._rebuild(j, "env_fn() while recycling")
            report = recycling.rebuilt(j)
        return recycling.begin(j, seed), report

    def _autoreset(self, j: int) -> tuple[Any, dict]:
        """NEXT_STEP's reset of env ``j`` under recycling (see :meth:`_begin_episode`)."""
        seed, report = self._begin_episode(j, None)
        obs, info = self.envs[j].reset(seed=seed)
        return obs, info if report is None or not isinstance(info, dict) else {**info, **report}

    def _recover(self, j: int, method: str, exc: BaseException) -> str:
        """Rebuild env ``j`` after it raised, or raise its error when the policy says so.

        Returns the reason ("Type: message") to report in the infos.
        """
        err = self._error(j, method, exc)
        if self.on_error != "restart":
            raise err from exc
        if not self._budget.spend(j, f"env {self.start + j}", err):
            raise err from exc
        self._rebuild(j, "env_fn() while restarting")
        self.recycling.episodes[j] = 0
        return f"{err.exc_type}: {err.exc_message}"

    def _rebuild(self, j: int, method: str) -> None:
        """Close env ``j`` (what its close raises is dropped: it is being replaced) and build it
        again from its env_fn; a failed build is env ``j``'s error in ``method``."""
        try:
            self.envs[j].close()
        except self._catch:
            pass
        try:
            self.envs[j] = _built(self.env_fns[j]())
        except self._catch as exc:
            raise self._error(j, method, exc) from exc
        self._forget_views()

    def _error(self, j: int, method: str, exc: BaseException) -> EnvError:
        return EnvError.from_exception(exc, self.start + j, self.worker, method)

    def _step_view(self) -> StepView:
        view = self._view
        if view is None or view.cell[2] != self._moves:
            view = self._follow_slot()
        return view

    def _follow_slot(self) -> StepView:
        """The view of the observation slot the engine chose; when the choice moved since this
        group's last command, its rows there start as a copy of the slot before
        (:mod:`vecenv.spaces.slots`), so a row a step leaves as it was keeps its last value."""
        b = self._attached
        cell = b.slot_cell
        k = int(cell[0])
        if cell[2] != self._moves:
            self._moves = int(cell[2])
            if cell[1] != k:
                b.slots[k].copy_from(b.slots[int(cell[1])])
        view = self._views.get(k)
        if view is None:
            view = self._views[k] = StepView.of(self, k)
        self._view = view
        return view

    def _forget_views(self) -> None:
        """The buffers or an env changed: views are made afresh."""
        self._view = None
        self._views = {}

    def _ids(self, ids: EnvIds | None) -> EnvIds:
        return range(len(self.envs)) if ids is None else ids

    def _objects(self, ids: EnvIds | None = None) -> list | None:
        """Object-leaf rows of envs ``ids`` (all when ``None``) when the group ships them."""
        if not self.ship_objects:
            return None
        # only attach() sets ship_objects, so buffers exist (on the step path: no _attached call)
        objects = self.buffers.observations.get_objects()  # type: ignore[union-attr]
        if objects is None or ids is None:
            return objects
        return [leaf[np.asarray(ids, dtype=np.intp)] for leaf in objects]

    # ----------------------------------------------------------------- stepping
    def reset(
        self,
        seeds: Sequence[int | None] | None = None,
        options: dict | None = None,
        ids: EnvIds | None = None,
    ) -> StepReply:
        """Reset envs ``ids`` (local indices; all when ``None``), env ``j`` with ``seeds[j]``."""
        view = self._step_view()
        terms, truncs, needs_reset = view.terminations, view.truncations, view.needs_reset
        entries: list[InfoEntry] = []
        for j in self._ids(ids):
            seed, recycled = self._begin_episode(j, None if seeds is None else seeds[j])
            try:
                info = self._reset_one(j, seed, options)
            except self._catch as exc:
                reason = self._recover(j, "reset", exc)
                try:
                    info = self._reset_one(j, seed, options)
                except self._catch as exc2:
                    raise self._error(j, "reset after a restart", exc2) from exc2
                info = {**info, **restart_report(reason)}
            if recycled is not None:
                info = {**info, **recycled}
            terms[j] = False
            truncs[j] = False
            needs_reset[j] = False
            if info:
                entries.append(InfoEntry(self.start + j, info))
        return StepReply(entries, self._objects(ids))

    def _reset_one(self, j: int, seed: int | None, options: dict | None) -> dict:
        """Reset env ``j`` and write its observation; its info."""
        view = self._step_view()
        obs, info = view.envs[j].reset(seed=seed, options=options)
        _check_info(info)
        view.observations.write(j, obs)
        return info

    def step(self, ids: EnvIds | None = None, given: Mapping[int, Any] | None = None) -> StepReply:
        """Step envs ``ids`` (local indices; all when ``None``) with the actions in the buffer,
        or, for the envs in ``given``, with ``given[j]`` (an action as the caller passed it)."""
        view = self._view  # as _step_view() gives it, without the call (this runs on every step)
        if view is None or view.cell[2] != self._moves:
            view = self._follow_slot()
        (obs_buf, action_of, rewards, terms, truncs, needs_reset, envs, rows, shape, next_step,
         same_step, _) = view
        if given:
            action_of = partial(_given_or_row, given, action_of)
        sink, start = self.info_sink, self.start
        entries: list[InfoEntry] = []
        for j in range(len(envs)) if ids is None else ids:
            env = envs[j]
            try:
                if next_step and needs_reset[j]:
                    obs, info = env.reset() if self.recycling.plain else self._autoreset(j)
                    rewards[j] = 0.0
                    terms[j] = False
                    truncs[j] = False
                    needs_reset[j] = False
                else:
                    obs, reward, terminated, truncated, info = env.step(action_of(j))
                    rewards[j] = reward
                    terms[j] = terminated
                    truncs[j] = truncated
                    if terminated or truncated:
                        if same_step:
                            entries.append(self._same_step_reset(j, obs, info))
                            continue
                        needs_reset[j] = True
                if not isinstance(info, dict):
                    _check_info(info)
                if rows is not None and type(obs) is np.ndarray and obs.shape == shape:
                    rows[j] = obs  # what write() does for this common case, without the call
                else:
                    obs_buf.write(j, obs)
            except self._catch as exc:
                entries.append(self._restart_in_step(j, exc))
                continue
            if info and (sink is None or not sink(j, info)):
                entries.append(InfoEntry(start + j, info))
        if not entries and not self.ship_objects:
            return NO_REPLY
        return StepReply(entries, self._objects(ids))

    def _same_step_reset(self, j: int, final_obs: Any, final_info: Any) -> InfoEntry:
        """SAME_STEP: env ``j`` ended its episode in this step; reset it at once."""
        _check_info(final_info)
        self._attached.observations.check(final_obs)
        seed, recycled = (None, None) if self.recycling.plain else self._begin_episode(j, None)
        info = self._reset_one(j, seed, None)
        if recycled is not None:
            info = {**info, **recycled}
        return InfoEntry(self.start + j, info, True, final_obs, final_info)

    def _restart_in_step(self, j: int, exc: BaseException) -> InfoEntry:
        """Env ``j`` failed in step: rebuild it and end its episode as a truncation.

        The row keeps the last good observation. SAME_STEP resets the new env at once (that
        observation becomes ``final_obs``); NEXT_STEP resets it on the next step; DISABLED
        leaves the reset to the caller, as for any episode end.
        """
        report = restart_report(self._recover(j, "step", exc))
        b = self._attached
        truncate_rows(b, j)
        if self.autoreset_mode is _SAME:
            final_obs = copy.deepcopy(b.observations.item(j))
            try:
                info = self._reset_one(j, None, None)
            except self._catch as exc2:
                raise self._error(j, "reset after a restart", exc2) from exc2
            return restarted_entry(self.start + j, report, info, final_obs)
        self._needs_reset[j] = True
        return restarted_entry(self.start + j, report)

    # ----------------------------------------------------------------- other calls
    def _each(self, ids: EnvIds | None, method: str, fn: Callable[[Any], Any]) -> list:
        """``fn(env)`` for each selected env; an env that raises fails as ``method``."""
        out = []
        for j in self._ids(ids):
            try:
                out.append(fn(self.envs[j]))
            except self._catch as exc:
                raise self._error(j, method, exc) from exc
        return out

    def call(self, name: str, args: tuple, kwargs: dict, ids: EnvIds | None = None) -> list:
        """gymnasium's ``call``: call ``name`` if it is callable, else return its value."""

        def call_one(env: Any) -> Any:
            attr = _get_attr(env, name)
            return attr(*args, **kwargs) if callable(attr) else attr

        return self._each(ids, f"call({name!r})", call_one)

    def get_attr(self, name: str, ids: EnvIds | None = None) -> list:
        """The attribute ``name`` of each env, looked up through its wrappers (never called)."""
        return self._each(ids, f"get_attr({name!r})", lambda env: _get_attr(env, name))

    def set_attr(self, name: str, values: Sequence[Any], ids: EnvIds | None = None) -> None:
        """Set ``name`` on each env (through its wrappers), env ``ids[k]`` to ``values[k]``."""
        for j, value in zip(self._ids(ids), values, strict=True):
            try:
                env = self.envs[j]
                setter = getattr(env, "set_wrapper_attr", None)
                if setter is not None:
                    setter(name, value)
                else:
                    setattr(env, name, value)
            except self._catch as exc:
                raise self._error(j, f"set_attr({name!r})", exc) from exc

    def apply(self, fn: Callable[..., Any], args: tuple, ids: EnvIds | None = None) -> list:
        """Run ``fn(env, *args)`` on each selected env and return the results."""
        return self._each(ids, f"apply({getattr(fn, '__name__', fn)!r})", lambda env: fn(env, *args))

    def render(self, ids: EnvIds | None = None) -> list:
        """Each env's ``render()`` result."""
        return self._each(ids, "render", lambda env: env.render())

    def close(self) -> list[str]:
        """Close every env, even when one of them fails to close; a line for each failure (the
        caller warns with :func:`warn_close_failures`)."""
        envs, self.envs = self.envs, []
        self._forget_views()
        return close_envs(envs, self._catch, self.start)

    # ----------------------------------------------------------------- dispatch
    def run(self, command: Command) -> Any:
        """Run one command (see :mod:`vecenv.worker.commands`) and return its result."""
        if not isinstance(command, Command):
            raise TypeError(f"worker {self.worker}: not an env-group command: {command!r:.100}")
        return command.run(self)
