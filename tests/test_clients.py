"""Real client libraries with only the import or call changed: skrl's ``wrap_env`` and RL Zoo3's
``train``. Each test skips, naming the package, where it is not installed.

(RLlib: tests/test_rllib.py; CleanRL's EnvPool edge: tests/test_envpool_gym.py.)
"""

from __future__ import annotations

import csv
import importlib.util
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import vecenv
from helpers import FAST_START, needs_processes

SRC = str(Path(vecenv.__file__).resolve().parents[1])


# ======================================================================= skrl
@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", ["serial", pytest.param("process", marks=needs_processes)])
def test_skrl_wrap_env_auto_takes_vecenv_as_a_gymnasium_vector_env(backend):
    pytest.importorskip("skrl", reason="needs skrl: pip install skrl")
    torch = pytest.importorskip("torch", reason="skrl's torch wrappers need torch")
    from skrl.envs.wrappers.torch import wrap_env

    options = {"context": FAST_START} if backend == "process" else {}
    ours = wrap_env(vecenv.make("CartPole-v1", 4, backend=backend, **options), verbose=False)
    theirs = wrap_env(gym.make_vec("CartPole-v1", 4, vectorization_mode="sync"), verbose=False)
    try:
        assert type(ours).__name__ == type(theirs).__name__ == "GymnasiumWrapper"
        assert ours.num_envs == 4 and ours.observation_space == theirs.observation_space
        torch.manual_seed(0)
        obs, _ = ours.reset()
        expected, _ = theirs.reset()
        assert torch.equal(obs, expected)
        rng = np.random.default_rng(0)
        for _ in range(60):
            actions = torch.as_tensor(rng.integers(0, 2, (4, 1)))
            got, want = ours.step(actions), theirs.step(actions)
            for a, b in zip(got[:4], want[:4], strict=True):
                assert torch.equal(a, b)
    finally:
        ours.close()
        theirs.close()


def test_vecenv_classes_name_gymnasiums_vector_env_among_their_direct_bases():
    """What skrl reads (``__bases__``), while isinstance and the method order stay vecenv's."""
    for cls in (vecenv.SerialVectorEnv, vecenv.SyncVectorEnv, vecenv.ThreadVectorEnv,
                vecenv.ProcessVectorEnv, vecenv.AsyncVectorEnv, vecenv.RayVectorEnv):
        assert gym.vector.VectorEnv in cls.__bases__
        assert cls.__mro__.index(vecenv.VectorEnv) < cls.__mro__.index(gym.vector.VectorEnv)


# ======================================================================= RL Zoo3
def _episodes(folder: Path) -> dict[str, list[list[str]]]:
    """Each monitor file's episodes (reward, length) under ``folder``."""
    out = {}
    for path in sorted(folder.rglob("*.monitor.csv")):
        with path.open() as f:
            rows = list(csv.reader(f))[2:]  # a JSON comment line, then the header
        out[path.name] = [row[:2] for row in rows]
    return out


@pytest.mark.timeout(240)
def test_rl_zoo3_train_on_vecenv_gives_sb3s_episodes(tmp_path):
    if importlib.util.find_spec("rl_zoo3") is None:
        pytest.skip("needs RL Zoo3: pip install rl_zoo3")
    args = ["--algo", "ppo", "--env", "CartPole-v1", "-n", "512", "--seed", "3", "--vec-env", "dummy"]
    env = {"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"}
    for module, folder in (("vecenv.rl_zoo3", "vecenv"), ("rl_zoo3.train", "sb3")):
        subprocess.run([sys.executable, "-m", module, *args, "-f", str(tmp_path / folder)],
                       check=True, env=env, capture_output=True, timeout=200)
    ours, theirs = _episodes(tmp_path / "vecenv"), _episodes(tmp_path / "sb3")
    assert len(ours) == 8 and ours == theirs and all(ours.values())


def test_vecenv_rl_zoo3_names_the_package_it_needs(monkeypatch):
    monkeypatch.setitem(sys.modules, "rl_zoo3", None)  # import fails as if it were not installed
    from vecenv.rl_zoo3 import main

    with pytest.raises(ImportError, match="pip install rl_zoo3"):
        main(["--algo", "ppo"])
