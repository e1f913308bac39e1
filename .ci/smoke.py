"""Smoke test of an installed vecenv wheel, run by .ci/run with a fresh venv's python from outside
the checkout: the package imports from site-packages, its three APIs step CartPole, its console
script runs, and its metadata carries the version and the license.

Usage: ``cd SOMEWHERE_ELSE && VENV/bin/python /path/to/.ci/smoke.py``
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import sysconfig
from pathlib import Path

import gymnasium as gym
import numpy as np

import vecenv
import vecenv.envpool
import vecenv.sb3

CHECKOUT = Path(__file__).resolve().parents[1]
SEEDS = [3, 4, 5, 6]


def check_installed() -> None:
    """vecenv comes from this interpreter's site-packages, not from the checkout."""
    where = Path(vecenv.__file__).resolve()
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    assert where.is_relative_to(site), f"vecenv imported from {where}, not from {site}"
    assert not where.is_relative_to(CHECKOUT), f"vecenv imported from the checkout: {where}"
    assert Path.cwd().resolve() != CHECKOUT, "run the smoke test from outside the checkout"


def check_metadata() -> None:
    """The installed metadata names the version in vecenv.__version__ and the MIT license."""
    meta = importlib.metadata.metadata("vecenv")
    assert meta["Version"] == vecenv.__version__, (meta["Version"], vecenv.__version__)
    license_ = meta.get("License-Expression") or meta.get("License") or ""
    assert "MIT" in license_, f"no MIT license in the metadata: {license_!r}"
    files = [str(f) for f in importlib.metadata.files("vecenv") or []]
    assert any(f.endswith("LICENSE") for f in files), "LICENSE is not in the wheel"
    assert any(f.endswith("vecenv/py.typed") for f in files), "py.typed is not in the wheel"


def check_process_matches_gymnasium(steps: int = 50) -> None:
    """ProcessVectorEnv (spawn) gives gymnasium SyncVectorEnv's observations and rewards."""
    fns = [lambda: gym.make("CartPole-v1") for _ in SEEDS]
    ours = vecenv.ProcessVectorEnv(fns, num_workers=2, context="spawn")
    theirs = gym.vector.SyncVectorEnv(fns)
    try:
        obs, _ = ours.reset(seed=SEEDS)
        ref, _ = theirs.reset(seed=SEEDS)
        np.testing.assert_array_equal(obs, ref)
        rng = np.random.default_rng(0)
        ended = 0
        for _ in range(steps):
            actions = rng.integers(0, 2, size=len(SEEDS))
            obs, rew, term, trunc, _ = ours.step(actions)
            ref, ref_rew, ref_term, ref_trunc, _ = theirs.step(actions)
            np.testing.assert_array_equal(obs, ref)
            np.testing.assert_array_equal(rew, ref_rew)
            np.testing.assert_array_equal(term, ref_term)
            np.testing.assert_array_equal(trunc, ref_trunc)
            ended += int(np.sum(term | trunc))
        assert ended > 0, "no episode ended: autoreset was not exercised"
    finally:
        ours.close()
        theirs.close()


def check_sb3_api(steps: int = 10) -> None:
    """vecenv.sb3's DummyVecEnv and SubprocVecEnv (no SB3, no torch) step alike under a seed."""
    fns = [lambda: gym.make("CartPole-v1") for _ in range(2)]
    dummy = vecenv.sb3.DummyVecEnv(fns)
    subproc = vecenv.sb3.SubprocVecEnv(fns, start_method="spawn")
    try:
        dummy.seed(0)
        subproc.seed(0)
        np.testing.assert_array_equal(dummy.reset(), subproc.reset())
        for _ in range(steps):
            actions = np.array([dummy.action_space.sample() for _ in range(2)])
            obs, rew, done, infos = dummy.step(actions)
            sobs, srew, sdone, sinfos = subproc.step(actions)
            np.testing.assert_array_equal(obs, sobs)
            np.testing.assert_array_equal(rew, srew)
            np.testing.assert_array_equal(done, sdone)
            assert obs.shape == (2, 4) and len(infos) == len(sinfos) == 2
    finally:
        dummy.close()
        subproc.close()


def check_envpool_api(steps: int = 10) -> None:
    """vecenv.envpool.make gives EnvPool's gymnasium-style API."""
    envs = vecenv.envpool.make("CartPole-v1", env_type="gymnasium", num_envs=2)
    try:
        obs, info = envs.reset()
        assert obs.shape == (2, 4), obs.shape
        for _ in range(steps):
            obs, rew, term, trunc, info = envs.step(np.zeros(2, dtype=np.int64))
            assert obs.shape == (2, 4) and rew.shape == (2,)
            assert list(info["env_id"]) == [0, 1], info["env_id"]
    finally:
        envs.close()


def check_console_script() -> None:
    """The venv's ``vecenv`` script: --version, and check (0 or 1: findings, never usage errors)."""
    script = Path(sys.executable).parent / "vecenv"
    assert script.exists(), f"no console script at {script}"
    done = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert done.stdout == f"vecenv {vecenv.__version__}\n", done.stdout
    done = subprocess.run([str(script), "check", "CartPole-v1", "--quiet"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode in (0, 1), (done.returncode, done.stdout[-2000:], done.stderr[-2000:])


def main() -> None:
    checks = [check_installed, check_metadata, check_process_matches_gymnasium, check_sb3_api,
              check_envpool_api, check_console_script]
    for check in checks:
        check()
        print(f"smoke: {check.__name__}: ok", flush=True)
    print(f"smoke: vecenv {vecenv.__version__} from {Path(vecenv.__file__).parent}: ok")


if __name__ == "__main__":
    main()
