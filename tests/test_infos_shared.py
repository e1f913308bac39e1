"""Infos that travel through shared memory (the process backend) give exactly what gymnasium's
SyncVectorEnv and SB3's DummyVecEnv give: the same keys in the same order, dtypes, masks, values
and Python types, in every autoreset mode, for every kind of value an info can hold, including
keys that appear late, keys that change type, and values that cannot go in shared memory.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from helpers import (
    assert_same,
    assert_same_infos,
    assert_same_runs,
    backends_under_test,
    make_backend,
    use_backend,
)
from vecenv.infos import (
    IN_ROWS,
    InfoColumns,
    InfoEntry,
    InfoReader,
    InfoRows,
    InfoWriter,
    fits_row,
    why_not_shared,
)

pytestmark = pytest.mark.timeout(120)

STEPS = 40


class InfoHeavyEnv(gym.Env):
    """An env whose infos hold every kind of value, varying by step and by env."""

    observation_space = spaces.Box(-10.0, 10.0, (3,), np.float32)
    action_space = spaces.Discrete(3)

    def __init__(self, index: int = 0, episode: int = 6, big: bool = False) -> None:
        self.index, self.episode, self.t, self.total, self.big = index, episode, 0, 0, big

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {"reset_count": self.total, "start": np.float32(self.index)}

    def _obs(self) -> np.ndarray:
        return np.full(3, self.index + 0.25 * self.t, dtype=np.float32)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.t += 1
        self.total += 1
        t, total = self.t, self.total
        info: dict[str, Any] = {
            "py_float": 0.5 * total, "py_int": total, "py_bool": total % 2 == 0,
            "np_f32": np.float32(total / 3), "np_i16": np.int16(-total), "np_u8": np.uint8(total % 200),
            "np_f64": np.float64(total * 1.25), "np_bool": np.bool_(total % 3 == 0),
            "arr": np.arange(3, dtype=np.float32) * total, "grid": np.full((2, 2), total, dtype=np.int32),
            "nested": {"a": float(total), "b": np.int64(total), "deeper": {"c": total % 2 == 1}},
        }
        if total > 7:
            info["late"] = 1.5 * total  # a key that appears late
        info["changing"] = total if total % 2 else float(total)  # int, then float, then int...
        if total % 7 == 0:
            info["msg"] = f"step {total}"  # a string: not in shared memory
        if self.big and total % 11 == 0:
            info["big"] = 2**70  # beyond int64: not in shared memory (gymnasium cannot batch it)
        if self.index % 2:
            info["odd_only"] = np.float32(self.index)
        terminated = t == self.episode
        truncated = t == self.episode - 2 and self.index == 1
        return self._obs(), float(action), terminated, truncated, info


def env_fns(n: int, big: bool = False) -> list:
    return [lambda i=i: InfoHeavyEnv(i, big=big) for i in range(n)]


def run(venv: Any, n: int) -> list:
    out = [venv.reset(seed=list(range(n)))]
    for t in range(STEPS):
        out.append(venv.step(np.array([(t + i) % 3 for i in range(n)])))
    return out


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED])
@pytest.mark.parametrize("backend", backends_under_test())
def test_info_heavy_env_matches_gymnasium(request: Any, backend: str, mode: AutoresetMode) -> None:
    use_backend(request, backend)
    kwargs = {"num_workers": 2} if backend != "serial" else {}
    assert_runs_as_gymnasium(env_fns(5), make_backend(backend, env_fns(5), autoreset_mode=mode, **kwargs), mode)


def assert_runs_as_gymnasium(fns: list, ours: Any, mode: AutoresetMode) -> None:
    """``ours`` (built on ``fns``) gives what gymnasium's SyncVectorEnv gives; closes both."""
    n = len(fns)
    ref = gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)
    runner = run_disabled if mode is AutoresetMode.DISABLED else run
    try:
        expected, got = runner(ref, n), runner(ours, n)
    finally:
        ref.close()
        ours.close()
    assert_same_runs(got, expected)


def run_disabled(venv: Any, n: int) -> list:
    out = [venv.reset(seed=list(range(n)))]
    for t in range(STEPS):
        result = venv.step(np.array([(t + i) % 3 for i in range(n)]))
        out.append(result)
        ended = result[2] | result[3]
        if ended.any():
            out.append(venv.reset(options={"reset_mask": ended}))
    return out


@pytest.mark.parametrize("cls", ["DummyVecEnv", "SubprocVecEnv"])
def test_sb3_infos_keep_each_value_type(cls: str) -> None:
    """SB3's per-env infos: the exact Python and numpy types the env returned (a float stays a
    float, an np.float32 an np.float32), terminal_observation included."""
    sv = pytest.importorskip("stable_baselines3.common.vec_env")
    import vecenv.sb3 as vsb3

    n = 4
    kwargs = {"start_method": "fork"} if cls == "SubprocVecEnv" else {}
    theirs = sv.DummyVecEnv(env_fns(n, big=True))
    ours = getattr(vsb3, cls)(env_fns(n, big=True), **kwargs)
    try:
        for venv in (theirs, ours):
            venv.seed(3)
        assert_same(ours.reset(), theirs.reset())
        for t in range(STEPS):
            actions = np.array([(t + i) % 3 for i in range(n)])
            a, b = ours.step(actions), theirs.step(actions)
            assert_same(a[:3], b[:3], f"step {t}")
            for i, (mine, their) in enumerate(zip(a[3], b[3], strict=True)):
                assert list(mine) == list(their), (t, i)
                assert_exact(mine, their, f"step {t} env {i}")
    finally:
        ours.close()
        theirs.close()


class ScalarInfoEnv(gym.Env):
    """Infos of flat scalars only, as MuJoCo's: a full step's come back as column chunks."""

    observation_space = spaces.Box(-10.0, 10.0, (3,), np.float32)
    action_space = spaces.Discrete(3)

    def __init__(self, index: int = 0) -> None:
        self.index, self.t, self.total = index, 0, 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.full(3, self.index, dtype=np.float32), {"reset_count": self.total}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.t += 1
        self.total += 1
        info = {"x_position": 0.5 * self.total + self.index, "reward_run": np.float32(self.total / 3),
                "count": self.total, "flag": self.total % 2 == 0}
        obs = np.full(3, self.index + 0.25 * self.t, dtype=np.float32)
        return obs, float(action), self.t >= 5 + self.index, False, info


def test_sb3_infos_from_shared_memory_are_new_dicts_of_the_env_types(monkeypatch: pytest.MonkeyPatch) -> None:
    """vecenv.sb3.SubprocVecEnv builds SB3's per-env infos straight from the column chunks: the
    values and exact types of SB3's DummyVecEnv, a new dict per env and step (one kept from an
    earlier step does not change), TimeLimit.truncated and terminal_observation added."""
    sv = pytest.importorskip("stable_baselines3.common.vec_env")
    import vecenv.sb3 as vsb3

    built = []
    info_dicts = InfoColumns.info_dicts

    def counting(self: InfoColumns) -> list[dict]:
        out = info_dicts(self)
        built.extend(out)
        return out

    monkeypatch.setattr(InfoColumns, "info_dicts", counting)
    n = 4
    fns = [lambda i=i: ScalarInfoEnv(i) for i in range(n)]
    theirs, ours = sv.DummyVecEnv(fns), vsb3.SubprocVecEnv(fns, start_method="fork")
    try:
        assert_same(ours.reset(), theirs.reset())
        kept: list = []
        for t in range(12):
            actions = np.array([(t + i) % 3 for i in range(n)])
            a, b = ours.step(actions), theirs.step(actions)
            assert_same(a[:3], b[:3], f"step {t}")
            for i, (mine, their) in enumerate(zip(a[3], b[3], strict=True)):
                assert_exact(mine, their, f"step {t} env {i}")
            assert len({id(info) for info in a[3]}) == n
            kept.append((a[3], [dict(info) for info in a[3]]))
        for infos, snapshot in kept:
            assert infos == snapshot  # later steps wrote other values into the same rows
        assert len(built) >= 8 * n  # most steps came as columns (episode ends do not)
    finally:
        ours.close()
        theirs.close()


def assert_exact(a: Any, b: Any, path: str) -> None:
    assert type(a) is type(b), f"{path}: {type(a)} != {type(b)}"
    if isinstance(b, dict):
        assert list(a) == list(b), f"{path}: {list(a)} != {list(b)}"
        for key in b:
            assert_exact(a[key], b[key], f"{path}[{key!r}]")
    elif isinstance(b, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), path
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


# ------------------------------------------------------------------ the block itself
def block(n: int = 4) -> tuple[InfoWriter, InfoReader]:
    space = InfoHeavyEnv.observation_space
    memory = memoryview(bytearray(InfoRows.nbytes(space, n)))
    area = InfoRows(space, n, memory, 0)
    return InfoWriter(area.part(0, n), 0), InfoReader(area, [(0, n)])


def put(writer: InfoWriter, entries: list[InfoEntry]) -> Any:
    """One command's reply, as a worker sends it after a reset (entries packed after the loop)."""
    writer.begin()
    return writer.reply(entries, None)


def round_trip(entries: list[InfoEntry]) -> tuple[list[InfoEntry], Any]:
    writer, reader = block()
    reply = put(writer, entries)

    got = reader.take(0, reply if reply is not None else IN_ROWS)
    return sorted(got.entries, key=lambda e: e.index), reply


def test_values_that_cannot_go_in_shared_memory_travel_as_they_were() -> None:
    infos = [
        {"s": "text"}, {"big": 2**70}, {"obj": object}, {"lst": [1, 2]}, {1: "int key"},
        {"sub": gym.utils.seeding.np_random(0)[0]}, {"od": __import__("collections").OrderedDict(a=1)},
        {"objarr": np.array([None, 1], dtype=object)}, {"cplx": np.complex64(1 + 2j)},
    ]
    entries = [InfoEntry(0, info) for info in infos]
    for entry in entries:
        got, reply = round_trip([entry])
        assert reply is not None and list(reply.entries) == [entry], entry.info
        assert got[0].info is entry.info


def test_packed_values_come_back_with_their_types() -> None:
    info = {"f": 1.25, "i": -(2**63), "b": False, "f32": np.float32(0.1), "f16": np.float16(2.5),
            "u64": np.uint64(2**64 - 1), "nb": np.bool_(True), "nan": float("nan"), "neg0": -0.0,
            "a": np.arange(4, dtype=">i4").reshape(2, 2), "empty": np.zeros((0, 3)),
            "d": {"x": 1, "y": {"z": np.int8(-3)}}}
    got, reply = round_trip([InfoEntry(2, info)])
    assert reply is not None and not reply.entries and reply.schemas  # new schema, value in block
    assert_exact_nan(got[0].info, info)
    assert fits_row(info) and not fits_row({"s": "x"})
    assert not fits_row({"huge": np.zeros(10_000)})


def assert_exact_nan(a: Any, b: Any) -> None:
    assert type(a) is type(b) and (list(a) == list(b) if isinstance(b, dict) else True)
    if isinstance(b, dict):
        for key in b:
            assert_exact_nan(a[key], b[key])
    elif isinstance(b, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b) and a.flags.writeable
    elif b != b:
        assert a != a
    else:
        assert a == b and str(a) == str(b)


def test_a_known_schema_needs_no_message_and_columns_batch_by_key() -> None:
    writer, reader = block()
    entries = [InfoEntry(i, {"x": float(i), "n": np.int16(i)}) for i in range(4)]
    first = put(writer, entries)
    assert first is not None and len(first.schemas) == 1
    reader.take(0, first)
    assert put(writer, entries) is None  # the same keys and types: all in shared memory

    columns = reader.take(0, IN_ROWS).entries
    assert isinstance(columns, InfoColumns) and columns.envs.tolist() == [0, 1, 2, 3]
    assert [e.info for e in columns] == [e.info for e in entries]
    assert all(type(e.info["n"]) is np.int16 for e in columns)


def test_why_not_shared_names_each_key_and_the_reason() -> None:

    info = {"ok": 1.0, "s": "text", "sub": {"big": 2**70, "fine": np.int8(1)}, 3: 1.0,
            "objs": np.array([None], dtype=object)}
    found = why_not_shared(info)
    assert set(found) == {"['s']", "['sub']['big']", "[3]", "['objs']"}
    assert "str" in found["['s']"] and "int64" in found["['sub']['big']"] and "object array" in found["['objs']"]
    assert why_not_shared({"ok": 1.0, "a": np.zeros(4)}) == {}
    assert list(why_not_shared({"a": np.zeros(1000)})) == [""]


@pytest.mark.timeout(120)
def test_vecenv_check_says_which_infos_leave_shared_memory() -> None:
    from vecenv.check import check_env

    report = check_env(InfoHeavyEnv, num_envs=2, steps=30, backends=["serial"], spawn=False)
    [line] = [f.message for f in report.findings if "travel pickled" in f.message]
    assert "info['msg']: a str" in line
    quiet = check_env(lambda: gym.make("CartPole-v1"), num_envs=2, steps=10, backends=["serial"], spawn=False)
    assert not [f for f in quiet.findings if "shared memory" in f.message]  # CartPole returns no infos


class FlatInfoEnv(gym.Env):
    """Infos of one flat schema, as MuJoCo's (floats) with an int; env 1 now and then adds a
    string (it travels pickled), env 3 numpy floats where the others have Python ones."""

    observation_space = spaces.Box(-10.0, 10.0, (2,), np.float32)
    action_space = spaces.Discrete(3)

    def __init__(self, index: int) -> None:
        self.index, self.t = index, 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {"x": 0.5 * self.index}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.t += 1
        x = np.float32(self.t) if self.index == 3 and self.t % 4 == 0 else float(self.t + self.index)
        info: dict[str, Any] = {"x": x, "n": self.t * 10 + self.index}
        if self.index == 1 and self.t % 5 == 0:
            info["note"] = "text"
        return np.full(2, self.t, np.float32), 1.0, self.t % 7 == 0, False, info


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_the_callers_own_group_batches_with_the_workers_columns_as_gymnasium_does(mode: AutoresetMode) -> None:
    import vecenv

    fns = [lambda i=i: FlatInfoEnv(i) for i in range(5)]
    assert_runs_as_gymnasium(fns, vecenv.ProcessVectorEnv(fns, num_workers=2, inline=True, autoreset_mode=mode), mode)


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED])
def test_info_heavy_env_with_the_callers_own_group_matches_gymnasium(mode: AutoresetMode) -> None:
    import vecenv

    ours = vecenv.ProcessVectorEnv(env_fns(5), num_workers=2, inline=True, autoreset_mode=mode)
    assert_runs_as_gymnasium(env_fns(5), ours, mode)


class FailOnceEnv(FlatInfoEnv):
    """Env 4 (the caller's own group's) fails once, at its third step."""

    failed = False

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        if self.index == 4 and self.t == 2 and not FailOnceEnv.failed:
            FailOnceEnv.failed = True
            raise RuntimeError("env 4 fails once")
        return super().step(action)


def test_the_callers_own_group_rebuilt_after_a_failure_keeps_its_infos() -> None:
    import vecenv

    fns = [lambda i=i: FailOnceEnv(i) for i in range(5)]
    results = []
    for make in (lambda: vecenv.SerialVectorEnv(fns, on_error="restart"),
                 lambda: vecenv.ProcessVectorEnv(fns, num_workers=2, inline=True, on_error="restart")):
        FailOnceEnv.failed = False
        with make() as envs:
            results.append(run(envs, 5))
        assert FailOnceEnv.failed
    serial, inline = results
    assert inline[3][3][4]  # env 4's restart ended its episode as a truncation
    assert_same_runs(inline, serial)


def test_column_chunks_out_of_env_order_batch_by_env() -> None:
    from vecenv.infos import batch_columns, batch_infos, entries_as_columns

    infos = {i: {"x": float(i), "n": i} for i in range(5)}
    dtype = np.dtype([("x", "f8"), ("n", "i8")])

    def chunk(envs: list[int]) -> InfoColumns:
        records = np.array([tuple(infos[i].values()) for i in envs], dtype=dtype)
        return InfoColumns(np.array(envs), ("x", "n"), (float, int), records)

    first = chunk([0, 1, 3])
    joined = entries_as_columns([InfoEntry(i, infos[i]) for i in (2, 4)], first)
    assert joined is not None and joined.envs.tolist() == [2, 4]
    expected = batch_infos([InfoEntry(i, infos[i]) for i in range(5)], 5)
    assert_same_infos(batch_columns([first, joined], 5), expected, "infos")
    assert entries_as_columns([InfoEntry(2, {"x": 1.0, "n": 2**70})], first) is None
    assert entries_as_columns([InfoEntry(2, {"n": 1, "x": 1.0})], first) is None


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_every_workers_infos_taken_at_once_match_gymnasium(mode: AutoresetMode) -> None:
    """Three workers whose infos share one flat schema are read as one chunk over every env (no
    reply taken per worker); steps where an env's schema differs, or a string travels pickled,
    fall back to each worker's reply, and every step's values are gymnasium's."""
    import vecenv

    fns = [lambda i=i: FlatInfoEnv(i) for i in range(6)]
    ours = vecenv.ProcessVectorEnv(fns, num_workers=3, autoreset_mode=mode)
    taken: list = []
    fetch_every = ours._flight.transport.fetch_every

    def counted() -> Any:
        reply = fetch_every()
        taken.append(reply is not None)
        return reply

    ours._flight.transport.fetch_every = counted
    assert_runs_as_gymnasium(fns, ours, mode)
    assert any(taken) and not all(taken), taken  # both ways were taken
