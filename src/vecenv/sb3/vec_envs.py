"""SB3's concrete vector envs over vecenv's engine: :class:`DummyVecEnv`, :class:`SubprocVecEnv`,
and :func:`from_vector_env`, which adapts any gymnasium-API vector env in SAME_STEP autoreset mode
(SB3's convention) to SB3's API."""

from __future__ import annotations

import functools
import multiprocessing as mp
import warnings
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from vecenv.backends import ProcessVectorEnv, SerialVectorEnv
from vecenv.engine import VectorEnv
from vecenv.engine.modes import is_same_step
from vecenv.errors import EnvError
from vecenv.infos import per_env_infos
from vecenv.sb3 import _backend
from vecenv.sb3.base import IndexValueError, VecEnv, VecEnvIndices, VecEnvObs, VecEnvStepReturn

F = TypeVar("F", bound=Callable[..., Any])


def env_errors(method: F) -> F:
    """Decorator: a sub-env's exception leaves ``method`` as the env's own exception (as with
    SB3's ``DummyVecEnv``), with a note naming the env, its worker and, when it crossed a
    process, the original traceback."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except EnvError as err:
            failed = err
        original = failed.original
        if not isinstance(original, Exception):
            if str(failed.exc_type).rsplit(".", 1)[-1] == "AttributeError":
                raise AttributeError(str(failed)) from failed  # SB3: as an AttributeError
            raise failed
        where = f"env {failed.env_index} (worker {failed.worker}) in {failed.method}"
        note = f"(vecenv) raised by {where}"
        if original.__traceback__ is None and failed.remote_traceback:
            note += "\n--- original traceback ---\n" + failed.remote_traceback.rstrip()
        notes = getattr(original, "__notes__", [])
        if note not in notes:  # Python 3.10 has no add_note: the note is kept, not printed
            original.__notes__ = [*notes, note]  # type: ignore[attr-defined]
        raise original  # outside an ``except`` block: the env's own cause and context are kept

    return wrapper  # type: ignore[return-value]


class GymnasiumEnvFn:
    """An env_fn that refuses, in SB3's words, to build anything but a gymnasium Env
    (module-level, holding only ``fn``, so that it pickles for spawn/forkserver workers)."""

    def __init__(self, fn: Callable[[], gym.Env]) -> None:
        self.fn = fn

    def __call__(self) -> gym.Env:
        env = self.fn()
        if not isinstance(env, gym.Env):
            raise ValueError(
                f"The environment is of type {type(env)}, not a Gymnasium environment. In this "
                "case, we expect OpenAI Gym to be installed and the environment to be an OpenAI "
                "Gym environment. (vecenv runs gymnasium envs only: wrap old gym envs with shimmy.)"
            )
        return env


def copy_obs(obs: Any) -> Any:
    """Copy an observation (array, dict or tuple of arrays) so later writes cannot alias it."""
    if isinstance(obs, dict):
        return {key: copy_obs(value) for key, value in obs.items()}
    if isinstance(obs, tuple):
        return tuple(copy_obs(value) for value in obs)
    return obs.copy() if isinstance(obs, np.ndarray) else obs


def _assign_rows(dst: Any, src: Any, mask: np.ndarray) -> None:
    """``dst[mask] = src[mask]`` leaf by leaf for batched array / dict / tuple observations."""
    if isinstance(dst, (dict, tuple)):
        for key in dst if isinstance(dst, dict) else range(len(dst)):
            _assign_rows(dst[key], src[key], mask)
    else:
        dst[mask] = src[mask]


class VectorEnvAdapter(VecEnv):
    """SB3's :class:`VecEnv` API over a gymnasium-API vector env in SAME_STEP autoreset mode.

    Takes ownership of ``venv``: closing the adapter closes it. As in SB3, observation spaces
    with a Dict or Tuple inside a Dict or Tuple raise ``NotImplementedError``; stepping before
    the first ``reset()`` is left to the envs to allow or refuse; and an exception inside a
    sub-env reaches the caller as that exception (with a note naming the env).
    """

    #: take ``metadata`` from env 0 (SB3's DummyVecEnv) rather than VecEnv's ``render_modes``
    _metadata_from_env = True

    def __init__(self, venv: Any) -> None:
        mode = getattr(venv, "metadata", {}).get("autoreset_mode")
        if not is_same_step(mode):
            raise ValueError(
                f"The SB3 API needs a vector env that auto-resets in the same step, but this one's "
                f'autoreset_mode is {mode!r}. Create it with autoreset_mode="same_step" '
                "(gymnasium: autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP)."
            )
        batch_size = getattr(venv, "batch_size", None)
        if batch_size is not None and batch_size < venv.num_envs:
            raise ValueError(
                f"The SB3 API steps every env at once, but this vector env returns batches of "
                f"{batch_size} of its {venv.num_envs} envs (async mode); create it with "
                "batch_size=None or batch_size=num_envs."
            )
        self.venv = venv
        root = getattr(venv, "unwrapped", venv)
        self._engine = root if isinstance(root, VectorEnv) else None
        # Per-env requests run as one ``apply`` on vecenv's engine, or directly on an in-process
        # ``envs`` list (gymnasium's SyncVectorEnv); None: through the vector API, to every env.
        self._apply: Callable[[Callable, list[int], tuple], list] | None = None
        if callable(getattr(type(root), "apply", None)):
            self._apply = functools.partial(_backend.apply_in_order, root.apply)
        elif isinstance(getattr(root, "envs", None), (list, tuple)):
            self._apply = lambda fn, indices, args: [fn(root.envs[i], *args) for i in indices]
        # Fast path: vecenv's engine reports raw per-env infos, so nothing is batched and undone.
        entries = callable(getattr(type(venv), "step_entries", None))
        self._fast = entries and getattr(venv, "unwrapped", None) is venv
        self._actions: Any = None
        self.actions: Any = None  # the last actions given, as SB3's DummyVecEnv keeps them
        self._waiting = False
        self._has_reset = False
        self.closed = False
        super().__init__(venv.num_envs, venv.single_observation_space, venv.single_action_space)
        space = self.observation_space
        if isinstance(space, (spaces.Dict, spaces.Tuple)):
            subspaces = space.spaces.values() if isinstance(space, spaces.Dict) else space.spaces
            if any(isinstance(sub, (spaces.Dict, spaces.Tuple)) for sub in subspaces):
                raise NotImplementedError(
                    "Nested observation spaces are not supported (Tuple/Dict space inside "
                    f"Tuple/Dict space): {space}"
                )
        if self._metadata_from_env:
            try:
                sub_metadata = self.get_attr("metadata", [0])[0]
            except Exception:  # noqa: BLE001 - metadata is optional for exotic envs
                sub_metadata = None
            if isinstance(sub_metadata, dict):
                self.metadata = sub_metadata

    # ----------------------------------------------------------------- reset / step
    @env_errors
    def reset(self) -> VecEnvObs:
        """Reset all envs with the pending seeds and options (then forget them)."""
        seeds = None if all(s is None for s in self._seeds) else list(self._seeds)
        groups: list[tuple[dict, list[int]]] = []
        for i, opts in enumerate(self._options):
            found = [members for group_opts, members in groups if group_opts == opts]
            if found:
                found[0].append(i)
            else:
                groups.append((opts, [i]))
        # Different options per env: one masked reset per distinct options dict, so each env is
        # reset once with its own options. Before the first reset, vector envs other than
        # vecenv's (gymnasium's SyncVectorEnv) cannot mask a reset: they first reset every env
        # with the largest group's options.
        groups.sort(key=lambda group: -len(group[1]))
        full_first = len(groups) == 1 or (not self._has_reset and self._engine is None)
        obs: Any = None
        reset_infos: list[dict] = [{} for _ in range(self.num_envs)]
        for k, (opts, members) in enumerate(groups):
            mask = None if k == 0 and full_first else np.isin(np.arange(self.num_envs), members)
            part, infos = self._reset_call(seeds, dict(opts) or None, mask)
            if obs is None or mask is None:  # the first group
                obs = part if len(groups) == 1 else copy_obs(part)
            else:
                _assign_rows(obs, part, mask)
            for i in members:
                reset_infos[i] = infos[i]
        self.reset_infos = reset_infos
        self._has_reset = True
        self._reset_seeds()
        self._reset_options()
        self._waiting = False
        return obs

    def _reset_call(self, seeds: list | None, options: dict | None,
                    mask: np.ndarray | None = None) -> tuple[Any, list[dict]]:
        """Reset the envs in ``mask`` (all when None); on vecenv's engine each gets ``options``
        as given, so empty options reach the env as ``None``, as in SB3."""
        if self._fast:
            ids = None if mask is None else np.flatnonzero(mask)
            obs, parts = self.venv.reset_entries(seed=seeds, options=options, env_ids=ids)
            return obs, per_env_infos(parts, self.num_envs)[0]
        if mask is not None:  # gymnasium's vector envs: masked envs get the options minus the mask
            options = {**(options or {}), "reset_mask": mask}
        obs, batched = self.venv.reset(seed=seeds, options=options)
        skip = _backend.FINAL_KEYS
        return obs, [_backend.unbatch_info(batched, i, skip) for i in range(self.num_envs)]

    def step_async(self, actions: np.ndarray) -> None:
        """Take one action per env: a batch array, or a list of ints, arrays, dicts (Dict action
        spaces) or tuples (Tuple action spaces), as SB3's vector envs do."""
        self._actions = _backend.batch_actions(actions, self.action_space, self.num_envs)
        self.actions = actions
        self._waiting = True

    @env_errors
    def step_wait(self) -> VecEnvStepReturn:
        if not self._waiting:
            raise RuntimeError("step_wait() called without a pending step_async()")
        self._waiting = False
        actions, self._actions = self._actions, None
        n = self.num_envs
        if not self._has_reset and self._engine is not None:
            # SB3 leaves stepping before the first reset to the envs; vecenv's gymnasium API
            # refuses it, so lift that refusal for the engine this adapter owns.
            self._engine.require_reset = False
        finals = []
        if self._fast:
            obs, rewards, terms, truncs, parts = self.venv.step_entries(actions)
            infos, ended = per_env_infos(parts, n)
            for entry in ended:
                infos[entry.index] = dict(entry.final_info or {})
                self.reset_infos[entry.index] = dict(entry.info or {})
                finals.append((entry.index, entry.final_obs))
        else:
            obs, rewards, terms, truncs, batched = self.venv.step(actions)
            infos = [_backend.unbatch_info(batched, i, _backend.FINAL_KEYS) for i in range(n)]
            for i in np.flatnonzero(np.logical_or(terms, truncs)).tolist():
                if "final_obs" not in batched:
                    raise RuntimeError(
                        "An episode ended but the vector env reported no 'final_obs' info; "
                        "is it really in SAME_STEP autoreset mode?"
                    )
                self.reset_infos[i] = infos[i]
                infos[i] = _backend.unbatch_info(batched.get("final_info", {}), i)
                finals.append((i, batched["final_obs"][i]))
        terms, truncs = np.asarray(terms, dtype=bool), np.asarray(truncs, dtype=bool)
        for info, cut in zip(infos, (truncs & ~terms).tolist(), strict=True):
            info["TimeLimit.truncated"] = cut
        for i, final_obs in finals:
            infos[i]["terminal_observation"] = copy_obs(final_obs)
        return obs, np.asarray(rewards, dtype=np.float32), terms | truncs, infos

    def close(self) -> None:
        self.closed = True
        self.venv.close()  # idempotent, and finishes a close() that an interruption cut short

    # ----------------------------------------------------------------- per-env requests
    def _whole(self, what: str, indices: list[int]) -> None:
        """Without per-env access, a request must address every env."""
        if sorted(indices) != list(range(self.num_envs)):
            raise NotImplementedError(
                f"{what} on a subset of envs is not available for {type(self.venv).__name__}"
            )

    @env_errors
    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        chosen = self._get_indices(indices)
        if self._apply is not None:
            return self._apply(_backend.get_wrapper_attr, chosen, (attr_name,))
        values = list(self.venv.get_attr(attr_name))  # note: gymnasium calls callable attributes
        return [values[i] for i in chosen]

    @env_errors
    def has_attr(self, attr_name: str) -> bool:
        if self._apply is not None:
            everyone = list(range(self.num_envs))
            return all(self._apply(_backend.has_wrapper_attr, everyone, (attr_name,)))
        return super().has_attr(attr_name)

    @env_errors
    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        chosen = self._get_indices(indices)
        if self._apply is not None:
            self._apply(_backend.set_wrapper_attr, chosen, (attr_name, value))
        else:
            self._whole("set_attr", chosen)
            self.venv.set_attr(attr_name, [value] * self.num_envs)

    @env_errors
    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
                   **method_kwargs: Any) -> list[Any]:
        chosen = self._get_indices(indices)
        if self._apply is not None:
            args = (method_name, method_args, method_kwargs)
            return self._apply(_backend.call_wrapper_method, chosen, args)
        self._whole("env_method", chosen)
        results = list(self.venv.call(method_name, *method_args, **method_kwargs))
        return [results[i] for i in chosen]

    @env_errors
    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper],
                       indices: VecEnvIndices = None) -> list[bool]:
        chosen = self._get_indices(indices)
        if self._apply is None:
            return [False] * len(chosen)  # the wrapper chain cannot be inspected
        return self._apply(_backend.is_wrapped, chosen, (_backend.class_ref(wrapper_class),))

    @env_errors
    def get_images(self) -> Sequence[np.ndarray | None]:
        if self.render_mode != "rgb_array":
            warnings.warn(
                f"The render mode is {self.render_mode}, but this method assumes it is `rgb_array` "
                "to obtain images.",
                stacklevel=2,
            )
            return [None] * self.num_envs
        return self.env_method("render")

    def _adopt(self, cls: Callable[..., Any], env_fns: list[Callable[[], gym.Env]],
               **kwargs: Any) -> None:
        """Adapt a new SAME_STEP vector env of ``cls`` (closed again if that fails); an env_fn's
        exception leaves as itself."""
        kwargs.setdefault("autoreset_mode", "same_step")
        venv = env_errors(cls)([GymnasiumEnvFn(fn) for fn in env_fns], **kwargs)
        try:
            VectorEnvAdapter.__init__(self, venv)
        except BaseException:
            venv.close()
            raise

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_envs={self.num_envs}, venv={self.venv!r})"


def from_vector_env(envs: Any) -> VectorEnvAdapter:
    """Adapt a gymnasium-API vector env (vecenv's, gymnasium's, or one wrapped by gymnasium vector
    wrappers) to SB3's :class:`VecEnv` API. It must use ``autoreset_mode="same_step"``."""
    return VectorEnvAdapter(envs)


class DummyVecEnv(VectorEnvAdapter):
    """SB3's ``DummyVecEnv``: all envs stepped one after another in this process.

    Built on ``vecenv.SerialVectorEnv``; ``envs`` lists the sub-environments.

    Examples:
        >>> import gymnasium as gym
        >>> import numpy as np
        >>> from vecenv.sb3 import DummyVecEnv
        >>> venv = DummyVecEnv([lambda: gym.make("CartPole-v1")] * 2)
        >>> _ = venv.seed(0)
        >>> obs = venv.reset()
        >>> obs, rewards, dones, infos = venv.step(np.array([0, 1]))
        >>> obs.shape, rewards, dones
        ((2, 4), array([1., 1.], dtype=float32), array([False, False]))
        >>> len(venv.envs)
        2
        >>> venv.close()
    """

    def __init__(self, env_fns: list[Callable[[], gym.Env]]) -> None:
        env_fns = list(env_fns)
        if not env_fns:
            raise IndexValueError("list index out of range: DummyVecEnv needs at least one env_fn")
        self._adopt(SerialVectorEnv, env_fns)
        ids = [id(env.unwrapped) for env in self.envs]
        if len(set(ids)) != len(ids):
            self.close()
            raise ValueError(
                "You tried to create multiple environments, but the function to create them "
                "returned the same instance instead of creating different objects. Two env_fns "
                "returned the same environment instance; each must create a new env (e.g. "
                "`lambda: gym.make(id)`, not `lambda: env`)."
            )

    @property
    def envs(self) -> list[gym.Env]:
        """The sub-environments, in order."""
        return list(self.venv.unwrapped.envs)

    # SB3's DummyVecEnv hands Dict observations out as an OrderedDict (its SubprocVecEnv: a dict)
    def reset(self) -> VecEnvObs:
        return _ordered(super().reset())

    def step_wait(self) -> VecEnvStepReturn:
        obs, rewards, dones, infos = super().step_wait()
        return _ordered(obs), rewards, dones, infos


def _ordered(obs: Any) -> Any:
    return OrderedDict(obs) if type(obs) is dict else obs


class SubprocVecEnv(VectorEnvAdapter):
    """SB3's ``SubprocVecEnv`` on vecenv's multiprocess shared-memory engine.

    ``start_method`` is "fork", "spawn" or "forkserver" (default: the engine's choice). Extra
    keywords go to ``vecenv.ProcessVectorEnv``, e.g. ``num_workers`` (envs per process are
    ``num_envs / num_workers``; SB3 always uses one process per env).

    Examples:
        Four envs in two worker processes; close it to end them:

        >>> import gymnasium as gym
        >>> import numpy as np
        >>> from vecenv.sb3 import SubprocVecEnv
        >>> venv = SubprocVecEnv([lambda: gym.make("CartPole-v1")] * 4, num_workers=2)
        >>> _ = venv.seed(0)
        >>> obs = venv.reset()
        >>> obs, rewards, dones, infos = venv.step(np.zeros(4, dtype=np.int64))
        >>> obs.shape, dones, infos[0]
        ((4, 4), array([False, False, False, False]), {'TimeLimit.truncated': False})
        >>> venv.env_method("get_wrapper_attr", "spec", indices=[0])[0].id
        'CartPole-v1'
        >>> venv.close()
    """

    _metadata_from_env = False  # SB3's SubprocVecEnv keeps VecEnv's {"render_modes": [...]}
    _indexed_container = "tuple"  # SB3 indexes its tuple of pipes

    def __init__(self, env_fns: list[Callable[[], gym.Env]], start_method: str | None = None,
                 **vecenv_kwargs: Any) -> None:
        if start_method is not None and start_method not in mp.get_all_start_methods():
            # multiprocessing.get_context's own error, which SB3 lets through
            raise ValueError(
                f"cannot find context for {start_method!r} (start_method must be one of "
                f"{mp.get_all_start_methods()} or None)"
            )
        env_fns = list(env_fns)
        if not env_fns:
            raise ValueError(
                "not enough values to unpack (expected 2, got 0): SubprocVecEnv needs at least one "
                "env_fn"
            )
        self._adopt(ProcessVectorEnv, env_fns, context=start_method, **vecenv_kwargs)

    @property
    def waiting(self) -> bool:
        """Whether a ``step_async`` awaits its ``step_wait``."""
        return self._waiting
