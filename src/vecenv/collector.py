"""Training-shaped rollouts at async speed: :class:`Collector`.

A training loop (PPO's rollout buffer, GAE) wants ``steps`` consecutive transitions of every env,
in order: ``(T, N)`` arrays. A synchronous vector env gives that shape and pays a barrier every
step; async batches (``batch_size < num_envs``) pay none but hand back whichever envs are ready.
The collector runs async batches underneath and keeps one cursor per env, so each env's rows land
in its own column in order, and the barrier moves from every step to every rollout: an env that
has taken its ``steps`` steps waits for the others. See docs/collector.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from vecenv.engine.modes import parse_autoreset_mode
from vecenv.infos import add_info
from vecenv.torch_buffers import TorchBuffers

__all__ = ["Collector", "Policy", "Rollout"]

#: ``policy(observations, env_ids)``: one action per row, or ``(actions, extras)`` with
#: ``extras`` a dict of arrays (or torch tensors) with one row per env in ``env_ids``
Policy = Callable[[np.ndarray, np.ndarray], Any]


@dataclass
class Rollout:
    """One rollout of ``steps`` (T) steps of each of ``num_envs`` (N) envs, row ``[t, i]`` being
    env ``i``'s ``t``-th step of the rollout, as a synchronous loop records it in the vector
    env's autoreset mode.

    The arrays are the collector's own buffers (numpy, or torch tensors with ``device=``): the
    next :meth:`Collector.collect` overwrites them; :meth:`copy` keeps one.
    """

    observations: Any  #: (T, N, *obs_shape): the observation each action was chosen on
    actions: Any  #: (T, N, *action_shape)
    rewards: Any  #: (T, N) float32
    terminations: Any  #: (T, N) bool
    truncations: Any  #: (T, N) bool
    extras: dict[str, Any]  #: name -> (T, N, ...): what the policy returned besides actions
    next_observations: Any  #: (N, *obs_shape): each env's observation after its last step
    episode_returns: np.ndarray  #: the return of each episode that ended in this rollout
    episode_lengths: np.ndarray  #: its length in steps (NEXT_STEP's reset steps not counted)
    episode_env_ids: np.ndarray  #: the env it ran in; episodes in the order (step, env) they ended
    _infos: Callable[[], list[dict[str, Any]]] = field(repr=False)
    _built: list[dict[str, Any]] | None = field(default=None, repr=False)

    @property
    def infos(self) -> list[dict[str, Any]]:
        """``infos[t]``: the infos of step ``t`` of every env, as gymnasium's vector env batches
        them (a dict of N-row arrays with ``_key`` masks), built on first access."""
        if self._built is None:
            self._built = self._infos()
        return self._built

    def copy(self) -> Rollout:
        """A copy that the next :meth:`Collector.collect` leaves alone."""
        def own(x: Any) -> Any:
            return x.clone() if hasattr(x, "clone") else np.array(x, copy=True)
        return Rollout(own(self.observations), own(self.actions), own(self.rewards), own(self.terminations),
                       own(self.truncations), {k: own(v) for k, v in self.extras.items()},
                       own(self.next_observations), self.episode_returns, self.episode_lengths,
                       self.episode_env_ids, lambda: self.infos)


class Collector:
    """Collect ``steps`` consecutive steps of every env of ``envs`` per :meth:`collect`.

    ``envs`` is any gymnasium vector env; one of vecenv's with ``batch_size < num_envs`` is
    stepped in async batches (``send``/``recv``), any other one step at a time. ``policy(obs,
    env_ids)`` is called once per batch the vector env hands back and returns one action per row,
    or ``(actions, extras)``. Each env takes exactly ``steps`` steps per rollout; envs that are
    done wait for the others, and the last batches may be smaller than ``batch_size``. The first
    :meth:`collect` resets the envs with ``seed``; later ones continue where the last one stopped
    (after a :meth:`collect` cut short by an exception, the next one drains the envs and resets).

    With ``autoreset_mode="disabled"`` the collector resets an env that ended just before its
    next step (``reset(options={"reset_mask": ...})``, with async batches once the envs in flight
    are back), so ``next_observations`` holds a finished env's final observation and its next
    rollout starts on the reset one.

    ``device`` (``"cpu"``, ``"cuda"``, a ``torch.device``): the rollout's arrays are torch
    tensors on it, copied from pinned host memory without blocking (CUDA) or shared (CPU).

    >>> import vecenv
    >>> envs = vecenv.make("CartPole-v1", num_envs=4, backend="serial", batch_size=2)
    >>> collector = vecenv.Collector(envs, lambda obs, ids: (obs[:, 2] > 0).astype("int64"), steps=16)
    >>> rollout = collector.collect()
    >>> rollout.observations.shape, rollout.rewards.shape, rollout.next_observations.shape
    ((16, 4, 4), (16, 4), (4, 4))
    >>> envs.close()
    """

    def __init__(self, envs: gym.vector.VectorEnv, policy: Policy, steps: int = 128, seed: int | None = 0,
                 device: Any = None) -> None:
        for name in ("num_envs", "single_observation_space", "single_action_space", "reset", "step"):
            if not hasattr(envs, name):
                raise TypeError(f"Collector(envs, ...): envs must be a gymnasium vector env, got {envs!r} "
                                f"(it has no {name!r})")
        if not callable(policy):
            raise TypeError(f"Collector(envs, policy, ...): policy must be callable as policy(observations, "
                            f"env_ids), got {policy!r}")
        if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
            raise ValueError(f"Collector(steps=...): expected a positive int, got {steps!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
            raise TypeError(f"Collector(seed=...): expected an int or None, got {seed!r}")
        obs_space, act_space = envs.single_observation_space, envs.single_action_space
        for what, space in (("observation", obs_space), ("action", act_space)):
            if not isinstance(space, (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
                raise TypeError(f"Collector: the {what} space must be an array space (Box, Discrete, "
                                f"MultiDiscrete, MultiBinary), got {space}")
        self.envs, self.policy, self.steps, self.seed = envs, policy, int(steps), seed
        self.num_envs = n = int(envs.num_envs)
        self.batch_size = int(getattr(envs, "batch_size", n))
        self.async_batches = self.batch_size < n
        mode = envs.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        self.autoreset_mode = parse_autoreset_mode(getattr(mode, "value", mode))
        self.device = device
        t, self._obs_shape, self._act_shape = self.steps, tuple(obs_space.shape or ()), tuple(act_space.shape or ())
        self._torch = TorchBuffers(device) if device is not None else None
        alloc = self._torch.host if self._torch is not None else np.zeros
        self._host: dict[str, np.ndarray] = {
            "observations": alloc((t, n, *self._obs_shape), obs_space.dtype),
            "actions": alloc((t, n, *self._act_shape), act_space.dtype),
            "rewards": alloc((t, n), np.float32),
            "terminations": alloc((t, n), np.bool_),
            "truncations": alloc((t, n), np.bool_),
            "next_observations": alloc((n, *self._obs_shape), obs_space.dtype),
        }
        self._extras: dict[str, np.ndarray] = {}
        self._started = False
        self._needs_reset = np.zeros(n, dtype=np.bool_)  # DISABLED: ended, reset before its next step
        self._after_done = np.zeros(n, dtype=np.bool_)  # NEXT_STEP: the next row is a reset step
        self._episode_return = np.zeros(n, dtype=np.float64)  # the running episode's, carried over
        self._episode_length = np.zeros(n, dtype=np.int64)

    # ================================================================ collecting
    def collect(self) -> Rollout:
        """Step every env ``steps`` times and return the rollout (buffers reused: see :class:`Rollout`)."""
        if self._torch is not None:
            self._torch.wait_copies()  # the last rollout's copies read the host buffers
        records: list[tuple[np.ndarray, np.ndarray, dict[str, Any]]] = []  # (env ids, steps, their infos)
        if not self._started:  # a first rollout, or one after a collect() cut short: from a reset
            self._needs_reset[:] = self._after_done[:] = False
            self._episode_return[:], self._episode_length[:] = 0.0, 0
        try:
            if self.async_batches:
                self._collect_async(records)
            else:
                self._collect_sync(records)
        except BaseException:
            self._started = False  # cut short (a bad policy output, an interrupt): the next one resets
            raise
        self._started = True
        return self._rollout(records)

    def _drain(self) -> None:
        """Receive (and drop) what a collect() cut short left in flight, so that reset() may go."""
        try:
            while True:
                self.envs.recv()  # type: ignore[attr-defined]
        except gym.error.NoAsyncCallError:  # nothing left out (or reset() must drop it: it will)
            pass

    def _collect_sync(self, records: list) -> None:
        envs, h, n = self.envs, self._host, self.num_envs
        ids = np.arange(n)
        if self._started:
            obs = h["next_observations"]
        else:
            obs, _ = envs.reset(seed=self.seed)
        disabled = self.autoreset_mode is AutoresetMode.DISABLED
        for t in range(self.steps):
            if disabled and self._needs_reset.any():
                obs, _ = envs.reset(options={"reset_mask": self._needs_reset.copy()})
                self._needs_reset[:] = False
            h["observations"][t] = obs
            actions = self._act(obs, ids, np.full(n, t))
            obs, rewards, terminations, truncations, infos = envs.step(actions)
            h["rewards"][t], h["terminations"][t], h["truncations"][t] = rewards, terminations, truncations
            records.append((ids, np.full(n, t), infos))
            if disabled:
                self._needs_reset = np.logical_or(terminations, truncations)
        h["next_observations"][:] = obs

    def _collect_async(self, records: list) -> None:
        _AsyncRollout(self, records).run()

    def _record(self, ids: np.ndarray, was: np.ndarray, rows: np.ndarray, rewards: np.ndarray,
                terminations: np.ndarray, truncations: np.ndarray) -> np.ndarray:
        """Write a returned batch's rewards and flags at row ``rows[k]`` of env ``ids[k]``, for
        the envs that stepped (``was``; the others' reset came back); each env's row, -1 for those."""
        h = self._host
        if was.all():
            h["rewards"][rows, ids], h["terminations"][rows, ids] = rewards, terminations
            h["truncations"][rows, ids] = truncations
            return rows
        rows, stepped = np.where(was, rows, -1), ids[was]
        h["rewards"][rows[was], stepped] = rewards[was]
        h["terminations"][rows[was], stepped] = terminations[was]
        h["truncations"][rows[was], stepped] = truncations[was]
        return rows

    def _act(self, obs: Any, ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The policy's actions for ``obs`` (the envs ``ids``), checked; actions and extras
        recorded at rows ``rows``."""
        out = self.policy(obs, ids)
        extras: Any = None
        if isinstance(out, tuple):
            if len(out) != 2:
                raise ValueError(f"Collector: the policy returned a tuple of {len(out)} items; expected "
                                 "actions or (actions, extras)")
            out, extras = out
        actions = _numpy(out)
        k = len(ids)
        if actions.ndim == 0 or actions.shape[0] != k:
            got = "a scalar" if actions.ndim == 0 else f"{actions.shape[0]} actions"
            raise ValueError(f"Collector: the policy returned {got} for a batch of {k} observations "
                             f"(env_ids {ids.tolist()}); expected one action per row, shape "
                             f"({k}, *{self._act_shape})")
        h = self._host
        try:
            h["actions"][rows, ids] = actions
        except ValueError:
            raise ValueError(f"Collector: the policy's actions have shape {actions.shape}; expected "
                             f"({k}, *{self._act_shape})") from None
        if extras is not None:
            self._record_extras(extras, ids, rows)
        return actions

    def _record_extras(self, extras: Any, ids: np.ndarray, rows: np.ndarray) -> None:
        if not isinstance(extras, Mapping):
            raise TypeError(f"Collector: the policy returned (actions, {type(extras).__name__}); extras must be "
                            "a dict of arrays with one row per env")
        k = len(ids)
        for name, value in extras.items():
            array = _numpy(value)
            if array.ndim == 0 or array.shape[0] != k:
                raise ValueError(f"Collector: extras[{name!r}] has shape {array.shape}; expected one row per "
                                 f"env of the batch ({k}, ...)")
            buffer = self._extras.get(name)
            if buffer is None:
                alloc = self._torch.host if self._torch is not None else np.zeros
                buffer = self._extras[name] = alloc((self.steps, self.num_envs, *array.shape[1:]), array.dtype)
            if buffer.shape[2:] != array.shape[1:]:
                raise ValueError(f"Collector: extras[{name!r}] has rows of shape {array.shape[1:]}; earlier "
                                 f"batches had {buffer.shape[2:]}")
            buffer[rows, ids] = array

    # ================================================================ the rollout
    def _rollout(self, records: list) -> Rollout:
        h = self._host
        returns, lengths, env_ids = self._episodes()
        n = self.num_envs
        infos = (lambda: _step_infos(records, self.steps, n)) if self.async_batches else (
            lambda: [info for _, _, info in records])
        if self._torch is not None:
            out = self._torch.publish({**h, **{f"extra:{k}": v for k, v in self._extras.items()}})
            extras = {k.removeprefix("extra:"): v for k, v in out.items() if k.startswith("extra:")}
        else:
            out, extras = h, dict(self._extras)
        return Rollout(out["observations"], out["actions"], out["rewards"], out["terminations"],
                       out["truncations"], extras, out["next_observations"], returns, lengths, env_ids, infos)

    def _episodes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The episodes that ended in this rollout: (returns, lengths, env ids), from the rewards
        and done flags; the running ones carry over to the next rollout."""
        h = self._host
        rewards = h["rewards"].astype(np.float64)
        done = h["terminations"] | h["truncations"]
        counted = np.ones_like(done)
        if self.autoreset_mode is AutoresetMode.NEXT_STEP:  # the row after a done is the reset step
            counted[0] = ~self._after_done
            counted[1:] = ~done[:-1]
            self._after_done = done[-1].copy()
        rewards *= counted
        sum_r, sum_n = np.cumsum(rewards, axis=0), np.cumsum(counted, axis=0, dtype=np.int64)
        found: list[tuple[int, int, float, int]] = []
        for i in range(self.num_envs):
            base_r, base_n = self._episode_return[i], self._episode_length[i]
            prev_r, prev_n = 0.0, 0
            for t in np.flatnonzero(done[:, i]).tolist():
                found.append((t, i, base_r + sum_r[t, i] - prev_r, int(base_n + sum_n[t, i] - prev_n)))
                base_r, base_n, prev_r, prev_n = 0.0, 0, sum_r[t, i], int(sum_n[t, i])
            self._episode_return[i] = base_r + sum_r[-1, i] - prev_r
            self._episode_length[i] = base_n + sum_n[-1, i] - prev_n
        found.sort()
        return (np.array([f[2] for f in found], dtype=np.float64), np.array([f[3] for f in found], dtype=np.int64),
                np.array([f[1] for f in found], dtype=np.int64))


class _AsyncRollout:
    """One rollout on async batches: each env's next row (its cursor), which envs are out, and
    the envs held back until a reset (DISABLED) is due; the collector records what returns."""

    def __init__(self, collector: Collector, records: list) -> None:
        self.c, self.batches = collector, records
        self.envs: Any = collector.envs  # one of vecenv's: send() and recv()
        n = collector.num_envs
        self.cursor = np.zeros(n, dtype=np.int64)  # each env's next row
        self.stepped = np.zeros(n, dtype=np.bool_)  # sent a step (not a reset) and not yet returned
        self.held: list[np.ndarray] = []  # envs waiting to act (a reset is due first)
        self.outstanding = 0  # envs sent (a step or a reset) and not yet returned

    def run(self) -> None:
        c = self.c
        if not c._started:
            self.reset(None)
        else:
            going_on = np.flatnonzero(~c._needs_reset)
            if c._needs_reset.any():
                self.reset(c._needs_reset.copy())
            self.act_on_last(going_on)
        while self.outstanding or self.held:
            if self.held and not self.outstanding:  # DISABLED: the envs in flight are back
                self.reset_held()
            else:
                self.returned(*self.envs.recv())

    def act(self, ids: np.ndarray, obs: Any) -> None:
        """Record ``obs`` at the envs' rows, ask the policy, send its actions."""
        rows = self.cursor[ids]
        self.c._host["observations"][rows, ids] = obs
        actions = self.c._act(obs, ids, rows)
        self.envs.send(actions, ids)
        self.stepped[ids] = True
        self.cursor[ids] += 1
        self.outstanding += len(ids)

    def reset(self, mask: np.ndarray | None) -> None:
        """Reset every env (``mask`` None, with the seed) or the ended ones, then act on them."""
        c = self.c
        if mask is None:
            c._drain()
            obs, infos = self.envs.reset(seed=c.seed)
        else:
            obs, infos = self.envs.reset(options={"reset_mask": mask})
            c._needs_reset[mask] = False
        ids = np.asarray(infos["env_id"], dtype=np.int64)
        self.outstanding += (c.num_envs if mask is None else int(mask.sum())) - len(ids)
        self.act(ids, obs)

    def act_on_last(self, ids: np.ndarray) -> None:
        """Act on the envs ``ids`` from their last observations, a batch at a time."""
        bs, last = self.c.batch_size, self.c._host["next_observations"]
        for lo in range(0, len(ids), bs):
            chunk = ids[lo:lo + bs]
            self.act(chunk, last[chunk])

    def reset_held(self) -> None:
        """Reset the ended envs among those held, then act on all of them."""
        c = self.c
        waiting, self.held = np.concatenate(self.held), []
        mask = c._needs_reset & (self.cursor < c.steps)  # one that ended on its last row waits
        if mask.any():
            self.reset(mask)
            waiting = waiting[~mask[waiting]]
        self.act_on_last(waiting)

    def returned(self, obs: Any, rewards: np.ndarray, terminations: np.ndarray, truncations: np.ndarray,
                 infos: dict) -> None:
        """Record a returned batch; act again on the envs with rows left (or hold them)."""
        c, h = self.c, self.c._host
        ids = np.asarray(infos["env_id"], dtype=np.int64)
        self.outstanding -= len(ids)
        was = self.stepped[ids]
        steps = c._record(ids, was, self.cursor[ids] - 1, rewards, terminations, truncations)
        self.stepped[ids] = False
        self.batches.append((ids, steps, infos))
        go = self.cursor[ids] < c.steps
        if c.autoreset_mode is AutoresetMode.DISABLED:
            ended = was & (terminations | truncations)
            c._needs_reset[ids[ended]] = True
            if ended.any() or self.held:
                h["next_observations"][ids] = obs
                if go.any():
                    self.held.append(ids[go])
                return
        if go.all():
            self.act(ids, obs)
        else:
            h["next_observations"][ids[~go]] = obs[~go]
            if go.any():
                self.act(ids[go], obs[go])


def _numpy(x: Any) -> np.ndarray:
    """``x`` as a numpy array (a torch tensor is detached and brought to the host)."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def _row_info(infos: Mapping[str, Any], r: int) -> dict[str, Any]:
    """Row ``r`` of batched ``infos`` as the one env's info dict (keys whose ``_key`` mask is set)."""
    out = {}
    for key, value in infos.items():
        if key.startswith("_") or key == "env_id":
            continue
        mask = infos.get(f"_{key}")
        if mask is not None and not mask[r]:
            continue
        out[key] = _row_info(value, r) if isinstance(value, dict) else value[r]
    return out


def _step_infos(records: list, steps: int, n: int) -> list[dict[str, Any]]:
    """Per-step batched infos (N rows each) from async batches: each row moved to its env's step."""
    out: list[dict[str, Any]] = [{} for _ in range(steps)]
    for ids, rows, infos in records:
        for r, (i, t) in enumerate(zip(ids.tolist(), rows.tolist(), strict=True)):
            if t >= 0:
                info = _row_info(infos, r)
                if "final_info" in info and "final_obs" in info:  # SAME_STEP: the ended episode's first
                    add_info(out[t], {"final_obs": info.pop("final_obs"), "final_info": info.pop("final_info")},
                             i, n)
                add_info(out[t], info, i, n)
    return out

