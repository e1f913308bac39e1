"""Helpers of ``benchmarks/run_shared.py`` (vecenv on a machine that is not idle).

- :mod:`shared_bench.targets`: the envs ("targets") and how each library builds them,
- :mod:`shared_bench.contenders`: the vector envs compared, built from a name,
- :mod:`shared_bench.policy`: CleanRL's Atari CNN on one torch thread,
- :mod:`shared_bench.load`: the busy process and the two-runs children (never left behind),
- :mod:`shared_bench.scenarios`: one measurement, interleaved rounds, the four scenarios,
- :mod:`shared_bench.report`: tables on stdout and the JSON file.
"""
