"""Benchmarking envs: the code behind ``vecenv bench`` (``vecenv check`` is :mod:`vecenv.check`).

- :mod:`vecenv.bench.envs`: the standard benchmark envs (:class:`BusyEnv`, registered as
  ``vecenv/Busy-v0``; :class:`VariableBusyEnv`, ``vecenv/VariableBusy-v0``).
- :mod:`vecenv.bench.contenders`: vecenv's backends and the peer libraries, behind one driver.
- :mod:`vecenv.bench.runner`: measuring (:func:`run_bench`, :func:`measure`).
- :mod:`vecenv.bench.report`: progress, table, JSON and plot (rich and matplotlib optional).
"""

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
