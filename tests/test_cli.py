"""The ``vecenv`` command: argument errors, a tiny real bench run, and ``vecenv check``."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import threading
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import vecenv
from helpers import needs_processes
from vecenv.cli import main

HERE = __name__  # the module name the factories below are reachable under


# ==================================================================== envs with planted problems
class _Base(gym.Env):
    observation_space = spaces.Box(0.0, 1.0, (3,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.random(3, dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        return self.np_random.random(3, dtype=np.float32), 0.0, False, self.t >= 50, {}


class OutsideSpaceEnv(_Base):
    """Observations leave the declared Box after a few steps."""

    def step(self, action):
        obs, r, term, trunc, info = super().step(action)
        if self.t >= 3:
            obs = obs + np.float32(2.0)
        return obs, r, term, trunc, info


class UnseededResetEnv(_Base):
    """reset() draws from the global numpy generator, not from the seed."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.random.random(3).astype(np.float32), {}


class ChangingInfoEnv(_Base):
    """info['score'] is an int at first and a float later."""

    def step(self, action):
        obs, r, term, trunc, _ = super().step(action)
        return obs, r, term, trunc, {"score": 1 if self.t < 5 else 0.5}


class _LockedFactory:
    """A factory holding a lock: neither pickle nor cloudpickle can send it to a worker."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def __call__(self) -> gym.Env:
        return _Base()


make_unpicklable = _LockedFactory()


def _err(capsys) -> str:
    return capsys.readouterr().err


# ==================================================================== usage errors
@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["bench", "NoSuchEnv-v0"], "unknown env id 'NoSuchEnv-v0'"),
        (["bench", "no_such_module_xyz:make"], "cannot import module 'no_such_module_xyz'"),
        (["bench", "--backends", "warp"], "--backends: unknown backend 'warp'"),
        (["bench", "--num-envs", "2,x"], "--num-envs: expected a comma-separated list of positive integers"),
        (["bench", "--num-envs", "0"], "--num-envs"),
        (["bench", "--steps", "lots"], "argument --steps: invalid int value"),
        (["bench", "--steps", "0"], "--steps: expected an integer > 0"),
        (["bench", "--steps", "10", "--seconds", "1"], "not allowed with argument"),
        (["bench", "--compare", "gym-turbo"], "--compare: unknown peer 'gym-turbo'"),
        (["bench", "--num-envs", "4", "--batch-size", "4"], "--batch-size: 4 must be smaller than every num_envs"),
        (["bench", "--env-kwargs", "{oops"], "--env-kwargs: expected a JSON object"),
        (["bench", "--json", "/no/such/folder/out.json"],
         f"--json: folder {str(Path('/no/such/folder'))!r} does not exist"),
        (["check", "NoSuchEnv-v0"], "unknown env id 'NoSuchEnv-v0'"),
        (["check", "CartPole-v1", "--num-envs", "1"], "--num-envs: expected an integer >= 2"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_bad_usage_exits_2_with_a_message(argv, expected, capsys):
    assert main(argv) == 2
    err = _err(capsys)
    assert expected in err
    assert "error:" in err
    assert "Traceback" not in err


def test_unavailable_backend_is_named(capsys, monkeypatch):
    monkeypatch.setattr(vecenv, "available_backends", lambda: ["serial"])
    assert main(["bench", "--backends", "process"]) == 2
    assert "backend 'process' is not available" in _err(capsys)


def test_no_command_prints_help_and_exits_2(capsys):
    assert main([]) == 2
    assert "bench" in capsys.readouterr().err


def test_help_documents_every_option(capsys):
    assert main(["bench", "--help"]) == 0
    out = capsys.readouterr().out
    for option in ("--num-envs", "--backends", "--steps", "--seconds", "--batch-size", "--compare",
                   "--rounds", "--json", "--plot", "--quiet", "× gym Sync"):
        assert option in out
    assert main(["check", "--help"]) == 0
    assert "exit codes" in capsys.readouterr().out


def test_bench_help_names_every_peer_it_can_run(capsys):
    """--compare's help lists every peer the bench runs, PufferLib's included."""
    from vecenv.bench.contenders import PEERS

    assert main(["bench", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert {"gym-sync", "envpool", "pufferlib-serial", "pufferlib-mp", "pufferlib-async"} <= set(PEERS)
    for name in PEERS:
        assert name in out, name


@pytest.mark.timeout(60)
def test_python_m_vecenv_bench_help():
    proc = subprocess.run(
        [sys.executable, "-m", "vecenv", "bench", "--help"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "--num-envs" in proc.stdout and "--compare" in proc.stdout


# ==================================================================== a tiny real bench run
@pytest.mark.timeout(90)
def test_tiny_bench_run_writes_json_plot_and_table(tmp_path, capsys):
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    argv = ["bench", "CartPole-v1", "--steps", "200", "--rounds", "2", "--num-envs", "2",
            "--backends", "serial", "--compare", "gym-sync", "--json", str(out_json)]
    try:
        import matplotlib  # noqa: F401

        argv += ["--plot", str(out_png)]
        has_mpl = True
    except ImportError:
        has_mpl = False
    assert main(argv) == 0
    captured = capsys.readouterr()

    # the table: header, both contenders, ratios against gym Sync
    assert "× gym Sync" in captured.out and "× gym Async" in captured.out
    assert "vecenv/serial" in captured.out and "gym-sync" in captured.out
    assert "1.00×" in captured.out  # gym-sync against itself
    # progress went to stderr, one line per measurement
    assert "[4/4]" in captured.err

    data = json.loads(out_json.read_text())
    assert data["schema"] == "vecenv-bench/1"
    assert data["settings"]["rounds"] == 2 and data["settings"]["steps"] == 200
    machine = data["machine"]
    assert machine["usable_cores"] >= 1 and machine["python"] and machine["platform"] and machine["cpu_model"]
    assert data["versions"]["gymnasium"] == gym.__version__ and data["versions"]["numpy"] == np.__version__
    assert "stable-baselines3" in data["versions"] and "vecenv" in data["versions"]
    by_name = {r["contender"]: r for r in data["results"]}
    assert set(by_name) == {"vecenv/serial", "gym-sync"}
    serial, sync = by_name["vecenv/serial"], by_name["gym-sync"]
    assert serial["kind"] == "vecenv" and serial["backend"] == "serial" and serial["peer"] is None
    assert sync["kind"] == "peer" and sync["peer"] == "gym-sync" and sync["backend"] is None
    for r in (serial, sync):
        assert r["status"] == "ok" and r["error"] is None
        assert r["env"] == "CartPole-v1" and r["num_envs"] == 2 and r["num_workers"] == 1
        assert len(r["steps_per_s"]) == 2 and all(x > 0 for x in r["steps_per_s"])
        assert r["env_steps"] == [200, 200]  # 100 vector steps of 2 envs
        assert r["median_steps_per_s"] == pytest.approx(float(np.median(r["steps_per_s"])))
        assert r["vs_gym_sync"] > 0
        assert r["vs_gym_async"] is None  # gym-async was not compared
    assert sync["vs_gym_sync"] == pytest.approx(1.0)

    if has_mpl:
        assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert out_png.stat().st_size > 1000


@pytest.mark.timeout(90)
def test_async_batch_mode_runs_send_recv(tmp_path, capsys):
    out_json = tmp_path / "b.json"
    argv = ["bench", "vecenv/VariableBusy-v0", "--env-kwargs", '{"min_cost_us": 0, "max_cost_us": 20}',
            "--steps", "120", "--rounds", "1", "--num-envs", "4", "--batch-size", "2",
            "--backends", "serial", "--compare", "none", "--json", str(out_json), "--quiet"]
    assert main(argv) == 0
    out = capsys.readouterr()
    assert out.err == ""  # --quiet: no progress
    assert "vecenv/serial[b=2]" in out.out
    results = {r["contender"]: r for r in json.loads(out_json.read_text())["results"]}
    batched = results["vecenv/serial[b=2]"]
    assert batched["batch_size"] == 2 and batched["env_steps"] == [120]
    assert batched["steps_per_s"][0] > 0
    assert results["vecenv/serial"]["batch_size"] is None


@pytest.mark.timeout(60)
def test_plot_without_matplotlib_names_the_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    assert main(["bench", "CartPole-v1", "--plot", str(tmp_path / "p.png")]) == 2
    assert "pip install 'vecenv[bench]'" in _err(capsys)


# ==================================================================== vecenv check
@pytest.mark.timeout(60)
def test_check_passes_on_cartpole(tmp_path, capsys):
    out_json = tmp_path / "check.json"
    assert main(["check", "CartPole-v1", "--steps", "50", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "no problems found" in out and "recommended backend:" in out
    data = json.loads(out_json.read_text())
    assert data["schema"] == "vecenv-check/1" and data["problems"] == 0
    assert data["step_us"] > 0 and data["obs_bytes"] == 16
    assert data["recommendation"]["backend"] in vecenv.available_backends()
    assert set(data["backends"]) >= {"serial"}
    assert all(b["error"] is None for b in data["backends"].values())


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("factory", "expected"),
    [
        ("OutsideSpaceEnv", "outside the declared observation space"),
        ("UnseededResetEnv", "two reset(seed=0) calls gave different observations"),
        ("ChangingInfoEnv", "info['score'] is int"),
        ("make_unpicklable", "cannot be pickled"),
    ],
)
def test_check_finds_planted_problem(factory, expected, capsys):
    code = main(["check", f"{HERE}:{factory}", "--steps", "20", "--backends", "serial", "--no-spawn"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "PROBLEM" in out and expected in out
    assert "problem" in out.splitlines()[-1]


@pytest.mark.timeout(60)
def test_check_quiet_prints_only_problems(capsys):
    assert main(["check", f"{HERE}:ChangingInfoEnv", "--steps", "20", "--backends", "none",
                 "--no-spawn", "--quiet"]) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("PROBLEM") and lines[-1] == "1 problem found"


# ==================================================================== the scripts in benchmarks/
BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
TINY_BENCH = ["--steps", "8", "--rounds", "1", "--warmup", "1", "-q"]


def _script(name: str, *args: str, timeout: float = 150) -> subprocess.CompletedProcess:
    """Run ``benchmarks/NAME`` as a user would, in a fresh interpreter."""
    return subprocess.run([sys.executable, str(BENCHMARKS / name), *args], capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.timeout(180)
def test_run_default_writes_the_suite_json_and_plot(tmp_path):
    """benchmarks/run_default.py runs the default suite (cut down here) into --out."""
    done = _script("run_default.py", "--out", str(tmp_path), "--num-envs", "2", "--backends", "serial",
                   "--compare", "gym-sync", *TINY_BENCH)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((tmp_path / "default.json").read_text())
    assert data["schema"] == "vecenv-bench/1"
    assert set(data["settings"]["envs"]) == {"CartPole-v1", "vecenv/Busy-v0"}  # the default suite
    assert {(r["env"], r["contender"]) for r in data["results"]} == {
        (e, c) for e in ("CartPole-v1", "vecenv/Busy-v0") for c in ("vecenv/serial", "gym-sync")
    }
    assert all(r["status"] == "ok" and r["steps_per_s"][0] > 0 for r in data["results"])
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "default.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.timeout(180)
def test_run_async_batch_writes_its_json(tmp_path):
    done = _script("run_async_batch.py", "--out", str(tmp_path), "--backends", "serial",
                   "--compare", "none", *TINY_BENCH)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((tmp_path / "async_batch.json").read_text())
    assert {(r["env"], r["num_envs"], r["batch_size"]) for r in data["results"]} == {
        ("vecenv/VariableBusy-v0", 16, None), ("vecenv/VariableBusy-v0", 16, 8)}


@pytest.mark.timeout(180)
def test_run_envpool_writes_its_json_or_names_what_is_missing(tmp_path):
    done = _script("run_envpool.py", "--out", str(tmp_path), "--num-envs", "2", *TINY_BENCH)
    if importlib.util.find_spec("envpool") is None:
        assert done.returncode == 2 and "envpool is not installed (pip install envpool)" in done.stderr
        assert not (tmp_path / "envpool.json").exists()
        return
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((tmp_path / "envpool.json").read_text())
    assert {r["contender"] for r in data["results"]} >= {"envpool", "gym-sync"}


def _check_script_json(path: Path, script: str, done: subprocess.CompletedProcess) -> dict:
    """What every script's --json holds: its settings, the machine, the versions, and each
    table it printed, every round kept, medians and ratios that follow from the rounds."""
    import statistics

    data = json.loads(path.read_text())
    assert data["schema"] == "vecenv-script/1" and data["script"] == script
    assert data["machine"]["usable_cores"] >= 1 and data["versions"]["gymnasium"] == gym.__version__
    assert data["settings"]["json"] == str(path)
    assert data["tables"]
    for table in data["tables"]:
        assert table["rows"]
        for row in table["rows"]:
            assert row["contender"] in done.stdout  # the figures the script printed
            rounds = row.get("steps_per_s", row.get("us_per_step"))
            assert rounds and all(x > 0 for x in rounds)
            median = row.get("median_steps_per_s", row.get("median_us_per_step"))
            assert median == statistics.median(rounds)
            medians = {r["contender"]: r.get("median_steps_per_s") for r in table["rows"]}
            for base, ratio in row.get("vs", {}).items():
                assert ratio == pytest.approx(median / medians[base])
    return data


@needs_processes
@pytest.mark.timeout(180)
def test_process_bench_writes_every_table_it_prints(tmp_path):
    out = tmp_path / "process_bench.json"
    done = _script("process_bench.py", "--envs", "2", "--steps", "3", "--busy-steps", "2",
                   "--rounds", "2", "--json", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    data = _check_script_json(out, "process_bench.py", done)
    titles = [t["title"] for t in data["tables"]]
    assert len(titles) == 4 and titles[0] == "CartPole-v1, N=2" and "async batches" in titles[-1]
    for title in titles:
        assert f"## {title}" in done.stdout
    rows = {r["contender"]: r for r in data["tables"][0]["rows"]}
    assert set(rows) == {"gym Sync", "gym Async", "vecenv serial", "vecenv process", "vecenv process inline"}
    assert all(len(r["steps_per_s"]) == 2 for r in rows.values())  # every round is kept
    assert rows["gym Sync"]["vs"]["gym Sync"] == 1.0


@pytest.mark.timeout(180)
def test_sb3_bench_writes_every_table_it_prints(tmp_path):
    pytest.importorskip("stable_baselines3")
    out = tmp_path / "sb3.json"
    done = _script("sb3_bench.py", "--envs", "CartPole-v1", "--num-envs", "2", "--rounds", "1",
                   "--seconds", "0.05", "--json", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    data = _check_script_json(out, "sb3_bench.py", done)
    assert [t["env"] for t in data["tables"]] == ["CartPole-v1"]
    assert len(data["tables"][0]["rows"]) == 5


@needs_processes
@pytest.mark.timeout(180)
def test_thread_bench_writes_every_table_it_prints(tmp_path):
    out = tmp_path / "thread.json"
    done = _script("thread_bench.py", "--envs", "2", "--steps", "10", "--repeats", "1",
                   "--only", "cartpole", "--json", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    data = _check_script_json(out, "thread_bench.py", done)
    (table,) = data["tables"]
    assert table["env"] == "cartpole" and table["one_env_step_us"] > 0
    assert [r["contender"] for r in table["rows"]] == ["serial", "thread", "process"]


@pytest.mark.timeout(180)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="os.fork and sched_getaffinity")
def test_protocol_floor_writes_what_it_prints(tmp_path):
    out = tmp_path / "floor.json"
    done = _script("protocol_floor.py", "--envs-per-worker", "1", "--steps", "5", "--rounds", "2",
                   "--json", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    data = _check_script_json(out, "protocol_floor.py", done)
    rows = data["tables"][0]["rows"]
    assert [r["contender"] for r in rows] == ["serial (this process)", "floor: block (pipes)",
                                             "floor: yield (counters)", "floor: inline (counters)",
                                             "vecenv process", "vecenv inline"]
    assert all(len(r["us_per_step"]) == 2 for r in rows)


@pytest.mark.timeout(120)
def test_scaling_script_writes_both_results(tmp_path):
    """benchmarks/run_scaling.py runs its benches (cut down here) and writes their JSON."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "run_scaling.py"
    spec = importlib.util.spec_from_file_location("run_scaling", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    extra = ["--steps", "8", "--rounds", "1", "--warmup", "1", "--backends", "serial", "--compare", "none", "-q"]
    assert script.run(["--out", str(tmp_path), *extra]) == 0
    scaling = json.loads((tmp_path / "scaling.json").read_text())
    cells = {(r["env"], r["num_envs"]) for r in scaling["results"]}
    assert cells == {(e, n) for e in ("CartPole-v1", "vecenv/Busy-v0") for n in (16, 64)}
    for name in ("scaling_async_batch.json", "scaling_async_batch_wait.json"):
        batched = json.loads((tmp_path / name).read_text())
        assert {(r["env"], r["num_envs"], r["batch_size"]) for r in batched["results"]} == {
            ("vecenv/VariableBusy-v0", 48, None),  # every env each step
            ("vecenv/VariableBusy-v0", 48, 16),  # the first 16 ready
        }
        waits = batched["settings"]["env_kwargs"].get("vecenv/VariableBusy-v0", {}).get("wait", False)
        assert waits == name.endswith("_wait.json")


def test_version_prints_on_stdout_and_exits_0(capsys):
    """``vecenv --version`` and ``python -m vecenv --version`` print ``vecenv X.Y.Z``, exit 0."""
    assert main(["--version"]) == 0
    out, err = capsys.readouterr()
    assert out == f"vecenv {vecenv.__version__}\n"
    assert err == ""
    done = subprocess.run([sys.executable, "-m", "vecenv", "--version"], capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"vecenv {vecenv.__version__}\n", "")


@pytest.mark.timeout(120)
def test_thread_ceiling_measures_every_mode_against_serial():
    """benchmarks/thread_ceiling.py (cut down here) steps every mode and prints each one's
    median against serial, serial itself at 1.00x."""
    done = _script("thread_ceiling.py", "--steps", "5", "--rounds", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {line.split()[0]: line for line in done.stdout.splitlines()[1:]}
    assert set(rows) == {"serial", "free", "lockstep", "lockstep-own", "lockstep-event"}
    assert "1.00x serial" in rows["serial"]


@pytest.mark.timeout(120)
def test_thread_step_breakdown_splits_each_step_into_before_parts_and_after():
    """benchmarks/thread_step_breakdown.py (cut down here) times serial and thread steps, splits
    each into the work before the envs, the envs and the work after, and runs the plain threads."""
    done = _script("thread_step_breakdown.py", "--steps", "30", "--rounds", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = {line.split()[0]: line for line in done.stdout.splitlines()[1:] if line.strip()}
    assert {"serial", "thread", "plain"} <= set(lines)
    serial = [float(x) for x in re.findall(r"(\d+\.\d+)", lines["serial"])]
    total, before, envs, per_env, after = serial
    assert 0 < before < total and 0 < after < total and 0 < envs < total
    assert per_env == pytest.approx(envs / 8, rel=0.5)
    assert "x serial): before" in lines["thread"] and "after" in lines["thread"]


@pytest.mark.timeout(120)
def test_shared_objects_times_each_case_alone_and_beside_a_helper():
    """benchmarks/shared_objects.py (cut down here) times every case in your thread alone and
    with a helper doing the same at once, and prints the difference."""
    done = _script("shared_objects.py", "--iterations", "2000", "--repeats", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = done.stdout.splitlines()[1:]
    assert [row[:24].strip() for row in rows] == [
        "numpy rows, shared", "numpy rows, own view", "list item, shared", "list item, own copy",
        "enum member, shared", "enum member, own bool", "shape tuple, shared", "shape tuple, own copy",
        "np.cos call (env code)"]
    for row in rows:
        alone, both = (float(x) for x in re.findall(r"(?:alone|threads)\s+(\d+\.\d+)", row))
        ratio = float(re.search(r"(\d+\.\d+)x\)$", row).group(1))
        assert alone > 0 and both > 0 and ratio == pytest.approx(both / alone, abs=0.02)


@pytest.mark.timeout(180)
def test_free_threading_benchmark_runs_the_plain_thread_ceiling_beside_the_contenders(tmp_path):
    """benchmarks/free_threading.py's idle scenario (cut down here) measures every contender and
    the plain-thread ceiling in the same rounds, and says what share of the ceiling's gain the
    thread backend reached: (thread/serial - 1) / (lockstep/plain serial - 1)."""
    out = tmp_path / "ft.json"
    done = _script("free_threading.py", "--scenario", "idle", "--envs", "CartPole-v1", "--rounds", "1",
                   "--seconds", "0.05", "--warmup", "1", "--json", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {r["contender"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"serial", "thread", "process", "inline", "plain-serial", "plain-free", "plain-lockstep",
                         "ceiling"}
    assert all(rows[k]["steps_per_s"] > 0 for k in rows if k != "ceiling")
    assert rows["ceiling"]["ceiling_x"] > 0 and len(rows["ceiling"]["rounds"]) == 1
    assert "ceiling: plain threads" in done.stdout

    spec = importlib.util.spec_from_file_location("free_threading", BENCHMARKS / "free_threading.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    reached = script._reached({"serial": [100.0, 100.0], "thread": [130.0, 100.0],
                               "plain-serial": [200.0, 200.0], "plain-lockstep": [300.0, 202.0]})
    assert reached["rounds"][0] == pytest.approx(0.6)  # 30% gain of a 50% ceiling
    assert reached["rounds"][1] != reached["rounds"][1]  # a round with no ceiling to reach: NaN
    assert reached["share"] == pytest.approx(0.6)
