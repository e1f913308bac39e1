"""Helpers of ``benchmarks/run_shared.py``: contenders (the envs, the vector envs, the policy) and
load (the busy process and the children)."""
