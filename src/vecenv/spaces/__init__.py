"""Spaces layer: batch buffers for any Gymnasium space."""

from vecenv.spaces.buffers import BatchBuffer, Leaf, StepBuffers, is_fixed_leaf

__all__ = ["BatchBuffer", "Leaf", "StepBuffers", "is_fixed_leaf"]
