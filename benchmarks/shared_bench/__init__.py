"""Helpers of ``benchmarks/run_shared.py``: targets (the envs), contenders (the vector envs),
policy (CleanRL's Atari CNN), load (the busy process and the children), scenarios, report."""
