"""Running normalization of observations and rewards (:class:`VecNormalize`), and look-ups of
wrappers in a VecEnv's chain such as :func:`sync_envs_normalization`."""

from __future__ import annotations

import copy
import pickle
from typing import Any, TypeVar

import numpy as np
from gymnasium import spaces

from vecenv.sb3.base import (
    AssertionValueError,
    VecEnv,
    VecEnvObs,
    VecEnvStepReturn,
    VecEnvWrapper,
)
from vecenv.sb3.wrappers import is_image_space


class RunningMeanStd:
    """Mean and (population) variance of every sample seen so far, per element of ``shape``.

    Batches are merged with the parallel-variance formula of Chan et al., so statistics of
    several streams can also be combined. ``epsilon`` is the initial pseudo-count, which keeps
    the first update well-defined (starting mean 0, variance 1), as in SB3.
    """

    def __init__(self, epsilon: float = 1e-4, shape: tuple[int, ...] = ()) -> None:
        self.mean = np.zeros(shape, dtype=np.float64)
        self.var = np.ones(shape, dtype=np.float64)
        self.count = epsilon

    def copy(self) -> RunningMeanStd:
        """An independent copy of these statistics (of SB3's ``RunningMeanStd`` too)."""
        other = RunningMeanStd(shape=np.shape(self.mean))
        other.mean = np.array(self.mean, dtype=np.float64)
        other.var = np.array(self.var, dtype=np.float64)
        other.count = float(self.count)
        return other

    def combine(self, other: RunningMeanStd) -> None:
        """Fold another instance's statistics into this one."""
        self.update_from_moments(other.mean, other.var, other.count)

    def update(self, arr: np.ndarray) -> None:
        """Add a batch of samples (first axis is the batch)."""
        arr = np.asarray(arr)
        self.update_from_moments(np.mean(arr, axis=0), np.var(arr, axis=0), arr.shape[0])

    def update_from_moments(self, batch_mean: np.ndarray, batch_var: np.ndarray,
                            batch_count: float) -> None:
        """Add a batch given only its mean, variance and size."""
        delta = batch_mean - self.mean
        total = self.count + batch_count
        new_mean = self.mean + delta * batch_count / total
        # Sum of squared deviations of both parts, plus the correction for their mean gap.
        m2 = self.var * self.count + batch_var * batch_count
        m2 = m2 + np.square(delta) * self.count * batch_count / total
        self.mean = new_mean
        self.var = m2 / total
        self.count = total


class VecNormalize(VecEnvWrapper):
    """Normalize observations by their running mean/std, and rewards by the running std of the
    discounted return; SB3's constructor, attributes and pickle-based ``save``/``load``.

    :param training: update the statistics (set False for evaluation)
    :param norm_obs: normalize observations
    :param norm_reward: normalize rewards
    :param clip_obs: clip normalized observations to ``[-clip_obs, clip_obs]``
    :param clip_reward: clip normalized rewards to ``[-clip_reward, clip_reward]``
    :param gamma: discount of the return whose std scales the rewards
    :param epsilon: added to variances before the square root
    :param norm_obs_keys: for Dict spaces, which keys to normalize (default: all)
    """

    obs_rms: RunningMeanStd | dict[str, RunningMeanStd]

    def __init__(self, venv: VecEnv, training: bool = True, norm_obs: bool = True,
                 norm_reward: bool = True, clip_obs: float = 10.0, clip_reward: float = 10.0,
                 gamma: float = 0.99, epsilon: float = 1e-8,
                 norm_obs_keys: list[str] | None = None) -> None:
        VecEnvWrapper.__init__(self, venv)
        self.norm_obs = norm_obs
        self.norm_obs_keys = norm_obs_keys
        if norm_obs:
            self._sanity_checks()
            space = self.observation_space
            if isinstance(space, spaces.Dict):
                self.observation_space = new = copy.deepcopy(space)
                self.obs_spaces = new.spaces
                self.obs_rms = {
                    key: RunningMeanStd(shape=new[key].shape)  # type: ignore[arg-type]
                    for key in self.norm_obs_keys  # type: ignore[union-attr]
                }
                for key in self.obs_rms:
                    new.spaces[key] = _float_if_image(new[key], clip_obs)
            else:
                self.obs_rms = RunningMeanStd(shape=space.shape)  # type: ignore[arg-type]
                self.observation_space = _float_if_image(space, clip_obs)
        self.ret_rms = RunningMeanStd(shape=())
        self.clip_obs = clip_obs
        self.clip_reward = clip_reward
        self.returns = np.zeros(self.num_envs)
        self.gamma = gamma
        self.epsilon = epsilon
        self.training = training
        self.norm_reward = norm_reward
        self.old_obs: VecEnvObs = np.array([])
        self.old_reward = np.array([])

    def _sanity_checks(self) -> None:
        """Only Box observations (or Box entries of a Dict) can be normalized."""
        space = self.observation_space
        if isinstance(space, spaces.Dict):
            if self.norm_obs_keys is None:
                self.norm_obs_keys = list(space.spaces.keys())
            for key in self.norm_obs_keys:
                if not isinstance(space.spaces[key], spaces.Box):
                    raise ValueError(
                        f"VecNormalize only supports `gym.spaces.Box` observation spaces but {key} "
                        f"is of type {space.spaces[key]}. You should probably explicitly pass the "
                        "observation keys that should be normalized via the `norm_obs_keys` "
                        "parameter."
                    )
        elif not isinstance(space, spaces.Box):
            raise ValueError(
                "VecNormalize only supports `gym.spaces.Box` and `gym.spaces.Dict` observation "
                f"spaces, not {space}"
            )
        elif self.norm_obs_keys is not None:
            raise ValueError(
                "`norm_obs_keys` param is applicable only with `gym.spaces.Dict` observation spaces"
            )

    # ----------------------------------------------------------------- pickling
    def __getstate__(self) -> dict[str, Any]:
        """Everything but the wrapped venv and what derives from it (:data:`_NOT_SAVED`)."""
        state = self.__dict__.copy()
        for key in _NOT_SAVED:
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "norm_obs_keys" not in state and isinstance(state.get("observation_space"), spaces.Dict):
            state["norm_obs_keys"] = list(state["observation_space"].spaces.keys())
        self.__dict__.update(state)
        self.venv = None  # type: ignore[assignment]  # set_venv() attaches one

    def set_venv(self, venv: VecEnv) -> None:
        """Attach a venv to an unpickled instance; its observation shapes must match."""
        if self.venv is not None:
            raise ValueError(
                "Trying to set venv of already initialized VecNormalize wrapper. (This "
                "VecNormalize already wraps a venv.)"
            )
        self.venv = venv
        self.num_envs = venv.num_envs
        self.class_attributes = frozenset(dir(type(self)))
        self.render_mode = venv.render_mode
        _check_same_shapes(self.observation_space, venv.observation_space)
        self.returns = np.zeros(self.num_envs)

    # ----------------------------------------------------------------- stepping
    def step_wait(self) -> VecEnvStepReturn:
        obs, rewards, dones, infos = self.venv.step_wait()
        self.old_obs = obs
        self.old_reward = rewards
        if self.training and self.norm_obs:
            self._update_obs_rms(obs)
        obs = self.normalize_obs(obs)
        if self.training:
            self.returns = self.returns * self.gamma + rewards
            self.ret_rms.update(self.returns)
        rewards = self.normalize_reward(rewards)
        for info in (infos[i] for i in np.flatnonzero(dones)):
            if "terminal_observation" in info:
                info["terminal_observation"] = self.normalize_obs(info["terminal_observation"])
        self.returns[dones] = 0
        return obs, rewards, dones, infos

    def reset(self) -> VecEnvObs:
        obs = self.venv.reset()
        self.old_obs = obs
        self.returns = np.zeros(self.num_envs)
        if self.training and self.norm_obs:
            self._update_obs_rms(obs)
        return self.normalize_obs(obs)

    def _update_obs_rms(self, obs: Any) -> None:
        self._per_key(obs, lambda x, rms: rms.update(x))

    # ----------------------------------------------------------------- transforms
    def _per_key(self, obs: VecEnvObs, fn: Any) -> VecEnvObs:
        """``fn(obs, rms)`` for the whole batch, or for each normalized key of a Dict batch."""
        if not self.norm_obs:
            return copy.deepcopy(obs)
        if isinstance(obs, dict) and isinstance(self.obs_rms, dict):
            out = dict(obs)
            for key in self.norm_obs_keys:  # type: ignore[union-attr]
                out[key] = fn(obs[key], self.obs_rms[key])
            return out
        return fn(obs, self.obs_rms)

    def normalize_obs(self, obs: VecEnvObs) -> VecEnvObs:
        """Normalize with the current statistics (float32), without updating them."""
        return self._per_key(obs, lambda x, rms: np.clip(
            (x - rms.mean) / np.sqrt(rms.var + self.epsilon), -self.clip_obs, self.clip_obs
        ).astype(np.float32))

    def normalize_reward(self, reward: np.ndarray) -> np.ndarray:
        """Scale rewards by the return's running std (float32), without updating it."""
        if self.norm_reward:
            reward = np.clip(reward / np.sqrt(self.ret_rms.var + self.epsilon),
                             -self.clip_reward, self.clip_reward)
        return np.asarray(reward).astype(np.float32)

    def unnormalize_obs(self, obs: VecEnvObs) -> VecEnvObs:
        """Invert :meth:`normalize_obs` (up to clipping)."""
        return self._per_key(obs, lambda x, rms: x * np.sqrt(rms.var + self.epsilon) + rms.mean)

    def unnormalize_reward(self, reward: np.ndarray) -> np.ndarray:
        """Invert :meth:`normalize_reward` (up to clipping)."""
        if self.norm_reward:
            return reward * np.sqrt(self.ret_rms.var + self.epsilon)
        return reward

    def get_original_obs(self) -> VecEnvObs:
        """The unnormalized observations of the last step or reset."""
        return copy.deepcopy(self.old_obs)

    def get_original_reward(self) -> np.ndarray:
        """The unnormalized rewards of the last step."""
        return self.old_reward.copy()

    # ----------------------------------------------------------------- persistence
    @staticmethod
    def load(load_path: str, venv: VecEnv) -> VecNormalize:
        """Load statistics and settings saved by :meth:`save` and wrap ``venv`` with them.

        Files written by SB3's ``VecNormalize.save`` load too (SB3 must be installed to read them).
        """
        with open(load_path, "rb") as file:
            loaded = pickle.load(file)
        if not isinstance(loaded, VecNormalize):
            loaded = _from_foreign(loaded)
        loaded.set_venv(venv)
        return loaded

    def save(self, save_path: str) -> None:
        """Pickle the statistics and settings (not the wrapped venv) to ``save_path``."""
        with open(save_path, "wb") as file:
            pickle.dump(self, file)


#: what is not pickled: the wrapped venv (often unpicklable) and values derived from it
_NOT_SAVED = ("venv", "class_attributes", "returns")


def _check_same_shapes(expected: spaces.Space, actual: spaces.Space) -> None:
    """SB3's ``check_shape_equal``: Dict spaces key by key, Box spaces by shape."""
    if isinstance(expected, spaces.Dict):
        if not isinstance(actual, spaces.Dict):
            raise AssertionValueError(
                f"spaces must be of the same type: {type(expected)} != {type(actual)}"
            )
        if expected.spaces.keys() != actual.spaces.keys():
            raise AssertionValueError(
                f"spaces must have the same keys: {list(expected.spaces)} != {list(actual.spaces)}"
            )
        for key in expected.spaces:
            _check_same_shapes(expected.spaces[key], actual.spaces[key])
    elif isinstance(expected, spaces.Box) and expected.shape != actual.shape:
        raise AssertionValueError(
            f"spaces must have the same shape: {expected.shape} != {actual.shape}"
        )


def _from_foreign(obj: Any) -> VecNormalize:
    """Turn an unpickled SB3 ``VecNormalize`` into ours (same attribute names)."""
    if type(obj).__name__ != "VecNormalize" or not hasattr(obj, "ret_rms"):
        raise TypeError(f"Not a VecNormalize statistics file (found {type(obj).__name__})")
    state = {key: value for key, value in obj.__dict__.items() if key not in _NOT_SAVED}
    rms = state.get("obs_rms")
    if isinstance(rms, dict):
        state["obs_rms"] = {key: RunningMeanStd.copy(value) for key, value in rms.items()}
    elif rms is not None:
        state["obs_rms"] = RunningMeanStd.copy(rms)
    state["ret_rms"] = RunningMeanStd.copy(state["ret_rms"])
    ours = VecNormalize.__new__(VecNormalize)
    ours.__setstate__(state)
    return ours


def _float_if_image(space: spaces.Space, clip_obs: float) -> spaces.Space:
    """Normalized images are floats in [-clip, clip]; say so, so that SB3 does not treat them as
    uint8 images (and so its image checks fail loudly)."""
    if not is_image_space(space):
        return space
    return spaces.Box(-clip_obs, clip_obs, space.shape, np.float32)  # type: ignore[arg-type]


W = TypeVar("W")


def unwrap_vec_wrapper(env: VecEnv, vec_wrapper_class: type[W]) -> W | None:
    """The first :class:`VecEnvWrapper` of type ``vec_wrapper_class`` around ``env``, or None."""
    while env is not None:
        if isinstance(env, vec_wrapper_class):
            return env
        env = getattr(env, "venv", None) if _is_vec_wrapper(env) else None  # type: ignore[assignment]
    return None


def _is_vec_wrapper(env: Any) -> bool:
    # Our wrappers, and SB3's (which have ``venv`` and ``getattr_recursive``) when mixed in.
    return isinstance(env, VecEnvWrapper) or (
        "venv" in getattr(env, "__dict__", {}) and hasattr(type(env), "getattr_recursive")
    )


def unwrap_vec_normalize(env: VecEnv) -> VecNormalize | None:
    """The :class:`VecNormalize` around ``env``, if any."""
    return unwrap_vec_wrapper(env, VecNormalize)


def is_vecenv_wrapped(env: VecEnv, vec_wrapper_class: type[VecEnvWrapper]) -> bool:
    """Whether ``env`` is (somewhere) wrapped in ``vec_wrapper_class``."""
    return unwrap_vec_wrapper(env, vec_wrapper_class) is not None


def sync_envs_normalization(env: VecEnv, eval_env: VecEnv) -> None:
    """Copy the VecNormalize statistics of a training env to an identically wrapped eval env."""
    train, evaluate = env, eval_env
    while _is_vec_wrapper(train):
        if not _is_vec_wrapper(evaluate):
            raise AssertionValueError(
                "Error while synchronizing normalization stats: expected the eval env to be a "
                f"VecEnvWrapper but got {evaluate} instead. This is probably due to the training "
                "env not being wrapped the same way as the evaluation env. Training env type: "
                f"{train}."
            )
        if isinstance(train, VecNormalize):
            if not isinstance(evaluate, VecNormalize):
                raise AssertionValueError(
                    "Error while synchronizing normalization stats: expected the eval env to be a "
                    f"VecNormalize but got {evaluate} instead. This is probably due to the "
                    "training env not being wrapped the same way as the evaluation env. Training "
                    f"env type: {train}."
                )
            if hasattr(train, "obs_rms"):
                evaluate.obs_rms = copy.deepcopy(train.obs_rms)
            evaluate.ret_rms = copy.deepcopy(train.ret_rms)
        train, evaluate = train.venv, evaluate.venv  # type: ignore[attr-defined]


