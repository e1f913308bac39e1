"""Batch buffers: one array per leaf of any Gymnasium space, in gymnasium's batched layout.

The reference layout is gymnasium's own ``create_empty_array``/``concatenate``: a buffer that
holds the same items must read back the same structure, dtypes, shapes and values.
"""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from helpers import assert_same
from vecenv.spaces import BatchBuffer, StepBuffers, is_fixed_leaf
from vecenv.spaces.buffers import aligned

pytestmark = pytest.mark.timeout(30)


class Coin(spaces.Space):
    """A user's own space (neither fixed-shape nor Dict/Tuple): stored as objects."""

    def __init__(self) -> None:
        super().__init__(None, None)

    def sample(self, mask=None, probability=None) -> str:
        return "heads" if self.np_random.random() < 0.5 else "tails"

    def contains(self, x) -> bool:
        return x in ("heads", "tails")


def nested_space() -> spaces.Dict:
    return spaces.Dict(
        {
            "pos": spaces.Box(-1.0, 1.0, (3,), np.float32),
            "count": spaces.Discrete(50),
            "inner": spaces.Tuple(
                (
                    spaces.MultiDiscrete([3, 4]),
                    spaces.Dict({"bits": spaces.MultiBinary(2), "name": spaces.Text(6)}),
                )
            ),
        }
    )


SPACES = {
    "box_f32": spaces.Box(-1.0, 1.0, (3,), np.float32),
    "box_scalar_f64": spaces.Box(0.0, 1.0, (), np.float64),
    "box_image_u8": spaces.Box(0, 255, (2, 3, 3), np.uint8),
    "discrete": spaces.Discrete(5),
    "discrete_start": spaces.Discrete(4, start=-2),
    "discrete_int32": spaces.Discrete(4, dtype=np.int32),
    "multidiscrete": spaces.MultiDiscrete([3, 4]),
    "multidiscrete_2d": spaces.MultiDiscrete([[2, 3], [4, 5]]),
    "multibinary": spaces.MultiBinary(4),
    "multibinary_2d": spaces.MultiBinary([2, 2]),
    "dict": spaces.Dict({"a": spaces.Discrete(3), "b": spaces.Box(0.0, 1.0, (2,))}),
    "tuple": spaces.Tuple((spaces.Discrete(3), spaces.MultiBinary(3))),
    "nested": nested_space(),
    "text": spaces.Text(8),
    "sequence": spaces.Sequence(spaces.Discrete(3)),
    "custom": Coin(),
    "tuple_of_custom": spaces.Tuple((Coin(), spaces.Box(-1.0, 1.0, (2,), np.float32))),
}


def samples(space: spaces.Space, n: int, seed: int = 0) -> list:
    space.seed(seed)
    return [space.sample() for _ in range(n)]


def leaf_values(space: spaces.Space, value) -> list:
    """The leaves of a batched ``value`` of ``space``, in the buffer's leaf order."""
    if type(space) is spaces.Dict:
        return [leaf for key, sub in space.spaces.items() for leaf in leaf_values(sub, value[key])]
    if type(space) is spaces.Tuple:
        return [leaf for sub, part in zip(space.spaces, value, strict=True) for leaf in leaf_values(sub, part)]
    return [value]


# ---------------------------------------------------------------------------------------- layout
@pytest.mark.parametrize("name", list(SPACES))
def test_buffer_reads_back_gymnasium_batched_layout(name):
    space, n = SPACES[name], 3
    items = samples(space, n)
    buf = BatchBuffer(space, n)
    assert buf.n == n
    for i, item in enumerate(items):
        buf.write(i, item)
    want = concatenate(space, items, create_empty_array(space, n))
    assert_same(buf.read(), want, name)
    assert_same(buf.read(copy=False), want, name)
    # item(i) gives what gymnasium's iterate() gives sub-env i (e.g. a numpy scalar for Box(()))
    for i, item in enumerate(iterate(batch_space(space, n), want)):
        assert_same(buf.item(i), item, f"{name}.item({i})")


@pytest.mark.parametrize(
    "name, shape, dtype",
    [
        ("box_f32", (3,), np.float32),
        ("box_scalar_f64", (), np.float64),
        ("box_image_u8", (2, 3, 3), np.uint8),
        ("discrete", (), np.int64),
        ("discrete_start", (), np.int64),
        ("discrete_int32", (), np.int32),
        ("multidiscrete", (2,), np.int64),
        ("multidiscrete_2d", (2, 2), np.int64),
        ("multibinary", (4,), np.int8),
        ("multibinary_2d", (2, 2), np.int8),
    ],
)
def test_fixed_leaf_shape_and_dtype(name, shape, dtype):
    space = SPACES[name]
    assert is_fixed_leaf(space)
    buf = BatchBuffer(space, 5)
    (leaf,) = buf.leaves
    assert leaf.fixed and leaf.path == ()
    assert leaf.array.shape == (5, *shape)
    assert leaf.array.dtype == np.dtype(dtype)
    assert not buf.has_objects
    assert buf.get_objects() is None
    # the same as gymnasium's batched array for this space
    ref = create_empty_array(space, 5)
    assert (ref.shape, ref.dtype) == (leaf.array.shape, leaf.array.dtype)


def test_nested_dict_tuple_leaves_paths_and_kinds():
    buf = BatchBuffer(nested_space(), 4)
    got = [(leaf.path, leaf.fixed, leaf.array.shape, leaf.array.dtype) for leaf in buf.leaves]
    # gymnasium's Dict sorts its keys; Tuple keeps its order
    assert got == [
        (("count",), True, (4,), np.dtype(np.int64)),
        (("inner", 0), True, (4, 2), np.dtype(np.int64)),
        (("inner", 1, "bits"), True, (4, 2), np.dtype(np.int8)),
        (("inner", 1, "name"), False, (4,), np.dtype(object)),
        (("pos",), True, (4, 3), np.dtype(np.float32)),
    ]
    assert [leaf.name for leaf in buf.leaves][1:4] == ["['inner'][0]", "['inner'][1]['bits']", "['inner'][1]['name']"]
    assert buf.has_objects
    assert isinstance(buf.leaves[3].space, spaces.Text)
    assert not is_fixed_leaf(spaces.Text(3)) and not is_fixed_leaf(nested_space())


def test_custom_space_leaves_are_object_arrays():
    space = SPACES["tuple_of_custom"]
    buf = BatchBuffer(space, 3)
    coin, box = buf.leaves
    assert not coin.fixed and coin.array.dtype == object and coin.array.shape == (3,)
    assert box.fixed and box.array.dtype == np.float32
    assert coin.array.tolist() == [None, None, None]
    buf.write(1, ("tails", np.array([0.5, -0.5], np.float32)))
    out = buf.read()
    assert out[0] == (None, "tails", None)  # custom leaves read as a tuple of items
    assert out[1][1].tolist() == [0.5, -0.5]


# ---------------------------------------------------------------------------------------- memory
def test_step_buffers_arrays_and_dtypes():
    obs_space, act_space = nested_space(), spaces.Tuple((spaces.Discrete(3), spaces.Box(-1, 1, (2,))))
    sb = StepBuffers(obs_space, act_space, 6)
    assert sb.n == 6
    assert (sb.rewards.shape, sb.rewards.dtype) == ((6,), np.float64)
    assert (sb.terminations.shape, sb.terminations.dtype) == ((6,), np.bool_)
    assert (sb.truncations.shape, sb.truncations.dtype) == ((6,), np.bool_)
    assert sb.observations.space is obs_space and sb.actions.space is act_space
    assert [leaf.path for leaf in sb.actions.leaves] == [(0,), (1,)]


def test_step_buffers_in_one_memory_block_do_not_overlap():
    obs_space = nested_space()
    act_space = spaces.Tuple((spaces.Discrete(3), spaces.Box(-1, 1, (2,), np.float32)))
    n = 5
    size = StepBuffers.nbytes(obs_space, act_space, n)
    assert size == aligned(BatchBuffer.nbytes(obs_space, n) + BatchBuffer.nbytes(act_space, n) + 10 * n) + 24
    memory = bytearray(size)
    sb = StepBuffers(obs_space, act_space, n, memory=memory)
    base = np.frombuffer(memory, np.uint8)
    fixed = [leaf.array for leaf in sb.observations.leaves + sb.actions.leaves if leaf.fixed]
    flags = [sb.rewards, sb.terminations, sb.truncations, sb.slot_cell]
    for array in fixed + flags:
        assert np.shares_memory(array, base), "fixed arrays must live in the given memory"
        assert array.ctypes.data % array.dtype.alignment == 0
    for leaf in sb.observations.leaves + sb.actions.leaves:
        if leaf.fixed:  # each leaf starts on a 64-byte boundary of the block
            assert (leaf.array.ctypes.data - base.ctypes.data) % 64 == 0
        else:
            assert not np.shares_memory(leaf.array, base)
    # distinct values in every array survive: no two arrays overlap
    for k, array in enumerate(fixed):
        array[...] = k + 1
    sb.rewards[...] = -2.5
    sb.terminations[...] = True
    sb.truncations[...] = False
    sb.slot_cell[:] = 0
    for k, array in enumerate(fixed):
        assert (array == k + 1).all(), f"array {k} was overwritten"
    assert (sb.rewards == -2.5).all() and sb.terminations.all() and not sb.truncations.any()
    # and a second StepBuffers over the same block sees the same values (a worker's side)
    other = StepBuffers(obs_space, act_space, n, memory=memory)
    assert (other.rewards == -2.5).all()
    assert_same(other.observations.read()["pos"], sb.observations.read()["pos"])


def test_batch_buffer_memory_offset():
    space = spaces.Dict({"a": spaces.Discrete(3), "b": spaces.Box(0, 1, (7,), np.float32)})
    n = 3
    size = BatchBuffer.nbytes(space, n)
    assert size % 64 == 0 and size >= n * 8 + n * 7 * 4
    memory = bytearray(64 + size)
    buf = BatchBuffer(space, n, memory, offset=64)
    base = np.frombuffer(memory, np.uint8)
    buf.write(0, {"a": 2, "b": np.ones(7, np.float32)})
    assert not base[:64].any(), "nothing is written before the offset"
    assert base[64:].any()


# ---------------------------------------------------------------------------------------- rows
def test_rows_views_write_into_the_parent():
    obs_space, act_space = nested_space(), spaces.MultiDiscrete([3, 2])
    sb = StepBuffers(obs_space, act_space, 5)
    view = sb.rows(2, 4)
    assert view.n == 2 and view.observations.n == 2 and view.actions.n == 2
    item = samples(obs_space, 1, seed=5)[0]
    view.observations.write(1, item)  # row 1 of the view is row 3 of the parent
    assert_same(sb.observations.item(3), view.observations.item(1))
    assert sb.observations.item(3)["inner"][1]["name"] == item["inner"][1]["name"]
    assert np.array_equal(sb.observations.read()["pos"][3], item["pos"])
    assert (sb.observations.read()["pos"][[0, 1, 2, 4]] == 0).all()
    view.rewards[0] = 7.0
    view.terminations[1] = True
    view.truncations[0] = True
    view.actions.assign(np.array([[2, 1], [1, 0]]))
    assert sb.rewards.tolist() == [0, 0, 7.0, 0, 0]
    assert sb.terminations.tolist() == [False, False, False, True, False]
    assert sb.truncations.tolist() == [False, False, True, False, False]
    assert sb.actions.read().tolist() == [[0, 0], [0, 0], [2, 1], [1, 0], [0, 0]]
    # a view of a view is still the parent's memory
    inner = view.rows(1, 2)
    inner.rewards[0] = 9.0
    assert sb.rewards[3] == 9.0


def test_rows_of_a_single_leaf_buffer():
    buf = BatchBuffer(spaces.Box(-1, 1, (2,), np.float32), 4)
    view = buf.rows(1, 3)
    view.write(0, np.array([0.25, 0.5], np.float32))
    assert buf.read()[1].tolist() == [0.25, 0.5]
    assert view.read().shape == (2, 2)
    assert np.shares_memory(view.read(copy=False), buf.read(copy=False))


def test_rows_of_object_leaves_share_the_parent_rows():
    buf = BatchBuffer(spaces.Text(5), 4)
    view = buf.rows(1, 3)
    view.write(1, "abc")
    assert buf.read() == (None, None, "abc", None)
    assert view.get_objects()[0].tolist() == [None, "abc"]


# ---------------------------------------------------------------------------------------- reading
@pytest.mark.parametrize("name", ["box_f32", "discrete", "dict", "tuple", "nested"])
def test_read_copy_is_a_snapshot_and_no_copy_is_a_view(name):
    space = SPACES[name]
    first, second = samples(space, 2, seed=1), samples(space, 2, seed=2)
    buf = BatchBuffer(space, 2)
    for i, item in enumerate(first):
        buf.write(i, item)
    copied, viewed = buf.read(copy=True), buf.read(copy=False)
    before = concatenate(space, first, create_empty_array(space, 2))
    after = concatenate(space, second, create_empty_array(space, 2))
    for i, item in enumerate(second):
        buf.write(i, item)
    # fixed leaves: the copy keeps the old values, the view shows the new ones
    leaves = [leaf_values(space, v) for v in (copied, viewed, before, after)]
    for got_copy, got_view, old, new in zip(*leaves, strict=True):
        if isinstance(old, tuple):  # object leaves read as a tuple of items: never a view
            assert got_copy == got_view == old
            continue
        assert np.array_equal(got_copy, old)
        assert np.array_equal(got_view, new)
        assert not np.shares_memory(got_copy, got_view)
    assert_same(buf.read(), after)


def test_read_rows_selects_orders_and_copies():
    space = nested_space()
    items = samples(space, 4, seed=3)
    buf = BatchBuffer(space, 4)
    for i, item in enumerate(items):
        buf.write(i, item)
    got = buf.read_rows([3, 0])
    want = concatenate(space, [items[3], items[0]], create_empty_array(space, 2))
    assert_same(got, want)
    assert got["inner"][1]["name"] == (items[3]["inner"][1]["name"], items[0]["inner"][1]["name"])
    buf.write(3, samples(space, 1, seed=9)[0])
    assert_same(got, want)  # a copy: later writes do not reach it
    assert_same(buf.read_rows(np.array([1])), concatenate(space, [items[1]], create_empty_array(space, 1)))
    single = BatchBuffer(spaces.Discrete(9), 3)
    for i in range(3):
        single.write(i, 5 + i)
    rows = single.read_rows([2, 2, 0])
    assert rows.tolist() == [7, 7, 5] and rows.dtype == np.int64
    single.write(2, 0)
    assert rows.tolist() == [7, 7, 5]


# ---------------------------------------------------------------------------------------- objects
def test_get_and_set_objects_ship_object_leaves():
    space = spaces.Dict({"text": spaces.Text(5), "x": spaces.Discrete(3), "coin": Coin()})
    worker, caller = BatchBuffer(space, 3), BatchBuffer(space, 3)
    for i, (text, coin) in enumerate([("a", "heads"), ("bb", "tails"), ("ccc", "heads")]):
        worker.write(i, {"text": text, "x": i, "coin": coin})
    shipped = worker.get_objects()
    assert [a.tolist() for a in shipped] == [["heads", "tails", "heads"], ["a", "bb", "ccc"]]
    worker.write(0, {"text": "zz", "x": 0, "coin": "tails"})
    assert shipped[1][0] == "a", "get_objects returns copies"
    caller.set_objects(shipped)
    assert caller.read()["text"] == ("a", "bb", "ccc")
    assert caller.read()["x"].tolist() == [0, 0, 0], "set_objects leaves fixed leaves alone"
    caller.set_objects([np.array(["tails"], object), np.array(["q"], object)], rows=[1])
    assert caller.read()["text"] == ("a", "q", "ccc")
    assert caller.read()["coin"] == ("heads", "tails", "heads")
    caller.set_objects(None)  # nothing shipped: nothing changes
    assert caller.read()["text"] == ("a", "q", "ccc")


# ---------------------------------------------------------------------------------------- assign
def test_assign_full_batch_and_rows():
    buf = BatchBuffer(spaces.Discrete(3), 4)
    buf.assign(np.array([2, 1, 0, 2]))
    assert buf.read().tolist() == [2, 1, 0, 2]
    buf.assign([0, 0], rows=[3, 1])
    assert buf.read().tolist() == [2, 0, 0, 0]
    buf.assign(np.array([True, False, True, True]))  # bools are integers here
    assert buf.read().tolist() == [1, 0, 1, 1]
    box = BatchBuffer(spaces.Box(-1, 1, (2,), np.float32), 2)
    box.assign([[1, 0], [0, 1]])  # ints into a float leaf, from a list
    assert box.read().dtype == np.float32 and box.read().tolist() == [[1, 0], [0, 1]]
    box.assign(np.array([[0.5, 0.25]]), rows=[1])
    assert box.read().tolist() == [[1, 0], [0.5, 0.25]]


def test_assign_rows_of_the_buffers_dtype_forgets_only_those_rows_as_passed():
    """Rows given an array of the buffer's dtype and shape are stored as they are (the async-batch
    path), and only those rows forget the items kept as the caller passed them."""
    box = BatchBuffer(spaces.Box(-1, 1, (2,), np.float32), 3)
    box.assign([[1, 0], [0, 1], [1, 1]])  # a list: each row keeps its item as passed
    assert sorted(box.unconverted) == [0, 1, 2]
    box.assign(np.array([[0.5, 0.25], [0.0, 0.5]], np.float32), rows=np.array([2, 0]))
    assert box.read().tolist() == [[0.0, 0.5], [0, 1], [0.5, 0.25]]
    assert sorted(box.unconverted) == [1]
    with pytest.raises(ValueError, match=r"expected shape \(1, 2\)"):
        box.assign(np.zeros((2, 2), np.float32), rows=[0])  # the buffer's dtype, not its shape
    assert box.read().tolist() == [[0.0, 0.5], [0, 1], [0.5, 0.25]], "a refused batch writes nothing"


def test_assign_structured_batch():
    space = spaces.Tuple((spaces.Discrete(3), spaces.Dict({"v": spaces.Box(-1, 1, (2,)), "t": spaces.Text(4)})))
    buf = BatchBuffer(space, 2)
    buf.assign((np.array([1, 2]), {"v": np.ones((2, 2)), "t": ["ab", "c"]}))
    assert_same(buf.read(), (np.array([1, 2]), {"t": ("ab", "c"), "v": np.ones((2, 2), np.float32)}))
    buf.assign(([0], {"v": [[0.5, 0.5]], "t": ("z",)}), rows=[0])
    out = buf.read()
    assert out[0].tolist() == [0, 2] and out[1]["t"] == ("z", "c")
    assert out[1]["v"].tolist() == [[0.5, 0.5], [1, 1]]


@pytest.mark.parametrize(
    "batch, err, pattern",
    [
        (np.array([0, 1]), ValueError, r"^actions: expected shape \(3,\) \(3 envs x Discrete\(2\)\), got shape \(2,\)$"),
        ([0, 1], ValueError, r"got shape \(2,\) from a list$"),
        (np.zeros((3, 2), int), ValueError, r"expected shape \(3,\).*got shape \(3, 2\)"),
        (np.array([0.5, 1.0, 0.0]), TypeError, r"^actions: expected integer values for Discrete\(2\) \(dtype int64\), got dtype float64$"),
        (["a", "b", "c"], TypeError, r"expected integer values.*got dtype <U1"),
        ({"x": [0, 1, 2]}, ValueError, r"got shape \(\) from a dict"),
        ([[0, 1], [1]], ValueError, r"^actions: expected an array of shape \(3,\) for Discrete\(2\), got \[\[0, 1\], \[1\]\]"),
    ],
)
def test_assign_rejects_bad_discrete_actions(batch, err, pattern):
    buf = BatchBuffer(spaces.Discrete(2), 3)
    buf.assign(np.array([1, 1, 1]))
    with pytest.raises(err, match=pattern):
        buf.assign(batch)
    assert buf.read().tolist() == [1, 1, 1], "a refused batch writes nothing"


def test_assign_rejects_non_numeric_for_float_leaves():
    buf = BatchBuffer(spaces.Box(-1, 1, (2,), np.float32), 2)
    with pytest.raises(TypeError, match=r"expected numeric values for Box\(.*\) \(dtype float32\), got dtype <U1"):
        buf.assign([["a", "b"], ["c", "d"]])
    with pytest.raises(ValueError, match=r"expected shape \(2, 2\)"):
        buf.assign(np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"expected shape \(1, 2\)"):
        buf.assign(np.zeros((2, 2)), rows=[0])


def test_assign_names_the_failing_leaf_and_writes_nothing():
    space = spaces.Dict(
        {"move": spaces.Discrete(3), "aim": spaces.Tuple((spaces.Box(-1, 1, (2,)), spaces.MultiBinary(2)))}
    )
    buf = BatchBuffer(space, 2)
    good = {"move": np.array([1, 2]), "aim": (np.zeros((2, 2)), np.ones((2, 2), np.int8))}
    buf.assign(good)
    snapshot = buf.read()
    bad_cases = [
        ([1, 2], TypeError, r"^acts: expected a dict with keys \['aim', 'move'\], got list$"),
        ({"move": [0, 0]}, ValueError, r"^acts: expected a dict with keys \['aim', 'move'\], got keys \['move'\]$"),
        ({**good, "aim": np.zeros((2, 2))}, TypeError, r"^acts\['aim'\]: expected a tuple of 2 parts, got ndarray$"),
        ({**good, "aim": (np.zeros((2, 2)),) * 3}, TypeError, r"expected a tuple of 2 parts, got length 3$"),
        (
            {"move": np.array([0, 0]), "aim": (np.zeros((2, 3)), good["aim"][1])},
            ValueError,
            r"^acts\['aim'\]\[0\]: expected shape \(2, 2\)",
        ),
        (
            {"move": np.array([0, 0]), "aim": (np.zeros((2, 2)), np.full((2, 2), 0.5))},
            TypeError,
            r"^acts\['aim'\]\[1\]: expected integer values for MultiBinary\(2\)",
        ),
    ]
    for batch, err, pattern in bad_cases:
        with pytest.raises(err, match=pattern):
            buf.assign(batch, what="acts")
        assert_same(buf.read(), snapshot)  # the leaves checked before the bad one are untouched


def test_assign_object_leaf_needs_one_item_per_row():
    buf = BatchBuffer(spaces.Text(4), 3)
    with pytest.raises(ValueError, match=r"^actions: expected a sequence of 3 items of Text\(.*\), got 2 items$"):
        buf.assign(["a", "b"])
    with pytest.raises(ValueError, match=r"expected a sequence of 3 items .*, got int$"):
        buf.assign(5)
    buf.assign(("a", "b", "c"))
    assert buf.read() == ("a", "b", "c")
    buf.assign(["z"], rows=[1])
    assert buf.read() == ("a", "z", "c")


@pytest.mark.parametrize("batch, given", [("abc", "str"), ({"a": 1, "b": 2, "c": 3}, "dict")])
def test_assign_object_leaf_error_names_a_non_sequence_type(batch, given):
    buf = BatchBuffer(spaces.Text(4), 3)
    with pytest.raises(ValueError, match=rf"expected a sequence of 3 items of Text\(.*\), got (a |an )?{given}\b"):
        buf.assign(batch)
