"""Every program in examples/ runs to the end in its ``--smoke`` mode (``slow``: each trains a
policy in a fresh interpreter; ``pytest -m "not slow"`` skips them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

# example -> (modules it needs, a line its output must contain)
CASES = {
    "cleanrl_ppo.py": (["torch"], "cleanrl_ppo: done"),
    "sb3_ppo.py": (["torch", "stable_baselines3"], "sb3_ppo: trained"),
    "envpool_async.py": (["torch"], "envpool_async: done"),
    "async_batches.py": (["torch"], "async_batches: first-ready batches reached"),
    "ppo_atari.py": (["torch", "ale_py", "cv2"], "ppo_atari: done"),
    "ppo_mujoco.py": (["torch", "mujoco"], "ppo_mujoco: done"),
    # a short CartPole run on vecenv.Collector: the example prints "return rose" only if it did
    "ppo_collector.py": (["torch"], "ppo_collector: done, return rose"),
    "rllib_ppo.py": (["torch", "ray.rllib"], "rllib_ppo: done"),
    "pettingzoo_pistonball_sb3.py": (["torch", "stable_baselines3", "pettingzoo", "pymunk", "supersuit"],
                                     "pettingzoo_pistonball_sb3: trained"),
}

#: examples whose --smoke run takes more than ~10 s (they train until the return rises)
SLOW = {"ppo_collector.py"}


def test_every_example_is_tested():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(CASES)


# generous: two busy cores, and the simulator examples import torch, a simulator and workers
@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in sorted(CASES)])
def test_example_smoke(name):
    needs, expected = CASES[name]
    for module in needs:
        pytest.importorskip(module, exc_type=ImportError)  # ray.rllib fails on its own deps
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, str(EXAMPLES / name), "--smoke"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=220)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{name} --smoke exited {proc.returncode}:\n{output[-4000:]}"
    assert expected in proc.stdout, f"{name} --smoke did not print {expected!r}:\n{output[-4000:]}"
