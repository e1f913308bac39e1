"""gymnasium's ``module:EnvId`` ids (the module is imported first, where the env is built) in
``vecenv.make``, ``vecenv.envpool.make``, ``vecenv.sb3.make_vec_env`` and the CLI, plus the
CLI's ``--import MODULE`` and its advice for an unknown namespace."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

import vecenv
from vecenv.bench.envs import EnvArgumentError, resolve_env
from vecenv.cli import main

pytest.importorskip("ale_py")

PONG = "ale_py:ALE/Pong-v5"
#: ids this module registers when it is imported (a worker that imports it knows them)
PLAIN_ID, NAMESPACED_ID = "VecenvPluginPlain", "VecenvPluginTest/Plain-v0"


def make_plugin_env(size: int = 3) -> gym.Env:
    """A module-level factory: ``this_module:make_plugin_env`` is a ``module:callable``."""
    from vecenv.bench.envs import BusyEnv

    return BusyEnv(step_cost_us=0, episode_length=10, obs_shape=(size,))


for _id in (PLAIN_ID, NAMESPACED_ID):
    if _id not in gym.registry:
        gym.register(_id, entry_point=make_plugin_env)


def _step_twice(envs: vecenv.VectorEnv) -> np.ndarray:
    with envs:
        obs, _ = envs.reset(seed=0)
        for _ in range(2):
            obs, *_ = envs.step(envs.action_space.sample())
        return obs


# ==================================================================== vecenv.make
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("backend", "kwargs"),
    [("serial", {}), ("process", {"context": "fork"}), ("process", {"context": "spawn"}),
     ("process", {"context": "forkserver"})],
    ids=["serial", "fork", "spawn", "forkserver"],
)
def test_make_takes_module_colon_env_id_on_every_start_method(backend, kwargs):
    envs = vecenv.make(PONG, 2, backend=backend, **kwargs)
    assert envs.spec is not None and envs.spec.id == "ALE/Pong-v5"
    assert _step_twice(envs).shape == (2, 210, 160, 3)


@pytest.mark.timeout(60)
def test_a_spawned_worker_imports_the_module_that_registers_the_id():
    envs = vecenv.make(f"{__name__}:{NAMESPACED_ID}", 2, backend="process", context="spawn")
    assert _step_twice(envs).shape == (2, 3)


def test_make_reports_a_module_that_cannot_be_imported():
    with pytest.raises(ModuleNotFoundError, match="no_such_plugin_xyz"):
        vecenv.make("no_such_plugin_xyz:Env-v0", 2, backend="serial")


# ==================================================================== envpool and SB3
@pytest.mark.timeout(60)
def test_envpool_make_takes_module_colon_env_id():
    from vecenv import envpool

    pool = envpool.make(PONG, env_type="gymnasium", num_envs=2, backend="serial")
    try:
        obs, _ = pool.reset()
        obs, *_ = pool.step(np.zeros(2, dtype=np.int64))
        assert obs.shape == (2, 210, 160, 3)
        assert pool.config["max_episode_steps"] == gym.spec("ALE/Pong-v5").max_episode_steps
    finally:
        pool.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("subproc", [False, True], ids=["dummy", "subproc-spawn"])
def test_sb3_make_vec_env_takes_module_colon_env_id(subproc):
    from vecenv.sb3 import SubprocVecEnv, make_vec_env

    kwargs = dict(vec_env_cls=SubprocVecEnv, vec_env_kwargs={"start_method": "spawn"}) if subproc else {}
    venv = make_vec_env(PONG, 2, seed=0, **kwargs)
    try:
        assert venv.reset().shape == (2, 210, 160, 3)
        obs, *_ = venv.step(np.zeros(2, dtype=np.int64))
        assert obs.shape == (2, 210, 160, 3)
    finally:
        venv.close()


# ==================================================================== telling ids from factories
def test_module_colon_name_is_a_factory_when_the_module_has_that_callable_else_an_id():
    assert resolve_env(f"{__name__}:make_plugin_env").kind == "factory"
    plain = resolve_env(f"{__name__}:{PLAIN_ID}")  # no such attribute: an id the module registers
    assert (plain.kind, plain.gym_id) == ("id", f"{__name__}:{PLAIN_ID}")
    assert plain.env_fn().observation_space.shape == (3,)
    assert resolve_env(PONG).kind == "id"
    with pytest.raises(EnvArgumentError, match="has no attribute 'nope' .*registers no env id 'nope'"):
        resolve_env(f"{__name__}:nope")


def test_imports_travel_with_the_target_to_the_env_factory():
    target = resolve_env("ALE/Pong-v5", imports=["ale_py"])
    assert target.imports == ("ale_py",)
    assert target.env_fn.args[2] == ("ale_py",)  # a spawned worker imports them before gym.make


# ==================================================================== the CLI
@pytest.mark.timeout(120)
def test_cli_check_takes_module_colon_env_id():
    assert main(["check", PONG, "--num-envs", "2", "--steps", "20", "--no-spawn", "--backends", "serial",
                 "-q"]) in (0, 1)


@pytest.mark.timeout(120)
def test_cli_bench_takes_module_colon_env_id(tmp_path):
    out = tmp_path / "run.json"
    code = main(["bench", PONG, "--num-envs", "2", "--seconds", "0.2", "--rounds", "1",
                 "--backends", "serial", "--compare", "gym-sync", "--quiet", "--json", str(out)])
    assert code in (0, 1)
    results = json.loads(out.read_text())["results"]
    assert [(r["env"], r["status"]) for r in results] == [(PONG, "ok"), (PONG, "ok")]


@pytest.mark.timeout(120)
def test_cli_import_option_registers_plugin_ids_even_in_a_spawned_process(capsys):
    # without --no-spawn: the check builds the env in a spawned interpreter, which imports ale_py
    code = main(["check", "ALE/Pong-v5", "--import", "ale_py", "--import", "gymnasium",
                 "--num-envs", "2", "--steps", "10", "--backends", "none", "-q"])
    assert code in (0, 1)
    assert "spawn" not in capsys.readouterr().out  # no problem reported about the spawned build


@pytest.mark.parametrize("command", ["check", "bench"])
def test_cli_unknown_namespace_says_to_import_the_plugin(command, capsys):
    assert main([command, "NoSuchPlugin/Env-v0"]) == 2
    err = capsys.readouterr().err
    assert "unknown env id 'NoSuchPlugin/Env-v0'" in err
    assert "--import MODULE" in err and "MODULE:NoSuchPlugin/Env-v0" in err
    assert "Traceback" not in err


def test_cli_import_of_a_missing_module_is_a_usage_error(capsys):
    assert main(["check", "CartPole-v1", "--import", "no_such_plugin_xyz"]) == 2
    err = capsys.readouterr().err
    assert "--import: cannot import module 'no_such_plugin_xyz'" in err


def test_cli_help_mentions_the_import_option(capsys):
    assert main(["bench", "--help"]) == 0
    assert "--import MODULE" in capsys.readouterr().out
