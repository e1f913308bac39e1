"""Benchmarking envs: the code behind ``vecenv bench`` (the benchmark envs, the contenders,
measuring, and reporting; ``vecenv check`` is :mod:`vecenv.check`)."""

from vecenv.bench.contenders import Contender, peer_contender, vecenv_contender
from vecenv.bench.envs import BUSY_ID, VARIABLE_BUSY_ID, BusyEnv, VariableBusyEnv, resolve_env
from vecenv.bench.runner import DEFAULT_SUITE, BenchConfig, BenchRun, measure, run_bench

__all__ = [
    "BUSY_ID",
    "DEFAULT_SUITE",
    "VARIABLE_BUSY_ID",
    "BenchConfig",
    "BenchRun",
    "BusyEnv",
    "Contender",
    "VariableBusyEnv",
    "measure",
    "peer_contender",
    "resolve_env",
    "run_bench",
    "vecenv_contender",
]
