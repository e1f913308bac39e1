"""Info batching: per-env info dicts into gymnasium's dict of arrays with ``_key`` masks.

The reference is gymnasium's own ``VectorEnv._add_info`` (what ``SyncVectorEnv`` uses), run on
the same per-env infos; some expectations are also spelled out by hand.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from helpers import assert_same
from vecenv.infos import InfoEntry, add_info, batch_infos

pytestmark = pytest.mark.timeout(30)


class _Reference(gym.vector.VectorEnv):
    """Just enough of a gymnasium VectorEnv to run its ``_add_info``."""

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs


def reference(entries: list[InfoEntry], n: int, rows: dict[int, int] | None = None) -> dict:
    """What gymnasium's SyncVectorEnv builds from the same reports (SAME_STEP order included)."""
    ref = _Reference(n)
    infos: dict = {}
    for entry in entries:
        row = entry.index if rows is None else rows[entry.index]
        if entry.ended:
            infos = ref._add_info(infos, {"final_obs": entry.final_obs, "final_info": entry.final_info}, row)
        infos = ref._add_info(infos, entry.info, row)
    return infos


SCALARS = {
    "py_int": (3, np.int64),
    "py_float": (2.5, np.float64),
    "py_bool": (True, np.bool_),
    "np_int8": (np.int8(-4), np.int8),
    "np_uint16": (np.uint16(9), np.uint16),
    "np_float32": (np.float32(1.5), np.float32),
    "np_int64": (np.int64(7), np.int64),
    "np_bool": (np.bool_(True), object),  # not a np.number: gymnasium keeps it as an object
    "string": ("done", object),
    "none": (None, object),
    "list": ([1, 2], object),
}


@pytest.mark.parametrize("name", list(SCALARS))
def test_scalar_types_match_gymnasium(name):
    value, dtype = SCALARS[name]
    entries = [InfoEntry(1, {"x": value}), InfoEntry(3, {"x": value})]
    got = batch_infos(entries, 4)
    assert_same(got, reference(entries, 4))
    assert set(got) == {"x", "_x"}
    assert got["x"].dtype == np.dtype(dtype) and got["x"].shape == (4,)
    assert got["_x"].dtype == np.bool_ and got["_x"].tolist() == [False, True, False, True]
    if dtype is object:
        assert got["x"][0] is None and got["x"][1] is value
    else:
        assert got["x"].tolist() == [0, value, 0, value]


def test_arrays_keep_shape_and_dtype():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.ones((2, 3), np.float32)
    entries = [InfoEntry(0, {"m": a}), InfoEntry(2, {"m": b, "z": np.array(5, np.int16)})]
    got = batch_infos(entries, 3)
    assert_same(got, reference(entries, 3))
    assert got["m"].shape == (3, 2, 3) and got["m"].dtype == np.float32
    assert np.array_equal(got["m"][0], a) and not got["m"][1].any() and np.array_equal(got["m"][2], b)
    a[0, 0] = 99.0
    assert got["m"][0, 0, 0] == 0.0, "array infos are copied into the batch"
    assert got["z"].shape == (3,) and got["z"].dtype == np.int16 and got["z"][2] == 5
    assert got["_z"].tolist() == [False, False, True]


def test_missing_keys_and_first_type_wins():
    entries = [
        InfoEntry(0, {"a": 1, "b": "x"}),
        InfoEntry(1, {}),
        InfoEntry(2, {"a": 2.75, "c": 0.5}),  # a float into the int array made for env 0: cast
    ]
    got = batch_infos(entries, 4)
    assert_same(got, reference(entries, 4))
    assert got["a"].dtype == np.int64 and got["a"].tolist() == [1, 0, 2, 0]
    assert got["_a"].tolist() == [True, False, True, False]
    assert got["b"].tolist() == ["x", None, None, None] and got["_b"].tolist() == [True, False, False, False]
    assert got["c"].tolist() == [0, 0, 0.5, 0] and got["_c"].tolist() == [False, False, True, False]
    assert batch_infos([], 4) == {}
    assert batch_infos([InfoEntry(0, {}), InfoEntry(1, {})], 2) == {}


def test_nested_dicts_are_batched_recursively():
    entries = [
        InfoEntry(0, {"episode": {"r": 1.5, "l": 10, "deep": {"tag": "a"}}}),
        InfoEntry(2, {"episode": {"r": -2.0, "l": 3}, "other": 1}),
        InfoEntry(3, {"episode": {}}),
    ]
    got = batch_infos(entries, 4)
    assert_same(got, reference(entries, 4))
    episode = got["episode"]
    assert got["_episode"].tolist() == [True, False, True, True]
    assert episode["r"].tolist() == [1.5, 0.0, -2.0, 0.0] and episode["r"].dtype == np.float64
    assert episode["_r"].tolist() == [True, False, True, False]
    assert episode["l"].dtype == np.int64 and episode["l"].tolist() == [10, 0, 3, 0]
    assert episode["deep"]["tag"].tolist() == ["a", None, None, None]
    assert episode["_deep"].tolist() == [True, False, False, False]
    assert episode["deep"]["_tag"].tolist() == [True, False, False, False]


def test_same_step_final_obs_and_final_info():
    obs_a = np.array([0.1, 0.2], np.float32)
    obs_b = {"pos": np.zeros(2), "name": "b"}
    entries = [
        InfoEntry(0, {"reset_note": 4}, True, obs_a, {"every_third": 3, "nested": {"level": 0.9}}),
        InfoEntry(1, {"every_third": 6}),
        InfoEntry(3, {}, True, obs_b, {}),
    ]
    got = batch_infos(entries, 4)
    assert_same(got, reference(entries, 4))
    # final_obs is always an object array: each env's last observation stays unbatched
    assert got["final_obs"].dtype == object and got["final_obs"].shape == (4,)
    assert got["final_obs"][0] is obs_a and got["final_obs"][3] is obs_b
    assert got["final_obs"][1] is None and got["final_obs"][2] is None
    assert got["_final_obs"].tolist() == [True, False, False, True]
    assert got["_final_info"].tolist() == [True, False, False, True]
    final_info = got["final_info"]
    assert final_info["every_third"].tolist() == [3, 0, 0, 0]
    assert final_info["_every_third"].tolist() == [True, False, False, False]
    assert final_info["nested"]["level"].tolist() == [0.9, 0, 0, 0]
    # the new episode's reset info sits at the top level, beside the step infos of other envs
    assert got["reset_note"].tolist() == [4, 0, 0, 0] and got["_reset_note"].tolist() == [True, False, False, False]
    assert got["every_third"].tolist() == [0, 6, 0, 0]


def test_final_obs_key_in_a_plain_info_is_an_object_array():
    entries = [InfoEntry(1, {"final_obs": np.arange(3)})]
    got = batch_infos(entries, 2)
    assert_same(got, reference(entries, 2))
    assert got["final_obs"].dtype == object and got["final_obs"][0] is None


def test_rows_map_env_indices_to_batch_rows():
    """Async batches: the envs in a batch are any subset, in the order they became ready."""
    obs = np.array([1.0])
    entries = [
        InfoEntry(7, {"a": 1}),
        InfoEntry(2, {"a": 2, "n": {"k": "x"}}),
        InfoEntry(5, {"b": 0.5}, True, obs, {"f": True}),
    ]
    rows = {5: 0, 7: 1, 2: 2, 4: 3}  # env 4 is in the batch but reported nothing
    got = batch_infos(entries, 4, rows)
    assert_same(got, reference(entries, 4, rows))
    assert got["a"].tolist() == [0, 1, 2, 0] and got["_a"].tolist() == [False, True, True, False]
    assert got["n"]["k"].tolist() == [None, None, "x", None]
    assert got["b"].tolist() == [0.5, 0, 0, 0]
    assert got["final_obs"][0] is obs and got["_final_obs"].tolist() == [True, False, False, False]
    assert got["final_info"]["f"].tolist() == [True, False, False, False]
    with pytest.raises(KeyError):
        batch_infos([InfoEntry(9, {"a": 1})], 4, rows)  # an env that is not in the batch


def test_add_info_merges_into_existing_batch():
    infos: dict = {}
    assert add_info(infos, {"x": 1}, 0, 3) is infos
    add_info(infos, {"x": 5, "y": {"z": 2.0}}, 2, 3)
    ref = _Reference(3)
    want = ref._add_info(ref._add_info({}, {"x": 1}, 0), {"x": 5, "y": {"z": 2.0}}, 2)
    assert_same(infos, want)
    assert infos["x"].tolist() == [1, 0, 5]


def test_entries_are_not_modified():
    info = {"a": 1, "n": {"b": 2}}
    final_info = {"c": 3}
    entry = InfoEntry(0, info, True, np.zeros(2), final_info)
    batch_infos([entry], 2)
    assert info == {"a": 1, "n": {"b": 2}} and final_info == {"c": 3}
