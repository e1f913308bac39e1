"""Running mean and variance of a stream of batches (used by :class:`VecNormalize`)."""

from __future__ import annotations

import numpy as np


class RunningMeanStd:
    """Mean and (population) variance of every sample seen so far, per element of ``shape``.

    Batches are merged with the parallel-variance formula of Chan et al., so statistics of
    several streams can also be combined. ``epsilon`` is the initial pseudo-count, which keeps
    the first update well-defined (starting mean 0, variance 1), as in SB3.
    """

    def __init__(self, epsilon: float = 1e-4, shape: tuple[int, ...] = ()) -> None:
        self.mean = np.zeros(shape, dtype=np.float64)
        self.var = np.ones(shape, dtype=np.float64)
        self.count = epsilon

    def copy(self) -> RunningMeanStd:
        """An independent copy of these statistics."""
        other = RunningMeanStd(shape=self.mean.shape)
        other.mean = self.mean.copy()
        other.var = self.var.copy()
        other.count = float(self.count)
        return other

    def combine(self, other: RunningMeanStd) -> None:
        """Fold another instance's statistics into this one."""
        self.update_from_moments(other.mean, other.var, other.count)

    def update(self, arr: np.ndarray) -> None:
        """Add a batch of samples (first axis is the batch)."""
        arr = np.asarray(arr)
        self.update_from_moments(np.mean(arr, axis=0), np.var(arr, axis=0), arr.shape[0])

    def update_from_moments(
        self, batch_mean: np.ndarray, batch_var: np.ndarray, batch_count: float
    ) -> None:
        """Add a batch given only its mean, variance and size."""
        delta = batch_mean - self.mean
        total = self.count + batch_count
        new_mean = self.mean + delta * batch_count / total
        # Sum of squared deviations of both parts, plus the correction for their mean gap.
        m2 = self.var * self.count + batch_var * batch_count
        m2 = m2 + np.square(delta) * self.count * batch_count / total
        self.mean = new_mean
        self.var = m2 / total
        self.count = total
