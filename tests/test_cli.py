"""The ``vecenv`` command: argument errors, a tiny real bench run, and ``vecenv check`` (the
scripts in benchmarks/: test_benchmark_scripts.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import vecenv
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


def test_version_prints_on_stdout_and_exits_0(capsys):
    """``vecenv --version`` and ``python -m vecenv --version`` print ``vecenv X.Y.Z``, exit 0."""
    assert main(["--version"]) == 0
    out, err = capsys.readouterr()
    assert out == f"vecenv {vecenv.__version__}\n"
    assert err == ""
    done = subprocess.run([sys.executable, "-m", "vecenv", "--version"], capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"vecenv {vecenv.__version__}\n", "")
