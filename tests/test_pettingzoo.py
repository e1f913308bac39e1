"""vecenv.pettingzoo against a plain loop over ParallelEnvs (tests/pz_envs.py's Reference), on
every backend and start method: observations, rewards, flags, masks and final observations."""

from __future__ import annotations

import sys
from functools import partial

import numpy as np
import pytest

pytest.importorskip("pettingzoo", reason="vecenv.pettingzoo needs pettingzoo (pip install 'vecenv[pettingzoo]')")

import vecenv  # noqa: E402
import vecenv.pettingzoo as vpz  # noqa: E402
from helpers import use_backend  # noqa: E402
from pz_envs import DictObsEnv, DyingEnv, MixedSpacesEnv, Reference  # noqa: E402
from vecenv.pettingzoo.game import import_pettingzoo  # noqa: E402

#: (backend, keywords): serial, threads, and processes started by fork and by spawn
LAYOUTS = {
    "serial": ("serial", {}),
    "thread": ("thread", {"num_workers": 2}),
    "fork": ("process", {"num_workers": 2, "context": "fork"}),
    "spawn": ("process", {"num_workers": 2, "context": "spawn"}),
    "ray": ("ray", {"num_workers": 2}),
}


def _mpe():
    mpe2 = pytest.importorskip("mpe2", reason="the MPE2 games need mpe2 (pip install mpe2)")
    from mpe2 import simple_spread_v3

    del mpe2
    return partial(simple_spread_v3.parallel_env, N=2, max_cycles=4)


def _pistonball():
    pytest.importorskip("pymunk", reason="pistonball needs pettingzoo[butterfly] (pip install 'pettingzoo[butterfly]')")
    from pettingzoo.butterfly import pistonball_v6

    return partial(pistonball_v6.parallel_env, n_pistons=3, continuous=True, max_cycles=4)


def _check(record: dict, obs, rewards=None, terms=None, truncs=None, infos=None, where: str = "") -> None:
    np.testing.assert_array_equal(obs, record["obs"], err_msg=f"obs {where}")
    if rewards is not None:
        np.testing.assert_array_equal(rewards, record["reward"], err_msg=f"rewards {where}")
        np.testing.assert_array_equal(terms, record["terminated"], err_msg=f"terminated {where}")
        np.testing.assert_array_equal(truncs, record["truncated"], err_msg=f"truncated {where}")
        np.testing.assert_array_equal(infos["game_ended"], record["game_ended"], err_msg=f"game_ended {where}")
    np.testing.assert_array_equal(infos["active"], record["active"], err_msg=f"active {where}")
    final = np.flatnonzero(infos.get("_final_obs", np.zeros(len(obs), bool))).tolist()
    assert final == sorted(record.get("final_obs", {})), f"final_obs rows {where}"
    for r in final:
        np.testing.assert_array_equal(infos["final_obs"][r], record["final_obs"][r], err_msg=f"final_obs {where}")


def _run(env_fn, layout: str, steps: int, mode: str = "next_step", reset_when: str = "all",
         num_games: int = 2) -> None:
    """Step vecenv and the reference side by side with the same random actions."""
    backend, kwargs = LAYOUTS[layout]
    ref = Reference(env_fn, num_games, mode, reset_when)
    with vpz.make(env_fn, num_games, backend=backend, autoreset_mode=mode, reset_when=reset_when,
                  **kwargs) as envs:
        assert envs.num_envs == num_games * len(ref.agents)
        envs.action_space.seed(1)
        obs, infos = envs.reset(seed=7)
        _check(ref.reset(7), obs, infos=infos, where="after reset")
        for t in range(steps):
            actions = envs.action_space.sample()
            obs, rewards, terms, truncs, infos = envs.step(actions)
            _check(ref.step(actions), obs, rewards, terms, truncs, infos, where=f"at step {t}")
            if mode == "disabled" and infos["game_ended"].any():
                obs, infos = envs.reset(options={"reset_mask": infos["game_ended"]})
                _check(ref.reset_ended(), obs, infos=infos, where=f"after the reset at step {t}")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_agents_that_come_and_go_match_the_reference(layout, request):
    use_backend(request, LAYOUTS[layout][0])  # skips where the backend cannot run, says why
    _run(DyingEnv, layout, steps=14)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
@pytest.mark.parametrize("reset_when", ["all", "any"])
def test_every_autoreset_mode_and_reset_rule_matches_the_reference(mode, reset_when):
    _run(DyingEnv, "serial", steps=14, mode=mode, reset_when=reset_when, num_games=3)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["same_step", "disabled"])
def test_modes_match_the_reference_in_worker_processes(mode):
    _run(DyingEnv, "fork", steps=10, mode=mode, reset_when="any")


#: the games below on the local backends (Ray's is tested above, on the quick game)
LOCAL = ["serial", "thread", "fork", "spawn"]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("layout", LOCAL)
def test_mpe2_matches_the_reference(layout):
    _run(_mpe(), layout, steps=6)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("layout", LOCAL)
def test_pistonball_matches_the_reference(layout):
    _run(_pistonball(), layout, steps=6)


@pytest.mark.timeout(30)
def test_a_leaving_agent_keeps_its_last_reward_then_is_a_zero_row():
    probe = DyingEnv()
    seed = next(s for s in range(100) if probe.reset(seed=s) and probe.ends["a"] < max(probe.ends.values()))
    leaves = probe.ends["a"]
    with vpz.make(DyingEnv, 1, backend="serial") as envs:
        envs.reset(seed=seed)
        for t in range(1, leaves + 2):
            obs, rewards, terms, truncs, infos = envs.step(np.ones(3, dtype=np.int64))
            assert not infos["game_ended"].any()
            if t == leaves:  # a's last step: terminated, with its last reward
                assert terms[0] and not truncs[0] and rewards[0] == 10.0 and infos["active"][0]
        # then a zero row, marked inactive, while b or c play on
        assert not infos["active"][0] and rewards[0] == 0 and not terms[0] and not obs[0].any()
        assert infos["active"][1:].any()


@pytest.mark.timeout(30)
def test_rows_name_their_agent_and_game_and_carry_the_agents_infos():
    with vpz.make(DyingEnv, 2, backend="serial") as envs:
        _, infos = envs.reset(seed=0)
        assert infos["agent"].tolist() == ["a", "b", "c"] * 2
        assert infos["game"].tolist() == [0, 0, 0, 1, 1, 1]
        _, _, _, _, infos = envs.step(np.zeros(6, dtype=np.int64))
        assert infos["_t"].tolist() == [True, False, False, True, False, False]  # a, on odd steps
        assert infos["t"][0] == 1


@pytest.mark.timeout(60)
def test_dict_observations_are_a_dict_of_rows():
    with vpz.make(DictObsEnv, 2, backend="process", num_workers=2, context="fork") as envs:
        obs, infos = envs.reset(seed=0)
        assert obs["t"].shape == (6,) and obs["x"].shape == (6, 1)
        for _ in range(3):
            obs, *_, infos = envs.step(np.zeros(6, dtype=np.int64))
        assert (obs["x"][~infos["active"]] == 0).all()  # absent agents: zero rows
        assert (obs["x"][infos["active"]] > 0).all() and obs["t"].dtype == np.int64


@pytest.mark.timeout(30)
def test_game_g_gets_seed_plus_g():
    with vpz.make(DyingEnv, 2, backend="serial", seed=5) as envs:
        obs, _ = envs.reset()
    alone = DyingEnv()
    first, _ = alone.reset(seed=6)
    np.testing.assert_array_equal(obs[3], first["a"])


@pytest.mark.timeout(60)
def test_a_worker_that_dies_mid_game_is_reported_not_a_hang():
    with vpz.make(partial(DyingEnv, die_at=3), 2, backend="process", num_workers=2,
                  context="fork") as envs:
        envs.reset(seed=0)
        with pytest.raises(vecenv.WorkerDiedError):
            for _ in range(5):
                envs.step(np.zeros(6, dtype=np.int64))


@pytest.mark.timeout(30)
def test_agents_with_different_spaces_are_refused_naming_them_and_the_padding():
    with pytest.raises(ValueError, match=r"observation spaces differ: 'a' has .*'c' has .*pad_observations_v0"):
        vpz.make(MixedSpacesEnv, 1, backend="serial")


@pytest.mark.timeout(30)
def test_bad_arguments_are_refused_clearly():
    with pytest.raises(ValueError, match="reset_when must be one of"):
        vpz.make(DyingEnv, 1, backend="serial", reset_when="some")
    with pytest.raises(ValueError, match="batch_size=1 is not supported"):
        vpz.make(DyingEnv, 2, backend="serial", batch_size=1)
    with pytest.raises(ValueError, match="on_error='restart' is not supported"):
        vpz.make(DyingEnv, 2, backend="serial", on_error="restart")
    with vpz.make(DyingEnv, 2, backend="serial") as envs:
        envs.reset(seed=0)
        with pytest.raises(ValueError, match=r"one action per row: 6 \(2 games x 3 agents\)"):
            envs.step(np.zeros(3, dtype=np.int64))
        with pytest.raises(ValueError, match=r"reset_mask must be a bool array of shape \(6,\)"):
            envs.reset(options={"reset_mask": np.ones(2, bool)})


@pytest.mark.timeout(30)
def test_an_aec_env_is_converted():
    from pettingzoo.utils.conversions import parallel_to_aec

    with vpz.make(lambda: parallel_to_aec(DyingEnv()), 1, backend="serial") as envs:
        obs, infos = envs.reset(seed=0)
        assert obs.shape == (3, 2) and infos["active"].tolist() == [True, True, False]


@pytest.mark.timeout(30)
def test_vecenv_make_points_a_pettingzoo_env_to_vecenv_pettingzoo():
    with pytest.raises(TypeError, match=r"vecenv\.pettingzoo\.make"):
        vecenv.make(DyingEnv, 1, backend="serial")


def test_without_pettingzoo_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pettingzoo", None)
    with pytest.raises(ImportError, match=r"vecenv\[pettingzoo\]"):
        import_pettingzoo()
