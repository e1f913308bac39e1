"""``EnvPool``: EnvPool's send / recv / step / reset API over one of vecenv's vector envs. The
return convention (5-tuple or old gym's 4-tuple) comes from :mod:`vecenv.envpool.styles`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from vecenv.engine import VectorEnv
from vecenv.engine.checks import check_env_ids, check_options, check_reset_mask
from vecenv.engine.checks import check_timeout as engine_check_timeout

if TYPE_CHECKING:
    from vecenv.envpool.registration import EnvSpec

EnvIds = int | Sequence[int] | np.ndarray | None


class EnvPool(gym.Env):
    """EnvPool's Python API on any gymnasium env; make one with :func:`vecenv.envpool.make`.

    ``vector_env`` (any backend, autoreset ``next_step``) does the work; this layer adds what
    EnvPool's callers rely on (docs/envpool.md has the list): seeds fixed at make, EnvPool's
    auto-reset, float actions cast to integer spaces, float32 rewards, EnvPool's infos.

    Example (EnvPool's async loop; only the import differs from EnvPool):

    >>> import numpy as np
    >>> from vecenv import envpool
    >>> envs = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=4, batch_size=2,
    ...                     seed=0, backend="serial")
    >>> envs.async_reset()
    >>> for _ in range(20):
    ...     obs, rew, term, trunc, info = envs.recv()
    ...     envs.send(np.ones(len(info["env_id"])), info["env_id"])
    >>> obs.shape, rew.dtype, info["env_id"].dtype, len(envs), envs.is_async
    ((2, 4), dtype('float32'), dtype('int32'), 4, True)
    >>> envs.close()
    """

    #: ``"gymnasium"`` or ``"gym"``: which return convention the pool follows
    env_type: ClassVar[str] = ""

    def __init__(self, vector_env: VectorEnv, spec: EnvSpec, seeds: Sequence[int | None],
                 render_env_id: int = 0, *, env_elapsed: bool = False) -> None:
        n = vector_env.num_envs
        self.vector_env = vector_env
        self.spec = spec  # type: ignore[assignment]  # EnvPool's spec, not gymnasium's EnvSpec
        # plain attributes: CleanRL's shim assigns num_envs and single_*_space
        self.num_envs = n
        self.observation_space = self.single_observation_space = spec.observation_space
        self.action_space = self.single_action_space = spec.action_space
        self._action_space = vector_env.single_action_space  # what actions are cast to
        self.metadata = dict(vector_env.metadata)
        self.render_mode = vector_env.render_mode
        #: what ``backend="auto"`` chose and why (``None`` for an explicit backend)
        self.layout = vector_env.layout
        self._config = spec.config._asdict()
        self._all_env_ids = np.arange(n, dtype=np.int32)
        self._all = np.arange(n, dtype=np.int64)
        self._async = vector_env.batch_size < n
        self._seeds = list(seeds)
        self._seeded = np.zeros(n, dtype=np.bool_)  # given its make-time seed already
        self._elapsed = np.zeros(n, dtype=np.int32)
        self._fresh = np.zeros(n, dtype=np.bool_)  # reset sent, its result not yet received
        self._ended = np.zeros(n, dtype=np.bool_)  # its last result ended an episode
        self._last_ids = self._all  # the envs of the last batch received
        self._reset_pending = False  # a reset was sent and its first batch not yet received
        self._reset_rows: np.ndarray | None = None  # the envs a partial (sync) reset covers
        self._render_env_id = render_env_id
        self._env_elapsed = env_elapsed  # the envs report elapsed_step (EnvPool's Atari envs)
        self._info_keys: dict[str, Any] = {}  # each info key returned: (dtype, shape) or nested

    # ================================================================ EnvPool's properties
    def __len__(self) -> int:
        """The number of envs in the pool (whatever a shim later sets ``num_envs`` to)."""
        return len(self._all)

    @property
    def all_env_ids(self) -> np.ndarray:
        """Every env id, ``np.arange(num_envs, dtype=np.int32)``."""
        return self._all_env_ids

    @property
    def is_async(self) -> bool:
        """Whether ``batch_size < num_envs`` (``recv`` returns the first ``batch_size`` ready)."""
        return self._async

    @property
    def config(self) -> dict[str, Any]:
        """The pool's configuration (a fresh dict: EnvPool's keys, plus ``task_id`` and ``backend``)."""
        return dict(self._config)

    # ================================================================ stepping
    def send(self, action: Any, env_id: EnvIds = None) -> None:
        """Hand actions to the envs ``env_id`` without waiting.

        ``env_id`` defaults to every env in sync mode and to the envs of the last batch received
        in async mode (the only ones that can take an action). ``action`` may also be EnvPool's
        dict form, ``{"action": a, "env_id": ids}``. Float actions for integer spaces are cast.
        """
        if isinstance(action, dict):
            action, env_id = self._split_dict(action, env_id)
        self.vector_env.send(_cast(action, self._action_space), self._targets(env_id))

    def recv(self, reset: bool = False, return_info: bool = True, *,
             timeout: float | None = None) -> Any:
        """Wait for the next batch: every env (sync) or the first ``batch_size`` ready (async).

        Returns ``(obs, rew, terminated, truncated, info)`` (``env_type="gymnasium"``) or
        ``(obs, rew, done, info)`` (``"gym"``); with ``reset=True`` the reset form, ``(obs, info)``
        (or ``obs`` alone for ``"gym"`` with ``return_info=False``). ``info["env_id"]`` names the
        envs of the batch. ``timeout`` (seconds, keyword only) raises
        ``multiprocessing.TimeoutError`` and leaves the call pending.
        """
        reset, return_info = _flag("reset", reset), _flag("return_info", return_info)
        timeout = _timeout(timeout)
        if self._reset_pending:
            obs, infos = self.vector_env.reset_wait(timeout)
            self._reset_pending = False
            rows, self._reset_rows = self._reset_rows, None
            if rows is not None:
                obs = self.vector_env.observation_rows(rows)
                infos = _info_rows(infos, rows)
            ids = self._batch_ids(infos, rows)
            rewards = np.zeros(len(ids), dtype=np.float32)
            terminated, truncated = np.zeros(len(ids), dtype=np.bool_), np.zeros(len(ids), dtype=np.bool_)
        else:
            obs, rewards, terminated, truncated, infos = self.vector_env.recv(timeout)
            rewards = rewards.astype(np.float32)
            ids = self._batch_ids(infos, None)
        infos = self._envpool_infos(infos, ids, terminated, truncated)
        return self._to(obs, rewards, terminated, truncated, infos, reset, return_info)

    def step(self, action: Any, env_id: EnvIds = None) -> Any:
        """``send(action, env_id)`` then ``recv()``: in async mode, the next batch ready."""
        self.send(action, env_id)
        return self.recv()

    def async_reset(self) -> None:
        """Reset every env without waiting; ``recv()`` returns them (reward 0, nothing ended)."""
        self._send_reset(self._all, None)

    def reset(self, env_id: EnvIds = None, *, seed: Any = None,
              options: dict[str, Any] | None = None) -> Any:
        """Reset the envs ``env_id`` (all by default) and return their reset results.

        Returns ``(obs, info)`` (or ``obs`` alone for ``env_type="gym"`` unless the pool was made
        with ``gym_reset_return_info=True``), rows in ``env_id`` order. Seeds are fixed at make,
        so ``seed`` is ignored with a warning, as in EnvPool. ``options["reset_mask"]`` selects
        envs like ``env_id``; other options reach the envs' ``reset``. In async mode only a
        reset of every env is defined (it returns the first ``batch_size`` ready).
        """
        if seed is not None:
            warnings.warn("EnvPool seeds are fixed when the pool is made: reset(seed=...) is "
                          "ignored; pass seed to envpool.make instead", stacklevel=2)
        check_options(options)
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        if mask is not None:
            if env_id is not None:
                raise ValueError("reset: pass either env_id or options['reset_mask'], not both")
            mask = np.asarray(mask)
            try:
                check_reset_mask(mask, len(self._all))
            except (TypeError, ValueError) as exc:
                raise ValueError(f"reset: {exc}") from None
            env_id = np.flatnonzero(mask)
        ids = self._all if env_id is None else _env_ids(env_id, len(self._all))
        self._send_reset(ids, options or None)
        return self.recv(reset=True, return_info=bool(self._config["gym_reset_return_info"]))

    def _to(self, obs: Any, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
            infos: dict[str, Any], reset: bool, return_info: bool) -> Any:
        """Shape a batch in the pool's return convention (see :mod:`vecenv.envpool.styles`)."""
        raise NotImplementedError

    # ================================================================ the rest of EnvPool's API
    def render(self, env_ids: EnvIds = None, camera_id: int | None = None) -> np.ndarray | None:
        """Frames of the envs ``env_ids`` (default: ``render_env_id``) as one ``(B, H, W, 3)`` array.

        Needs ``render_mode="rgb_array"`` (or ``"human"``, one env, returns ``None``) at make,
        and no step in flight. ``camera_id`` is refused: a gymnasium env fixes its camera when made.
        """
        if self.render_mode not in ("rgb_array", "human"):
            raise RuntimeError("render(): make the pool with render_mode='rgb_array' or 'human'")
        if camera_id is not None:
            raise ValueError("render(camera_id=...): not supported; gymnasium envs fix their camera "
                             "when made (pass the env's own keyword to envpool.make)")
        ids = [self._render_env_id] if env_ids is None else _env_ids(env_ids, len(self._all)).tolist()
        if self.render_mode == "human":
            if len(ids) != 1:
                raise ValueError("render(): render_mode='human' renders one env at a time")
            self.vector_env.call_at(ids, "render")
            return None
        return np.stack(self.vector_env.call_at(ids, "render"))

    def seed(self, seed: Any = None) -> None:
        """Does nothing but warn, as in EnvPool: seeds are set by ``envpool.make(..., seed=)``."""
        warnings.warn("The `seed` method is abandoned, as in EnvPool: pass seed to "
                      "envpool.make(..., seed=seed) instead", stacklevel=2)

    def xla(self) -> Any:
        """Refused: EnvPool's XLA ops run C++ envs inside a jitted function; these are Python envs."""
        raise NotImplementedError(
            "xla(): vecenv.envpool has no XLA interface (its envs are Python objects stepped "
            "outside jax); use send()/recv() from Python"
        )

    def close(self, **kwargs: Any) -> None:
        """Close every env and worker (``timeout=``, ``terminate=`` as vecenv's); again: nothing."""
        if "timeout" in kwargs:
            kwargs["timeout"] = _timeout(kwargs["timeout"], "close")
        self.vector_env.close(**kwargs)

    def __repr__(self) -> str:
        config = ", ".join(f"{k}={v!r}" for k, v in self._config.items())
        return f"{type(self).__name__}({config})"

    __str__ = __repr__

    # ================================================================ internals
    def _targets(self, env_id: EnvIds) -> np.ndarray | None:
        """The env ids for the engine's ``send`` (``None``: every env, in order)."""
        if not self._async:
            if env_id is None:
                return None
            ids = _env_ids(env_id, len(self._all))
            if np.array_equal(ids, self._all):  # every env in order: no reordering needed
                return None
            if ids.size != len(self._all):
                raise ValueError(
                    f"send: the pool is in sync mode (batch_size == num_envs == {len(self._all)}), so "
                    f"every env steps at each send, but env_id names {ids.size}; make the pool with "
                    "batch_size < num_envs to step some envs at a time"
                )
            return ids  # a permutation: action k goes to env ids[k]
        if env_id is None:
            return self._last_ids
        ids = np.asarray(env_id)
        return ids.reshape(1) if ids.ndim == 0 else ids  # the engine checks the rest

    def _split_dict(self, action: dict[str, Any], env_id: EnvIds) -> tuple[Any, EnvIds]:
        """EnvPool's dict action: ``{"action": a, "env_id": ids}``, or the keys of a Dict space."""
        space = self._action_space
        keys = space.spaces if isinstance(space, spaces.Dict) else {}
        action = dict(action)
        if "env_id" in action and "env_id" not in keys:
            if env_id is not None:
                raise ValueError("send: env_id given twice, in the action dict and as an argument")
            env_id = action.pop("env_id")
        for key in ("players.env_id", "players"):  # single-player: the players are the envs
            if key not in keys:
                action.pop(key, None)
        if isinstance(space, spaces.Dict):
            return action, env_id
        if set(action) != {"action"}:
            raise ValueError(f"send: a dict action for {space} holds 'action' (and optionally "
                             f"'env_id'), got keys {sorted(action)}")
        return action["action"], env_id

    def _send_reset(self, ids: np.ndarray, options: dict[str, Any] | None) -> None:
        """Start resetting ``ids``; an env's first reset gets its make-time seed."""
        n = len(self._all)
        subset = ids.size != n
        if subset and self._async:
            raise ValueError(
                "reset(env_id): resetting some envs is not defined in EnvPool's async mode "
                "(batch_size < num_envs); reset every env (reset() or async_reset()), or make the "
                "pool with batch_size == num_envs"
            )
        first = ~self._seeded[ids]
        seeds = None
        if first.any() and any(self._seeds[i] is not None for i in ids[first].tolist()):
            seeds = [None if self._seeded[i] else s for i, s in enumerate(self._seeds)]
        if subset:
            mask = np.zeros(n, dtype=np.bool_)
            mask[ids] = True
            options = {**(options or {}), "reset_mask": mask}
        self.vector_env.reset_async(seed=seeds, options=options)
        self._seeded[ids] = True
        self._fresh[ids] = True
        self._ended[ids] = False
        self._reset_pending = True
        self._reset_rows = ids if subset else None

    def _batch_ids(self, infos: dict[str, Any], rows: np.ndarray | None) -> np.ndarray:
        """The envs of a batch: the engine's ``env_id`` in async mode, else ``rows`` or all."""
        infos.pop("_env_id", None)
        if self._async:
            return infos.pop("env_id")
        return self._all if rows is None else rows

    def _envpool_infos(self, infos: dict[str, Any], ids: np.ndarray, terminated: np.ndarray,
                       truncated: np.ndarray) -> dict[str, Any]:
        """EnvPool's infos: the env's keys without gymnasium's ``_key`` masks, every key seen so
        far, and EnvPool's own keys (over any the env set), counting each env's steps since its
        reset (or taking the env's own count, ``env_elapsed``)."""
        rows = slice(None) if ids is self._all else ids  # a full batch: whole arrays, no gathers
        elapsed = self._elapsed[rows] + 1
        elapsed[self._fresh[rows] | self._ended[rows]] = 0  # a reset, or the step after an end
        self._elapsed[rows] = elapsed
        self._fresh[rows] = False
        self._ended[rows] = terminated | truncated
        env_id = ids.astype(np.int32)
        self._last_ids = ids
        infos = _without_masks(infos)
        own = infos.pop("elapsed_step", None)
        if self._env_elapsed and isinstance(own, np.ndarray) and own.shape == elapsed.shape:
            elapsed = own.astype(np.int32)
        for key in ("env_id", "players", "elapsed_step"):  # the pool sets these itself
            infos.pop(key, None)
        infos = _every_key(infos, self._info_keys, len(ids))
        infos["env_id"] = env_id
        infos["players"] = {"env_id": env_id.copy()}
        infos["elapsed_step"] = elapsed
        return infos


def _info_rows(infos: dict[str, Any], rows: np.ndarray) -> dict[str, Any]:
    """The ``rows`` of gymnasium-style batched infos (arrays and nested dicts of arrays): a
    reset of some envs returns only theirs, as EnvPool's does."""
    return {key: _info_rows(value, rows) if isinstance(value, dict)
            else value[rows] if isinstance(value, np.ndarray) else value
            for key, value in infos.items()}


def _without_masks(infos: dict[str, Any]) -> dict[str, Any]:
    """``infos`` without gymnasium's ``_key`` masks (at any depth): EnvPool returns none."""
    return {key: _without_masks(value) if isinstance(value, dict) else value
            for key, value in infos.items() if not (key[:1] == "_" and key[1:] in infos)}


def _every_key(infos: dict[str, Any], seen: dict[str, Any], n: int) -> dict[str, Any]:
    """Remember each array key of ``infos`` (dtype, per-env shape) in ``seen``, and add every key
    seen before but missing here as ``n`` rows of zeros (``None`` for objects), at any depth:
    EnvPool's infos hold the same keys at every reset and step."""
    for key, value in infos.items():
        if isinstance(value, dict):
            nested = seen.get(key)
            if not isinstance(nested, dict):
                nested = seen[key] = {}
            _every_key(value, nested, n)
        elif isinstance(value, np.ndarray):
            seen[key] = (value.dtype, value.shape[1:])
    for key, kind in seen.items():
        if key in infos:
            continue
        if isinstance(kind, dict):
            infos[key] = _every_key({}, kind, n)
        elif kind[0].kind == "O":
            infos[key] = np.full((n, *kind[1]), None, dtype=object)
        else:
            infos[key] = np.zeros((n, *kind[1]), dtype=kind[0])
    return infos


# ==================================================================== argument checks
def _flag(name: str, value: Any) -> bool:
    """A bool: ``recv(0.5)`` must not pass for ``recv(reset=0.5)``."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"recv({name}=...): expected a bool, got {value!r} ({type(value).__name__}); "
                    "a timeout goes by keyword: recv(timeout=seconds)")


def _timeout(timeout: Any, method: str = "recv") -> float | None:
    """``None`` or a number of seconds >= 0; a bool is refused (``recv(False)`` is no timeout)."""
    engine_check_timeout(timeout, method)
    if timeout is None:
        return None
    if timeout != timeout or timeout < 0:
        raise ValueError(f"timeout: expected a number of seconds >= 0, got {timeout!r}")
    return float(timeout)


def _env_ids(env_id: Any, n: int) -> np.ndarray:
    """``env_id`` (an int, or a 1-D sequence of distinct ints below ``n``) as an int64 array."""
    ids = np.asarray(env_id)
    return check_env_ids(ids.reshape(1) if ids.ndim == 0 else ids, n, name="env_id")


def _cast(actions: Any, space: spaces.Space) -> Any:
    """Float or bool actions for an integer space, cast to its dtype as EnvPool does: truncated
    toward zero (numpy's ``astype``); NaN, infinity and values the dtype cannot hold are refused."""
    if not isinstance(space, _CAST) or isinstance(actions, dict):
        return actions
    dtype = np.dtype(space.dtype)
    if dtype.kind not in "iu":
        return actions
    array = actions if isinstance(actions, np.ndarray) else np.asarray(actions)
    if array.dtype.kind == "b":
        return array.astype(dtype)
    if array.dtype.kind != "f":
        return actions
    if array.size:
        if not np.isfinite(array).all():
            raise ValueError(f"actions: {space} needs finite values, got {array!r:.80}")
        limits = np.iinfo(dtype)
        low, high = array.min(), array.max()
        if low <= limits.min - 1 or high >= limits.max + 1:
            raise ValueError(f"actions: values {low}..{high} do not fit {space}'s dtype {dtype}")
    return array.astype(dtype)


#: spaces whose actions EnvPool casts to the space's dtype (its single-array action form)
_CAST = (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary, spaces.Box)
