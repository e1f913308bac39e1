"""Bool arrays of a fixed shape in infos (action masks, contact flags) travel as columns of the
process backend's shared memory, and come out as gymnasium's SyncVectorEnv batches them and as
SB3's per-env dicts hold them."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

import vecenv
from helpers import assert_same
from test_infos_shared import assert_runs_as_gymnasium
from vecenv.infos import InfoColumns, InfoEntry, InfoRows, entries_as_columns, fits_row
from vecenv.infos.codec import Schema, signature

pytestmark = pytest.mark.timeout(120)


class MaskEnv(gym.Env):
    """Each step's info: a legal-action mask, a 2x2 bool grid and a float, varying by env and
    step; episodes end when ``episode`` is set."""

    observation_space = spaces.Box(-10.0, 10.0, (2,), np.float32)
    action_space = spaces.Discrete(4)

    def __init__(self, index: int = 0, episode: int | None = 5) -> None:
        self.index, self.episode, self.t = index, episode, 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {"legal": np.ones(4, np.bool_)}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.t += 1
        bits = (self.t * 7 + self.index * 3) % 16
        info = {"legal": np.array([bits >> k & 1 for k in range(4)], np.bool_),
                "grid": np.array([[bits % 2, 0], [1, bits % 3 == 0]], np.bool_), "x": 0.5 * self.t}
        ended = self.episode is not None and self.t >= self.episode + self.index % 2
        return np.full(2, self.t, np.float32), float(action), ended, False, info


def mask_fns(n: int, episode: int | None = 5) -> list:
    return [lambda i=i: MaskEnv(i, episode) for i in range(n)]


def test_a_bool_array_schema_reads_as_columns_and_other_arrays_do_not() -> None:
    mask = {"legal": np.array([True, False, True]), "x": 1.0}
    schema = Schema(signature(mask, []))
    assert schema.dtype is not None and schema.dtype["legal"].shape == (3,)
    assert schema.dtype.itemsize == schema.struct.size  # the record view lies on the packed rows
    assert Schema(signature({"a": np.zeros(3, np.float32)}, [])).dtype is None
    assert Schema(signature({"a": np.array(True)}, [])).dtype is None  # a 0-d array is no column
    assert fits_row(mask)


def test_an_entry_whose_mask_has_another_shape_or_dtype_does_not_join_the_columns() -> None:
    like = InfoColumns(np.array([0]), ("legal",), (np.ndarray,),
                       np.array([(np.ones(3, np.bool_),)], np.dtype([("legal", np.bool_, (3,))])))
    assert entries_as_columns([InfoEntry(1, {"legal": np.zeros(3, np.bool_)})], like) is not None
    assert entries_as_columns([InfoEntry(1, {"legal": np.zeros(4, np.bool_)})], like) is None
    assert entries_as_columns([InfoEntry(1, {"legal": np.zeros(3, np.float64)})], like) is None


def test_masks_travel_through_shared_memory_as_columns() -> None:
    with vecenv.ProcessVectorEnv(mask_fns(4), num_workers=2) as envs:
        envs.reset(seed=0)
        for t in range(3):
            *_, parts = envs.step_entries(np.full(4, t % 4))
            assert parts and all(type(part) is InfoColumns for part in parts), parts
            for part in parts:
                assert part.types[part.keys.index("legal")] is np.ndarray
                assert part.records["legal"].shape == (len(part.envs), 4)
    assert InfoRows.nbytes(MaskEnv.observation_space, 4) > 0


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED])
@pytest.mark.parametrize("inline", [False, True])
def test_masks_batch_as_gymnasium_batches_them(mode: AutoresetMode, inline: bool) -> None:
    ours = vecenv.ProcessVectorEnv(mask_fns(5), num_workers=2, inline=inline, autoreset_mode=mode)
    assert_runs_as_gymnasium(mask_fns(5), ours, mode)


def test_sb3_per_env_infos_hold_each_envs_own_mask() -> None:
    """vecenv.sb3's SubprocVecEnv gives each env's mask as its own bool array, equal to env
    ``i``'s row of gymnasium's batched infos (with SB3's own key), and kept arrays do not change
    at later steps."""
    import vecenv.sb3 as vsb3

    n = 4
    ref = gym.vector.SyncVectorEnv(mask_fns(n, None))
    ours = vsb3.SubprocVecEnv(mask_fns(n, None), start_method="fork")
    try:
        ref.reset(seed=0)
        ours.seed(0)
        ours.reset()
        kept: list = []
        for t in range(6):
            actions = np.full(n, t % 4)
            *_, batched = ref.step(actions)
            *_, per_env = ours.step(actions)
            for i, info in enumerate(per_env):
                expected = {k: v[i] for k, v in batched.items() if not k.startswith("_") and batched[f"_{k}"][i]}
                expected["TimeLimit.truncated"] = False  # SB3's key, on every env's info
                assert list(info) == list(expected), (t, i)
                assert_same(info, expected, f"step {t} env {i}")
                assert type(info["legal"]) is np.ndarray and info["legal"].dtype == np.bool_
            kept.append((per_env[0]["legal"], per_env[0]["legal"].copy()))
        for array, copy in kept:
            assert np.array_equal(array, copy)
    finally:
        ref.close()
        ours.close()
